//! The seccomp filters shared by both Linux backends.
//!
//! Several small filters instead of one: seccompiler gives each filter a single match
//! action, and the kernel runs every installed filter and keeps the strictest verdict.
//! Calls denied whatever their arguments go into a compact hand-assembled program (see
//! [`plain_deny_filter`]); calls denied for some arguments only are left to seccompiler,
//! behind a hand-assembled entry that lets every other call through at once (see
//! [`compile`] and `bpf.rs` for why that matters to the cost of each sandboxed call).
//! Every program starts with an architecture check, which kills a process that enters
//! through another ABI (i386 `int 0x80`); on x86_64 the compact program also kills x32
//! syscall numbers, which the architecture check alone does not catch.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::bpf::{Asm, Label, JEQ_K, OFFSET_ARCH, OFFSET_NR};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

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

fn cond(arg: u8, len: Len, op: Op, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, len, op, value).expect("argument index is below 6")
}

fn rule(conditions: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conditions).expect("a rule has at least one condition")
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

/// fchmodat2 (Linux 6.6) has the same number on every architecture.
const FCHMODAT2: i64 = 452;

/// Calls answered with EPERM for some of their arguments.
fn deny_rules(network: bool, shares_host: bool) -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    if shares_host {
        // Without IPC and PID namespaces (landlock) the host's POSIX message queues and
        // processes are reachable by name or id (SysV IPC: see `plainly_denied`).
        rules.insert(
            libc::SYS_mq_open,
            vec![rule(vec![cond(
                1,
                Len::Dword,
                Op::MaskedEq(libc::O_CREAT as u64),
                libc::O_CREAT as u64,
            )])],
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
            rules.insert(nr, vec![rule(vec![cond(arg, Len::Dword, Op::Ne, 0)])]);
        }
    }

    // Terminal input injection: TIOCSTI pushes bytes into a terminal's input queue,
    // TIOCLINUX can do the same on a virtual console. ioctl numbers are 32-bit.
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCSTI as u64)]),
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCLINUX as u64)]),
        ],
    );

    // clone() with a namespace flag would undo the isolation; clone3 is refused with
    // ENOSYS in another filter (its flags sit behind a pointer), so libc falls back here.
    let ns_flags = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    rules.insert(
        libc::SYS_clone,
        ns_flags
            .iter()
            .map(|&f| rule(vec![cond(0, Len::Qword, Op::MaskedEq(f as u64), f as u64)]))
            .collect(),
    );

    // No setuid/setgid files and no world-writable modes: a setuid-root file in the
    // workspace, or a world-writable host file, is a way up for anyone on the host.
    let dangerous_bits = [libc::S_ISUID, libc::S_ISGID, libc::S_IWOTH];
    for (nr, arg) in mode_setting_calls() {
        rules.insert(
            nr,
            dangerous_bits
                .iter()
                .map(|&b| {
                    rule(vec![cond(
                        arg,
                        Len::Dword,
                        Op::MaskedEq(b as u64),
                        b as u64,
                    )])
                })
                .collect(),
        );
    }
    // The same bits through file creation (the mode only counts with O_CREAT).
    let creating_opens: Vec<(i64, u8, u8)> = {
        let mut v = vec![(libc::SYS_openat, 2, 3)];
        #[cfg(target_arch = "x86_64")]
        v.push((libc::SYS_open, 1, 2));
        v
    };
    for (nr, flags_arg, mode_arg) in creating_opens {
        rules.insert(
            nr,
            [libc::S_ISUID, libc::S_ISGID]
                .iter()
                .map(|&b| {
                    rule(vec![
                        cond(
                            flags_arg,
                            Len::Dword,
                            Op::MaskedEq(libc::O_CREAT as u64),
                            libc::O_CREAT as u64,
                        ),
                        cond(mode_arg, Len::Dword, Op::MaskedEq(b as u64), b as u64),
                    ])
                })
                .collect(),
        );
    }
    #[cfg(target_arch = "x86_64")]
    rules.insert(
        libc::SYS_creat,
        [libc::S_ISUID, libc::S_ISGID]
            .iter()
            .map(|&b| rule(vec![cond(1, Len::Dword, Op::MaskedEq(b as u64), b as u64)]))
            .collect(),
    );

    let unix = libc::AF_UNIX as u64;
    // Unix datagram (and other non-stream) socket pairs can address any host socket per
    // message (sendto/sendmsg with a path or abstract name), whatever the network setting.
    let unix_non_stream: Vec<SeccompRule> = [
        libc::SOCK_DGRAM,
        libc::SOCK_RAW,
        libc::SOCK_RDM,
        libc::SOCK_DCCP,
        10, // SOCK_PACKET
    ]
    .iter()
    .map(|ty| {
        rule(vec![
            cond(0, Len::Dword, Op::Eq, unix),
            cond(1, Len::Dword, Op::MaskedEq(0xf), *ty as u64),
        ])
    })
    .collect();
    if network {
        // Network on means the internet, not the host's unix sockets (docker.sock, the
        // X server, ssh-agent): no socket(AF_UNIX) at all; stream socketpairs stay.
        rules.insert(
            libc::SYS_socket,
            vec![rule(vec![cond(0, Len::Dword, Op::Eq, unix)])],
        );
        rules.insert(libc::SYS_socketpair, unix_non_stream);
    } else {
        // Only AF_UNIX stream/seqpacket sockets, and no connect/bind/listen, which reach
        // or squat host pathname and abstract sockets. socketpair() keeps working.
        let mut socket_rules = vec![rule(vec![cond(0, Len::Dword, Op::Ne, unix)])];
        socket_rules.extend(unix_non_stream);
        // connect/bind/listen are in `plainly_denied`.
        rules.insert(libc::SYS_socket, socket_rules.clone());
        rules.insert(libc::SYS_socketpair, socket_rules);
    }
    rules
}

/// Calls answered with ENOSYS, so that libc falls back to a call the deny filter checks.
fn enosys_rules() -> BTreeMap<i64, Vec<SeccompRule>> {
    // clone3 and openat2 take their flags through a pointer that seccomp cannot read.
    BTreeMap::from([(libc::SYS_clone3, vec![]), (libc::SYS_openat2, vec![])])
}

/// The start of every hand-assembled program: a call through another ABI (i386
/// `int 0x80`) goes to `kill`; otherwise the syscall number is loaded.
fn load_native_nr(asm: &mut Asm, kill: Label) {
    let native = asm.label();
    asm.load(OFFSET_ARCH);
    asm.jump(JEQ_K, AUDIT_ARCH, native, kill);
    asm.bind(native);
    asm.load(OFFSET_NR);
}

/// seccompiler's program for `rules`, behind an entry that checks the architecture and
/// sends only the calls that have rules into it, by binary search; every other call is
/// allowed there (seccompiler's own answer for them), in a few instructions instead of a
/// walk past every rule.
fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    on_match: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, SeccompError> {
    let numbers: Vec<u32> = rules.keys().map(|nr| *nr as u32).collect();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, on_match, arch)
        .map_err(|e| SeccompError(e.to_string()))?;
    let inner: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| SeccompError(e.to_string()))?;

    let mut asm = Asm::default();
    let (kill, allow, ruled) = (asm.label(), asm.label(), asm.label());
    load_native_nr(&mut asm, kill);
    asm.dispatch(&numbers, ruled, allow);
    asm.bind(allow);
    asm.ret(libc::SECCOMP_RET_ALLOW);
    asm.bind(kill);
    asm.ret(libc::SECCOMP_RET_KILL_PROCESS);
    asm.bind(ruled);
    for insn in inner {
        asm.raw(insn);
    }
    asm.finish().map_err(SeccompError)
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

/// The unconditional denials as one compact program: check the architecture (another
/// ABI, such as i386 `int 0x80`, kills the process), on x86_64 kill x32 syscall numbers
/// (`nr | 0x40000000`, which the architecture check lets through), then find the number
/// among the denied calls by binary search. seccompiler would spend five instructions
/// per call in one long chain.
fn plain_deny_filter(numbers: &[i64]) -> Result<BpfProgram, SeccompError> {
    let numbers: Vec<u32> = numbers.iter().map(|nr| *nr as u32).collect();
    let mut asm = Asm::default();
    let (allow, deny, kill) = (asm.label(), asm.label(), asm.label());
    load_native_nr(&mut asm, kill);
    #[cfg(target_arch = "x86_64")]
    {
        let plain = asm.label();
        asm.jump(super::bpf::JGE_K, 0x4000_0000, kill, plain);
        asm.bind(plain);
    }
    asm.dispatch(&numbers, deny, allow);
    asm.bind(allow);
    asm.ret(libc::SECCOMP_RET_ALLOW);
    asm.bind(deny);
    asm.ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    asm.bind(kill);
    asm.ret(libc::SECCOMP_RET_KILL_PROCESS);
    asm.finish().map_err(SeccompError)
}

/// Every filter the sandbox installs, in installation order. `shares_host` is true for
/// backends without IPC and PID namespaces (landlock). Built once per process: a
/// long-lived session (chat, mcp) installs the same programs on every call.
pub fn programs(network: bool, shares_host: bool) -> Result<&'static [BpfProgram], SeccompError> {
    static BUILT: [OnceLock<Result<Vec<BpfProgram>, String>>; 4] = [const { OnceLock::new() }; 4];
    BUILT[usize::from(network) * 2 + usize::from(shares_host)]
        .get_or_init(|| build(network, shares_host).map_err(|e| e.0))
        .as_deref()
        .map_err(|e| SeccompError(e.clone()))
}

fn build(network: bool, shares_host: bool) -> Result<Vec<BpfProgram>, SeccompError> {
    let arch = ARCH.ok_or_else(|| {
        SeccompError(format!(
            "no seccomp filter for the {} architecture",
            std::env::consts::ARCH
        ))
    })?;
    Ok(vec![
        plain_deny_filter(&plainly_denied(network, shares_host))?,
        compile(
            deny_rules(network, shares_host),
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )?,
        compile(
            enosys_rules(),
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )?,
    ])
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

    #[test]
    fn programs_compile_for_both_network_settings() {
        for (network, shares_host) in [(false, false), (true, false), (false, true), (true, true)] {
            let programs = programs(network, shares_host).unwrap();
            assert!(programs.len() >= 2);
            for p in programs {
                assert!(!p.is_empty());
                assert_eq!(to_bytes(p).len(), p.len() * 8);
            }
        }
    }

    use crate::sandbox::linux::bpf;

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

    /// The longest walk the kernel's action cache takes through `program` for a call
    /// without rules (for the others it stops at the first look at an argument).
    fn longest_walk(program: &BpfProgram, ruled: &[i64]) -> usize {
        (0..512)
            .filter(|nr| !ruled.contains(&(*nr as i64)))
            .map(|nr| bpf::run(program, &data(AUDIT_ARCH, nr, [0; 6])).1)
            .max()
            .unwrap()
    }

    #[test]
    fn the_compact_filter_denies_exactly_its_list_and_kills_other_abis() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        for (network, shares_host) in [(false, false), (true, false), (false, true), (true, true)] {
            let denied = plainly_denied(network, shares_host);
            let program = plain_deny_filter(&denied).unwrap();
            assert!(
                longest_walk(&program, &[]) <= 14,
                "a search, not a chain: {} steps",
                longest_walk(&program, &[])
            );
            for nr in 0..512u32 {
                let expected = if denied.contains(&(nr as i64)) {
                    eperm
                } else {
                    libc::SECCOMP_RET_ALLOW
                };
                assert_eq!(run(&program, AUDIT_ARCH, nr), expected, "syscall {nr}");
            }
            assert_eq!(
                run(&program, 0x4000_0003, libc::SYS_read as u32),
                libc::SECCOMP_RET_KILL_PROCESS,
                "another ABI (i386)"
            );
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                run(&program, AUDIT_ARCH, 0x4000_0000 | libc::SYS_ptrace as u32),
                libc::SECCOMP_RET_KILL_PROCESS,
                "x32 numbers"
            );
            let sockets = [libc::SYS_connect, libc::SYS_bind, libc::SYS_listen];
            assert_eq!(sockets.iter().all(|n| denied.contains(n)), !network);
            assert_eq!(denied.contains(&libc::SYS_shmget), shares_host);
        }
        let too_many: Vec<i64> = (0..600).collect();
        assert!(plain_deny_filter(&too_many).is_err());
    }

    /// Argument values that the rules look at, and some they do not.
    #[allow(clippy::unnecessary_cast)] // ioctl request types differ between libcs
    fn interesting_args() -> Vec<u64> {
        let mut v = vec![0, 1, 2, u64::MAX, 0xffff_ffff, 0x1_0000_0000];
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
        v.extend([libc::S_ISUID, libc::S_ISGID, libc::S_IWOTH, 0o755, 0o4755].map(|x| x as u64));
        v.extend([libc::CLONE_NEWUSER, libc::CLONE_NEWNS, libc::SIGCHLD].map(|x| x as u64));
        v
    }

    #[test]
    fn the_entry_in_front_of_seccompiler_changes_no_verdict() {
        let values = interesting_args();
        let arch = ARCH.unwrap();
        let mut rule_sets = vec![];
        for (network, shares_host) in [(false, false), (true, false), (false, true), (true, true)] {
            rule_sets.push((deny_rules(network, shares_host), SeccompAction::Errno(1)));
        }
        rule_sets.push((enosys_rules(), SeccompAction::Errno(libc::ENOSYS as u32)));
        for (rules, action) in rule_sets {
            let plain: BpfProgram =
                SeccompFilter::new(rules.clone(), SeccompAction::Allow, action.clone(), arch)
                    .unwrap()
                    .try_into()
                    .unwrap();
            let fronted = compile(rules.clone(), action, arch).unwrap();
            let ruled: Vec<i64> = rules.keys().copied().collect();
            let walk = longest_walk(&fronted, &ruled);
            assert!(walk <= 12, "{walk} steps");
            let mut checked = 0;
            for nr in (0..512u32).chain([0x4000_0000 | libc::SYS_ioctl as u32]) {
                // Calls with rules get every combination of interesting values in their
                // first four arguments; the others one set (they look at none).
                let combos: Vec<[u64; 6]> = if rules.contains_key(&(nr as i64)) {
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
                    for arch in [AUDIT_ARCH, 0x4000_0003] {
                        let d = data(arch, nr, args);
                        assert_eq!(
                            bpf::run(&fronted, &d).0,
                            bpf::run(&plain, &d).0,
                            "syscall {nr}, arch {arch:#x}, args {args:?}"
                        );
                        checked += 1;
                    }
                }
            }
            assert!(checked > 1000);
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
