//! Other names of a credential location: the same directory mounted a second time.
//!
//! Both ways of hiding a path act on its name: a mask is mounted over `~/.ssh`, and
//! Landlock's rules go around `~/.ssh` by granting its siblings. When the filesystem that
//! holds it is mounted again elsewhere (a bind mount of /home, a btrfs top-level volume
//! mounted for snapshots, a disk mounted twice), the same directory is readable under the
//! other name. `/proc/self/mountinfo` says, for every mount, which filesystem it shows
//! (the device number) and from which of its directories (the root), so every other name
//! of a hidden path can be worked out and hidden too. Where no filesystem is mounted twice
//! (most machines), the kernel says so for less, mount by mount, and the table is not read.
//!
//! Each name found is checked against what it must lead to (device and inode, through
//! whichever mount): a path that something else is mounted over, or beneath, shows that
//! other thing, and is left alone; one behind a directory the caller cannot search is
//! hidden with that directory. What shows another filesystem's files without being a mount of it (an
//! overlay, a FUSE mirror, a copy or snapshot) is not recognised: see the README's limits.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`: what is needed to find other names of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: u64,
    /// The mount this one is mounted on (itself for the root).
    pub parent: u64,
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
        let (id, parent, device, root, mount_point) = (
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
        let (Some(id), Some(parent), Some(device), Some(root), Some(mount_point)) =
            (id, parent, device, root, mount_point)
        else {
            return Err(malformed());
        };
        let number = |field: &[u8]| std::str::from_utf8(field).ok()?.parse().ok();
        let (Some(id), Some(parent)) = (number(id), number(parent)) else {
            return Err(malformed());
        };
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
            parent,
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

/// Whether some filesystem is mounted more than once, from the table's third fields
/// alone: most tables have no such filesystem, and then no directory has two names. A
/// line too short to have one counts as shared, for [`parse`] to reject.
pub fn any_shared(mountinfo: &[u8]) -> bool {
    let devices: Option<Vec<&[u8]>> = mountinfo
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| line.split(|&b| b == b' ').nth(2))
        .collect();
    devices.is_none_or(some_twice)
}

/// Whether some device comes twice among `devices` (from the table, or mount by mount).
fn some_twice<T: Eq + std::hash::Hash>(devices: impl IntoIterator<Item = T>) -> bool {
    let mut seen = std::collections::HashSet::new();
    devices.into_iter().any(|device| !seen.insert(device))
}

/// The table's third fields (`major:minor`), of the lines that have one.
#[cfg(test)]
fn table_devices(mountinfo: &[u8]) -> impl Iterator<Item = &[u8]> {
    mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(2))
}

/// `base` and then `below` (a relative path), without the trailing slash `join` adds
/// for an empty one.
fn join_below(base: &Path, below: &Path) -> PathBuf {
    if below.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(below)
    }
}

/// What the mount table says about the hidden paths.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Other names of what is hidden: each with a path to what it must lead to (the
    /// hidden path, or a mount beneath it; else the name shows something mounted over
    /// it) and the hidden path it names.
    pub candidates: Vec<(PathBuf, PathBuf, PathBuf)>,
    /// Whether a directory on the way to a hidden path has another name as well, through
    /// another mount of its filesystem. Landlock grants attach to directories, not
    /// names, so its rules must then compare what each name leads to.
    pub ancestors_shared: bool,
}

/// Finds, from the table alone, the other names of each hidden path, given as its path
/// and the mount it lies on. Besides the path itself, what is mounted beneath it is
/// hidden too, so the other names of that mount's source are candidates as well. An
/// error if a path's mount is not in the table or the path not beneath its mount point.
pub fn analyse(mounts: &[Mount], hidden: &[(PathBuf, u64)]) -> Result<Analysis, String> {
    let mut analysis = Analysis::default();
    for (path, on) in hidden {
        let unlisted = || {
            format!(
                "{} lies on a mount that this thread's mount table (/proc/self/task/TID/mountinfo) does not list: its mount point \
                 is outside this process's root (a chroot that is not a mount point itself; \
                 `mount --bind DIR DIR` makes it one) or the mounts changed meanwhile",
                path.display()
            )
        };
        let home = mounts.iter().find(|m| m.id == *on).ok_or_else(unlisted)?;
        let within = path
            .strip_prefix(&home.mount_point)
            .map_err(|_| unlisted())?;
        let in_filesystem = join_below(&home.root, within);

        // Where the hidden things are, each as a filesystem, a directory of it, and a
        // name that leads there now.
        let mut places = vec![(&home.device, in_filesystem.clone(), path)];
        for beneath in mounts
            .iter()
            .filter(|m| m.mount_point.starts_with(path) && m.mount_point != *path)
        {
            places.push((&beneath.device, beneath.root.clone(), &beneath.mount_point));
        }
        for (device, place, leads_there) in places {
            for other in mounts.iter().filter(|m| m.device == *device) {
                // The other mount shows the place (or something inside it), or a directory
                // of it: the name, and where the same thing is reached through the place.
                let (name, target) = match place.strip_prefix(&other.root) {
                    Ok(below) => (join_below(&other.mount_point, below), leads_there.clone()),
                    Err(_) => match other.root.strip_prefix(&place) {
                        Ok(inside) => (other.mount_point.clone(), join_below(leads_there, inside)),
                        Err(_) => continue,
                    },
                };
                // (Inside the path, it is hidden with it.)
                let known = analysis.candidates.iter().any(|(n, _, _)| *n == name);
                if !name.starts_with(path) && !known {
                    analysis.candidates.push((name, target, path.clone()));
                }
            }
        }

        // The directories Landlock checks on the way from the path to the root: in each
        // mount from its root down to the deepest one on the way (the path's parent, or
        // the parent of the mount point of the mount below); is one of them shown by
        // another mount of the same filesystem?
        let mut mount = home;
        let mut deepest = (in_filesystem != home.root)
            .then(|| in_filesystem.parent().map(Path::to_path_buf))
            .flatten();
        for _ in 0..mounts.len() {
            if let Some(deepest) = &deepest {
                let shown_elsewhere = mounts.iter().any(|other| {
                    other.id != mount.id
                        && other.device == mount.device
                        && deepest.starts_with(&other.root)
                });
                analysis.ancestors_shared |= shown_elsewhere;
            }
            let Some(parent) = mounts
                .iter()
                .find(|m| m.id == mount.parent && m.id != mount.id)
            else {
                break;
            };
            // The mount point itself is skipped (it is hidden); its parent is checked,
            // unless the mount point is the parent mount's root (stacked mounts).
            deepest = mount
                .mount_point
                .strip_prefix(&parent.mount_point)
                .ok()
                .filter(|rel| !rel.as_os_str().is_empty())
                .map(|rel| join_below(&parent.root, rel.parent().unwrap_or(Path::new(""))));
            mount = parent;
        }
    }
    Ok(analysis)
}

/// What the mount table says about the hidden paths, on this machine now.
#[derive(Debug, Default)]
pub struct Found {
    /// Other names of the hidden paths, each with the hidden path it names (some may lie
    /// inside a hidden path or another name: hiding that hides them).
    pub names: Vec<(PathBuf, PathBuf)>,
    /// As [`Analysis::ancestors_shared`].
    pub ancestors_shared: bool,
    /// Whether some filesystem is mounted more than once ([`any_shared`]): a directory
    /// may then have a second name even where no hidden path exists yet.
    pub table_shared: bool,
}

/// The ID of the mount `path` lies on, without following a final symlink or triggering
/// an automount. `Ok(None)` where the path cannot be reached (it is gone, or a directory
/// on the way cannot be searched).
#[cfg(target_os = "linux")]
fn mount_id(path: &Path) -> Result<Option<u64>, String> {
    use rustix::fs::{statx, AtFlags, StatxFlags, CWD};
    use rustix::io::Errno;
    let flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
    match statx(CWD, path, flags, StatxFlags::MNT_ID) {
        Ok(found) if found.stx_mask & StatxFlags::MNT_ID.bits() != 0 => Ok(Some(found.stx_mnt_id)),
        // Kernels before 5.8 do not report it through statx, and some container
        // profiles refuse statx; /proc has it since 3.15.
        Ok(_) | Err(Errno::NOSYS | Errno::PERM) => mount_id_from_proc(path),
        Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS | Errno::LOOP) => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(target_os = "linux")]
fn mount_id_from_proc(path: &Path) -> Result<Option<u64>, String> {
    use rustix::fs::{open, Mode, OFlags};
    use rustix::io::Errno;
    use std::os::fd::AsRawFd;
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS | Errno::LOOP) => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .map_err(|e| format!("{}: its mount ID: {e}", path.display()))?;
    info.lines()
        .find_map(|line| line.strip_prefix("mnt_id:"))
        .and_then(|id| id.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| format!("{}: no mount ID in /proc/self/fdinfo", path.display()))
}

/// `statmount` and `listmount` (Linux 6.8) by the unified numbers, which these
/// architectures use; elsewhere the mount table decides.
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
))]
pub(crate) const SYS_STATMOUNT_AND_LISTMOUNT: Option<(libc::c_long, libc::c_long)> =
    Some((457, 458));
#[cfg(all(
    target_os = "linux",
    not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    ))
))]
pub(crate) const SYS_STATMOUNT_AND_LISTMOUNT: Option<(libc::c_long, libc::c_long)> = None;

/// For `listmount`: the mounts reachable from the calling thread's root.
#[cfg(target_os = "linux")]
pub(crate) const LSMT_ROOT: u64 = u64::MAX;

/// `struct mnt_id_req`, which mount `listmount` and `statmount` are asked about and in
/// which mount namespace. Its size is Linux 6.11's; 6.8 takes it too while the namespace
/// (6.11's field) is 0, the caller's own.
#[cfg(target_os = "linux")]
#[repr(C)]
pub(crate) struct MountIdRequest {
    size: u32,
    spare: u32,
    mnt_id: u64,
    param: u64,
    mnt_ns_id: u64,
}

#[cfg(target_os = "linux")]
impl MountIdRequest {
    pub(crate) fn new(mnt_id: u64, param: u64, mnt_ns_id: u64) -> MountIdRequest {
        MountIdRequest {
            size: std::mem::size_of::<MountIdRequest>() as u32,
            spare: 0,
            mnt_id,
            param,
            mnt_ns_id,
        }
    }
}

/// The device of every mount reachable from the calling thread's root, in its mount
/// namespace, asked of the kernel mount by mount (`listmount` and `statmount`, Linux 6.8):
/// the same list as the mount table's third fields, which every read of the table has the
/// kernel format whole (50-85 us in a call here, against about 35 for these calls). None
/// where they cannot tell (an older kernel, another architecture's numbers, a filter
/// refusing them, a mount gone in between, more mounts than the buffer holds): the table
/// decides then.
#[cfg(target_os = "linux")]
fn devices_by_mount() -> Option<Vec<(u32, u32)>> {
    let (sys_statmount, sys_listmount) = SYS_STATMOUNT_AND_LISTMOUNT?;
    const STATMOUNT_SB_BASIC: u64 = 1;
    let mut ids = [0u64; 512];
    let listed = MountIdRequest::new(LSMT_ROOT, 0, 0);
    let n = unsafe { libc::syscall(sys_listmount, &listed, ids.as_mut_ptr(), ids.len(), 0) };
    if n <= 0 || n as usize >= ids.len() {
        return None;
    }
    // `struct statmount` (512 bytes): the superblock's device, the table's major:minor,
    // is at bytes 16-23, valid when `mask` (bytes 8-15) says so.
    let mut answer = [0u64; 64];
    let mut devices = Vec::with_capacity(n as usize);
    for &id in &ids[..n as usize] {
        let asked = MountIdRequest::new(id, STATMOUNT_SB_BASIC, 0);
        let size = std::mem::size_of_val(&answer);
        let r = unsafe { libc::syscall(sys_statmount, &asked, answer.as_mut_ptr(), size, 0) };
        if r != 0 || answer[1] & STATMOUNT_SB_BASIC == 0 {
            return None;
        }
        let [major, minor] = [answer[2] as u32, (answer[2] >> 32) as u32];
        devices.push(if cfg!(target_endian = "little") {
            (major, minor)
        } else {
            (minor, major)
        });
    }
    Some(devices)
}

/// Whether the thread's root is the root of a mount, where the kernel says (Linux 5.8).
/// It is not inside a chroot into a plain directory; the mount that holds such a root is
/// then listed nowhere (neither the table nor `listmount` lists what lies above the root),
/// so no second name of what lies on it can be worked out.
#[cfg(target_os = "linux")]
fn root_is_a_mount() -> Option<bool> {
    use rustix::fs::{statx, AtFlags, StatxAttributes, StatxFlags, CWD};
    let root = statx(CWD, "/", AtFlags::empty(), StatxFlags::BASIC_STATS).ok()?;
    root.stx_attributes_mask
        .contains(StatxAttributes::MOUNT_ROOT)
        .then(|| root.stx_attributes.contains(StatxAttributes::MOUNT_ROOT))
}

/// The same from the table, for kernels that do not say: a root that is a mount's root is
/// some line's mount point.
fn table_has_root_mount(mountinfo: &[u8]) -> bool {
    mountinfo
        .split(|&b| b == b'\n')
        .any(|line| line.split(|&b| b == b' ').nth(4) == Some(b"/"))
}

/// The refusal where the root is not a mount's root.
const CHROOT_NOT_A_MOUNT: &str = "chitti runs in a chroot that is not a mount point: the \
    mount that holds its root is in no mount table, so chitti cannot tell whether a \
    credential location has a second name there (a directory of the same filesystem mounted \
    elsewhere). Make the chroot a mount point first (`mount --bind DIR DIR`), then enter it";

/// The calling thread's mount table, read in as few calls as it allows: each read walks
/// the table to where the last one stopped and formats what it hands over (some 1.5 us a
/// line here), and `std::fs::read` starts a file of unknown size with reads of 32 bytes.
/// The thread's, not the process's (`/proc/self` is the main thread): a thread of a
/// session that made the masks' namespace for its call (`supervisor::spawn`) runs the
/// search in it, and the mount IDs it reads from `fdinfo` are that namespace's. (Named
/// through `task/`: `/proc/thread-self` needs Linux 3.17.)
#[cfg(target_os = "linux")]
fn read_mount_table() -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let path = format!("/proc/self/task/{}/mountinfo", unsafe { libc::gettid() });
    let mut file = std::fs::File::open(path)?;
    let mut table = vec![0; 4096];
    let mut filled = 0;
    loop {
        if filled == table.len() {
            table.resize(table.len() * 2, 0);
        }
        match file.read(&mut table[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    table.truncate(filled);
    Ok(table)
}

/// Looks the `hidden` paths (canonical, existing) up in this process's mount table.
/// Fails, rather than leave a name visible, where the table cannot be read or does not
/// list a hidden path's mount. A name that cannot be checked is kept (or, behind a
/// directory the caller cannot search, that directory): hiding something that is not
/// there makes the call fail, never leak.
#[cfg(target_os = "linux")]
pub fn find(hidden: &[PathBuf]) -> Result<Found, String> {
    if hidden.is_empty() {
        return Ok(Found::default());
    }
    let why = |e: String| {
        format!("cannot tell whether a credential location is mounted a second time: {e}")
    };
    let root_is_a_mount = root_is_a_mount();
    if root_is_a_mount == Some(false) {
        return Err(CHROOT_NOT_A_MOUNT.to_string());
    }
    let listed = || devices_by_mount().is_some_and(|devices| !some_twice(devices));
    if root_is_a_mount == Some(true) && listed() {
        return Ok(Found::default());
    }
    let table = read_mount_table().map_err(|e| {
        why(format!(
            "/proc/self/task/TID/mountinfo: {e} (chitti needs /proc mounted)"
        ))
    })?;
    if !table_has_root_mount(&table) {
        return Err(CHROOT_NOT_A_MOUNT.to_string());
    }
    if !any_shared(&table) {
        return Ok(Found::default());
    }
    let mounts = parse(&table).map_err(why)?;
    let mut on_mounts = Vec::with_capacity(hidden.len());
    for path in hidden {
        if let Some(on) = mount_id(path).map_err(why)? {
            on_mounts.push((path.clone(), on));
        }
    }
    let analysis = analyse(&mounts, &on_mounts).map_err(why)?;
    let mut names = Vec::new();
    for (name, target, location) in analysis.candidates {
        let hide = match check(&name, &target) {
            Checked::Same => name,
            Checked::Other => continue,
            Checked::Behind(locked) => locked,
        };
        if !names.iter().any(|(known, _)| *known == hide) {
            names.push((hide, location));
        }
    }
    Ok(Found {
        names,
        ancestors_shared: analysis.ancestors_shared,
        table_shared: true,
    })
}

/// What a candidate name turned out to be.
#[cfg(target_os = "linux")]
#[derive(Debug, PartialEq, Eq)]
enum Checked {
    /// It leads to what its target leads to (device and inode, whichever mount shows it),
    /// or cannot be told not to: hide it.
    Same,
    /// It is not there, or something else is mounted over it.
    Other,
    /// A directory on its way cannot be searched by the caller, who may own it (the
    /// sandbox could then chmod it back: Landlock does not govern modes): hide that
    /// directory, which holds nothing the caller can use, and whose kind is known.
    Behind(PathBuf),
}

#[cfg(target_os = "linux")]
fn check(name: &Path, target: &Path) -> Checked {
    use rustix::fs::{statx, AtFlags, StatxFlags, CWD};
    use rustix::io::Errno;
    let identity = |path: &Path| {
        let flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
        statx(CWD, path, flags, StatxFlags::INO)
            .map(|s| (s.stx_dev_major, s.stx_dev_minor, s.stx_ino))
    };
    match (identity(name), identity(target)) {
        (Ok(found), Ok(wanted)) if found != wanted => Checked::Other,
        (Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP), _) => Checked::Other,
        (Err(Errno::ACCESS), _) => match name.ancestors().skip(1).find(|a| identity(a).is_ok()) {
            Some(searchable_parent) => Checked::Behind(searchable_parent.to_path_buf()),
            None => Checked::Same,
        },
        _ => Checked::Same,
    }
}

/// Elsewhere (macOS) there is no mount table of this kind to look in.
#[cfg(not(target_os = "linux"))]
pub fn find(_hidden: &[PathBuf]) -> Result<Found, String> {
    Ok(Found::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's devices, as `devices_by_mount` gives them, sorted.
    #[cfg(target_os = "linux")]
    fn devices_in_table() -> Vec<(u32, u32)> {
        let table = read_mount_table().unwrap();
        let mut devices: Vec<(u32, u32)> = table_devices(&table)
            .map(|d| {
                let d = std::str::from_utf8(d).unwrap();
                let (major, minor) = d.split_once(':').unwrap();
                (major.parse().unwrap(), minor.parse().unwrap())
            })
            .collect();
        devices.sort();
        devices
    }

    /// The devices `devices_by_mount` lists, sorted; None only before Linux 6.8.
    #[cfg(target_os = "linux")]
    fn devices_listed() -> Option<Vec<(u32, u32)>> {
        let listed = devices_by_mount().map(|mut devices| {
            devices.sort();
            devices
        });
        let release = nix::sys::utsname::uname().unwrap();
        let release = release.release().to_string_lossy().into_owned();
        let mut version = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse());
        let (major, minor): (u32, u32) = match (version.next(), version.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
            _ => (0, 0),
        };
        assert!(
            listed.is_some() || (major, minor) < (6, 8),
            "listmount and statmount answer nothing on Linux {release}"
        );
        listed
    }

    /// A mount namespace of the calling process's own (in a user namespace when not
    /// root), where `from` is also mounted on `to`; then, with `chroot`, `chroot` there
    /// (with /proc at its `proc`).
    #[cfg(target_os = "linux")]
    fn bind_mounted(from: &Path, to: &Path, chroot: Option<&Path>) -> bool {
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        let proc = chroot.map(|root| c(&root.join("proc")));
        let (from, to, root) = (c(from), c(to), chroot.map(c));
        let flags = if nix::unistd::geteuid().is_root() {
            libc::CLONE_NEWNS
        } else {
            libc::CLONE_NEWNS | libc::CLONE_NEWUSER
        };
        let (null, no_data) = (std::ptr::null(), std::ptr::null());
        unsafe {
            libc::unshare(flags) == 0
                && libc::mount(
                    null,
                    c"/".as_ptr(),
                    null,
                    libc::MS_REC | libc::MS_PRIVATE,
                    no_data,
                ) == 0
                && libc::mount(from.as_ptr(), to.as_ptr(), null, libc::MS_BIND, no_data) == 0
                && proc.is_none_or(|proc| {
                    let bind = libc::MS_BIND | libc::MS_REC;
                    libc::mount(c"/proc".as_ptr(), proc.as_ptr(), null, bind, no_data) == 0
                })
                && root.is_none_or(|root| {
                    libc::chroot(root.as_ptr()) == 0 && libc::chdir(c"/".as_ptr()) == 0
                })
        }
    }

    /// The kernel's list, mount by mount, is the table's: here, after a bind mount (in a
    /// forked child's own mount namespace, in a user namespace when not root), and on a
    /// thread that made a namespace of its own (as root). Compared device by device: a
    /// yes/no answer could agree by chance where the host already has a device twice.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_lists_the_devices_the_mount_table_does() {
        let Some(here) = devices_listed() else {
            eprintln!("SKIP: listmount and statmount need Linux 6.8");
            return;
        };
        assert_eq!(here, devices_in_table());
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&from).unwrap();
        std::fs::create_dir(&to).unwrap();
        let count =
            |devices: &[(u32, u32)], device| devices.iter().filter(|d| **d == device).count();
        let device = {
            use std::os::unix::fs::MetadataExt;
            let dev = std::fs::metadata(&from).unwrap().dev();
            (libc::major(dev), libc::minor(dev))
        };
        let before = count(&here, device);
        let code = crate::in_a_child(
            || bind_mounted(&from, &to, None),
            || {
                let listed = devices_listed();
                listed.as_deref() == Some(&devices_in_table()[..])
                    && listed.is_some_and(|l| count(&l, device) == before + 1)
            },
        );
        match code {
            0 => {}
            3 => eprintln!("SKIP: cannot make a mount namespace with a bind mount here"),
            _ => panic!(
                "after a bind mount, listmount and statmount listed other devices than the table"
            ),
        }
        if nix::unistd::geteuid().is_root() {
            let (from, to) = (from.clone(), to.clone());
            let on_a_thread = std::thread::spawn(move || {
                assert!(
                    bind_mounted(&from, &to, None),
                    "{}",
                    std::io::Error::last_os_error()
                );
                (devices_listed(), devices_in_table())
            });
            let (listed, table) = on_a_thread.join().unwrap();
            assert_eq!(
                listed.as_deref(),
                Some(&table[..]),
                "on a thread of its own namespace"
            );
            assert_eq!(count(&table, device), before + 1);
        }
    }

    /// Chrooted into a directory that is not a mount's root (with a directory beside it
    /// mounted inside, whose second name nothing lists): refused, from statx and from the
    /// table alike; at the root of a mount, not.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_chroot_that_is_not_a_mount_point_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let jail = dir.path().join("jail");
        let (from, to) = (jail.join("sub"), jail.join("other"));
        for dir in [&from, &to, &jail.join("proc")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(from.join("secret"), "").unwrap();
        let hidden = [PathBuf::from("/sub/secret")];
        let code = crate::in_a_child(
            || bind_mounted(&from, &to, Some(&jail)),
            || {
                let table = read_mount_table().unwrap();
                let refused = find(&hidden).is_err_and(|e| e.contains("mount --bind DIR DIR"));
                root_is_a_mount() != Some(true) && !table_has_root_mount(&table) && refused
            },
        );
        match code {
            0 => {}
            3 => eprintln!("SKIP: cannot chroot in a mount namespace of its own here"),
            _ => panic!("chrooted into a plain directory, a call was not refused"),
        }
        let table = read_mount_table().unwrap();
        assert!(root_is_a_mount() != Some(false) && table_has_root_mount(&table));
    }

    fn mount(id: u64, parent: u64, device: &str, root: &str, at: &str) -> Mount {
        Mount {
            id,
            parent,
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
                mount(27, 1, "254:0", "/", "/"),
                mount(40, 27, "254:0", "/home/u/My Keys", "/mnt/with\\slash\ttab"),
                mount(41, 27, "0:50", "/etc/shadow", "/srv/old-shadow"),
            ]
        );
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_it() {
        let err = parse(b"27 1 254:0 / / rw - ext4 x rw\n28 27 nodevice / /x\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("nodevice"), "{err}");
        let bad: [&[u8]; 3] = [
            b"27 1 254:0 /\n",
            b"x 1 254:0 / / rw\n",
            b"27 y 254:0 / / rw\n",
        ];
        for bad in bad {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("line 1"), "{err}");
        }
    }

    #[test]
    fn a_backslash_without_three_octal_digits_is_kept() {
        assert_eq!(unescape(b"a\\b\\04"), b"a\\b\\04".to_vec());
        assert_eq!(unescape(b"\\400"), b"\\400".to_vec());
        assert_eq!(unescape(b"\\040x"), b" x".to_vec());
    }

    #[test]
    fn only_a_filesystem_mounted_twice_is_shared() {
        let once = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:5 / /proc rw - proc proc rw\n";
        assert!(!any_shared(once.as_bytes()));
        let twice = format!("{once}3 1 8:1 /home /h rw - ext4 /dev/sda1 rw\n");
        assert!(any_shared(twice.as_bytes()));
        // Same digits, another device.
        let similar = format!("{once}3 1 8:11 / /x rw - ext4 /dev/sda11 rw\n");
        assert!(!any_shared(similar.as_bytes()));
        // A line without a device field is left to the parser, which rejects it.
        assert!(any_shared(format!("{once}3 1\n").as_bytes()));
        assert!(!any_shared(b""));
    }

    /// The other names of `path` (on the mount `on`), and whether a directory on its way
    /// has another name.
    fn names(mounts: &[Mount], on: u64, path: &str) -> (Vec<(String, String)>, bool) {
        let analysis = analyse(mounts, &[(PathBuf::from(path), on)]).unwrap();
        let names = analysis
            .candidates
            .into_iter()
            .map(|(name, target, of)| {
                assert_eq!(of, Path::new(path));
                (name.display().to_string(), target.display().to_string())
            })
            .collect();
        (names, analysis.ancestors_shared)
    }

    /// Each name with the path whose file it must lead to.
    fn owned(names: &[(&str, &str)]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|(n, target)| (n.to_string(), target.to_string()))
            .collect()
    }

    #[test]
    fn a_second_mount_of_the_whole_filesystem_or_of_an_ancestor_is_a_name() {
        let mounts = [
            mount(1, 1, "8:1", "/", "/"),
            mount(2, 1, "8:1", "/", "/mnt/disk"),
            mount(3, 1, "8:1", "/home", "/srv/homes"),
            mount(4, 1, "8:1", "/home/u/.ssh", "/keys"),
            mount(5, 1, "8:2", "/", "/home/u/.ssh/another-disk"),
            mount(6, 1, "8:1", "/var", "/var-again"),
        ];
        let expected = [
            ("/mnt/disk/home/u/.ssh", "/home/u/.ssh"),
            ("/srv/homes/u/.ssh", "/home/u/.ssh"),
            ("/keys", "/home/u/.ssh"),
        ];
        // The whole disk and /home show /home/u too.
        assert_eq!(names(&mounts, 1, "/home/u/.ssh"), (owned(&expected), true));
    }

    #[test]
    fn a_mount_of_a_directory_inside_a_hidden_path_is_hidden_whole() {
        let mounts = [
            mount(1, 1, "8:1", "/", "/"),
            mount(2, 1, "8:1", "/root/.gnupg/private-keys-v1.d", "/opt/keys"),
        ];
        let expected = owned(&[("/opt/keys", "/root/.gnupg/private-keys-v1.d")]);
        assert_eq!(names(&mounts, 1, "/root/.gnupg"), (expected, false));
    }

    #[test]
    fn the_source_of_a_mount_inside_a_hidden_path_is_hidden_too() {
        let mounts = [
            mount(1, 1, "8:1", "/", "/"),
            mount(2, 1, "8:1", "/srv/real-keys", "/root/.ssh/keys"),
            mount(3, 1, "0:60", "/", "/root/.ssh/on-a-tmpfs"),
            mount(4, 1, "0:60", "/sub", "/tmp/tmpfs-again"),
        ];
        let expected = owned(&[
            ("/srv/real-keys", "/root/.ssh/keys"),
            ("/tmp/tmpfs-again", "/root/.ssh/on-a-tmpfs/sub"),
        ]);
        assert_eq!(names(&mounts, 1, "/root/.ssh"), (expected, false));
    }

    #[test]
    fn a_path_on_a_bind_mount_is_placed_by_that_mounts_root() {
        // /home is itself a bind of /data/home; /data shows the whole disk.
        let mounts = [
            mount(1, 1, "8:1", "/", "/"),
            mount(2, 1, "8:3", "/", "/data"),
            mount(3, 1, "8:3", "/home", "/home"),
        ];
        let expected = owned(&[("/data/home/u/.aws", "/home/u/.aws")]);
        assert_eq!(names(&mounts, 3, "/home/u/.aws"), (expected, true));
        // A file bind of a deleted /etc/shadow still shows it.
        let shadow = [
            mount(1, 1, "8:1", "/", "/"),
            mount(2, 1, "8:1", "/etc/shadow", "/srv/old"),
        ];
        let expected = owned(&[("/srv/old", "/etc/shadow")]);
        assert_eq!(names(&shadow, 1, "/etc/shadow"), (expected, false));
    }

    /// btrfs: `/` is the subvolume @, /home the subvolume @home; the top level, which
    /// holds both, may be mounted too (for snapshots). Then /home/u is also
    /// /pool/@home/u, and Landlock's rules must not take /pool/@ for an unrelated
    /// directory: it is `/`.
    #[test]
    fn subvolumes_are_names_only_where_the_top_level_is_mounted() {
        let mut mounts = vec![
            mount(1, 1, "0:40", "/@", "/"),
            mount(3, 1, "0:40", "/@home", "/home"),
        ];
        assert_eq!(names(&mounts, 3, "/home/u/.ssh"), (vec![], false));
        mounts.push(mount(2, 1, "0:40", "/", "/pool"));
        let expected = owned(&[("/pool/@home/u/.ssh", "/home/u/.ssh")]);
        assert_eq!(names(&mounts, 3, "/home/u/.ssh"), (expected, true));
    }

    /// ~/.config/gh on a filesystem of its own, and ~/.config bound elsewhere without it:
    /// no other name of gh, but ~/.config, on its way, has one.
    #[test]
    fn a_directory_on_the_way_with_another_name_is_found_through_the_parent_mounts() {
        let mounts = [
            mount(1, 1, "8:1", "/", "/"),
            mount(2, 1, "0:50", "/", "/home/u/.config/gh"),
            mount(3, 1, "8:1", "/home/u/.config", "/home/u/cfg-bind"),
        ];
        assert_eq!(names(&mounts, 2, "/home/u/.config/gh"), (vec![], true));
        // Bound from deeper down, it shows nothing on the way.
        let mounts = [
            mounts[0].clone(),
            mounts[1].clone(),
            mount(3, 1, "8:1", "/home/u/.config/other", "/home/u/cfg-bind"),
        ];
        assert_eq!(names(&mounts, 2, "/home/u/.config/gh"), (vec![], false));
    }

    #[test]
    fn the_same_place_mounted_over_itself_is_not_a_name_and_unknown_mounts_are_errors() {
        let mounts = [
            mount(1, 1, "8:1", "/", "/"),
            mount(2, 1, "8:1", "/root/.ssh", "/root/.ssh"),
        ];
        assert_eq!(names(&mounts, 2, "/root/.ssh"), (vec![], false));
        let err = analyse(&mounts, &[(PathBuf::from("/root/.ssh"), 99)]).unwrap_err();
        assert!(
            err.contains("does not list") && err.contains("chroot"),
            "{err}"
        );
        assert!(analyse(&mounts, &[(PathBuf::from("/elsewhere"), 2)]).is_err());
    }
}
