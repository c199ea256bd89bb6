//! Listing a directory without the C library's `opendir`.
//!
//! std's `read_dir` goes through `opendir`, whose buffer musl allocates with its own
//! allocator, which maps a fresh page for it and unmaps it again at `closedir`: an
//! `mmap` and a `munmap` (a TLB flush, an interrupt to the other CPU on a virtual machine)
//! for every directory a sandboxed call lists. Here the entries are read with getdents64
//! into a buffer from Rust's allocator. (Not one on the stack: the compiler probes every
//! page of a stack frame larger than a page, so 16 KiB there meant four page faults each
//! time a deeper caller first reached them, written or not.)

use std::ffi::OsStr;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    Symlink,
    Other,
}

/// Reads `dir` with getdents64, calling `f` with its descriptor and each entry but `.`
/// and `..` until `f` says stop (false). `None` if the directory could not be opened or
/// read to the end; `Some(false)` if `f` stopped it.
#[cfg(target_os = "linux")]
fn read_entries(
    dir: &Path,
    mut f: impl FnMut(&std::os::fd::OwnedFd, &rustix::fs::RawDirEntry) -> bool,
) -> Option<bool> {
    use rustix::fs::{Mode, OFlags, RawDir};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty()).ok()?;
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut entries = RawDir::new(&fd, buf.spare_capacity_mut());
    while let Some(entry) = entries.next() {
        let entry = entry.ok()?;
        if matches!(entry.file_name().to_bytes(), b"." | b"..") {
            continue;
        }
        if !f(&fd, &entry) {
            return Some(false);
        }
    }
    Some(true)
}

/// Calls `f` with the name and kind of every entry of `dir` but `.` and `..`, in the
/// directory's order; false if `dir` could not be listed (whole). An unreadable directory
/// has no entries; an entry whose kind cannot be learnt (it vanished meanwhile) is
/// skipped.
#[cfg(target_os = "linux")]
pub fn for_each_entry(dir: &Path, mut f: impl FnMut(&OsStr, EntryKind)) -> bool {
    use rustix::fs::FileType;
    use std::os::unix::ffi::OsStrExt;
    read_entries(dir, |fd, entry| {
        let name = entry.file_name();
        let file_type = match entry.file_type() {
            // Some filesystems do not say in the listing: ask, without following.
            FileType::Unknown => {
                match rustix::fs::statat(fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    Err(_) => return true,
                }
            }
            known => known,
        };
        let kind = match file_type {
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        f(OsStr::from_bytes(name.to_bytes()), kind);
        true
    })
    .is_some()
}

/// The names of the entries of `dir` but `.` and `..`, or `None` if it cannot be listed
/// whole or holds more than `limit`.
#[cfg(target_os = "linux")]
pub fn names(dir: &Path, limit: usize) -> Option<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    let whole = read_entries(dir, |_, entry| {
        if out.len() == limit {
            return false;
        }
        out.push(OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string());
        true
    })?;
    whole.then_some(out)
}

#[cfg(not(target_os = "linux"))]
pub fn names(dir: &Path, limit: usize) -> Option<Vec<std::ffi::OsString>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        if out.len() == limit {
            return None;
        }
        out.push(entry.ok()?.file_name());
    }
    Some(out)
}

#[cfg(not(target_os = "linux"))]
pub fn for_each_entry(dir: &Path, mut f: impl FnMut(&OsStr, EntryKind)) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for entry in entries.flatten() {
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        let kind = if file_type.is_symlink() {
            EntryKind::Symlink
        } else if file_type.is_dir() {
            EntryKind::Dir
        } else {
            EntryKind::Other
        };
        f(entry.file_name().as_os_str(), kind);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_entry_with_its_kind_but_dot_and_dot_dot() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        std::os::unix::fs::symlink("d", dir.path().join("l")).unwrap();
        let mut seen = Vec::new();
        for_each_entry(dir.path(), |name, kind| {
            seen.push((name.to_string_lossy().into_owned(), kind))
        });
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            [
                ("d".to_string(), EntryKind::Dir),
                ("f".to_string(), EntryKind::Other),
                ("l".to_string(), EntryKind::Symlink),
            ]
        );
        let mut missing = 0;
        for_each_entry(&dir.path().join("nope"), |_, _| missing += 1);
        assert_eq!(missing, 0);
    }

    #[test]
    fn names_are_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        let mut names = names(dir.path(), 3).expect("three entries fit a limit of three");
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(super::names(dir.path(), 2), None, "more than the limit");
        assert_eq!(
            super::names(&dir.path().join("nope"), 10),
            None,
            "no directory"
        );
        assert_eq!(
            super::names(&dir.path().join("a"), 10),
            None,
            "not a directory"
        );
    }
}
