//! Directories chitti keeps for the masks of root's Landlock calls (`masks`), and
//! bind-mounts in the command's mount namespace:
//!
//! - `/var/lib/chitti/dev`, a /dev holding only the harmless devices. Landlock cannot take a
//!   path back out of a granted tree: while the host's /dev is in view, a ruleset that must
//!   keep /dev/sda or /dev/mem out cannot grant `/` whole. It lists `/` and grants each
//!   entry but /dev, then each harmless device (some thirty rules, opened and added on
//!   every call). With this directory over /dev, the ruleset grants `/` whole and this
//!   directory's devices as one tree: four rules or so. It holds the devices of
//!   [`SAFE_DEVICES`] (the host's device numbers, copied by `mknod`) and the usual links
//!   into /proc/self/fd; nothing else.
//! - `/var/lib/chitti/empty`, an empty directory with mode 000, mounted read-only over each
//!   hidden directory instead of a fresh tmpfs.
//!
//! Both are made once and kept, owned by root: a bind mount costs one mount on every call,
//! where a tmpfs costs a superblock made and torn down each time (measured: a tmpfs /dev
//! filled per call was slower than the rules it saved, and the tmpfs over hidden
//! directories cost 0.01-0.03 ms more per call than the bind). They live in
//! /var/lib/chitti, not /run: /run is mounted `nodev` on most systems, where the device
//! nodes could not be opened, and clearing `nodev` on the bind may be refused in a
//! container.
//!
//! What keeps them trustworthy, checked before each use: each and every ancestor are
//! directories owned by root that nobody else may write, so only root can change what they
//! hold; /dev's filesystem allows device nodes; the empty directory's mode is still 000 (a
//! sandboxed root command, which may not write in it, may still chmod it: then it is not
//! used); and no writable root of the call contains them or lies in them (a command could
//! otherwise replace /dev/null for the calls after it). Where any of that fails, or they
//! cannot be made (no `mknod` in a container, a read-only /var), calls go on without them:
//! with the host's /dev and the long ruleset, or a tmpfs over each hidden directory.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::sandbox::landlock_rules::SAFE_DEVICES;

/// Where the directories live.
const PARENT: &str = "/var/lib/chitti";

/// Links every /dev has, made as bubblewrap's minimal /dev makes them.
const LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// The kept directories a call may use; `None` for one that cannot be made or trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptDirs {
    /// To mount over /dev.
    pub dev: Option<PathBuf>,
    /// To mount over each hidden directory.
    pub empty: Option<PathBuf>,
}

/// The kept directories for a call whose writable roots are `writable`, made if they do
/// not exist yet (see the module documentation). For root's calls only, which can mount
/// them (`masks::available`).
pub fn for_call(writable: &[PathBuf]) -> KeptDirs {
    in_place(Path::new(PARENT), writable)
}

/// What a kept directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dev,
    Empty,
}

/// [`for_call`] with the directories in `parent` (tests make their own).
fn in_place(parent: &Path, writable: &[PathBuf]) -> KeptDirs {
    if !parent.is_absolute()
        || writable
            .iter()
            .any(|root| root.starts_with(parent) || parent.starts_with(root))
    {
        return KeptDirs::default();
    }
    let mut ancestors_trusted = None;
    let mut kept = |kind: Kind, name: &str| {
        let dir = parent.join(name);
        let leaf = match trusted_leaf(&dir, kind) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                make(&dir, kind).ok()?;
                trusted_leaf(&dir, kind)
            }
            other => other,
        };
        let ancestors = *ancestors_trusted.get_or_insert_with(|| trusted_ancestors(&dir));
        (leaf.ok()? && ancestors).then_some(dir)
    };
    KeptDirs {
        dev: kept(Kind::Dev, "dev"),
        empty: kept(Kind::Empty, "empty"),
    }
}

/// A directory (not a link) owned by root that nobody else may write.
fn owned_by_root(m: &std::fs::Metadata) -> bool {
    m.file_type().is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0
}

/// Whether every ancestor of `dir` below `/` is [`owned_by_root`].
fn trusted_ancestors(dir: &Path) -> bool {
    dir.ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
        .all(|a| std::fs::symlink_metadata(a).is_ok_and(|m| owned_by_root(&m)))
}

/// Whether `dir` itself may be used as `kind`: [`owned_by_root`]; for /dev, on a
/// filesystem that lets device nodes be opened; for the empty directory, with mode 000.
/// An error: `dir` could not be looked at (NotFound: it does not exist).
fn trusted_leaf(dir: &Path, kind: Kind) -> std::io::Result<bool> {
    let meta = std::fs::symlink_metadata(dir)?;
    Ok(owned_by_root(&meta)
        && match kind {
            Kind::Dev => nix::sys::statvfs::statvfs(dir)
                .is_ok_and(|fs| !fs.flags().contains(nix::sys::statvfs::FsFlags::ST_NODEV)),
            Kind::Empty => meta.mode() & 0o7777 == 0,
        })
}

/// Makes `dir`, and its parent if need be. The empty directory is one `mkdir`. /dev is
/// made whole in a temporary directory beside it, then renamed into place, so that no
/// call ever sees it half made. Another process making either at the same time wins; this
/// one's copy is removed.
fn make(dir: &Path, kind: Kind) -> std::io::Result<()> {
    let parent = dir
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent directory"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(parent)?;
    if kind == Kind::Empty {
        return match std::fs::DirBuilder::new().mode(0o000).create(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            made => made,
        };
    }
    use nix::sys::stat::{mknod, Mode, SFlag};
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

    /// A place to make the directories in, beside the real ones: tempfile makes it 0700
    /// and root's, and /var/lib and its ancestors are root's and 0755, so directories made
    /// in it pass the trust checks as the real ones do.
    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("chitti-dirs-test")
            .tempdir_in("/var/lib")
            .expect("a scratch directory in /var/lib (these tests make it as root)")
    }

    #[test]
    fn dev_holds_the_harmless_devices_and_the_usual_links_and_empty_nothing() {
        if !nix::unistd::geteuid().is_root() {
            // mknod is root's: the attempt fails and leaves nothing half made behind.
            let base = tempfile::tempdir().unwrap();
            let made = make(&base.path().join("dev"), Kind::Dev);
            assert!(made.is_err(), "a user made device nodes");
            let left: Vec<_> = std::fs::read_dir(base.path()).unwrap().collect();
            assert!(left.is_empty(), "{left:?}");
            return;
        }
        let base = scratch();
        let dir = base.path().join("dev");
        make(&dir, Kind::Dev).expect("make /dev's directory as root");
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
            let link = std::fs::read_link(dir.join(name)).unwrap();
            assert_eq!(link, Path::new(target));
        }
        let mode = std::fs::symlink_metadata(&dir).unwrap().mode();
        assert_eq!(mode & 0o7777, 0o755);
        // Made once: a second call finds it, and leaves no copy of its own behind.
        make(&dir, Kind::Dev).unwrap();
        let empty = base.path().join("empty");
        make(&empty, Kind::Empty).unwrap();
        make(&empty, Kind::Empty).unwrap();
        assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
        let mode = std::fs::symlink_metadata(&empty).unwrap().mode();
        assert_eq!(mode & 0o7777, 0);
        let left: Vec<_> = std::fs::read_dir(base.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }

    #[test]
    fn a_directory_anyone_else_could_change_is_not_used() {
        if !nix::unistd::geteuid().is_root() {
            // A user's own directories are never trusted, whatever they hold.
            let base = tempfile::tempdir().unwrap();
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(base.path().join("dev"))
                .unwrap();
            assert_eq!(in_place(base.path(), &[]), KeptDirs::default());
            return;
        }
        let base = scratch();
        let (dev, empty) = (base.path().join("dev"), base.path().join("empty"));
        let both = KeptDirs {
            dev: Some(dev.clone()),
            empty: Some(empty.clone()),
        };
        // Made on first use, then found.
        assert_eq!(in_place(base.path(), &[]), both);
        assert_eq!(in_place(base.path(), &[]), both);
        let chmod = |dir: &Path, mode| {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        // Group-writable: refused.
        chmod(&dev, 0o775);
        assert_eq!(in_place(base.path(), &[]).dev, None);
        chmod(&dev, 0o755);
        // The empty directory made listable (a sandboxed root may chmod it): refused.
        chmod(&empty, 0o700);
        assert_eq!(in_place(base.path(), &[]).empty, None);
        chmod(&empty, 0o000);
        // Owned by someone else: refused.
        let owner = |uid| nix::unistd::chown(&dev, Some(nix::unistd::Uid::from_raw(uid)), None);
        owner(65534).unwrap();
        assert_eq!(in_place(base.path(), &[]).dev, None);
        owner(0).unwrap();
        assert_eq!(in_place(base.path(), &[]), both);
        // Inside a writable root, or holding one: refused.
        let none = KeptDirs::default();
        assert_eq!(in_place(base.path(), &[base.path().to_path_buf()]), none);
        assert_eq!(in_place(base.path(), &[dev.join("x")]), none);
        // Reached through a link: refused.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(base.path(), &link).unwrap();
        assert_eq!(in_place(&link, &[]), none);
    }
}
