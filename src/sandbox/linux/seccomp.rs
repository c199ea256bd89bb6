//! The seccomp filters shared by both Linux backends.
//!
//! Several small filters instead of one: seccompiler gives each filter a single match
//! action, and the kernel runs every installed filter and keeps the strictest verdict.
//! Calls denied whatever their arguments go into a compact hand-assembled program (see
//! [`plain_deny_filter`]); calls denied for some arguments only are left to seccompiler.
//! Every program starts with an architecture check, which kills a process that enters
//! through another ABI (i386 `int 0x80`); on x86_64 the compact program also kills x32
//! syscall numbers, which the architecture check alone does not catch.

use std::collections::BTreeMap;

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
fn deny_filter(
    network: bool,
    shares_host: bool,
    arch: TargetArch,
) -> Result<BpfProgram, SeccompError> {
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

    compile(rules, SeccompAction::Errno(libc::EPERM as u32), arch)
}

/// Calls answered with ENOSYS, so that libc falls back to a call the deny filter checks.
fn enosys_filter(arch: TargetArch) -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // clone3 and openat2 take their flags through a pointer that seccomp cannot read.
    rules.insert(libc::SYS_clone3, vec![]);
    rules.insert(libc::SYS_openat2, vec![]);
    compile(rules, SeccompAction::Errno(libc::ENOSYS as u32), arch)
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    on_match: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, on_match, arch)
        .map_err(|e| SeccompError(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| SeccompError(e.to_string()))
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

/// The unconditional denials as one compact program: seccompiler spends five
/// instructions on each call, and the kernel's cost of installing a filter (translation
/// and JIT, on every sandboxed call) grows with its length. This one spends one: check
/// the architecture (another ABI, such as i386 `int 0x80`, kills the process), on x86_64
/// kill x32 syscall numbers (`nr | 0x40000000`, which the architecture check lets
/// through), then compare the number against each denied call.
fn plain_deny_filter(numbers: &[i64]) -> Result<BpfProgram, SeccompError> {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    #[cfg(target_arch = "x86_64")]
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    const OFFSET_NR: u32 = 0;
    const OFFSET_ARCH: u32 = 4;
    // Jump offsets are 8 bits: every comparison must reach the shared "deny" return.
    if numbers.len() > 250 {
        return Err(SeccompError(format!(
            "{} plainly denied calls do not fit one compact filter",
            numbers.len()
        )));
    }
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, OFFSET_ARCH),
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, OFFSET_NR),
    ];
    let n = numbers.len();
    // Layout after the comparisons: allow, deny, kill.
    #[cfg(target_arch = "x86_64")]
    p.push(insn(JGE_K, (n + 2) as u8, 0, 0x4000_0000));
    for (i, nr) in numbers.iter().enumerate() {
        // From comparison i, the deny return is (n - i) instructions ahead.
        p.push(insn(JEQ_K, (n - i) as u8, 0, *nr as u32));
    }
    p.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    p.push(insn(
        RET_K,
        0,
        0,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    ));
    p.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS));
    Ok(p)
}

/// Every filter the sandbox installs, in installation order. `shares_host` is true for
/// backends without IPC and PID namespaces (landlock).
pub fn programs(network: bool, shares_host: bool) -> Result<Vec<BpfProgram>, SeccompError> {
    let arch = ARCH.ok_or_else(|| {
        SeccompError(format!(
            "no seccomp filter for the {} architecture",
            std::env::consts::ARCH
        ))
    })?;
    Ok(vec![
        plain_deny_filter(&plainly_denied(network, shares_host))?,
        deny_filter(network, shares_host, arch)?,
        enosys_filter(arch)?,
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
            for p in &programs {
                assert!(!p.is_empty());
                assert_eq!(to_bytes(p).len(), p.len() * 8);
            }
        }
    }

    /// Runs a classic BPF program of the instructions the compact filter uses.
    fn run(program: &BpfProgram, arch: u32, nr: u32) -> u32 {
        let mut pc = 0;
        let mut acc = 0u32;
        loop {
            let i = &program[pc];
            pc += 1;
            match i.code {
                0x20 => acc = if i.k == 4 { arch } else { nr },
                0x15 => pc += if acc == i.k { i.jt } else { i.jf } as usize,
                0x35 => pc += if acc >= i.k { i.jt } else { i.jf } as usize,
                0x06 => return i.k,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn the_compact_filter_denies_exactly_its_list_and_kills_other_abis() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        for (network, shares_host) in [(false, false), (true, false), (false, true), (true, true)] {
            let denied = plainly_denied(network, shares_host);
            let program = plain_deny_filter(&denied).unwrap();
            assert!(
                program.len() < denied.len() + 10,
                "one instruction per call"
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
        let too_many: Vec<i64> = (0..251).collect();
        assert!(plain_deny_filter(&too_many).is_err());
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
