//! Changing files in directories the sandbox could write, never through a symbolic link.
//!
//! After a call chitti puts protected paths back (`protect`). They lie in writable roots,
//! and so do the directories on the way to them: the sandboxed command may have swapped
//! one of those for a symlink to anywhere on the host. A repair made by path would follow
//! it and write wherever it points, with chitti's rights (root's, perhaps). Here a path is
//! opened one component at a time with `O_NOFOLLOW`, and every change is made relative to
//! the descriptor of the directory that holds the entry: a symlink on the way is an error
//! (ELOOP or ENOTDIR), and the entry itself is never followed. Another call's sandbox,
//! running at the same time in the same tree, cannot redirect a change either: a directory
//! descriptor stays the directory it was opened as.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// An entry of a directory: the directory, opened without following a symlink on the way,
/// and the entry's name in it.
pub struct Entry<'a> {
    dir: DirFd<'a>,
    name: OsString,
}

/// A directory descriptor of the entry's own, or one it borrows (a listing's, a
/// [`Locator`]'s), which saves a `dup` and a `close` per entry.
enum DirFd<'a> {
    Owned(OwnedFd),
    Borrowed(BorrowedFd<'a>),
}

impl AsFd for DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Owned(fd) => fd.as_fd(),
            DirFd::Borrowed(fd) => *fd,
        }
    }
}

/// What is at an entry now (never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub kind: FileType,
    /// Permission bits, setuid/setgid/sticky included.
    pub mode: u32,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// How many names the file has.
    pub links: u64,
}

impl Found {
    // st_nlink is u64 on x86_64 but u32 on some targets.
    #[allow(clippy::unnecessary_cast)]
    fn of(st: &rustix::fs::Stat) -> Found {
        Found {
            kind: FileType::from_raw_mode(st.st_mode),
            mode: st.st_mode & 0o7777,
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            links: st.st_nlink as u64,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.kind == FileType::RegularFile
    }
}

fn root() -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens a directory entry of `dir` to walk through (`O_PATH`): refused unless it is a
/// directory itself, not a symlink to one.
fn step(dir: BorrowedFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The names of `path`'s components; only plain names, no `.` or `..` (every path here is
/// canonical, so one that is not was not made by chitti).
fn names(path: &Path) -> io::Result<Vec<&OsStr>> {
    path.components()
        .filter(|c| !matches!(c, Component::RootDir))
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain path", path.display()),
            )),
        })
        .collect()
}

/// Opens the directory `path` names (absolute, plain names only) for walking through.
fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    let mut dir = root()?;
    for name in names(path)? {
        dir = step(dir.as_fd(), name)?;
    }
    Ok(dir)
}

/// The parent directory and name of `path`, which must be absolute and name an entry.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    match (path.is_absolute(), path.parent(), path.file_name()) {
        (true, Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} does not name an entry by an absolute path",
                path.display()
            ),
        )),
    }
}

impl<'a> Entry<'a> {
    /// The entry `path` names: an absolute path whose directories are all real ones.
    pub fn locate(path: &Path) -> io::Result<Entry<'static>> {
        let (parent, name) = split(path)?;
        Ok(Entry {
            dir: DirFd::Owned(open_dir_path(parent)?),
            name: name.to_os_string(),
        })
    }

    /// The entry `relative` names inside the directory `base`.
    pub fn beneath(base: BorrowedFd<'a>, relative: &Path) -> io::Result<Entry<'a>> {
        let names = names(relative)?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} names no entry", relative.display()),
            ));
        };
        let mut dir = DirFd::Borrowed(base);
        for name in dirs {
            dir = DirFd::Owned(step(dir.as_fd(), name)?);
        }
        Ok(Entry {
            dir,
            name: last.to_os_string(),
        })
    }

    /// The entry `name` of the directory `dir` (opened by this module).
    pub fn in_dir(dir: BorrowedFd<'a>, name: &OsStr) -> Entry<'a> {
        Entry {
            dir: DirFd::Borrowed(dir),
            name: name.to_os_string(),
        }
    }

    /// The entry itself, held to be found again after a rename (`O_PATH`, not followed).
    pub fn open_path(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// What is there now; `None` when nothing is.
    pub fn stat(&self) -> io::Result<Option<Found>> {
        match rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Found::of(&st))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The regular file here (anything else is refused): what it is, and its contents, at
    /// most `max` bytes (more is an error).
    pub fn read_file(&self, max: u64) -> io::Result<(Found, Vec<u8>)> {
        let fd = rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let found = Found::of(&rustix::fs::fstat(&fd)?);
        if !found.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        if found.size > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "too large"));
        }
        // Sized to the file plus one byte: two reads, the second finding the end.
        let mut bytes = Vec::with_capacity(found.size as usize + 1);
        std::fs::File::from(fd)
            .take(max + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "too large"));
        }
        Ok((found, bytes))
    }

    /// Puts a regular file with `bytes` and `mode` here, by renaming a finished sibling
    /// over whatever is there (a directory is removed first): a reader sees the old entry
    /// or the new file, never a half-written one.
    pub fn replace_file(&self, bytes: &[u8], mode: u32) -> io::Result<()> {
        let staged = self.stage(bytes, mode)?;
        let renamed =
            rustix::fs::renameat(&self.dir, &staged, &self.dir, &self.name).or_else(|e| match e {
                rustix::io::Errno::ISDIR
                | rustix::io::Errno::NOTEMPTY
                | rustix::io::Errno::EXIST => {
                    self.remove()?;
                    Ok(rustix::fs::renameat(
                        &self.dir, &staged, &self.dir, &self.name,
                    )?)
                }
                e => Err(io::Error::from(e)),
            });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, &staged, AtFlags::empty());
        }
        renamed
    }

    /// A new file beside this entry holding `bytes`, with `mode`; returns its name.
    fn stage(&self, bytes: &[u8], mode: u32) -> io::Result<OsString> {
        for attempt in 0..16u32 {
            let mut name = OsString::from(".chitti-restore-");
            name.push(format!("{}-{attempt}-", super::unguessable()));
            name.push(&self.name);
            let fd = match rustix::fs::openat(
                &self.dir,
                &name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            };
            let written = (|| {
                let mut file = std::fs::File::from(fd);
                file.write_all(bytes)?;
                // The mode is set on the descriptor: the umask does not apply.
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
                Ok::<_, io::Error>(())
            })();
            if let Err(e) = written {
                let _ = rustix::fs::unlinkat(&self.dir, &name, AtFlags::empty());
                return Err(e);
            }
            return Ok(name);
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free name for a staging file",
        ))
    }

    /// Removes whatever is here, a directory with everything in it; a symlink is removed,
    /// not followed. Nothing there is not an error.
    pub fn remove(&self) -> io::Result<()> {
        match self.stat()? {
            None => Ok(()),
            Some(found) if found.is_dir() => remove_tree(self.dir.as_fd(), &self.name),
            Some(_) => Ok(rustix::fs::unlinkat(
                &self.dir,
                &self.name,
                AtFlags::empty(),
            )?),
        }
    }

    /// Renames this entry to `name` in the same directory (a symlink is moved, not followed).
    pub fn rename_within(&self, name: &OsStr) -> io::Result<()> {
        Ok(rustix::fs::renameat(
            &self.dir, &self.name, &self.dir, name,
        )?)
    }

    /// Moves this entry to `to`'s place (which must be free).
    pub fn rename_to(&self, to: &Entry) -> io::Result<()> {
        Ok(rustix::fs::renameat(
            &self.dir, &self.name, &to.dir, &to.name,
        )?)
    }

    pub fn make_dir(&self, mode: u32) -> io::Result<()> {
        rustix::fs::mkdirat(&self.dir, &self.name, Mode::from_raw_mode(0o700))?;
        self.set_mode(mode)
    }

    /// Sets the permission bits of the file or directory here; a symlink is refused.
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        let fd = self.open_path()?;
        if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) == FileType::Symlink {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        // An O_PATH descriptor cannot be fchmod'ed; its /proc link reaches the same inode
        // (and works on a mode-000 directory, which cannot be opened for reading).
        Ok(rustix::fs::chmod(
            format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)).as_str(),
            Mode::from_raw_mode(mode),
        )?)
    }

    /// The directory here, opened for listing (a symlink is refused).
    pub fn open_dir(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }
}

/// Locates entries, keeping the last parent directory open: protected paths come in
/// groups (`.git/config`, `.git/hooks`, ...), and walking from `/` for each costs a few
/// system calls per component. Use it only while nothing is being moved: a kept descriptor
/// stays the directory it was opened as, wherever that has gone since.
#[derive(Default)]
pub struct Locator {
    last: Option<(std::path::PathBuf, OwnedFd)>,
}

impl Locator {
    pub fn locate(&mut self, path: &Path) -> io::Result<Entry<'_>> {
        let (parent, name) = split(path)?;
        if !matches!(&self.last, Some((kept, _)) if kept == parent) {
            self.last = Some((parent.to_path_buf(), open_dir_path(parent)?));
        }
        let (_, dir) = self.last.as_ref().expect("set above");
        Ok(Entry::in_dir(dir.as_fd(), name))
    }
}

/// Removes the directory `name` of `parent` with everything in it, holding two directory
/// descriptors at most however deep it goes (a command can plant a tree deeper than the
/// descriptors a process may hold open): down by name, back up through `..`, each step up
/// checked against the directory it came down from, so that a tree moved meanwhile ends
/// the removal instead of leading it elsewhere.
fn remove_tree(parent: BorrowedFd, name: &OsStr) -> io::Result<()> {
    let open = |dir: BorrowedFd, name: &OsStr| {
        rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let id = |dir: &OwnedFd| rustix::fs::fstat(dir).map(|st| (st.st_dev, st.st_ino));
    // The names taken below `name`, each with the directory it was taken in.
    let mut below: Vec<(OsString, (u64, u64))> = Vec::new();
    let mut dir = open(parent, name)?;
    let mut dir_id = id(&dir)?;
    loop {
        // Everything but directories goes at once; then down into a directory, if any.
        let mut sub = None;
        for entry in list(&dir)? {
            match rustix::fs::statat(&dir, &entry, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                    sub = Some(entry);
                }
                Ok(_) => rustix::fs::unlinkat(&dir, &entry, AtFlags::empty())?,
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(sub) = sub {
            let down = open(dir.as_fd(), &sub)?;
            below.push((sub, dir_id));
            dir_id = id(&down)?;
            dir = down;
            continue;
        }
        // Empty: out of it, and it goes.
        let Some((emptied, up_id)) = below.pop() else {
            break;
        };
        let up = open(dir.as_fd(), OsStr::new(".."))?;
        if id(&up)? != up_id {
            return Err(io::Error::other(
                "a directory was moved while chitti was removing it",
            ));
        }
        rustix::fs::unlinkat(&up, &emptied, AtFlags::REMOVEDIR)?;
        dir = up;
        dir_id = up_id;
    }
    drop(dir);
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// The names in a directory opened with [`Entry::open_dir`], `.` and `..` left out.
pub fn list(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(&name).to_os_string());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// A tree with `real/file`, `outside/file` and `link -> outside`.
    fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::create_dir(root.join("outside")).unwrap();
        std::fs::write(root.join("real/file"), "real").unwrap();
        std::fs::write(root.join("outside/file"), "outside").unwrap();
        symlink(root.join("outside"), root.join("link")).unwrap();
        (dir, root)
    }

    fn outside_untouched(root: &Path) {
        assert_eq!(
            std::fs::read(root.join("outside/file")).unwrap(),
            b"outside"
        );
    }

    #[test]
    fn a_symlinked_directory_on_the_way_is_refused() {
        let (_dir, root) = tree();
        assert!(Entry::locate(&root.join("real/file")).is_ok());
        let err = Entry::locate(&root.join("link/file")).err().unwrap();
        assert!(
            matches!(err.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)),
            "{err}"
        );
    }

    #[test]
    fn the_last_component_is_never_followed() {
        let (_dir, root) = tree();
        let link = Entry::locate(&root.join("link")).unwrap();
        assert_eq!(link.stat().unwrap().unwrap().kind, FileType::Symlink);
        assert!(link.open_dir().is_err());
        assert!(link.set_mode(0o777).is_err());
        // Replacing and removing act on the link itself.
        link.replace_file(b"restored", 0o640).unwrap();
        assert_eq!(std::fs::read(root.join("link")).unwrap(), b"restored");
        assert_eq!(
            std::fs::metadata(root.join("link"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o640
        );
        outside_untouched(&root);
        symlink(root.join("outside"), root.join("link2")).unwrap();
        Entry::locate(&root.join("link2"))
            .unwrap()
            .remove()
            .unwrap();
        assert!(std::fs::symlink_metadata(root.join("link2")).is_err());
        outside_untouched(&root);
    }

    #[test]
    fn a_file_behind_a_symlink_is_not_read() {
        let (_dir, root) = tree();
        symlink(root.join("outside/file"), root.join("real/link")).unwrap();
        assert!(Entry::locate(&root.join("real/link"))
            .unwrap()
            .read_file(100)
            .is_err());
        assert_eq!(
            Entry::locate(&root.join("real/file"))
                .unwrap()
                .read_file(100)
                .unwrap()
                .1,
            b"real"
        );
        assert!(Entry::locate(&root.join("real/file"))
            .unwrap()
            .read_file(3)
            .is_err());
    }

    #[test]
    fn a_directory_is_removed_with_its_contents_but_not_what_its_links_point_at() {
        let (_dir, root) = tree();
        std::fs::create_dir(root.join("real/sub")).unwrap();
        symlink(root.join("outside"), root.join("real/sub/link")).unwrap();
        std::fs::write(root.join("real/sub/f"), "x").unwrap();
        Entry::locate(&root.join("real")).unwrap().remove().unwrap();
        assert!(std::fs::symlink_metadata(root.join("real")).is_err());
        outside_untouched(&root);
    }

    #[test]
    fn a_mode_000_directory_gets_its_mode_back() {
        let (_dir, root) = tree();
        let entry = Entry::locate(&root.join("real")).unwrap();
        entry.set_mode(0o000).unwrap();
        entry.set_mode(0o755).unwrap();
        assert_eq!(entry.stat().unwrap().unwrap().mode, 0o755);
        assert_eq!(
            list(&entry.open_dir().unwrap()).unwrap(),
            vec![OsString::from("file")]
        );
    }

    #[test]
    fn a_directory_in_the_way_of_a_file_is_replaced() {
        let (_dir, root) = tree();
        std::fs::create_dir(root.join("real/config")).unwrap();
        std::fs::write(root.join("real/config/x"), "x").unwrap();
        let entry = Entry::locate(&root.join("real/config")).unwrap();
        entry.replace_file(b"cfg", 0o644).unwrap();
        assert_eq!(std::fs::read(root.join("real/config")).unwrap(), b"cfg");
        let left: Vec<_> = std::fs::read_dir(root.join("real"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "no staging file left behind: {left:?}");
    }

    /// A tree deeper than the descriptors the process may hold goes whole, files and
    /// symlinks in it removed, never followed (run where at most 32 may be open).
    #[test]
    fn a_tree_deeper_than_the_open_descriptor_limit_is_removed() {
        let (_dir, root) = tree();
        let planted = root.join("real/planted");
        let deep: std::path::PathBuf = std::iter::repeat_n("d", 200).collect();
        std::fs::create_dir_all(planted.join(&deep)).unwrap();
        std::fs::write(planted.join(&deep).join("file"), "x").unwrap();
        symlink(root.join("outside"), planted.join("d/d/link")).unwrap();
        let code = crate::in_a_child(
            || crate::limit_resource(libc::RLIMIT_NOFILE, 32),
            || Entry::locate(&planted).and_then(|e| e.remove()).is_ok(),
        );
        assert_eq!(code, 0, "the removal failed");
        assert!(!planted.exists());
        assert!(root.join("real/file").exists() && root.join("outside/file").exists());
    }
}
