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

impl Rlimits {
    /// Lowers the limits of the calling process (never raises a hard limit). Core dumps
    /// are always off: a core file is a copy of memory written into the workspace.
    /// Also masks the "others may write" bit in the umask.
    /// Async-signal-safe: only getrlimit/setrlimit/umask.
    pub fn apply(&self) -> std::io::Result<()> {
        let set = |resource, value: Option<u64>| -> std::io::Result<()> {
            let Some(value) = value else { return Ok(()) };
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if unsafe { libc::getrlimit(resource, &mut cur) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let value = value as libc::rlim_t;
            let new = libc::rlimit {
                rlim_cur: value.min(cur.rlim_max),
                rlim_max: value.min(cur.rlim_max),
            };
            if unsafe { libc::setrlimit(resource, &new) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        set(libc::RLIMIT_NPROC, self.max_processes)?;
        set(libc::RLIMIT_NOFILE, self.max_open_files)?;
        set(libc::RLIMIT_FSIZE, self.max_file_size_bytes)?;
        set(libc::RLIMIT_AS, self.max_address_space_bytes)?;
        set(libc::RLIMIT_CORE, Some(0))?;
        // Files are not world-writable by default. (A command may still clear its umask:
        // tools call umask(0) just to read it, so seccomp cannot refuse that.)
        unsafe {
            let mask = libc::umask(0o022);
            libc::umask(mask | 0o002);
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
