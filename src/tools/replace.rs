//! Giving a file its whole new content without leaving it half-done.
//!
//! An existing file is replaced by a complete copy written beside it and renamed over it:
//! a write that fails (a full disk, a quota, a file size limit) leaves the old file as it
//! was, a reader never sees it half-written, and the copy is on disk before it takes the
//! name (some filesystems only report a lack of space when the data is flushed, and a
//! crash just after a rename must not leave an empty file).
//!
//! A copy must be what the file was, content aside: its permission bits, its owner and
//! group (given back where chitti may, as root may) and the same extended attributes. A
//! new file inherits a directory's default ACL and security label, not the old file's,
//! so the two lists are compared. Where a copy cannot be made faithful, or cannot be made
//! at all (a directory chitti may not add to, a file that is a mount point), the file is
//! rewritten in place, as most editors do, after reserving the space for the new content;
//! only a failure other than a lack of space can then leave it cut short or mixed.
//!
//! Everything happens through a descriptor of the file's directory taken when the file
//! was opened, so a directory swapped for a link meanwhile cannot move the copy elsewhere.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

/// Why a write failed, and what became of the file.
#[derive(Debug)]
pub struct WriteFailed {
    pub error: io::Error,
    /// What became of the file, in words for the model.
    pub left: &'static str,
}

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", self.error, self.left)
    }
}

/// Gives `file`, named `name` in the directory `dir`, the content `content`. `created`:
/// this call created it (empty), and removes it again if the write fails.
pub fn write_whole(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    file: &mut File,
    created: bool,
    content: &[u8],
) -> Result<(), WriteFailed> {
    let failed = |error, left| WriteFailed { error, left };
    if created {
        return file.write_all(content).map_err(|e| {
            let left = match remove_if_same(dir, name, file) {
                Ok(()) => "it was not created",
                Err(_) => "a partly written file may be left in its place",
            };
            failed(e, left)
        });
    }
    match replace_by_copy(dir, name, file, content) {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        Err(e) => return Err(failed(e, "it was left as it was")),
    }
    let len = content.len() as u64;
    file.rewind()
        .and_then(|()| reserve(file, len))
        .map_err(|e| failed(e, "it was left as it was"))?;
    // Over the old content, then cut to length: truncating first would free the space
    // just reserved.
    file.write_all(content)
        .and_then(|()| file.set_len(len))
        .map_err(|e| {
            failed(
                e,
                "it was rewritten in place and may now be cut short or mixed with its old text",
            )
        })
}

/// Writes `content` to a new file in `dir` and renames it over `name`. False, with
/// nothing changed, when a faithful copy could not be made there.
fn replace_by_copy(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    file: &File,
    content: &[u8],
) -> io::Result<bool> {
    let was = file.metadata()?;
    let Ok((mut copy, temp)) = create_temp(dir) else {
        return Ok(false);
    };
    let replaced = (|| {
        let own = copy.metadata()?;
        if (own.uid(), own.gid()) != (was.uid(), was.gid())
            && std::os::unix::fs::fchown(&copy, Some(was.uid()), Some(was.gid())).is_err()
        {
            return Ok(false);
        }
        // Permission bits only: set-user-ID and set-group-ID are not carried over to
        // content chitti wrote.
        let mode = std::fs::Permissions::from_mode(was.mode() & 0o777);
        if copy.set_permissions(mode).is_err() {
            return Ok(false);
        }
        // After the mode, which changes an ACL's mask.
        let same = match (extended_attributes(file), extended_attributes(&copy)) {
            (Some(old), Some(new)) => old == new,
            _ => false,
        };
        if !same {
            return Ok(false);
        }
        copy.write_all(content)?;
        copy.sync_data()?;
        match nix::fcntl::renameat(dir, temp.as_os_str(), dir, name) {
            // A mount point (a file bind-mounted into a container) cannot be replaced.
            Err(Errno::EBUSY) => Ok(false),
            renamed => renamed.map(|()| true).map_err(io::Error::from),
        }
    })();
    if !matches!(replaced, Ok(true)) {
        let _ = nix::unistd::unlinkat(dir, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    replaced
}

/// A new empty file in `dir`, readable by its owner only, under a name that says it is
/// chitti's and that nothing else can guess (a sandboxed command could otherwise take
/// the next names first).
fn create_temp(dir: BorrowedFd<'_>) -> io::Result<(File, OsString)> {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut tries = 0;
    loop {
        // RandomState's keys come from the system's random source.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let name = OsString::from(format!(
            ".chitti-write-{}-{:016x}",
            std::process::id(),
            hasher.finish()
        ));
        match nix::fcntl::openat(
            dir,
            name.as_os_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => return Ok((File::from(fd), name)),
            Err(Errno::EEXIST) if tries < 8 => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Removes `name` from `dir` if it still names `file`.
fn remove_if_same(dir: BorrowedFd<'_>, name: &OsStr, file: &File) -> io::Result<()> {
    let held = file.metadata()?;
    remove_if_id(
        dir,
        name,
        (held.dev(), held.ino()),
        UnlinkatFlags::NoRemoveDir,
    )
}

/// Removes the empty directory `name` from `dir` if it is still the one identified by
/// `id` (device, inode): one that something else put there, or filled, stays.
pub fn remove_dir_if_same(dir: BorrowedFd<'_>, name: &OsStr, id: (u64, u64)) -> io::Result<()> {
    remove_if_id(dir, name, id, UnlinkatFlags::RemoveDir)
}

fn remove_if_id(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    id: (u64, u64),
    flags: UnlinkatFlags,
) -> io::Result<()> {
    let named = nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if (named.st_dev as u64, named.st_ino as u64) != id {
        return Err(io::Error::other("the name now leads to something else"));
    }
    Ok(nix::unistd::unlinkat(dir, name, flags)?)
}

/// Makes sure the first `len` bytes of `file` have space on disk, so that writing them
/// cannot fail for the lack of it (where the filesystem can promise that).
fn reserve(file: &File, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if len > 0 {
        use nix::fcntl::{fallocate, FallocateFlags};
        use std::os::fd::AsFd;
        match fallocate(file.as_fd(), FallocateFlags::empty(), 0, len as libc::off_t) {
            Ok(()) | Err(Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let _ = (file, len);
    Ok(())
}

/// The file's extended attributes, names with values, sorted; `None` when they cannot
/// all be read (a caller then assumes they differ).
fn extended_attributes(file: &File) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let fd = file.as_raw_fd();
    let names = match read_sized(|buf, size| unsafe { xattr::list(fd, buf, size) }) {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Some(Vec::new()),
        Err(_) => return None,
    };
    let mut all = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let c_name = std::ffi::CString::new(name).ok()?;
        let value =
            read_sized(|buf, size| unsafe { xattr::get(fd, c_name.as_ptr(), buf, size) }).ok()?;
        all.push((name.to_vec(), value));
    }
    all.sort();
    Some(all)
}

/// Calls `read` once for the size and once for the bytes (the usual two steps of the
/// xattr calls); a size that changed in between is an error, not a retry.
fn read_sized(read: impl Fn(*mut libc::c_char, usize) -> isize) -> io::Result<Vec<u8>> {
    let size = read(std::ptr::null_mut(), 0);
    if size < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; size as usize];
    if size == 0 {
        return Ok(buf);
    }
    let got = read(buf.as_mut_ptr().cast(), buf.len());
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(got as usize);
    Ok(buf)
}

/// The xattr calls, whose signatures differ between Linux and macOS.
mod xattr {
    #[cfg(target_os = "linux")]
    pub unsafe fn list(fd: libc::c_int, buf: *mut libc::c_char, size: usize) -> isize {
        libc::flistxattr(fd, buf, size)
    }

    #[cfg(target_os = "linux")]
    pub unsafe fn get(
        fd: libc::c_int,
        name: *const libc::c_char,
        buf: *mut libc::c_char,
        size: usize,
    ) -> isize {
        libc::fgetxattr(fd, name, buf.cast(), size)
    }

    #[cfg(not(target_os = "linux"))]
    pub unsafe fn list(fd: libc::c_int, buf: *mut libc::c_char, size: usize) -> isize {
        libc::flistxattr(fd, buf, size, 0)
    }

    #[cfg(not(target_os = "linux"))]
    pub unsafe fn get(
        fd: libc::c_int,
        name: *const libc::c_char,
        buf: *mut libc::c_char,
        size: usize,
    ) -> isize {
        libc::fgetxattr(fd, name, buf.cast(), size, 0, 0)
    }
}
