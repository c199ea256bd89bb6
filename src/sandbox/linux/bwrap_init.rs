//! Reaping the process bubblewrap leaves behind.
//!
//! bwrap exits as soon as it knows the command's status, often before its child (the
//! init of the sandbox's PID namespace) has finished exiting. That child is then
//! re-parented to the nearest subreaper, by default PID 1, which must reap it. An init
//! that reaps slowly (about once a second on some virtual machines) or never (a
//! container whose PID 1 is an ordinary program) keeps one zombie per call, and zombies
//! count against the user's process limit. So chitti makes itself a child subreaper,
//! learns the child's pid from bwrap's `--json-status-fd`, and reaps it after the call.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Once;
use std::time::Duration;

use super::vfork::{open_pidfd, wait_readable};
use crate::sandbox::AfterCall;

/// How long to wait for the orphan: it is already dying (bwrap starts it with
/// `PR_SET_PDEATHSIG(SIGKILL)`), so this bound is only ever reached if something is wrong.
const WAIT_AT_MOST: Duration = Duration::from_secs(2);

/// Makes chitti the parent of whatever its bwrap leaves. Once per process.
pub fn adopt_orphans() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| unsafe {
        // If this fails the orphan goes to PID 1 as before; nothing is less safe.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    });
}

/// Reads bwrap's status descriptor after the call and reaps the child it names.
pub struct ReapBwrapInit {
    status: std::fs::File,
    /// The child bwrap named, once read (see [`AfterCall::sandbox_ended`]).
    named: Option<Option<libc::pid_t>>,
}

impl ReapBwrapInit {
    pub fn new(status: OwnedFd) -> ReapBwrapInit {
        ReapBwrapInit {
            status: status.into(),
            named: None,
        }
    }

    fn named(&mut self) -> Option<libc::pid_t> {
        *self.named.get_or_insert_with(|| child_pid(&self.status))
    }
}

impl AfterCall for ReapBwrapInit {
    fn run(mut self: Box<Self>) -> Vec<String> {
        if let Some(pid) = self.named() {
            reap(pid);
        }
        Vec::new()
    }

    /// bwrap's child leaves bwrap's process group (`--new-session`) before it binds its
    /// life to bwrap's (`PR_SET_PDEATHSIG`, in the PID namespace's init): bwrap ended in
    /// between (a call cancelled while its sandbox starts, bwrap killed from outside)
    /// leaves that init running the command, adopted by chitti, and the call's pipes open
    /// for as long as it runs. Its number is on the status descriptor by then (bwrap
    /// writes it before it lets the child go on), so it is killed here, and the PID
    /// namespace with it. (Before it leaves the group, killing the group gets it.) Where
    /// bwrap ended as usual the init is dying already.
    fn sandbox_ended(&mut self) {
        if let Some(pid) = self.named() {
            super::supervisor::kill_orphaned_init(pid);
        }
    }
}

/// For a bwrap that chitti runs with `std::process::Command` (the capability probe): adds
/// `--json-status-fd` on an inherited pipe; give the result to [`reap_after`] once bwrap
/// has exited.
pub fn name_child(cmd: &mut std::process::Command) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // Only the write end is inherited.
    if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    cmd.args(["--json-status-fd", &write.as_raw_fd().to_string()]);
    adopt_orphans();
    Ok((read, write))
}

pub fn reap_after((read, write): (OwnedFd, OwnedFd)) {
    drop(write);
    if let Some(pid) = child_pid(&read.into()) {
        reap(pid);
    }
}

/// The `child-pid` from bwrap's first status line. bwrap has exited by now, so what it
/// wrote is in the pipe; do not wait for more.
fn child_pid(mut status: &std::fs::File) -> Option<libc::pid_t> {
    unsafe {
        let fd = status.as_raw_fd();
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        );
    }
    let mut text = Vec::new();
    let _ = status.read_to_end(&mut text);
    let first = text.split(|b| *b == b'\n').next()?;
    let value: serde_json::Value = serde_json::from_slice(first).ok()?;
    let pid = value.get("child-pid")?.as_i64()?;
    libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)
}

/// Waits (bounded) for `pid` to exit and reaps it if it is chitti's child. A pid that is
/// not (chitti is not an ancestor, or it was reaped already) is left alone: waitpid
/// refuses it, and nothing here signals any process.
fn reap(pid: libc::pid_t) {
    if let Ok(pidfd) = open_pidfd(pid) {
        wait_readable(&pidfd, WAIT_AT_MOST);
    }
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL) };
}
