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
type Resource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type Resource = libc::c_int;

/// `value` as both limits, but never above the hard limit in `current`.
fn lowered(value: u64, current: &libc::rlimit) -> libc::rlimit {
    let value = value as libc::rlim_t;
    libc::rlimit {
        rlim_cur: value.min(current.rlim_max),
        rlim_max: value.min(current.rlim_max),
    }
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
    /// Async-signal-safe: only getrlimit/setrlimit/umask.
    pub fn apply(&self) -> std::io::Result<()> {
        let lower = |resource, value: u64| -> std::io::Result<()> {
            let mut current = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if unsafe { libc::getrlimit(resource, &mut current) } < 0
                || unsafe { libc::setrlimit(resource, &lowered(value, &current)) } < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        for (resource, value) in self.by_resource() {
            if let Some(value) = value {
                lower(resource, value)?;
            }
        }
        lower(libc::RLIMIT_CORE, 0)?;
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
