//! Other names of a credential location: the same directory mounted a second time.
//!
//! Both ways of hiding a path act on its name: a mask is mounted over `~/.ssh`, and
//! Landlock's rules go around `~/.ssh` by granting its siblings. When the filesystem that
//! holds it is mounted again elsewhere (a bind mount of /home, a btrfs top-level volume
//! mounted for snapshots, a disk mounted twice), the same directory is readable under the
//! other name. `/proc/self/mountinfo` says, for every mount, which filesystem it shows
//! (the device number) and from which of its directories (the root), so every other name
//! of a hidden path can be worked out and hidden too.
//!
//! Each name found is checked against the mount it must lead to (`statx`'s mount ID):
//! a path that something else is mounted over, or beneath, shows that other thing, and
//! is left alone. What shows another filesystem's files without being a mount of it (an
//! overlay, a FUSE mirror, a copy or snapshot) is not recognised: see the README's limits.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`: what is needed to find other names of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: u64,
    /// `major:minor` of the filesystem, as the kernel prints it.
    pub device: String,
    /// The directory of that filesystem this mount shows at its mount point.
    pub root: PathBuf,
    pub mount_point: PathBuf,
}

/// Parses `/proc/self/mountinfo`. A line that does not have the fields the kernel
/// documents is an error naming it: a mount that cannot be read could be the alias.
pub fn parse(mountinfo: &[u8]) -> Result<Vec<Mount>, String> {
    let mut mounts = Vec::new();
    for (index, line) in mountinfo.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut fields = line.split(|&b| b == b' ');
        let (id, _parent, device, root, mount_point) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        );
        let malformed = || {
            format!(
                "/proc/self/mountinfo line {}: not `ID PARENT MAJOR:MINOR ROOT MOUNT-POINT …`: {}",
                index + 1,
                String::from_utf8_lossy(line)
            )
        };
        let (Some(id), Some(device), Some(root), Some(mount_point)) =
            (id, device, root, mount_point)
        else {
            return Err(malformed());
        };
        let id = std::str::from_utf8(id)
            .ok()
            .and_then(|id| id.parse().ok())
            .ok_or_else(malformed)?;
        if !device.contains(&b':') {
            return Err(malformed());
        }
        let mut root = unescape(root);
        // The root of a bind mount whose source has since been deleted (a file replaced
        // by a rename, as /etc/shadow is): it still shows what was there.
        if let Some(live) = root.strip_suffix(b"//deleted") {
            root = live.to_vec();
        }
        mounts.push(Mount {
            id,
            device: String::from_utf8_lossy(device).into_owned(),
            root: PathBuf::from(OsStr::from_bytes(&root)),
            mount_point: PathBuf::from(OsStr::from_bytes(&unescape(mount_point))),
        });
    }
    Ok(mounts)
}

/// The kernel writes space, tab, newline and backslash in paths as `\` and three octal
/// digits.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3');
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// Whether some filesystem is mounted more than once: if none is, no path has another
/// name, and nothing needs to be looked up.
pub fn any_shared(mounts: &[Mount]) -> bool {
    mounts
        .iter()
        .enumerate()
        .any(|(i, m)| mounts[i + 1..].iter().any(|n| n.device == m.device))
}

/// Where else the other mounts of its filesystem show `path`, which lies on the mount
/// `on`: each as the name and the mount it must lead to. A mount of a directory inside
/// `path` is all of it hidden, so its mount point is a name too. `None` if `on` is not in
/// `mounts`, or `path` not beneath its mount point (the table changed meanwhile).
pub fn candidates(mounts: &[Mount], on: u64, path: &Path) -> Option<Vec<(PathBuf, u64)>> {
    let home = mounts.iter().find(|m| m.id == on)?;
    let within = path.strip_prefix(&home.mount_point).ok()?;
    let in_filesystem = home.root.join(within);
    let names = mounts
        .iter()
        .filter(|other| other.id != on && other.device == home.device)
        .filter_map(|other| {
            let name = match in_filesystem.strip_prefix(&other.root) {
                // (`join` of an empty path would add a trailing slash.)
                Ok(below) if below.as_os_str().is_empty() => other.mount_point.clone(),
                Ok(below) => other.mount_point.join(below),
                Err(_) if other.root.starts_with(&in_filesystem) => other.mount_point.clone(),
                Err(_) => return None,
            };
            Some((name, other.id)).filter(|(name, _)| name != path)
        })
        .collect();
    Some(names)
}

/// The ID of the mount `path` lies on, without following a final symlink. `Ok(None)`
/// where the path cannot be reached (it is gone, or a directory on the way cannot be
/// searched: the sandbox, run by the same user with less, cannot reach it either).
#[cfg(target_os = "linux")]
fn mount_id(path: &Path) -> Result<Option<u64>, String> {
    use rustix::fs::{statx, AtFlags, StatxFlags, CWD};
    use rustix::io::Errno;
    match statx(CWD, path, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::MNT_ID) {
        Ok(found) if found.stx_mask & StatxFlags::MNT_ID.bits() != 0 => Ok(Some(found.stx_mnt_id)),
        // Kernels before 5.8 do not report it through statx; /proc has it since 3.15.
        Ok(_) => mount_id_from_proc(path),
        Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS | Errno::LOOP) => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(target_os = "linux")]
fn mount_id_from_proc(path: &Path) -> Result<Option<u64>, String> {
    use rustix::fs::{open, Mode, OFlags};
    use rustix::io::Errno;
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS | Errno::LOOP) => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .map_err(|e| format!("{}: its mount ID: {e}", path.display()))?;
    info.lines()
        .find_map(|line| line.strip_prefix("mnt_id:"))
        .and_then(|id| id.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| format!("{}: no mount ID in /proc/self/fdinfo", path.display()))
}

/// The other names, on this machine now, of the `hidden` paths (canonical, existing),
/// each with the hidden path it names, none of them inside a hidden path or another name
/// (hiding that hides them). Fails, rather than leave a name visible, where the mount
/// table cannot be read or changes while it is read.
#[cfg(target_os = "linux")]
pub fn find(hidden: &[PathBuf]) -> Result<Vec<(PathBuf, PathBuf)>, String> {
    if hidden.is_empty() {
        return Ok(Vec::new());
    }
    let why = |e: String| {
        format!("cannot tell whether a credential location is mounted a second time: {e}")
    };
    let table = std::fs::read("/proc/self/mountinfo")
        .map_err(|e| why(format!("/proc/self/mountinfo: {e}")))?;
    let mounts = parse(&table).map_err(why)?;
    if !any_shared(&mounts) {
        return Ok(Vec::new());
    }
    let mut names: Vec<(PathBuf, PathBuf)> = Vec::new();
    for path in hidden {
        let Some(on) = mount_id(path).map_err(why)? else {
            continue;
        };
        let found = candidates(&mounts, on, path).ok_or_else(|| {
            why(format!(
                "{} lies on a mount that /proc/self/mountinfo does not list (did the \
                 mounts change meanwhile?)",
                path.display()
            ))
        })?;
        for (name, leads_to) in found {
            let known = names.iter().any(|(known, _)| *known == name);
            if !known && mount_id(&name).map_err(why)? == Some(leads_to) {
                names.push((name, path.clone()));
            }
        }
    }
    Ok(outermost(hidden, names))
}

/// Elsewhere (macOS) there is no mount table of this kind to look in.
#[cfg(not(target_os = "linux"))]
pub fn find(_hidden: &[PathBuf]) -> Result<Vec<(PathBuf, PathBuf)>, String> {
    Ok(Vec::new())
}

/// `names` without those inside a hidden path or inside another name: hiding the outer
/// one hides them, and a mask cannot be mounted inside another (it is read-only).
fn outermost<T: Clone>(hidden: &[PathBuf], names: Vec<(PathBuf, T)>) -> Vec<(PathBuf, T)> {
    let covered = |name: &PathBuf| {
        hidden
            .iter()
            .chain(
                names
                    .iter()
                    .map(|(other, _)| other)
                    .filter(|other| *other != name),
            )
            .any(|outer| name.starts_with(outer))
    };
    names.iter().filter(|(n, _)| !covered(n)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(id: u64, device: &str, root: &str, at: &str) -> Mount {
        Mount {
            id,
            device: device.into(),
            root: root.into(),
            mount_point: at.into(),
        }
    }

    #[test]
    fn parses_the_fields_and_unescapes_paths() {
        let table = b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
            40 27 254:0 /home/u/My\\040Keys /mnt/with\\134slash\\011tab rw shared:1 - ext4 /dev/vda rw\n\
            41 27 0:50 /etc/shadow//deleted /srv/old-shadow ro - ext4 /dev/vda rw\n";
        let mounts = parse(table).unwrap();
        assert_eq!(
            mounts,
            vec![
                mount(27, "254:0", "/", "/"),
                mount(40, "254:0", "/home/u/My Keys", "/mnt/with\\slash\ttab"),
                mount(41, "0:50", "/etc/shadow", "/srv/old-shadow"),
            ]
        );
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_it() {
        let err = parse(b"27 1 254:0 / / rw - ext4 x rw\n28 27 nodevice / /x\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("nodevice"), "{err}");
        let err = parse(b"27 1 254:0 /\n").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        let err = parse(b"x 1 254:0 / / rw\n").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn a_backslash_without_three_octal_digits_is_kept() {
        assert_eq!(unescape(b"a\\b\\04"), b"a\\b\\04".to_vec());
        assert_eq!(unescape(b"\\400"), b"\\400".to_vec());
        assert_eq!(unescape(b"\\040x"), b" x".to_vec());
    }

    #[test]
    fn only_a_filesystem_mounted_twice_is_shared() {
        let once = [mount(1, "8:1", "/", "/"), mount(2, "0:5", "/", "/proc")];
        assert!(!any_shared(&once));
        let twice = [
            once[0].clone(),
            once[1].clone(),
            mount(3, "8:1", "/home", "/h"),
        ];
        assert!(any_shared(&twice));
    }

    fn names(mounts: &[Mount], on: u64, path: &str) -> Vec<(String, u64)> {
        candidates(mounts, on, Path::new(path))
            .unwrap()
            .into_iter()
            .map(|(p, id)| (p.display().to_string(), id))
            .collect()
    }

    #[test]
    fn a_second_mount_of_the_whole_filesystem_or_of_an_ancestor_is_a_name() {
        let mounts = [
            mount(1, "8:1", "/", "/"),
            mount(2, "8:1", "/", "/mnt/disk"),
            mount(3, "8:1", "/home", "/srv/homes"),
            mount(4, "8:1", "/home/u/.ssh", "/keys"),
            mount(5, "8:2", "/", "/home/u/.ssh/not-the-same-disk"),
            mount(6, "8:1", "/var", "/var-again"),
        ];
        assert_eq!(
            names(&mounts, 1, "/home/u/.ssh"),
            [
                ("/mnt/disk/home/u/.ssh".to_string(), 2),
                ("/srv/homes/u/.ssh".to_string(), 3),
                ("/keys".to_string(), 4),
            ]
        );
    }

    #[test]
    fn a_mount_of_a_directory_inside_a_hidden_path_is_hidden_whole() {
        let mounts = [
            mount(1, "8:1", "/", "/"),
            mount(2, "8:1", "/root/.gnupg/private-keys-v1.d", "/opt/keys"),
        ];
        assert_eq!(
            names(&mounts, 1, "/root/.gnupg"),
            [("/opt/keys".to_string(), 2)]
        );
    }

    #[test]
    fn a_path_on_a_bind_mount_is_placed_by_that_mounts_root() {
        // /home is itself a bind of /data/home; /data shows the whole disk.
        let mounts = [
            mount(1, "8:1", "/", "/"),
            mount(2, "8:3", "/", "/data"),
            mount(3, "8:3", "/home", "/home"),
        ];
        assert_eq!(
            names(&mounts, 3, "/home/u/.aws"),
            [("/data/home/u/.aws".to_string(), 2)]
        );
        // A file bind of a deleted /etc/shadow still shows it.
        let shadow = [
            mount(1, "8:1", "/", "/"),
            mount(2, "8:1", "/etc/shadow", "/srv/old"),
        ];
        assert_eq!(
            names(&shadow, 1, "/etc/shadow"),
            [("/srv/old".to_string(), 2)]
        );
    }

    #[test]
    fn the_same_place_mounted_over_itself_and_unknown_mounts_are_not_names() {
        let mounts = [
            mount(1, "8:1", "/", "/"),
            mount(2, "8:1", "/root/.ssh", "/root/.ssh"),
        ];
        assert!(names(&mounts, 1, "/root/.ssh").is_empty());
        assert!(candidates(&mounts, 99, Path::new("/root/.ssh")).is_none());
        assert!(candidates(&mounts, 2, Path::new("/elsewhere")).is_none());
    }

    #[test]
    fn names_inside_a_hidden_path_or_another_name_are_dropped() {
        let hidden = [PathBuf::from("/root/.ssh"), PathBuf::from("/root/.aws")];
        let names = [
            "/mnt/disk/root/.ssh",
            "/mnt/disk/root/.ssh/inner",
            "/root/.ssh/loop/root/.aws",
            "/mnt/disk2",
        ]
        .map(|n| (PathBuf::from(n), ()))
        .to_vec();
        let kept: Vec<PathBuf> = outermost(&hidden, names)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            kept,
            ["/mnt/disk/root/.ssh", "/mnt/disk2"].map(PathBuf::from)
        );
    }
}
