//! Protected paths on a backend without mount namespaces (landlock).
//!
//! Landlock grants are inherited by everything beneath a writable root, so it cannot keep
//! `.git/hooks` read-only while `.git/index` stays writable. chitti closes that gap after
//! the fact: it snapshots the protected paths before the call and, once every sandboxed
//! process is dead, puts back whatever changed and reports it. A renamed `.git` is found
//! again through a descriptor held across the call.
//!
//! Every protected path lies in a directory the sandbox could write, and so may every
//! directory on the way to it: each is reached through [`nofollow`], never through a
//! symlink the command may have planted, so that a repair cannot land outside the writable
//! roots. Pinned directories are put back shallowest first, so that the paths inside them
//! lead through the original directories again before anything in them is repaired.

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::nofollow::{self, Entry as At, Locator};
use super::shared_baseline::{self, Before, TreeItem};

/// More than this in protected files is refused rather than half-guarded.
const MAX_SNAPSHOT_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug)]
struct Entry {
    path: PathBuf,
    before: Before,
    /// A pinned directory, held open across the call: a renamed one is found again
    /// through it.
    pinned: Option<OwnedFd>,
    /// `before` was recorded before a call that ended without its repairs, perhaps long
    /// ago: what is there now may be the user's own later edit, so it is moved aside, not
    /// overwritten.
    left_over: bool,
}

#[derive(Debug, Default)]
pub struct Snapshot {
    entries: Vec<Entry>,
    /// The shared record this snapshot belongs to (see [`shared_baseline`]).
    member: Option<shared_baseline::Member>,
    /// Said with the repairs: what the shared record could not cover.
    notes: Vec<String>,
}

impl crate::sandbox::AfterCall for Snapshot {
    fn run(mut self: Box<Self>) -> Vec<String> {
        self.restore()
    }

    fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.entries
            .iter()
            .filter_map(|e| e.pinned.as_ref().map(|fd| fd.as_raw_fd()))
            .chain(self.member.as_ref().map(|m| m.fd()))
            .collect()
    }

    fn disarm(&mut self) {
        if let Some(member) = &mut self.member {
            member.disarm();
        }
    }

    fn supervised_by(&self, pid: libc::pid_t) {
        if let Some(member) = &self.member {
            member.supervised_by(pid);
        }
    }
}

/// A call's presence among the running calls ([`shared_baseline::Presence`]): the last of
/// its after-call steps, so that a call starting before the others are done (the
/// nested-repository check among them) knows where this one's command may have written.
#[derive(Debug)]
pub struct Present(shared_baseline::Presence);

impl crate::sandbox::AfterCall for Present {
    fn run(self: Box<Self>) -> Vec<String> {
        Vec::new()
    }

    fn fds(&self) -> Vec<std::os::fd::RawFd> {
        vec![self.0.fd()]
    }
}

/// Why a protected path cannot be reached without following a symlink (or at all).
fn unreachable_path(path: &Path, e: std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => format!(
            "{} lies behind a symbolic link or a file where a directory should be ({e})",
            path.display()
        ),
        _ => format!("cannot reach {}: {e}", path.display()),
    }
}

impl Snapshot {
    /// Records the protected paths as they are now, for this call alone (the tests of the
    /// repairs themselves; calls share their records, see [`Self::take_shared`]).
    #[cfg(test)]
    pub fn take(
        pinned: &[PathBuf],
        read_only: &[PathBuf],
        absent: &[PathBuf],
    ) -> Result<Snapshot, String> {
        Self::record(None, pinned, &[read_only, absent].concat(), &[])
    }

    /// Records the protected paths, adopting what the calls running now recorded of them
    /// (kept under `state_dir`, see [`shared_baseline`]). `guarded` are paths this call
    /// keeps unchanged by other means (bwrap's mounts): a running call's record of one is
    /// adopted, to be put back after this call too, but none is taken; a directory a
    /// running call pinned must still be that directory. `roots` are where this call's
    /// command may write, kept for the calls that start while it runs.
    ///
    /// Also returns the call's presence among the running calls, which must be its last
    /// after-call step: until then, calls that start see its roots (see `record`). A call
    /// with nothing to protect is present all the same: its command may make a repository
    /// at its root.
    pub fn take_shared(
        state_dir: &Path,
        roots: &[PathBuf],
        pinned: &[PathBuf],
        protected: &[PathBuf],
        guarded: &[PathBuf],
    ) -> Result<(Snapshot, Present), String> {
        let take = || Self::take_shared_once(state_dir, roots, pinned, protected, guarded);
        asking_again_while_a_call_runs(RUNNING_CALL_RECHECKED_FOR, take)
    }

    fn take_shared_once(
        state_dir: &Path,
        roots: &[PathBuf],
        pinned: &[PathBuf],
        protected: &[PathBuf],
        guarded: &[PathBuf],
    ) -> Result<(Snapshot, Present), String> {
        if pinned.is_empty() && protected.is_empty() && guarded.is_empty() {
            let presence = shared_baseline::be_present(state_dir, roots)?;
            return Ok((Snapshot::default(), Present(presence)));
        }
        let mut joining = shared_baseline::join(state_dir, roots)?;
        let mut snapshot = Self::record(Some(&mut joining), pinned, protected, guarded)?;
        let member = joining.finish()?;
        let presence = member.presence()?;
        snapshot.member = Some(member);
        Ok((snapshot, Present(presence)))
    }

    /// `protected`: files and directories to put back as they are now, or to remove if
    /// they do not exist now (the policy's read-only and absent paths alike: one that
    /// changed between the plan and now is kept as it is now).
    fn record(
        mut shared: Option<&mut shared_baseline::Joining>,
        pinned: &[PathBuf],
        protected: &[PathBuf],
        guarded: &[PathBuf],
    ) -> Result<Snapshot, String> {
        let mut budget = MAX_SNAPSHOT_BYTES;
        let mut snapshot = Snapshot::default();
        let left_over = |s: &Option<&mut shared_baseline::Joining>, path: &Path| {
            s.as_deref().is_some_and(|s| s.left_over(path))
        };
        // Pinned directories found replaced since calls that ended without their repairs
        // recorded them: what those calls recorded beneath them no longer applies.
        let mut replaced: Vec<PathBuf> = Vec::new();
        let mut pinned: Vec<&PathBuf> = pinned.iter().collect();
        // Outer directories first: restoring one makes the paths inside it valid again.
        pinned.sort_by_key(|p| p.components().count());
        for path in pinned {
            let at = At::locate(path).map_err(|e| unreachable_path(path, e))?;
            let found = at
                .stat()
                .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
                .ok_or_else(|| format!("cannot stat {}: it does not exist", path.display()))?;
            let fd = at
                .open_path()
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let now = Before::Pinned {
                dev: found.dev,
                ino: found.ino,
                mode: found.mode,
            };
            let recorded = shared.as_deref().and_then(|s| s.recorded(path)).cloned();
            let before = match recorded {
                Some(Before::Pinned { dev, ino, mode }) if (dev, ino) == (found.dev, found.ino) => {
                    if let Some(s) = shared.as_deref_mut() {
                        s.adopt(path);
                    }
                    Before::Pinned { dev, ino, mode }
                }
                Some(_) if left_over(&shared, path) => {
                    snapshot.notes.push(format!(
                        "{} was replaced during a call that ended without its repairs; \
                         chitti cannot put the original back",
                        path.display()
                    ));
                    replaced.push(path.clone());
                    if let Some(s) = shared.as_deref_mut() {
                        s.record(path, now.clone());
                    }
                    now
                }
                Some(_) => return Err(replaced_by_running_call(path)),
                None => {
                    // What lies where a running call's command may write may be its work
                    // (and hold its plants): it is not taken for the state to put back. A
                    // review made a repository at the root with one call while a second
                    // started, whose repairs then put back what the first call's check had
                    // moved aside.
                    if let Some(root) = running_call_may_write(&shared, path) {
                        return Err(made_by_running_call(path, root));
                    }
                    if let Some(s) = shared.as_deref_mut() {
                        s.record(path, now.clone());
                    }
                    now
                }
            };
            snapshot.entries.push(Entry {
                path: path.clone(),
                before,
                pinned: Some(fd),
                left_over: false,
            });
        }
        let mut locator = Locator::default();
        for path in protected {
            let old = left_over(&shared, path);
            let stale = old && replaced.iter().any(|r| path.starts_with(r));
            let recorded = shared.as_deref().and_then(|s| s.recorded(path)).cloned();
            let mut adopted_left_over = false;
            let before = match recorded.filter(|_| !stale) {
                Some(before) => {
                    if let Some(s) = shared.as_deref_mut() {
                        s.adopt(path);
                    }
                    adopted_left_over = old;
                    before
                }
                None => {
                    let now = record_protected(&mut locator, path, &mut budget)?;
                    // An absent path is safe to record: the repairs only remove what is
                    // there after the call.
                    if now != Before::Absent {
                        if let Some(root) = running_call_may_write(&shared, path) {
                            return Err(made_by_running_call(path, root));
                        }
                    }
                    if let Some(s) = shared.as_deref_mut() {
                        s.record(path, now.clone());
                    }
                    now
                }
            };
            snapshot.push(path, before, adopted_left_over);
        }
        for path in guarded {
            let recorded = shared.as_deref().and_then(|s| s.recorded(path)).cloned();
            match recorded {
                // Mounted by path: it must still be the directory the running calls
                // recorded, not one a running command put in its place.
                Some(Before::Pinned { dev, ino, .. }) => {
                    let now = At::locate(path)
                        .ok()
                        .and_then(|at| at.stat().ok().flatten());
                    let moved = now.is_none_or(|f| (f.dev, f.ino) != (dev, ino));
                    if moved && !left_over(&shared, path) {
                        return Err(replaced_by_running_call(path));
                    }
                }
                Some(before) => {
                    let old = left_over(&shared, path);
                    if let Some(s) = shared.as_deref_mut() {
                        s.adopt(path);
                    }
                    snapshot.push(path, before, old);
                }
                None => {}
            }
        }
        Ok(snapshot)
    }

    fn push(&mut self, path: &Path, before: Before, left_over: bool) {
        self.entries.push(Entry {
            path: path.to_path_buf(),
            before,
            pinned: None,
            left_over,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Puts back every protected path; returns one line per repair (and per note). Call
    /// only when no sandboxed process is left. The first call also leaves the shared record.
    pub fn restore(&mut self) -> Vec<String> {
        let mut lines = std::mem::take(&mut self.notes);
        match self.member.take() {
            Some(member) => {
                let (repairs, trouble) = member.leave_unless_failed(
                    || self.put_back(),
                    |repairs| repairs.iter().any(|r| super::is_unrepaired(r)),
                );
                lines.extend(repairs);
                lines.extend(trouble);
            }
            None => lines.extend(self.put_back()),
        }
        lines
    }

    fn put_back(&self) -> Vec<String> {
        let mut repairs = Vec::new();
        let mut lost: Vec<&Path> = Vec::new();
        for entry in &self.entries {
            if let (Before::Pinned { dev, ino, mode }, Some(fd)) = (&entry.before, &entry.pinned) {
                let path = &entry.path;
                if lost.iter().any(|l| path.starts_with(l)) {
                    continue;
                }
                if !restore_pinned(path, *dev, *ino, *mode, fd, &mut repairs) {
                    lost.push(path);
                }
            }
        }
        // From here on only the entries themselves change, never a directory on the way to
        // one, so parent directories may be kept open between entries.
        let mut locator = Locator::default();
        for entry in &self.entries {
            let path = &entry.path;
            if matches!(entry.before, Before::Pinned { .. }) {
                continue;
            }
            // Inside a deleted repository there is nothing to restore into, and planting
            // a lone hooks/ or config would only make a broken repository.
            if lost.iter().any(|d| path.starts_with(d)) {
                continue;
            }
            let at = match locator.locate(path) {
                Ok(at) => at,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    if entry.before == Before::Absent {
                        continue;
                    }
                    repairs.push(format!(
                        "could not restore {}: a directory on its way is gone",
                        path.display()
                    ));
                    continue;
                }
                Err(e) => {
                    repairs.push(super::unrepaired(format_args!(
                        "could not restore {}: {}",
                        path.display(),
                        unreachable_path(path, e)
                    )));
                    continue;
                }
            };
            match &entry.before {
                Before::Pinned { .. } => {}
                Before::File { bytes, mode } => {
                    if !file_matches(&at, bytes, *mode) {
                        if entry.left_over && matches!(at.stat(), Ok(Some(_))) {
                            move_aside(&at, path, "current", &mut repairs);
                        }
                        repairs.push(match at.replace_file(bytes, *mode) {
                            Ok(()) => format!("restored {}{}", path.display(), origin(entry)),
                            Err(e) => super::unrepaired(format_args!(
                                "could not restore {}: {e}",
                                path.display()
                            )),
                        });
                    }
                }
                Before::Dir { mode, tree } => {
                    let mut failures = Vec::new();
                    if entry.left_over
                        && matches!(at.stat(), Ok(Some(_)))
                        && !dir_matches(&at, *mode, tree)
                    {
                        move_aside(&at, path, "current", &mut repairs);
                    }
                    if restore_dir(&at, path, *mode, tree, &mut failures) {
                        repairs.push(format!("restored {}{}", path.display(), origin(entry)));
                    }
                    repairs.extend(failures);
                }
                Before::Absent => {
                    if matches!(at.stat(), Ok(Some(_))) {
                        move_aside(&at, path, "planted", &mut repairs);
                    }
                }
            }
        }
        repairs
    }
}

/// The writable root of a call running now that `path` lies in, if any.
fn running_call_may_write(
    shared: &Option<&mut shared_baseline::Joining>,
    path: &Path,
) -> Option<PathBuf> {
    shared
        .as_deref()
        .and_then(|s| s.may_be_written_by_running_call(path))
        .map(Path::to_path_buf)
}

fn made_by_running_call(path: &Path, root: PathBuf) -> String {
    format!(
        "{} lies in {}, where {RUNNING_NOW} may write: chitti cannot take what it holds for \
         the repository's own, as it may be that command's work. Wait for the other call to \
         end, check the repository, and run this one again",
        path.display(),
        root.display()
    )
}

/// How the errors of a call standing in the way name it (see [`is_running_call`]).
const RUNNING_NOW: &str = "the command of another chitti call running now";
const STILL_RUNNING: &str = "the command of a call still running";

/// Whether `error`, from [`Snapshot::take_shared_once`], is a call running now that stands
/// in the way.
fn is_running_call(error: &str) -> bool {
    error.contains(RUNNING_NOW) || error.contains(STILL_RUNNING)
}

/// How long [`Snapshot::take_shared`] asks again while a call running now stands in the way.
const RUNNING_CALL_RECHECKED_FOR: std::time::Duration = std::time::Duration::from_millis(200);

/// `take`'s answer, asked again for `patience` while it is a call running now that stands
/// in the way: that call may have just ended, and a process forked meanwhile (a
/// supervisor, until it closes what it inherited) holds a copy of its presence for a
/// moment.
fn asking_again_while_a_call_runs<T>(
    patience: std::time::Duration,
    take: impl Fn() -> Result<T, String>,
) -> Result<T, String> {
    let asked = std::time::Instant::now();
    loop {
        match take() {
            Err(e) if is_running_call(&e) && asked.elapsed() < patience => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            taken => return taken,
        }
    }
}

fn replaced_by_running_call(path: &Path) -> String {
    format!(
        "{} was replaced by {STILL_RUNNING} in this repository; that call puts it back when \
         it ends. Run this call again then",
        path.display()
    )
}

/// What a protected file or directory holds now: `Absent` when it does not exist.
fn record_protected(
    locator: &mut Locator,
    path: &Path,
    budget: &mut u64,
) -> Result<Before, String> {
    let at = match locator.locate(path) {
        Ok(at) => at,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Before::Absent),
        Err(e) => return Err(unreachable_path(path, e)),
    };
    let found = match at.stat() {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Before::Absent),
        Err(e) => return Err(format!("cannot stat {}: {e}", path.display())),
    };
    if found.is_dir() {
        let mut tree = Vec::new();
        let dir = at
            .open_dir()
            .map_err(|e| format!("cannot list {}: {e}", path.display()))?;
        walk(&dir, path, Path::new(""), &mut tree, budget)?;
        Ok(Before::Dir {
            mode: found.mode,
            tree,
        })
    } else if found.is_file() {
        Ok(Before::File {
            bytes: read_capped(&at, path, budget)?,
            mode: found.mode,
        })
    } else {
        Err(format!(
            "protected path {} is not a plain file or directory (a symbolic link?): \
             chitti cannot keep what it points at unchanged; replace it with the \
             file or directory itself",
            path.display()
        ))
    }
}

fn read_capped(at: &At, path: &Path, budget: &mut u64) -> Result<Vec<u8>, String> {
    let (_, bytes) = at.read_file(*budget).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            format!(
                "protected path {} is too large to guard on this backend (over {} MiB in total)",
                path.display(),
                MAX_SNAPSHOT_BYTES / (1024 * 1024)
            )
        } else {
            format!("cannot read {}: {e}", path.display())
        }
    })?;
    *budget -= bytes.len() as u64;
    Ok(bytes)
}

/// Records the tree under the directory `dir` (opened from `root`): directories and
/// regular files, by path relative to `root`, parents before children.
fn walk(
    dir: &OwnedFd,
    root: &Path,
    rel: &Path,
    out: &mut Vec<TreeItem>,
    budget: &mut u64,
) -> Result<(), String> {
    let here = root.join(rel);
    let mut names =
        nofollow::list(dir).map_err(|e| format!("cannot list {}: {e}", here.display()))?;
    names.sort();
    for name in names {
        let rel_child = rel.join(&name);
        let full = root.join(&rel_child);
        let at = At::in_dir(dir.as_fd(), &name);
        let Some(found) = at
            .stat()
            .map_err(|e| format!("cannot stat {}: {e}", full.display()))?
        else {
            continue;
        };
        if found.is_dir() {
            out.push(TreeItem {
                rel: rel_child.clone(),
                contents: None,
                mode: found.mode,
            });
            let sub = at
                .open_dir()
                .map_err(|e| format!("cannot list {}: {e}", full.display()))?;
            walk(&sub, root, &rel_child, out, budget)?;
        } else if found.is_file() {
            out.push(TreeItem {
                rel: rel_child,
                contents: Some(read_capped(&at, &full, budget)?),
                mode: found.mode,
            });
        }
        // Symlinks and special files in a hooks directory are not restored; they are
        // removed if the sandbox created them, and left alone if they were there before.
    }
    Ok(())
}

/// Moves what is at `at` (`path`, the `what` one) aside to a quarantine name beside it, or
/// removes it where it cannot be moved; says which. False when neither worked.
fn move_aside(at: &At, path: &Path, what: &str, repairs: &mut Vec<String>) -> bool {
    let quarantine = quarantine_name(path);
    let name = quarantine.file_name().unwrap_or_default();
    if at.rename_within(name).is_ok() {
        repairs.push(format!(
            "moved the {what} {} to {}",
            path.display(),
            quarantine.display()
        ));
        return true;
    }
    match at.remove() {
        Ok(()) => {
            repairs.push(format!("removed the {what} {}", path.display()));
            true
        }
        Err(e) => {
            repairs.push(super::unrepaired(format_args!(
                "could not move the {what} {} aside or remove it: {e}; do not run git there",
                path.display()
            )));
            false
        }
    }
}

/// Puts the pinned directory (or file) back where it was, with its mode. Returns false when
/// it could not be put back (deleted, or out of reach).
fn restore_pinned(
    path: &Path,
    dev: u64,
    ino: u64,
    mode: u32,
    fd: &OwnedFd,
    repairs: &mut Vec<String>,
) -> bool {
    let at = match At::locate(path) {
        Ok(at) => at,
        Err(e) => {
            repairs.push(super::unrepaired(format_args!(
                "could not put back {}: {}",
                path.display(),
                unreachable_path(path, e)
            )));
            return false;
        }
    };
    match at.stat() {
        Ok(Some(found)) if found.dev == dev && found.ino == ino => {
            restore_mode(&at, path, found, mode, repairs);
            return true;
        }
        // A symlink holds nothing worth keeping, and one left beside the repository's own
        // directories would only be refused by the next call: it goes.
        Ok(Some(found)) if found.kind == rustix::fs::FileType::Symlink && at.remove().is_ok() => {
            repairs.push(format!(
                "removed the symlink put in place of {}",
                path.display()
            ));
        }
        Ok(Some(_)) => {
            if !move_aside(&at, path, "replacement", repairs) {
                return false;
            }
        }
        Ok(None) => {}
        Err(e) => {
            repairs.push(super::unrepaired(format_args!(
                "could not stat {}: {e}",
                path.display()
            )));
            return false;
        }
    }
    // The kernel keeps the descriptor's path up to date across renames. Whether it was
    // deleted is asked of the inode, not read off the path (a name may end in " (deleted)").
    let deleted = rustix::fs::fstat(fd).map_or(true, |st| st.st_nlink == 0);
    let current = match std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
        Ok(current) if !deleted => current,
        _ => {
            repairs.push(format!(
                "{} was deleted by the sandboxed command",
                path.display()
            ));
            return false;
        }
    };
    let moved_back = At::locate(&current).and_then(|from| {
        // The path the kernel reports is where the directory is now: check that it is.
        match from.stat()? {
            Some(found) if found.dev == dev && found.ino == ino => {
                from.rename_to(&at).map(|()| found)
            }
            _ => Err(std::io::Error::other("it is no longer there")),
        }
    });
    match moved_back {
        Ok(found) => {
            repairs.push(format!(
                "moved {} back to {}",
                current.display(),
                path.display()
            ));
            restore_mode(&at, path, found, mode, repairs);
            true
        }
        Err(e) => {
            repairs.push(super::unrepaired(format_args!(
                "could not move {} back to {}: {e}",
                current.display(),
                path.display()
            )));
            false
        }
    }
}

/// Gives a pinned directory its mode back: one made unreadable would hide what is in it
/// from the next call's plan.
fn restore_mode(
    at: &At,
    path: &Path,
    found: nofollow::Found,
    mode: u32,
    repairs: &mut Vec<String>,
) {
    if found.mode == mode || found.kind == rustix::fs::FileType::Symlink {
        return;
    }
    repairs.push(match at.set_mode(mode) {
        Ok(()) => format!("restored the mode of {}", path.display()),
        Err(e) => super::unrepaired(format_args!(
            "could not restore the mode of {}: {e}",
            path.display()
        )),
    });
}

fn quarantine_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".chitti-quarantine-{}", super::unguessable()));
    path.with_file_name(name)
}

/// Said of a repair made from a record left over by a call that ended without its repairs.
fn origin(entry: &Entry) -> &'static str {
    if entry.left_over {
        " as it was before a call that ended without its repairs (its supervisor was killed)"
    } else {
        ""
    }
}

/// Whether the directory holds exactly `tree`, with `mode` (read only: nothing changes).
fn dir_matches(at: &At, mode: u32, tree: &[TreeItem]) -> bool {
    let Ok(Some(found)) = at.stat() else {
        return false;
    };
    if !found.is_dir() || found.mode != mode {
        return false;
    }
    let Ok(dir) = at.open_dir() else {
        return false;
    };
    // More entries than the record holds already decide it: the walk stops there.
    let mut now = Vec::new();
    if !walk_any(&dir, Path::new(""), &mut now, tree.len())
        || now.len() != tree.len()
        || !now.iter().all(|rel| tree.iter().any(|i| i.rel == *rel))
    {
        return false;
    }
    tree.iter().all(|item| {
        let Ok(entry) = At::beneath(dir.as_fd(), &item.rel) else {
            return false;
        };
        match &item.contents {
            None => matches!(entry.stat(), Ok(Some(f)) if f.is_dir() && f.mode == item.mode),
            Some(bytes) => file_matches(&entry, bytes, item.mode),
        }
    })
}

/// Whether the file holds `bytes` with `mode`, under this one name: a file with another
/// name (a hard link the command made in the workspace) could be written through that
/// name later, outside any sandbox, and is replaced by a copy.
fn file_matches(at: &At, bytes: &[u8], mode: u32) -> bool {
    at.read_file(bytes.len() as u64)
        .is_ok_and(|(found, now)| found.mode == mode && found.links == 1 && now == bytes)
}

/// Returns true when something had to change.
fn restore_dir(
    at: &At,
    path: &Path,
    mode: u32,
    tree: &[TreeItem],
    failures: &mut Vec<String>,
) -> bool {
    let mut changed = false;
    let mut fail = |what: &Path, e: std::io::Error| {
        failures.push(super::unrepaired(format_args!(
            "could not restore {}: {e}",
            what.display()
        )));
    };
    match at.stat() {
        Ok(Some(found)) if found.is_dir() => {
            if found.mode != mode {
                if let Err(e) = at.set_mode(mode) {
                    fail(path, e);
                }
                changed = true;
            }
        }
        _ => {
            if let Err(e) = at.remove().and_then(|()| at.make_dir(mode)) {
                fail(path, e);
                return true;
            }
            changed = true;
        }
    }
    let dir = match at.open_dir() {
        Ok(dir) => dir,
        Err(e) => {
            fail(path, e);
            return true;
        }
    };
    // Remove what was not there before.
    let recorded: HashSet<&Path> = tree.iter().map(|item| item.rel.as_path()).collect();
    remove_unrecorded(&dir, Path::new(""), &recorded, &mut |rel, removed| {
        if let Err(e) = removed {
            fail(&path.join(rel), e);
        }
        changed = true;
    });
    for TreeItem {
        rel,
        contents,
        mode: m,
    } in tree
    {
        let full = path.join(rel);
        let entry = match At::beneath(dir.as_fd(), rel) {
            Ok(entry) => entry,
            Err(e) => {
                fail(&full, e);
                changed = true;
                continue;
            }
        };
        match contents {
            None => match entry.stat() {
                Ok(Some(found)) if found.is_dir() => {
                    if found.mode != *m {
                        if let Err(e) = entry.set_mode(*m) {
                            fail(&full, e);
                        }
                        changed = true;
                    }
                }
                _ => {
                    if let Err(e) = entry.remove().and_then(|()| entry.make_dir(*m)) {
                        fail(&full, e);
                    }
                    changed = true;
                }
            },
            Some(bytes) => {
                if !file_matches(&entry, bytes, *m) {
                    if let Err(e) = entry.replace_file(bytes, *m) {
                        fail(&full, e);
                    }
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Removes, beneath `dir` (at `rel` in the protected directory), each entry the record does
/// not hold, whole, and tells `removed` of each. Only directories the record holds are
/// entered, so the work is the record's size and what goes, however deep a planted tree.
fn remove_unrecorded(
    dir: &OwnedFd,
    rel: &Path,
    recorded: &HashSet<&Path>,
    removed: &mut impl FnMut(&Path, std::io::Result<()>),
) {
    let Ok(names) = nofollow::list(dir) else {
        return;
    };
    for name in names {
        let child = rel.join(&name);
        let entry = At::in_dir(dir.as_fd(), &name);
        if !recorded.contains(child.as_path()) {
            removed(&child, entry.remove());
        } else if let Ok(sub) = entry.open_dir() {
            remove_unrecorded(&sub, &child, recorded, removed);
        }
    }
}

/// Every path under the directory `dir` (any type), relative, parents before children;
/// directories are entered only as themselves, never through a symlink. False, with the
/// walk cut short, once more than `limit` are found.
fn walk_any(dir: &OwnedFd, rel: &Path, out: &mut Vec<PathBuf>, limit: usize) -> bool {
    let Ok(names) = nofollow::list(dir) else {
        return true;
    };
    for name in names {
        if out.len() >= limit {
            return false;
        }
        let rel_child = rel.join(&name);
        out.push(rel_child.clone());
        let sub = At::in_dir(dir.as_fd(), &name).open_dir();
        if let Ok(sub) = sub {
            if !walk_any(&sub, &rel_child, out, limit) {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Snapshot::take_shared`] for a call whose command writes nowhere another call
    /// protects, present until its snapshot's repairs.
    fn take_shared(
        state: &Path,
        pinned: &[PathBuf],
        protected: &[PathBuf],
        guarded: &[PathBuf],
    ) -> Result<Snapshot, String> {
        Snapshot::take_shared(state, &[], pinned, protected, guarded).map(|(snapshot, _)| snapshot)
    }

    /// [`take_shared`] for the call after one dropped as if killed, where a pinned
    /// directory was replaced, asking again for longer than a call does: a test's child
    /// (`in_a_child`) holds a copy of the dropped call's lock for as long as it runs, and
    /// the replacement then looks like a running call's meanwhile (seen once in CI).
    fn take_shared_after_a_crash(
        state: &Path,
        pinned: &[PathBuf],
        protected: &[PathBuf],
    ) -> Snapshot {
        let take =
            || Snapshot::take_shared_once(state, &[], pinned, protected, &[]).map(|(s, _)| s);
        asking_again_while_a_call_runs(std::time::Duration::from_secs(5), take).unwrap()
    }
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn restores_hooks_config_and_a_renamed_git_dir() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("hooks/pre-commit.sample"), "sample").unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let mut snap = Snapshot::take(
            std::slice::from_ref(&git),
            &[git.join("hooks"), git.join("config")],
            &[git.join("commondir")],
        )
        .unwrap();
        assert!(snap.restore().is_empty(), "nothing changed yet");

        // The attack: move .git away, build a new one with a hook and fsmonitor.
        std::fs::rename(&git, ws.path().join("moved")).unwrap();
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
        std::fs::write(ws.path().join("moved/config"), "[core]\nfsmonitor = evil\n").unwrap();
        std::fs::write(ws.path().join("moved/hooks/post-checkout"), "evil").unwrap();
        std::fs::write(ws.path().join("moved/commondir"), "../evil\n").unwrap();

        let repairs = snap.restore();
        assert!(!repairs.is_empty());
        assert_eq!(
            std::fs::read_to_string(git.join("HEAD")).unwrap(),
            "ref: refs/heads/main\n"
        );
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "[core]\n"
        );
        assert!(!git.join("hooks/pre-commit").exists());
        assert!(!git.join("hooks/post-checkout").exists());
        assert!(git.join("hooks/pre-commit.sample").exists());
        assert!(!ws.path().join("moved").exists());
        assert!(!git.join("commondir").exists());
    }

    #[test]
    fn files_are_put_back_whole_with_their_mode_even_over_a_planted_directory() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        std::fs::set_permissions(git.join("config"), std::fs::Permissions::from_mode(0o640))
            .unwrap();
        std::fs::write(git.join("hooks/pre-push"), "#!/bin/sh\n").unwrap();
        let mut snap = Snapshot::take(&[], &[git.join("config"), git.join("hooks")], &[]).unwrap();

        std::fs::remove_file(git.join("config")).unwrap();
        std::fs::create_dir_all(git.join("config/inner")).unwrap();
        std::fs::write(git.join("hooks/pre-push"), "#!/bin/sh\nevil\n").unwrap();
        let repairs = snap.restore();

        assert!(
            repairs.iter().all(|r| !crate::sandbox::is_unrepaired(r)),
            "{repairs:?}"
        );
        let meta = std::fs::symlink_metadata(git.join("config")).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "[core]\n"
        );
        assert_eq!(
            std::fs::read_to_string(git.join("hooks/pre-push")).unwrap(),
            "#!/bin/sh\n"
        );
        let leftovers: Vec<_> = std::fs::read_dir(&git)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".chitti-restore-")
            })
            .collect();
        assert!(leftovers.is_empty(), "staging files left behind");
    }

    /// A tree `common/worktrees/wt` (a linked worktree's git directory, with `commondir`)
    /// and, beside it, a host directory `victim` with a `config` the sandbox cannot write.
    fn worktree_and_victim() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let wt = root.join("common/worktrees/wt");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join("commondir"), "../..\n").unwrap();
        std::fs::create_dir(root.join("victim")).unwrap();
        std::fs::write(root.join("victim/config"), "host file\n").unwrap();
        (dir, root, wt)
    }

    fn victim_untouched(root: &Path) {
        let names: Vec<_> = std::fs::read_dir(root.join("victim"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["config"], "something was written outside");
        assert_eq!(
            std::fs::read_to_string(root.join("victim/config")).unwrap(),
            "host file\n"
        );
    }

    #[test]
    fn a_git_dir_swapped_for_a_symlink_is_put_back_without_writing_through_it() {
        let (_dir, root, wt) = worktree_and_victim();
        let mut snap = Snapshot::take(
            &[root.join("common/worktrees"), wt.clone()],
            &[wt.join("commondir")],
            &[wt.join("config"), wt.join("config.worktree")],
        )
        .unwrap();

        // The attack: the git directory moved aside, a symlink to the victim in its place.
        std::fs::rename(&wt, root.join("common/worktrees/away")).unwrap();
        std::os::unix::fs::symlink(root.join("victim"), &wt).unwrap();
        std::fs::write(root.join("common/worktrees/away/commondir"), "/evil\n").unwrap();
        let repairs = snap.restore();

        victim_untouched(&root);
        assert!(
            std::fs::symlink_metadata(&wt).unwrap().is_dir(),
            "{repairs:?}"
        );
        assert_eq!(
            std::fs::read_to_string(wt.join("commondir")).unwrap(),
            "../..\n"
        );
        assert!(!root.join("common/worktrees/away").exists());
    }

    #[test]
    fn nothing_is_repaired_through_a_symlinked_directory_that_was_not_pinned() {
        let (_dir, root, wt) = worktree_and_victim();
        let mut snap = Snapshot::take(&[], &[wt.join("commondir")], &[wt.join("config")]).unwrap();
        std::fs::rename(&wt, root.join("common/worktrees/away")).unwrap();
        std::os::unix::fs::symlink(root.join("victim"), &wt).unwrap();
        let repairs = snap.restore();

        victim_untouched(&root);
        assert!(
            repairs.iter().any(|r| r.contains("symbolic link")),
            "the failure is reported: {repairs:?}"
        );
    }

    #[test]
    fn a_protected_path_behind_a_symlink_is_refused_before_the_call() {
        let (_dir, root, wt) = worktree_and_victim();
        std::fs::rename(&wt, root.join("common/worktrees/away")).unwrap();
        std::os::unix::fs::symlink(root.join("victim"), &wt).unwrap();
        let err = Snapshot::take(&[], &[wt.join("config")], &[]).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        // A symlink may be pinned itself (a `.git` symlink): it stays that link.
        assert!(Snapshot::take(std::slice::from_ref(&wt), &[], &[]).is_ok());
    }

    #[test]
    fn a_pinned_directory_gets_its_mode_back() {
        let (_dir, root, wt) = worktree_and_victim();
        let worktrees = root.join("common/worktrees");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let before = mode(&worktrees);
        let mut snap = Snapshot::take(&[worktrees.clone(), wt], &[], &[]).unwrap();
        std::fs::set_permissions(&worktrees, std::fs::Permissions::from_mode(0o111)).unwrap();
        let repairs = snap.restore();
        assert_eq!(mode(&worktrees), before, "{repairs:?}");
        assert!(
            repairs.iter().any(|r| r.contains("restored the mode")),
            "{repairs:?}"
        );
    }

    /// Two calls at once: the second's record is the first's, taken before any command ran.
    #[test]
    fn a_call_started_while_another_runs_puts_back_what_was_there_before_both() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        let protected = [
            git.join("config"),
            git.join("hooks"),
            git.join("config.worktree"),
        ];
        let pinned = [git.clone()];
        let mut first = take_shared(state.path(), &pinned, &protected, &[]).unwrap();
        // The first command plants; then the second call starts.
        std::fs::write(git.join("config"), "[core]\nfsmonitor = evil\n").unwrap();
        std::fs::write(git.join("hooks/post-checkout"), "evil").unwrap();
        std::fs::write(git.join("config.worktree"), "[core]\nfsmonitor = evil\n").unwrap();
        let mut second = take_shared(state.path(), &pinned, &protected, &[]).unwrap();
        assert!(!first.restore().is_empty());
        // The second command plants the absent file again.
        std::fs::write(git.join("config.worktree"), "[core]\nfsmonitor = evil\n").unwrap();
        let repairs = second.restore();
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "[core]\n",
            "{repairs:?}"
        );
        assert!(!git.join("hooks/post-checkout").exists(), "{repairs:?}");
        assert!(!git.join("config.worktree").exists(), "{repairs:?}");
        assert_eq!(
            std::fs::read(state.path().join("protect/record")).unwrap()[0],
            b'C',
            "the last call clears the shared record"
        );
        // Alone again, a call records what is there now.
        std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
        let mut third = take_shared(state.path(), &pinned, &protected, &[]).unwrap();
        assert!(third.restore().is_empty());
    }

    /// A repository made where a running call's command may write (by that command,
    /// perhaps, with its plants in it) is not taken for the one to put back by a call that
    /// starts then, however old the directory that became it: a review renamed an older
    /// directory to `.git`, whose birth time the check before this one trusted.
    #[test]
    fn a_repository_made_where_a_running_call_writes_refuses_the_next_call() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        let older = ws.path().join("older");
        std::fs::create_dir_all(older.join("hooks")).unwrap();
        let roots = [ws.path().to_path_buf()];
        let (first, present) = Snapshot::take_shared(state.path(), &roots, &[], &[], &[]).unwrap();
        assert!(first.is_empty(), "a workspace with nothing to protect");
        std::fs::write(older.join("config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::fs::rename(&older, &git).unwrap();
        let protected = [git.join("config"), git.join("hooks")];
        let pinned = [git.clone()];
        let err = Snapshot::take_shared(state.path(), &roots, &pinned, &protected, &[])
            .err()
            .unwrap();
        assert!(
            err.contains("where the command of another chitti call running now may write"),
            "{err}"
        );
        // So is a protected file that appeared where a running call writes.
        let err = Snapshot::take_shared(state.path(), &roots, &[], &protected, &[])
            .err()
            .unwrap();
        assert!(
            err.contains(&git.join("config").display().to_string()),
            "{err}"
        );
        // Not where the running call cannot write, nor what is absent (the repairs only
        // remove what appears).
        let elsewhere = tempfile::tempdir().unwrap();
        let theirs = elsewhere.path().join("config");
        std::fs::write(&theirs, "[core]\n").unwrap();
        let absent = ws.path().join("absent");
        let (beside, beside_present) = Snapshot::take_shared(
            state.path(),
            &[elsewhere.path().to_path_buf()],
            &[],
            &[theirs, absent],
            &[],
        )
        .unwrap();
        drop((beside, beside_present));
        // Its last step done, the first call is gone: a call alone takes the repository as
        // it finds it. (A child another test forks meanwhile holds a copy of every
        // descriptor of this process, the lock's among them, until it exits: looked at
        // again for a while.)
        crate::sandbox::AfterCall::run(Box::new(first));
        crate::sandbox::AfterCall::run(Box::new(present));
        let alone = (0..500).any(|_| {
            let taken = Snapshot::take_shared(state.path(), &roots, &pinned, &protected, &[]);
            taken.is_ok() || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                false
            }
        });
        assert!(alone, "a call alone was refused");
    }

    /// A call is present until its last after-call step, not only until its repairs: the
    /// nested-repository check comes after them, and a call starting in between found none
    /// running (a review saw the gap, on both backends).
    #[test]
    fn a_call_is_present_until_its_last_step() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let config = ws.path().join("config");
        std::fs::write(&config, "[core]\n").unwrap();
        let roots = [ws.path().to_path_buf()];
        let (snapshot, present) = Snapshot::take_shared(
            state.path(),
            &roots,
            &[],
            std::slice::from_ref(&config),
            &[],
        )
        .unwrap();
        let repairs = crate::sandbox::AfterCall::run(Box::new(snapshot));
        assert!(repairs.is_empty(), "{repairs:?}");
        let later = shared_baseline::join(state.path(), &[]).unwrap();
        assert_eq!(
            later.may_be_written_by_running_call(&config),
            Some(ws.path()),
            "a call starting after the repairs found none running"
        );
        drop(later);
        crate::sandbox::AfterCall::run(Box::new(present));
        let until_gone = (0..500).any(|_| {
            let later = shared_baseline::join(state.path(), &[]).unwrap();
            later.may_be_written_by_running_call(&config).is_none() || {
                drop(later);
                std::thread::sleep(std::time::Duration::from_millis(20));
                false
            }
        });
        assert!(until_gone, "a call was still present after its last step");
    }

    #[test]
    fn a_pinned_directory_replaced_by_a_running_call_refuses_the_next_call() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        let pinned = [git.clone()];
        let mut first = take_shared(state.path(), &pinned, &[], &[]).unwrap();
        std::fs::rename(&git, ws.path().join("moved")).unwrap();
        std::fs::create_dir(&git).unwrap();
        let err = take_shared(state.path(), &pinned, &[], &[]).unwrap_err();
        assert!(
            err.contains("was replaced by the command of a call still running"),
            "{err}"
        );
        assert!(err.contains("Run this call again then"), "{err}");
        // bwrap, which binds it by path, refuses too.
        let err = take_shared(state.path(), &[], &[], &pinned).unwrap_err();
        assert!(
            err.contains("was replaced by the command of a call still running"),
            "{err}"
        );
        first.restore();
        assert!(
            !ws.path().join("moved").exists(),
            "the first call put it back"
        );
        assert!(take_shared(state.path(), &pinned, &[], &[]).is_ok());
        assert!(take_shared(state.path(), &[], &[], &pinned).is_ok());
    }

    /// A host edit made between two calls in a repository is kept, even while a call in
    /// another repository runs throughout.
    #[test]
    fn a_host_edit_between_calls_is_kept_while_other_calls_run() {
        let state = tempfile::tempdir().unwrap();
        let (elsewhere, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let other = elsewhere.path().join("config");
        std::fs::write(&other, "other\n").unwrap();
        let config = ws.path().join("config");
        std::fs::write(&config, "[core]\n").unwrap();
        let mut long = take_shared(state.path(), &[], std::slice::from_ref(&other), &[]).unwrap();
        let mut first = take_shared(state.path(), &[], std::slice::from_ref(&config), &[]).unwrap();
        assert!(first.restore().is_empty());
        std::fs::write(&config, "[core]\n[remote \"origin\"]\n").unwrap(); // the user
        let mut second =
            take_shared(state.path(), &[], std::slice::from_ref(&config), &[]).unwrap();
        let repairs = second.restore();
        assert!(repairs.is_empty(), "{repairs:?}");
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            "[core]\n[remote \"origin\"]\n"
        );
        assert!(long.restore().is_empty());
    }

    /// A record left by a killed call is put back by the next call in the repository,
    /// perhaps long after: what it replaces may be the user's own edit since, so that is
    /// moved aside (next to it, under a quarantine name), never lost.
    #[test]
    fn a_left_over_record_put_back_later_keeps_what_it_replaces() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        let protected = [git.join("config"), git.join("hooks")];
        let mut crashed = take_shared(state.path(), &[], &protected, &[]).unwrap();
        // Its supervisor was killed. A child another test forks now (a supervisor, before it
        // closes what it does not keep) may hold a copy of this call's lock for a while, its
        // locks included; the supervisor's end tells the call ended all the same (without
        // it, the record was restored as a running call's: seen once in CI).
        let supervisor = shared_baseline::an_exited_process();
        crate::sandbox::AfterCall::supervised_by(&crashed, supervisor);
        crate::sandbox::AfterCall::disarm(&mut crashed);
        drop(crashed);
        // Later, on the host: the user's own edits.
        std::fs::write(git.join("config"), "[core]\n[remote \"origin\"]\n").unwrap();
        std::fs::write(git.join("hooks/pre-push"), "#!/bin/sh\n").unwrap();
        let mut next = take_shared(state.path(), &[], &protected, &[]).unwrap();
        let said = next.restore();
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "[core]\n"
        );
        assert!(!git.join("hooks/pre-push").exists());
        let kept: Vec<String> = std::fs::read_dir(&git)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".chitti-quarantine-"))
            .collect();
        assert_eq!(kept.len(), 2, "{kept:?} {said:?}");
        let config = kept.iter().find(|n| n.starts_with("config.")).unwrap();
        assert_eq!(
            std::fs::read_to_string(git.join(config)).unwrap(),
            "[core]\n[remote \"origin\"]\n"
        );
        let hooks = kept.iter().find(|n| n.starts_with("hooks.")).unwrap();
        assert!(git.join(hooks).join("pre-push").exists());
        assert!(
            said.iter()
                .any(|l| l.contains("before a call that ended without its repairs")),
            "{said:?}"
        );
    }

    /// A tree planted in the hooks directory deeper than the descriptors the process may
    /// hold is removed whole, and the recorded hooks stay (run where at most 64 may be
    /// open; the work is the record's size and what goes, not the square of the depth).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_deep_tree_planted_in_the_hooks_is_removed_whole() {
        let ws = tempfile::tempdir().unwrap();
        let hooks = ws.path().join(".git/hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::write(hooks.join("pre-commit.sample"), "#!/bin/sh\n").unwrap();
        let mut call = Snapshot::take(&[], std::slice::from_ref(&hooks), &[]).unwrap();
        let deep: PathBuf = std::iter::repeat_n("d", 300).collect();
        std::fs::create_dir_all(hooks.join(&deep)).unwrap();
        std::fs::write(hooks.join(&deep).join("pre-push"), "evil").unwrap();
        let code = crate::in_a_child(
            || crate::limit_resource(libc::RLIMIT_NOFILE, 64),
            || {
                let said = call.restore();
                !said.iter().any(|l| crate::sandbox::is_unrepaired(l))
            },
        );
        assert_eq!(code, 0, "the repair failed");
        assert!(!hooks.join("d").exists());
        assert!(hooks.join("pre-commit.sample").exists());
    }

    /// A repair that fails (here: the original is larger than the process may write) is
    /// said as one, and its record stays for the next call, which puts the path back:
    /// that call must not take what the command left for the state before it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_failed_repair_is_said_and_left_for_the_next_call_to_make() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        let config = git.join("config");
        let clean = format!("[core]\n{}", "\t# the user's own settings\n".repeat(20));
        std::fs::write(&config, &clean).unwrap();
        let protected = [config.clone(), git.join("hooks")];
        let mut call = take_shared(state.path(), &[], &protected, &[]).unwrap();
        std::fs::write(&config, "[core]\n\tfsmonitor = evil\n").unwrap(); // the command
        let code = crate::in_a_child(
            || unsafe {
                // Files of at most 64 bytes: the repair of the config fails (EFBIG).
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                crate::limit_resource(libc::RLIMIT_FSIZE, 64)
            },
            || {
                let said = call.restore();
                said.iter()
                    .any(|l| crate::sandbox::is_unrepaired(l) && l.contains("config"))
            },
        );
        assert_eq!(code, 0, "the failed repair was not said as one");
        assert_ne!(std::fs::read_to_string(&config).unwrap(), clean);
        // This process's copy of the call: as if killed (the child left for it).
        crate::sandbox::AfterCall::disarm(&mut call);
        drop(call);
        let mut next = take_shared(state.path(), &[], &protected, &[]).unwrap();
        let said = next.restore();
        assert_eq!(std::fs::read_to_string(&config).unwrap(), clean, "{said:?}");
    }

    /// A pinned directory replaced since a call that never finished recorded it (the user
    /// cloned the repository again): the next calls go on, and what was recorded inside the
    /// old directory is not put into the new one.
    #[test]
    fn a_left_over_record_of_a_replaced_directory_gives_way_to_the_new_one() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "old clone\n").unwrap();
        let (pinned, protected) = ([git.clone()], [git.join("config")]);
        let mut crashed = take_shared(state.path(), &pinned, &protected, &[]).unwrap();
        crate::sandbox::AfterCall::disarm(&mut crashed);
        drop(crashed); // its supervisor was killed: its descriptors closed, nothing else
                       // Moved away rather than removed, so that the new directory cannot reuse its inode.
        std::fs::rename(&git, ws.path().join("old")).unwrap();
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "new clone\n").unwrap();
        let mut next = take_shared_after_a_crash(state.path(), &pinned, &protected);
        // A call starting meanwhile is not told a running call replaced it.
        let mut meanwhile = take_shared(state.path(), &pinned, &protected, &[]).unwrap();
        let said = next.restore();
        assert!(
            said.iter()
                .any(|l| l.contains("was replaced during a call that ended")),
            "{said:?}"
        );
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "new clone\n"
        );
        assert!(meanwhile.restore().is_empty());
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "new clone\n"
        );
    }

    /// bwrap keeps its read-only paths with mounts: it takes no record of them, but puts
    /// back what a call running at once recorded (here: a file that did not exist).
    #[test]
    fn guarded_paths_adopt_a_running_calls_record_and_record_nothing_themselves() {
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let planted = ws.path().join("config.worktree");
        let config = ws.path().join("config");
        std::fs::write(&config, "[core]\n").unwrap();
        let mut first =
            take_shared(state.path(), &[], std::slice::from_ref(&planted), &[]).unwrap();
        std::fs::write(&planted, "evil").unwrap();
        // The bwrap call plans the planted file as read-only: it exists now.
        let mut second =
            take_shared(state.path(), &[], &[], &[planted.clone(), config.clone()]).unwrap();
        let third = shared_baseline::join(state.path(), &[]).unwrap();
        assert!(
            third.recorded(&config).is_none(),
            "a guarded path is not recorded for others"
        );
        drop(third);
        first.restore();
        std::fs::write(&planted, "evil again").unwrap();
        let repairs = second.restore();
        assert!(!planted.exists(), "{repairs:?}");
    }
}
