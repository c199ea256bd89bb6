//! Private TMPDIRs for one-shot landlock calls, reused from a small per-user pool.
//!
//! Why a pool: making and removing a directory is one of the dearer steps of a call where
//! `/tmp` is ext4 (Debian's and Ubuntu's default): an inode and a data block are allocated
//! and freed every time, and after many calls the allocator also skips the inodes freed
//! recently. Measured here, a fixed directory instead of `mkdir` + `rmdir` saved 0.05 ms
//! per call; a slot of the pool costs a few system calls that allocate nothing.
//!
//! Layout: `$TMP/chitti-<uid>/slot-<n>`, the base a directory of the user's own with mode
//! 0700 (checked without following symlinks; anything else and the pool is not used).
//! A call takes the first slot it can lock (`flock`, held by the supervisor until the
//! call is over) that carries the [`CLEAN`] mark, is the user's, has mode 0700 and is
//! empty. The supervisor takes the mark off before it starts the command and puts it back
//! only once every process of the call is dead and the slot is empty again. A slot whose
//! call did not end that way (its supervisor was killed: processes of that call may still
//! be running and able to write there) keeps no mark and is never handed out again: the
//! next call that finds it unlocked renames it aside (`dirty-*`, removed if empty) and
//! makes a fresh directory under the slot's name. Landlock grants write access to a
//! directory's inode, not to its name, so the processes left over can write only the
//! directory moved aside, never the new one; and the pool does not run dry (every call
//! would otherwise pay for a fresh directory, and a session for a fresh ruleset per call).
//!
//! Why the mark cannot be forged from inside: the sandbox's seccomp program refuses every
//! extended-attribute write, and Landlock grants it no write to the base, so it cannot
//! rename slots either. Where the mark cannot be read or written (a filesystem without
//! `user.` attributes), where the policy lets the sandbox write the base, and when every
//! slot is busy, a call gets a fresh directory, removed afterwards, as before.
//!
//! A long-lived session (chat, mcp) keeps one slot locked for as long as it runs and
//! reuses it call after call, checked again each time ([`Slot::reusable`]): its kept
//! Landlock ruleset goes on granting the TMPDIRs of its earlier calls, so those must be
//! its own, never a slot another process could hand out (see `landlock::RulesetCache`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The extended attribute that marks a slot as free to hand out.
pub const CLEAN: &std::ffi::CStr = c"user.chitti.clean";

/// Slots per user: calls running at once beyond this get fresh directories.
const SLOTS: usize = 16;

/// A locked slot: the call's TMPDIR. The lock goes with the last copy of `lock` (chitti
/// drops its own once the supervisor is forked).
#[derive(Debug)]
pub struct Slot {
    pub path: PathBuf,
    lock: OwnedFd,
}

/// A locked, clean slot from `tmp_base`'s pool, or `None` (see the module comment for
/// when). `writable` are the policy's writable paths.
pub fn take(tmp_base: &Path, writable: &[PathBuf]) -> Option<Slot> {
    let euid = unsafe { libc::geteuid() };
    let base = tmp_base.join(format!("chitti-{euid}"));
    if overlaps(&base, writable) {
        return None;
    }
    if !private_base(&base, euid) {
        tracing::debug!(
            "not using the TMPDIR pool: {} is not a private directory of this user",
            base.display()
        );
        return None;
    }
    for n in 0..SLOTS {
        match try_slot(base.join(format!("slot-{n}")), euid) {
            Ok(Some(slot)) => return Some(slot),
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(
                    "not using the TMPDIR pool: no user.* attributes in {}: {e}",
                    base.display()
                );
                return None;
            }
        }
    }
    None
}

/// Whether the sandbox could write the pool's base (a writable path above or below it).
fn overlaps(base: &Path, writable: &[PathBuf]) -> bool {
    writable
        .iter()
        .any(|w| base.starts_with(w) || w.starts_with(base))
}

/// Whether `base` is (or, missing, could be made) a directory of `euid`'s with mode 0700,
/// not a symlink.
fn private_base(base: &Path, euid: u32) -> bool {
    let meta = match base.symlink_metadata() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let made = std::fs::DirBuilder::new().mode(0o700).create(base);
            if made.is_err_and(|e| e.kind() != io::ErrorKind::AlreadyExists) {
                return false;
            }
            match base.symlink_metadata() {
                Ok(meta) => meta,
                Err(_) => return false,
            }
        }
        Err(_) => return false,
        Ok(meta) => meta,
    };
    meta.is_dir() && meta.uid() == euid && meta.mode() & 0o7777 == 0o700
}

/// The slot at `path` if it can be locked and is clean; `Ok(None)` to try the next one,
/// an error when the filesystem keeps no marks (no slot can be trusted then).
fn try_slot(path: PathBuf, euid: u32) -> io::Result<Option<Slot>> {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return Ok(None);
    };
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let open = || unsafe { libc::open(c_path.as_ptr(), flags) };
    // Made only when missing: on every later call the slot exists already.
    let mut fd = open();
    let mut made = false;
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
        made = std::fs::DirBuilder::new().mode(0o700).create(&path).is_ok();
        fd = open();
    }
    if fd < 0 {
        return Ok(None); // a symlink, or not a directory
    }
    let lock = unsafe { OwnedFd::from_raw_fd(fd) };
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(None); // another call's
    }
    // The lock is on the directory opened, which another chitti may have moved aside
    // (see `move_aside`) between the open and the lock: the slot is what its name leads
    // to now. Only a holder of that directory's lock renames it, so this stays true.
    if !still_named(&path, &lock) {
        return Ok(None);
    }
    if !private_to(&lock, euid) {
        return Ok(None);
    }
    // A slot made just now is clean by construction and gets its mark (which also finds
    // out whether marks can be kept here); any other must have it.
    let marked = if made {
        mark_clean(fd)?;
        true
    } else {
        is_marked(fd)?
    };
    if !marked {
        // Unlocked and unmarked: its supervisor is gone without a clean end (see the
        // module comment). Not handed out; a fresh directory takes its name.
        return match move_aside(&path, lock) {
            Ok(()) => try_slot(path, euid),
            Err(_) => Ok(None),
        };
    }
    if has_entries(fd).unwrap_or(true) {
        return Ok(None);
    }
    Ok(Some(Slot { path, lock }))
}

/// Renames the dirty slot at `path` (locked by `lock`, so no other chitti moves it
/// meanwhile) to a name no call is handed, and removes it there if it is empty.
fn move_aside(path: &Path, lock: OwnedFd) -> io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let aside = path.with_file_name(format!("dirty-{name}-{}-{nanos}", std::process::id()));
    // Without replacing anything that might be there: `aside` is unique, but a rename
    // over an existing empty directory would succeed silently. (A raw system call: the
    // musl build's libc and nix do not wrap renameat2.)
    let from = CString::new(path.as_os_str().as_bytes())?;
    let to = CString::new(aside.as_os_str().as_bytes())?;
    const RENAME_NOREPLACE: libc::c_uint = 1;
    let renamed = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            RENAME_NOREPLACE,
        )
    };
    if renamed != 0 {
        return Err(io::Error::last_os_error());
    }
    // Still locked: no one takes it back meanwhile (and anyone who opened it before the
    // rename finds, once they get the lock, that its name leads elsewhere).
    let _ = std::fs::remove_dir(&aside);
    drop(lock);
    Ok(())
}

/// Whether `path` (not followed) leads to the directory open at `dir`.
fn still_named(path: &Path, dir: &OwnedFd) -> bool {
    match (std::fs::symlink_metadata(path), nix::sys::stat::fstat(dir)) {
        (Ok(named), Ok(open)) => (named.dev(), named.ino()) == (open.st_dev, open.st_ino),
        _ => false,
    }
}

/// Whether the directory open at `dir` is `euid`'s with mode 0700.
fn private_to(dir: &OwnedFd, euid: u32) -> bool {
    matches!(nix::sys::stat::fstat(dir),
        Ok(st) if st.st_uid == euid && st.st_mode & 0o7777 == 0o700)
}

fn mark_clean(fd: RawFd) -> io::Result<()> {
    if unsafe { libc::fsetxattr(fd, CLEAN.as_ptr(), std::ptr::null(), 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_marked(fd: RawFd) -> io::Result<bool> {
    let n = unsafe { libc::fgetxattr(fd, CLEAN.as_ptr(), std::ptr::null_mut(), 0) };
    if n >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) => Ok(false),
        _ => Err(e),
    }
}

/// Whether the directory open at `fd` holds anything besides `.` and `..` (read from
/// its start).
fn has_entries(fd: RawFd) -> io::Result<bool> {
    if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
    let mut buf = [0u64; 128];
    loop {
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd,
                buf.as_mut_ptr(),
                std::mem::size_of_val(&buf),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(false);
        }
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
        let mut at = 0;
        while at + 19 < bytes.len() {
            let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
            let name = &bytes[at + 19..at + reclen];
            let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                return Ok(true);
            }
            if reclen == 0 {
                break;
            }
            at += reclen;
        }
    }
}

impl Slot {
    /// The directory's device and inode.
    pub fn id(&self) -> Option<(u64, u64)> {
        let st = nix::sys::stat::fstat(&self.lock).ok()?;
        Some((st.st_dev as u64, st.st_ino as u64))
    }

    /// The lock's descriptor, which the supervisor keeps.
    pub fn fd(&self) -> RawFd {
        self.lock.as_raw_fd()
    }

    /// A second descriptor of the same lock (the lock holds while either is open): for
    /// the supervisor of one call of a session that keeps the slot.
    pub fn try_clone(&self) -> io::Result<Slot> {
        Ok(Slot {
            path: self.path.clone(),
            lock: self.lock.try_clone()?,
        })
    }

    /// Whether a slot this process has kept locked since an earlier call can serve the
    /// next one: the same checks as when it was taken (the user's, mode 0700, marked clean
    /// by the last call's supervisor, empty), and the sandbox still cannot write the base.
    pub fn reusable(&self, writable: &[PathBuf]) -> bool {
        let euid = unsafe { libc::geteuid() };
        let fd = self.lock.as_raw_fd();
        let base = self.path.parent().unwrap_or(&self.path);
        private_to(&self.lock, euid)
            && !overlaps(base, writable)
            && is_marked(fd).unwrap_or(false)
            && !has_entries(fd).unwrap_or(true)
    }

    /// Takes the mark off before the command starts (the supervisor). Only system calls:
    /// it runs in a forked child of a process that may have had other threads.
    pub fn claim(&self) -> Result<(), i32> {
        let fd = self.lock.as_raw_fd();
        if unsafe { libc::fremovexattr(fd, CLEAN.as_ptr()) } == 0 {
            return Ok(());
        }
        // Already off is what claiming wants.
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENODATA) => Ok(()),
            e => Err(e.unwrap_or(libc::EIO)),
        }
    }

    /// Once every process of the call is dead (the supervisor): back to mode 0700,
    /// emptied, marked clean. On failure the slot stays unmarked, and so out of use.
    pub fn release(self) -> Result<(), String> {
        let fd = self.lock.as_raw_fd();
        let failed = |what: &str, e: io::Error| {
            format!(
                "could not clear the private TMPDIR {} ({what}: {e}); it is not reused",
                self.path.display()
            )
        };
        // The command owns its TMPDIR and may have changed its mode.
        let st = nix::sys::stat::fstat(&self.lock).map_err(|e| failed("fstat", e.into()))?;
        if st.st_mode & 0o7777 != 0o700 {
            nix::sys::stat::fchmod(&self.lock, nix::sys::stat::Mode::from_bits_truncate(0o700))
                .map_err(|e| failed("chmod", e.into()))?;
        }
        if has_entries(fd).map_err(|e| failed("listing", e))? {
            crate::sandbox::cleanup::empty_dir(&self.path)?;
            if has_entries(fd).map_err(|e| failed("listing", e))? {
                return Err(failed("emptying", io::Error::other("entries remain")));
            }
        }
        mark_clean(fd).map_err(|e| failed("marking it clean", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn supports_user_xattrs(dir: &Path) -> bool {
        let probe = dir.join("xattr-probe");
        std::fs::create_dir(&probe).unwrap();
        let c = CString::new(probe.as_os_str().as_bytes()).unwrap();
        let ok = unsafe { libc::setxattr(c.as_ptr(), CLEAN.as_ptr(), std::ptr::null(), 0, 0) } == 0;
        std::fs::remove_dir(&probe).unwrap();
        ok
    }

    /// A base for the pool on the filesystem of the test fixtures, or a loud skip.
    fn tmp_base() -> Option<tempfile::TempDir> {
        let root = std::env::var_os("CHITTI_TEST_TMPDIR").map(PathBuf::from);
        let dir = match root {
            Some(root) => tempfile::tempdir_in(root).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        if supports_user_xattrs(dir.path()) {
            Some(dir)
        } else {
            eprintln!(
                "SKIP: {} has no user.* extended attributes",
                dir.path().display()
            );
            None
        }
    }

    /// Where `take` keeps this user's slots under `base`.
    fn pool_dir(base: &tempfile::TempDir) -> PathBuf {
        base.path()
            .join(format!("chitti-{}", unsafe { libc::geteuid() }))
    }

    fn release(slot: Slot) {
        slot.release().unwrap();
    }

    #[test]
    fn a_released_slot_is_handed_out_again_empty_and_private() {
        let Some(base) = tmp_base() else { return };
        let slot = take(base.path(), &[]).expect("a slot");
        let first = slot.path.clone();
        assert_eq!(first.parent(), Some(pool_dir(&base).as_path()));
        slot.claim().unwrap();
        // What a command leaves: files, a directory it closed, a symlink out, a new mode.
        std::fs::write(first.join("f"), "x").unwrap();
        std::fs::create_dir_all(first.join("d/e")).unwrap();
        std::fs::write(first.join("d/e/g"), "x").unwrap();
        std::fs::set_permissions(first.join("d"), std::fs::Permissions::from_mode(0o000)).unwrap();
        std::os::unix::fs::symlink(base.path(), first.join("up")).unwrap();
        std::fs::set_permissions(&first, std::fs::Permissions::from_mode(0o755)).unwrap();
        release(slot);
        assert!(base.path().exists(), "the symlink's target survives");
        let again = take(base.path(), &[]).expect("the slot again");
        assert_eq!(again.path, first);
        assert_eq!(std::fs::read_dir(&again.path).unwrap().count(), 0);
        let mode = std::fs::metadata(&again.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o700);
    }

    /// A session keeps its slot locked between calls: it serves the next call only if
    /// the last one was released (marked clean, emptied) and the policy still cannot
    /// write the pool's base. Its lock holds while any descriptor of it is open.
    #[test]
    fn a_kept_slot_is_reusable_only_after_a_clean_release() {
        let Some(base) = tmp_base() else { return };
        let kept = take(base.path(), &[]).unwrap();
        assert!(kept.reusable(&[]), "a slot just taken is clean");
        // One call: the supervisor's copy claims and releases it.
        let copy = kept.try_clone().unwrap();
        copy.claim().unwrap();
        assert!(!kept.reusable(&[]), "a slot in use is not clean");
        std::fs::write(kept.path.join("f"), "x").unwrap();
        copy.release().unwrap();
        assert!(kept.reusable(&[]));
        assert!(
            take(base.path(), &[]).is_none_or(|other| other.path != kept.path),
            "a kept slot was handed to another call"
        );
        assert!(
            !kept.reusable(&[base.path().to_path_buf()]),
            "the base is writable"
        );
        // A call whose supervisor was killed: the mark stays off.
        let copy = kept.try_clone().unwrap();
        copy.claim().unwrap();
        drop(copy);
        assert!(!kept.reusable(&[]));
        // Written into outside a call: not clean either.
        let other = take(base.path(), &[]).unwrap();
        std::fs::write(other.path.join("mine"), "x").unwrap();
        assert!(!other.reusable(&[]));
    }

    #[test]
    fn a_slot_in_use_is_not_handed_out_twice() {
        let Some(base) = tmp_base() else { return };
        let a = take(base.path(), &[]).unwrap();
        let b = take(base.path(), &[]).unwrap();
        assert_ne!(a.path, b.path);
        release(a);
        release(b);
    }

    /// The directory of a call that did not end cleanly is never handed out again: it is
    /// moved aside (with what was left in it), and a fresh directory, a different inode
    /// that no leftover process's Landlock grant reaches, takes the slot's name.
    #[test]
    fn a_slot_whose_call_did_not_end_cleanly_is_never_reused() {
        use std::os::unix::fs::MetadataExt;
        let Some(base) = tmp_base() else { return };
        let inode = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let slot = take(base.path(), &[]).unwrap();
        let first = slot.path.clone();
        let first_inode = inode(&first);
        slot.claim().unwrap();
        std::fs::write(first.join("left-by-an-orphan"), "x").unwrap();
        // The supervisor was killed: the lock goes, the mark never comes back.
        drop(slot);
        let next = take(base.path(), &[]).unwrap();
        assert_eq!(next.path, first, "the slot's name is used again");
        assert_ne!(
            inode(&next.path),
            first_inode,
            "the unmarked directory was handed out"
        );
        assert_eq!(std::fs::read_dir(&next.path).unwrap().count(), 0);
        // What the old one held is kept, aside, under a name no call is given.
        let aside: Vec<PathBuf> = std::fs::read_dir(pool_dir(&base))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("dirty-slot-0-")
            })
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(inode(&aside[0]), first_inode);
        assert!(aside[0].join("left-by-an-orphan").exists());
        release(next);

        // One that lost its mark but is empty is moved aside and removed (its inode number
        // may then come back for the fresh directory: a new inode all the same, which no
        // Landlock grant on the old one reaches).
        let slot = take(base.path(), &[]).unwrap();
        slot.claim().unwrap();
        drop(slot);
        let next = take(base.path(), &[]).unwrap();
        assert_eq!(next.path, first);
        assert!(next.reusable(&[]), "the fresh directory is marked clean");
        let dirty = std::fs::read_dir(pool_dir(&base))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("dirty-")
            })
            .count();
        assert_eq!(dirty, 1, "the empty one was left aside");
    }

    /// A chitti that opened a dead slot just before another moved it aside, and gets the
    /// lock only afterwards, holds the old directory: it must see that the slot's name now
    /// leads elsewhere (to the other's live TMPDIR), and leave it alone.
    #[test]
    fn a_slot_moved_aside_under_an_open_descriptor_is_not_taken_for_the_new_one() {
        let Some(base) = tmp_base() else { return };
        let slot = take(base.path(), &[]).unwrap();
        let path = slot.path.clone();
        slot.claim().unwrap();
        drop(slot);
        // The slow chitti has opened the dead slot, not yet locked it.
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(fd >= 0);
        let slow = unsafe { OwnedFd::from_raw_fd(fd) };
        assert!(still_named(&path, &slow));
        // The quick one moves it aside and takes a fresh directory under its name.
        let quick = take(base.path(), &[]).unwrap();
        assert_eq!(quick.path, path);
        assert_eq!(
            unsafe { libc::flock(slow.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0,
            "the old directory's lock is free"
        );
        assert!(
            !still_named(&path, &slow),
            "the old directory taken for the new one"
        );
        release(quick);
    }

    #[test]
    fn a_marked_slot_with_something_in_it_is_not_handed_out() {
        let Some(base) = tmp_base() else { return };
        let slot = take(base.path(), &[]).unwrap();
        let first = slot.path.clone();
        release(slot);
        // Written by the user outside any call: not chitti's to delete, not clean either.
        std::fs::write(first.join("mine"), "x").unwrap();
        let next = take(base.path(), &[]).unwrap();
        assert_ne!(next.path, first);
        assert!(first.join("mine").exists());
    }

    #[test]
    fn no_pool_where_the_base_is_not_a_private_directory_of_the_user() {
        let Some(base) = tmp_base() else { return };
        let pool = pool_dir(&base);
        std::fs::create_dir(&pool).unwrap();
        std::fs::set_permissions(&pool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(
            take(base.path(), &[]).is_none(),
            "a base open to others was used"
        );
        std::fs::remove_dir(&pool).unwrap();
        std::os::unix::fs::symlink(base.path(), &pool).unwrap();
        assert!(
            take(base.path(), &[]).is_none(),
            "a symlinked base was followed"
        );
    }

    #[test]
    fn no_pool_where_the_policy_lets_the_sandbox_write_the_base() {
        let Some(base) = tmp_base() else { return };
        assert!(take(base.path(), &[base.path().to_path_buf()]).is_none());
        let pool = pool_dir(&base);
        assert!(take(base.path(), &[pool.join("slot-0")]).is_none());
    }

    #[test]
    fn a_slot_that_is_a_symlink_is_skipped() {
        let Some(base) = tmp_base() else { return };
        let pool = pool_dir(&base);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&pool)
            .unwrap();
        let elsewhere = base.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, pool.join("slot-0")).unwrap();
        let slot = take(base.path(), &[]).unwrap();
        assert_eq!(slot.path, pool.join("slot-1"));
    }
}
