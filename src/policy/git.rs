//! Which git paths inside a writable root must stay read-only, and which git directories
//! outside it must become writable for `git add` / `git commit` to work in a worktree.
//!
//! A writable `.git/hooks` or `.git/config` (core.fsmonitor, core.hooksPath, aliases)
//! is code that runs outside the sandbox the next time the user runs git.

use std::path::{Path, PathBuf};

use crate::canonical::resolve_without_symlinks;

/// What protecting one repository needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GitProtection {
    /// Directories and files that must not be renamed or replaced (the `.git` directory,
    /// or a worktree's `.git` file), so that a new `.git/hooks` cannot be put in place.
    pub pinned: Vec<PathBuf>,
    /// Paths that stay read-only. `hooks` directories may not exist yet: the backend
    /// creates them empty so that nothing can be created there.
    pub read_only: Vec<PathBuf>,
    /// Git directories outside the writable root that git must write (a worktree's gitdir
    /// and the common dir holding objects and refs).
    pub writable: Vec<PathBuf>,
}

/// Looks at `root/.git` (one `stat`, and reads of a worktree's small pointer files).
pub fn protection_for(root: &Path) -> Result<GitProtection, String> {
    let dot_git = root.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
        return Ok(GitProtection::default());
    };
    let mut out = GitProtection::default();
    if meta.is_dir() {
        out.pinned.push(dot_git.clone());
        add_repo_dir(&dot_git, &mut out)?;
    } else if meta.is_file() {
        // A linked worktree: `.git` is a file `gitdir: <path>`. Its git directory and the
        // common directory become writable, so both are found without following a symlink:
        // they lie in directories the sandbox can write, where it could have swapped one
        // for a link to anywhere (which the next call would then make writable).
        out.pinned.push(dot_git.clone());
        out.read_only.push(dot_git.clone());
        let gitdir = read_pointer(&dot_git, "gitdir:", root)?;
        let common = match read_small(&gitdir.join("commondir")) {
            Ok(text) => real_dir(
                &absolutize(text.trim(), &gitdir),
                &format!("{}'s `commondir`", gitdir.display()),
            )?,
            Err(_) => gitdir.clone(),
        };
        let outside: Vec<&PathBuf> = [&gitdir, &common]
            .into_iter()
            .filter(|dir| !dir.starts_with(root))
            .collect();
        if !outside.is_empty() {
            check_points_back(&gitdir, &common, root)?;
        }
        for dir in outside {
            if !out.writable.contains(dir) {
                out.writable.push(dir.clone());
            }
        }
        // The git directory and the directories between it and the common one
        // (`worktrees`) must not be moved or replaced either.
        if let Ok(below) = gitdir.strip_prefix(&common) {
            let mut dir = common.clone();
            for name in below.components() {
                dir.push(name);
                out.pinned.push(dir.clone());
            }
        } else {
            out.pinned.push(gitdir.clone());
        }
        out.read_only.push(gitdir.join("config.worktree"));
        if common != gitdir {
            // `commondir` names the repository whose config and hooks git uses.
            out.read_only.push(gitdir.join("config"));
            out.read_only.push(gitdir.join("commondir"));
        }
        add_repo_dir(&common, &mut out)?;
    } else {
        // A symlinked `.git` (or something stranger): pin it so it cannot be re-pointed,
        // and protect the repository it leads to as if it were here, when that lies in this
        // writable root. (Elsewhere it is read-only to the sandbox already, and pinning it
        // would bind it writable on bwrap.)
        out.pinned.push(dot_git.clone());
        if let Ok(target) = crate::canonical::canonicalize(&dot_git) {
            if target.is_dir() && target.starts_with(root) {
                out.pinned.push(target.clone());
                add_repo_dir(&target, &mut out)?;
            }
        }
    }
    // The same directory may be reached twice (a worktree's and the common directory's).
    let mut seen = std::collections::HashSet::new();
    out.pinned.retain(|p| seen.insert(p.clone()));
    Ok(out)
}

/// What git reads from a git directory that can make it run code: hooks, config, and
/// `commondir` (which would move both elsewhere). Submodules' git directories under
/// `modules/` are protected the same way, a few levels deep.
fn add_repo_dir(git_dir: &Path, out: &mut GitProtection) -> Result<(), String> {
    add_repo_dir_at_depth(git_dir, out, 0)
}

/// The subdirectories of `dir` (none if it does not exist); a symlink among them, or a
/// directory that cannot be listed, is an error: git makes neither, and what is in them
/// must be protected.
fn subdirectories(dir: &Path) -> Result<Vec<PathBuf>, String> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        _ => return Ok(Vec::new()),
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let kind = entry
            .file_type()
            .map_err(|e| format!("cannot stat {}: {e}", entry.path().display()))?;
        if kind.is_symlink() {
            return Err(format!(
                "{} is a symbolic link where git keeps a repository's own files; chitti \
                 cannot protect what it leads to (remove it, or run `git worktree repair`)",
                entry.path().display()
            ));
        }
        if kind.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

fn add_repo_dir_at_depth(
    git_dir: &Path,
    out: &mut GitProtection,
    depth: usize,
) -> Result<(), String> {
    out.read_only.push(git_dir.join("hooks"));
    out.read_only.push(git_dir.join("config"));
    // Read as config when `extensions.worktreeConfig` is on (`git sparse-checkout` turns
    // it on by itself).
    out.read_only.push(git_dir.join("config.worktree"));
    out.read_only.push(git_dir.join("commondir"));
    if depth >= 3 {
        return Ok(());
    }
    // Other linked worktrees' git directories: their `commondir` and `config.worktree`
    // decide what git runs there, and `gitdir` which work tree they belong to.
    let worktrees = git_dir.join("worktrees");
    for dir in subdirectories(&worktrees)? {
        for name in ["commondir", "config.worktree", "gitdir"] {
            out.read_only.push(dir.join(name));
        }
        out.pinned.push(dir);
    }
    if worktrees.is_dir() {
        out.pinned.push(worktrees);
    }
    let modules = git_dir.join("modules");
    for module in subdirectories(&modules)? {
        out.pinned.push(module.clone());
        add_repo_dir_at_depth(&module, out, depth + 1)?;
    }
    if modules.is_dir() {
        out.pinned.push(modules);
    }
    Ok(())
}

/// A worktree's git directory made writable must name this work tree back, as git keeps
/// it: a linked worktree's `gitdir` file, a submodule's `core.worktree`. A `.git` file may
/// have been written by the sandbox of another call, one whose workspace holds this one;
/// without the check, pointing it at any directory would make that directory writable
/// here. And a linked worktree's git directory lies in the common one's `worktrees`, so
/// its `commondir` cannot lead anywhere else.
fn check_points_back(gitdir: &Path, common: &Path, root: &Path) -> Result<(), String> {
    let dot_git = root.join(".git");
    let same = |written: &str, base: &Path, expected: &Path| {
        crate::canonical::canonicalize(&absolutize(written.trim(), base))
            .is_ok_and(|p| p == expected)
    };
    let refused = |why: String| {
        Err(format!(
            "{} points at {}, {why}; chitti will not make it writable",
            dot_git.display(),
            gitdir.display()
        ))
    };
    if gitdir != common {
        if gitdir.parent() != Some(&common.join("worktrees")) {
            return refused(format!(
                "whose `commondir` leads to {}, not to the repository holding it",
                common.display()
            ));
        }
        let back = read_small(&gitdir.join("gitdir")).unwrap_or_default();
        if !same(&back, gitdir, &dot_git) {
            return refused(format!(
                "whose `gitdir` file does not name {} back (if the worktree was moved, run \
                 `git worktree repair` in it)",
                dot_git.display()
            ));
        }
    } else {
        let config = read_small(&gitdir.join("config")).unwrap_or_default();
        if !core_worktree(&config).is_some_and(|w| same(w, gitdir, root)) {
            return refused(format!(
                "whose `core.worktree` does not name {} (for a git directory made with `git \
                 init --separate-git-dir`, set it: `git config --file {}/config core.worktree \
                 {}`)",
                root.display(),
                gitdir.display(),
                root.display()
            ));
        }
    }
    Ok(())
}

/// `core.worktree` in a git config file's text (the last one, as git reads it).
fn core_worktree(config: &str) -> Option<&str> {
    let mut in_core = false;
    let mut found = None;
    for line in config.lines().map(str::trim) {
        if line.starts_with('[') {
            in_core = line
                .trim_end_matches(']')
                .trim_start_matches('[')
                .trim()
                .eq_ignore_ascii_case("core");
        } else if in_core {
            if let Some((key, value)) = line.split_once('=') {
                if key.trim().eq_ignore_ascii_case("worktree") {
                    found = Some(value.trim().trim_matches('"'));
                }
            }
        }
    }
    found
}

fn read_pointer(file: &Path, key: &str, base: &Path) -> Result<PathBuf, String> {
    let text = read_small(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .ok_or_else(|| format!("{} has no `{key}` line", file.display()))?;
    real_dir(&absolutize(value, base), &file.display().to_string())
}

/// A small text file of a repository (a `.git` file, `commondir`, `gitdir`, a config),
/// which an earlier sandboxed command may have made as large as its limits allow: read
/// only up to 1 MiB (larger is an error, as is a FIFO's emptiness: never waited on).
fn read_small(path: &Path) -> std::io::Result<String> {
    use crate::bounded_read::{read_at_most, Bounded};
    const MAX: u64 = 1024 * 1024;
    match read_at_most(path, MAX)? {
        Bounded::Whole(bytes) => String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Bounded::Start(_) => Err(std::io::Error::other(format!("it is over {MAX} bytes"))),
    }
}

/// `path` resolved, when it is a directory reached without any symbolic link; `what` names
/// where the path was read, for the error.
fn real_dir(path: &Path, what: &str) -> Result<PathBuf, String> {
    let resolved = resolve_without_symlinks(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "{what} points at {}, which does not exist: was the repository moved or \
                 deleted? (`git worktree repair` fixes a moved one)",
                path.display()
            )
        } else {
            format!(
                "{what} points at {}, which cannot be used: {e}. chitti makes a worktree's \
                 git directories writable only where no symbolic link leads (one may have \
                 been planted by an earlier sandboxed command); check the repository and run \
                 `git worktree repair`",
                path.display()
            )
        }
    })?;
    if !std::fs::symlink_metadata(&resolved).is_ok_and(|m| m.is_dir()) {
        return Err(format!(
            "{what} points at {}, which is not a directory",
            resolved.display()
        ));
    }
    Ok(resolved)
}

fn absolutize(value: &str, base: &Path) -> PathBuf {
    let p = Path::new(value);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_repository() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
        let p = protection_for(dir.path()).unwrap();
        assert_eq!(p.pinned, vec![dir.path().join(".git")]);
        assert!(p.read_only.contains(&dir.path().join(".git/hooks")));
        assert!(p.read_only.contains(&dir.path().join(".git/config")));
        assert!(p.read_only.contains(&dir.path().join(".git/commondir")));
        assert!(p.writable.is_empty());
    }

    #[test]
    fn no_repository() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            protection_for(dir.path()).unwrap(),
            GitProtection::default()
        );
    }

    #[test]
    fn linked_worktree_resolves_gitdir_and_common_dir() {
        let (_dir, common, wt) = linked_worktree();
        let wt_gitdir = common.join("worktrees/wt");
        let p = protection_for(&wt).unwrap();
        assert!(p.read_only.contains(&wt.join(".git")));
        assert!(p.read_only.contains(&common.join("hooks")));
        assert!(p.read_only.contains(&common.join("config")));
        assert!(p.read_only.contains(&wt_gitdir.join("config.worktree")));
        assert!(p.read_only.contains(&wt_gitdir.join("commondir")));
        assert!(p.read_only.contains(&wt_gitdir.join("gitdir")));
        assert!(p.writable.contains(&wt_gitdir));
        assert!(p.writable.contains(&common));
    }

    /// A main repository's git directory with a linked worktree `wt` (its git directory
    /// `worktrees/wt`), and the worktree itself; both canonical.
    fn linked_worktree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let common = root.join("main/.git");
        let gitdir = common.join("worktrees/wt");
        std::fs::create_dir_all(&gitdir).unwrap();
        std::fs::write(gitdir.join("commondir"), "../..\n").unwrap();
        let wt = root.join("wt");
        std::fs::create_dir(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
        std::fs::write(
            gitdir.join("gitdir"),
            format!("{}\n", wt.join(".git").display()),
        )
        .unwrap();
        (dir, common, wt)
    }

    #[test]
    fn a_linked_worktree_pins_its_git_directory_and_the_way_to_it() {
        let (_dir, common, wt) = linked_worktree();
        let p = protection_for(&wt).unwrap();
        assert_eq!(
            p.pinned,
            vec![
                wt.join(".git"),
                common.join("worktrees"),
                common.join("worktrees/wt")
            ]
        );
        assert!(p.read_only.contains(&common.join("config.worktree")));
    }

    #[test]
    fn a_git_directory_swapped_for_a_symlink_is_refused() {
        let (_dir, common, wt) = linked_worktree();
        let elsewhere = common.parent().unwrap().parent().unwrap().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("commondir"), "../..\n").unwrap();
        let gitdir = common.join("worktrees/wt");
        std::fs::rename(&gitdir, common.join("worktrees/away")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &gitdir).unwrap();
        let err = protection_for(&wt).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");

        // The same for `worktrees`, one level up.
        std::fs::remove_file(&gitdir).unwrap();
        std::fs::rename(common.join("worktrees/away"), &gitdir).unwrap();
        std::fs::rename(common.join("worktrees"), common.join("moved")).unwrap();
        std::os::unix::fs::symlink(common.join("moved"), common.join("worktrees")).unwrap();
        assert!(protection_for(&wt).unwrap_err().contains("symbolic link"));
    }

    #[test]
    fn a_common_directory_reached_through_a_symlink_is_refused() {
        let (_dir, common, wt) = linked_worktree();
        let link = common.parent().unwrap().join("link");
        std::os::unix::fs::symlink(&common, &link).unwrap();
        std::fs::write(
            common.join("worktrees/wt/commondir"),
            format!("{}\n", link.display()),
        )
        .unwrap();
        let err = protection_for(&wt).unwrap_err();
        assert!(
            err.contains("commondir") && err.contains("symbolic link"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_git_directory_is_named_as_missing() {
        let (_dir, common, wt) = linked_worktree();
        std::fs::remove_dir_all(common.join("worktrees")).unwrap();
        let err = protection_for(&wt).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        assert!(!err.contains("symbolic link"), "{err}");
    }

    #[test]
    fn a_git_directory_that_does_not_name_the_worktree_back_is_refused() {
        let (_dir, common, wt) = linked_worktree();
        let gitdir = common.join("worktrees/wt");
        std::fs::write(gitdir.join("gitdir"), "/somewhere/else/.git\n").unwrap();
        let err = protection_for(&wt).unwrap_err();
        assert!(
            err.contains("does not name") && err.contains("git worktree repair"),
            "{err}"
        );
        std::fs::remove_file(gitdir.join("gitdir")).unwrap();
        assert!(protection_for(&wt).is_err());
    }

    #[test]
    fn a_commondir_leading_out_of_the_repository_is_refused() {
        let (_dir, common, wt) = linked_worktree();
        let elsewhere = common.parent().unwrap().parent().unwrap().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(
            common.join("worktrees/wt/commondir"),
            format!("{}\n", elsewhere.display()),
        )
        .unwrap();
        let err = protection_for(&wt).unwrap_err();
        assert!(err.contains("not to the repository holding it"), "{err}");
    }

    #[test]
    fn a_separate_git_directory_must_name_its_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let store = root.join("store");
        let wt = root.join("work");
        std::fs::create_dir_all(store.join("hooks")).unwrap();
        std::fs::create_dir(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", store.display())).unwrap();
        std::fs::write(store.join("config"), "[core]\n\tbare = false\n").unwrap();
        let err = protection_for(&wt).unwrap_err();
        assert!(err.contains("core.worktree"), "{err}");
        // As git writes it for a submodule: relative to the git directory.
        std::fs::write(
            store.join("config"),
            "[core]\n\tworktree = ../work\n[x]\nworktree = /\n",
        )
        .unwrap();
        let p = protection_for(&wt).unwrap();
        assert_eq!(p.writable, vec![store.clone()]);
        assert!(p.read_only.contains(&store.join("hooks")));
    }

    #[test]
    fn other_worktrees_of_a_repository_are_pinned_and_protected() {
        let (_dir, common, _wt) = linked_worktree();
        let main = common.parent().unwrap();
        let p = protection_for(main).unwrap();
        let gitdir = common.join("worktrees/wt");
        assert!(p.pinned.contains(&common.join("worktrees")));
        assert!(p.pinned.contains(&gitdir));
        for name in ["commondir", "config.worktree", "gitdir"] {
            assert!(p.read_only.contains(&gitdir.join(name)), "{name}");
        }
    }

    #[test]
    fn the_repository_a_dot_git_symlink_leads_to_is_protected() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("gitreal/hooks")).unwrap();
        std::os::unix::fs::symlink("gitreal", root.join(".git")).unwrap();
        let p = protection_for(&root).unwrap();
        assert!(p.pinned.contains(&root.join(".git")));
        assert!(p.pinned.contains(&root.join("gitreal")));
        assert!(p.read_only.contains(&root.join("gitreal/config")));
        assert!(p.read_only.contains(&root.join("gitreal/hooks")));
    }

    #[test]
    fn a_symlink_among_the_worktrees_is_refused() {
        let (_dir, common, _wt) = linked_worktree();
        let main = common.parent().unwrap();
        std::os::unix::fs::symlink(main, common.join("worktrees/planted")).unwrap();
        let err = protection_for(main).unwrap_err();
        assert!(err.contains("symbolic link where git keeps"), "{err}");
    }

    #[test]
    fn a_dot_git_symlink_leading_out_of_the_root_pins_nothing_there() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (root, elsewhere) = (base.join("ws"), base.join("elsewhere.git"));
        std::fs::create_dir_all(elsewhere.join("hooks")).unwrap();
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join(".git")).unwrap();
        let p = protection_for(&root).unwrap();
        assert_eq!(p.pinned, vec![root.join(".git")]);
        assert!(p.writable.is_empty());
    }
}
