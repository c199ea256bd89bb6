//! Which credential paths exist, and where they really are, in few system calls.
//!
//! Every call checks some forty candidate paths, most of them absent, and resolves the
//! ones that exist: one `lstat` each, and for an existing one `realpath`, which (in musl)
//! reads each ancestor as a link, so two to four more calls. At about a microsecond per
//! call on the machines measured, that was a tenth of a millisecond of every sandboxed
//! call. Two shortcuts, each equivalent to the long way:
//! - the home directory is listed once: a candidate under it whose first component is
//!   not there does not exist (barring a race with its creation, which the long way has
//!   too);
//! - an existing path that is not itself a symbolic link resolves to its resolved parent
//!   plus its name, and parents are shared (`/etc` for the shadow files): each one is
//!   resolved once.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::canonical::canonicalize;

/// A larger home is not listed: its listing would cost more than the `lstat`s it spares.
const MAX_HOME_ENTRIES: usize = 1024;

/// What a candidate turned out to be.
pub struct Found {
    /// Whether something (a link included) is at the path.
    pub exists: bool,
    /// Whether it resolves all the way: it exists, and so does whatever its links lead
    /// to (what `stat` would say).
    pub resolves: bool,
    /// The canonical path if it resolves; the path itself if it exists but does not; else
    /// the path placed beneath the canonical home (for a candidate under the home) or
    /// beneath its deepest existing ancestor.
    pub resolved: PathBuf,
}

pub struct Prober<'a> {
    /// The home the candidates were built from, and its canonical form.
    home: &'a Path,
    canonical_home: &'a Path,
    /// The home's entries, sorted; `None` until listed, `Some(None)` when it could not be
    /// listed whole (unreadable, or too large): then every candidate is looked at.
    home_entries: Option<Option<Vec<OsString>>>,
    /// Directories already resolved, and what they resolved to.
    parents: HashMap<PathBuf, Option<PathBuf>>,
}

impl<'a> Prober<'a> {
    pub fn new(home: &'a Path, canonical_home: &'a Path) -> Self {
        let mut parents = HashMap::new();
        parents.insert(home.to_path_buf(), Some(canonical_home.to_path_buf()));
        Prober {
            home,
            canonical_home,
            home_entries: None,
            parents,
        }
    }

    pub fn probe(&mut self, path: &Path) -> Found {
        match self.look(path) {
            Some(found) => found,
            None => Found {
                exists: false,
                resolves: false,
                resolved: match path.strip_prefix(self.home) {
                    Ok(rest) => self.canonical_home.join(rest),
                    Err(_) => super::canonical_or_lexical(path),
                },
            },
        }
    }

    /// The canonical path of `path` if it resolves all the way (through its links), else
    /// `None`, without working out where a missing path would be.
    pub fn resolve_existing(&mut self, path: &Path) -> Option<PathBuf> {
        let found = self.look(path)?;
        found.resolves.then_some(found.resolved)
    }

    /// [`Self::probe`] for what exists; `None` for what does not.
    fn look(&mut self, path: &Path) -> Option<Found> {
        let under_home = path.strip_prefix(self.home).ok();
        if let Some(Component::Normal(first)) = under_home.and_then(|r| r.components().next()) {
            if let Some(entries) = self.home_entries() {
                entries
                    .binary_search_by(|e| e.as_os_str().cmp(first))
                    .ok()?;
            }
        }
        let meta = std::fs::symlink_metadata(path).ok()?;
        let resolved = match (meta.is_symlink(), path.parent(), path.file_name()) {
            (false, Some(parent), Some(name)) => self.resolved_dir(parent).map(|p| p.join(name)),
            _ => None,
        }
        .or_else(|| canonicalize(path).ok());
        Some(Found {
            exists: true,
            resolves: resolved.is_some(),
            resolved: resolved.unwrap_or_else(|| path.to_path_buf()),
        })
    }

    fn home_entries(&mut self) -> Option<&Vec<OsString>> {
        let home = self.home;
        self.home_entries
            .get_or_insert_with(|| {
                let mut names = crate::dir_entries::names(home, MAX_HOME_ENTRIES)?;
                names.sort_unstable();
                Some(names)
            })
            .as_ref()
    }

    fn resolved_dir(&mut self, dir: &Path) -> Option<&PathBuf> {
        self.parents
            .entry(dir.to_path_buf())
            .or_insert_with(|| canonicalize(dir).ok())
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcuts give what the long way gives: for candidates absent at the first
    /// component or deeper, present as a file, a directory, a link (to inside and to
    /// outside the home), under a linked directory, and outside the home.
    #[test]
    fn probing_agrees_with_lstat_and_realpath() {
        let root = tempfile::tempdir().unwrap();
        let root = canonicalize(root.path()).unwrap();
        let real_home = root.join("real-home");
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir_all(real_home.join(".config/gh")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(real_home.join(".npmrc"), "x").unwrap();
        std::fs::write(elsewhere.join("netrc"), "x").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("netrc"), real_home.join(".netrc")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, real_home.join(".aws")).unwrap();
        std::fs::write(elsewhere.join("credentials"), "x").unwrap();
        std::os::unix::fs::symlink(real_home.join(".npmrc"), real_home.join(".yarnrc")).unwrap();
        std::os::unix::fs::symlink(root.join("gone"), real_home.join(".pypirc")).unwrap();
        // The home as the caller names it: through a link.
        let home = root.join("home");
        std::os::unix::fs::symlink(&real_home, &home).unwrap();

        let candidates = [
            ".ssh",
            ".config/gcloud",
            ".config/gh",
            ".npmrc",
            ".netrc",
            ".yarnrc",
            ".pypirc",
            ".aws/credentials",
            ".aws/missing",
            "",
        ]
        .map(|c| {
            if c.is_empty() {
                home.clone()
            } else {
                home.join(c)
            }
        });
        let outside = [elsewhere.join("netrc"), root.join("missing/deeper")];
        let mut prober = Prober::new(&home, &real_home);
        for path in candidates.iter().chain(&outside) {
            let found = prober.probe(path);
            let exists = std::fs::symlink_metadata(path).is_ok();
            assert_eq!(found.exists, exists, "{}", path.display());
            assert_eq!(found.resolves, path.exists(), "{}", path.display());
            let expected = if exists {
                canonicalize(path).unwrap_or_else(|_| path.clone())
            } else if let Ok(rest) = path.strip_prefix(&home) {
                real_home.join(rest)
            } else {
                super::super::canonical_or_lexical(path)
            };
            assert_eq!(found.resolved, expected, "{}", path.display());
            let existing = prober.resolve_existing(path);
            assert_eq!(
                existing,
                path.exists().then_some(expected),
                "{}",
                path.display()
            );
        }
        assert!(
            matches!(&prober.home_entries, Some(Some(names)) if names.len() == 6),
            "the home was listed: {:?}",
            prober.home_entries
        );
    }

    /// A home that cannot be listed (here: missing) makes every candidate looked at.
    #[test]
    fn an_unlistable_home_falls_back_to_looking() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("no-such-home");
        let mut prober = Prober::new(&home, &home);
        let found = prober.probe(&home.join(".ssh"));
        assert!(!found.exists);
        assert_eq!(found.resolved, home.join(".ssh"));
        assert!(matches!(prober.home_entries, Some(None)));
    }
}
