//! Classic-BPF building blocks for the seccomp filters: an assembler with forward
//! labels, and a binary search over syscall numbers.
//!
//! Why a search and not a chain of comparisons: when a filter is installed, the kernel
//! runs it for every syscall number of every ABI to find the calls it always allows (the
//! seccomp action cache, Linux 5.11). A chain makes that walk as long as the chain for
//! each allowed call, so installing cost grew with the filter: about 1.8 µs per
//! comparison on the development machine, 0.2 ms per sandboxed command for chitti's
//! filters. A search reaches any answer in a handful of instructions.

use seccompiler::sock_filter;

pub const LD_W_ABS: u16 = 0x20;
pub const JEQ_K: u16 = 0x15;
pub const JGE_K: u16 = 0x35;
pub const JSET_K: u16 = 0x45;
pub const AND_K: u16 = 0x54;
pub const JA: u16 = 0x05;
pub const RET_K: u16 = 0x06;

/// Offsets into `struct seccomp_data`.
pub const OFFSET_NR: u32 = 0;
pub const OFFSET_ARCH: u32 = 4;
/// The low half of argument `i` on a little-endian machine (every architecture chitti
/// has a filter for).
pub const fn offset_arg_low(i: u8) -> u32 {
    16 + 8 * i as u32
}

/// A position in the program, bound once; jumps may only go forward (a BPF rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

enum Item {
    Insn(sock_filter),
    /// A conditional jump: `jt` when the comparison holds, else `jf`.
    Cond {
        code: u16,
        k: u32,
        jt: Label,
        jf: Label,
    },
    Goto(Label),
    Bind(Label),
}

#[derive(Default)]
pub struct Asm {
    items: Vec<Item>,
    labels: usize,
}

impl Asm {
    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    /// The next instruction is `label`.
    pub fn bind(&mut self, label: Label) {
        self.items.push(Item::Bind(label));
    }

    pub fn load(&mut self, offset: u32) {
        self.raw(sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: offset,
        });
    }

    pub fn ret(&mut self, action: u32) {
        self.raw(sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: action,
        });
    }

    /// `acc &= k`.
    pub fn and(&mut self, k: u32) {
        self.raw(sock_filter {
            code: AND_K,
            jt: 0,
            jf: 0,
            k,
        });
    }

    pub fn jump(&mut self, code: u16, k: u32, jt: Label, jf: Label) {
        self.items.push(Item::Cond { code, k, jt, jf });
    }

    pub fn goto(&mut self, label: Label) {
        self.items.push(Item::Goto(label));
    }

    /// An instruction as is; a sequence of them keeps its own relative jumps.
    pub fn raw(&mut self, insn: sock_filter) {
        self.items.push(Item::Insn(insn));
    }

    /// Resolves the labels. Fails if one is unbound, behind its jump, or (for a
    /// conditional jump) more than 255 instructions ahead.
    pub fn finish(self) -> Result<Vec<sock_filter>, String> {
        let mut at = vec![None; self.labels];
        let mut pc = 0usize;
        for item in &self.items {
            match item {
                Item::Bind(l) => at[l.0] = Some(pc),
                _ => pc += 1,
            }
        }
        let offset = |from: usize, to: Label, max: usize| -> Result<usize, String> {
            let target = at[to.0].ok_or("a BPF label was never bound")?;
            match target.checked_sub(from + 1) {
                Some(off) if off <= max => Ok(off),
                Some(off) => Err(format!("a BPF jump of {off} instructions is too long")),
                None => Err("a BPF jump goes backwards".into()),
            }
        };
        let mut out = Vec::with_capacity(pc);
        for item in self.items {
            let here = out.len();
            match item {
                Item::Bind(_) => {}
                Item::Insn(insn) => out.push(insn),
                Item::Cond { code, k, jt, jf } => out.push(sock_filter {
                    code,
                    jt: offset(here, jt, 255)? as u8,
                    jf: offset(here, jf, 255)? as u8,
                    k,
                }),
                Item::Goto(to) => out.push(sock_filter {
                    code: JA,
                    jt: 0,
                    jf: 0,
                    k: offset(here, to, u32::MAX as usize)? as u32,
                }),
            }
        }
        Ok(out)
    }

    /// With the syscall number in the accumulator: jumps to the label paired with it in
    /// `table` (sorted by number, without duplicates), to `other` if it is not there, by
    /// binary search. Neighbouring numbers with the same label are one range (`mount`
    /// through `reboot`, the nine io_uring and mount-API calls), so the search compares
    /// only where answers change: one `jge` per change, each jumping straight to its
    /// answer, and no instruction per number.
    pub fn dispatch(&mut self, table: &[(u32, Label)], other: Label) {
        // Where each answer begins, from 0 up, covering every number.
        let mut starts: Vec<(u32, Label)> = Vec::new();
        let begin = |starts: &mut Vec<(u32, Label)>, at: u32, label: Label| {
            if starts.last().map(|&(_, l)| l) != Some(label) {
                starts.push((at, label));
            }
        };
        // Every number below `end` has its answer (`None`: every number does).
        let mut end = Some(0u32);
        for &(nr, label) in table {
            if let Some(end) = end.filter(|end| nr > *end) {
                begin(&mut starts, end, other);
            }
            begin(&mut starts, nr, label);
            end = nr.checked_add(1);
        }
        if let Some(end) = end {
            begin(&mut starts, end, other);
        }
        if starts.len() == 1 {
            self.goto(starts[0].1);
        } else {
            self.search(&starts);
        }
    }

    /// The search over `starts` (at least two), from here.
    fn search(&mut self, starts: &[(u32, Label)]) {
        let (low, high) = starts.split_at(starts.len() / 2);
        let mut entry = |part: &[(u32, Label)]| match part {
            [(_, only)] => *only,
            _ => self.label(),
        };
        let (to_low, to_high) = (entry(low), entry(high));
        self.jump(JGE_K, high[0].0, to_high, to_low);
        for (part, label) in [(low, to_low), (high, to_high)] {
            if part.len() > 1 {
                self.bind(label);
                self.search(part);
            }
        }
    }
}

/// A classic-BPF interpreter for the instructions seccomp filters use, for tests:
/// returns the verdict and how many instructions ran.
#[cfg(test)]
pub fn run(program: &[sock_filter], data: &[u32; 16]) -> (u32, usize) {
    let (mut pc, mut acc, mut x, mut steps) = (0usize, 0u32, 0u32, 0usize);
    let mut mem = [0u32; 16];
    loop {
        let i = &program[pc];
        pc += 1;
        steps += 1;
        let jump = |cond: bool| if cond { i.jt } else { i.jf } as usize;
        match i.code {
            LD_W_ABS => acc = data[i.k as usize / 4],
            0x60 => acc = mem[i.k as usize], // ld M[k]
            0x61 => x = mem[i.k as usize],   // ldx M[k]
            0x02 => mem[i.k as usize] = acc, // st M[k]
            0x03 => mem[i.k as usize] = x,   // stx M[k]
            AND_K => acc &= i.k,
            0x5c => acc &= x, // and x
            0x87 => acc = x,  // txa
            0x07 => x = acc,  // tax
            JA => pc += i.k as usize,
            JEQ_K => pc += jump(acc == i.k),
            JGE_K => pc += jump(acc >= i.k),
            0x25 => pc += jump(acc > i.k), // jgt #k
            JSET_K => pc += jump(acc & i.k != 0),
            0x1d => pc += jump(acc == x), // jeq x
            RET_K => return (i.k, steps),
            other => panic!("instruction {other:#x} is not interpreted"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(arch: u32, nr: u32) -> [u32; 16] {
        let mut d = [0u32; 16];
        d[0] = nr;
        d[1] = arch;
        d
    }

    #[test]
    fn dispatch_finds_each_number_s_label_in_few_steps() {
        for len in [0usize, 1, 2, 3, 4, 7, 20, 64, 100] {
            let mut asm = Asm::default();
            let other = asm.label();
            // Three outcomes, assigned round-robin, so that neighbours differ.
            let outcomes = [asm.label(), asm.label(), asm.label()];
            let table: Vec<(u32, Label)> = (0..len)
                .map(|i| (i as u32 * 3 + 1, outcomes[i % 3]))
                .collect();
            asm.load(OFFSET_NR);
            asm.dispatch(&table, other);
            asm.bind(other);
            asm.ret(0);
            for (i, outcome) in outcomes.into_iter().enumerate() {
                asm.bind(outcome);
                asm.ret(i as u32 + 1);
            }
            let program = asm.finish().unwrap();
            let depth = (usize::BITS - len.leading_zeros()) as usize;
            for nr in 0..400 {
                let (verdict, steps) = run(&program, &data(0, nr));
                let expected = table
                    .iter()
                    .position(|(n, _)| *n == nr)
                    .map_or(0, |i| i as u32 % 3 + 1);
                assert_eq!(verdict, expected, "{len} numbers, nr {nr}");
                assert!(steps <= depth + 5, "{steps} steps for {len} numbers");
            }
        }
    }

    /// Runs of neighbouring numbers with one answer, numbers at both ends of the range,
    /// and runs that touch: each number still finds its own answer.
    #[test]
    fn dispatch_answers_ranges_and_the_ends_of_the_number_space() {
        let mut asm = Asm::default();
        let other = asm.label();
        let [a, b] = [asm.label(), asm.label()];
        let table: Vec<(u32, Label)> = [0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 20, u32::MAX - 1, u32::MAX]
            .into_iter()
            .zip([a, a, b, a, a, a, b, b, a, a, b, b, a])
            .collect();
        asm.load(OFFSET_NR);
        asm.dispatch(&table, other);
        asm.bind(other);
        asm.ret(0);
        asm.bind(a);
        asm.ret(1);
        asm.bind(b);
        asm.ret(2);
        let program = asm.finish().unwrap();
        let answer = |nr: u32| match table.iter().find(|(n, _)| *n == nr) {
            Some((_, l)) if *l == a => 1,
            Some(_) => 2,
            None => 0,
        };
        for nr in (0..40).chain([u32::MAX - 2, u32::MAX - 1, u32::MAX]) {
            assert_eq!(run(&program, &data(0, nr)).0, answer(nr), "nr {nr}");
        }
        // One comparison per change of answer, none per number.
        let changes = 10;
        assert_eq!(program.len(), 1 + changes + 3, "{program:?}");
    }

    #[test]
    fn bad_jumps_are_errors() {
        let mut asm = Asm::default();
        let never = asm.label();
        asm.goto(never);
        assert!(asm.finish().is_err(), "unbound");

        let mut asm = Asm::default();
        let back = asm.label();
        asm.bind(back);
        asm.ret(0);
        asm.goto(back);
        assert!(asm.finish().is_err(), "backwards");

        let mut asm = Asm::default();
        let far = asm.label();
        asm.jump(JEQ_K, 1, far, far);
        for _ in 0..256 {
            asm.ret(0);
        }
        asm.bind(far);
        asm.ret(0);
        assert!(asm.finish().is_err(), "too far for a conditional jump");
    }
}
