//! Applies the planned rules (`sandbox::landlock_rules`) as a Landlock ruleset.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use landlock::{
    make_bitflags, Access, AccessFs, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr,
    Scope, ABI,
};
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};

use super::tmp_pool::Slot;
use crate::sandbox::landlock_rules::{Grant, Rule};

/// The ABI chitti is tested against. V6 is the first with signal and abstract-socket
/// scoping; newer kernels are used at this level (their extra rights stay unhandled).
pub const PINNED_ABI: ABI = ABI::V6;
pub const PINNED_ABI_NUMBER: i32 = 6;

#[derive(Debug, thiserror::Error)]
#[error("landlock: {0}")]
pub struct LandlockError(String);

fn err(context: &str) -> impl FnOnce(landlock::RulesetError) -> LandlockError + '_ {
    move |e| LandlockError(format!("{context}: {e}"))
}

fn read_dir_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | ReadDir | Execute })
}

fn read_file_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | Execute })
}

fn device_rw_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | WriteFile | Truncate | IoctlDev })
}

/// [`device_rw_access`] beneath a directory, which may be listed but not changed.
fn device_tree_access() -> BitFlags<AccessFs> {
    device_rw_access() | AccessFs::ReadDir
}

/// Builds (but does not enforce) the ruleset. Enforcement happens in the command
/// between fork and exec (`landlock_restrict_self` on the ruleset's descriptor).
pub fn build(rules: &[Rule]) -> Result<OwnedFd, LandlockError> {
    let ruleset = create()?;
    add_all(ruleset.as_fd(), rules)?;
    Ok(ruleset)
}

/// Grants full access to `path` (a writable root) in the ruleset `ruleset`.
pub fn grant_writable(ruleset: BorrowedFd, path: &Path) -> Result<(), LandlockError> {
    let (is_dir, access) = grant_of(Grant::Write);
    add(ruleset, path, is_dir, access, false, false).map(|_| ())
}

/// A ruleset handling every filesystem right and scope of the pinned ABI, without rules.
pub fn create() -> Result<OwnedFd, LandlockError> {
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(PINNED_ABI))
        .map_err(err("handling filesystem access"))?
        .scope(Scope::from_all(PINNED_ABI))
        .map_err(err("scoping signals and abstract sockets"))?
        .create()
        .map_err(err("creating the ruleset"))?;
    let ruleset: Option<OwnedFd> = ruleset.into();
    ruleset.ok_or_else(|| LandlockError("the kernel returned no ruleset".into()))
}

/// Adds every planned rule to `ruleset` (made by [`create`]).
pub fn add_all(ruleset: BorrowedFd, rules: &[Rule]) -> Result<(), LandlockError> {
    for rule in rules {
        add_rule(ruleset, rule, false)?;
    }
    Ok(())
}

/// [`build`], also noting in `ids` which file each rule named (None: left out).
fn build_noting(rules: &[Rule], ids: &mut Vec<Option<FileId>>) -> Result<OwnedFd, LandlockError> {
    let ruleset = create()?;
    for rule in rules {
        ids.push(add_rule(ruleset.as_fd(), rule, true)?);
    }
    Ok(ruleset)
}

/// Adds one planned rule; with `note_id`, also says which file it named.
fn add_rule(
    ruleset: BorrowedFd,
    rule: &Rule,
    note_id: bool,
) -> Result<Option<FileId>, LandlockError> {
    let (is_dir, access) = grant_of(rule.grant);
    // The read allow-list names the siblings of every directory on the way to a hidden
    // path, listed moments ago; one of them may be gone by now (another program removed
    // it). A rule that only allows reading can be left out then: without it the path is
    // denied, the safe side. A writable root must exist.
    let optional = !matches!(rule.grant, Grant::Write);
    add(ruleset, &rule.path, is_dir, access, optional, note_id)
}

fn grant_of(grant: Grant) -> (bool, BitFlags<AccessFs>) {
    match grant {
        Grant::List => (true, AccessFs::ReadDir.into()),
        Grant::ReadTree => (true, read_dir_access()),
        Grant::ReadFile => (false, read_file_access()),
        Grant::Device => (false, device_rw_access()),
        Grant::DeviceTree => (true, device_tree_access()),
        Grant::Write => (true, AccessFs::from_all(PINNED_ABI)),
    }
}

/// The file a path named: device, inode, and whether it was a directory (which decides
/// the rights a rule on it can carry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    dir: bool,
}

impl FileId {
    fn of(stat: &libc::stat) -> FileId {
        FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
            dir: stat.st_mode & libc::S_IFMT == libc::S_IFDIR,
        }
    }

    /// What `path` names now, without following a symlink in its last component.
    fn now(path: &Path) -> Option<FileId> {
        nix::sys::stat::lstat(path).ok().map(|s| FileId::of(&s))
    }
}

/// How many calls one kept ruleset serves before it is built afresh. Each call adds a
/// write rule for its private TMPDIR, removed after the call: the rule then names a
/// directory no path leads to (Landlock keeps it allocated until the ruleset goes), so it
/// grants nothing; the bound keeps the ruleset, and what it holds, from growing.
const CALLS_PER_RULESET: usize = 64;

/// The ruleset of a session's last call, kept for the next one (chat, mcp).
///
/// Building a ruleset costs an `openat2`, `landlock_add_rule` and `close` per rule (about
/// 0.6 ms for the ~190 rules of a call run as root); the plan is made afresh for every
/// call anyway. The kept ruleset is used again only when the new plan is the same list of
/// rules and every path in it still names the file it named when the ruleset was built
/// (device and inode, seen without following a symlink): a ruleset built now would then
/// be the same. Anything else (a new sibling, a file replaced by rename, a path that
/// appeared or became a symlink) builds a new one. Landlock holds a reference on every
/// file a rule names, so while the ruleset lives no new file can take the device and
/// inode of a granted one. One call at a time holds it; a concurrent call builds its own.
#[derive(Default)]
pub struct RulesetCache {
    slot: std::sync::Mutex<Option<Kept>>,
    /// The session's slot of the TMPDIR pool while no call uses it (see [`CallTmp`]).
    tmp_slot: std::sync::Mutex<Option<Slot>>,
}

struct Kept {
    rules: Vec<Rule>,
    ids: Vec<Option<FileId>>,
    ruleset: OwnedFd,
    calls: usize,
    /// The slot of the TMPDIR pool this ruleset grants, if any, as the directory's device
    /// and inode (Landlock grants the directory, not its name, and a dead slot's name is
    /// given to a fresh directory): it is used again only by a call that holds that very
    /// directory, so that it never grants one another call may have taken since.
    granted_slot: Option<(u64, u64)>,
}

/// A session call's private TMPDIR, granted in its ruleset.
pub enum CallTmp<'a> {
    /// A directory of the call's own, removed after it.
    Fresh(&'a Path),
    /// A slot of the TMPDIR pool that the session keeps locked ([`RulesetCache::take_slot`]),
    /// handed back to the cache with the lease: no `mkdir` and `rmdir` per call.
    Slot(Slot),
}

impl Kept {
    fn serves(&self, rules: &[Rule]) -> bool {
        self.calls < CALLS_PER_RULESET
            && self.rules == rules
            && self.rules.iter().zip(&self.ids).all(|(rule, id)| match id {
                Some(id) => FileId::now(&rule.path) == Some(*id),
                // Left out (missing, or reached through a symlink): only while a new
                // ruleset would leave it out too.
                None => open_path(&rule.path).is_err(),
            })
    }
}

/// Hands a session's ruleset back to its cache once the call is over (on drop).
pub struct Lease {
    cache: std::sync::Arc<RulesetCache>,
    kept: Option<Kept>,
    /// The call's private TMPDIR when it is a fresh directory, granted in the ruleset
    /// from now on.
    tmp: Option<std::path::PathBuf>,
    /// The session's TMPDIR slot, when the call has it.
    tmp_slot: Option<Slot>,
    /// Whether the ruleset was built for this call (rather than kept from an earlier one).
    pub fresh: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Whether its call ended cleanly is checked when it is next taken.
        if let Some(slot) = self.tmp_slot.take() {
            let mut kept = self
                .cache
                .tmp_slot
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if kept.is_none() {
                *kept = Some(slot);
            }
        }
        // The grant on this call's TMPDIR stays in the ruleset; it is harmless only once
        // the directory is gone (removed after the call). If it is still there (the call
        // did not get that far, or the removal failed), the next call must not inherit
        // it: the ruleset is dropped instead.
        if self
            .tmp
            .as_deref()
            .is_some_and(|t| t.symlink_metadata().is_ok())
        {
            return;
        }
        if let Some(kept) = self.kept.take() {
            *self.cache.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(kept);
        }
    }
}

impl RulesetCache {
    /// The session's TMPDIR slot for a call: the one it keeps, if no other call of the
    /// session has it and it is still clean ([`Slot::reusable`]; one whose call did not end
    /// cleanly is dropped, and never handed out again by the pool either), else one from
    /// `take` (the pool), kept from then on. None when neither is to be had.
    pub fn take_slot(
        &self,
        writable: &[std::path::PathBuf],
        take: impl FnOnce() -> Option<Slot>,
    ) -> Option<Slot> {
        let kept = self
            .tmp_slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match kept {
            Some(slot) if slot.reusable(writable) => Some(slot),
            _ => take(),
        }
    }

    /// The ruleset for `rules`, plus full access to `tmp` (this call's private TMPDIR),
    /// as the descriptor the command enforces; the lease returns it to the cache when
    /// dropped, which must not happen before the command has enforced it.
    pub fn ruleset_for(
        self: &std::sync::Arc<Self>,
        rules: &[Rule],
        tmp: Option<CallTmp>,
    ) -> Result<(OwnedFd, Lease), LandlockError> {
        let slot_id = match &tmp {
            Some(CallTmp::Slot(slot)) => slot.id(),
            _ => None,
        };
        let taken = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (mut kept, fresh) = match taken {
            Some(kept)
                if kept.serves(rules)
                    && kept
                        .granted_slot
                        .as_ref()
                        .is_none_or(|granted| Some(*granted) == slot_id) =>
            {
                (kept, false)
            }
            _ => {
                let mut ids = Vec::with_capacity(rules.len());
                let ruleset = build_noting(rules, &mut ids)?;
                let kept = Kept {
                    rules: rules.to_vec(),
                    ids,
                    ruleset,
                    calls: 0,
                    granted_slot: None,
                };
                (kept, true)
            }
        };
        // A second descriptor of the same ruleset: what is added through it is in both.
        let fd = kept
            .ruleset
            .try_clone()
            .map_err(|e| LandlockError(format!("duplicating the ruleset: {e}")))?;
        let (mut fresh_tmp, mut tmp_slot) = (None, None);
        match tmp {
            Some(CallTmp::Fresh(path)) => {
                grant_writable(fd.as_fd(), path)?;
                fresh_tmp = Some(path.to_path_buf());
            }
            Some(CallTmp::Slot(slot)) => {
                grant_writable(fd.as_fd(), &slot.path)?;
                // Unidentified, it could not be told apart later: no call reuses it.
                kept.granted_slot = Some(slot.id().ok_or_else(|| {
                    LandlockError("cannot identify the TMPDIR slot (fstat failed)".into())
                })?);
                tmp_slot = Some(slot);
            }
            None => {}
        }
        kept.calls += 1;
        let lease = Lease {
            cache: std::sync::Arc::clone(self),
            kept: Some(kept),
            tmp: fresh_tmp,
            tmp_slot,
            fresh,
        };
        Ok((fd, lease))
    }
}

/// Opens `path` only to name it in a rule (`O_PATH`): no read permission is needed, and a
/// device or a FIFO is not actually opened. Every planned path is canonical (writable
/// roots, the ancestors of hidden paths, and their non-symlink entries), so any symlink met
/// on the way was put there after planning: following it would grant whatever it points
/// at, a hidden path included. `openat2` with `RESOLVE_NO_SYMLINKS` refuses such a path
/// (ELOOP) in any component. (Not landlock's `PathFd::new`, which goes through std's
/// `OpenOptions`: on musl, std drops `O_PATH` from custom flags.)
fn open_path(path: &Path) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how) {
        // A container's seccomp filter may not know openat2 (Landlock ABI 6 means Linux
        // 6.12 or newer, which has it): check the last component at least.
        Err(nix::errno::Errno::ENOSYS) => open_path_without_openat2(path),
        other => other,
    }
}

fn open_path_without_openat2(path: &Path) -> nix::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        nix::sys::stat::Mode::empty(),
    )?;
    if nix::sys::stat::fstat(&fd)?.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(nix::errno::Errno::ELOOP);
    }
    Ok(fd)
}

/// Adds the rule for `path`; with `note_id`, also says which file it named.
fn add(
    ruleset: BorrowedFd,
    path: &Path,
    is_dir: bool,
    access: BitFlags<AccessFs>,
    optional: bool,
    note_id: bool,
) -> Result<Option<FileId>, LandlockError> {
    let fd = match open_path(path) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) if optional => return Ok(None),
        // Replaced by (or moved under) a symlink since planning: no grant, the safe side.
        Err(nix::errno::Errno::ELOOP) if optional => return Ok(None),
        Err(e) => {
            return Err(LandlockError(format!(
                "cannot open {}: {}",
                path.display(),
                std::io::Error::from(e)
            )))
        }
    };
    let stat = |fd: &OwnedFd| {
        nix::sys::stat::fstat(fd).map_err(|e| {
            LandlockError(format!(
                "cannot stat {}: {}",
                path.display(),
                std::io::Error::from(e)
            ))
        })
    };
    let id = if note_id {
        Some(FileId::of(&stat(&fd)?))
    } else {
        None
    };
    let file_access = access & AccessFs::from_file(PINNED_ABI);
    let added = match add_path_beneath(
        ruleset,
        fd.as_fd(),
        if is_dir { access } else { file_access },
    ) {
        // Planned as a directory, but a file now (replaced since): the kernel refuses
        // directory rights on a file; the rule grants what it can on the file.
        Err(e) if is_dir && e.raw_os_error() == Some(libc::EINVAL) => {
            if stat(&fd)?.st_mode & libc::S_IFMT == libc::S_IFDIR {
                Err(e)
            } else {
                add_path_beneath(ruleset, fd.as_fd(), file_access)
            }
        }
        other => other,
    };
    added.map_err(|e| LandlockError(format!("rule for {}: {e}", path.display())))?;
    Ok(id)
}

/// `struct landlock_path_beneath_attr` of the kernel's uapi (packed there too).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

/// `landlock_add_rule` for one path. The landlock crate's `add_rule` first asks fstat
/// whether the file is a directory, to drop the rights a file cannot take; the plan knows
/// already (and [`add`] handles a file that was a directory when planned), which saves a
/// system call per rule, a few hundred per call.
fn add_path_beneath(
    ruleset: BorrowedFd,
    path: BorrowedFd,
    access: BitFlags<AccessFs>,
) -> std::io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access: access.bits(),
        parent_fd: path.as_raw_fd(),
    };
    let added = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if added < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel's Landlock ABI version, or why there is none.
pub fn kernel_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 0 {
        return Ok(v as i32);
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return Err(
            "Landlock is built into this kernel but disabled: add `landlock` to the `lsm=` \
             kernel parameter"
                .into(),
        );
    }
    // The kernel itself answers only EOPNOTSUPP or ENOSYS here; anything else, or an
    // ENOSYS where the kernel lists Landlock among its security modules or this process
    // runs under a seccomp filter, is a filter (a container's) refusing the call.
    let lsm_lists_landlock = std::fs::read_to_string("/sys/kernel/security/lsm")
        .is_ok_and(|lsms| lsms.trim().split(',').any(|m| m == "landlock"));
    let filtered = std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .any(|l| l.starts_with("Seccomp:") && l.trim_end().ends_with('2'))
    });
    let too_old = super::kernel_older_than((5, 13)).unwrap_or(false);
    Err(blocker_for(error, lsm_lists_landlock, filtered, too_old))
}

/// Why `landlock_create_ruleset` failed with `error`, in words. A kernel older than 5.13
/// has no Landlock, filter or not.
fn blocker_for(
    error: std::io::Error,
    lsm_lists_landlock: bool,
    filtered: bool,
    kernel_too_old: bool,
) -> String {
    let kernel_answer = error.raw_os_error() == Some(libc::ENOSYS);
    if kernel_too_old || (kernel_answer && !lsm_lists_landlock && !filtered) {
        return "this kernel has no Landlock (needs Linux 5.13 or newer with \
                CONFIG_SECURITY_LANDLOCK)"
            .into();
    }
    let filter = if filtered {
        "a seccomp filter this process runs under (a container runtime's profile, for \
         example) refuses it"
    } else {
        "something other than the kernel's Landlock refuses it"
    };
    let kernel = if lsm_lists_landlock {
        "the kernel does have Landlock (/sys/kernel/security/lsm lists it)"
    } else {
        "the kernel may well have Landlock"
    };
    format!(
        "the landlock_create_ruleset system call failed ({error}): {filter}; {kernel}. Allow \
         the call (for a container: its seccomp profile), or use bubblewrap"
    )
}

/// Why the landlock backend cannot enforce chitti's guarantees here, if it cannot.
pub fn abi_blocker(abi: i32) -> Option<String> {
    (abi < PINNED_ABI_NUMBER).then(|| {
        format!(
            "kernel Landlock ABI {abi} is older than {PINNED_ABI_NUMBER} (Linux 6.12): it cannot \
             keep signals and abstract unix sockets inside the sandbox; install bubblewrap or \
             upgrade the kernel"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;

    /// A filter's refusal (a container's seccomp profile) is not taken for a kernel
    /// without Landlock, which would send the user after the wrong fix.
    #[test]
    fn a_filtered_landlock_call_is_not_blamed_on_the_kernel() {
        let errno = |e| std::io::Error::from_raw_os_error(e);
        let old_kernel = blocker_for(errno(libc::ENOSYS), false, false, false);
        assert!(
            old_kernel.contains("this kernel has no Landlock"),
            "{old_kernel}"
        );
        // Too old for Landlock: the kernel is the blocker even under a filter.
        let old_kernel = blocker_for(errno(libc::EPERM), false, true, true);
        assert!(
            old_kernel.contains("this kernel has no Landlock"),
            "{old_kernel}"
        );
        assert_eq!(
            super::super::release_older_than("5.10.0-28-amd64", (5, 13)),
            Some(true)
        );
        assert_eq!(
            super::super::release_older_than("5.13.0", (5, 13)),
            Some(false)
        );
        assert_eq!(
            super::super::release_older_than("6.18.1", (5, 13)),
            Some(false)
        );
        assert_eq!(super::super::release_older_than("weird", (5, 13)), None);
        for (e, lsm, filtered) in [
            (libc::EPERM, false, true),
            (libc::EPERM, false, false),
            (libc::ENOSYS, true, false),
            (libc::ENOSYS, false, true),
        ] {
            let why = blocker_for(errno(e), lsm, filtered, false);
            assert!(!why.contains("this kernel has no Landlock"), "{why}");
            assert!(why.contains("or use bubblewrap"), "{why}");
            assert_eq!(why.contains("seccomp filter"), filtered, "{why}");
            assert_eq!(why.contains("does have Landlock"), lsm, "{why}");
        }
    }

    /// A temporary directory and its canonical path (the planner's paths are canonical);
    /// None, after saying SKIP, where this kernel's Landlock cannot be used.
    fn dir_where_landlock_works() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
        if let Some(why) = kernel_abi().map_or_else(Some, abi_blocker) {
            eprintln!("SKIP: {why}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        Some((dir, root))
    }

    fn rule(path: &Path, grant: Grant) -> Rule {
        Rule {
            path: path.to_path_buf(),
            grant,
        }
    }

    /// A directory listed while planning and removed before the ruleset is built (another
    /// program's temporary directory, say) costs its read rule, not the whole call.
    #[test]
    fn a_read_rule_for_a_vanished_path_is_left_out() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        let gone = root.join("gone");
        for grant in [Grant::List, Grant::ReadTree, Grant::ReadFile, Grant::Device] {
            let rules = [rule(&root, Grant::Write), rule(&gone, grant)];
            assert!(build(&rules).is_ok(), "{grant:?}");
        }
    }

    #[test]
    fn a_missing_writable_root_is_an_error() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        let gone = root.join("gone");
        let message = build(&[rule(&gone, Grant::Write)])
            .err()
            .unwrap()
            .to_string();
        assert!(message.contains("gone"), "{message}");
    }

    /// Runs `sh -c script` in `dir` under `rules` (Landlock only, in the child between
    /// fork and exec) and returns its exit status.
    fn run_restricted(rules: &[Rule], dir: &Path, script: &str) -> std::process::ExitStatus {
        run_under(&build(rules).unwrap(), dir, script)
    }

    /// Runs `sh -c script` in `dir` under the ruleset `ruleset`.
    fn run_under(ruleset: &OwnedFd, dir: &Path, script: &str) -> std::process::ExitStatus {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = ruleset.as_raw_fd();
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", script]).current_dir(dir);
        // SAFETY: only system calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.status().unwrap()
    }

    /// The system directories sh and cat need, a listed `root`, and `more`.
    fn rules_for_sh(root: &Path, more: &[(&str, Grant)]) -> Vec<Rule> {
        let mut rules: Vec<Rule> = ["/usr", "/bin", "/lib", "/lib64", "/etc"]
            .iter()
            .map(|p| rule(Path::new(p), Grant::ReadTree))
            .collect();
        rules.push(rule(root, Grant::List));
        for (name, grant) in more {
            rules.push(rule(&root.join(name), *grant));
        }
        rules
    }

    /// A hundred rules (as root without mounts a call has some 190) all land in the
    /// ruleset: every granted file is readable, the one left out is not, and a failing rule
    /// fails the build. Decided by what reaches the writable directory.
    #[test]
    fn a_ruleset_has_every_rule_and_only_those() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        let gone = root.join("gone");
        std::fs::create_dir(root.join("out")).unwrap();
        std::fs::write(root.join("secret"), "hidden\n").unwrap();
        let names: Vec<String> = (0..100).map(|i| format!("f{i}")).collect();
        for name in &names {
            std::fs::write(root.join(name), format!("{name}\n")).unwrap();
        }
        let mut more: Vec<(&str, Grant)> = names
            .iter()
            .map(|n| (n.as_str(), Grant::ReadFile))
            .collect();
        more.push(("out", Grant::Write));
        let rules = rules_for_sh(&root, &more);

        let status = run_under(
            &build(&rules).unwrap(),
            &root,
            "LC_ALL=C; cat f* > out/all; cat secret > out/secret",
        );
        assert!(!status.success(), "reading the secret succeeded");
        let all = std::fs::read_to_string(root.join("out/all")).unwrap();
        let mut expected: Vec<String> = names.iter().map(|n| format!("{n}\n")).collect();
        expected.sort();
        assert_eq!(all, expected.concat());
        assert_eq!(
            std::fs::read_to_string(root.join("out/secret")).unwrap(),
            ""
        );

        let mut failing = rules.clone();
        failing.push(rule(&gone, Grant::Write));
        let message = build(&failing).err().unwrap().to_string();
        assert!(message.contains("gone"), "{message}");
    }

    /// A directory listed while planning may be a file by the time the ruleset is built
    /// (replaced by rename): the kernel refuses directory rights on a file, so the rule
    /// grants the file's share of them instead of failing the call. Decided by what
    /// reaches the writable directory.
    #[test]
    fn a_directory_replaced_by_a_file_after_planning_is_granted_as_a_file() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        std::fs::create_dir(root.join("out")).unwrap();
        std::fs::write(root.join("was-a-dir"), "readable\n").unwrap();
        let rules = rules_for_sh(
            &root,
            &[("was-a-dir", Grant::ReadTree), ("out", Grant::Write)],
        );
        let status = run_restricted(&rules, &root, "cat was-a-dir > out/copy");
        assert!(status.success(), "{status}");
        assert_eq!(
            std::fs::read_to_string(root.join("out/copy")).unwrap(),
            "readable\n"
        );
    }

    /// Planning lists a hidden file's siblings; one of them replaced by a symlink to the
    /// hidden file before the ruleset is built must not carry its grant over to the
    /// target. Decided by what reaches the writable directory.
    #[test]
    fn a_sibling_swapped_for_a_symlink_after_planning_grants_nothing() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        std::fs::create_dir_all(root.join("hidden")).unwrap();
        std::fs::write(root.join("hidden/key"), "SECRET\n").unwrap();
        std::fs::create_dir_all(root.join("sibling")).unwrap();
        std::fs::write(root.join("sibling/key"), "public\n").unwrap();
        let out = root.join("out");
        std::fs::create_dir(&out).unwrap();
        // As planned for a hidden `hidden`: its sibling, the writable directory, and the
        // system directories sh and cat need; the directory holding them is only listed.
        let rules = rules_for_sh(
            &root,
            &[("sibling", Grant::ReadTree), ("out", Grant::Write)],
        );
        let copy = "cat sibling/key > out/copy";
        // The control: the sibling as planned is readable, so the probe can succeed.
        run_restricted(&rules, &root, copy);
        assert_eq!(
            std::fs::read_to_string(out.join("copy")).unwrap(),
            "public\n"
        );
        std::fs::remove_file(out.join("copy")).unwrap();

        std::fs::rename(root.join("sibling"), root.join("old-sibling")).unwrap();
        std::os::unix::fs::symlink(root.join("hidden"), root.join("sibling")).unwrap();
        run_restricted(&rules, &root, copy);
        let copied = std::fs::read_to_string(out.join("copy")).unwrap_or_default();
        assert!(
            !copied.contains("SECRET"),
            "the swapped-in symlink granted the hidden file"
        );
    }

    /// A session keeps its ruleset while nothing it names has changed, and builds a new
    /// one as soon as anything has: a file replaced by rename, a path that appeared, a
    /// different plan. Decided by what a command under each ruleset could read.
    #[test]
    fn a_session_reuses_its_ruleset_only_while_every_path_names_the_same_file() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        std::fs::create_dir(root.join("tree")).unwrap();
        std::fs::write(root.join("tree/a"), "tree\n").unwrap();
        std::fs::write(root.join("file"), "one\n").unwrap();
        std::fs::create_dir(root.join("out")).unwrap();
        let rules = rules_for_sh(
            &root,
            &[
                ("tree", Grant::ReadTree),
                ("file", Grant::ReadFile),
                ("later", Grant::ReadFile),
                ("out", Grant::Write),
            ],
        );
        let cache = std::sync::Arc::new(RulesetCache::default());
        let copy = |fd: &OwnedFd| {
            let _ = std::fs::remove_file(root.join("out/copy"));
            run_under(fd, &root, "cat file > out/copy");
            std::fs::read_to_string(root.join("out/copy")).unwrap_or_default()
        };
        let call = |rules: &[Rule]| {
            let tmp = tempfile::tempdir_in(&root).unwrap();
            let (fd, lease) = cache
                .ruleset_for(rules, Some(CallTmp::Fresh(tmp.path())))
                .unwrap();
            // The call writes in its TMPDIR, which is then removed, as after a call.
            assert!(run_under(&fd, tmp.path(), "echo x > t").success());
            drop(tmp);
            (fd, lease)
        };

        let (_, first) = call(&rules);
        assert!(first.fresh);
        drop(first);
        let (fd, second) = call(&rules);
        assert!(
            !second.fresh,
            "nothing changed, yet the ruleset was built again"
        );
        assert_eq!(copy(&fd), "one\n");
        // While one call holds it, another builds its own.
        let (_, concurrent) = call(&rules);
        assert!(concurrent.fresh);
        drop(concurrent);
        drop(second);

        // Replaced by rename: a kept ruleset would grant the old file, not this one.
        std::fs::write(root.join("file.new"), "two\n").unwrap();
        std::fs::rename(root.join("file.new"), root.join("file")).unwrap();
        let (fd, third) = call(&rules);
        assert!(third.fresh, "a replaced file kept its old grant");
        assert_eq!(copy(&fd), "two\n");
        drop(third);

        // A path that was missing when the ruleset was built, and is there now.
        std::fs::write(root.join("later"), "late\n").unwrap();
        let (_, fourth) = call(&rules);
        assert!(fourth.fresh, "a path that appeared was not granted");
        drop(fourth);

        // Another plan.
        let fewer = &rules[..rules.len() - 2];
        let (_, fifth) = call(fewer);
        assert!(fifth.fresh);
        drop(fifth);
        let (_, sixth) = call(fewer);
        assert!(!sixth.fresh);
    }

    /// A session's ruleset that granted its TMPDIR slot serves later calls only while
    /// they hold that same slot: a call with a fresh directory, or with another slot,
    /// gets a ruleset of its own, and its command cannot write into the first slot.
    #[test]
    fn a_ruleset_granting_a_tmpdir_slot_serves_only_calls_holding_that_slot() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        let Some(a) = super::super::tmp_pool::take(&root, &[]) else {
            eprintln!(
                "SKIP: no TMPDIR pool in {} (user.* attributes?)",
                root.display()
            );
            return;
        };
        let b = super::super::tmp_pool::take(&root, &[]).unwrap();
        let (a_path, b_path) = (a.path.clone(), b.path.clone());
        let rules = rules_for_sh(&root, &[]);
        let cache = std::sync::Arc::new(RulesetCache::default());

        let (fd, lease) = cache.ruleset_for(&rules, Some(CallTmp::Slot(a))).unwrap();
        assert!(run_under(&fd, &a_path, "echo x > mine").success());
        assert!(
            a_path.join("mine").exists(),
            "the call's own slot is writable"
        );
        std::fs::remove_file(a_path.join("mine")).unwrap();
        drop(lease);
        let a = cache
            .take_slot(&[], || None)
            .expect("the session's slot comes back");
        assert_eq!(a.path, a_path);

        // The same slot again: the ruleset is kept.
        let (_, lease) = cache.ruleset_for(&rules, Some(CallTmp::Slot(a))).unwrap();
        assert!(
            !lease.fresh,
            "the same slot, yet the ruleset was built again"
        );
        drop(lease);
        let a = cache.take_slot(&[], || None).unwrap();

        // Another slot, and a fresh directory: neither may write into the first slot.
        let fresh_dir = root.join("fresh-tmp");
        std::fs::create_dir(&fresh_dir).unwrap();
        for tmp in [CallTmp::Slot(b), CallTmp::Fresh(&fresh_dir)] {
            let own = match &tmp {
                CallTmp::Slot(slot) => slot.path.clone(),
                CallTmp::Fresh(path) => path.to_path_buf(),
            };
            let (fd, lease) = cache.ruleset_for(&rules, Some(tmp)).unwrap();
            assert!(
                lease.fresh,
                "a ruleset granting {} was reused",
                a_path.display()
            );
            let script = format!("echo x > {}/planted; echo y > mine", a_path.display());
            run_under(&fd, &own, &script);
            assert!(
                own.join("mine").exists(),
                "the call's own TMPDIR is writable"
            );
            std::fs::remove_file(own.join("mine")).unwrap();
            assert!(
                !a_path.join("planted").exists(),
                "a call wrote into another call's TMPDIR slot"
            );
            drop(lease);
        }
        assert_ne!(b_path, a_path);
        drop(a);
    }

    /// Every call of a session gets its own TMPDIR granted; one whose directory outlived
    /// the call (its removal failed) must not leave that grant to the next call.
    #[test]
    fn a_tmpdir_that_outlives_its_call_is_not_left_to_the_next() {
        let Some((_dir, root)) = dir_where_landlock_works() else {
            return;
        };
        let rules = rules_for_sh(&root, &[]);
        let cache = std::sync::Arc::new(RulesetCache::default());
        let stale = root.join("stale-tmp");
        std::fs::create_dir(&stale).unwrap();
        let (_, lease) = cache
            .ruleset_for(&rules, Some(CallTmp::Fresh(&stale)))
            .unwrap();
        drop(lease); // the directory is still there
        let fresh_tmp = root.join("tmp-2");
        std::fs::create_dir(&fresh_tmp).unwrap();
        let (fd, lease) = cache
            .ruleset_for(&rules, Some(CallTmp::Fresh(&fresh_tmp)))
            .unwrap();
        assert!(
            lease.fresh,
            "the ruleset granting a leftover TMPDIR was kept"
        );
        run_under(
            &fd,
            &fresh_tmp,
            "echo x > ../stale-tmp/planted; echo y > mine",
        );
        assert!(
            fresh_tmp.join("mine").exists(),
            "the call's own TMPDIR is writable"
        );
        assert!(
            !stale.join("planted").exists(),
            "a call wrote into an earlier call's TMPDIR"
        );
    }

    #[test]
    fn without_openat2_a_symlink_in_the_last_component_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        assert!(open_path_without_openat2(&dir.path().join("real")).is_ok());
        assert_eq!(
            open_path_without_openat2(&dir.path().join("link")).err(),
            Some(nix::errno::Errno::ELOOP)
        );
        assert_eq!(
            open_path(&dir.path().join("link/x")).err(),
            Some(nix::errno::Errno::ELOOP)
        );
    }

    /// A rule names its path with an `O_PATH` descriptor, which opens nothing: a FIFO
    /// (opened for reading, it would wait for a writer) and a file nobody may read are
    /// named all the same.
    #[test]
    fn rule_paths_are_opened_as_paths_only() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let sealed = dir.path().join("sealed");
        std::fs::write(&sealed, "x").unwrap();
        std::fs::set_permissions(&sealed, std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap();
        for path in [&fifo, &sealed, &dir.path().to_path_buf()] {
            let fd = open_path(path).unwrap();
            let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
            assert!(
                OFlag::from_bits_truncate(flags).contains(OFlag::O_PATH),
                "{} opened with {flags:#o}",
                path.display()
            );
        }
    }
}
