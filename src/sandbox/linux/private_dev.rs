//! A /dev holding only the harmless devices, for a Landlock sandbox started by root.
//!
//! Landlock cannot take a path back out of a granted tree. While the host's /dev is in
//! view, a ruleset that must keep /dev/sda or /dev/mem out cannot grant `/` whole: it
//! lists `/` and grants each entry but /dev, then each harmless device (some thirty rules,
//! opened and added on every call). Root's commands run in a mount namespace of their
//! own anyway (`masks`), where this directory is bind-mounted over /dev. The ruleset
//! then grants `/` whole and this directory's devices as one tree: four rules or so.
//!
//! The directory is made once and kept, owned by root: a bind mount costs one mount on
//! every call, where a fresh tmpfs filled with device nodes costs a superblock made and
//! torn down each time (measured slower than the rules it saves). It lives in
//! /var/lib/chitti, not /run: /run is mounted `nodev` on most systems, where the nodes could not
//! be opened, and clearing `nodev` on the bind may be refused in a container. It holds
//! the devices of [`SAFE_DEVICES`] (the host's device numbers, copied by `mknod`) and the
//! usual links into /proc/self/fd; nothing else.
//!
//! What keeps it trustworthy, checked before each use: it and every ancestor are
//! directories owned by root that nobody else may write, so only root can change what it
//! holds; its filesystem allows device nodes; and no writable root of the call contains
//! it or lies in it (a command could otherwise replace /dev/null for the calls after it).
//! Where any of that fails, or it cannot be made (no `mknod` in a container, a read-only
//! /var), calls go on without it, with the long ruleset, as for any other user.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::sandbox::landlock_rules::SAFE_DEVICES;

/// Where the directory lives.
const DIR: &str = "/var/lib/chitti/dev";

/// Links every /dev has, made as bubblewrap's minimal /dev makes them.
const LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// The directory to mount over /dev for a call whose writable roots are `writable`, made
/// if it does not exist yet; `None` where it cannot be made or trusted (see the module
/// documentation). For root's calls only, which can mount it (`masks::available`).
pub fn for_call(writable: &[PathBuf]) -> Option<PathBuf> {
    in_place(Path::new(DIR), writable)
}

/// [`for_call`] with the directory at `dir` (tests make their own).
fn in_place(dir: &Path, writable: &[PathBuf]) -> Option<PathBuf> {
    if writable
        .iter()
        .any(|root| root.starts_with(dir) || dir.starts_with(root))
    {
        return None;
    }
    match trusted(dir) {
        Ok(true) => Some(dir.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            make(dir).ok()?;
            trusted(dir).ok()?.then(|| dir.to_path_buf())
        }
        _ => None,
    }
}

/// Whether `dir` and each of its ancestors below `/` are directories (not links) owned by
/// root and writable by nobody else, and `dir`'s filesystem lets device nodes be opened.
/// An error: `dir` itself could not be looked at (NotFound: it does not exist).
fn trusted(dir: &Path) -> std::io::Result<bool> {
    let owned_by_root =
        |m: &std::fs::Metadata| m.file_type().is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0;
    if !dir.is_absolute() || !owned_by_root(&std::fs::symlink_metadata(dir)?) {
        return Ok(false);
    }
    let ancestors_owned = dir
        .ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
        .all(|a| std::fs::symlink_metadata(a).is_ok_and(|m| owned_by_root(&m)));
    Ok(ancestors_owned
        && nix::sys::statvfs::statvfs(dir)
            .is_ok_and(|fs| !fs.flags().contains(nix::sys::statvfs::FsFlags::ST_NODEV)))
}

/// Makes `dir` whole in a temporary directory beside it, then renames it into place, so
/// that no call ever sees it half made. Another process making it at the same time wins
/// the rename; this one's copy is removed.
fn make(dir: &Path) -> std::io::Result<()> {
    use nix::sys::stat::{mknod, Mode, SFlag};
    let parent = dir
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent directory"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(parent)?;
    let building = tempfile::Builder::new()
        .prefix(".dev-")
        .tempdir_in(parent)?;
    for device in SAFE_DEVICES {
        let host = std::fs::metadata(device);
        let Ok(host) = host else { continue };
        if !std::os::unix::fs::FileTypeExt::is_char_device(&host.file_type()) {
            continue;
        }
        let name = Path::new(device).file_name().unwrap_or_default();
        let node = building.path().join(name);
        mknod(
            &node,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            host.rdev(),
        )?;
        // mknod applies the umask.
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o666))?;
    }
    for (name, target) in LINKS {
        std::os::unix::fs::symlink(target, building.path().join(name))?;
    }
    std::fs::set_permissions(building.path(), std::fs::Permissions::from_mode(0o755))?;
    match std::fs::rename(building.path(), dir) {
        Ok(()) => {
            let _ = building.keep();
            Ok(())
        }
        // Made meanwhile by another call (a directory cannot replace a non-empty one).
        Err(_) if std::fs::symlink_metadata(dir).is_ok() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    /// A place to make the directory in, beside the real one: tempfile makes it 0700 and
    /// root's, and /var/lib and its ancestors are root's and 0755, so a directory made in
    /// it passes the trust check as the real one does.
    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("chitti-dev-test")
            .tempdir_in("/var/lib")
            .expect("a scratch directory in /var/lib (the tests of the minimal /dev run as root)")
    }

    #[test]
    fn the_directory_holds_the_harmless_devices_and_the_usual_links_only() {
        if !nix::unistd::geteuid().is_root() {
            // mknod is root's: the attempt fails and leaves nothing half made behind.
            let base = tempfile::tempdir().unwrap();
            assert!(
                make(&base.path().join("dev")).is_err(),
                "a user made device nodes"
            );
            let left: Vec<_> = std::fs::read_dir(base.path()).unwrap().collect();
            assert!(left.is_empty(), "{left:?}");
            return;
        }
        let base = scratch();
        let dir = base.path().join("dev");
        make(&dir).expect("make the directory as root");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut expected: Vec<String> = SAFE_DEVICES
            .iter()
            .filter(|d| Path::new(d).exists())
            .map(|d| d.trim_start_matches("/dev/").to_string())
            .chain(LINKS.iter().map(|(name, _)| name.to_string()))
            .collect();
        expected.sort();
        assert_eq!(names, expected);
        for device in SAFE_DEVICES.iter().filter(|d| Path::new(d).exists()) {
            let made = std::fs::symlink_metadata(dir.join(&device[5..])).unwrap();
            let host = std::fs::metadata(device).unwrap();
            assert!(made.file_type().is_char_device(), "{device}");
            assert_eq!(made.rdev(), host.rdev(), "{device}: another device");
            assert_eq!(made.mode() & 0o7777, 0o666, "{device}");
        }
        for (name, target) in LINKS {
            assert_eq!(
                std::fs::read_link(dir.join(name)).unwrap(),
                Path::new(target)
            );
        }
        let mode = std::fs::symlink_metadata(&dir).unwrap().mode();
        assert_eq!(mode & 0o7777, 0o755);
        // Made once: a second call finds it, and leaves no copy of its own behind.
        make(&dir).unwrap();
        let left: Vec<_> = std::fs::read_dir(base.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn a_directory_anyone_else_could_change_is_not_used() {
        if !nix::unistd::geteuid().is_root() {
            // A user's own directory is never trusted, whatever it holds.
            let base = tempfile::tempdir().unwrap();
            let dir = base.path().join("dev");
            std::fs::DirBuilder::new().mode(0o755).create(&dir).unwrap();
            assert_eq!(in_place(&dir, &[]), None);
            return;
        }
        let base = scratch();
        let dir = base.path().join("dev");
        // Made on first use, then found.
        assert_eq!(in_place(&dir, &[]), Some(dir.clone()));
        assert_eq!(in_place(&dir, &[]), Some(dir.clone()));
        // Group-writable: refused.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert_eq!(in_place(&dir, &[]), None);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Owned by someone else: refused.
        nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        assert_eq!(in_place(&dir, &[]), None);
        nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
        // Inside a writable root, or holding one: refused.
        assert_eq!(in_place(&dir, &[base.path().to_path_buf()]), None);
        assert_eq!(in_place(&dir, &[dir.join("x")]), None);
        // A link in its place: refused.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert_eq!(in_place(&link, &[]), None);
    }
}
