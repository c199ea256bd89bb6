//! Resource limits from the profile, applied between fork and exec.

use serde::{Deserialize, Serialize};

use crate::policy::Limits;

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Rlimits {
    pub max_processes: Option<u64>,
    pub max_open_files: Option<u64>,
    pub max_file_size_bytes: Option<u64>,
    pub max_address_space_bytes: Option<u64>,
}

const MIB: u64 = 1024 * 1024;

impl From<&Limits> for Rlimits {
    fn from(l: &Limits) -> Self {
        Rlimits {
            max_processes: l.max_processes,
            max_open_files: l.max_open_files,
            max_file_size_bytes: l.max_file_size_mb.map(|m| m.saturating_mul(MIB)),
            max_address_space_bytes: l.max_memory_mb.map(|m| m.saturating_mul(MIB)),
        }
    }
}

/// The type libc gives resource numbers.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) type Resource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) type Resource = libc::c_int;

/// `value` as both limits, but never above the hard limit in `current`.
fn lowered(value: u64, current: &libc::rlimit) -> libc::rlimit {
    let value = value as libc::rlim_t;
    libc::rlimit {
        rlim_cur: value.min(current.rlim_max),
        rlim_max: value.min(current.rlim_max),
    }
}

/// Sets both limits of `resource` to `value`, or to the hard limit if that is lower.
/// Usually one system call: the new limits are set and the old ones read at once. Where
/// that raised the hard limit (root may), the old hard limit is put back before anything
/// runs under it; where raising is refused, the old limits are read first.
fn lower_own(resource: Resource, value: u64) -> std::io::Result<()> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let wanted = value as libc::rlim_t;
    let both = libc::rlimit {
        rlim_cur: wanted,
        rlim_max: wanted,
    };
    // SAFETY: prlimit reads a valid new limit and writes a valid old one.
    let instead = if unsafe { libc::prlimit(0, resource, &both, &mut old) } == 0 {
        put_back(value, &old)
    } else if unsafe { libc::getrlimit(resource, &mut old) } == 0 {
        Some(lowered(value, &old))
    } else {
        return Err(std::io::Error::last_os_error());
    };
    if let Some(limits) = instead {
        if unsafe { libc::setrlimit(resource, &limits) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Once `value` was set as both limits over `old`: what to set instead, because that
/// raised the hard limit (only a process with CAP_SYS_RESOURCE gets that far).
fn put_back(value: u64, old: &libc::rlimit) -> Option<libc::rlimit> {
    (old.rlim_max < value as libc::rlim_t).then(|| lowered(value, old))
}

impl Rlimits {
    /// The profile's limits by resource.
    fn by_resource(&self) -> [(Resource, Option<u64>); 4] {
        [
            (libc::RLIMIT_NPROC, self.max_processes),
            (libc::RLIMIT_NOFILE, self.max_open_files),
            (libc::RLIMIT_FSIZE, self.max_file_size_bytes),
            (libc::RLIMIT_AS, self.max_address_space_bytes),
        ]
    }

    /// Lowers the limits of the calling process (never raises a hard limit). Core dumps
    /// are always off: a core file is a copy of memory written into the workspace.
    /// Also masks the "others may write" bit in the umask.
    /// Async-signal-safe: only prlimit/getrlimit/setrlimit/umask.
    pub fn apply(&self) -> std::io::Result<()> {
        for (resource, value) in self.by_resource() {
            if let Some(value) = value {
                lower_own(resource, value)?;
            }
        }
        lower_own(libc::RLIMIT_CORE, 0)?;
        // Files are not world-writable by default. (A command may still clear its umask:
        // tools call umask(0) just to read it, so seccomp cannot refuse that.)
        unsafe {
            let mask = libc::umask(0o022);
            libc::umask(mask | 0o002);
        }
        Ok(())
    }

    /// Lowers the profile's limits of another process (bwrap, started before the policy
    /// was known) as [`Rlimits::apply`] would have in it. The core-dump limit and the
    /// umask do not depend on the policy: `apply` set them when that process started.
    #[cfg(target_os = "linux")]
    pub fn apply_to(&self, pid: libc::pid_t) -> std::io::Result<()> {
        for (resource, value) in self.by_resource() {
            let Some(value) = value else { continue };
            let mut current = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: prlimit reads a valid new limit and writes a valid old one.
            if unsafe { libc::prlimit(pid, resource, std::ptr::null(), &mut current) } < 0
                || unsafe {
                    libc::prlimit(
                        pid,
                        resource,
                        &lowered(value, &current),
                        std::ptr::null_mut(),
                    )
                } < 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        let show = |v: Option<u64>| {
            v.map(|v| v.to_string())
                .unwrap_or_else(|| "inherited".into())
        };
        format!(
            "RLIMIT_NPROC={} RLIMIT_NOFILE={} RLIMIT_FSIZE={} RLIMIT_AS={} RLIMIT_CORE=0",
            show(self.max_processes),
            show(self.max_open_files),
            show(self.max_file_size_bytes),
            show(self.max_address_space_bytes)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// For the forked child: a failure ends it without a report (which the parent's
    /// length check catches) instead of unwinding into the test harness's copy.
    fn get(resource: Resource) -> (libc::rlim_t, libc::rlim_t) {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if unsafe { libc::getrlimit(resource, &mut l) } != 0 {
            unsafe { libc::_exit(1) };
        }
        (l.rlim_cur, l.rlim_max)
    }

    /// The put-back decision on its own: this machine's root may lack CAP_SYS_RESOURCE,
    /// so the kernel never lets the test below reach it.
    #[test]
    fn a_raised_hard_limit_is_put_back_and_a_lowered_one_kept() {
        let old = libc::rlimit {
            rlim_cur: 800,
            rlim_max: 1000,
        };
        let put = put_back(2000, &old).expect("2000 over a hard limit of 1000 is put back");
        assert_eq!((put.rlim_cur, put.rlim_max), (1000, 1000));
        assert!(put_back(500, &old).is_none());
        assert!(put_back(1000, &old).is_none());
    }

    /// Applies limits in a forked child (they are per process) and reads them back there;
    /// the values come back over a pipe. Run as root the kernel would let `apply` raise a
    /// hard limit: it must not.
    #[test]
    fn apply_lowers_limits_and_never_raises_a_hard_one() {
        let (read, write) = nix::unistd::pipe().unwrap();
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // The child: only system calls, then _exit.
            let start = libc::rlimit {
                rlim_cur: 800,
                rlim_max: 1000,
            };
            let mut out: [libc::rlim_t; 7] = [0; 7];
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &start) } == 0 {
                // Whether this process could raise a hard limit (CAP_SYS_RESOURCE): only
                // then is `lower_own`'s putting back exercised.
                let higher = libc::rlimit {
                    rlim_cur: 1000,
                    rlim_max: 1001,
                };
                if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &higher) } == 0 {
                    out[6] = 1;
                    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &start) };
                }
                let above = Rlimits {
                    max_open_files: Some(2000),
                    ..Rlimits::default()
                };
                if above.apply().is_ok() {
                    (out[0], out[1]) = get(libc::RLIMIT_NOFILE);
                }
                let below = Rlimits {
                    max_open_files: Some(500),
                    ..Rlimits::default()
                };
                if below.apply().is_ok() {
                    (out[2], out[3]) = get(libc::RLIMIT_NOFILE);
                }
                (out[4], out[5]) = get(libc::RLIMIT_CORE);
            }
            let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_ne_bytes()).collect();
            unsafe {
                libc::write(write.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0);
            }
        }
        drop(write);
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(read), &mut buf).unwrap();
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        let v: Vec<libc::rlim_t> = buf
            .chunks(8)
            .map(|c| libc::rlim_t::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(v.len(), 7, "the child reported {buf:?}");
        if v[6] == 0 {
            eprintln!(
                "NOTE: this process may not raise hard limits (no CAP_SYS_RESOURCE): \
                 checked that a limit above the hard one is refused and clamped here; \
                 putting back a raise the kernel allowed is checked on its own \
                 (a_raised_hard_limit_is_put_back_and_a_lowered_one_kept)"
            );
        }
        assert_eq!((v[0], v[1]), (1000, 1000), "2000 asked, hard limit 1000");
        assert_eq!((v[2], v[3]), (500, 500), "500 asked");
        assert_eq!((v[4], v[5]), (0, 0), "core dumps stay off");
    }
}
