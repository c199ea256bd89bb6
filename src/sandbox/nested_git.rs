//! Repositories nested in the workspace (gitlinks, submodules) carry their own config and
//! hooks, and the host's `git status` runs inside them (core.fsmonitor!). The sandbox can
//! create such a repository and stage it, so after every call chitti looks at the index:
//! a gitlink that is new, or whose repository's config or hooks changed during the call,
//! has its config, commondir and hooks moved aside (and the move is reported).

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::AfterCall;
use crate::bounded_read::{read_at_most, Bounded};
use crate::canonical::canonicalize;

/// A gitlink: its path, as git stores it (bytes, `/`-separated), and the commit it records
/// (lowercase hex; empty where not known).
type Gitlink = (Vec<u8>, String);

/// What one git index file says about nested repositories.
#[derive(Debug, Default, PartialEq, Eq)]
struct IndexGitlinks {
    /// The gitlink paths (mode 160000), as git stores them: bytes, `/`-separated.
    paths: Vec<Vec<u8>>,
    /// The commit each gitlink records (lowercase hex), in the order of `paths`.
    ids: Vec<String>,
    /// Whether git reads more into it than its entries one after another: a split index
    /// (whose entries may replace a shared index's), a sparse one (whose directories git
    /// expands from its objects), an entry offset table (entries read from where it
    /// says), or an extension chitti does not know. Then git itself lists the gitlinks.
    needs_git: bool,
}

/// Index extensions that change nothing about which entries git sees.
const PLAIN_EXTENSIONS: [&[u8; 4]; 4] = [b"TREE", b"REUC", b"UNTR", b"FSMN"];

/// Reads an index front to back. Streamed, not read whole: an index of any size is
/// checked (one the sandbox padded past a size limit must not skip the check).
struct IndexReader {
    input: std::io::BufReader<std::fs::File>,
    /// Bytes consumed so far.
    pos: u64,
}

impl IndexReader {
    fn new(input: std::fs::File) -> Self {
        IndexReader {
            input: std::io::BufReader::with_capacity(64 * 1024, input),
            pos: 0,
        }
    }

    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        use std::io::Read;
        let mut buf = [0; N];
        self.input.read_exact(&mut buf).ok()?;
        self.pos += N as u64;
        Some(buf)
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes::<4>().map(u32::from_be_bytes)
    }

    fn skip(&mut self, n: u64) -> Option<()> {
        self.input.seek_relative(i64::try_from(n).ok()?).ok()?;
        // Seeking past the end succeeds: the caller compares `pos` with the length.
        self.pos = self.pos.checked_add(n)?;
        Some(())
    }

    /// The next `n` bytes.
    fn exact(&mut self, n: usize) -> Option<Vec<u8>> {
        use std::io::Read;
        let mut buf = Vec::new();
        (&mut self.input)
            .take(n as u64)
            .read_to_end(&mut buf)
            .ok()?;
        (buf.len() == n).then_some(())?;
        self.pos += n as u64;
        Some(buf)
    }

    /// Up to and including a NUL; the NUL is not returned.
    fn until_nul(&mut self) -> Option<Vec<u8>> {
        use std::io::BufRead;
        let mut buf = Vec::new();
        self.input.read_until(0, &mut buf).ok()?;
        self.pos += buf.len() as u64;
        (buf.pop() == Some(0)).then_some(buf)
    }
}

/// The gitlinks of a git index, versions 2 to 4, whose object ids are `id_len` bytes (as
/// the repository's config says); `len` is the index's size.
fn parse_index(input: std::fs::File, len: u64, id_len: usize) -> Result<IndexGitlinks, String> {
    let bad = |what: &str| Err(format!("unreadable git index: {what}"));
    let mut index = IndexReader::new(input);
    let (Some(magic), Some(version), Some(count)) = (index.bytes::<4>(), index.u32(), index.u32())
    else {
        return bad("no DIRC header");
    };
    if &magic != b"DIRC" {
        return bad("no DIRC header");
    }
    if !(2..=4).contains(&version) {
        return bad("unknown version");
    }
    let Some((links, odd_entries)) = parse_entries(&mut index, version, count, id_len) else {
        return bad("entries do not parse");
    };
    let Some(odd_extensions) = extensions_need_git(&mut index, len, id_len) else {
        return bad("extensions do not parse");
    };
    let (paths, ids) = links.into_iter().unzip();
    Ok(IndexGitlinks {
        paths,
        ids,
        needs_git: odd_entries || odd_extensions || ends_with_eoie(&index, len, id_len),
    })
}

/// The gitlink paths, and whether an entry is one git reads as more than itself (a sparse
/// directory, or a split index's nameless replacement); leaves `index` where the entries
/// end.
fn parse_entries(
    index: &mut IndexReader,
    version: u32,
    count: u32,
    id_len: usize,
) -> Option<(Vec<Gitlink>, bool)> {
    let mut prev: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut odd = false;
    for _ in 0..count {
        let start = index.pos;
        index.skip(24)?; // ctime, mtime, dev, ino
        let mode = index.u32()?;
        index.skip(12)?; // uid, gid, size
        let id = index.exact(id_len)?;
        let flags = u16::from_be_bytes(index.bytes::<2>()?);
        // Extended flags follow wherever the bit is set, in any version, as git reads them.
        if flags & 0x4000 != 0 {
            index.skip(2)?;
        }
        let header = index.pos - start;
        // The name's length is the flags' low 12 bits, as git takes it; only where they
        // are all set is it found by its NUL. A name with a NUL inside that length, or
        // without one after it, is read by git in ways chitti does not follow.
        let named = (flags & 0x0fff) as usize;
        let mut name = |index: &mut IndexReader, len: Option<usize>| match len {
            None => index.until_nul(),
            Some(len) => {
                let name = index.exact(len)?;
                odd |= name.contains(&0);
                Some(name)
            }
        };
        let path = if version == 4 {
            // Prefix compression: strip N bytes from the previous path, then a suffix, then
            // its NUL (no padding).
            let strip = varint(index)?;
            let keep = prev.len().checked_sub(usize::try_from(strip).ok()?)?;
            let suffix = if named == 0x0fff {
                name(index, None)?
            } else {
                let suffix = name(index, Some(named.checked_sub(keep)?))?;
                odd |= index.bytes::<1>()? != [0];
                suffix
            };
            let mut p = prev[..keep].to_vec();
            p.extend_from_slice(&suffix);
            p
        } else {
            let p = name(index, (named != 0x0fff).then_some(named))?;
            // Padded with NULs, at least one, to a multiple of 8 bytes from the entry's
            // start (git's `ondisk_ce_size`).
            let size = (header + p.len() as u64 + 8) & !7;
            let rest = (start + size).checked_sub(index.pos)?;
            let padding = index.exact(usize::try_from(rest).ok()?)?;
            odd |= padding.iter().any(|b| *b != 0);
            p
        };
        // As git tests it (`S_ISGITLINK`): the type bits only, whatever else is set.
        if mode & 0o170000 == 0o160000 {
            out.push((path.clone(), hex(&id)));
        }
        odd |= mode & 0o170000 == 0o040000 || path.is_empty();
        prev = path;
    }
    Some((out, odd))
}

/// Walks the extensions after the entries (up to the trailing checksum): whether one of
/// them is not plain (see [`PLAIN_EXTENSIONS`]). `None` when they do not line up.
fn extensions_need_git(index: &mut IndexReader, len: u64, id_len: usize) -> Option<bool> {
    let end = len.checked_sub(id_len as u64)?;
    let mut needs_git = false;
    while index.pos < end {
        let name = index.bytes::<4>()?;
        let size = index.u32()?;
        if index.pos.checked_add(size as u64)? > end {
            return None;
        }
        needs_git |= !PLAIN_EXTENSIONS.contains(&&name);
        index.skip(size as u64)?;
    }
    (index.pos == end).then_some(needs_git)
}

/// Whether the index ends (before its checksum) with what git, reading with threads, takes
/// for an `EOIE` extension (it looks there, not along the extensions), wherever that lies.
fn ends_with_eoie(index: &IndexReader, len: u64, id_len: usize) -> bool {
    use std::os::unix::fs::FileExt;
    let Some(at) = len.checked_sub(id_len as u64 + 32) else {
        return false;
    };
    let mut signature = [0u8; 4];
    index
        .input
        .get_ref()
        .read_exact_at(&mut signature, at)
        .is_ok()
        && &signature == b"EOIE"
}

/// Git's offset varint (used by index v4). Where git's would overflow (it then reads 0 and
/// takes the bytes as part of the name), `None`: the index goes to git.
fn varint(index: &mut IndexReader) -> Option<u64> {
    let [mut c] = index.bytes::<1>()?;
    let mut val = (c & 0x7f) as u64;
    while c & 0x80 != 0 {
        let next = val.checked_add(1)?;
        if next >> 57 != 0 {
            return None;
        }
        [c] = index.bytes::<1>()?;
        val = (next << 7) | (c & 0x7f) as u64;
    }
    Some(val)
}

/// Nested repositories inside nested repositories are followed this deep.
const MAX_DEPTH: usize = 8;

/// At most this many indexes are followed (one git directory may serve many work trees,
/// each read again): past it the call fails rather than check for ever.
const MAX_FOLLOWED: usize = 4096;

/// What git reads from a git directory that can make it run code.
const RISKY: [&str; 4] = ["config", "commondir", "hooks", "config.worktree"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The repository of a gitlink: the host's `git status` enters it unasked.
    Gitlink,
    /// Another linked worktree's git directory: git reads it when the user works there.
    Worktree,
    /// A submodule's git directory under a repository's `modules` (at any depth: a
    /// submodule's name may hold slashes), which `git submodule update` takes up whether
    /// or not the submodule's work tree is there (a review emptied it, and planted there).
    Module,
    /// The git directory git finds at a writable root itself (its `.git`, or the root as a
    /// bare repository): the host's git uses it in the workspace.
    Root,
}

/// A git directory the check looks after (canonical path).
#[derive(Debug)]
struct Found {
    git_dir: PathBuf,
    /// The work tree's `.git` entry (gitlinks only).
    dot_git: Option<PathBuf>,
    /// The work tree whose index paths the check read with it, if it has one: the only
    /// `core.worktree` its config may name (any other moves the paths git enters).
    work_tree: Option<PathBuf>,
    /// How the report names it.
    label: String,
    kind: Kind,
}

/// The after-call check for nested repositories.
#[derive(Debug)]
pub struct NestedRepoGuard {
    /// Canonical writable roots: nothing outside them can have been written by the
    /// sandbox, so nothing outside them is ever touched.
    roots: Vec<PathBuf>,
    /// The git directories found before the call.
    before: HashSet<PathBuf>,
    /// Anything whose ctime is later than this changed during the call. (ctime cannot be
    /// set from user space; a little slack covers the kernel's coarse clock.)
    since: SystemTime,
    /// The files that had changed within that slack already, before the call, with their
    /// mode and contents then: for them the contents decide, or a worktree made just before
    /// a call would count as changed by it.
    recent: HashMap<PathBuf, (u32, Vec<u8>)>,
    /// Which inode each git directory, each of its risky names and each hook held before
    /// the call (`None`: nothing). A file keeps its ctime when the directory holding it is
    /// moved, so a git directory prepared in an earlier call and renamed into place during
    /// this one shows only here.
    inodes: HashMap<PathBuf, Inode>,
    /// Paths the policy keeps read-only and puts back (see [`NestedRepoGuard::trusting`]).
    protected: HashSet<PathBuf>,
    /// What each writable root's `.git` was before the call (see [`pointer`]).
    pointers: HashMap<PathBuf, Pointer>,
}

/// A `.git` entry as it leads somewhere: its inode and, for a symlink its target, for a
/// file its contents (`None`: nothing there).
type Pointer = Option<((u64, u64), Vec<u8>)>;

fn pointer(dot_git: &Path) -> Pointer {
    let meta = std::fs::symlink_metadata(dot_git).ok()?;
    let leads = if meta.file_type().is_symlink() {
        std::fs::read_link(dot_git)
            .map(|to| to.as_os_str().as_bytes().to_vec())
            .unwrap_or_default()
    } else {
        small_file(dot_git)
            .map(|(_, text)| text)
            .unwrap_or_default()
    };
    Some(((meta.dev(), meta.ino()), leads))
}

/// The inode a name leads to without following a symlink (`None`: nothing is there).
type Inode = Option<(u64, u64)>;

fn inode(path: &Path) -> Inode {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

/// A git directory's names that can make git run code: its risky entries and its hooks.
fn risky_names(git_dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = RISKY.iter().map(|r| git_dir.join(r)).collect();
    if let Ok(entries) = std::fs::read_dir(git_dir.join("hooks")) {
        paths.extend(entries.flatten().map(|e| e.path()));
    }
    paths
}

impl NestedRepoGuard {
    /// Finds, before the call, every repository reachable from the writable roots' own
    /// repositories: gitlinks (through split indexes, nested any level deep) and the
    /// other worktrees of the same repository. The roots are a policy's, canonical already.
    pub fn before(writable: &[PathBuf]) -> NestedRepoGuard {
        let mut guard = NestedRepoGuard {
            roots: writable.to_vec(),
            before: HashSet::new(),
            since: SystemTime::now() - Duration::from_millis(50),
            recent: HashMap::new(),
            inodes: HashMap::new(),
            protected: HashSet::new(),
            pointers: HashMap::new(),
        };
        for root in writable {
            let dot_git = root.join(".git");
            guard.pointers.insert(dot_git.clone(), pointer(&dot_git));
        }
        let found = guard.discover(&mut Vec::new());
        for repo in &found {
            let names = risky_names(&repo.git_dir);
            for path in names.iter().chain([&repo.git_dir]) {
                guard.inodes.insert(path.clone(), inode(path));
            }
            for path in names.iter().chain(&repo.dot_git) {
                if guard.changed(path) {
                    if let Some(then) = small_file(path) {
                        guard.recent.insert(path.clone(), then);
                    }
                }
            }
        }
        guard.before = found.into_iter().map(|f| f.git_dir).collect();
        guard
    }

    /// The policy's protected paths: a writable root that is itself a git directory with
    /// its config among them (a linked worktree's git directories, which the policy makes
    /// writable roots and protects) is not judged on every call as an unprotected one is.
    pub fn trusting(mut self, protected: &[PathBuf]) -> NestedRepoGuard {
        self.protected.extend(protected.iter().cloned());
        self
    }

    /// Why a repository git takes at a root could run a program on the host, where it is
    /// judged (see `quarantine`).
    fn judge_root_repository(&self, repo: &Found, is_new: bool) -> Option<String> {
        if self.inside_roots(&repo.git_dir) {
            if !is_new && self.policy_protects(&repo.git_dir) {
                return None;
            }
            return could_run_code(&repo.git_dir, repo.work_tree.as_deref())
                .map(|why| format!("a repository at a writable root, and {why}"));
        }
        // Outside the roots: the user's own layout, unless this call made or changed the
        // `.git` leading there; then, however harmless what it leads to is now, calls in
        // other workspaces may write it later.
        let pointer_changed = repo.work_tree.as_deref().is_some_and(|root| {
            let dot_git = root.join(".git");
            self.pointers
                .get(&dot_git)
                .is_none_or(|then| *then != pointer(&dot_git))
        });
        (pointer_changed || is_new).then(|| {
            "its .git, made or changed during the call, leads outside the writable roots, \
             which calls in other workspaces may write"
                .into()
        })
    }

    /// Whether the policy keeps a git directory's config or commondir read-only (and puts
    /// it back): the top repository of a writable root, or a linked worktree's. The policy
    /// names them by the path it found them at (a `.git` symlink on the way, say), the
    /// check by their canonical one.
    fn policy_protects(&self, git_dir: &Path) -> bool {
        let names = ["config", "commondir"];
        names
            .iter()
            .any(|name| self.protected.contains(&git_dir.join(name)))
            || self.protected.iter().any(|path| {
                path.file_name()
                    .is_some_and(|name| names.iter().any(|n| name == *n))
                    && path
                        .parent()
                        .and_then(|dir| canonicalize(dir).ok())
                        .is_some_and(|dir| dir == git_dir)
            })
    }

    fn inside_roots(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
    }

    /// `None` when no writable root is a repository at all.
    fn discover(&self, problems: &mut Vec<String>) -> Vec<Found> {
        let mut seen = Walked::default();
        let mut found = Vec::new();
        let mut tops = Vec::new();
        // A root inside a repository (a package of a larger one) is not that repository's
        // top, but the host's git enters the gitlinks of its index that lie in the root.
        let mut enclosing = Vec::new();
        for root in &self.roots {
            let taken = root_repositories(root);
            if let Some(why) = &taken.unreadable {
                problems.push(format!(
                    "the repository at {} not checked: {why}",
                    root.display()
                ));
            }
            for git_dir in taken.git_dirs {
                // A bare repository has no work tree of its own to name.
                let (label, work_tree) = if &git_dir == root {
                    let label = format!(
                        "the writable root {} taken as a bare repository",
                        root.display()
                    );
                    (label, None)
                } else {
                    let label = format!("the repository at {}", root.display());
                    (label, Some(root.clone()))
                };
                found.push(Found {
                    label,
                    dot_git: None,
                    work_tree,
                    git_dir,
                    kind: Kind::Root,
                });
            }
            if taken.may_go_above {
                if let Some((work, git_dir)) = enclosing_repository(root) {
                    if seen.judged.insert(git_dir.clone()) {
                        enclosing.push((work, git_dir));
                    }
                }
            }
            let Some(top) = (!taken.no_dot_git).then(|| top_repository(root)).flatten() else {
                continue;
            };
            seen.judged.insert(top.git_dir.clone());
            seen.judged.insert(top.common_dir.clone());
            tops.push((root, top));
        }
        // Gitlinks first: a git directory a gitlink leads to is judged as a gitlink's (moved
        // aside when new), even when it also sits among the worktrees, where a new one would
        // be the sandbox's own and left alone.
        for (root, top) in &tops {
            self.gitlinks_of(
                root,
                &top.git_dir,
                0,
                false,
                &mut seen,
                &mut found,
                problems,
            );
        }
        for (work, git_dir) in &enclosing {
            self.gitlinks_of(work, git_dir, 0, true, &mut seen, &mut found, problems);
        }
        for (_, top) in &tops {
            // A linked worktree's workspace shares the main work tree's index, which git
            // reads there (a review staged a gitlink into it leading back into the root).
            if top.git_dir != top.common_dir {
                if let Some(main) = main_work_tree(&top.common_dir) {
                    self.gitlinks_of(
                        &main,
                        &top.common_dir,
                        0,
                        true,
                        &mut seen,
                        &mut found,
                        problems,
                    );
                }
            }
            if let Ok(entries) = std::fs::read_dir(top.common_dir.join("worktrees")) {
                for entry in entries.flatten() {
                    let Ok(dir) = canonicalize(&entry.path()) else {
                        continue;
                    };
                    if !dir.is_dir() || !self.inside_roots(&dir) {
                        continue;
                    }
                    if seen.judged.insert(dir.clone()) {
                        found.push(Found {
                            label: format!("worktree {}", dir.display()),
                            git_dir: dir.clone(),
                            dot_git: None,
                            work_tree: None,
                            kind: Kind::Worktree,
                        });
                    }
                    // Each worktree has an index of its own, whose gitlinks git enters
                    // when the user works there.
                    if let Some(work) = linked_work_tree(&dir) {
                        self.gitlinks_of(&work, &dir, 0, true, &mut seen, &mut found, problems);
                    }
                }
            }
        }
        // Every git directory met so far, and each found under their `modules` in turn.
        let mut walk: Vec<(PathBuf, Option<PathBuf>)> = tops
            .iter()
            .flat_map(|(root, top)| {
                [
                    (top.git_dir.clone(), Some(root.to_path_buf())),
                    (top.common_dir.clone(), Some(root.to_path_buf())),
                ]
            })
            .collect();
        let mut next = 0;
        loop {
            walk.extend(
                found[next..]
                    .iter()
                    .map(|repo| (repo.git_dir.clone(), repo.work_tree.clone())),
            );
            next = found.len();
            let Some((git_dir, work_tree)) = walk.pop() else {
                break;
            };
            self.modules_of(
                &git_dir,
                work_tree.as_deref(),
                &mut seen,
                &mut found,
                problems,
            );
        }
        found
    }

    /// The submodule git directories under `git_dir/modules`, at any depth (a name may
    /// hold slashes; a directory that is no git directory is part of one). `work_tree`:
    /// the repository's own, where its submodules' work trees lie.
    fn modules_of(
        &self,
        git_dir: &Path,
        work_tree: Option<&Path>,
        seen: &mut Walked,
        found: &mut Vec<Found>,
        problems: &mut Vec<String>,
    ) {
        for path in module_git_dirs(git_dir, seen, problems) {
            if !seen.judged.insert(path.clone()) {
                continue;
            }
            if !self.inside_roots(&path) {
                if let Some(why) = could_run_code(&path, None) {
                    problems.push(format!(
                        "submodule git directory {} (under {}) lies outside the writable \
                         roots, where chitti moves nothing, and {why}",
                        path.display(),
                        git_dir.join("modules").display()
                    ));
                }
                continue;
            }
            found.push(Found {
                label: format!("submodule git directory {}", path.display()),
                work_tree: module_work_tree(&path, work_tree),
                git_dir: path,
                dot_git: None,
                kind: Kind::Module,
            });
        }
    }

    /// Follows the gitlinks of one repository's index, read from the work tree `work_dir`
    /// as git reads them there, and theirs in turn.
    /// `enclosing`: the repository holds the writable roots rather than being one's top;
    /// its gitlinks elsewhere (work tree and git directory outside every root) are not the
    /// sandbox's to write, and are left alone.
    #[allow(clippy::too_many_arguments)]
    fn gitlinks_of(
        &self,
        work_dir: &Path,
        git_dir: &Path,
        depth: usize,
        enclosing: bool,
        seen: &mut Walked,
        found: &mut Vec<Found>,
        problems: &mut Vec<String>,
    ) {
        if !seen
            .followed
            .insert((git_dir.to_path_buf(), work_dir.to_path_buf()))
        {
            return;
        }
        if seen.followed.len() > MAX_FOLLOWED {
            if seen.followed.len() == MAX_FOLLOWED + 1 {
                problems.push(format!(
                    "more than {MAX_FOLLOWED} pairs of nested repository and work tree: the \
                     rest not checked"
                ));
            }
            return;
        }
        if depth > MAX_DEPTH {
            problems.push(format!(
                "nested repositories deeper than {MAX_DEPTH} levels under {} not checked",
                work_dir.display()
            ));
            return;
        }
        let links = match read_gitlinks(git_dir, work_dir) {
            Ok(links) => links,
            Err(e) => {
                problems.push(format!("nested repositories not checked: {e}"));
                return;
            }
        };
        for (link, id) in links {
            self.follow_gitlink(
                work_dir, git_dir, &link, &id, depth, enclosing, seen, found, problems,
            );
        }
    }

    /// Follows one gitlink `link` (recording the commit `id`) of the index or commit read
    /// from `work_dir`: judges the repository it leads to, follows that one's gitlinks,
    /// and those of the commit it records where that is not the one checked out.
    #[allow(clippy::too_many_arguments)]
    fn follow_gitlink(
        &self,
        work_dir: &Path,
        parent_git: &Path,
        link: &[u8],
        id: &str,
        depth: usize,
        enclosing: bool,
        seen: &mut Walked,
        found: &mut Vec<Found>,
        problems: &mut Vec<String>,
    ) {
        if depth > MAX_DEPTH {
            problems.push(format!(
                "nested repositories deeper than {MAX_DEPTH} levels under {} not checked",
                work_dir.display()
            ));
            return;
        }
        {
            // Git checks index paths only when it adds them: reading an index, it takes a
            // path as it is (`./sub`, `x/../sub`, `sub/`) and the kernel resolves it. So
            // does chitti (symlinks too, which git would not enter: stricter).
            let sub_work = match canonicalize(&work_dir.join(std::ffi::OsStr::from_bytes(link))) {
                Ok(sub_work) => sub_work,
                // Nothing there: git finds nothing to enter either.
                Err(e) if nothing_there(&e) => return,
                // Anything else (a path over PATH_MAX, which git may still reach by
                // relative steps) is not checked: the call fails.
                Err(e) => {
                    problems.push(format!(
                        "nested repository {} under {} not checked: {e}",
                        String::from_utf8_lossy(link),
                        work_dir.display()
                    ));
                    return;
                }
            };
            let sub_git = match git_dir_of(&sub_work) {
                Ok(Some(dir)) => dir,
                Ok(None) => {
                    // No repository checked out there: `git submodule update` takes up a
                    // git directory under the parent's `modules` and checks the recorded
                    // commit out into this folder. Where the folder holds something already
                    // (a repository planted there waits for a gitlink to name it: a review
                    // removed the submodule's `.git` and staged such a commit), that
                    // commit's gitlinks are followed from every such git directory.
                    let holds_something = std::fs::read_dir(&sub_work)
                        .is_ok_and(|mut entries| entries.next().is_some());
                    if !id.is_empty() && self.inside_roots(&sub_work) && holds_something {
                        let common = common_dir(parent_git)
                            .and_then(|dir| canonicalize(&dir).ok())
                            .unwrap_or_else(|| parent_git.to_path_buf());
                        // Walked afresh (the check's own walk may have passed these),
                        // nested modules included; what cannot be listed is said there.
                        let mut walked = Walked::default();
                        let mut modules = Vec::new();
                        let mut from = vec![parent_git.to_path_buf(), common];
                        while let Some(dir) = from.pop() {
                            let more = module_git_dirs(&dir, &mut walked, &mut Vec::new());
                            from.extend(more.iter().cloned());
                            modules.extend(more);
                        }
                        for module in modules {
                            if !seen.commits.insert((module.clone(), id.to_string())) {
                                continue;
                            }
                            self.follow_commit(
                                &sub_work, &module, id, depth, seen, found, problems,
                            );
                        }
                    }
                    return;
                }
                Err(e) => {
                    problems.push(format!("nested repository not checked: {e}"));
                    return;
                }
            };
            if enclosing && !self.inside_roots(&sub_work) && !self.inside_roots(&sub_git) {
                return;
            }
            // Outside every writable root chitti moves nothing, but the sandbox of a call
            // running beside this one may write there (its private TMPDIR): judged by what
            // it holds, and the call fails where that could run a program.
            // A git directory inside the roots is judged (and moved aside) here, wherever
            // its work tree is (a worktree's submodule outside the roots, say).
            if !self.inside_roots(&sub_git) {
                let dot_git = sub_work.join(".git");
                if self.inside_roots(&sub_work) && self.changed(&dot_git) {
                    // Made or changed by this call, a `.git` leading outside the roots is
                    // the sandbox's doing, and what it leads to may be written later by
                    // calls elsewhere (another workspace's): however harmless it is now.
                    problems.push(format!(
                        "nested repository {}: its .git, made or changed during the call, \
                         leads outside the writable roots to {}, which calls in other \
                         workspaces may write",
                        sub_work.display(),
                        sub_git.display()
                    ));
                } else if seen.judged.insert(sub_git.clone()) {
                    if let Some(why) = could_run_code(&sub_git, Some(&sub_work)) {
                        problems.push(format!(
                            "nested repository {}: its git directory {} lies outside the \
                             writable roots, where chitti moves nothing, and {why}",
                            sub_work.display(),
                            sub_git.display()
                        ));
                    }
                }
            } else if seen.judged.insert(sub_git.clone()) {
                found.push(Found {
                    label: format!("nested repository {}", sub_work.display()),
                    dot_git: Some(sub_work.join(".git")),
                    work_tree: Some(sub_work.clone()),
                    git_dir: sub_git.clone(),
                    kind: Kind::Gitlink,
                });
            }
            // Git reads this git directory's index from this work tree, whichever other
            // work tree (the top's, another gitlink's) or place outside the roots it also
            // serves: its gitlinks are followed from here too.
            self.gitlinks_of(&sub_work, &sub_git, depth + 1, false, seen, found, problems);
            // `git submodule update` checks out the commit this gitlink records, not the
            // one checked out there: where they differ, the gitlinks of that commit's tree
            // are where git goes next (a review staged a commit whose tree named a
            // repository it had planted in the submodule).
            if !id.is_empty()
                && self.inside_roots(&sub_work)
                && head_commit(&sub_git).as_deref() != Some(id)
                && seen.commits.insert((sub_git.clone(), id.to_string()))
            {
                self.follow_commit(&sub_work, &sub_git, id, depth, seen, found, problems);
            }
        }
    }

    /// Follows the gitlinks of the tree of `commit` in `git_dir` (the submodule at
    /// `work_dir`, at `depth`), as `git submodule update` would check them out; a listing
    /// git did not finish is a problem.
    #[allow(clippy::too_many_arguments)]
    fn follow_commit(
        &self,
        work_dir: &Path,
        git_dir: &Path,
        commit: &str,
        depth: usize,
        seen: &mut Walked,
        found: &mut Vec<Found>,
        problems: &mut Vec<String>,
    ) {
        let listed = gitlinks_in_commit(git_dir, commit).unwrap_or_else(|e| {
            problems.push(format!("nested repositories not checked: {e}"));
            Vec::new()
        });
        for (inner, inner_id) in listed {
            self.follow_gitlink(
                work_dir,
                git_dir,
                &inner,
                &inner_id,
                depth + 1,
                false,
                seen,
                found,
                problems,
            );
        }
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
        if ctime < self.since {
            return false;
        }
        match self.recent.get(path) {
            Some(then) => small_file(path).as_ref() != Some(then),
            None => true,
        }
    }

    /// Whether the git directory, one of its risky names or a hook now leads to another
    /// inode than before the call (or to one where there was none).
    fn replaced(&self, git_dir: &Path) -> bool {
        risky_names(git_dir)
            .iter()
            .chain([&git_dir.to_path_buf()])
            .any(|path| self.inodes.get(path).copied().flatten() != inode(path))
    }

    fn check(&self) -> Vec<String> {
        let mut repairs = Vec::new();
        let mut problems = Vec::new();
        // Moving a repository's config or commondir aside changes how git then reads its
        // index (the object ids' length, the repository it names): look again, as git
        // will find things, until a look moves nothing.
        let mut settled = false;
        for _ in 0..16 {
            problems.clear();
            let found = self.discover(&mut problems);
            if !self.quarantine(found, &mut repairs, &mut problems) {
                settled = true;
                break;
            }
        }
        if !settled {
            problems
                .push("nested repositories still had things to move aside after 16 looks".into());
        }
        // A repository not checked may hold anything: said as a failed repair (the call
        // fails), not as a note.
        repairs.extend(problems.into_iter().map(super::unrepaired));
        repairs
    }

    /// Moves aside what could run code in each repository of `found` that the call staged
    /// or changed, or that holds such things; whether anything was moved. A repository
    /// outside the writable roots is left as it is, and said in `problems` instead.
    fn quarantine(
        &self,
        found: Vec<Found>,
        repairs: &mut Vec<String>,
        problems: &mut Vec<String>,
    ) -> bool {
        let mut moved = false;
        for repo in found {
            let is_new = !self.before.contains(&repo.git_dir);
            let touched = repo.dot_git.as_deref().is_some_and(|d| self.changed(d))
                || RISKY.iter().any(|r| self.changed(&repo.git_dir.join(r)))
                || hooks_changed(self, &repo.git_dir.join("hooks"))
                || self.replaced(&repo.git_dir);
            // A new worktree is the sandbox's own, like any repository it creates; a new
            // gitlink is not, because the host's `git status` walks into it. Nor is an old
            // one: an earlier call, or one running beside this, may have made or changed
            // it, so what it holds is judged as well.
            let why = match repo.kind {
                Kind::Gitlink if is_new => Some("staged during the call".to_string()),
                Kind::Module if is_new => Some("made during the call".to_string()),
                Kind::Gitlink | Kind::Module if touched => {
                    Some("changed during the call".to_string())
                }
                Kind::Gitlink | Kind::Module => {
                    could_run_code(&repo.git_dir, repo.work_tree.as_deref())
                }
                Kind::Worktree if !is_new && touched => Some("changed during the call".into()),
                Kind::Worktree => None,
                // One the call made is judged like a gitlink's; so is, whatever its age, one
                // in the writable roots that the policy does not protect (a root that is
                // itself the git directory, or an older git directory a `.git` file made
                // during the call leads to: an embedded repository of the monorepo holding
                // the root, say). The top repository's is protected (its config, or a
                // linked worktree's commondir). One outside the roots is the sandbox's to
                // write no more than the user's other repositories are: only a `.git` made
                // or changed during the call that leads there fails the call.
                Kind::Root => self.judge_root_repository(&repo, is_new),
            };
            let Some(why) = why else {
                continue;
            };
            // Nothing outside the writable roots is the sandbox's, nor chitti's to move (a
            // `.git` symlink made during the call could name any repository of the user's):
            // what could run code there fails the call instead.
            if !self.inside_roots(&repo.git_dir) {
                problems.push(format!(
                    "{}: its git directory {} lies outside the writable roots, where chitti \
                     moves nothing, and {why}",
                    repo.label,
                    repo.git_dir.display()
                ));
                continue;
            }
            for name in RISKY {
                let path = repo.git_dir.join(name);
                if std::fs::symlink_metadata(&path).is_err() {
                    continue;
                }
                let aside = repo
                    .git_dir
                    .join(format!("{name}.chitti-quarantine-{}", super::unguessable()));
                match rename_nofollow(&path, &aside) {
                    Ok(()) => {
                        moved = true;
                        repairs.push(format!(
                            "{}: moved {} aside to {} ({why})",
                            repo.label,
                            path.display(),
                            aside.display(),
                        ))
                    }
                    Err(e) => repairs.push(super::unrepaired(format_args!(
                        "{}: could not move {} aside ({why}): {e}; do not run git there",
                        repo.label,
                        path.display(),
                    ))),
                }
            }
        }
        moved
    }
}

/// Why a gitlink's git directory could make the host's git run a program: a config
/// setting not known to run nothing, a hook, or a `commondir` (which hands git another
/// repository's config and hooks). `None` when it holds none of these. `work_tree`: the
/// one the check read the repository's index paths from (none for a bare repository).
fn could_run_code(git_dir: &Path, work_tree: Option<&Path>) -> Option<String> {
    // A submodule's config names its work tree; anywhere else it would make git work on
    // (and run the filters and hooks of) another tree, and enter gitlinks the check, which
    // read the index paths from the work tree it knows, never looked at.
    let own_work_tree = |value: &str| {
        work_tree.is_some_and(|work_tree| {
            canonicalize(&git_dir.join(value))
                .is_ok_and(|dir| canonicalize(work_tree).is_ok_and(|own| own == dir))
        })
    };
    for name in ["config", "config.worktree"] {
        let path = git_dir.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let text = small_file(&path).map(|(_, text)| text);
        let why = match text {
            _ if !meta.is_file() => Some("it is not a regular file".to_string()),
            None => Some("it cannot be read whole (over 1 MiB, or unreadable)".to_string()),
            Some(text) => super::git_config::runs_code(&text, own_work_tree),
        };
        if let Some(why) = why {
            return Some(format!("its {name} could run a program on the host: {why}"));
        }
    }
    if std::fs::symlink_metadata(git_dir.join("commondir")).is_ok() {
        return Some("it has a commondir, which hands git another repository's config".into());
    }
    let hooks = git_dir.join("hooks");
    match std::fs::symlink_metadata(&hooks) {
        Err(_) => None,
        Ok(meta) if !meta.is_dir() => Some("its hooks is not a directory".into()),
        Ok(_) => std::fs::read_dir(&hooks)
            .map_err(|e| format!("its hooks cannot be listed: {e}"))
            .and_then(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name())
                    .find(|name| !name.to_string_lossy().ends_with(".sample"))
                    .map_or(Ok(()), |name| {
                        Err(format!("it has a hook, hooks/{}", name.to_string_lossy()))
                    })
            })
            .err(),
    }
}

/// Renames `from` to `to` in the same directory, not through a symlink on the way: the
/// directory was found canonical, but another call's sandbox may be changing the tree.
#[cfg(target_os = "linux")]
fn rename_nofollow(from: &Path, to: &Path) -> std::io::Result<()> {
    let name = to.file_name().unwrap_or_default();
    super::nofollow::Entry::locate(from)?.rename_within(name)
}

#[cfg(not(target_os = "linux"))]
fn rename_nofollow(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to)
}

/// What the walk through the gitlinks has met.
#[derive(Default)]
struct Walked {
    /// Git directories judged already (or protected by the policy: the tops').
    judged: HashSet<PathBuf>,
    /// Git directories and the work tree their index was read from. Git reads an index's
    /// paths from whichever work tree uses the git directory (a gitlink's `.git` may name
    /// the top's git directory, another gitlink's, or one outside the roots), so a git
    /// directory serving two work trees is followed from each.
    followed: HashSet<(PathBuf, PathBuf)>,
    /// Git directories whose `modules` were walked, and the directories walked there.
    modules_walked: HashSet<PathBuf>,
    /// Entries looked at under `modules` directories, against [`MAX_FOLLOWED`].
    module_entries: usize,
    /// Repositories and recorded commits whose trees' gitlinks were followed.
    commits: HashSet<(PathBuf, String)>,
}

/// A writable root's own repository.
struct TopRepository {
    git_dir: PathBuf,
    common_dir: PathBuf,
}

/// The repository whose work tree is `root` (a `.git` directory, or a linked worktree's
/// `.git` file), canonical.
fn top_repository(root: &Path) -> Option<TopRepository> {
    let git_dir = git_dir_of(root).ok()??;
    let common_dir = common_dir(&git_dir)
        .and_then(|dir| canonicalize(&dir).ok())
        .unwrap_or_else(|| git_dir.clone());
    Some(TopRepository {
        git_dir,
        common_dir,
    })
}

/// The repository a directory lies in below its top, as git finds it from there: at each
/// directory above, a valid `.git`, else the directory itself if it is a git directory.
fn enclosing_repository(root: &Path) -> Option<(PathBuf, PathBuf)> {
    root.ancestors().skip(1).find_map(|dir| {
        let git_dir = match git_dir_of(dir) {
            Ok(Some(git_dir)) => git_dir,
            _ if is_git_dir(dir) => dir.to_path_buf(),
            _ => return None,
        };
        Some((dir.to_path_buf(), git_dir))
    })
}

/// What git may take for the repository at a writable root itself.
struct RootRepositories {
    /// Its `.git`, and the root as a bare repository where git may pass that `.git` over.
    git_dirs: Vec<PathBuf>,
    /// Whether git may pass both over and look in the directories above the root.
    may_go_above: bool,
    /// Why the root's `.git` could not be read as git reads it, if it could not.
    unreadable: Option<String>,
    /// Nothing is at the root's `.git`.
    no_dot_git: bool,
}

/// The git directories git may take at `root`, in the order it tries them: the `.git`
/// there, else the root itself as a bare repository, else the directories above. A `.git`
/// file stops git (it uses or refuses what the file names); a `.git` directory stops it
/// only if git's own test passes, which is stricter than [`is_git_dir`] and which the
/// sandbox can make fail (a `HEAD` git cannot read as a reference, `refs` it may not
/// search), handing the workspace to whatever git tries next. So where chitti cannot be
/// sure that git stops at one ([`git_stops_at`]), the next is taken too.
fn root_repositories(root: &Path) -> RootRepositories {
    let dot_git = root.join(".git");
    let mut git_dirs = Vec::new();
    // Most roots hold neither a `.git` nor a `HEAD`: each looked at once (this runs before
    // and after every call).
    let no_dot_git = absent(&dot_git);
    let own = if no_dot_git {
        Ok(None)
    } else {
        git_dir_of(root)
    };
    if let Ok(Some(git_dir)) = &own {
        git_dirs.push(git_dir.clone());
    }
    let unreadable = own.as_ref().err().cloned();
    let is_gitfile = !no_dot_git && std::fs::metadata(&dot_git).is_ok_and(|m| m.is_file());
    let stops_at_dot_git = !no_dot_git && (is_gitfile || git_stops_at(&dot_git));
    let no_head = absent(&root.join("HEAD"));
    if (!matches!(own, Ok(Some(_))) || !stops_at_dot_git) && !no_head && is_git_dir(root) {
        git_dirs.push(root.to_path_buf());
    }
    RootRepositories {
        git_dirs,
        may_go_above: !stops_at_dot_git && (no_head || !git_stops_at(root)),
        unreadable,
        no_dot_git,
    }
}

/// Whether nothing at all is at `path` (not even a dangling symlink).
fn absent(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether a path failed to resolve because nothing is there (or a file stands where a
/// directory would be): git, which looks the same way, finds nothing either.
fn nothing_there(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// Whether git surely takes `dir` for a git directory, so that its search for a
/// repository stops there (its `is_git_directory`): a `HEAD` that is a symlink into
/// `refs/`, or a regular file that begins `ref:` and names a ref under `refs/` or begins
/// with an object id; and `objects` and `refs` that are directories the caller may search
/// (`access`, as git asks it: the supervisor runs as the user whose git will look), there
/// or in the directory `commondir` names. Narrower than git's test where they differ (a
/// `HEAD` that is a FIFO, `objects` a searchable file): being unsure only judges more.
fn git_stops_at(dir: &Path) -> bool {
    let head = dir.join("HEAD");
    let Ok(meta) = std::fs::symlink_metadata(&head) else {
        return false;
    };
    let head_ok = if meta.file_type().is_symlink() {
        std::fs::read_link(&head).is_ok_and(|to| to.as_os_str().as_bytes().starts_with(b"refs/"))
    } else if meta.is_file() {
        read_head_start(&head).is_some_and(|text| head_names_a_ref_or_object(&text))
    } else {
        false
    };
    if !head_ok {
        return false;
    }
    let Some(common) = common_dir(dir) else {
        return false;
    };
    ["objects", "refs"].iter().all(|name| {
        let path = common.join(name);
        std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) && may_search(&path)
    })
}

/// The first 255 bytes of a `HEAD`, as much as git reads of it.
fn read_head_start(head: &Path) -> Option<Vec<u8>> {
    match read_at_most(head, 255).ok()? {
        Bounded::Whole(text) | Bounded::Start(text) => Some(text),
    }
}

/// Git's `validate_headref` on a `HEAD` file's first bytes: `ref:`, blanks, then `refs/`;
/// or an object id in hex (SHA-1 or SHA-256 length) at the start.
fn head_names_a_ref_or_object(text: &[u8]) -> bool {
    if let Some(rest) = text.strip_prefix(b"ref:") {
        let start = rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .unwrap_or(rest.len());
        return rest[start..].starts_with(b"refs/");
    }
    [40, 64]
        .iter()
        .any(|&len| text.len() >= len && text[..len].iter().all(u8::is_ascii_hexdigit))
}

/// Whether this process may search `dir` (`access(X_OK)`, by its real user, as git asks).
fn may_search(dir: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    unsafe { libc::access(path.as_ptr(), libc::X_OK) == 0 }
}

/// The directory holding a git directory's `objects`, `refs` and shared config: the one
/// its `commondir` names, else the git directory itself. Read as git reads it: the line
/// ends at the end of the whole file taken off, then the rest up to a NUL, relative to the
/// git directory (`c\n\0` names `c\n`). `None` where git could not use it either: a
/// `commondir` it cannot read, or one naming a path longer than any git could resolve.
fn common_dir(dir: &Path) -> Option<PathBuf> {
    let text = match read_at_most(&dir.join("commondir"), COMMONDIR_MAX) {
        Ok(Bounded::Whole(text)) => text,
        // A NUL in what was read ends the path wherever the file ends.
        Ok(Bounded::Start(start)) if start.contains(&0) => start,
        Ok(Bounded::Start(_)) => return None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(dir.to_path_buf()),
        Err(_) => return None,
    };
    let mut path = &text[..];
    while let Some(rest) = path
        .strip_suffix(b"\n")
        .or_else(|| path.strip_suffix(b"\r"))
    {
        path = rest;
    }
    let path = path.split(|b| *b == 0).next().unwrap_or_default();
    Some(dir.join(std::ffi::OsStr::from_bytes(path)))
}

/// Longer than any path the kernel resolves: a `commondir` this long names nothing.
const COMMONDIR_MAX: u64 = 64 * 1024;

/// The work tree of a repository whose common directory is `common_dir`: the directory
/// holding it when it is a `.git` (a bare one has none).
fn main_work_tree(common_dir: &Path) -> Option<PathBuf> {
    (common_dir.file_name()? == ".git").then(|| common_dir.parent().map(Path::to_path_buf))?
}

/// The work tree of the linked worktree whose git directory is `admin_dir`, as its
/// `gitdir` names it (the worktree's `.git` file).
fn linked_work_tree(admin_dir: &Path) -> Option<PathBuf> {
    let (_, text) = small_file(&admin_dir.join("gitdir"))?;
    let text = text.strip_suffix(b"\n").unwrap_or(&text);
    let dot_git = admin_dir.join(std::ffi::OsStr::from_bytes(text));
    canonicalize(dot_git.parent()?).ok()
}

/// The work tree a submodule git directory's `core.worktree` names, when it lies within
/// its repository's work tree (where the submodules are): the one its config may name.
fn module_work_tree(git_dir: &Path, repository_work_tree: Option<&Path>) -> Option<PathBuf> {
    let (_, text) = small_file(&git_dir.join("config"))?;
    let Some(Some(value)) = super::git_config::value(&text, "core", "worktree") else {
        return None;
    };
    let named = canonicalize(&git_dir.join(value)).ok()?;
    (named.starts_with(repository_work_tree?)).then_some(named)
}

/// Whether git could take `dir` for a git directory (its `is_git_directory`): a `HEAD`, and
/// `objects` and `refs` there or in the directory its `commondir` names. Wider than git's
/// test where they differ (any `objects` and `refs`, where git asks only that each be
/// searchable or executable): taking too much for a repository only judges more.
fn is_git_dir(dir: &Path) -> bool {
    // Only "nothing there" says no: anything chitti cannot look at here (a `commondir`
    // too long to resolve in one step, which git resolves one name at a time) counts as a
    // git directory, to be judged (a review hid a repository behind one).
    let there = |path: &Path| match std::fs::metadata(path) {
        Ok(_) => true,
        Err(e) => !nothing_there(&e),
    };
    match std::fs::symlink_metadata(dir.join("HEAD")) {
        Ok(_) => {}
        Err(e) if nothing_there(&e) => return false,
        Err(_) => return true,
    }
    let Some(common) = common_dir(dir) else {
        return true;
    };
    there(&common.join("objects")) && there(&common.join("refs"))
}

/// The mode and contents of a regular file of at most 1 MiB.
fn small_file(path: &Path) -> Option<(u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 1024 * 1024 {
        return None;
    }
    // Read as what is there now: it may have been replaced by a FIFO since.
    let mode = meta.permissions().mode();
    match read_at_most(path, 1024 * 1024).ok()? {
        Bounded::Whole(text) => Some((mode, text)),
        Bounded::Start(_) => None,
    }
}

fn hooks_changed(guard: &NestedRepoGuard, hooks: &Path) -> bool {
    std::fs::read_dir(hooks)
        .map(|entries| entries.flatten().any(|e| guard.changed(&e.path())))
        .unwrap_or(false)
}

/// The gitlinks of a repository's index as git sees them, each with the commit it records
/// (lowercase hex): read here where the index is plain, else (or where its object ids'
/// length is not known, or it does not parse here) listed by git itself.
fn read_gitlinks(git_dir: &Path, work_dir: &Path) -> Result<Vec<Gitlink>, String> {
    let index = git_dir.join("index");
    // Neither read here nor handed to git (which would wait on a FIFO until killed).
    if std::fs::metadata(&index).is_ok_and(|m| !m.is_file()) {
        return Err(format!("{}: not a regular file", index.display()));
    }
    let Some(id_len) = object_id_len(git_dir)? else {
        return gitlinks_by_git(git_dir, work_dir);
    };
    match read_index(&index, id_len) {
        Ok(None) => Ok(Vec::new()),
        Ok(Some(parsed)) if !parsed.needs_git => {
            Ok(parsed.paths.into_iter().zip(parsed.ids).collect())
        }
        _ => gitlinks_by_git(git_dir, work_dir),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The commit a repository's `HEAD` names (lowercase hex), read as git reads loose and
/// packed refs; `None` wherever chitti might read it otherwise than git (a ref that is a
/// symlink or not a small regular file, a ref in two places, a name twice in
/// `packed-refs`, another ref store), so that the caller looks at the commit anyway (a
/// review had chitti read a `packed-refs` line where git followed a symlinked loose ref).
fn head_commit(git_dir: &Path) -> Option<String> {
    let common = common_dir(git_dir).unwrap_or_else(|| git_dir.to_path_buf());
    let plain = |path: &Path| -> Result<Option<Vec<u8>>, ()> {
        match std::fs::symlink_metadata(path) {
            Err(e) if nothing_there(&e) => Ok(None),
            Ok(meta) if meta.is_file() && meta.len() <= 4096 => {
                small_file(path).map(|(_, text)| Some(text)).ok_or(())
            }
            _ => Err(()),
        }
    };
    let mut text = plain(&git_dir.join("HEAD")).ok()??;
    for _ in 0..5 {
        let line = std::str::from_utf8(&text).ok()?.strip_suffix('\n')?;
        let Some(name) = line.strip_prefix("ref: ") else {
            let id = line.to_ascii_lowercase();
            let hex = matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit());
            return hex.then_some(id);
        };
        if name
            .split('/')
            .any(|part| part.is_empty() || part.starts_with('.'))
            || !name.starts_with("refs/")
        {
            return None;
        }
        let in_common = plain(&common.join(name)).ok()?;
        let in_own = if common == git_dir {
            None
        } else {
            plain(&git_dir.join(name)).ok()?
        };
        text = match (in_common, in_own) {
            (Some(_), Some(_)) => return None,
            (Some(loose), None) | (None, Some(loose)) => loose,
            (None, None) => {
                let packed = plain(&common.join("packed-refs")).ok()??;
                let packed = String::from_utf8(packed).ok()?;
                let mut ids = packed.lines().filter_map(|l| {
                    let (id, refname) = l.split_once(' ')?;
                    (refname == name).then(|| format!("{id}\n"))
                });
                let id = ids.next()?;
                if ids.next().is_some() {
                    return None;
                }
                id.into_bytes()
            }
        };
    }
    None
}

/// The git directories under `git_dir`'s `modules`, canonical (at any depth: a name may
/// hold slashes, and a directory that is no git directory is part of one; through
/// symlinks, as git goes), each directory walked once per check and at most
/// [`MAX_FOLLOWED`] entries looked at per check. Their own `modules` are the caller's to
/// walk. What cannot be listed, or is past the bound, is said in `problems`.
fn module_git_dirs(git_dir: &Path, seen: &mut Walked, problems: &mut Vec<String>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if !seen.modules_walked.insert(git_dir.to_path_buf()) {
        return found;
    }
    let mut dirs = vec![git_dir.join("modules")];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if nothing_there(&e) => continue,
            Err(e) => {
                problems.push(format!(
                    "submodule git directories in {} not checked: {e}",
                    dir.display()
                ));
                continue;
            }
        };
        for entry in entries.flatten() {
            seen.module_entries += 1;
            if seen.module_entries > MAX_FOLLOWED {
                if seen.module_entries == MAX_FOLLOWED + 1 {
                    problems.push(format!(
                        "more than {MAX_FOLLOWED} entries in submodule git directories' \
                         names: the rest not checked"
                    ));
                }
                return found;
            }
            let Ok(path) = canonicalize(&entry.path()) else {
                continue;
            };
            if !path.is_dir() {
                continue;
            }
            if is_git_dir(&path) {
                found.push(path);
            } else if seen.modules_walked.insert(path.clone()) {
                dirs.push(path);
            }
        }
    }
    found
}

/// The gitlinks of the tree of `commit` in the repository `git_dir` (paths, with the
/// commits they record), as git lists them (`git ls-tree`, run as for `ls-files`, see
/// [`gitlinks_by_git`]); nothing where git cannot (the commit is not there: `git submodule
/// update` then fetches it from the remote the protected config names). An error where
/// git could not be run, did not finish in time or was killed.
fn gitlinks_in_commit(git_dir: &Path, commit: &str) -> Result<Vec<Gitlink>, String> {
    match which::which("git") {
        Ok(git) => gitlinks_in_commit_by(&git, git_dir, commit),
        Err(_) => Ok(Vec::new()),
    }
}

/// [`gitlinks_in_commit`], listed by the git at `git`.
fn gitlinks_in_commit_by(git: &Path, git_dir: &Path, commit: &str) -> Result<Vec<Gitlink>, String> {
    let out = run_git(locked_down_git(git, git_dir, None).args([
        "ls-tree",
        "-r",
        "-z",
        "--full-tree",
        commit,
    ]));
    let listing = |why: String| format!("listing a commit of {}: {why}", git_dir.display());
    let out = out.map_err(|e| listing(e.to_string()))?;
    // Killed (the machine's memory, chitti's help to a slow supervisor): nothing was
    // listed, which is not a commit without gitlinks.
    if out.status.code().is_none() {
        return Err(listing(format!("git ended with {}", out.status)));
    }
    // A commit git cannot list (not in the repository) is one it cannot check out either.
    if !out.status.success() {
        return Ok(Vec::new());
    }
    // `MODE TYPE OBJECT<TAB>PATH`, each ended by a NUL.
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|record| {
            let tab = record.iter().position(|b| *b == b'\t')?;
            let mut fields = record[..tab].split(|b| *b == b' ');
            let mode = u32::from_str_radix(std::str::from_utf8(fields.next()?).ok()?, 8).ok()?;
            let id = std::str::from_utf8(fields.nth(1)?)
                .ok()?
                .to_ascii_lowercase();
            (mode & 0o170000 == 0o160000).then(|| (record[tab + 1..].to_vec(), id))
        })
        .collect())
}

/// The length of the repository's object ids (`extensions.objectFormat`, in the config of
/// its common directory); `None` where its config cannot be read here (git then lists
/// the gitlinks); `Err` for a config too large to hand even to git (the sandbox can make
/// one gigabytes long): the call fails, unless the check moves it aside first.
fn object_id_len(git_dir: &Path) -> Result<Option<usize>, String> {
    let Some(common) = common_dir(git_dir) else {
        return Ok(None);
    };
    let config = common.join("config");
    let text = match read_at_most(&config, CONFIG_MAX) {
        Ok(Bounded::Whole(text)) => text,
        Ok(Bounded::Start(_)) => {
            return Err(format!(
                "{} is over {CONFIG_MAX} bytes: its gitlinks not read",
                config.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(20)),
        Err(_) => return Ok(None),
    };
    Ok(
        match super::git_config::value(&text, "extensions", "objectformat") {
            None => None,
            Some(None) => Some(20),
            Some(Some(format)) if format.eq_ignore_ascii_case("sha1") => Some(20),
            Some(Some(format)) if format.eq_ignore_ascii_case("sha256") => Some(32),
            Some(Some(_)) => None,
        },
    )
}

/// The largest config the check reads (as [`could_run_code`] judges one larger unreadable).
const CONFIG_MAX: u64 = 1024 * 1024;

/// The gitlinks git itself lists (`git ls-files --stage`), run so that the repository,
/// which the sandbox may have written, can make it run nothing: no system or global
/// config, no fsmonitor, no hooks, no transport (a lazy fetch of missing objects would
/// start one), in a bare environment.
fn gitlinks_by_git(git_dir: &Path, work_dir: &Path) -> Result<Vec<Gitlink>, String> {
    // A split index's shared part, which git reads too: a FIFO there would hold it until
    // it is killed.
    if let Ok(entries) = std::fs::read_dir(git_dir) {
        for entry in entries.flatten() {
            let shared = entry.path();
            if entry.file_name().as_bytes().starts_with(b"sharedindex.")
                && std::fs::metadata(&shared).is_ok_and(|m| !m.is_file())
            {
                return Err(format!("{}: not a regular file", shared.display()));
            }
        }
    }
    // Read with one thread and with several: with several git takes entries and extensions
    // from where an `EOIE`/`IEOT` says (as the host's git may, per its own config).
    let mut all = gitlinks_by_git_with(git_dir, work_dir, "index.threads=1")?;
    for link in gitlinks_by_git_with(git_dir, work_dir, "index.threads=8")? {
        if !all.contains(&link) {
            all.push(link);
        }
    }
    Ok(all)
}

/// How long a git run of the checks may take before it is killed.
const GIT_PATIENCE: Duration = Duration::from_secs(15);

/// When the checks of this process must be over, if they have a deadline (see
/// [`end_checks_by`]).
static CHECKS_DEADLINE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Gives the checks of this process (a landlock call's supervisor) a deadline: a git run
/// is cut there, and none starts after it (each is then a check not done). A repository
/// can make every git run of the checks last until it is cut, and a supervisor whose
/// chitti is gone (killed, or a server that exited) has no one else to stop it.
pub fn end_checks_by(deadline: std::time::Instant) {
    let _ = CHECKS_DEADLINE.set(deadline);
}

/// Runs a git command of the checks to its end, or kills it after [`GIT_PATIENCE`]
/// (TimedOut): git reads what the command left in the repository, and a FIFO there (a
/// split index's `sharedindex.*`, an object) would hold git, and chitti waiting for it,
/// for good (a review froze a session's server so).
pub(crate) fn run_git(
    command: &mut std::process::Command,
) -> std::io::Result<std::process::Output> {
    use std::io::Read;
    use std::process::Stdio;
    // git must not outlive the checks: chitti kills a supervisor whose checks outlast its
    // patience, and nothing would then be left to stop its git.
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = unsafe { libc::getpid() };
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // Gone already, before the line above could count.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    if CHECKS_DEADLINE
        .get()
        .is_some_and(|end| std::time::Instant::now() >= *end)
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the checks' deadline passed before git could run",
        ));
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let mut deadline = std::time::Instant::now() + GIT_PATIENCE;
    if let Some(checks_end) = CHECKS_DEADLINE.get() {
        deadline = deadline.min(*checks_end);
    }
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "git did not finish within {} s, or before the checks' deadline",
                    GIT_PATIENCE.as_secs()
                ),
            ));
        }
        wait_for_exit(&child, left);
    };
    Ok(std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Waits until `child` exits, or `limit` has passed (or a little while, without pidfds).
fn wait_for_exit(child: &std::process::Child, limit: Duration) {
    #[cfg(target_os = "linux")]
    if let Ok(pidfd) = super::linux::vfork::open_pidfd(child.id() as libc::pid_t) {
        super::linux::vfork::wait_readable(&pidfd, limit);
        return;
    }
    let _ = child;
    std::thread::sleep(limit.min(Duration::from_millis(5)));
}

/// git, run so that the repository, which the sandbox may have written, can make it run
/// nothing (see [`gitlinks_by_git`]).
fn locked_down_git(git: &Path, git_dir: &Path, settings: Option<&str>) -> std::process::Command {
    let mut command = std::process::Command::new(git);
    command
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(["-c", "protocol.allow=never", "-c", "safe.directory=*"])
        .args(settings.into_iter().flat_map(|s| ["-c", s]))
        .arg("--git-dir")
        .arg(git_dir)
        .stdin(std::process::Stdio::null());
    command
}

fn gitlinks_by_git_with(
    git_dir: &Path,
    work_dir: &Path,
    threads: &str,
) -> Result<Vec<Gitlink>, String> {
    let failed = |why: String| {
        format!(
            "git could not list the gitlinks of {}: {why}",
            git_dir.display()
        )
    };
    let git = which::which("git").map_err(|e| failed(e.to_string()))?;
    let out = run_git(
        locked_down_git(&git, git_dir, Some(threads))
            .arg("--work-tree")
            .arg(work_dir)
            .args(["ls-files", "--stage", "-z"]),
    )
    .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    // `MODE OBJECT STAGE<TAB>PATH`, each ended by a NUL.
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|record| {
            let tab = record.iter().position(|b| *b == b'\t')?;
            let mut fields = record[..tab].split(|b| *b == b' ');
            let mode = u32::from_str_radix(std::str::from_utf8(fields.next()?).ok()?, 8).ok()?;
            let id = std::str::from_utf8(fields.next()?)
                .ok()?
                .to_ascii_lowercase();
            (mode & 0o170000 == 0o160000).then(|| (record[tab + 1..].to_vec(), id))
        })
        .collect())
}

fn read_index(index: &Path, id_len: usize) -> Result<Option<IndexGitlinks>, String> {
    let file = match crate::bounded_read::open_regular(index) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", index.display())),
    };
    let len = file
        .metadata()
        .map_err(|e| format!("{}: {e}", index.display()))?
        .len();
    parse_index(file, len, id_len)
        .map(Some)
        .map_err(|e| format!("{}: {e}", index.display()))
}

/// The git directory of a work tree, canonical, found as git finds it: `.git` followed if a
/// symlink; a directory is the git directory, a file must begin `gitdir: `, and the rest of
/// it, less its line ends only, is the path (from the work tree when relative). `Ok(None)`
/// where git finds no repository either; `Err` for a `.git` chitti cannot read as git would.
fn git_dir_of(work_dir: &Path) -> Result<Option<PathBuf>, String> {
    let dot_git = work_dir.join(".git");
    let cannot = |why: String| Err(format!("{}: {why}", dot_git.display()));
    let meta = match std::fs::metadata(&dot_git) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return cannot(e.to_string()),
    };
    let dir = if meta.is_dir() {
        dot_git.clone()
    } else if meta.is_file() {
        if meta.len() > 1 << 20 {
            return cannot("it is over 1 MiB".into());
        }
        // Through a symlink, as git reads it.
        let text = match read_at_most(&dot_git, 1 << 20) {
            Ok(Bounded::Whole(text)) => text,
            Ok(Bounded::Start(_)) => return cannot("it is over 1 MiB".into()),
            Err(e) => return cannot(e.to_string()),
        };
        let Some(mut path) = text.strip_prefix(b"gitdir: ") else {
            return cannot("it does not begin `gitdir: `".into());
        };
        while let Some(rest) = path
            .strip_suffix(b"\n")
            .or_else(|| path.strip_suffix(b"\r"))
        {
            path = rest;
        }
        // Git refuses a file with no path; else it reads the path as a C string, which ends
        // at a NUL (one right after `gitdir: ` leaves the work tree itself).
        if path.is_empty() {
            return Ok(None);
        }
        let path = path.split(|b| *b == 0).next().unwrap_or_default();
        work_dir.join(std::ffi::OsStr::from_bytes(path))
    } else {
        return Ok(None);
    };
    // Nothing there: git finds no repository either. Anything else (a path too long here,
    // a loop, a file on the way) git may still resolve its own way: not checked, the call
    // fails.
    match canonicalize(&dir) {
        // Only a git directory git would take (an empty `.git` makes git look further up).
        Ok(dir) => Ok((dir.is_dir() && is_git_dir(&dir)).then_some(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => cannot(format!(
            "its git directory {} cannot be resolved: {e}",
            dir.display()
        )),
    }
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

    use crate::test_git as git;

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
            let links = read_gitlinks(&ws.join(".git"), &ws).unwrap();
            let id = head_of(&ws.join("a/b/.git"));
            assert_eq!(links, vec![(b"a/b".to_vec(), id)], "index v{version}");
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

    /// A worktree made just before the call (inside the clock's slack) is not counted as
    /// changed by it, unless its files then change.
    #[test]
    fn a_worktree_made_just_before_the_call_is_left_alone_unless_changed() {
        let (dir, ws) = workspace_repo();
        let base = dir.path().canonicalize().unwrap();
        for name in ["wt", "wt2"] {
            let path = base.join(name);
            git(&ws, &["worktree", "add", "-q", path.to_str().unwrap()]);
        }
        // Rewritten as it is: changed now, within the slack, however long git took.
        let commondir = ws.join(".git/worktrees/wt/commondir");
        std::fs::write(&commondir, std::fs::read(&commondir).unwrap()).unwrap();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        std::fs::write(ws.join(".git/worktrees/wt2/commondir"), "../../../x/.git\n").unwrap();
        let repairs = Box::new(guard).run();
        assert!(
            ws.join(".git/worktrees/wt/commondir").exists(),
            "{repairs:?}"
        );
        assert!(
            !ws.join(".git/worktrees/wt2/commondir").exists(),
            "{repairs:?}"
        );
    }

    /// A git directory made during the call among the worktrees, and a staged gitlink
    /// whose `.git` file leads there: it is the gitlink's, and is moved aside.
    #[test]
    fn a_new_worktree_directory_a_gitlink_leads_to_is_moved_aside() {
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("sub"));
        let nw = ws.join(".git/worktrees/nw");
        std::fs::create_dir_all(&nw).unwrap();
        for name in ["config", "HEAD"] {
            std::fs::copy(ws.join("sub/.git").join(name), nw.join(name)).unwrap();
        }
        // As a worktree's git directory has: its objects and refs are the common ones.
        std::fs::write(nw.join("commondir"), "../..\n").unwrap();
        git(&ws, &["add", "sub"]);
        std::fs::remove_dir_all(ws.join("sub/.git")).unwrap();
        std::fs::write(ws.join("sub/.git"), format!("gitdir: {}\n", nw.display())).unwrap();
        let repairs = Box::new(guard).run();
        assert!(!nw.join("config").exists(), "{repairs:?}");
        assert!(
            repairs.iter().any(|r| r.contains("nested repository")),
            "{repairs:?}"
        );
    }

    /// A git directory prepared by an earlier call (its config written then) and renamed
    /// into a staged gitlink's place during this one: its files keep their old ctimes, but
    /// the name now leads to another directory.
    #[test]
    fn a_git_directory_renamed_into_place_during_the_call_loses_its_config() {
        let (_dir, ws) = workspace_repo();
        let sub = ws.join("sub");
        std::fs::create_dir(&sub).unwrap();
        git(&sub, &["init", "-q", "--separate-git-dir", "../subgd"]);
        git(&sub, &["commit", "-q", "--allow-empty", "-m", "s"]);
        git(&ws, &["add", "sub"]);
        let ok = Command::new("cp")
            .args(["-a", "subgd", "prepared"])
            .current_dir(&ws)
            .status()
            .unwrap();
        assert!(ok.success());
        git(
            &ws,
            &[
                "config",
                "--file",
                "prepared/config",
                "core.fsmonitor",
                "evil",
            ],
        );
        std::fs::write(ws.join("prepared/hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        std::fs::remove_dir_all(ws.join("subgd")).unwrap();
        std::fs::rename(ws.join("prepared"), ws.join("subgd")).unwrap();
        let repairs = Box::new(guard).run();
        assert!(!ws.join("subgd/config").exists(), "{repairs:?}");
        assert!(!ws.join("subgd/hooks").exists(), "{repairs:?}");
        assert!(
            repairs
                .iter()
                .any(|r| r.contains("changed during the call")),
            "{repairs:?}"
        );
    }

    /// A gitlink's repository found unchanged, but whose config or hooks could run a
    /// program, is moved aside all the same: an earlier call, or one beside this one, may
    /// have made it (here a worktree directory made by one call, staged by the next).
    #[test]
    fn an_old_gitlink_that_could_run_code_is_moved_aside_whatever_its_age() {
        let (_dir, ws) = workspace_repo();
        let evil = ws.join(".git/worktrees/evil");
        std::fs::create_dir_all(&evil).unwrap();
        git(&evil, &["init", "-q", "--bare"]);
        git(&evil, &["config", "core.bare", "false"]);
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/.git"), format!("gitdir: {}\n", evil.display())).unwrap();
        git(
            &ws.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "s"],
        );
        git(&evil, &["config", "core.fsmonitor", "touch pwned"]);
        git(&ws, &["add", "sub"]);
        // A hook in another, harmless-looking nested repository.
        evil_repo(&ws.join("other"));
        git(&ws.join("other"), &["config", "--unset", "core.fsmonitor"]);
        std::fs::write(ws.join("other/.git/hooks/post-checkout"), "#!/bin/sh\n").unwrap();
        git(&ws, &["add", "other"]);
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let repairs = Box::new(guard).run();
        assert!(!evil.join("config").exists(), "{repairs:?}");
        assert!(
            repairs.iter().any(|r| r.contains("core.fsmonitor")),
            "{repairs:?}"
        );
        assert!(!ws.join("other/.git/hooks").exists(), "{repairs:?}");
    }

    /// A submodule's repository under `.git/modules` names its work tree in its config
    /// (`core.worktree`, as git writes it): that passes; a work tree elsewhere does not.
    /// (Its protection as one of the top repository's paths is no reason to trust it: an
    /// earlier call may have made it, and protection puts back what it found.)
    #[test]
    fn a_submodule_s_own_work_tree_passes_and_another_does_not() {
        let (dir, ws) = workspace_repo();
        let upstream = dir.path().canonicalize().unwrap().join("upstream");
        evil_repo(&upstream);
        git(&upstream, &["config", "--unset", "core.fsmonitor"]);
        let url = upstream.to_str().unwrap();
        git(
            &ws,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                url,
                "sub",
            ],
        );
        let config = ws.join(".git/modules/sub/config");
        assert!(std::fs::read_to_string(&config)
            .unwrap()
            .contains("worktree"));
        std::thread::sleep(Duration::from_millis(100));
        let repairs = Box::new(NestedRepoGuard::before(std::slice::from_ref(&ws))).run();
        assert!(repairs.is_empty() && config.exists(), "{repairs:?}");
        let module = ws.join(".git/modules/sub");
        git(&module, &["config", "core.worktree", "../../../other"]);
        std::fs::create_dir(ws.join("other")).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let repairs = Box::new(NestedRepoGuard::before(std::slice::from_ref(&ws))).run();
        assert!(!config.exists(), "{repairs:?}");
    }

    /// `.git` is found as git finds it: a `gitdir: ` file's path keeps a trailing space
    /// (only line ends go), and a symlink to such a file is followed.
    #[test]
    fn a_gitfile_is_read_as_git_reads_it() {
        let (_dir, ws) = workspace_repo();
        for (name, spaced) in [("sub", true), ("linked", false)] {
            let work = ws.join(name);
            evil_repo(&work);
            let real = ws.join(format!("{name}gd{}", if spaced { " " } else { "" }));
            std::fs::rename(work.join(".git"), &real).unwrap();
            let gitfile = format!("gitdir: {}\n", real.display());
            if spaced {
                // A decoy where a trimmed path would lead.
                std::fs::create_dir(ws.join("subgd")).unwrap();
                std::fs::write(work.join(".git"), gitfile).unwrap();
            } else {
                std::fs::write(ws.join("linked-gitfile"), gitfile).unwrap();
                std::os::unix::fs::symlink("../linked-gitfile", work.join(".git")).unwrap();
            }
            git(&ws, &["add", name]);
        }
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let repairs = Box::new(guard).run();
        assert!(!ws.join("subgd /config").exists(), "{repairs:?}");
        assert!(!ws.join("linkedgd/config").exists(), "{repairs:?}");
    }

    /// A gitfile's path ends at a NUL, as git reads it; one chitti cannot resolve (too long
    /// once made absolute) fails the call rather than passing unchecked.
    #[test]
    fn a_gitfile_path_is_cut_at_a_nul_and_an_unresolvable_one_fails_the_call() {
        let (_dir, ws) = workspace_repo();
        let work = ws.join("sub");
        evil_repo(&work);
        std::fs::rename(work.join(".git"), ws.join("nulgd")).unwrap();
        std::fs::write(work.join(".git"), b"gitdir: ../nulgd\0junk\n").unwrap();
        stage_gitlink(&ws, "sub", &ws.join("nulgd"));
        std::thread::sleep(Duration::from_millis(100));
        let repairs = Box::new(NestedRepoGuard::before(std::slice::from_ref(&ws))).run();
        assert!(!ws.join("nulgd/config").exists(), "{repairs:?}");
        // Over PATH_MAX once absolute: resolved (glibc's realpath takes it) or the call
        // fails (musl's does not), never passed unchecked.
        let long = format!("gitdir: {}../nulgd\n", "./".repeat(2100));
        std::fs::write(work.join(".git"), long).unwrap();
        std::fs::write(ws.join("nulgd/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let repairs = Box::new(NestedRepoGuard::before(std::slice::from_ref(&ws))).run();
        assert!(
            !ws.join("nulgd/config").exists()
                || repairs
                    .iter()
                    .any(|r| super::super::is_unrepaired(r) && r.contains("resolved")),
            "{repairs:?}"
        );
    }

    /// A gitlink whose git directory lies outside the writable roots (where a call running
    /// beside this one may write: its private TMPDIR) is judged by what it holds, and the
    /// call fails where that could run a program, since nothing there is moved.
    #[test]
    fn a_git_directory_outside_the_roots_that_could_run_code_fails_the_call() {
        let (dir, ws) = workspace_repo();
        let outside = dir.path().canonicalize().unwrap().join("outside");
        evil_repo(&outside);
        std::fs::create_dir(ws.join("sub")).unwrap();
        let gitfile = format!("gitdir: {}\n", outside.join(".git").display());
        std::fs::write(ws.join("sub/.git"), gitfile).unwrap();
        git(&ws, &["add", "sub"]);
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let repairs = Box::new(guard).run();
        assert!(
            repairs
                .iter()
                .any(|r| super::super::is_unrepaired(r) && r.contains("outside the writable")),
            "{repairs:?}"
        );
        assert!(
            outside.join(".git/config").exists(),
            "nothing outside is moved"
        );
    }

    /// A writable root below a repository's top (a package of a larger repository): the
    /// gitlinks of the enclosing repository's index that lie in the root are checked, and
    /// those elsewhere are left alone.
    #[test]
    fn the_gitlinks_of_a_repository_holding_the_root_are_checked() {
        let (dir, mono) = workspace_repo();
        let upstream = dir.path().canonicalize().unwrap().join("upstream");
        evil_repo(&upstream);
        git(&upstream, &["config", "--unset", "core.fsmonitor"]);
        let url = upstream.to_str().unwrap();
        std::fs::create_dir(mono.join("pkg")).unwrap();
        for at in ["pkg/lib", "elsewhere"] {
            git(
                &mono,
                &[
                    "-c",
                    "protocol.file.allow=always",
                    "submodule",
                    "add",
                    "-q",
                    url,
                    at,
                ],
            );
        }
        std::fs::write(
            mono.join(".git/modules/elsewhere/hooks/pre-commit"),
            "#!/bin/sh\n",
        )
        .unwrap();
        let pkg = mono.join("pkg");
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&pkg));
        // The command: the submodule's gitfile replaced by a repository of its own.
        let lib = pkg.join("lib");
        std::fs::remove_file(lib.join(".git")).unwrap();
        evil_repo(&lib);
        let repairs = Box::new(guard).run();
        assert!(!lib.join(".git/config").exists(), "{repairs:?}");
        assert!(
            repairs.iter().all(|r| !r.contains("elsewhere")),
            "{repairs:?}"
        );
        assert!(mono
            .join(".git/modules/elsewhere/hooks/pre-commit")
            .exists());
    }

    /// A repository the call makes at a root itself (a `.git`, or the root as a bare
    /// repository) is judged like a gitlink's; an empty `.git` does not hide the enclosing
    /// repository's gitlinks (git looks further up past it).
    #[test]
    fn a_repository_made_at_a_root_is_judged() {
        let (dir, mono) = workspace_repo();
        let root = dir.path().canonicalize().unwrap();
        // A root that is no repository: the command makes one there.
        let plain = root.join("plain");
        std::fs::create_dir(&plain).unwrap();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&plain));
        evil_repo(&plain);
        let repairs = Box::new(guard).run();
        assert!(!plain.join(".git/config").exists(), "{repairs:?}");
        // The root as a bare repository.
        let bare = root.join("bare");
        std::fs::create_dir(&bare).unwrap();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&bare));
        for d in ["objects", "refs"] {
            std::fs::create_dir(bare.join(d)).unwrap();
        }
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(bare.join("config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        let repairs = Box::new(guard).run();
        assert!(!bare.join("config").exists(), "{repairs:?}");
        // An empty `.git` in a package of a repository with a submodule there.
        let upstream = root.join("upstream");
        evil_repo(&upstream);
        git(&upstream, &["config", "--unset", "core.fsmonitor"]);
        std::fs::create_dir(mono.join("pkg")).unwrap();
        let url = upstream.to_str().unwrap();
        git(
            &mono,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                url,
                "pkg/sub",
            ],
        );
        let pkg = mono.join("pkg");
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&pkg));
        std::fs::create_dir(pkg.join(".git")).unwrap();
        let evil = pkg.join("evil");
        evil_repo(&evil);
        std::fs::rename(evil.join(".git"), pkg.join("evil.git")).unwrap();
        std::fs::write(pkg.join("sub/.git"), "gitdir: ../evil.git\n").unwrap();
        let repairs = Box::new(guard).run();
        assert!(!pkg.join("evil.git/config").exists(), "{repairs:?}");
    }

    /// A `.git` that git's own test refuses (a `HEAD` that names no ref, `refs` it may not
    /// search) makes git take the root itself for a bare repository, or go on above it:
    /// what it would take instead is judged (a review found this bypass: the command
    /// broke `.git/HEAD` and built a repository with a `core.fsmonitor` at the root).
    #[test]
    fn a_dot_git_git_passes_over_hands_the_root_to_what_git_tries_next() {
        let bare_at_root = |ws: &Path| {
            for d in ["objects", "refs"] {
                std::fs::create_dir(ws.join(d)).unwrap();
            }
            std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
            std::fs::write(
                ws.join("config"),
                "[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = evil\n",
            )
            .unwrap();
        };
        // HEAD broken: every user's git passes `.git` over.
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        std::fs::write(ws.join(".git/HEAD"), "garbage\n").unwrap();
        bare_at_root(&ws);
        let repairs = Box::new(guard).run();
        assert!(!ws.join("config").exists(), "{repairs:?}");
        assert!(
            repairs
                .iter()
                .any(|r| r.contains("taken as a bare repository")),
            "{repairs:?}"
        );
        // `refs` closed: only a user's git passes it over (root may search it anyway).
        if !nix::unistd::geteuid().is_root() {
            use std::os::unix::fs::PermissionsExt;
            let (_dir, ws) = workspace_repo();
            let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
            let refs = ws.join(".git/refs");
            std::fs::set_permissions(&refs, std::fs::Permissions::from_mode(0o000)).unwrap();
            bare_at_root(&ws);
            let repairs = Box::new(guard).run();
            std::fs::set_permissions(&refs, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert!(!ws.join("config").exists(), "{repairs:?}");
        }
        // An intact `.git` stops git: a `config` at the root is the project's own file.
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        bare_at_root(&ws);
        let repairs = Box::new(guard).run();
        assert!(ws.join("config").exists(), "{repairs:?}");
    }

    /// The commit a git directory's HEAD names.
    fn head_of(git_dir: &Path) -> String {
        let out = Command::new("git")
            .args(["--git-dir", git_dir.to_str().unwrap(), "rev-parse", "HEAD"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Stages a gitlink at `path` (relative to `ws`) to the commit `git_dir`'s HEAD names.
    fn stage_gitlink(ws: &Path, path: &str, git_dir: &Path) {
        let info = format!("160000,{},{path}", head_of(git_dir));
        git(ws, &["update-index", "--add", "--cacheinfo", &info]);
    }

    /// Git reads an index from whichever work tree uses its git directory: a gitlink whose
    /// `.git` names the top's git directory, or one outside the roots, hands git that
    /// index's gitlinks read from the gitlink's own folder (a review found both bypasses).
    #[test]
    fn a_git_directory_serving_another_work_tree_is_followed_from_it() {
        // `B/.git` names the top's git directory, whose index also names `x`: `B/x` to git.
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("B/x"));
        std::fs::write(ws.join("B/.git"), "gitdir: ../.git\n").unwrap();
        stage_gitlink(&ws, "B", &ws.join("B/x/.git"));
        stage_gitlink(&ws, "x", &ws.join("B/x/.git"));
        let repairs = Box::new(guard).run();
        assert!(!ws.join("B/x/.git/config").exists(), "{repairs:?}");
        assert!(
            ws.join(".git/config").exists(),
            "the top's own config stays"
        );
        // `B/.git` names a harmless repository outside the roots with a submodule `lib`.
        let (outside_dir, other) = workspace_repo();
        let lib = outside_dir.path().canonicalize().unwrap().join("lib");
        evil_repo(&lib);
        git(&lib, &["config", "--unset", "core.fsmonitor"]);
        git(
            &other,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                lib.to_str().unwrap(),
                "lib",
            ],
        );
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("B/lib"));
        let dot_git = format!("gitdir: {}\n", other.join(".git").display());
        std::fs::write(ws.join("B/.git"), dot_git).unwrap();
        stage_gitlink(&ws, "B", &ws.join("B/lib/.git"));
        let repairs = Box::new(guard).run();
        assert!(!ws.join("B/lib/.git/config").exists(), "{repairs:?}");
        // And the `.git` the call made leading outside fails the call: what it leads to
        // could be armed later by calls elsewhere.
        assert!(
            repairs
                .iter()
                .any(|r| crate::sandbox::is_unrepaired(r) && r.contains("/B: its .git")),
            "{repairs:?}"
        );
    }

    /// A `.git` file the call makes at a root may lead to an older git directory no policy
    /// protects (here an embedded repository of the monorepo holding the root): judged by
    /// what it holds, whatever its age (a review found this bypass).
    #[test]
    fn an_old_git_directory_a_new_root_dot_git_leads_to_is_judged() {
        let (_dir, mono) = workspace_repo();
        let pkg = mono.join("pkg");
        evil_repo(&pkg.join("lib"));
        git(&pkg.join("lib"), &["config", "--unset", "core.fsmonitor"]);
        git(&mono, &["-c", "advice.addEmbeddedRepo=false", "add", "pkg"]);
        git(&mono, &["commit", "-q", "-m", "pkg"]);
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&pkg));
        git(&pkg.join("lib"), &["config", "core.fsmonitor", "evil"]);
        std::fs::write(pkg.join(".git"), "gitdir: lib/.git\n").unwrap();
        let repairs = Box::new(guard).run();
        assert!(!pkg.join("lib/.git/config").exists(), "{repairs:?}");
        // The top repository itself is the policy's to protect, not the check's.
        let (_dir, ws) = workspace_repo();
        let protected = [ws.join(".git/config")];
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws)).trusting(&protected);
        let repairs = Box::new(guard).run();
        assert!(ws.join(".git/config").exists(), "{repairs:?}");
    }

    /// A repository outside the writable roots that a root's `.git` leads to is not the
    /// sandbox's to write: left alone as the user set it up, and, where the call made the
    /// `.git` leading there, judged without moving anything (the call fails instead).
    #[test]
    fn a_repository_outside_the_roots_is_never_moved() {
        let (outside_dir, other) = workspace_repo();
        git(&other, &["config", "alias.st", "status"]);
        let config = other.join(".git/config");
        // The user's own `.git` symlink to a repository elsewhere.
        let root = outside_dir.path().canonicalize().unwrap().join("linked");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(other.join(".git"), root.join(".git")).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&root));
        let repairs = Box::new(guard).run();
        assert!(repairs.is_empty(), "{repairs:?}");
        assert!(config.exists());
        // One the call makes, to a risky repository and to a harmless one (which a call in
        // another workspace could arm later: a review chained two workspaces so).
        for harmless in [false, true] {
            if harmless {
                git(&other, &["config", "--unset", "alias.st"]);
            }
            let (_dir, ws) = workspace_repo();
            std::fs::remove_dir_all(ws.join(".git")).unwrap();
            let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
            std::os::unix::fs::symlink(other.join(".git"), ws.join(".git")).unwrap();
            let repairs = Box::new(guard).run();
            assert!(config.exists(), "moved outside the roots: {repairs:?}");
            assert!(
                repairs.iter().any(|r| crate::sandbox::is_unrepaired(r)),
                "{repairs:?}"
            );
        }
    }

    /// A `commondir` naming a path longer than chitti resolves in one step (git resolves
    /// it one name at a time) does not hide the repository: it is judged (a review found
    /// one that did).
    #[test]
    fn a_commondir_chitti_cannot_resolve_is_judged() {
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let sub = ws.join("sub");
        evil_repo(&sub);
        stage_gitlink(&ws, "sub", &sub.join(".git"));
        let c2 = ws.join("c2");
        std::fs::create_dir(&c2).unwrap();
        for name in ["objects", "refs", "config"] {
            std::fs::rename(sub.join(".git").join(name), c2.join(name)).unwrap();
        }
        let long = format!("{}../../c2\n", "./".repeat(2100));
        std::fs::write(sub.join(".git/commondir"), long).unwrap();
        let repairs = Box::new(guard).run();
        assert!(!sub.join(".git/commondir").exists(), "{repairs:?}");
    }

    /// A gitlink whose path cannot be resolved here for another reason than that nothing
    /// is there (over PATH_MAX once absolute: git reaches it by relative steps) fails the
    /// call rather than pass unchecked (a review found it skipped).
    #[test]
    fn a_gitlink_that_cannot_be_resolved_fails_the_call() {
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let parts = vec!["d".repeat(250); 17];
        let mut dir = std::fs::File::open(&ws).unwrap();
        for part in &parts {
            let name = std::ffi::CString::new(part.as_str()).unwrap();
            use std::os::fd::{AsRawFd, FromRawFd};
            unsafe {
                libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755);
                let fd = libc::openat(dir.as_raw_fd(), name.as_ptr(), libc::O_RDONLY);
                assert!(fd >= 0);
                dir = std::fs::File::from_raw_fd(fd);
            }
        }
        let info = format!("160000,{},{}", head_of(&ws.join(".git")), parts.join("/"));
        git(&ws, &["update-index", "--add", "--cacheinfo", &info]);
        let repairs = Box::new(guard).run();
        assert!(
            repairs.iter().any(|r| crate::sandbox::is_unrepaired(r)),
            "{repairs:?}"
        );
    }

    /// The sandbox may make a nested repository's files as large as its limits allow: the
    /// check reads none of them whole (a review saw a 2 GiB config read into memory). Sparse
    /// files of 512 MiB cost nothing on disk; read whole, they would raise this process's
    /// peak memory by as much.
    #[test]
    fn huge_files_in_a_nested_repository_are_never_read_whole() {
        let peak_kib = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let sub = ws.join("sub");
        evil_repo(&sub);
        git(&ws, &["add", "sub"]);
        for name in ["config", "commondir"] {
            let file = std::fs::File::create(sub.join(".git").join(name)).unwrap();
            file.set_len(512 << 20).unwrap();
        }
        let before = peak_kib();
        let repairs = Box::new(guard).run();
        let grew = peak_kib() - before;
        assert!(grew < 128 << 10, "peak memory grew by {grew} KiB");
        assert!(!sub.join(".git/config").exists(), "{repairs:?}");
        assert!(!sub.join(".git/commondir").exists(), "{repairs:?}");
    }

    /// A repository the call makes at a root may not name another work tree: the check
    /// read its index from the root (a review made one with `core.worktree = /` and a
    /// gitlink named by its path from `/`).
    #[test]
    fn a_root_repository_naming_another_work_tree_is_judged() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("plain");
        std::fs::create_dir(&root).unwrap();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&root));
        git(&root, &["init", "-q"]);
        evil_repo(&root.join("sub"));
        let from_slash = root.join("sub");
        let from_slash = from_slash.strip_prefix("/").unwrap().to_str().unwrap();
        stage_gitlink(&root, from_slash, &root.join("sub/.git"));
        git(&root, &["config", "core.worktree", "/"]);
        let repairs = Box::new(guard).run();
        assert!(!root.join(".git/config").exists(), "{repairs:?}");
    }

    /// `commondir` as git reads it: line ends off the end of the file, then up to a NUL
    /// (`c\n\0` names `c\n`); a `.git` file's NUL right after `gitdir: ` leaves the work
    /// tree itself for the git directory.
    #[test]
    fn commondir_and_gitfile_nuls_are_read_as_git_reads_them() {
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("sub"));
        let gd = ws.join("gd");
        std::fs::create_dir(&gd).unwrap();
        std::fs::rename(ws.join("sub/.git"), gd.join("c\n")).unwrap();
        std::fs::copy(gd.join("c\n/HEAD"), gd.join("HEAD")).unwrap();
        std::fs::write(gd.join("commondir"), b"c\n\0").unwrap();
        std::fs::write(ws.join("sub/.git"), "gitdir: ../gd\n").unwrap();
        stage_gitlink(&ws, "sub", &gd.join("c\n"));
        let repairs = Box::new(guard).run();
        assert!(!gd.join("commondir").exists(), "{repairs:?}");
        // The work tree as its own git directory.
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let sub = ws.join("sub");
        evil_repo(&sub);
        let inner = sub.join(".git");
        for name in ["HEAD", "config", "objects", "refs"] {
            std::fs::rename(inner.join(name), sub.join(name)).unwrap();
        }
        std::fs::remove_dir_all(&inner).unwrap();
        std::fs::write(&inner, b"gitdir: \0x\n").unwrap();
        stage_gitlink(&ws, "sub", &sub);
        let repairs = Box::new(guard).run();
        assert!(!sub.join("config").exists(), "{repairs:?}");
    }

    /// Git's test of a git directory, as far as chitti is sure of it.
    #[test]
    fn git_stops_only_at_a_git_directory_git_surely_takes() {
        let (_dir, ws) = workspace_repo();
        let git_dir = ws.join(".git");
        assert!(git_stops_at(&git_dir));
        let head = git_dir.join("HEAD");
        for (text, stops) in [
            ("ref: refs/heads/main\n", true),
            ("ref:\t refs/x", true),
            ("ref: heads/main\n", false),
            ("garbage\n", false),
            ("", false),
            (&"a".repeat(40), true),
            (&"A".repeat(39), false),
            (&"0".repeat(64), true),
        ] {
            std::fs::write(&head, text).unwrap();
            assert_eq!(git_stops_at(&git_dir), stops, "HEAD {text:?}");
        }
        std::fs::remove_file(&head).unwrap();
        std::os::unix::fs::symlink("refs/heads/main", &head).unwrap();
        assert!(git_stops_at(&git_dir));
        std::fs::remove_file(&head).unwrap();
        std::os::unix::fs::symlink("elsewhere", &head).unwrap();
        assert!(!git_stops_at(&git_dir));
        std::fs::remove_file(&head).unwrap();
        std::fs::write(&head, "ref: refs/heads/main\n").unwrap();
        // `objects` must be a directory here (git would take a searchable file).
        std::fs::rename(git_dir.join("objects"), ws.join("objects-moved")).unwrap();
        std::fs::write(git_dir.join("objects"), "").unwrap();
        assert!(!git_stops_at(&git_dir));
        assert!(is_git_dir(&git_dir), "still judged as a git directory");
    }

    /// A git directory whose `objects` and `refs` are files (git asks only that they be
    /// executable) is still a repository; and a root made a bare repository by an earlier
    /// call is judged again (here given a work tree through a `.git` file naming it).
    #[test]
    fn git_directories_are_taken_as_widely_as_git_takes_them() {
        let (dir, _mono) = workspace_repo();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws1");
        std::fs::create_dir(&ws).unwrap();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws);
        for name in ["objects", "refs"] {
            std::fs::remove_dir_all(ws.join(".git").join(name)).unwrap();
            std::fs::write(ws.join(".git").join(name), "").unwrap();
        }
        let repairs = Box::new(guard).run();
        assert!(!ws.join(".git/config").exists(), "{repairs:?}");
        // A bare root from an earlier call, planted in this one.
        let bare = root.join("bare");
        std::fs::create_dir(&bare).unwrap();
        git(&bare, &["init", "-q", "--bare", "."]);
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&bare));
        git(&bare, &["config", "core.fsmonitor", "evil"]);
        std::fs::write(bare.join(".git"), "gitdir: .\n").unwrap();
        let repairs = Box::new(guard).run();
        assert!(!bare.join("config").exists(), "{repairs:?}");
    }

    /// Nesting deeper than the check goes fails the call instead of passing unchecked.
    #[test]
    fn nesting_deeper_than_the_check_goes_is_a_failed_repair() {
        let (_dir, ws) = workspace_repo();
        let mut dirs = vec![ws.clone()];
        for level in 0..=MAX_DEPTH + 1 {
            let dir = dirs.last().unwrap().join(format!("l{level}"));
            std::fs::create_dir(&dir).unwrap();
            git(&dir, &["init", "-q"]);
            git(&dir, &["commit", "-q", "--allow-empty", "-m", "s"]);
            dirs.push(dir);
        }
        for pair in dirs.windows(2).rev() {
            git(
                &pair[0],
                &["add", pair[1].file_name().unwrap().to_str().unwrap()],
            );
        }
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let repairs = Box::new(guard).run();
        assert!(
            repairs
                .iter()
                .any(|r| super::super::is_unrepaired(r) && r.contains("deeper")),
            "{repairs:?}"
        );
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

    /// A repository at `dir` with one commit and `core.fsmonitor` set.
    fn evil_repo(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "s"]);
        git(dir, &["config", "core.fsmonitor", "evil"]);
    }

    /// A version-2 index holding one gitlink entry per path, written byte by byte (git
    /// refuses to stage some of these paths itself).
    fn forged_index(paths: &[&str]) -> Vec<u8> {
        let paths: Vec<&[u8]> = paths.iter().map(|p| p.as_bytes()).collect();
        forged_index_padded(&paths, 0)
    }

    /// [`forged_index`], with `pad` bytes of an optional extension (one git ignores)
    /// after the entries.
    fn forged_index_padded(paths: &[&[u8]], pad: u32) -> Vec<u8> {
        let mut out = b"DIRC".to_vec();
        out.extend_from_slice(&2u32.to_be_bytes());
        out.extend_from_slice(&(paths.len() as u32).to_be_bytes());
        for path in paths {
            let start = out.len();
            out.extend_from_slice(&[0; 24]);
            out.extend_from_slice(&0o160000u32.to_be_bytes());
            out.extend_from_slice(&[0; 12]);
            out.extend_from_slice(&[0x11; 20]);
            out.extend_from_slice(&(path.len() as u16).to_be_bytes());
            out.extend_from_slice(path);
            let len = out.len() - start;
            out.resize(start + (len + 8) / 8 * 8, 0);
        }
        if pad > 0 {
            out.extend_from_slice(b"ZPAD");
            out.extend_from_slice(&pad.to_be_bytes());
            out.resize(out.len() + pad as usize, 0);
        }
        out.extend_from_slice(&[0; 20]);
        out
    }

    /// Entries git reads as gitlinks are gitlinks here: the type bits alone decide (a mode
    /// with a higher bit set), and extended flags are skipped in any version (git reads
    /// them wherever their bit is set, a version-2 index too).
    #[test]
    fn gitlinks_are_found_as_git_reads_the_index() {
        fn entry(path: &[u8], mode: u32, extended: bool) -> Vec<u8> {
            let mut out = vec![0; 24];
            out.extend_from_slice(&mode.to_be_bytes());
            out.extend_from_slice(&[0; 12]);
            out.extend_from_slice(&[0x11; 20]);
            let flags = path.len() as u16 | if extended { 0x4000 } else { 0 };
            out.extend_from_slice(&flags.to_be_bytes());
            if extended {
                out.extend_from_slice(&[0, 0]);
            }
            out.extend_from_slice(path);
            let len = out.len();
            out.resize((len + 8) / 8 * 8, 0);
            out
        }
        let mut index = b"DIRC".to_vec();
        index.extend_from_slice(&2u32.to_be_bytes());
        index.extend_from_slice(&3u32.to_be_bytes());
        index.extend(entry(b"a", 0o360000, false));
        index.extend(entry(b"b", 0o160000, true));
        index.extend(entry(b"c", 0o100644, true));
        index.extend_from_slice(&[0; 20]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        std::fs::write(&path, &index).unwrap();
        let parsed = read_index(&path, 20).unwrap().unwrap();
        assert_eq!(parsed.paths, vec![b"a".to_vec(), b"b".to_vec()]);
    }

    /// A split index whose entry for `sub` was replaced by a gitlink (a nameless entry the
    /// shared index's `sub` takes its mode from, as git applies it): git's own listing
    /// finds it.
    #[test]
    fn a_gitlink_replacing_a_split_index_entry_is_found() {
        let (_dir, ws) = workspace_repo();
        for i in 0..30 {
            std::fs::write(ws.join(format!("f{i}")), format!("{i}")).unwrap();
        }
        std::fs::write(ws.join("sub"), "s").unwrap();
        git(&ws, &["add", "-A"]);
        git(&ws, &["update-index", "--split-index"]);
        std::fs::remove_file(ws.join("sub")).unwrap();
        evil_repo(&ws.join("sub"));
        let info = format!("160000,{},sub", head_of(&ws.join("sub/.git")));
        git(&ws, &["update-index", "--cacheinfo", &info]);
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let repairs = Box::new(guard).run();
        assert!(!ws.join("sub/.git/config").exists(), "{repairs:?}");
    }

    /// What chitti does not read as git would goes to git: a sparse directory entry, a
    /// nameless entry, an extension other than the plain ones (a split index's `link`, an
    /// entry offset table); and the object ids' length is the repository's own.
    #[test]
    fn indexes_read_differently_by_git_go_to_git() {
        fn index_with(mode: u32, path: &[u8], extension: Option<&[u8; 4]>) -> Vec<u8> {
            let mut out = b"DIRC".to_vec();
            out.extend_from_slice(&2u32.to_be_bytes());
            out.extend_from_slice(&1u32.to_be_bytes());
            out.extend_from_slice(&[0; 24]);
            out.extend_from_slice(&mode.to_be_bytes());
            out.extend_from_slice(&[0; 12]);
            out.extend_from_slice(&[0x11; 20]);
            out.extend_from_slice(&(path.len() as u16).to_be_bytes());
            out.extend_from_slice(path);
            let len = out.len() - 12;
            out.resize(12 + (len + 8) / 8 * 8, 0);
            if let Some(name) = extension {
                out.extend_from_slice(name);
                out.extend_from_slice(&4u32.to_be_bytes());
                out.extend_from_slice(&[0; 4]);
            }
            out.extend_from_slice(&[0; 20]);
            out
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        let needs_git = |bytes: Vec<u8>| {
            std::fs::write(&path, bytes).unwrap();
            read_index(&path, 20).unwrap().unwrap().needs_git
        };
        assert!(!needs_git(index_with(0o100644, b"a", Some(b"TREE"))));
        assert!(needs_git(index_with(0o040000, b"d/", None)));
        assert!(needs_git(index_with(0o160000, b"", None)));
        for name in [b"link", b"sdir", b"IEOT", b"EOIE", b"ZZZZ"] {
            assert!(
                needs_git(index_with(0o100644, b"a", Some(name))),
                "{name:?}"
            );
        }
        // An `EOIE` where git, reading with threads, looks for one: inside a TREE's body.
        let mut hidden = index_with(0o100644, b"a", None);
        hidden.truncate(hidden.len() - 20);
        hidden.extend_from_slice(b"TREE");
        hidden.extend_from_slice(&32u32.to_be_bytes());
        hidden.extend_from_slice(b"EOIE");
        hidden.extend_from_slice(&[0; 28]);
        hidden.extend_from_slice(&[0; 20]);
        assert!(needs_git(hidden));
        // A v4 name's strip count past what git decodes (it reads 0 and keeps the bytes).
        let overflow = dir.path().join("varint");
        std::fs::write(
            &overflow,
            [0x80, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xff, 0x01],
        )
        .unwrap();
        let mut reader = IndexReader::new(std::fs::File::open(&overflow).unwrap());
        assert_eq!(varint(&mut reader), None);
        let repo = dir.path();
        assert_eq!(object_id_len(repo), Ok(Some(20)), "no config");
        std::fs::write(
            repo.join("config"),
            "[extensions]\n\tobjectFormat = sha256\n",
        )
        .unwrap();
        assert_eq!(object_id_len(repo), Ok(Some(32)));
        std::fs::write(
            repo.join("config"),
            "[extensions]\n\tobjectformat = sha2\\\n56\n",
        )
        .unwrap();
        assert_eq!(
            object_id_len(repo),
            Ok(None),
            "read here otherwise than git reads it"
        );
    }

    /// A name's length is the flags' (as git takes it): an entry whose name hides a NUL
    /// and what looks like more entries behind it goes to git, which finds the gitlink.
    #[test]
    fn an_entry_name_is_as_long_as_its_flags_say() {
        let (_dir, ws) = workspace_repo();
        evil_repo(&ws.join("sub"));
        let entry = |mode: u32, name: &[u8], named: u16| {
            let mut out = vec![0; 24];
            out.extend_from_slice(&mode.to_be_bytes());
            out.extend_from_slice(&[0; 12]);
            out.extend_from_slice(&[0x11; 20]);
            out.extend_from_slice(&named.to_be_bytes());
            out.extend_from_slice(name);
            let len = out.len();
            out.resize((len + 8) / 8 * 8, 0);
            out
        };
        // "a", then (inside the same name, as a reading by NUL sees it) a plain entry "b"
        // and a TREE extension running to the trailer over git's entry "sub".
        let mut hidden = b"a\0".to_vec();
        hidden.extend(entry(0o100644, b"b", 1));
        hidden.extend_from_slice(b"TREE\0\0\0\0");
        let mut index = b"DIRC".to_vec();
        index.extend_from_slice(&2u32.to_be_bytes());
        index.extend_from_slice(&2u32.to_be_bytes());
        index.extend(entry(0o100644, &hidden, hidden.len() as u16));
        index.extend(entry(0o160000, b"sub", 3));
        let tree_data = 12 + 64 + 64 + 8;
        let size = (index.len() - tree_data) as u32;
        index[tree_data - 4..tree_data].copy_from_slice(&size.to_be_bytes());
        index.extend_from_slice(&[0; 20]);
        std::fs::write(ws.join(".git/index"), &index).unwrap();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let repairs = Box::new(guard).run();
        assert!(!ws.join("sub/.git/config").exists(), "{repairs:?}");
    }

    /// Moving a repository's config aside changes how git reads its index (here the object
    /// ids' length its config claimed): the check looks again, and finds the repository
    /// git will enter below it.
    #[test]
    fn the_check_looks_again_after_moving_a_config_aside() {
        let (_dir, ws) = workspace_repo();
        let sub = ws.join("sub");
        std::fs::create_dir(&sub).unwrap();
        git(&sub, &["init", "-q"]);
        evil_repo(&sub.join("inner"));
        git(&sub, &["add", "inner"]);
        git(&sub, &["commit", "-q", "-m", "s"]);
        git(&ws, &["add", "sub"]);
        git(&sub, &["config", "core.repositoryformatversion", "1"]);
        git(&sub, &["config", "extensions.objectformat", "sha256"]);
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let repairs = Box::new(guard).run();
        assert!(!sub.join("inner/.git/config").exists(), "{repairs:?}");
        assert!(
            repairs.iter().all(|r| !super::super::is_unrepaired(r)),
            "{repairs:?}"
        );
    }

    /// Index paths are taken as git takes them when it reads an index (`./sub`,
    /// `x/../sub`, `sub/`): resolved, not skipped.
    #[test]
    fn index_paths_are_resolved_as_the_kernel_resolves_them() {
        for forged in ["./sub", "x/../sub", "sub/", "sub//"] {
            let (_dir, ws) = workspace_repo();
            evil_repo(&ws.join("sub"));
            std::fs::create_dir(ws.join("x")).unwrap();
            std::fs::write(ws.join(".git/index"), forged_index(&[forged])).unwrap();
            let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
            let repairs = Box::new(guard).run();
            assert!(
                !ws.join("sub/.git/config").exists(),
                "{forged}: {repairs:?}"
            );
        }
    }

    /// Neither size nor a name that is not UTF-8 makes the check skip an index: the
    /// sandbox could pad one, or name a gitlink so, to keep its repository unchecked.
    #[test]
    fn an_index_of_any_size_and_gitlinks_of_any_name_are_checked() {
        use std::os::unix::ffi::OsStrExt;
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let odd = std::ffi::OsStr::from_bytes(b"sub\xff");
        evil_repo(&ws.join(odd));
        evil_repo(&ws.join("plain"));
        let index = forged_index_padded(&[b"plain", b"sub\xff"], 65 * 1024 * 1024);
        std::fs::write(ws.join(".git/index"), index).unwrap();
        let repairs = Box::new(guard).run();
        assert!(!ws.join("plain/.git/config").exists(), "{repairs:?}");
        assert!(!ws.join(odd).join(".git/config").exists(), "{repairs:?}");
        assert!(
            repairs.iter().all(|r| !r.contains("not checked")),
            "{repairs:?}"
        );
    }

    fn workspace_repo() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir(&ws).unwrap();
        git(&ws, &["init", "-q"]);
        git(&ws, &["commit", "-q", "--allow-empty", "-m", "i"]);
        (dir, ws)
    }

    #[test]
    fn repositories_outside_the_writable_roots_are_never_touched_but_fail_the_call() {
        let (dir, ws) = workspace_repo();
        let victim = dir.path().canonicalize().unwrap().join("victim");
        evil_repo(&victim);
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        // A symlink staged as a gitlink, and forged `..` and absolute-looking entries.
        std::os::unix::fs::symlink(&victim, ws.join("lnk")).unwrap();
        git(
            &ws,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                "160000,1111111111111111111111111111111111111111,lnk",
            ],
        );
        let mut repairs = Box::new(guard).run();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        std::fs::write(
            ws.join(".git/index"),
            forged_index(&["../victim", "/victim"]),
        )
        .unwrap();
        repairs.extend(Box::new(guard).run());
        assert!(victim.join(".git/config").exists(), "{repairs:?}");
        assert!(victim.join(".git/hooks").exists(), "{repairs:?}");
        // Not moved, but the calls fail: the host's git would enter it.
        assert!(
            repairs.iter().all(|r| super::super::is_unrepaired(r)) && repairs.len() >= 2,
            "{repairs:?}"
        );
    }

    #[test]
    fn a_nested_repository_behind_a_dot_git_symlink_loses_its_config() {
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("hidden"));
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::os::unix::fs::symlink("../hidden/.git", ws.join("sub/.git")).unwrap();
        git(&ws, &["add", "sub"]);
        let repairs = Box::new(guard).run();
        assert!(!ws.join("hidden/.git/config").exists(), "{repairs:?}");
    }

    #[test]
    fn a_split_index_is_read_through_its_shared_index() {
        let (_dir, ws) = workspace_repo();
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("sub"));
        git(&ws, &["add", "sub"]);
        git(&ws, &["update-index", "--split-index"]);
        let shared = std::fs::read_dir(ws.join(".git"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("sharedindex."));
        assert!(shared, "git made no shared index");
        let repairs = Box::new(guard).run();
        assert!(!ws.join("sub/.git/config").exists(), "{repairs:?}");
    }

    #[test]
    fn repositories_nested_two_levels_deep_are_checked() {
        let (_dir, ws) = workspace_repo();
        evil_repo(&ws.join("sub"));
        git(&ws, &["add", "sub"]);
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("sub/inner"));
        git(&ws.join("sub"), &["add", "inner"]);
        let repairs = Box::new(guard).run();
        assert!(!ws.join("sub/inner/.git/config").exists(), "{repairs:?}");
    }

    #[test]
    fn a_git_dir_in_another_writable_root_is_checked() {
        let (dir, ws) = workspace_repo();
        let other = dir.path().canonicalize().unwrap().join("other");
        let roots = [ws.clone(), other.clone()];
        let guard = NestedRepoGuard::before(&roots);
        evil_repo(&other.join("repo"));
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(
            ws.join("sub/.git"),
            format!("gitdir: {}\n", other.join("repo/.git").display()),
        )
        .unwrap();
        git(&ws, &["add", "sub"]);
        let repairs = Box::new(guard).run();
        assert!(!other.join("repo/.git/config").exists(), "{repairs:?}");
    }

    #[test]
    fn another_worktree_redirected_during_the_call_loses_its_commondir() {
        let (dir, ws) = workspace_repo();
        let base = dir.path().canonicalize().unwrap();
        git(
            &ws,
            &["worktree", "add", "-q", base.join("wt").to_str().unwrap()],
        );
        git(
            &ws,
            &["worktree", "add", "-q", base.join("wt2").to_str().unwrap()],
        );
        std::thread::sleep(Duration::from_millis(100));
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("evil"));
        std::fs::write(
            ws.join(".git/worktrees/wt/commondir"),
            "../../../evil/.git\n",
        )
        .unwrap();
        let repairs = Box::new(guard).run();
        assert!(
            !ws.join(".git/worktrees/wt/commondir").exists(),
            "{repairs:?}"
        );
        assert!(
            ws.join(".git/worktrees/wt2/commondir").exists(),
            "{repairs:?}"
        );
    }

    #[test]
    fn a_linked_worktree_workspace_is_checked_too() {
        let (dir, main) = workspace_repo();
        let ws = dir.path().canonicalize().unwrap().join("wt");
        git(&main, &["worktree", "add", "-q", ws.to_str().unwrap()]);
        let roots = [ws.clone(), main.join(".git")];
        let guard = NestedRepoGuard::before(&roots);
        evil_repo(&ws.join("sub"));
        git(&ws, &["add", "sub"]);
        let repairs = Box::new(guard).run();
        assert!(!ws.join("sub/.git/config").exists(), "{repairs:?}");
    }

    /// A submodule added at `path` (named after it) from a repository of its own.
    fn add_submodule(ws: &Path, path: &str) {
        let upstream = ws
            .parent()
            .unwrap()
            .join(format!("up-{}", path.replace('/', "-")));
        std::fs::create_dir(&upstream).unwrap();
        git(&upstream, &["init", "-q"]);
        git(&upstream, &["commit", "-q", "--allow-empty", "-m", "u"]);
        let url = upstream.to_str().unwrap();
        git(
            ws,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "-q",
                "add",
                url,
                path,
            ],
        );
        git(ws, &["commit", "-q", "-m", "submodule"]);
    }

    /// `git submodule update` takes up a submodule's git directory under `modules` whether
    /// or not its work tree holds it: one whose name has a slash (so that it lies two
    /// levels down), changed during the call with its work tree emptied, and one made
    /// during the call for a submodule never checked out, are judged like gitlinks (a
    /// review planted in both). An old one that could run nothing is left alone.
    #[test]
    fn submodule_git_directories_are_judged_without_their_work_trees() {
        let (_dir, ws) = workspace_repo();
        add_submodule(&ws, "libs/foo");
        add_submodule(&ws, "kept");
        git(&ws, &["submodule", "deinit", "-q", "kept"]);
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        let foo = ws.join(".git/modules/libs/foo");
        std::fs::write(foo.join("hooks/post-checkout"), "#!/bin/sh\nevil\n").unwrap();
        std::fs::remove_dir_all(ws.join("libs/foo")).unwrap();
        std::fs::create_dir(ws.join("libs/foo")).unwrap();
        let made = ws.join(".git/modules/never/checked/out");
        std::fs::create_dir_all(&made).unwrap();
        git(&made, &["init", "-q", "--bare"]);
        let repairs = Box::new(guard).run();
        assert!(!foo.join("hooks").exists(), "{repairs:?}");
        assert!(!made.join("config").exists(), "{repairs:?}");
        let kept = ws.join(".git/modules/kept");
        assert!(kept.join("config").exists(), "{repairs:?}");
        assert!(
            !repairs.iter().any(|r| r.contains("modules/kept")),
            "{repairs:?}"
        );
        assert!(
            !repairs.iter().any(|r| super::super::is_unrepaired(r)),
            "{repairs:?}"
        );
    }

    /// Each linked worktree has an index and submodule git directories of its own, which
    /// git uses when the user works there: a gitlink staged in another worktree's index
    /// leading back into the workspace, and a worktree's submodule changed during the call
    /// (a review did both).
    #[test]
    fn other_worktrees_indexes_and_submodules_are_checked() {
        let (dir, ws) = workspace_repo();
        add_submodule(&ws, "sub");
        let other = dir.path().canonicalize().unwrap().join("other");
        git(&ws, &["worktree", "add", "-q", other.to_str().unwrap()]);
        git(
            &other,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "-q",
                "update",
                "--init",
            ],
        );
        let admin = ws.join(".git/worktrees/other");
        assert!(admin.join("modules/sub").is_dir());
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&ws.join("cache/evil"));
        // Git refuses to stage such a path, but reads it from an index as it is.
        std::fs::write(admin.join("index"), forged_index(&["../ws/cache/evil"])).unwrap();
        git(
            &admin.join("modules/sub"),
            &["config", "core.fsmonitor", "evil"],
        );
        let repairs = Box::new(guard).run();
        assert!(!ws.join("cache/evil/.git/config").exists(), "{repairs:?}");
        assert!(!admin.join("modules/sub/config").exists(), "{repairs:?}");
    }

    /// A workspace that is a linked worktree shares the main work tree's index (in the
    /// common git directory, which is writable): a gitlink staged there leading back into
    /// the workspace is followed.
    #[test]
    fn the_main_worktree_s_index_is_checked_from_a_linked_one() {
        let (dir, main) = workspace_repo();
        let ws = dir.path().canonicalize().unwrap().join("wt");
        git(&main, &["worktree", "add", "-q", ws.to_str().unwrap()]);
        let roots = [ws.clone(), main.join(".git")];
        let guard = NestedRepoGuard::before(&roots).trusting(&[main.join(".git/config")]);
        evil_repo(&ws.join("cache/evil"));
        std::fs::write(main.join(".git/index"), forged_index(&["../wt/cache/evil"])).unwrap();
        let repairs = Box::new(guard).run();
        assert!(!ws.join("cache/evil/.git/config").exists(), "{repairs:?}");
    }

    /// Makes, in the git directory of the submodule at `path` of `ws`, a commit whose tree
    /// adds a gitlink `inner` to the repository there (not staged in the submodule's own
    /// index), and stages that commit for the submodule in the top's index.
    fn stage_a_submodule_commit_naming(ws: &Path, path: &str, inner: &str) {
        let inner_head = head_of(&ws.join(path).join(inner).join(".git"));
        let module = ws.join(".git/modules").join(path);
        let index = ws.join("scratch-index");
        let in_module = |args: &[&str]| {
            let out = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "--git-dir"])
                .arg(&module)
                .args(args)
                .env("GIT_INDEX_FILE", &index)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", ws)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        in_module(&["read-tree", "HEAD"]);
        in_module(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{inner_head},{inner}"),
        ]);
        let tree = in_module(&["write-tree"]);
        let commit = in_module(&["commit-tree", &tree, "-p", "HEAD", "-m", "x"]);
        std::fs::remove_file(&index).unwrap();
        git(
            ws,
            &[
                "update-index",
                "--cacheinfo",
                &format!("160000,{commit},{path}"),
            ],
        );
    }

    /// `git submodule update` checks out the commit the top's index records for a
    /// submodule: a commit made during the call whose tree has a gitlink to a repository
    /// planted in the submodule's work tree leads git there, though no index names it yet
    /// (a review did this). Its gitlinks are followed where that commit is not the one
    /// checked out.
    #[test]
    fn the_gitlinks_of_a_submodule_s_recorded_commit_are_checked() {
        let (_dir, ws) = workspace_repo();
        add_submodule(&ws, "sub");
        let sub = ws.join("sub");
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&sub.join("inner"));
        stage_a_submodule_commit_naming(&ws, "sub", "inner");
        let repairs = Box::new(guard).run();
        assert!(!sub.join("inner/.git/config").exists(), "{repairs:?}");
    }

    #[test]
    fn head_commits_are_read_from_loose_and_packed_refs() {
        let (_dir, ws) = workspace_repo();
        let git_dir = ws.join(".git");
        let head = head_of(&git_dir);
        assert_eq!(head_commit(&git_dir).as_deref(), Some(head.as_str()));
        git(&ws, &["pack-refs", "--all"]);
        assert_eq!(head_commit(&git_dir).as_deref(), Some(head.as_str()));
        git(&ws, &["checkout", "-q", "--detach"]);
        assert_eq!(head_commit(&git_dir).as_deref(), Some(head.as_str()));
        std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/../../x\n").unwrap();
        assert_eq!(head_commit(&git_dir), None);
        // Where git could read it otherwise: a symlinked or huge loose ref (a review
        // had chitti fall back to `packed-refs`, whose line named another commit).
        std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let main = git_dir.join("refs/heads/main");
        std::fs::write(git_dir.join("elsewhere"), format!("{head}\n")).unwrap();
        std::os::unix::fs::symlink(git_dir.join("elsewhere"), &main).unwrap();
        assert_eq!(head_commit(&git_dir), None);
        std::fs::remove_file(&main).unwrap();
        std::fs::write(&main, format!("{head}{}\n", " ".repeat(8192))).unwrap();
        assert_eq!(head_commit(&git_dir), None);
    }

    /// A submodule whose `.git` the command removed, leaving a repository it planted in
    /// the folder, and a staged commit naming that repository: `git submodule update` takes
    /// up the git directory under `modules` and checks the commit out (a review did this).
    #[test]
    fn a_recorded_commit_is_followed_where_the_submodule_s_git_is_gone() {
        let (_dir, ws) = workspace_repo();
        add_submodule(&ws, "sub");
        let sub = ws.join("sub");
        let guard = NestedRepoGuard::before(std::slice::from_ref(&ws));
        evil_repo(&sub.join("inner"));
        stage_a_submodule_commit_naming(&ws, "sub", "inner");
        std::fs::remove_file(sub.join(".git")).unwrap();
        let repairs = Box::new(guard).run();
        assert!(!sub.join("inner/.git/config").exists(), "{repairs:?}");
    }

    /// A listing of a recorded commit by a git that was killed (out of memory, or by
    /// chitti helping a slow supervisor) lists nothing: an error, which fails the check,
    /// not a commit without gitlinks; a commit git cannot list is one it cannot check out.
    #[test]
    fn a_killed_git_s_listing_of_a_commit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let fake = |name: &str, script: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            path
        };
        let killed = fake("killed-git", "kill -KILL $$");
        let listed = gitlinks_in_commit_by(&killed, dir.path(), "HEAD");
        assert!(
            listed.as_ref().is_err_and(|e| e.contains("git ended with")),
            "{listed:?}"
        );
        let no_such_commit = fake("failing-git", "exit 128");
        let listed = gitlinks_in_commit_by(&no_such_commit, dir.path(), "HEAD");
        assert_eq!(listed, Ok(Vec::new()));
    }
}
