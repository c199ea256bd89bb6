//! Getting a just-started process off this CPU.
//!
//! A new process is mostly placed on its parent's CPU (nine times in ten on the 2-CPU
//! machine measured), and a `vfork` child is even handed its parent's CPU when its exec
//! releases the parent, which then preempts it there. When chitti means to work on while
//! the new process starts (the supervisor of a landlock call while chitti adds the
//! Landlock rules; bwrap started early while chitti works out the policy), the two
//! would take turns on one CPU while another idles: a scheduler trace showed an early
//! bwrap stopped in the middle of its exec for the 0.4 ms chitti took to decide the
//! policy.

/// Moves `pid` to a CPU other than this one, so that it runs at once instead of after
/// this process blocks. Only the move is wanted: its affinity is put back at once (the
/// task stays where it was moved), so that it and its children keep chitti's own.
/// Nothing changes with one CPU. Whether it was moved.
pub fn move_to_another_cpu(pid: libc::pid_t) -> bool {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    unsafe {
        let here = libc::sched_getcpu();
        let mut own: libc::cpu_set_t = std::mem::zeroed();
        if here < 0 || libc::sched_getaffinity(0, size, &mut own) < 0 {
            return false;
        }
        let mut others = own;
        libc::CPU_CLR(here as usize, &mut others);
        if libc::CPU_COUNT(&others) == 0 {
            return false;
        }
        if libc::sched_setaffinity(pid, size, &others) != 0 {
            return false;
        }
        libc::sched_setaffinity(pid, size, &own);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn affinity(pid: libc::pid_t) -> libc::cpu_set_t {
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            set
        }
    }

    /// The move leaves the process with the affinity it had (chitti's), and says whether
    /// there was another CPU to move it to.
    #[test]
    fn the_move_keeps_the_affinity_and_needs_another_cpu() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let before = affinity(pid);
        let moved = move_to_another_cpu(pid);
        let after = affinity(pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            unsafe { libc::CPU_EQUAL(&before, &after) },
            "the affinity was not put back"
        );
        let cpus = unsafe { libc::CPU_COUNT(&affinity(0)) };
        assert_eq!(moved, cpus > 1, "{cpus} CPUs allowed here");
    }
}
