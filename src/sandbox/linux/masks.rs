//! Hiding credentials with mounts, for a Landlock sandbox started by root.
//!
//! Landlock can only allow. Keeping /etc/shadow unreadable therefore means granting every
//! other entry of /etc one by one: as root some 170 rules, opened and added on every call
//! (~0.3 ms, most of what a root call cost more than a user's). Root may instead give the
//! command a private mount namespace and mount over each hidden path, much as the bwrap
//! backend does: /dev/null on a read-only nodev mount (it cannot be opened) over a file, an
//! empty read-only tmpfs with mode 000 over a directory. Landlock then grants their
//! parents whole.
//!
//! Why the mounts hold:
//! - the command cannot undo them: Landlock refuses mount, umount and pivot_root to a
//!   restricted process whatever its capabilities, the command has none left, and the
//!   seccomp filter refuses the mount system calls and `unshare` as well;
//! - it cannot go around them through another process's view of the filesystem
//!   (`/proc/PID/root`, `/proc/PID/cwd`): that needs ptrace access, which Landlock refuses
//!   towards any process outside the sandbox's own domain;
//! - nothing reaches the host: the namespace's mounts are made slaves of the host's before
//!   anything is mounted, so mounts propagate in but never out, and the namespace goes
//!   away with the command's last process.
//!
//! The mounts are made in the command's process between fork and exec, before the
//! capabilities are dropped. Where they could be refused at that point (no CAP_SYS_ADMIN,
//! a seccomp filter or LSM profile confining chitti itself), [`available`] says no before
//! planning, and the rules are enumerated as for any other user.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// CAP_SYS_ADMIN, which mount namespaces and mounts need.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether hidden paths can be mounted over in this process: root, with CAP_SYS_ADMIN,
/// and nothing confining chitti that could refuse `unshare` or `mount` later (a seccomp
/// filter, an AppArmor or SELinux profile other than unconfined).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(check_available)
}

fn check_available() -> bool {
    if !nix::unistd::geteuid().is_root() || !super::caps::effective(CAP_SYS_ADMIN) {
        return false;
    }
    // 0: no seccomp at all. A filter (2) may refuse unshare or mount with any errno.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } != 0 {
        return false;
    }
    unconfined_by_lsm()
}

/// The calling process's LSM label: none (no LSM that labels processes), or the label
/// AppArmor gives unconfined processes. Anything else might deny mounts.
fn unconfined_by_lsm() -> bool {
    match std::fs::read("/proc/self/attr/current") {
        Ok(label) => {
            let label = label.trim_ascii_end();
            label.is_empty() || label == b"unconfined"
        }
        // EINVAL: no LSM provides the attribute. ENOENT: no procfs attribute at all.
        Err(e) => matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)),
    }
}

/// How a Landlock call keeps `deny_read` unreadable: `Some` masks where this process may
/// mount over them (the rules then need not go around them), `None` where the rules must.
pub fn for_policy(deny_read: &[PathBuf]) -> Result<Option<Masks>, String> {
    if deny_read.is_empty() || !available() {
        return Ok(None);
    }
    Masks::plan(deny_read).map(Some)
}

/// The mounts that hide a policy's unreadable paths, prepared before fork.
#[derive(Debug, Default)]
pub struct Masks {
    files: Vec<CString>,
    dirs: Vec<CString>,
}

/// What to mount over a path: decided by what it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cover {
    /// /dev/null on a read-only nodev mount: opening it fails with EACCES.
    DevNull,
    /// An empty read-only tmpfs with mode 000.
    EmptyDir,
}

impl Masks {
    /// The masks for `hidden` (canonical paths that exist). Fails on a path that cannot
    /// be passed to the kernel.
    pub fn plan(hidden: &[PathBuf]) -> Result<Masks, String> {
        let mut masks = Masks::default();
        for path in hidden {
            let c = CString::new(path.as_os_str().as_bytes())
                .map_err(|_| format!("{}: a path with a NUL byte", path.display()))?;
            match cover_for(path) {
                Cover::DevNull => masks.files.push(c),
                Cover::EmptyDir => masks.dirs.push(c),
            }
        }
        Ok(masks)
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty()
    }

    /// Moves the calling process into a private mount namespace and mounts over every
    /// hidden path. System calls only (runs between fork and exec); needs CAP_SYS_ADMIN.
    /// On failure returns the step and errno; the caller must not exec then.
    ///
    /// # Safety
    /// Changes the calling process's mount namespace: call it only in the command's
    /// process, before exec.
    pub unsafe fn apply(&self) -> Result<(), (&'static [u8], i32)> {
        let errno = || {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        let null = std::ptr::null::<libc::c_char>();
        if libc::unshare(libc::CLONE_NEWNS) < 0 {
            return Err((b"private mount namespace", errno()));
        }
        // Slaves: the host's later mounts still appear, ours never reach the host.
        let root = c"/".as_ptr();
        if libc::mount(
            null,
            root,
            null,
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) < 0
        {
            return Err((b"mount namespace propagation", errno()));
        }
        let dev_null = c"/dev/null".as_ptr();
        for file in &self.files {
            if libc::mount(
                dev_null,
                file.as_ptr(),
                null,
                libc::MS_BIND,
                std::ptr::null(),
            ) < 0
            {
                return Err((b"hiding a file (bind mount of /dev/null)", errno()));
            }
            // nodev: the node cannot even be opened (EACCES), so reads fail as they would
            // under a Landlock denial instead of returning nothing, and writes fail too.
            let locked = libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NODEV
                | libc::MS_NOSUID
                | libc::MS_NOEXEC;
            if libc::mount(null, file.as_ptr(), null, locked, std::ptr::null()) < 0 {
                return Err((b"hiding a file (remount nodev, read-only)", errno()));
            }
        }
        // One tmpfs for every directory: the first is mounted, the others are its binds.
        let Some((first, rest)) = self.dirs.split_first() else {
            return Ok(());
        };
        let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let options = c"mode=000,size=4k,nr_inodes=1";
        let tmpfs = c"tmpfs".as_ptr();
        if libc::mount(tmpfs, first.as_ptr(), tmpfs, flags, options.as_ptr().cast()) < 0 {
            return Err((b"hiding a directory (empty tmpfs)", errno()));
        }
        for dir in rest {
            if libc::mount(
                first.as_ptr(),
                dir.as_ptr(),
                null,
                libc::MS_BIND,
                std::ptr::null(),
            ) < 0
            {
                return Err((b"hiding a directory (bind mount)", errno()));
            }
        }
        Ok(())
    }

    /// One line per hidden path, for `chitti sandbox profile`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let lines = self
            .files
            .iter()
            .map(|f| (f, "/dev/null, nodev (cannot be opened)"));
        let lines = lines.chain(
            self.dirs
                .iter()
                .map(|d| (d, "empty tmpfs, mode 000, read-only")),
        );
        for (path, cover) in lines {
            out.push_str(&format!("  {:<34} {}\n", cover, path.to_string_lossy()));
        }
        out
    }
}

/// A directory gets an empty directory; anything else (a file, a socket, a device) gets
/// /dev/null. A path that vanished is treated as a file: mounting then fails, and the
/// call with it, rather than leaving the path to whatever appears there.
pub fn cover_for(path: &std::path::Path) -> Cover {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Cover::EmptyDir,
        _ => Cover::DevNull,
    }
}
