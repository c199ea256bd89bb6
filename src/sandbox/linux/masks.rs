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
//!   away with the last process in it (the command's, or chitti's where chitti made it).
//!
//! Where it can (see `root_dirs`), the namespace also gets a /dev holding only the
//! harmless devices, so that Landlock may grant `/` whole instead of going around /dev,
//! and the directories are hidden by a kept empty directory instead of a fresh tmpfs.
//!
//! The mounts are made in the command's process between fork and exec, before the
//! capabilities are dropped. For a one-shot `sandbox exec`, chitti makes them in its own
//! process instead, once the supervisor is forked (that overlaps the supervisor's start),
//! and the command joins chitti's namespace with `setns` on chitti's pidfd. Where they
//! could be refused (no CAP_SYS_ADMIN, a seccomp filter or LSM profile confining chitti
//! itself), [`available`] says no before planning, and the rules are enumerated as for
//! any other user.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};

use super::root_dirs::KeptDirs;

/// CAP_SYS_ADMIN, which mount namespaces and mounts need.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether hidden paths can be mounted over in this process: root, with CAP_SYS_ADMIN,
/// and nothing confining chitti that could refuse `unshare` or `mount` later (a seccomp
/// filter, an AppArmor or SELinux profile other than unconfined).
pub fn available() -> bool {
    blocker().is_none()
}

/// Why hidden paths cannot be mounted over in this process, if they cannot.
pub fn blocker() -> Option<&'static str> {
    static BLOCKER: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *BLOCKER.get_or_init(find_blocker)
}

fn find_blocker() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root");
    }
    if !super::caps::effective(CAP_SYS_ADMIN) {
        return Some("no CAP_SYS_ADMIN");
    }
    // 0: no seccomp at all. A filter (2) may refuse unshare or mount with any errno.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } != 0 {
        return Some("chitti itself runs under a seccomp filter");
    }
    if !unconfined_by_lsm() {
        return Some("chitti itself runs under an LSM profile");
    }
    None
}

/// The calling process's LSM label: none (no LSM that labels processes), or the label
/// AppArmor gives unconfined processes. Anything else might deny mounts.
fn unconfined_by_lsm() -> bool {
    // One system call where the kernel lists its LSMs (Linux 6.8): with none of those that
    // label processes, there is no label to read. Reading /proc/self/attr/current (to find
    // the same) cost some 20 us of every root call's start.
    if label_lsm_active() == Some(false) {
        return true;
    }
    label_is_unconfined()
}

/// `lsm_list_modules`, the same number on every architecture (Linux 6.8).
const SYS_LSM_LIST_MODULES: libc::c_long = 461;

/// Whether an LSM that gives processes a label (SELinux, Smack, TOMOYO, AppArmor: IDs
/// 101-104 of the kernel's `lsm.h`) is active; `None` where the kernel cannot say.
fn label_lsm_active() -> Option<bool> {
    let mut ids = [0u64; 32];
    let mut size = std::mem::size_of_val(&ids) as u32;
    // SAFETY: the kernel writes at most `size` bytes into `ids`, and the count it returns.
    let listed = unsafe {
        libc::syscall(
            SYS_LSM_LIST_MODULES,
            ids.as_mut_ptr(),
            &mut size as *mut u32,
            0u32,
        )
    };
    let listed = usize::try_from(listed).ok()?;
    Some(ids.get(..listed)?.iter().any(|id| (101..=104).contains(id)))
}

/// What /proc/self/attr/current says: no label, or AppArmor's unconfined one.
fn label_is_unconfined() -> bool {
    match std::fs::read("/proc/self/attr/current") {
        Ok(label) => {
            let label = label.trim_ascii_end();
            label.is_empty() || label == b"unconfined"
        }
        // EINVAL: no LSM provides the attribute. ENOENT: no procfs attribute at all.
        Err(e) => matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)),
    }
}

/// How a Landlock call keeps `deny_read` unreadable: masks where this process may mount
/// over the paths, and the paths the Landlock rules must still go around (none then; all
/// of them where there are no masks). The masks include the minimal /dev where there is
/// one to be had for a call with the writable roots `writable`.
pub fn for_policy<'a>(
    deny_read: &'a [PathBuf],
    writable: &[PathBuf],
) -> Result<(Option<Masks>, &'a [PathBuf]), String> {
    if deny_read.is_empty() || !available() {
        return Ok((None, deny_read));
    }
    let kept = super::root_dirs::for_call(writable);
    Ok((Some(Masks::plan(deny_read, &kept)?), &[]))
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a path with a NUL byte", path.display()))
}

/// The path a [`c_path`] was made from.
fn path_of(c: &CStr) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(c.to_bytes()))
}

/// Read-only, and nothing on it can be opened as a device, run or gain privileges.
const LOCKED_DOWN: MsFlags = MsFlags::MS_RDONLY
    .union(MsFlags::MS_NODEV)
    .union(MsFlags::MS_NOSUID)
    .union(MsFlags::MS_NOEXEC);

/// An absent mount(2) argument (nix's `mount` takes each as an `Option` of a path).
const NONE: Option<&CStr> = None;

/// The mounts that hide a policy's unreadable paths, prepared before fork.
#[derive(Debug, Default)]
pub struct Masks {
    files: Vec<CString>,
    dirs: Vec<CString>,
    /// The directory mounted over /dev (`root_dirs`), if any.
    dev: Option<CString>,
    /// The empty directory mounted over hidden directories (`root_dirs`); else a tmpfs.
    empty: Option<CString>,
    /// Planned by chitti after the fork, where only it makes them (see
    /// [`Masks::made_by_chitti`]): this copy holds none of the hidden paths.
    made_by_chitti: bool,
}

/// What to mount over a path: decided by what it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cover {
    /// /dev/null on a read-only nodev mount: opening it fails with EACCES.
    DevNull,
    /// An empty read-only directory with mode 000.
    EmptyDir,
}

impl Masks {
    /// The masks for `hidden` (canonical paths that exist), with the `kept` directories.
    /// Fails on a path that cannot be passed to the kernel.
    pub fn plan(hidden: &[PathBuf], kept: &KeptDirs) -> Result<Masks, String> {
        let mut masks = Masks {
            dev: kept.dev.as_deref().map(c_path).transpose()?,
            empty: kept.empty.as_deref().map(c_path).transpose()?,
            ..Masks::default()
        };
        for path in hidden {
            // The minimal /dev replaces the host's whole: nothing beneath it is left to
            // hide, and nothing could be mounted there (it is read-only).
            if masks.dev.is_some() && path.starts_with("/dev") {
                continue;
            }
            let c = c_path(path)?;
            match cover_for(path) {
                Cover::DevNull => masks.files.push(c),
                Cover::EmptyDir => masks.dirs.push(c),
            }
        }
        Ok(masks)
    }

    /// Where only chitti makes the masks, and plans them after the fork, when it has found
    /// the credential locations: what the command knows of them before its fork, which is
    /// where the minimal /dev is (the Landlock rules grant it). The command never applies
    /// these: it joins chitti's namespace or fails.
    pub fn made_by_chitti(writable: &[PathBuf]) -> Result<Masks, String> {
        Ok(Masks {
            made_by_chitti: true,
            ..Masks::plan(&[], &super::root_dirs::for_call(writable))?
        })
    }

    /// The kept directories these masks use, for the masks chitti plans after the fork.
    pub fn kept(&self) -> KeptDirs {
        KeptDirs {
            dev: self.private_dev().map(Path::to_path_buf),
            empty: self.empty.as_deref().map(path_of).map(Path::to_path_buf),
        }
    }

    /// The directory mounted over /dev, if any: the Landlock rules grant its devices.
    pub fn private_dev(&self) -> Option<&Path> {
        self.dev.as_deref().map(path_of)
    }

    /// Moves the calling process into a private mount namespace and mounts over every
    /// hidden path: [`Masks::enter`], then [`Masks::cover`]. System calls only (runs
    /// between fork and exec); needs CAP_SYS_ADMIN. On failure returns the step and
    /// errno; the caller must not exec then.
    ///
    /// # Safety
    /// As [`Masks::enter`].
    pub unsafe fn apply(&self) -> Result<(), (&'static [u8], i32)> {
        if self.made_by_chitti {
            return Err((b"masks left to chitti", libc::EPROTO));
        }
        Self::enter()?;
        self.cover()
    }

    /// Moves the calling process into a private mount namespace, whose mounts never reach
    /// the host. System calls only.
    ///
    /// # Safety
    /// Changes the calling thread's mount namespace: call it only in the command's
    /// process, before exec, in a chitti with a single thread that exits after the call,
    /// or on a thread of chitti's that ends once the call has started; the command joins
    /// that namespace (`supervisor::spawn`).
    pub unsafe fn enter() -> Result<(), (&'static [u8], i32)> {
        // nix's calls take `&CStr` as it is: nothing is allocated here.
        let step = |what: &'static [u8]| move |e: Errno| (what, e as i32);
        unshare(CloneFlags::CLONE_NEWNS).map_err(step(b"private mount namespace"))?;
        // Slaves: the host's later mounts still appear, ours never reach the host.
        let slaves = MsFlags::MS_REC | MsFlags::MS_SLAVE;
        mount(NONE, c"/", NONE, slaves, NONE).map_err(step(b"mount namespace propagation"))
    }

    /// Mounts the minimal /dev and over every hidden path, in the namespace [`Masks::enter`]
    /// made. System calls only.
    ///
    /// # Safety
    /// Only in a process that [`Masks::enter`] moved into a namespace of its own.
    pub unsafe fn cover(&self) -> Result<(), (&'static [u8], i32)> {
        let step = |what: &'static [u8]| move |e: Errno| (what, e as i32);
        // Read-only: the directory is kept for the calls after this one. Its nodes can
        // still be opened: the bind keeps its filesystem's flags, checked to allow them.
        if let Some(dev) = &self.dev {
            let minimal = step(b"mounting the minimal /dev");
            let bind = MsFlags::MS_BIND;
            mount(Some(dev.as_c_str()), c"/dev", NONE, bind, NONE).map_err(minimal)?;
            let read_only = MsFlags::MS_REMOUNT
                | bind
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NOEXEC;
            mount(NONE, c"/dev", NONE, read_only, NONE).map_err(minimal)?;
        }
        // The first file gets /dev/null and its flags (a remount); the others are binds of
        // that mount, which keep them. nodev: the node cannot even be opened (EACCES), so
        // reads fail as under a Landlock denial instead of returning nothing.
        if let Some((first, rest)) = self.files.split_first() {
            let first = first.as_c_str();
            let hide = step(b"hiding a file (bind mount of /dev/null)");
            let bind = MsFlags::MS_BIND;
            mount(Some(c"/dev/null"), first, NONE, bind, NONE).map_err(hide)?;
            let locked = MsFlags::MS_REMOUNT | bind | LOCKED_DOWN;
            mount(NONE, first, NONE, locked, NONE).map_err(hide)?;
            for file in rest {
                mount(Some(first), file.as_c_str(), NONE, bind, NONE).map_err(hide)?;
            }
        }
        // Likewise one empty directory for every directory: the kept one, read-only, else
        // a tmpfs that can hold nothing.
        if let Some((first, rest)) = self.dirs.split_first() {
            let first = first.as_c_str();
            let hide = step(b"hiding a directory (empty directory)");
            if let Some(empty) = &self.empty {
                let bind = MsFlags::MS_BIND;
                mount(Some(empty.as_c_str()), first, NONE, bind, NONE).map_err(hide)?;
                let locked = MsFlags::MS_REMOUNT | bind | LOCKED_DOWN;
                mount(NONE, first, NONE, locked, NONE).map_err(hide)?;
            } else {
                let (tmpfs, options) = (Some(c"tmpfs"), Some(c"mode=000,size=4k,nr_inodes=1"));
                mount(tmpfs, first, tmpfs, LOCKED_DOWN, options).map_err(hide)?;
            }
            for dir in rest {
                mount(Some(first), dir.as_c_str(), NONE, MsFlags::MS_BIND, NONE).map_err(hide)?;
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
        let empty = match &self.empty {
            Some(dir) => format!("{} (mode 000, read-only)", dir.to_string_lossy()),
            None => "empty tmpfs, mode 000, read-only".to_string(),
        };
        let lines = lines.chain(self.dirs.iter().map(|d| (d, empty.as_str())));
        for (path, cover) in lines {
            out.push_str(&format!("  {:<34} {}\n", cover, path.to_string_lossy()));
        }
        if let Some(dev) = &self.dev {
            let cover = format!("{} (read-only)", dev.to_string_lossy());
            out.push_str(&format!("  {cover:<34} /dev\n"));
        }
        out
    }
}

/// A directory gets an empty directory; anything else (a file, a socket, a device) gets
/// /dev/null. A path that vanished is treated as a file: mounting then fails, and the
/// call with it, rather than leaving the path to whatever appears there.
fn cover_for(path: &Path) -> Cover {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Cover::EmptyDir,
        _ => Cover::DevNull,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// The kernel's list of LSMs answers as the label itself does: where it lists none
    /// that labels processes, /proc/self/attr/current has no label to give either.
    #[test]
    fn the_list_of_lsms_agrees_with_the_label() {
        match label_lsm_active() {
            Some(false) => assert!(
                label_is_unconfined(),
                "no labelling LSM listed, yet /proc/self/attr/current gives a label"
            ),
            Some(true) => {
                eprintln!("a labelling LSM is active here: the label is read as before")
            }
            None => eprintln!("SKIP: this kernel (before 6.8) cannot list its LSMs"),
        }
        if super::super::kernel_older_than((6, 8)) == Some(false)
            && unsafe { libc::prctl(libc::PR_GET_SECCOMP) } == 0
        {
            assert!(
                label_lsm_active().is_some(),
                "Linux 6.8 or newer lists its LSMs"
            );
        }
    }

    #[test]
    fn directories_get_an_empty_directory_and_everything_else_dev_null() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(cover_for(dir.path()), Cover::EmptyDir);
        assert_eq!(cover_for(&file), Cover::DevNull);
        // Gone by the time of planning: mounting over it fails, and the call with it.
        assert_eq!(cover_for(&dir.path().join("gone")), Cover::DevNull);

        let masks = Masks::plan(
            &[dir.path().to_path_buf(), file.clone()],
            &KeptDirs::default(),
        )
        .unwrap();
        let described = masks.describe();
        for (path, cover) in [(dir.path(), "empty tmpfs"), (file.as_path(), "/dev/null")] {
            let line = described
                .lines()
                .find(|l| l.ends_with(&*path.to_string_lossy()))
                .unwrap_or_else(|| panic!("{} not described:\n{described}", path.display()));
            assert!(line.contains(cover), "{line}");
        }
        // Beneath the minimal /dev, nothing of the host's is left to hide.
        let kept = KeptDirs {
            dev: Some(dir.path().to_path_buf()),
            empty: None,
        };
        let beneath_dev = PathBuf::from("/dev/shm/second-mount-of-keys");
        let masks = Masks::plan(&[beneath_dev.clone(), file.clone()], &kept).unwrap();
        let described = masks.describe();
        assert!(!described.contains("second-mount"), "{described}");
        assert!(described.contains(&*file.to_string_lossy()), "{described}");
        let no_dev = Masks::plan(&[beneath_dev], &KeptDirs::default()).unwrap();
        assert!(no_dev.describe().contains("second-mount"));
        let with_nul = PathBuf::from(OsStr::from_bytes(b"/etc/a\0b"));
        assert!(Masks::plan(&[with_nul], &KeptDirs::default()).is_err());
        assert!(
            for_policy(&[], &[]).unwrap().0.is_none(),
            "nothing to hide, no namespace"
        );
    }

    /// As root (CI), mounts the masks in a forked child for real and judges from both
    /// sides: the child cannot open what is hidden but can its neighbour; this process
    /// still reads the originals and sees none of the child's mounts. As anyone else, no
    /// masks are planned at all (the rules go around the paths instead).
    #[test]
    fn masks_hide_paths_in_the_child_only_and_only_root_gets_them() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        // Two of each: the second file and directory are binds of the first's mount.
        let files = [root.join("secret"), root.join("secret2")];
        let dirs = [root.join("secret.d"), root.join("secret2.d")];
        for file in &files {
            std::fs::write(file, "SECRET").unwrap();
        }
        for dir in &dirs {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("key"), "SECRET").unwrap();
        }
        std::fs::write(root.join("notes"), "NOTES").unwrap();
        let hidden: Vec<PathBuf> = files.iter().chain(&dirs).cloned().collect();

        let Some(masks) = planned_for_root(&hidden) else {
            return;
        };
        // Opened in the child, for reading, then for writing: what each must answer.
        // Root in the child still has its capabilities, so DAC does not stop it: what
        // hides is what the mounts put there. A file is /dev/null on a nodev mount
        // (EACCES); a directory an empty tmpfs (its key is gone: ENOENT).
        let expected: Vec<(PathBuf, i32)> = files
            .iter()
            .map(|f| (f.clone(), libc::EACCES))
            .chain(dirs.iter().map(|d| (d.join("key"), libc::ENOENT)))
            .chain([(root.join("notes"), 0)])
            .collect();
        const OPENS: usize = 10;
        assert_eq!(expected.len() * 2, OPENS);
        let paths: Vec<CString> = expected
            .iter()
            .map(|(p, _)| CString::new(p.as_os_str().as_bytes()).unwrap())
            .collect();
        // The child reports `apply`'s errno, then one errno per open (0: opened).
        let report = report_from_child(|| unsafe {
            let mut report = [0i32; 1 + OPENS];
            report[0] = masks.apply().err().map_or(0, |(_, errno)| errno);
            let modes = [libc::O_RDONLY, libc::O_WRONLY];
            for (i, (path, mode)) in paths.iter().flat_map(|p| modes.map(|m| (p, m))).enumerate() {
                let fd = libc::open(path.as_ptr(), mode | libc::O_CLOEXEC);
                report[1 + i] = if fd < 0 { Errno::last_raw() } else { 0 };
            }
            report
        });
        assert_eq!(
            report[0], 0,
            "applying the masks failed: errno {}",
            report[0]
        );
        for (i, (path, errno)) in expected.iter().enumerate() {
            let (read, write) = (report[1 + 2 * i], report[2 + 2 * i]);
            assert_eq!(
                read,
                *errno,
                "{} opened for reading: {report:?}",
                path.display()
            );
            // The neighbour is opened for writing too: root with capabilities may.
            assert_eq!(
                write,
                *errno,
                "{} opened for writing: {report:?}",
                path.display()
            );
        }

        let keys = dirs.iter().map(|d| d.join("key"));
        for path in files.iter().cloned().chain(keys) {
            assert_eq!(
                std::fs::read(&path).unwrap(),
                b"SECRET",
                "{}",
                path.display()
            );
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(&*root.to_string_lossy()),
            "the child's mounts reached this process:\n{mounts}"
        );
    }

    /// As root, the masks' namespace gets the minimal /dev: its devices can be written,
    /// the host's other devices are not there, and nothing can be made in it; the host's
    /// /dev is untouched.
    #[test]
    fn the_namespace_gets_a_dev_with_the_harmless_devices_only() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().canonicalize().unwrap().join("secret");
        std::fs::write(&secret, "SECRET").unwrap();
        let Some(masks) = planned_for_root(std::slice::from_ref(&secret)) else {
            return;
        };
        assert!(
            masks.private_dev().is_some(),
            "no minimal /dev for root: /var/lib/chitti/dev could not be made or trusted"
        );
        // A device of the host's that is not harmless: a disk, else kernel memory or log.
        let other = std::fs::read_dir("/dev")
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                use std::os::unix::fs::FileTypeExt;
                p.symlink_metadata()
                    .is_ok_and(|m| m.file_type().is_block_device())
            })
            .or_else(|| {
                ["/dev/mem", "/dev/kmsg", "/dev/console"]
                    .map(PathBuf::from)
                    .into_iter()
                    .find(|p| p.exists())
            })
            .expect("no disk, /dev/mem, /dev/kmsg or /dev/console on this host to look for");
        let other_c = CString::new(other.as_os_str().as_bytes()).unwrap();
        // [apply, write /dev/null, open the other device, make /dev/new]: errno or 0.
        let report = report_from_child(|| unsafe {
            let errno = |ret: i32| if ret < 0 { Errno::last_raw() } else { 0 };
            let applied = masks.apply().err().map_or(0, |(_, e)| e);
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            let null = if null >= 0 && libc::write(null, b"x".as_ptr().cast(), 1) == 1 {
                0
            } else {
                Errno::last_raw().max(1)
            };
            let other = errno(libc::open(
                other_c.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            ));
            let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC;
            let made = errno(libc::open(c"/dev/new".as_ptr(), flags, 0o600));
            [applied, null, other, made]
        });
        assert_eq!(
            report,
            [0, 0, libc::ENOENT, libc::EROFS],
            "[apply, write /dev/null, open {}, make /dev/new]",
            other.display()
        );
        assert!(other.exists(), "{} gone from the host", other.display());
        assert!(!Path::new("/dev/new").exists());
    }

    /// On most hosts / is a shared mount, and a mount made in a copy of the namespace
    /// would propagate back unless the copy is made a slave first. / here may be private,
    /// so the test makes a shared mount of its own: a child with a namespace of its own
    /// (this process's untouched) mounts a shared tmpfs holding the file to hide; a
    /// grandchild applies the masks; the child must still read the file afterwards.
    #[test]
    fn masks_do_not_propagate_out_of_the_namespace() {
        if !nix::unistd::geteuid().is_root() {
            assert!(!available(), "a user cannot mount");
            return;
        }
        if !available() {
            eprintln!("SKIP: root here may not mount (no CAP_SYS_ADMIN, or confined)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        let secret = dir.join("secret");
        let masks = Masks::plan(std::slice::from_ref(&secret), &KeptDirs::default()).unwrap();
        let c_dir = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let c_secret = CString::new(secret.as_os_str().as_bytes()).unwrap();
        // [step that failed (0: none), errno, the grandchild's apply errno]
        let report = report_from_child(|| unsafe { propagation_child(&masks, &c_dir, &c_secret) });
        assert_eq!(
            report[2], 0,
            "applying the masks failed: errno {}",
            report[2]
        );
        assert_eq!(
            report[..2],
            [0, 0],
            "step {} failed with errno {} (step 4: the file was hidden outside the masks' \
             namespace, so the mount propagated)",
            report[0],
            report[1]
        );
    }

    /// The masks planned for `hidden`, to apply: as root only. As a user, checks that
    /// none are planned (the rules go around the paths instead) and returns None, as it
    /// does (saying SKIP) where root may not mount here.
    fn planned_for_root(hidden: &[PathBuf]) -> Option<Masks> {
        let (planned, around) = for_policy(hidden, &[]).unwrap();
        assert_eq!(
            around.is_empty(),
            planned.is_some(),
            "masks or rules, not both"
        );
        if !nix::unistd::geteuid().is_root() {
            assert!(planned.is_none(), "masks planned for a user");
            return None;
        }
        if planned.is_none() {
            eprintln!("SKIP: root here may not mount (no CAP_SYS_ADMIN, or confined)");
        }
        planned
    }

    /// Runs `child` in a forked process and returns what it reported. The child must make
    /// system calls only: this process has other threads, whose locks it inherits.
    fn report_from_child<const N: usize>(child: impl FnOnce() -> [i32; N]) -> [i32; N] {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let report = child();
            unsafe {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&write_end);
                libc::write(fd, report.as_ptr().cast(), std::mem::size_of_val(&report));
                libc::_exit(0);
            }
        }
        drop(write_end);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(read_end), &mut bytes).unwrap();
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let report: Vec<i32> = bytes
            .chunks_exact(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        report
            .try_into()
            .unwrap_or_else(|r| panic!("the child did not report (wait status {status:#x}): {r:?}"))
    }

    /// The child of the propagation test: syscalls only (forked from a threaded process).
    unsafe fn propagation_child(masks: &Masks, dir: &CString, secret: &CString) -> [i32; 3] {
        let errno = || Errno::last_raw();
        let dir = dir.as_c_str();
        let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
        if unshare(CloneFlags::CLONE_NEWNS).is_err()
            || mount(NONE, c"/", NONE, private, NONE).is_err()
        {
            return [1, errno(), 0];
        }
        let tmpfs = Some(c"tmpfs");
        if mount(tmpfs, dir, tmpfs, MsFlags::empty(), Some(c"size=64k")).is_err()
            || mount(NONE, dir, NONE, MsFlags::MS_SHARED, NONE).is_err()
        {
            return [2, errno(), 0];
        }
        let fd = libc::open(
            secret.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 || libc::write(fd, b"SECRET".as_ptr().cast(), 6) != 6 {
            return [3, errno(), 0];
        }
        libc::close(fd);
        let grandchild = libc::fork();
        if grandchild == 0 {
            libc::_exit(match masks.apply() {
                Ok(()) => 0,
                Err((_, errno)) => errno.clamp(1, 255),
            });
        }
        let mut status = 0;
        libc::waitpid(grandchild, &mut status, 0);
        let applied = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        };
        // Still the file, not something mounted over it.
        let fd = libc::open(secret.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return [4, errno(), applied];
        }
        let mut buf = [0u8; 16];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        if n != 6 || &buf[..6] != b"SECRET" {
            return [4, 0, applied];
        }
        [0, 0, applied]
    }
}
