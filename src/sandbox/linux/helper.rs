//! The helper chitti re-executes itself as (`chitti __sandbox-helper SPEC -- CMD...`).
//!
//! It stays outside the sandbox as a tiny supervisor and forks the command, which
//! restricts itself between fork and exec: new session, rlimits, capabilities dropped,
//! no_new_privs, Landlock, seccomp. Restrictions are applied in a fresh single-threaded
//! process because `landlock_restrict_self` binds only the calling thread.
//!
//! The helper is a child subreaper: when the command exits, when chitti closes the
//! lifeline pipe (timeout), or when chitti dies (the kernel closes the pipe), the helper
//! kills every remaining descendant, including daemonised ones, before it exits.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{caps, landlock, seccomp};
use crate::sandbox::rlimits::Rlimits;

pub const HELPER_ARG: &str = "__sandbox-helper";

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Landlock + seccomp + capability drop.
    Landlock,
    /// Only supervision (explicit `--backend none`).
    None,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Spec {
    pub mode: Mode,
    pub writable: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    pub network: bool,
    pub rlimits: Rlimits,
    /// Read end: EOF means "kill everything and exit".
    pub lifeline_fd: RawFd,
    /// Write end: one JSON [`Report`] line.
    pub status_fd: RawFd,
}

/// What the helper tells chitti when it is done.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Report {
    Exited {
        code: i32,
    },
    Signaled {
        signal: i32,
    },
    /// The lifeline closed before the command finished (chitti's timeout).
    Killed,
    /// The command could not be started; nothing ran.
    NotFound {
        message: String,
    },
    NotExecutable {
        message: String,
    },
    /// The sandbox could not be set up; nothing ran.
    SetupFailed {
        message: String,
    },
}

/// Entry point; never returns.
pub fn main(args: Vec<OsString>) -> ! {
    // args: [spec_json, "--", cmd, args...]
    let mut it = args.into_iter();
    let spec: Spec = match it
        .next()
        .and_then(|s| s.into_string().ok())
        .map(|s| serde_json::from_str(&s))
    {
        Some(Ok(spec)) => spec,
        _ => {
            eprintln!("chitti: {HELPER_ARG} is internal; run `chitti sandbox exec` instead");
            std::process::exit(125);
        }
    };
    let _ = it.next(); // "--"
    let command: Vec<OsString> = it.collect();
    let status = unsafe { OwnedFd::from_raw_fd(spec.status_fd) };
    let lifeline = unsafe { OwnedFd::from_raw_fd(spec.lifeline_fd) };
    let report = run(&spec, &command, &lifeline);
    let code = match &report {
        Report::Exited { code } => *code,
        Report::Signaled { signal } => 128 + signal,
        Report::Killed => 124,
        Report::NotFound { .. } => 127,
        Report::NotExecutable { .. } => 126,
        Report::SetupFailed { .. } => 125,
    };
    let mut line = serde_json::to_vec(&report).unwrap_or_default();
    line.push(b'\n');
    let _ = std::fs::File::from(status).write_all(&line);
    std::process::exit(code);
}

fn run(spec: &Spec, command: &[OsString], lifeline: &OwnedFd) -> Report {
    let setup_failed = |message: String| Report::SetupFailed { message };
    let Some(program) = command.first() else {
        return setup_failed("empty command".into());
    };

    // Everything that allocates or reads files happens here, before fork.
    let ruleset = match spec.mode {
        Mode::Landlock => {
            if let Some(why) = landlock::blocker() {
                return setup_failed(why);
            }
            let terminals = stdio_terminals();
            let built = landlock::build(&landlock::RulesetSpec {
                writable: &spec.writable,
                deny_read: &spec.deny_read,
                terminals: &terminals,
            });
            match built {
                Ok(r) => Some(r),
                Err(e) => return setup_failed(e.to_string()),
            }
        }
        Mode::None => None,
    };
    let filters = match spec.mode {
        Mode::Landlock => match seccomp::programs(spec.network) {
            Ok(p) => p,
            Err(e) => return setup_failed(e.to_string()),
        },
        Mode::None => Vec::new(),
    };
    let last_cap = caps::last_cap();
    let rlimits = spec.rlimits;
    let sandboxed = spec.mode == Mode::Landlock;

    // The child names the step that failed through this pipe, so that a setup failure
    // (exit 125, nothing ran) is never mistaken for "command not found".
    let (step_read, step_write) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return setup_failed(format!("pipe: {e}")),
    };
    let step_fd = step_write.as_raw_fd();

    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } < 0 {
        return setup_failed(format!(
            "PR_SET_CHILD_SUBREAPER: {}",
            std::io::Error::last_os_error()
        ));
    }

    let mut cmd = std::process::Command::new(program);
    cmd.args(&command[1..]);
    let mut ruleset = ruleset;
    unsafe {
        cmd.pre_exec(move || {
            let fail = |step: &[u8], e: std::io::Error| {
                libc::write(step_fd, step.as_ptr().cast(), step.len());
                e
            };
            // A new session: no controlling terminal, so no TIOCSTI into the user's shell.
            if libc::setsid() < 0 {
                return Err(fail(b"setsid", std::io::Error::last_os_error()));
            }
            rlimits.apply().map_err(|e| fail(b"setrlimit", e))?;
            if sandboxed {
                caps::drop_all(last_cap).map_err(|e| fail(b"dropping capabilities", e))?;
                caps::set_no_new_privs().map_err(|e| fail(b"no_new_privs", e))?;
                if let Some(rs) = ruleset.take() {
                    match rs.restrict_self() {
                        Ok(status)
                            if status.ruleset == ::landlock::RulesetStatus::FullyEnforced => {}
                        Ok(_) => {
                            return Err(fail(
                                b"landlock (not fully enforced)",
                                std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
                            ))
                        }
                        Err(_) => {
                            return Err(fail(
                                b"landlock_restrict_self",
                                std::io::Error::last_os_error(),
                            ))
                        }
                    }
                }
                for filter in &filters {
                    seccompiler::apply_filter(filter).map_err(|_| {
                        fail(b"installing seccomp", std::io::Error::last_os_error())
                    })?;
                }
            }
            // Nothing but stdio crosses into the command.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }

    let spawned = cmd.spawn();
    drop(step_write);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let mut step = String::new();
            let _ = std::fs::File::from(step_read).read_to_string(&mut step);
            let name = program.to_string_lossy();
            if !step.is_empty() {
                return setup_failed(format!("{step}: {e}"));
            }
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Report::NotFound {
                    message: format!("{name}: command not found"),
                },
                _ => Report::NotExecutable {
                    message: format!("{name}: cannot execute: {e}"),
                },
            };
        }
    };
    drop(step_read);

    let report = supervise(&mut child, lifeline);
    kill_descendants();
    report
}

/// Waits for the command or for the lifeline to close, whichever comes first.
fn supervise(child: &mut std::process::Child, lifeline: &OwnedFd) -> Report {
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if pidfd < 0 {
        // Kernels before 5.3: fall back to polling.
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return report_of(status);
            }
            if lifeline_closed(lifeline, 10) {
                return Report::Killed;
            }
        }
    }
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: lifeline.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Report::SetupFailed {
                message: format!("poll: {}", std::io::Error::last_os_error()),
            };
        }
        if fds[0].revents != 0 {
            if let Ok(status) = child.wait() {
                return report_of(status);
            }
        }
        if fds[1].revents != 0 {
            return Report::Killed;
        }
    }
}

fn lifeline_closed(lifeline: &OwnedFd, timeout_ms: i32) -> bool {
    let mut fd = libc::pollfd {
        fd: lifeline.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    unsafe { libc::poll(&mut fd, 1, timeout_ms) > 0 }
}

fn report_of(status: std::process::ExitStatus) -> Report {
    match (status.code(), status.signal()) {
        (Some(code), _) => Report::Exited { code },
        (None, Some(signal)) => Report::Signaled { signal },
        _ => Report::Exited { code: 1 },
    }
}

/// Kills every process left under the helper. Orphans reparent to the helper (it is a
/// subreaper), so repeating "kill all children, reap" until none remain reaches the
/// whole tree, including `setsid`/double-forked daemons.
fn kill_descendants() {
    let me = std::process::id();
    let children_file = format!("/proc/{me}/task/{me}/children");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children: Vec<i32> = std::fs::read_to_string(&children_file)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        for pid in &children {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        // Reap whatever has died; block only when there is something to wait for.
        let flags = if children.is_empty() {
            libc::WNOHANG
        } else {
            0
        };
        let mut status = 0;
        let reaped = unsafe { libc::waitpid(-1, &mut status, flags | libc::__WALL) };
        if reaped < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            return;
        }
        if reaped == 0 && children.is_empty() {
            // Children exist (waitpid says so) but are not listed yet: let them appear.
            std::thread::sleep(Duration::from_millis(1));
        }
        if Instant::now() > deadline {
            eprintln!("chitti: some sandboxed processes could not be killed");
            return;
        }
    }
}

/// Terminals handed to the command as stdio, which it may keep using (Landlock would
/// otherwise refuse to reopen them, e.g. `echo > /dev/stderr`).
fn stdio_terminals() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for fd in 0..3 {
        if unsafe { libc::isatty(fd) } == 1 {
            if let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{fd}")) {
                if path.starts_with("/dev/") && !out.contains(&path) {
                    out.push(path);
                }
            }
        }
    }
    out
}
