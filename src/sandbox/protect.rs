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

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::nofollow::{self, Entry as At, Locator};

/// More than this in protected files is refused rather than half-guarded.
const MAX_SNAPSHOT_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug)]
enum Entry {
    Pinned {
        path: PathBuf,
        dev: u64,
        ino: u64,
        /// Its permission bits: a directory made unreadable would hide what is in it
        /// from the next call's plan.
        mode: u32,
        fd: OwnedFd,
    },
    File {
        path: PathBuf,
        bytes: Vec<u8>,
        mode: u32,
    },
    Dir {
        path: PathBuf,
        mode: u32,
        /// Relative path → (contents or None for a directory, mode).
        tree: Vec<(PathBuf, Option<Vec<u8>>, u32)>,
    },
    /// Must not exist after the call.
    Absent { path: PathBuf },
}

#[derive(Debug, Default)]
pub struct Snapshot {
    entries: Vec<Entry>,
}

impl crate::sandbox::AfterCall for Snapshot {
    fn run(self: Box<Self>) -> Vec<String> {
        self.restore()
    }

    fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Pinned { fd, .. } => Some(fd.as_raw_fd()),
                _ => None,
            })
            .collect()
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
    pub fn take(
        pinned: &[PathBuf],
        read_only: &[PathBuf],
        absent: &[PathBuf],
    ) -> Result<Snapshot, String> {
        let mut budget = MAX_SNAPSHOT_BYTES;
        let mut entries = Vec::new();
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
            entries.push(Entry::Pinned {
                path: path.clone(),
                dev: found.dev,
                ino: found.ino,
                mode: found.mode,
                fd,
            });
        }
        let mut locator = Locator::default();
        for path in read_only {
            let at = match locator.locate(path) {
                Ok(at) => at,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(unreachable_path(path, e)),
            };
            let found = match at.stat() {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) => return Err(format!("cannot stat {}: {e}", path.display())),
            };
            if found.is_dir() {
                let mut tree = Vec::new();
                let dir = at
                    .open_dir()
                    .map_err(|e| format!("cannot list {}: {e}", path.display()))?;
                walk(&dir, path, Path::new(""), &mut tree, &mut budget)?;
                entries.push(Entry::Dir {
                    path: path.clone(),
                    mode: found.mode,
                    tree,
                });
            } else if found.is_file() {
                let bytes = read_capped(&at, path, &mut budget)?;
                entries.push(Entry::File {
                    path: path.clone(),
                    bytes,
                    mode: found.mode,
                });
            } else {
                return Err(format!(
                    "protected path {} is not a plain file or directory (a symbolic link?): \
                     chitti cannot keep what it points at unchanged; replace it with the \
                     file or directory itself",
                    path.display()
                ));
            }
        }
        for path in absent {
            let missing = match locator.locate(path) {
                Ok(at) => at.stat().map(|f| f.is_none()).unwrap_or(false),
                Err(e) => e.raw_os_error() == Some(libc::ENOENT),
            };
            if missing {
                entries.push(Entry::Absent { path: path.clone() });
            }
        }
        Ok(Snapshot { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Puts back every protected path; returns one line per repair. Call only when no
    /// sandboxed process is left.
    pub fn restore(&self) -> Vec<String> {
        let mut repairs = Vec::new();
        let mut lost: Vec<&Path> = Vec::new();
        for entry in &self.entries {
            if let Entry::Pinned {
                path,
                dev,
                ino,
                mode,
                fd,
            } = entry
            {
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
            // Inside a deleted repository there is nothing to restore into, and planting
            // a lone hooks/ or config would only make a broken repository.
            let path = match entry {
                Entry::Pinned { .. } => continue,
                Entry::File { path, .. } | Entry::Dir { path, .. } | Entry::Absent { path } => path,
            };
            if lost.iter().any(|d| path.starts_with(d)) {
                continue;
            }
            let at = match locator.locate(path) {
                Ok(at) => at,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    if matches!(entry, Entry::Absent { .. }) {
                        continue;
                    }
                    repairs.push(format!(
                        "could not restore {}: a directory on its way is gone",
                        path.display()
                    ));
                    continue;
                }
                Err(e) => {
                    repairs.push(format!(
                        "could not restore {}: {}",
                        path.display(),
                        unreachable_path(path, e)
                    ));
                    continue;
                }
            };
            match entry {
                Entry::Pinned { .. } => {}
                Entry::File { path, bytes, mode } => {
                    if !file_matches(&at, bytes, *mode) {
                        repairs.push(match at.replace_file(bytes, *mode) {
                            Ok(()) => format!("restored {}", path.display()),
                            Err(e) => format!("could not restore {}: {e}", path.display()),
                        });
                    }
                }
                Entry::Dir { path, mode, tree } => {
                    let mut failures = Vec::new();
                    if restore_dir(&at, path, *mode, tree, &mut failures) {
                        repairs.push(format!("restored {}", path.display()));
                    }
                    repairs.extend(failures);
                }
                Entry::Absent { path } => {
                    if matches!(at.stat(), Ok(Some(_))) {
                        move_aside(&at, path, "planted", &mut repairs);
                    }
                }
            }
        }
        repairs
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
    out: &mut Vec<(PathBuf, Option<Vec<u8>>, u32)>,
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
            out.push((rel_child.clone(), None, found.mode));
            let sub = at
                .open_dir()
                .map_err(|e| format!("cannot list {}: {e}", full.display()))?;
            walk(&sub, root, &rel_child, out, budget)?;
        } else if found.is_file() {
            out.push((
                rel_child,
                Some(read_capped(&at, &full, budget)?),
                found.mode,
            ));
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
            repairs.push(format!(
                "could not move the {what} {} aside or remove it: {e}; do not run git there",
                path.display()
            ));
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
            repairs.push(format!(
                "could not put back {}: {}",
                path.display(),
                unreachable_path(path, e)
            ));
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
            repairs.push(format!("could not stat {}: {e}", path.display()));
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
            repairs.push(format!(
                "could not move {} back to {}: {e}",
                current.display(),
                path.display()
            ));
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
        Err(e) => format!("could not restore the mode of {}: {e}", path.display()),
    });
}

fn quarantine_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".chitti-quarantine-{}", super::unguessable()));
    path.with_file_name(name)
}

fn file_matches(at: &At, bytes: &[u8], mode: u32) -> bool {
    at.read_file(bytes.len() as u64)
        .is_ok_and(|(found, now)| found.mode == mode && now == bytes)
}

/// Returns true when something had to change.
fn restore_dir(
    at: &At,
    path: &Path,
    mode: u32,
    tree: &[(PathBuf, Option<Vec<u8>>, u32)],
    failures: &mut Vec<String>,
) -> bool {
    let mut changed = false;
    let mut fail = |what: &Path, e: std::io::Error| {
        failures.push(format!("could not restore {}: {e}", what.display()));
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
    // Remove what was not there before (deepest first).
    let mut now = Vec::new();
    walk_any(&dir, Path::new(""), &mut now);
    for rel in now.iter().rev() {
        if !tree.iter().any(|(r, _, _)| r == rel) {
            if let Err(e) = At::beneath(dir.as_fd(), rel).and_then(|x| x.remove()) {
                fail(&path.join(rel), e);
            }
            changed = true;
        }
    }
    for (rel, contents, m) in tree {
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

/// Every path under the directory `dir` (any type), relative, parents before children;
/// directories are entered only as themselves, never through a symlink.
fn walk_any(dir: &OwnedFd, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(names) = nofollow::list(dir) else {
        return;
    };
    for name in names {
        let rel_child = rel.join(&name);
        out.push(rel_child.clone());
        let sub = At::in_dir(dir.as_fd(), &name).open_dir();
        if let Ok(sub) = sub {
            walk_any(&sub, &rel_child, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn restores_hooks_config_and_a_renamed_git_dir() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("hooks/pre-commit.sample"), "sample").unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let snap = Snapshot::take(
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
        let snap = Snapshot::take(&[], &[git.join("config"), git.join("hooks")], &[]).unwrap();

        std::fs::remove_file(git.join("config")).unwrap();
        std::fs::create_dir_all(git.join("config/inner")).unwrap();
        std::fs::write(git.join("hooks/pre-push"), "#!/bin/sh\nevil\n").unwrap();
        let repairs = snap.restore();

        assert!(
            repairs.iter().all(|r| !r.starts_with("could not")),
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
        let snap = Snapshot::take(
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
        let snap = Snapshot::take(&[], &[wt.join("commondir")], &[wt.join("config")]).unwrap();
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
        let snap = Snapshot::take(&[worktrees.clone(), wt], &[], &[]).unwrap();
        std::fs::set_permissions(&worktrees, std::fs::Permissions::from_mode(0o111)).unwrap();
        let repairs = snap.restore();
        assert_eq!(mode(&worktrees), before, "{repairs:?}");
        assert!(
            repairs.iter().any(|r| r.contains("restored the mode")),
            "{repairs:?}"
        );
    }
}
