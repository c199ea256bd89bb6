//! Which credential paths exist, and where they really are, in few system calls.
//!
//! Every call checks some forty candidate paths, most of them absent, and resolves the
//! ones that exist: one `lstat` each, and for an existing one `realpath`, which (in musl)
//! reads each ancestor as a link, so two to four more calls. At about a microsecond per
//! call on the machines measured, that was a tenth of a millisecond of every sandboxed
//! call. Two shortcuts, each equivalent to the long way:
//! - the home directory is listed once: a candidate under it whose first component is
//!   not there does not exist (barring a race with its creation, which the long way has
//!   too). "Not there" allows for homes on case-insensitive filesystems (macOS, ext4
//!   casefold), where `.SSH` answers for `.ssh`: names are compared without ASCII case,
//!   and a name with other characters that could fold onto a candidate makes the
//!   listing say nothing (see `HomeListing::may_hold`);
//! - on Linux, an existing path that is not itself a symbolic link resolves to its
//!   resolved parent plus its name, and parents are shared (`/etc` for the shadow files):
//!   each one is resolved once.

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
    /// Whether it could not be looked at, a directory on its way being closed to the
    /// caller (EACCES): whether it exists is then unknown.
    pub blocked: bool,
    /// Whether a link (below the home, for a candidate under it) lies on its way: where it
    /// leads, and who may change the link, are then worth a closer look.
    pub through_link: bool,
}

pub struct Prober<'a> {
    /// The home the candidates were built from, and its canonical form.
    home: &'a Path,
    canonical_home: &'a Path,
    /// The home's entries; `None` until listed, `Some(None)` when it could not be listed
    /// whole (unreadable, or too large): then every candidate is looked at.
    home_entries: Option<Option<HomeListing>>,
    /// Directories already resolved, and what they resolved to.
    parents: HashMap<PathBuf, Option<PathBuf>>,
    /// Directories on the way to missing candidates found to be links.
    links: std::collections::HashSet<PathBuf>,
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
            links: Default::default(),
        }
    }

    pub fn probe(&mut self, path: &Path) -> Found {
        match self.look(path) {
            Ok(found) => found,
            Err(blocked) => {
                let (resolved, through_link) = self.place(path);
                Found {
                    exists: false,
                    resolves: false,
                    resolved,
                    blocked,
                    through_link,
                }
            }
        }
    }

    /// `path` as named, beneath the canonical home.
    fn lexical(&self, path: &Path) -> PathBuf {
        match super::relative_to(path, self.home) {
            Some(rest) => super::joined(self.canonical_home, rest),
            None => path.to_path_buf(),
        }
    }

    /// Where a missing `path` would be created: beneath its deepest existing directory,
    /// with that directory's links followed (`~/.config` may lead into a dotfiles
    /// repository, which a writable root must then not hold either).
    /// Also whether a link lies on the way (one that leads nowhere included).
    fn place(&mut self, path: &Path) -> (PathBuf, bool) {
        let Some(rest) = super::relative_to(path, self.home) else {
            let placed = super::canonical_or_lexical(path);
            let through_link = placed != path;
            return (placed, through_link);
        };
        // Not in the home's listing: the home itself is the deepest directory.
        let first = rest.components().next();
        if let (Some(Component::Normal(first)), Some(entries)) = (first, self.home_entries()) {
            if !entries.may_hold(first) {
                return (super::joined(self.canonical_home, rest), false);
            }
        }
        let mut dir = path.parent();
        let mut through_link = false;
        while let Some(d) = dir.filter(|d| *d != self.home && super::lies_within(d, self.home)) {
            let resolved = self.existing_dir(d);
            through_link |= self.links.contains(d);
            if let Some(resolved) = resolved {
                let below = super::relative_to(path, d).unwrap_or(path);
                let placed = super::joined(&resolved, below);
                through_link |= placed != self.lexical(path);
                return (placed, through_link);
            }
            dir = d.parent();
        }
        (super::joined(self.canonical_home, rest), through_link)
    }

    /// The canonical path of `dir` (under the home) if it exists: its parent's and its
    /// name where it is not a link (one `lstat`, where `realpath` reads every ancestor
    /// again), else where the link leads.
    fn existing_dir(&mut self, dir: &Path) -> Option<PathBuf> {
        if let Some(known) = self.parents.get(dir) {
            return known.clone();
        }
        let resolved = match std::fs::symlink_metadata(dir) {
            Err(_) => None,
            Ok(meta) if meta.is_symlink() => {
                self.links.insert(dir.to_path_buf());
                canonicalize(dir).ok()
            }
            Ok(_) => match (dir.parent(), dir.file_name()) {
                (Some(parent), Some(name)) if super::lies_within(parent, self.home) => {
                    self.existing_dir(parent).map(|p| super::joined(&p, name))
                }
                _ => canonicalize(dir).ok(),
            },
        };
        self.parents.insert(dir.to_path_buf(), resolved.clone());
        resolved
    }

    /// The canonical path of `path` if it resolves all the way (through its links), else
    /// `None`, without working out where a missing path would be.
    pub fn resolve_existing(&mut self, path: &Path) -> Option<PathBuf> {
        let found = self.look(path).ok()?;
        found.resolves.then_some(found.resolved)
    }

    /// [`Self::probe`] for what exists; for what does not, whether that is because a
    /// directory on its way is closed to the caller.
    fn look(&mut self, path: &Path) -> Result<Found, bool> {
        let under_home = super::relative_to(path, self.home);
        if let Some(Component::Normal(first)) = under_home.and_then(|r| r.components().next()) {
            if let Some(entries) = self.home_entries() {
                if !entries.may_hold(first) {
                    return Err(false);
                }
            }
        }
        let meta =
            std::fs::symlink_metadata(path).map_err(|e| e.raw_os_error() == Some(libc::EACCES))?;
        // Linux only: its realpath keeps the spelling it was given, as the join does.
        // macOS's returns a case-insensitive volume's own spelling of each name, which
        // the sandbox profile must name.
        let joined = cfg!(target_os = "linux") && !meta.is_symlink();
        let resolved = match (joined, path.parent(), path.file_name()) {
            (true, Some(parent), Some(name)) => {
                self.resolved_dir(parent).map(|p| super::joined(p, name))
            }
            _ => None,
        }
        .or_else(|| canonicalize(path).ok());
        let resolves = resolved.is_some();
        let resolved = resolved.unwrap_or_else(|| path.to_path_buf());
        Ok(Found {
            exists: true,
            resolves,
            through_link: resolved != self.lexical(path),
            resolved,
            blocked: false,
        })
    }

    fn home_entries(&mut self) -> Option<&HomeListing> {
        let home = self.home;
        self.home_entries
            .get_or_insert_with(|| {
                crate::dir_entries::names(home, MAX_HOME_ENTRIES).map(HomeListing::new)
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

/// A directory's entry names, for asking whether a name could be among them.
#[derive(Debug)]
struct HomeListing {
    /// The names in ASCII lower case, sorted.
    folded: Vec<OsString>,
    /// Whether some name has a byte beyond ASCII: starting with a dot, or at all.
    /// Case folding keeps ASCII punctuation and maps some other characters onto ASCII
    /// letters (the Kelvin sign onto `k`), so such a name may be, on a case-insensitive
    /// filesystem, the same file as a candidate spelt in ASCII with the same first byte.
    unusual_dot_name: bool,
    unusual_name: bool,
}

impl HomeListing {
    fn new(names: Vec<OsString>) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let unusual = |n: &OsString| !n.as_bytes().is_ascii();
        let unusual_dot_name = names
            .iter()
            .any(|n| unusual(n) && n.as_bytes().starts_with(b"."));
        let unusual_name = names.iter().any(unusual);
        let mut folded: Vec<OsString> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
        folded.sort_unstable();
        HomeListing {
            folded,
            unusual_dot_name,
            unusual_name,
        }
    }

    /// False only if no entry can be `name` (an ASCII candidate), whatever the
    /// filesystem's idea of case.
    fn may_hold(&self, name: &std::ffi::OsStr) -> bool {
        use std::os::unix::ffi::OsStrExt;
        // Compared as folded, without making a folded copy of `name`.
        let folded_name = || name.as_bytes().iter().map(u8::to_ascii_lowercase);
        if self
            .folded
            .binary_search_by(|entry| entry.as_bytes().iter().copied().cmp(folded_name()))
            .is_ok()
        {
            return true;
        }
        if name.as_bytes().starts_with(b".") {
            self.unusual_dot_name
        } else {
            self.unusual_name
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the listing may rule out: only names no entry could be, with or without case,
    /// even through characters that fold onto ASCII.
    #[test]
    fn the_listing_rules_out_only_what_no_entry_can_be() {
        let listing = |names: &[&str]| HomeListing::new(names.iter().map(OsString::from).collect());
        let plain = listing(&[".config", ".npmrc", "M\u{fa}sica"]);
        assert!(plain.may_hold(".config".as_ref()));
        assert!(
            !plain.may_hold(".ssh".as_ref()),
            "absent, and nothing unusual starts with a dot"
        );
        assert!(
            plain.may_hold("xdg".as_ref()),
            "a name beyond ASCII might fold onto one without a dot"
        );
        assert!(
            listing(&[".SSH"]).may_hold(".ssh".as_ref()),
            "case-insensitive filesystems"
        );
        // KELVIN SIGN: folds onto `k` on a casefolding filesystem.
        assert!(listing(&[".\u{212A}ube"]).may_hold(".kube".as_ref()));
        assert!(!listing(&[".bashrc"]).may_hold(".kube".as_ref()));
    }

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
            } else if path.starts_with(&home) {
                // Beneath its deepest existing directory, that directory's links followed.
                let dir = path.ancestors().skip(1).find(|d| d.exists()).unwrap();
                canonicalize(dir)
                    .unwrap()
                    .join(path.strip_prefix(dir).unwrap())
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
            matches!(&prober.home_entries, Some(Some(names)) if names.folded.len() == 6),
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
