//! The seccomp filter shared by both Linux backends.
//!
//! One program, because every installed filter costs the kernel a conversion, a JIT
//! compilation and a pass over every syscall number (the action cache), and runs on
//! each ruled call. It checks the architecture (another ABI, such as i386 `int 0x80`,
//! kills the process; on x86_64 so do x32 syscall numbers, which the architecture check
//! alone lets through), then finds the syscall number by binary search among the calls
//! it has an answer for: EPERM whatever the arguments, ENOSYS, or a look at the
//! arguments. Every other call is allowed in a few instructions (see `bpf.rs` for why
//! that matters).
//!
//! The argument rules are emitted here too, a few instructions per rule (a bit test
//! where seccompiler needs one rule per bit), because installing costs about 0.17 µs per
//! instruction on top of a fixed ~13 µs: with seccompiler's code for them the program
//! was 548 instructions, now about 200. seccompiler stays the reference the tests check
//! every answer against.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::bpf::{offset_arg_low, Asm, Label, JEQ_K, JSET_K, OFFSET_ARCH, OFFSET_NR};

use seccompiler::{BpfProgram, TargetArch};

#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter: {0}")]
pub struct SeccompError(String);

#[cfg(target_arch = "x86_64")]
const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(target_arch = "aarch64")]
const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
#[cfg(target_arch = "riscv64")]
const ARCH: Option<TargetArch> = Some(TargetArch::riscv64);
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
const ARCH: Option<TargetArch> = None;

pub fn arch_supported() -> bool {
    ARCH.is_some()
}

/// Syscalls that no sandboxed command needs and that open a way out or into the kernel.
fn always_denied() -> Vec<i64> {
    let mut v = vec![
        // Other processes' memory.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_process_madvise,
        libc::SYS_pidfd_getfd,
        // io_uring performs socket and file operations that seccomp cannot see.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // Mounts and namespaces.
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fsconfig,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        // Kernel keyrings, BPF, tracing, page-fault handling: large attack surface.
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_fanotify_init,
        // Kernel images, modules, and the machine itself.
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_quotactl,
        // File handles bypass path-based checks.
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_kexec_file_load, libc::SYS_iopl, libc::SYS_ioperm]);
    v.sort_unstable();
    v.dedup();
    v
}

/// A test on one syscall argument. Only its low 32 bits are read: every argument the
/// rules look at is an int, a mode or flags whose upper half the kernel ignores (clone
/// keeps only the low half of its flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Test {
    Eq(u32),
    Ne(u32),
    /// At least one bit of the mask is set.
    AnyBitOf(u32),
    /// `(arg & mask) == value`.
    MaskedEq {
        mask: u32,
        value: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Check {
    arg: u8,
    test: Test,
}

/// Denies the call when every check holds.
type Rule = Vec<Check>;

fn check(arg: u8, test: Test) -> Check {
    Check { arg, test }
}

fn xattr_writes() -> Vec<i64> {
    vec![
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
    ]
}

fn sysv_ipc() -> Vec<i64> {
    vec![
        libc::SYS_shmget,
        libc::SYS_shmat,
        libc::SYS_shmctl,
        libc::SYS_shmdt,
        libc::SYS_msgget,
        libc::SYS_msgsnd,
        libc::SYS_msgrcv,
        libc::SYS_msgctl,
        libc::SYS_semget,
        libc::SYS_semop,
        libc::SYS_semctl,
        libc::SYS_semtimedop,
    ]
}

/// `(syscall, index of its mode argument)` for calls that set a file mode.
fn mode_setting_calls() -> Vec<(i64, u8)> {
    let mut v = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([(libc::SYS_chmod, 1), (libc::SYS_mknod, 1)]);
    v.push((FCHMODAT2, 2));
    v
}

/// ioprio_set's "which": all processes of a user (linux/ioprio.h).
const IOPRIO_WHO_USER: u32 = 3;

/// fchmodat2 (Linux 6.6) has the same number on every architecture.
const FCHMODAT2: i64 = 452;

/// Calls answered with EPERM for some of their arguments.
#[allow(clippy::unnecessary_cast)] // ioctl request types differ between libcs
fn deny_rules(network: bool, shares_host: bool) -> BTreeMap<i64, Vec<Rule>> {
    use Test::*;
    let mut rules: BTreeMap<i64, Vec<Rule>> = BTreeMap::new();
    if shares_host {
        // Without IPC and PID namespaces (landlock) the host's POSIX message queues and
        // processes are reachable by name or id (SysV IPC: see `plainly_denied`).
        rules.insert(
            libc::SYS_mq_open,
            vec![vec![check(1, AnyBitOf(libc::O_CREAT as u32))]],
        );
        for (nr, arg) in [
            (libc::SYS_prlimit64, 0u8),
            (libc::SYS_setpriority, 1),
            (libc::SYS_sched_setaffinity, 0),
            (libc::SYS_sched_setscheduler, 0),
            (libc::SYS_sched_setparam, 0),
            (libc::SYS_sched_setattr, 0),
            (libc::SYS_ioprio_set, 1),
            (libc::SYS_migrate_pages, 0),
            (libc::SYS_move_pages, 0),
        ] {
            // Only the caller itself (pid/who 0) may be targeted.
            rules.insert(nr, vec![vec![check(arg, Ne(0))]]);
        }
        // ... except where 0 means "every process of my uid", host ones included.
        for (nr, which_user) in [
            (libc::SYS_setpriority, libc::PRIO_USER as u32),
            (libc::SYS_ioprio_set, IOPRIO_WHO_USER),
        ] {
            rules
                .get_mut(&nr)
                .expect("inserted above")
                .push(vec![check(0, Eq(which_user))]);
        }
        // Without a PID namespace the call's processes are one process group, which the
        // supervisor kills at once (see `pretended`). A signal to a whole group (pid 0 or
        // negative, or -1: every process it may signal) could only reach that group, the
        // call itself: `timeout`, which believes it made a group of its own, would kill
        // the call's shell with it. (Not a boundary: SIGIO aimed at a group through
        // fcntl(F_SETOWN) still reaches it; it is the call's own.)
        rules.insert(
            libc::SYS_kill,
            vec![vec![check(0, Eq(0))], vec![check(0, AnyBitOf(1 << 31))]],
        );
    }

    // Terminal input injection: TIOCSTI pushes bytes into a terminal's input queue,
    // TIOCLINUX can do the same on a virtual console. ioctl numbers are 32-bit.
    rules.insert(
        libc::SYS_ioctl,
        vec![
            vec![check(1, Eq(libc::TIOCSTI as u32))],
            vec![check(1, Eq(libc::TIOCLINUX as u32))],
        ],
    );

    // clone() with a namespace flag would undo the isolation; clone3 is refused with
    // ENOSYS (its flags sit behind a pointer), so libc falls back here.
    let ns_flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWUSER
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    rules.insert(
        libc::SYS_clone,
        vec![vec![check(0, AnyBitOf(ns_flags as u32))]],
    );

    // No setuid/setgid files and no world-writable modes: a setuid-root file in the
    // workspace, or a world-writable host file, is a way up for anyone on the host.
    let dangerous_bits = (libc::S_ISUID | libc::S_ISGID | libc::S_IWOTH) as u32;
    for (nr, arg) in mode_setting_calls() {
        rules.insert(nr, vec![vec![check(arg, AnyBitOf(dangerous_bits))]]);
    }
    // The same bits through file creation (the mode only counts with O_CREAT).
    let setid_bits = (libc::S_ISUID | libc::S_ISGID) as u32;
    let creating_opens: Vec<(i64, u8, u8)> = {
        let mut v = vec![(libc::SYS_openat, 2, 3)];
        #[cfg(target_arch = "x86_64")]
        v.push((libc::SYS_open, 1, 2));
        v
    };
    for (nr, flags_arg, mode_arg) in creating_opens {
        rules.insert(
            nr,
            vec![vec![
                check(flags_arg, AnyBitOf(libc::O_CREAT as u32)),
                check(mode_arg, AnyBitOf(setid_bits)),
            ]],
        );
    }
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_creat, vec![vec![check(1, AnyBitOf(setid_bits))]]);

    let unix = libc::AF_UNIX as u32;
    // Unix datagram (and other non-stream) socket pairs can address any host socket per
    // message (sendto/sendmsg with a path or abstract name), whatever the network setting.
    // The type's low four bits are the type; the rest are SOCK_NONBLOCK and SOCK_CLOEXEC.
    let unix_non_stream: Vec<Rule> = [
        libc::SOCK_DGRAM,
        libc::SOCK_RAW,
        libc::SOCK_RDM,
        libc::SOCK_DCCP,
        10, // SOCK_PACKET
    ]
    .iter()
    .map(|&ty| {
        let ty = MaskedEq {
            mask: 0xf,
            value: ty as u32,
        };
        vec![check(0, Eq(unix)), check(1, ty)]
    })
    .collect();
    if network {
        // Network on means the internet, not the host's unix sockets (docker.sock, the
        // X server, ssh-agent): no socket(AF_UNIX) at all; stream socketpairs stay.
        rules.insert(libc::SYS_socket, vec![vec![check(0, Eq(unix))]]);
        rules.insert(libc::SYS_socketpair, unix_non_stream);
    } else {
        // Only AF_UNIX stream/seqpacket sockets, and no connect/bind/listen, which reach
        // or squat host pathname and abstract sockets. socketpair() keeps working.
        let mut socket_rules = vec![vec![check(0, Ne(unix))]];
        socket_rules.extend(unix_non_stream);
        // connect/bind/listen are in `plainly_denied`.
        rules.insert(libc::SYS_socket, socket_rules.clone());
        rules.insert(libc::SYS_socketpair, socket_rules);
    }
    rules
}

/// Calls answered with ENOSYS, so that libc falls back to a call the filter checks.
fn enosys_calls() -> Vec<i64> {
    // clone3 and openat2 take their flags through a pointer that seccomp cannot read.
    vec![libc::SYS_clone3, libc::SYS_openat2]
}

/// Calls answered with success that do nothing. Without a PID namespace nothing but a
/// kill the kernel makes at once ends a family of processes that forks as fast as it can
/// (a walk of `/proc` loses that race): the command leads a process group, no process of
/// the call may leave it, and one kill(-group) reaches every one, none forking past it.
/// A new session or group is pretended rather than refused: the tools that ask for one
/// (`setsid CMD`, Python's `start_new_session`, a test runner's group per test) still
/// run, in the call's group; signals to a group are refused (see `deny_rules`).
fn pretended(shares_host: bool) -> Vec<i64> {
    if shares_host {
        vec![libc::SYS_setsid, libc::SYS_setpgid]
    } else {
        Vec::new()
    }
}

/// Calls refused with EPERM whatever their arguments.
fn plainly_denied(network: bool, shares_host: bool) -> Vec<i64> {
    let mut v = always_denied();
    // Extended attributes are metadata Landlock cannot confine; nothing ordinary needs to
    // set them (cp -a treats the refusal as an unsupported filesystem).
    v.extend(xattr_writes());
    if shares_host {
        // Without an IPC namespace (landlock) the host's SysV IPC objects are reachable.
        v.extend(sysv_ipc());
    }
    if !network {
        // connect/bind/listen reach or squat host pathname and abstract unix sockets
        // (the only sockets left without network); socketpair() keeps working.
        v.extend([libc::SYS_connect, libc::SYS_bind, libc::SYS_listen]);
    }
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xc000_00f3;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
const AUDIT_ARCH: u32 = 0;

const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
/// The call returns 0 without being made (an errno of 0).
const RET_PRETEND: u32 = libc::SECCOMP_RET_ERRNO;

/// What the filter does with a syscall it has an answer for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answer {
    Eperm,
    Enosys,
    Pretend,
    LookAtArguments,
}

/// The whole policy as one program: the architecture check, x32 numbers killed on
/// x86_64, then a binary search for the syscall number among the calls with an
/// [`Answer`]; every other call is allowed there. Calls with argument rules continue
/// into the code for their rules (shared by calls with the same rules), which allows
/// what no rule matches.
fn filter(network: bool, shares_host: bool) -> Result<BpfProgram, SeccompError> {
    let rules = deny_rules(network, shares_host);
    let mut answers: BTreeMap<u32, Answer> = BTreeMap::new();
    let lists = [
        (plainly_denied(network, shares_host), Answer::Eperm),
        (enosys_calls(), Answer::Enosys),
        (pretended(shares_host), Answer::Pretend),
        (rules.keys().copied().collect(), Answer::LookAtArguments),
    ];
    for (numbers, answer) in lists {
        for nr in numbers {
            if let Some(other) = answers.insert(nr as u32, answer) {
                return Err(SeccompError(format!(
                    "syscall {nr} is both {other:?} and {answer:?}"
                )));
            }
        }
    }

    let mut asm = Asm::default();
    let [allow, eperm, enosys, pretend, kill] = [(); 5].map(|()| asm.label());
    // One block of argument checks per distinct list of rules.
    let mut blocks: BTreeMap<&Vec<Rule>, Label> = BTreeMap::new();
    for list in rules.values() {
        blocks.entry(list).or_insert_with(|| asm.label());
    }
    let native = asm.label();
    asm.load(OFFSET_ARCH);
    asm.jump(JEQ_K, AUDIT_ARCH, native, kill);
    asm.bind(native);
    asm.load(OFFSET_NR);
    #[cfg(target_arch = "x86_64")]
    {
        let plain = asm.label();
        asm.jump(super::bpf::JGE_K, 0x4000_0000, kill, plain);
        asm.bind(plain);
    }
    let table: Vec<(u32, Label)> = answers
        .into_iter()
        .map(|(nr, answer)| {
            let target = match answer {
                Answer::Eperm => eperm,
                Answer::Enosys => enosys,
                Answer::Pretend => pretend,
                Answer::LookAtArguments => blocks[&rules[&(nr as i64)]],
            };
            (nr, target)
        })
        .collect();
    asm.dispatch(&table, allow);
    // The argument checks come before the returns they end in (jumps only go forward),
    // so that every block shares the four returns instead of ending in its own.
    for (list, label) in blocks {
        asm.bind(label);
        emit_rules(&mut asm, list, allow, eperm);
    }
    asm.bind(allow);
    asm.ret(libc::SECCOMP_RET_ALLOW);
    asm.bind(eperm);
    asm.ret(RET_EPERM);
    asm.bind(enosys);
    asm.ret(RET_ENOSYS);
    if !pretended(shares_host).is_empty() {
        asm.bind(pretend);
        asm.ret(RET_PRETEND);
    }
    asm.bind(kill);
    asm.ret(libc::SECCOMP_RET_KILL_PROCESS);
    asm.finish().map_err(SeccompError)
}

/// Checks the rules in turn: to `eperm` as soon as every check of one holds, else on to
/// the next rule, and to `allow` after the last.
fn emit_rules(asm: &mut Asm, rules: &[Rule], allow: Label, eperm: Label) {
    for (i, rule) in rules.iter().enumerate() {
        let next_rule = if i + 1 == rules.len() {
            allow
        } else {
            asm.label()
        };
        if rule.is_empty() {
            // No check: the rule always holds.
            asm.goto(eperm);
        }
        for (j, check) in rule.iter().enumerate() {
            let holds = if j + 1 == rule.len() {
                eperm
            } else {
                asm.label()
            };
            asm.load(offset_arg_low(check.arg));
            match check.test {
                Test::Eq(v) => asm.jump(JEQ_K, v, holds, next_rule),
                Test::Ne(v) => asm.jump(JEQ_K, v, next_rule, holds),
                Test::AnyBitOf(mask) => asm.jump(JSET_K, mask, holds, next_rule),
                Test::MaskedEq { mask, value } => {
                    asm.and(mask);
                    asm.jump(JEQ_K, value, holds, next_rule);
                }
            }
            if holds != eperm {
                asm.bind(holds);
            }
        }
        if next_rule != allow {
            asm.bind(next_rule);
        }
    }
    if rules.is_empty() {
        asm.goto(allow);
    }
}

fn setting_index(network: bool, shares_host: bool) -> usize {
    usize::from(network) * 2 + usize::from(shares_host)
}

/// What [`filter`] builds on x86_64 for each setting (at [`setting_index`]),
/// as [`to_bytes`] writes it: building it cost some 45 µs of every one-shot sandboxed call.
/// The test `precompiled_programs_are_what_filter_builds` keeps them current
/// (`CHITTI_UPDATE_GOLDEN=1 cargo test precompiled_programs` rewrites them).
#[cfg(target_arch = "x86_64")]
const PRECOMPILED: [&[u8]; 4] = [
    include_bytes!("../golden/seccomp-x86_64-0.bpf"),
    include_bytes!("../golden/seccomp-x86_64-1.bpf"),
    include_bytes!("../golden/seccomp-x86_64-2.bpf"),
    include_bytes!("../golden/seccomp-x86_64-3.bpf"),
];

/// The filter the sandbox installs. `shares_host` is true for backends without IPC and
/// PID namespaces (landlock). Made once per process: a long-lived session (chat, mcp)
/// installs the same program on every call.
pub fn program(network: bool, shares_host: bool) -> Result<&'static BpfProgram, SeccompError> {
    static BUILT: [OnceLock<Result<BpfProgram, String>>; 4] = [const { OnceLock::new() }; 4];
    let index = setting_index(network, shares_host);
    BUILT[index]
        .get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if let Some(program) = from_bytes(PRECOMPILED[index]) {
                return Ok(program);
            }
            if !arch_supported() {
                return Err(format!(
                    "no seccomp filter for the {} architecture",
                    std::env::consts::ARCH
                ));
            }
            filter(network, shares_host).map_err(|e| e.0)
        })
        .as_ref()
        .map_err(|e| SeccompError(e.clone()))
}

/// The raw `struct sock_filter` array bubblewrap reads from `--add-seccomp-fd`.
pub fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

/// The program [`to_bytes`] wrote, or None if `bytes` is not whole instructions.
pub fn from_bytes(bytes: &[u8]) -> Option<BpfProgram> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(8) {
        return None;
    }
    let program = bytes
        .chunks_exact(8)
        .map(|b| seccompiler::sock_filter {
            code: u16::from_ne_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        })
        .collect();
    Some(program)
}

/// A one-line summary for `chitti sandbox profile` and `doctor`.
pub fn summary(network: bool) -> String {
    let net = if network {
        "socket(AF_UNIX) denied, socketpair stream/seqpacket only"
    } else {
        "socket() only AF_UNIX stream/seqpacket; connect/bind/listen denied"
    };
    format!(
        "{} syscalls denied (ptrace, process_vm_*, io_uring_*, mount/namespace calls, keyrings, \
         bpf, perf_event_open, userfaultfd, kexec, modules, handles); ioctl TIOCSTI/TIOCLINUX \
         denied; clone with namespace flags denied; clone3/openat2 -> ENOSYS; setuid/setgid \
         and world-writable modes denied; {net}; foreign ABIs killed",
        always_denied().len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::linux::bpf;
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
        SeccompFilter, SeccompRule,
    };

    const SETTINGS: [(bool, bool); 4] =
        [(false, false), (true, false), (false, true), (true, true)];
    const I386: u32 = 0x4000_0003;
    use super::{RET_ENOSYS as ENOSYS, RET_EPERM as EPERM};

    /// The programs shipped precompiled are the ones `filter` builds now: every other
    /// test here checks `program`, which takes them.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn precompiled_programs_are_what_filter_builds() {
        for (network, shares_host) in SETTINGS {
            let index = setting_index(network, shares_host);
            crate::golden::check(
                &format!("src/sandbox/golden/seccomp-x86_64-{index}.bpf"),
                PRECOMPILED[index],
                &to_bytes(&filter(network, shares_host).unwrap()),
                &format!("the program filter({network}, {shares_host}) builds"),
                "precompiled_programs",
            );
        }
        // And they read back as the instructions they were written from.
        assert_eq!(
            from_bytes(PRECOMPILED[setting_index(false, true)]).unwrap(),
            filter(false, true).unwrap()
        );
    }

    #[test]
    fn the_program_builds_for_every_setting() {
        for (network, shares_host) in SETTINGS {
            let p = program(network, shares_host).unwrap();
            assert!(!p.is_empty());
            assert_eq!(to_bytes(p).len(), p.len() * 8);
        }
    }

    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u32; 16] {
        let mut d = [0u32; 16];
        d[0] = nr;
        d[1] = arch;
        for (i, a) in args.iter().enumerate() {
            d[4 + 2 * i] = *a as u32;
            d[5 + 2 * i] = (*a >> 32) as u32;
        }
        d
    }

    fn run(program: &BpfProgram, arch: u32, nr: u32) -> u32 {
        bpf::run(program, &data(arch, nr, [0; 6])).0
    }

    #[test]
    fn the_answers_the_policy_promises() {
        for (network, shares_host) in SETTINGS {
            let p = program(network, shares_host).unwrap();
            let answer = |nr: i64| run(p, AUDIT_ARCH, nr as u32);
            assert_eq!(answer(libc::SYS_read), libc::SECCOMP_RET_ALLOW);
            assert_eq!(answer(libc::SYS_ptrace), EPERM);
            assert_eq!(answer(libc::SYS_clone3), ENOSYS);
            assert_eq!(answer(libc::SYS_openat2), ENOSYS);
            let socket_calls = [libc::SYS_connect, libc::SYS_bind, libc::SYS_listen];
            for nr in socket_calls {
                let expected = if network {
                    libc::SECCOMP_RET_ALLOW
                } else {
                    EPERM
                };
                assert_eq!(answer(nr), expected, "syscall {nr}, network {network}");
            }
            let expected = if shares_host {
                EPERM
            } else {
                libc::SECCOMP_RET_ALLOW
            };
            assert_eq!(answer(libc::SYS_shmget), expected);
            // No way out of the call's process group without a PID namespace: a new one
            // is pretended.
            let group = if shares_host {
                RET_PRETEND
            } else {
                libc::SECCOMP_RET_ALLOW
            };
            assert_eq!(answer(libc::SYS_setsid), group);
            assert_eq!(answer(libc::SYS_setpgid), group);
            assert_eq!(
                run(p, I386, libc::SYS_read as u32),
                libc::SECCOMP_RET_KILL_PROCESS,
                "another ABI (i386)"
            );
            #[cfg(target_arch = "x86_64")]
            for nr in [libc::SYS_read, libc::SYS_ptrace, libc::SYS_ioctl] {
                assert_eq!(
                    run(p, AUDIT_ARCH, 0x4000_0000 | nr as u32),
                    libc::SECCOMP_RET_KILL_PROCESS,
                    "x32 number of syscall {nr}"
                );
            }
        }
    }

    #[test]
    #[allow(clippy::unnecessary_cast)] // ioctl request types differ between libcs
    fn the_argument_answers_the_policy_promises() {
        for (network, shares_host) in SETTINGS {
            let p = program(network, shares_host).unwrap();
            let answer =
                |nr: i64, args: [u64; 6]| bpf::run(p, &data(AUDIT_ARCH, nr as u32, args)).0;
            let allow = libc::SECCOMP_RET_ALLOW;
            let tiocsti = libc::TIOCSTI as u64;
            assert_eq!(answer(libc::SYS_ioctl, [1, tiocsti, 0, 0, 0, 0]), EPERM);
            assert_eq!(
                answer(libc::SYS_ioctl, [1, libc::TCGETS as u64, 0, 0, 0, 0]),
                allow
            );
            for flag in [libc::CLONE_NEWUSER, libc::CLONE_NEWNS, libc::CLONE_NEWNET] {
                let flags = (flag | libc::SIGCHLD) as u64;
                assert_eq!(answer(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]), EPERM);
            }
            let fork_like = (libc::CLONE_CHILD_SETTID | libc::SIGCHLD) as u64;
            assert_eq!(answer(libc::SYS_clone, [fork_like, 0, 0, 0, 0, 0]), allow);
            for (mode, expected) in [
                (0o4755, EPERM),
                (0o2755, EPERM),
                (0o777, EPERM),
                (0o755, allow),
            ] {
                assert_eq!(
                    answer(libc::SYS_fchmod, [3, mode, 0, 0, 0, 0]),
                    expected,
                    "{mode:o}"
                );
            }
            let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
            assert_eq!(answer(libc::SYS_openat, [0, 0, creat, 0o4755, 0, 0]), EPERM);
            assert_eq!(answer(libc::SYS_openat, [0, 0, creat, 0o644, 0, 0]), allow);
            assert_eq!(
                answer(
                    libc::SYS_openat,
                    [0, 0, libc::O_RDONLY as u64, 0o4755, 0, 0]
                ),
                allow
            );
            let (unix, inet) = (libc::AF_UNIX as u64, libc::AF_INET as u64);
            let (stream, dgram) = (libc::SOCK_STREAM as u64, libc::SOCK_DGRAM as u64);
            let cloexec = libc::SOCK_CLOEXEC as u64;
            assert_eq!(
                answer(libc::SYS_socketpair, [unix, dgram | cloexec, 0, 0, 0, 0]),
                EPERM
            );
            assert_eq!(
                answer(libc::SYS_socketpair, [unix, stream | cloexec, 0, 0, 0, 0]),
                allow
            );
            let inet_socket = answer(libc::SYS_socket, [inet, stream, 0, 0, 0, 0]);
            let unix_socket = answer(libc::SYS_socket, [unix, stream, 0, 0, 0, 0]);
            if network {
                assert_eq!((inet_socket, unix_socket), (allow, EPERM));
            } else {
                assert_eq!((inet_socket, unix_socket), (EPERM, allow));
            }
            let other_process = answer(libc::SYS_prlimit64, [1, 0, 0, 0, 0, 0]);
            assert_eq!(other_process, if shares_host { EPERM } else { allow });
            assert_eq!(answer(libc::SYS_prlimit64, [0, 0, 0, 0, 0, 0]), allow);
            // Signals to a group (0: one's own; -1: every process; -N: group N) only
            // where a PID namespace holds the call; to a process, always.
            let to_a_group = if shares_host { EPERM } else { allow };
            let term = libc::SIGTERM as u64;
            for pid in [0, u64::MAX, (-4242i64) as u64, 0xffff_efae] {
                assert_eq!(answer(libc::SYS_kill, [pid, term, 0, 0, 0, 0]), to_a_group);
            }
            for pid in [1, 4242, 0x7fff_ffff, 0xffff_ffff_0000_1092] {
                assert_eq!(answer(libc::SYS_kill, [pid, term, 0, 0, 0, 0]), allow);
            }
        }
    }

    /// Argument values that the rules look at, and some they do not.
    #[allow(clippy::unnecessary_cast)] // ioctl request types differ between libcs
    fn interesting_args() -> Vec<u64> {
        let mut v = vec![0, 1, 2, u64::MAX, 0xffff_ffff, 0x1_0000_0000];
        // Process ids: the largest, and negative ones (a process group) as the kernel
        // reads an int, whatever the upper half.
        v.extend([0x7fff_ffff, 0x8000_0000, (-4242i64) as u64, 0xffff_efae]);
        v.extend([libc::TIOCSTI, libc::TIOCLINUX].map(|x| x as u64));
        v.extend([libc::AF_UNIX, libc::AF_INET, libc::AF_INET6].map(|x| x as u64));
        v.extend(
            [
                libc::SOCK_STREAM,
                libc::SOCK_DGRAM,
                libc::SOCK_SEQPACKET,
                libc::SOCK_RAW,
            ]
            .map(|x| x as u64),
        );
        v.extend([libc::O_CREAT, libc::O_CREAT | libc::O_WRONLY].map(|x| x as u64));
        v.extend(
            [
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
                libc::SOCK_RDM,
                libc::SOCK_DCCP,
                10, // SOCK_PACKET
            ]
            .map(|x| x as u64),
        );
        let modes = [libc::S_ISUID, libc::S_ISGID, libc::S_IWOTH, libc::S_IWGRP];
        v.extend(modes.map(|x| x as u64));
        v.extend([0o755, 0o4755, 0o2775, 0o777, 0o644].map(|x| x as u64));
        v.extend(
            [
                libc::CLONE_NEWNS,
                libc::CLONE_NEWUSER,
                libc::CLONE_NEWPID,
                libc::CLONE_NEWNET,
                libc::CLONE_NEWIPC,
                libc::CLONE_NEWUTS,
                libc::CLONE_NEWCGROUP,
                libc::CLONE_NEWTIME,
                libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::SIGCHLD,
                libc::SIGCHLD,
            ]
            .map(|x| x as u64),
        );
        // The upper half is ignored by the kernel for these arguments, and by the filter.
        v.push(0x1_0000_0000 | libc::TIOCSTI as u64);
        v.push(0xffff_ffff_0000_0000);
        v
    }

    /// What the kernel answers when several filters are installed: the most severe
    /// action wins (KILL_PROCESS is the smallest as a signed number, ALLOW the largest);
    /// between equal actions, the filter installed last.
    fn stacked_verdict(programs: &[BpfProgram], d: &[u32; 16]) -> u32 {
        let action = |ret: u32| (ret & libc::SECCOMP_RET_ACTION_FULL) as i32;
        let mut verdict = libc::SECCOMP_RET_ALLOW;
        for p in programs.iter().rev() {
            let ret = bpf::run(p, d).0;
            if action(ret) < action(verdict) {
                verdict = ret;
            }
        }
        verdict
    }

    /// A rule as seccompiler rules: one per combination of the bits its `AnyBitOf`
    /// checks accept (seccompiler can only ask for all bits of a mask).
    fn seccompiler_rules(rule: &Rule) -> Vec<SeccompRule> {
        let mut alternatives: Vec<Vec<SeccompCondition>> = vec![vec![]];
        for c in rule {
            let cond = |op, value: u32| {
                SeccompCondition::new(c.arg, Len::Dword, op, value as u64).unwrap()
            };
            let options: Vec<SeccompCondition> = match c.test {
                Test::Eq(v) => vec![cond(Op::Eq, v)],
                Test::Ne(v) => vec![cond(Op::Ne, v)],
                Test::MaskedEq { mask, value } => vec![cond(Op::MaskedEq(mask as u64), value)],
                Test::AnyBitOf(mask) => (0..32)
                    .map(|i| 1u32 << i)
                    .filter(|bit| mask & bit != 0)
                    .map(|bit| cond(Op::MaskedEq(bit as u64), bit))
                    .collect(),
            };
            alternatives = alternatives
                .iter()
                .flat_map(|conds| {
                    options.iter().map(move |o| {
                        let mut v = conds.clone();
                        v.push(o.clone());
                        v
                    })
                })
                .collect();
        }
        alternatives
            .into_iter()
            .map(|conds| SeccompRule::new(conds).unwrap())
            .collect()
    }

    /// seccompiler's own programs for the three lists, installed one after the other:
    /// the reference the single hand-assembled program is checked against.
    fn reference(network: bool, shares_host: bool) -> Vec<BpfProgram> {
        let arch = ARCH.unwrap();
        let unconditional =
            |numbers: Vec<i64>| numbers.into_iter().map(|nr| (nr, vec![])).collect();
        let argument_rules = deny_rules(network, shares_host)
            .into_iter()
            .map(|(nr, rules)| (nr, rules.iter().flat_map(seccompiler_rules).collect()))
            .collect();
        [
            (unconditional(plainly_denied(network, shares_host)), EPERM),
            (argument_rules, EPERM),
            (unconditional(enosys_calls()), ENOSYS),
            (unconditional(pretended(shares_host)), RET_PRETEND),
        ]
        .into_iter()
        .map(|(rules, ret): (BTreeMap<i64, Vec<SeccompRule>>, u32)| {
            let errno = ret & libc::SECCOMP_RET_DATA;
            SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno),
                arch,
            )
            .unwrap()
            .try_into()
            .unwrap()
        })
        .collect()
    }

    #[test]
    fn the_single_program_answers_like_seccompiler_s_programs_stacked() {
        let values = interesting_args();
        for (network, shares_host) in SETTINGS {
            let ours = program(network, shares_host).unwrap();
            let reference = reference(network, shares_host);
            let ruled = deny_rules(network, shares_host);
            let mut checked = 0;
            let mut longest_walk = 0;
            for nr in 0..512u32 {
                // Calls with argument rules get every combination of interesting values
                // in their first four arguments; the others one set (they look at none).
                let combos: Vec<[u64; 6]> = if ruled.contains_key(&(nr as i64)) {
                    let mut c = vec![];
                    for a in &values {
                        for b in &values {
                            c.push([*a, *b, *b, *b, 0, 0]);
                            c.push([*a, *b, *a, *b, 0, 0]);
                            c.push([*a, *a, *a, *b, 0, 0]);
                        }
                    }
                    c
                } else {
                    vec![[0; 6], [u64::MAX; 6]]
                };
                for args in combos {
                    for arch in [AUDIT_ARCH, I386] {
                        let d = data(arch, nr, args);
                        let (verdict, steps) = bpf::run(ours, &d);
                        assert_eq!(
                            verdict,
                            stacked_verdict(&reference, &d),
                            "syscall {nr}, arch {arch:#x}, args {args:?}, network {network}, \
                             shares_host {shares_host}"
                        );
                        if arch == AUDIT_ARCH && !ruled.contains_key(&(nr as i64)) {
                            longest_walk = longest_walk.max(steps);
                        }
                        checked += 1;
                    }
                }
            }
            assert!(checked > 10_000, "{checked} cases");
            // The kernel's action cache walks the program for every syscall number when
            // it is installed: a search, not a chain.
            assert!(longest_walk <= 14, "{longest_walk} steps");
        }
    }

    #[test]
    fn deny_list_covers_the_guarantees() {
        let denied = always_denied();
        for nr in [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_io_uring_setup,
            libc::SYS_mount,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_keyctl,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_userfaultfd,
            libc::SYS_kexec_load,
            libc::SYS_init_module,
            libc::SYS_open_by_handle_at,
        ] {
            assert!(denied.contains(&nr), "syscall {nr} not denied");
        }
    }
}
