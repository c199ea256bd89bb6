//! Repositories nested in the workspace (gitlinks, submodules) carry their own config and
//! hooks, and the host's `git status` runs inside them (core.fsmonitor!). The sandbox can
//! create such a repository and stage it, so after every call chitti looks at the index:
//! a gitlink that is new, or whose repository's config or hooks changed during the call,
//! has its config, commondir and hooks moved aside (and the move is reported).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::AfterCall;

/// Larger indexes are not parsed (the check is reported as skipped).
const MAX_INDEX_BYTES: u64 = 64 * 1024 * 1024;

/// The gitlink paths (mode 160000) of a git index, versions 2 to 4.
pub fn gitlinks(index: &[u8]) -> Result<Vec<String>, String> {
    let bad = |what: &str| Err(format!("unreadable git index: {what}"));
    if index.len() < 12 || &index[..4] != b"DIRC" {
        return bad("no DIRC header");
    }
    let version = u32::from_be_bytes(index[4..8].try_into().unwrap());
    let count = u32::from_be_bytes(index[8..12].try_into().unwrap()) as usize;
    if !(2..=4).contains(&version) {
        return bad("unknown version");
    }
    // SHA-1 repositories use 20-byte ids; SHA-256 ones 32. The index does not say which,
    // so try SHA-1 first and fall back when the entries do not line up.
    for id_len in [20usize, 32] {
        if let Some(found) = parse_entries(index, version, count, id_len) {
            return Ok(found);
        }
    }
    bad("entries do not parse")
}

fn parse_entries(index: &[u8], version: u32, count: usize, id_len: usize) -> Option<Vec<String>> {
    let mut pos = 12;
    let mut prev: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..count {
        let start = pos;
        let fixed = 40 + id_len + 2; // stat fields, object id, flags
        let mode = u32::from_be_bytes(index.get(start + 24..start + 28)?.try_into().ok()?);
        let flags = u16::from_be_bytes(
            index
                .get(start + 40 + id_len..start + fixed)?
                .try_into()
                .ok()?,
        );
        pos = start + fixed;
        if version >= 3 && flags & 0x4000 != 0 {
            pos += 2; // extended flags
        }
        let path = if version == 4 {
            // Prefix compression: strip N bytes from the previous path, then a suffix.
            let (strip, used) = varint(index.get(pos..)?)?;
            pos += used;
            let end = pos + index.get(pos..)?.iter().position(|b| *b == 0)?;
            let keep = prev.len().checked_sub(strip as usize)?;
            let mut p = prev[..keep].to_vec();
            p.extend_from_slice(&index[pos..end]);
            pos = end + 1;
            p
        } else {
            let end = pos + index.get(pos..)?.iter().position(|b| *b == 0)?;
            let p = index[pos..end].to_vec();
            // Entries are padded with NULs to a multiple of 8 bytes.
            let len = end - start;
            pos = start + (len + 8) / 8 * 8;
            p
        };
        if mode >> 12 == 0o16 {
            out.push(String::from_utf8(path.clone()).ok()?);
        }
        prev = path;
    }
    Some(out)
}

/// Git's offset varint (used by index v4).
fn varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut i = 0;
    let mut c = *buf.first()?;
    let mut val = (c & 0x7f) as u64;
    while c & 0x80 != 0 {
        i += 1;
        c = *buf.get(i)?;
        val = ((val + 1) << 7) | (c & 0x7f) as u64;
    }
    Some((val, i + 1))
}

/// One repository in a writable root whose gitlinks are watched.
#[derive(Debug)]
struct Watched {
    root: PathBuf,
    index: PathBuf,
    before: Vec<String>,
}

/// The after-call check for nested repositories.
#[derive(Debug)]
pub struct NestedRepoGuard {
    repos: Vec<Watched>,
    /// Anything whose ctime is later than this changed during the call. (ctime cannot be
    /// set from user space; a little slack covers the kernel's coarse clock.)
    since: SystemTime,
}

impl NestedRepoGuard {
    /// Reads the gitlinks of every `root/.git/index` before the call.
    pub fn before(roots: &[PathBuf]) -> NestedRepoGuard {
        let mut repos = Vec::new();
        for root in roots {
            let index = root.join(".git/index");
            let before = read_gitlinks(&index).unwrap_or_default();
            if root.join(".git").is_dir() {
                repos.push(Watched {
                    root: root.clone(),
                    index,
                    before,
                });
            }
        }
        NestedRepoGuard {
            repos,
            since: SystemTime::now() - Duration::from_millis(50),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.repos.is_empty()
    }

    fn changed(&self, path: &Path) -> bool {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return false;
        };
        let ctime = UNIX_EPOCH
            + Duration::new(
                meta.ctime().max(0) as u64,
                meta.ctime_nsec().clamp(0, 999_999_999) as u32,
            );
        ctime >= self.since
    }

    fn check(&self) -> Vec<String> {
        let mut repairs = Vec::new();
        for repo in &self.repos {
            let after = match read_gitlinks(&repo.index) {
                Ok(links) => links,
                Err(e) => {
                    repairs.push(format!("nested repositories not checked: {e}"));
                    continue;
                }
            };
            for link in after {
                let work_dir = repo.root.join(&link);
                let Some(git_dir) = git_dir_of(&work_dir, &repo.root) else {
                    continue;
                };
                let risky = ["config", "commondir", "hooks", "config.worktree"];
                let is_new = !repo.before.contains(&link);
                let touched = self.changed(&work_dir.join(".git"))
                    || risky.iter().any(|r| self.changed(&git_dir.join(r)))
                    || hooks_changed(self, &git_dir.join("hooks"));
                if !(is_new || touched) {
                    continue;
                }
                for name in risky {
                    let path = git_dir.join(name);
                    if std::fs::symlink_metadata(&path).is_ok() {
                        let aside = git_dir
                            .join(format!("{name}.chitti-quarantine-{}", std::process::id()));
                        if std::fs::rename(&path, &aside).is_ok() {
                            repairs.push(format!(
                                "nested repository {}: moved {} aside to {} ({})",
                                link,
                                path.display(),
                                aside.display(),
                                if is_new {
                                    "staged during the call"
                                } else {
                                    "changed during the call"
                                }
                            ));
                        }
                    }
                }
            }
        }
        repairs
    }
}

fn hooks_changed(guard: &NestedRepoGuard, hooks: &Path) -> bool {
    std::fs::read_dir(hooks)
        .map(|entries| entries.flatten().any(|e| guard.changed(&e.path())))
        .unwrap_or(false)
}

fn read_gitlinks(index: &Path) -> Result<Vec<String>, String> {
    let meta = match std::fs::metadata(index) {
        Ok(m) => m,
        Err(_) => return Ok(Vec::new()),
    };
    if meta.len() > MAX_INDEX_BYTES {
        return Err(format!("{} is larger than 64 MiB", index.display()));
    }
    let bytes = std::fs::read(index).map_err(|e| format!("{}: {e}", index.display()))?;
    gitlinks(&bytes)
}

/// The git directory of a nested work tree, if it lies inside `root` (one outside every
/// writable root cannot have been written by the sandbox).
fn git_dir_of(work_dir: &Path, root: &Path) -> Option<PathBuf> {
    let dot_git = work_dir.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    let dir = if meta.is_dir() {
        dot_git
    } else if meta.is_file() {
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let target = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
        let target = Path::new(target);
        let abs = if target.is_absolute() {
            target.to_path_buf()
        } else {
            work_dir.join(target)
        };
        abs.canonicalize().ok()?
    } else {
        return None;
    };
    dir.starts_with(root).then_some(dir)
}

impl AfterCall for NestedRepoGuard {
    fn run(self: Box<Self>) -> Vec<String> {
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }

    #[test]
    fn parses_gitlinks_of_every_index_version() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        git(&ws, &["init", "-q"]);
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::write(ws.join("a/b/file"), "x").unwrap();
        git(&ws.join("a/b"), &["init", "-q"]);
        git(
            &ws.join("a/b"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        std::fs::write(ws.join("top"), "x").unwrap();
        git(&ws, &["add", "top", "a/b"]);
        for version in ["2", "3", "4"] {
            git(&ws, &["update-index", "--index-version", version]);
            let links = read_gitlinks(&ws.join(".git/index")).unwrap();
            assert_eq!(links, vec!["a/b".to_string()], "index v{version}");
        }
    }

    #[test]
    fn a_nested_repository_staged_during_the_call_loses_its_config() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        git(&ws, &["init", "-q"]);
        git(&ws, &["commit", "-q", "--allow-empty", "-m", "i"]);
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        std::fs::create_dir(ws.join("sub")).unwrap();
        git(&ws.join("sub"), &["init", "-q"]);
        git(
            &ws.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        git(&ws.join("sub"), &["config", "core.fsmonitor", "evil"]);
        git(&ws, &["add", "sub"]);
        let repairs = Box::new(guard).run();
        assert!(!repairs.is_empty());
        assert!(!ws.join("sub/.git/config").exists());
        assert!(!ws.join("sub/.git/hooks").exists());
    }

    #[test]
    fn untouched_gitlinks_are_left_alone() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        git(&ws, &["init", "-q"]);
        std::fs::create_dir(ws.join("sub")).unwrap();
        git(&ws.join("sub"), &["init", "-q"]);
        git(
            &ws.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        git(&ws, &["add", "sub"]);
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        std::fs::write(ws.join("file"), "x").unwrap();
        assert!(Box::new(guard).run().is_empty());
        assert!(ws.join("sub/.git/config").exists());
    }
}
