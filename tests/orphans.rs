//! After a call, chitti leaves no process behind for anyone else to reap: not bwrap's
//! namespace init, not the landlock supervisor.
//!
//! This binary makes itself a child subreaper, so that whatever its chitti leaves is
//! re-parented here, where it can be seen, instead of to PID 1. It holds one test: the
//! processes of other tests would be re-parented here too.

mod common;

use std::time::{Duration, Instant};

/// A child of this process that has exited or is still running, if any, waiting up to
/// `limit` for one that is still running to exit. Does not reap it.
fn leftover_child(limit: Duration) -> Option<String> {
    let started = Instant::now();
    loop {
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) };
        if r < 0 {
            // ECHILD: no children at all.
            return None;
        }
        let pid = unsafe { info.si_pid() };
        if pid != 0 || started.elapsed() > limit {
            let who = if pid != 0 {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                format!("process {pid} ({}), exited", comm.trim())
            } else {
                "a child that is still running".to_string()
            };
            return Some(who);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn calls_on_both_backends_leave_no_process_to_reap() {
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    for backend in ["bwrap", "landlock"] {
        common::ensure_backend(backend);
        let fx = common::Fixture::new();
        for _ in 0..3 {
            let ran = fx.chitti(backend).run(&["true"]);
            assert_eq!(ran.code, Some(0), "{ran}");
        }
        if let Some(who) = leftover_child(Duration::from_secs(3)) {
            panic!("after three {backend} calls, chitti left {who} to be reaped by its parent's subreaper");
        }
    }
}
