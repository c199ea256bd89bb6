//! Protected paths on a backend without mount namespaces (landlock).
//!
//! Landlock grants are inherited by everything beneath a writable root, so it cannot keep
//! `.git/hooks` read-only while `.git/index` stays writable. chitti closes that gap after
//! the fact: it snapshots the protected paths before the call and, once every sandboxed
//! process is dead (so nothing can race it), puts back whatever changed and reports it.
//! A renamed `.git` is found again through a descriptor held across the call.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// More than this in protected files is refused rather than half-guarded.
const MAX_SNAPSHOT_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug)]
enum Entry {
    Pinned {
        path: PathBuf,
        dev: u64,
        ino: u64,
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

impl Snapshot {
    pub fn take(
        pinned: &[PathBuf],
        read_only: &[PathBuf],
        absent: &[PathBuf],
    ) -> Result<Snapshot, String> {
        let mut budget = MAX_SNAPSHOT_BYTES;
        let mut entries = Vec::new();
        for path in pinned {
            let meta = std::fs::symlink_metadata(path)
                .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
            let fd = nix::fcntl::open(
                path,
                nix::fcntl::OFlag::O_PATH
                    | nix::fcntl::OFlag::O_NOFOLLOW
                    | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            entries.push(Entry::Pinned {
                path: path.clone(),
                dev: meta.dev(),
                ino: meta.ino(),
                fd,
            });
        }
        for path in read_only {
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                let mut tree = Vec::new();
                walk(path, Path::new(""), &mut tree, &mut budget)?;
                entries.push(Entry::Dir {
                    path: path.clone(),
                    mode,
                    tree,
                });
            } else {
                let bytes = read_capped(path, &mut budget)?;
                entries.push(Entry::File {
                    path: path.clone(),
                    bytes,
                    mode,
                });
            }
        }
        for path in absent {
            if std::fs::symlink_metadata(path).is_err() {
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
        let mut deleted: Vec<&Path> = Vec::new();
        for entry in &self.entries {
            if let Entry::Pinned { path, dev, ino, fd } = entry {
                if !restore_pinned(path, *dev, *ino, fd, &mut repairs) {
                    deleted.push(path);
                }
            }
        }
        for entry in &self.entries {
            // Inside a deleted repository there is nothing to restore into, and planting
            // a lone hooks/ or config would only make a broken repository.
            let path = match entry {
                Entry::Pinned { path, .. }
                | Entry::File { path, .. }
                | Entry::Dir { path, .. }
                | Entry::Absent { path } => path,
            };
            if deleted.iter().any(|d| path.starts_with(d)) {
                continue;
            }
            match entry {
                Entry::Pinned { .. } => {}
                Entry::File { path, bytes, mode } => {
                    if !file_matches(path, bytes, *mode) {
                        repairs.push(match replace_file(path, bytes, *mode) {
                            Ok(()) => format!("restored {}", path.display()),
                            Err(e) => format!("could not restore {}: {e}", path.display()),
                        });
                    }
                }
                Entry::Dir { path, mode, tree } => {
                    let mut failures = Vec::new();
                    if restore_dir(path, *mode, tree, &mut failures) {
                        repairs.push(format!("restored {}", path.display()));
                    }
                    repairs.extend(failures);
                }
                Entry::Absent { path } => {
                    if std::fs::symlink_metadata(path).is_ok() {
                        let quarantine = quarantine_name(path);
                        if std::fs::rename(path, &quarantine).is_ok() {
                            repairs.push(format!(
                                "moved the planted {} to {}",
                                path.display(),
                                quarantine.display()
                            ));
                        } else {
                            remove_any(path);
                            repairs.push(format!("removed the planted {}", path.display()));
                        }
                    }
                }
            }
        }
        repairs
    }
}

fn read_capped(path: &Path, budget: &mut u64) -> Result<Vec<u8>, String> {
    let size = std::fs::symlink_metadata(path)
        .map(|m| m.len())
        .unwrap_or(0);
    if size > *budget {
        return Err(format!(
            "protected path {} is too large to guard on this backend (over {} MiB in total)",
            path.display(),
            MAX_SNAPSHOT_BYTES / (1024 * 1024)
        ));
    }
    *budget -= size;
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn walk(
    root: &Path,
    rel: &Path,
    out: &mut Vec<(PathBuf, Option<Vec<u8>>, u32)>,
    budget: &mut u64,
) -> Result<(), String> {
    let dir = root.join(rel);
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut names: Vec<OsString> = entries.flatten().map(|e| e.file_name()).collect();
    names.sort();
    for name in names {
        let rel_child = rel.join(&name);
        let full = root.join(&rel_child);
        let meta = std::fs::symlink_metadata(&full)
            .map_err(|e| format!("cannot stat {}: {e}", full.display()))?;
        let mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            out.push((rel_child.clone(), None, mode));
            walk(root, &rel_child, out, budget)?;
        } else if meta.is_file() {
            out.push((rel_child, Some(read_capped(&full, budget)?), mode));
        }
        // Symlinks and special files in a hooks directory are not restored; they are
        // removed if the sandbox created them, and left alone if they were there before.
    }
    Ok(())
}

/// Returns false when the pinned path was deleted (nothing to put back).
fn restore_pinned(
    path: &Path,
    dev: u64,
    ino: u64,
    fd: &OwnedFd,
    repairs: &mut Vec<String>,
) -> bool {
    let same = std::fs::symlink_metadata(path)
        .map(|m| m.dev() == dev && m.ino() == ino)
        .unwrap_or(false);
    if same {
        return true;
    }
    if std::fs::symlink_metadata(path).is_ok() {
        let quarantine = quarantine_name(path);
        if std::fs::rename(path, &quarantine).is_ok() {
            repairs.push(format!(
                "moved the replacement {} to {}",
                path.display(),
                quarantine.display()
            ));
        } else {
            remove_any(path);
            repairs.push(format!("removed the replacement {}", path.display()));
        }
    }
    // The kernel keeps the descriptor's path up to date across renames.
    match std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
        Ok(current) if !current.to_string_lossy().ends_with(" (deleted)") => {
            if std::fs::rename(&current, path).is_ok() {
                repairs.push(format!(
                    "moved {} back to {}",
                    current.display(),
                    path.display()
                ));
                true
            } else {
                repairs.push(format!(
                    "could not move {} back to {}",
                    current.display(),
                    path.display()
                ));
                false
            }
        }
        _ => {
            repairs.push(format!(
                "{} was deleted by the sandboxed command",
                path.display()
            ));
            false
        }
    }
}

fn quarantine_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".chitti-quarantine-{}", std::process::id()));
    path.with_file_name(name)
}

fn file_matches(path: &Path, bytes: &[u8], mode: u32) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o7777 == mode => {
            std::fs::read(path).is_ok_and(|b| b == bytes)
        }
        _ => false,
    }
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Puts `bytes` at `path` by renaming a finished sibling over it, so that a reader (the
/// host's git, perhaps started the moment chitti was killed) sees the old file or the
/// restored one, never a missing or half-written one.
fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let parent = path.parent().unwrap_or(Path::new("."));
    let mut staged = tempfile::Builder::new()
        .prefix(".chitti-restore-")
        .tempfile_in(parent)?;
    staged.write_all(bytes)?;
    staged
        .as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    match staged.persist(path) {
        Ok(_) => Ok(()),
        // A directory (or anything rename cannot replace) planted where the file was.
        Err(e) => {
            remove_any(path);
            e.file.persist(path).map(|_| ()).map_err(|e| e.error)
        }
    }
}

/// Returns true when something had to change.
fn restore_dir(
    path: &Path,
    mode: u32,
    tree: &[(PathBuf, Option<Vec<u8>>, u32)],
    failures: &mut Vec<String>,
) -> bool {
    let mut changed = false;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {}
        _ => {
            remove_any(path);
            let _ = std::fs::create_dir(path);
            changed = true;
        }
    }
    if std::fs::symlink_metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .ok()
        != Some(mode)
    {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
        changed = true;
    }
    // Remove what was not there before (deepest first).
    let mut now = Vec::new();
    let mut ignored = u64::MAX;
    let _ = walk_any(path, Path::new(""), &mut now, &mut ignored);
    for rel in now.iter().rev() {
        if !tree.iter().any(|(r, _, _)| r == rel) {
            remove_any(&path.join(rel));
            changed = true;
        }
    }
    for (rel, contents, m) in tree {
        let full = path.join(rel);
        match contents {
            None => {
                if !std::fs::symlink_metadata(&full).is_ok_and(|x| x.is_dir()) {
                    remove_any(&full);
                    let _ = std::fs::create_dir(&full);
                    changed = true;
                }
                if std::fs::symlink_metadata(&full)
                    .map(|x| x.permissions().mode() & 0o7777)
                    .ok()
                    != Some(*m)
                {
                    let _ = std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*m));
                    changed = true;
                }
            }
            Some(bytes) => {
                if !file_matches(&full, bytes, *m) {
                    if let Err(e) = replace_file(&full, bytes, *m) {
                        failures.push(format!("could not restore {}: {e}", full.display()));
                    }
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Every path under `root` (any type), relative, parents before children.
fn walk_any(
    root: &Path,
    rel: &Path,
    out: &mut Vec<PathBuf>,
    _budget: &mut u64,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root.join(rel))?.flatten() {
        let rel_child = rel.join(entry.file_name());
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        out.push(rel_child.clone());
        if is_dir {
            walk_any(root, &rel_child, out, _budget)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
