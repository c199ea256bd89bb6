//! Holds the file tools to the workspace.
//!
//! The file tools run in chitti's own process, where the sandbox does not reach, so a
//! path is judged by the object it resolves to, not by its spelling. On Linux the kernel
//! resolves every path with openat2(2) and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`
//! relative to a descriptor of the workspace: `..`, absolute symlinks and symlinks that
//! point out fail there, and a symlink swapped in during the call cannot redirect it
//! because nothing is looked up by name again. Files are then used through the returned
//! descriptors, and files are written through a descriptor of their parent directory.
//! Where a descriptor leads is checked after it is opened (from /proc/self/fd) and before
//! it is used. Without openat2 (Linux < 5.6) every file tool fails closed.
//!
//! On top of staying inside the workspace: credential locations (`deny_read`) are never
//! read or written, and writes are refused to protected paths (the policy's read-only
//! and pinned paths, and anything inside a `.git` directory, whose hooks and config run
//! code outside the sandbox the next time git runs) and with a read-only profile.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde_json::json;

pub use super::replace::WriteFailed;
use super::ToolResult;
use crate::policy::{canonical_or_lexical, Policy};

/// Why a path was refused or could not be used. The message is meant for a model: it
/// says what was wrong and, where it helps, what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// The path is, or resolves to, something outside the workspace.
    #[error("{0}")]
    Outside(String),
    /// A credential location, which chitti keeps unreadable.
    #[error("{0}")]
    Credential(String),
    /// A write to a protected path, or under a read-only profile.
    #[error("{0}")]
    Protected(String),
    #[error("{0}")]
    NotFound(String),
    /// It exists but is the wrong kind of thing (a directory, a link, a device).
    #[error("{0}")]
    Invalid(String),
    /// This system cannot resolve paths safely; refused rather than guessed.
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Io(String),
}

impl ConfineError {
    /// A stable name for programs (the MCP server, tests).
    pub fn kind(&self) -> &'static str {
        match self {
            ConfineError::Outside(_) => "outside_workspace",
            ConfineError::Credential(_) => "credential_path",
            ConfineError::Protected(_) => "protected_path",
            ConfineError::NotFound(_) => "not_found",
            ConfineError::Invalid(_) => "invalid_path",
            ConfineError::Unsupported(_) => "unsupported",
            ConfineError::Io(_) => "io",
        }
    }
}

impl From<ConfineError> for ToolResult {
    fn from(e: ConfineError) -> ToolResult {
        let mut result = ToolResult::error(e.to_string());
        result.content["kind"] = json!(e.kind());
        result
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

impl From<std::fs::FileType> for EntryKind {
    fn from(t: std::fs::FileType) -> EntryKind {
        if t.is_symlink() {
            EntryKind::Symlink
        } else if t.is_dir() {
            EntryKind::Dir
        } else if t.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        }
    }
}

/// One directory entry (links are not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: EntryKind,
}

/// A file opened inside the workspace.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    /// Where it really is: absolute, links resolved.
    pub path: PathBuf,
    /// Whether this call created it.
    pub created: bool,
}

/// A file opened inside the workspace for writing; [`Writable::write_whole`] gives it its
/// new content.
#[derive(Debug)]
pub struct Writable {
    /// The new, empty file, or the existing one, untouched (read-write for edits).
    pub file: File,
    /// Where it really is: absolute, links resolved.
    pub path: PathBuf,
    /// Whether this call created it.
    pub created: bool,
    /// Its directory and its name there, for writing a replacement beside it.
    parent: sys::Node,
    name: OsString,
    /// The directories this call made for it, outermost first: removed again if a new
    /// file cannot be written.
    made: MadeDirs,
}

/// Directories a write made, outermost first, each as its path beneath the workspace and
/// its identity (device, inode), recorded the moment it was made. No descriptor is held
/// per directory (a path may have thousands of levels): each parent is opened again,
/// beneath the workspace and through no link, to remove one.
#[derive(Debug, Default)]
struct MadeDirs {
    root: Option<sys::Node>,
    dirs: Vec<(PathBuf, (u64, u64))>,
}

impl MadeDirs {
    /// Removes them, innermost first, where they are still the ones made and still empty
    /// (best effort: what cannot be removed stays, and is harmless). A process that found
    /// one of them already there a moment ago (`mkdir -p`) may then miss it: the price of
    /// leaving nothing behind, paid only when a write fails.
    fn undo(self) {
        let Some(root) = self.root else { return };
        for (rel, id) in self.dirs.into_iter().rev() {
            let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                continue;
            };
            if let Ok(parent) = root.beneath(parent, false) {
                if let Ok(dir) = parent.dir_fd() {
                    let _ = super::replace::remove_dir_if_same(dir, name, id);
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Create the file or open it (write-only) to be replaced; `parents` creates missing
    /// directories.
    Create { parents: bool },
    /// An existing file, read-write and untouched (for edits).
    Existing,
}

/// Opens a regular file for reading.
pub fn open_read(policy: &Policy, path: &str) -> Result<Opened, ConfineError> {
    let target = Target::new(policy, path)?;
    let (node, real) = target.resolve()?;
    target.expect_kind(&node, EntryKind::File)?;
    let file = node.open_read().map_err(|e| target.err(e))?;
    Ok(Opened {
        file,
        path: real,
        created: false,
    })
}

/// Lists a directory: where it really is, and its entries in no particular order.
/// A directory's first `keep` entries by name, and how many it holds in all.
pub fn read_dir(
    policy: &Policy,
    path: &str,
    keep: usize,
) -> Result<(PathBuf, Vec<Entry>, usize), ConfineError> {
    let target = Target::new(policy, path)?;
    let (node, real) = target.resolve()?;
    target.expect_kind(&node, EntryKind::Dir)?;
    let (entries, total) = node.entries(keep).map_err(|e| target.err(e))?;
    Ok((real, entries, total))
}

/// The `keep` first of `entries` by name, sorted, and how many there were: however many a
/// directory holds (a sandboxed command can make millions), only `keep` are kept at once.
fn first_by_name(
    entries: impl Iterator<Item = io::Result<Entry>>,
    keep: usize,
) -> io::Result<(Vec<Entry>, usize)> {
    // The largest kept name on top, to be dropped when a smaller one comes (names are
    // unique in a directory: the kind never decides).
    let mut kept = std::collections::BinaryHeap::with_capacity(keep.saturating_add(1).min(4096));
    let mut total = 0;
    for entry in entries {
        let Entry { name, kind } = entry?;
        total += 1;
        kept.push((name, kind));
        if kept.len() > keep {
            kept.pop();
        }
    }
    let kept = kept.into_sorted_vec().into_iter();
    Ok((
        kept.map(|(name, kind)| Entry { name, kind }).collect(),
        total,
    ))
}

/// A directory's entries as the file tools see them (links not followed), the first
/// `keep` by name, and how many there are.
fn listing(dir: std::fs::ReadDir, keep: usize) -> io::Result<(Vec<Entry>, usize)> {
    let entries = dir.map(|entry| {
        let entry = entry?;
        Ok(Entry {
            kind: entry.file_type()?.into(),
            name: entry.file_name(),
        })
    });
    first_by_name(entries, keep)
}

/// Why an existing entry is not opened for writing (an errno `open_write` puts in words),
/// or None for a file it may write. Writing one name of a file with several writes them
/// all, protected ones too (a sandboxed command may link `.git/config` into the workspace).
fn write_refusal(kind: EntryKind, other_names: bool) -> Option<i32> {
    match kind {
        EntryKind::File if other_names => Some(libc::EMLINK),
        EntryKind::File => None,
        EntryKind::Symlink => Some(libc::ELOOP),
        EntryKind::Dir => Some(libc::EISDIR),
        EntryKind::Other => Some(libc::ENXIO),
    }
}

/// Where a directory inside the workspace really is (for a command's working directory).
pub fn resolve_dir(policy: &Policy, path: &str) -> Result<PathBuf, ConfineError> {
    let target = Target::new(policy, path)?;
    let (node, real) = target.resolve()?;
    target.expect_kind(&node, EntryKind::Dir)?;
    Ok(real)
}

/// Opens a file for writing, through its parent directory opened beneath the workspace.
/// Every check happens before anything is created.
pub fn open_write(policy: &Policy, path: &str, mode: WriteMode) -> Result<Writable, ConfineError> {
    let target = Target::new(policy, path)?;
    if !policy.is_writable(&policy.workspace) {
        return Err(ConfineError::Protected(format!(
            "cannot write `{path}`: the `{}` profile keeps the workspace read-only",
            policy.profile
        )));
    }
    // `Path` forgets a trailing `/` (and `/.`): "dir/" would name the file `dir`.
    let names_a_directory = path.ends_with('/') || path.ends_with("/.") || path == ".";
    let name = match target.rel.file_name() {
        Some(name) if !names_a_directory => name.to_os_string(),
        _ => {
            return Err(ConfineError::Invalid(format!(
                "`{path}` does not name a file (it ends in `..`, `.` or `/`)"
            )))
        }
    };
    let parent_rel = target.rel.parent().unwrap_or(Path::new(""));
    // By the spelling first, so that a refused write creates no directories; the
    // resolved path is checked again below.
    check_protected(policy, path, &lexical(&policy.workspace.join(&target.rel)))?;

    let root = target.root()?;
    let mut made = MadeDirs::default();
    let opened = match mode {
        WriteMode::Create { parents: true } => target.open_dirs(&root, parent_rel, &mut made),
        _ => root.beneath(parent_rel, true).map_err(|e| target.err(e)),
    }
    .and_then(|parent| open_in(&target, parent, name, mode));
    if !made.dirs.is_empty() {
        made.root = Some(root);
    }
    match opened {
        Ok(mut writable) => {
            writable.made = made;
            Ok(writable)
        }
        Err(e) => {
            // Nothing half-done: a refused or failed write leaves no new directories.
            made.undo();
            Err(e)
        }
    }
}

/// The rest of `open_write`, once the file's directory is open.
fn open_in(
    target: &Target<'_>,
    parent: sys::Node,
    name: OsString,
    mode: WriteMode,
) -> Result<Writable, ConfineError> {
    let (policy, path) = (target.policy, target.user);
    let real = target.real_path(&parent)?.join(&name);
    check_writable(policy, path, &real)?;
    let (file, created) = parent
        .open_file(&name, mode)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => ConfineError::Invalid(format!(
                "`{path}` is a symbolic link; the file tools do not write through links \
                 (write to the file it points to)"
            )),
            Some(libc::EMLINK) => ConfineError::Protected(format!(
                "`{path}` has other names (hard links), and one of them may be a protected \
                 file such as `.git/config`: the file tools do not write to a file with \
                 more than one name (execute_bash, which runs sandboxed, can)"
            )),
            _ => target.err(e),
        })?;
    let is_file = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !is_file {
        return Err(ConfineError::Invalid(format!(
            "`{path}` is not a regular file"
        )));
    }
    Ok(Writable {
        file,
        path: real,
        created,
        parent,
        name,
        made: MadeDirs::default(),
    })
}

impl Writable {
    /// Makes `content` the file's whole content, leaving nothing half-done where it can
    /// (see `replace`).
    pub fn write_whole(mut self, content: &[u8]) -> Result<(), WriteFailed> {
        let dir = self.parent.dir_fd().map_err(|error| WriteFailed {
            error,
            left: "it was left as it was",
        })?;
        let written =
            super::replace::write_whole(dir, &self.name, &mut self.file, self.created, content);
        if written.is_err() && self.created {
            drop(self.file);
            self.made.undo();
        }
        written
    }
}

/// `real` as shown to a model: relative to the workspace, `.` for its root.
pub fn display(policy: &Policy, real: &Path) -> String {
    match real.strip_prefix(&policy.workspace) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => real.display().to_string(),
    }
}

/// The longest path the file tools accept (Linux's PATH_MAX).
const MAX_PATH_BYTES: usize = 4096;

/// A caller's path, made relative to the workspace, ready to be resolved beneath it.
struct Target<'a> {
    policy: &'a Policy,
    user: &'a str,
    rel: PathBuf,
}

impl<'a> Target<'a> {
    fn new(policy: &'a Policy, user: &'a str) -> Result<Target<'a>, ConfineError> {
        if user.contains('\0') {
            return Err(ConfineError::Invalid("the path contains a NUL byte".into()));
        }
        // Refused before any work: resolving a path costs a pass over it per component.
        if user.len() > MAX_PATH_BYTES {
            return Err(ConfineError::Invalid(format!(
                "the path is {} bytes long; paths are at most {MAX_PATH_BYTES} bytes",
                user.len()
            )));
        }
        let path = Path::new(user);
        let rel = if path.is_absolute() {
            let ws = &policy.workspace;
            match path.strip_prefix(ws) {
                Ok(rest) => rest.to_path_buf(),
                // The workspace may be spelled through a link (/tmp and /private/tmp on
                // macOS); this only computes a name, which is then resolved beneath.
                Err(_) => match canonical_or_lexical(path).strip_prefix(ws) {
                    Ok(rest) => rest.to_path_buf(),
                    Err(_) => {
                        return Err(ConfineError::Outside(format!(
                            "`{user}` is outside the workspace {}; the file tools only reach \
                             files inside it (give paths relative to it)",
                            ws.display()
                        )))
                    }
                },
            }
        } else {
            path.to_path_buf()
        };
        Ok(Target { policy, user, rel })
    }

    fn root(&self) -> Result<sys::Node, ConfineError> {
        sys::Node::root(&self.policy.workspace).map_err(|e| {
            ConfineError::Io(format!(
                "cannot open the workspace {}: {e}",
                self.policy.workspace.display()
            ))
        })
    }

    /// Opens the path beneath the workspace (following links that stay inside) and
    /// checks where it landed.
    fn resolve(&self) -> Result<(sys::Node, PathBuf), ConfineError> {
        let node = self
            .root()?
            .beneath(&self.rel, true)
            .map_err(|e| self.err(e))?;
        let real = self.real_path(&node)?;
        check_readable(self.policy, self.user, &real)?;
        Ok((node, real))
    }

    fn real_path(&self, node: &sys::Node) -> Result<PathBuf, ConfineError> {
        let real = node.real_path().map_err(|e| {
            ConfineError::Unsupported(format!(
                "cannot tell where `{}` resolved to ({e}); is /proc mounted?",
                self.user
            ))
        })?;
        // Cannot happen after a resolution beneath the workspace; checked because the
        // checks that follow rely on it.
        if !real.starts_with(&self.policy.workspace) {
            return Err(ConfineError::Outside(format!(
                "`{}` resolves to {}, outside the workspace",
                self.user,
                real.display()
            )));
        }
        Ok(real)
    }

    /// Opens directory `rel`, creating what is missing one level at a time, each new
    /// directory made through its confined parent and checked before it is made.
    /// The directories it made are added to `made`.
    fn open_dirs(
        &self,
        root: &sys::Node,
        rel: &Path,
        made: &mut MadeDirs,
    ) -> Result<sys::Node, ConfineError> {
        match root.beneath(rel, true) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let Some(Component::Normal(name)) = rel.components().next_back() else {
                    return Err(self.err(e));
                };
                let parent = self.open_dirs(root, rel.parent().unwrap_or(Path::new("")), made)?;
                let dir = self.real_path(&parent)?.join(name);
                check_writable(self.policy, self.user, &dir)?;
                let new = parent.mkdir(name).map_err(|e| {
                    ConfineError::Io(format!(
                        "cannot create the directory {}: {e}",
                        display(self.policy, &dir)
                    ))
                })?;
                if new {
                    // Recorded before anything else can fail.
                    if let Ok(id) = parent.child_id(name) {
                        made.dirs.push((rel.to_path_buf(), id));
                    }
                }
                // Exactly the directory just made: one component, no links.
                parent
                    .beneath(Path::new(name), false)
                    .map_err(|e| self.err(e))
            }
            other => other.map_err(|e| self.err(e)),
        }
    }

    fn expect_kind(&self, node: &sys::Node, want: EntryKind) -> Result<(), ConfineError> {
        let kind = node.kind().map_err(|e| self.err(e))?;
        let user = self.user;
        match (want, kind) {
            (EntryKind::File, EntryKind::File) | (EntryKind::Dir, EntryKind::Dir) => Ok(()),
            (EntryKind::File, EntryKind::Dir) => Err(ConfineError::Invalid(format!(
                "`{user}` is a directory, not a file (list_dir shows what it holds)"
            ))),
            (EntryKind::Dir, _) => Err(ConfineError::Invalid(format!(
                "`{user}` is not a directory"
            ))),
            _ => Err(ConfineError::Invalid(format!(
                "`{user}` is not a regular file (a device, socket or pipe)"
            ))),
        }
    }

    /// What an errno from resolving or opening this path means, in words.
    fn err(&self, e: io::Error) -> ConfineError {
        let user = self.user;
        let ws = self.policy.workspace.display();
        match e.raw_os_error() {
            Some(libc::EXDEV) => ConfineError::Outside(format!(
                "`{user}` leads outside the workspace {ws} (through `..`, an absolute \
                 symbolic link, or a link pointing out of it); the file tools only reach \
                 files inside the workspace"
            )),
            Some(libc::ELOOP) => ConfineError::Invalid(format!(
                "`{user}`: too many levels of symbolic links, or a link the file tools do \
                 not follow here"
            )),
            // Missing on the way out of the workspace (`new/../../x`): the way out is what
            // is wrong with it.
            Some(libc::ENOENT) if climbs_out(Path::new(user)) => ConfineError::Outside(format!(
                "`{user}` leads outside the workspace {ws} (through `..`); the file tools \
                 only reach files inside the workspace"
            )),
            Some(libc::ENOENT) => ConfineError::NotFound(format!(
                "`{user}` does not exist (relative paths start at the workspace {ws})"
            )),
            Some(libc::ENOTDIR) => ConfineError::NotFound(format!(
                "`{user}` does not exist: a component of the path is not a directory"
            )),
            Some(libc::EISDIR) => ConfineError::Invalid(format!("`{user}` is a directory")),
            Some(libc::ENXIO) => ConfineError::Invalid(format!(
                "`{user}` is not a regular file (a device, socket or pipe)"
            )),
            Some(libc::EACCES | libc::EPERM) => {
                ConfineError::Io(format!("`{user}`: permission denied"))
            }
            Some(libc::ENOSYS) => ConfineError::Unsupported(format!(
                "cannot open `{user}` safely: this kernel lacks openat2(2) (Linux 5.6 or \
                 newer is needed), and the file tools refuse to resolve paths without it; \
                 use execute_bash, which runs in the sandbox"
            )),
            _ => ConfineError::Io(format!("`{user}`: {e}")),
        }
    }
}

/// Credential locations are never read (nor written, nor listed).
fn check_readable(policy: &Policy, user: &str, real: &Path) -> Result<(), ConfineError> {
    match policy.deny_read.iter().find(|d| real.starts_with(d)) {
        Some(denied) => Err(ConfineError::Credential(format!(
            "`{user}` is in the credential location {}, which chitti keeps unreadable",
            denied.display()
        ))),
        None => Ok(()),
    }
}

/// Paths whose change would run code outside the sandbox or break its guarantees.
fn check_protected(policy: &Policy, user: &str, path: &Path) -> Result<(), ConfineError> {
    let inside = path.strip_prefix(&policy.workspace).unwrap_or(path);
    let in_git_dir = inside
        .components()
        .any(|c| matches!(c, Component::Normal(n) if n.eq_ignore_ascii_case(".git")));
    if in_git_dir {
        return Err(ConfineError::Protected(format!(
            "`{user}` is inside a git directory: its hooks and config run code outside the \
             sandbox the next time git runs, so the file tools never write there (run git \
             through execute_bash instead)"
        )));
    }
    // A pinned directory that holds the workspace (a workspace inside another writable
    // root) is pinned only against being moved; what is in it is the workspace's.
    if let Some(p) = policy
        .read_only
        .iter()
        .chain(&policy.pinned)
        .chain(&policy.absent)
        .filter(|p| !policy.workspace.starts_with(p))
        .find(|p| path.starts_with(p))
    {
        return Err(ConfineError::Protected(format!(
            "`{user}` is under the protected path {}, which stays read-only",
            p.display()
        )));
    }
    Ok(())
}

fn check_writable(policy: &Policy, user: &str, real: &Path) -> Result<(), ConfineError> {
    check_readable(policy, user, real)?;
    check_protected(policy, user, real)?;
    if !policy.is_writable(real) {
        return Err(ConfineError::Protected(format!(
            "`{user}` is not in a writable part of the workspace"
        )));
    }
    Ok(())
}

/// Whether a relative path, by its spelling alone, climbs above where it starts (`a/../..`);
/// only used to say why a path was refused, never to open.
fn climbs_out(path: &Path) -> bool {
    let mut depth: usize = 0;
    for c in path.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir if depth == 0 => return true,
            Component::ParentDir => depth -= 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    false
}

/// `.` and `..` removed by spelling alone; only used to refuse early, never to open.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(target_os = "linux")]
mod sys {
    //! openat2(2) beneath a directory descriptor; nothing is looked up by name twice.

    use std::ffi::OsStr;
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
    use std::path::{Path, PathBuf};

    use nix::errno::Errno;
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    use nix::sys::stat::{fstat, mkdirat, Mode};

    use super::{Entry, EntryKind, WriteMode};

    /// How often to retry when the kernel reports a concurrent rename or mount (EAGAIN).
    const RETRIES: usize = 32;

    /// An `O_PATH` descriptor: it names an object without opening it, so resolving a
    /// FIFO or a device has no side effect, and it anchors further lookups.
    #[derive(Debug)]
    pub struct Node(OwnedFd);

    impl Node {
        pub fn root(dir: &Path) -> io::Result<Node> {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            Ok(Node(nix::fcntl::open(dir, flags, Mode::empty())?))
        }

        /// `rel` resolved by the kernel without leaving this directory; with
        /// `follow_links` false no symlink at all is followed.
        pub fn beneath(&self, rel: &Path, follow_links: bool) -> io::Result<Node> {
            let rel = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel
            };
            let mut resolve = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS;
            if !follow_links {
                resolve |= ResolveFlag::RESOLVE_NO_SYMLINKS;
            }
            let how = OpenHow::new()
                .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
                .resolve(resolve);
            let mut tries = 0;
            loop {
                match openat2(&self.0, rel, how) {
                    // The kernel could not rule out an escape through a concurrent
                    // rename and asks to retry; it never guesses.
                    Err(Errno::EAGAIN) if tries < RETRIES => tries += 1,
                    other => return Ok(Node(other?)),
                }
            }
        }

        /// Where the object is now, from the kernel's record of the open descriptor.
        pub fn real_path(&self) -> io::Result<PathBuf> {
            let path = PathBuf::from(nix::fcntl::readlink(&self.proc_path())?);
            if path.is_absolute() {
                Ok(path)
            } else {
                Err(io::Error::other(format!(
                    "unexpected descriptor link {}",
                    path.display()
                )))
            }
        }

        pub fn kind(&self) -> io::Result<EntryKind> {
            Ok(kind_of(fstat(&self.0)?.st_mode))
        }

        /// Opens the very object this descriptor names, for reading: its /proc link
        /// leads to the object, not to a path looked up again.
        pub fn open_read(&self) -> io::Result<File> {
            self.reopen(OFlag::O_RDONLY)
        }

        /// Opens the very object this descriptor names with `access` (see `open_read`).
        fn reopen(&self, access: OFlag) -> io::Result<File> {
            // O_NONBLOCK: a lease a sandboxed process took on the file fails the open at
            // once instead of holding it for the lease-break time.
            let flags = access | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
            let fd = nix::fcntl::open(&self.proc_path(), flags, Mode::empty())?;
            let (a, b) = (fstat(&self.0)?, fstat(&fd)?);
            if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
                return Err(io::Error::other(
                    "reopening through /proc gave a different file; is /proc procfs?",
                ));
            }
            Ok(File::from(fd))
        }

        /// The first `keep` entries by name, and how many there are.
        pub fn entries(&self, keep: usize) -> io::Result<(Vec<Entry>, usize)> {
            super::listing(std::fs::read_dir(self.proc_path())?, keep)
        }

        /// Makes directory `name` here; one that appeared meanwhile is fine. Whether
        /// this call made it.
        pub fn mkdir(&self, name: &OsStr) -> io::Result<bool> {
            match mkdirat(&self.0, name, Mode::from_bits_truncate(0o777)) {
                Ok(()) => Ok(true),
                Err(Errno::EEXIST) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }

        /// The device and inode of entry `name` here (a link itself, not followed).
        pub fn child_id(&self, name: &OsStr) -> io::Result<(u64, u64)> {
            let st =
                nix::sys::stat::fstatat(&self.0, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
            Ok((st.st_dev as u64, st.st_ino as u64))
        }

        /// Opens file `name` in this directory, never through a link, and an existing one
        /// only once it is known to be a regular file: opening a device can act on the
        /// device, and a FIFO would be opened for writing. Returns whether it was created.
        pub fn open_file(&self, name: &OsStr, mode: WriteMode) -> io::Result<(File, bool)> {
            if let WriteMode::Create { .. } = mode {
                let flags = OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC;
                match nix::fcntl::openat(&self.0, name, flags, Mode::from_bits_truncate(0o666)) {
                    Ok(fd) => return Ok((File::from(fd), true)),
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // Named first (O_PATH opens nothing), then opened through that very name.
            let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let existing = Node(nix::fcntl::openat(&self.0, name, flags, Mode::empty())?);
            let st = fstat(&existing.0)?;
            if let Some(errno) = super::write_refusal(kind_of(st.st_mode), st.st_nlink > 1) {
                return Err(io::Error::from_raw_os_error(errno));
            }
            let access = match mode {
                WriteMode::Existing => OFlag::O_RDWR,
                WriteMode::Create { .. } => OFlag::O_WRONLY,
            };
            Ok((existing.reopen(access)?, false))
        }

        /// This directory's descriptor, for the `*at` calls of a replacement.
        pub fn dir_fd(&self) -> io::Result<BorrowedFd<'_>> {
            Ok(self.0.as_fd())
        }

        fn proc_path(&self) -> PathBuf {
            PathBuf::from(format!("/proc/self/fd/{}", self.0.as_raw_fd()))
        }
    }

    fn kind_of(mode: libc::mode_t) -> EntryKind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => EntryKind::File,
            libc::S_IFDIR => EntryKind::Dir,
            libc::S_IFLNK => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    //! Fallback for systems without openat2(2) (macOS): a path is canonicalised, checked
    //! to lie beneath the directory, and then opened by that canonical path. Between the
    //! check and the open, a symlink swapped into one of its directories can redirect the
    //! open elsewhere (a TOCTOU race); only the last component is protected, by
    //! `O_NOFOLLOW`. Exploiting it needs a process racing the tool — a sandboxed command
    //! still running in the background — so on these systems the guarantee is weaker
    //! than on Linux.

    use std::ffi::OsStr;
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use super::{Entry, EntryKind, WriteMode};

    /// A canonical path, and once a file in it is opened for writing, a descriptor of it
    /// (a replacement is then written where the file was opened, not looked up again).
    #[derive(Debug)]
    pub struct Node(PathBuf, OnceLock<OwnedFd>);

    impl Node {
        pub fn root(dir: &Path) -> io::Result<Node> {
            Ok(Node(dir.canonicalize()?, OnceLock::new()))
        }

        pub fn beneath(&self, rel: &Path, follow_links: bool) -> io::Result<Node> {
            let joined = self.0.join(rel);
            if !follow_links && std::fs::symlink_metadata(&joined)?.file_type().is_symlink() {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            let real = joined.canonicalize()?;
            if !real.starts_with(&self.0) {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
            Ok(Node(real, OnceLock::new()))
        }

        pub fn real_path(&self) -> io::Result<PathBuf> {
            Ok(self.0.clone())
        }

        pub fn kind(&self) -> io::Result<EntryKind> {
            Ok(std::fs::symlink_metadata(&self.0)?.file_type().into())
        }

        pub fn open_read(&self) -> io::Result<File> {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&self.0)
        }

        /// The first `keep` entries by name, and how many there are.
        pub fn entries(&self, keep: usize) -> io::Result<(Vec<Entry>, usize)> {
            super::listing(std::fs::read_dir(&self.0)?, keep)
        }

        pub fn mkdir(&self, name: &OsStr) -> io::Result<bool> {
            match std::fs::create_dir(self.0.join(name)) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        }

        pub fn child_id(&self, name: &OsStr) -> io::Result<(u64, u64)> {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::symlink_metadata(self.0.join(name))?;
            Ok((meta.dev(), meta.ino()))
        }

        pub fn open_file(&self, name: &OsStr, mode: WriteMode) -> io::Result<(File, bool)> {
            // Taken now: a replacement is written in the directory the file was opened in.
            self.dir_fd()?;
            let path = self.0.join(name);
            let mut options = OpenOptions::new();
            options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
            match mode {
                WriteMode::Existing => {
                    refuse_non_files(&path)?;
                    Ok((options.read(true).write(true).open(&path)?, false))
                }
                WriteMode::Create { .. } => {
                    match options.clone().write(true).create_new(true).open(&path) {
                        Ok(file) => Ok((file, true)),
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                            refuse_non_files(&path)?;
                            Ok((options.write(true).open(&path)?, false))
                        }
                        Err(e) => Err(e),
                    }
                }
            }
        }

        /// This directory's descriptor, opened the first time it is asked for.
        pub fn dir_fd(&self) -> io::Result<BorrowedFd<'_>> {
            if let Some(fd) = self.1.get() {
                return Ok(fd.as_fd());
            }
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            let dir = OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(&self.0)?;
            Ok(self.1.get_or_init(|| OwnedFd::from(dir)).as_fd())
        }
    }

    /// An existing non-file, or a file with other names, is refused before it is opened
    /// (checked by path: see the module comment for the race this leaves here).
    fn refuse_non_files(path: &Path) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path)?;
        match super::write_refusal(meta.file_type().into(), meta.nlink() > 1) {
            None => Ok(()),
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::tools::testing::Fixture;

    fn read(fx: &Fixture, path: &str) -> Result<String, ConfineError> {
        let mut opened = open_read(&fx.policy, path)?;
        let mut text = String::new();
        opened.file.read_to_string(&mut text).unwrap();
        Ok(text)
    }

    fn write(fx: &Fixture, path: &str) -> Result<Writable, ConfineError> {
        open_write(&fx.policy, path, WriteMode::Create { parents: true })
    }

    #[test]
    fn relative_and_absolute_paths_inside() {
        let fx = Fixture::new();
        std::fs::create_dir(fx.ws.join("sub")).unwrap();
        std::fs::write(fx.ws.join("sub/a.txt"), "inside").unwrap();
        assert_eq!(read(&fx, "sub/a.txt").unwrap(), "inside");
        assert_eq!(read(&fx, "./sub/../sub/a.txt").unwrap(), "inside");
        let abs = fx.ws.join("sub/a.txt");
        assert_eq!(read(&fx, abs.to_str().unwrap()).unwrap(), "inside");
        // A link that stays inside is followed.
        std::os::unix::fs::symlink("sub/a.txt", fx.ws.join("link")).unwrap();
        let opened = open_read(&fx.policy, "link").unwrap();
        assert_eq!(opened.path, fx.ws.join("sub/a.txt"));
        assert_eq!(display(&fx.policy, &opened.path), "sub/a.txt");
    }

    #[test]
    fn dot_dot_escape_is_refused() {
        let fx = Fixture::new();
        std::fs::write(fx.outside.join("secret"), "host").unwrap();
        std::fs::create_dir(fx.ws.join("sub")).unwrap();
        for path in [
            "../outside/secret",
            "sub/../../outside/secret",
            "../../home/outside",
        ] {
            let err = read(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "outside_workspace", "{path}: {err}");
        }
        let sneaky = format!("{}/../outside/secret", fx.ws.display());
        assert_eq!(read(&fx, &sneaky).unwrap_err().kind(), "outside_workspace");
        let err = write(&fx, "../outside/new").unwrap_err();
        assert_eq!(err.kind(), "outside_workspace", "{err}");
        assert!(!fx.outside.join("new").exists());
        // Through a directory that does not exist yet: still outside, not "not found".
        for path in ["new/../../escape", "new/deeper/../../../escape"] {
            let err = write(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "outside_workspace", "{path}: {err}");
            let err = read(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "outside_workspace", "{path}: {err}");
        }
        assert!(!fx.ws.join("new").exists() && !fx.home.join("escape").exists());
    }

    #[test]
    fn absolute_path_outside_is_refused() {
        let fx = Fixture::new();
        std::fs::write(fx.outside.join("secret"), "host").unwrap();
        let path = fx.outside.join("secret");
        let err = read(&fx, path.to_str().unwrap()).unwrap_err();
        assert_eq!(err.kind(), "outside_workspace");
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        assert_eq!(
            read(&fx, "/etc/passwd").unwrap_err().kind(),
            "outside_workspace"
        );
        let target = fx.outside.join("new");
        let err = write(&fx, target.to_str().unwrap()).unwrap_err();
        assert_eq!(err.kind(), "outside_workspace");
        assert!(!target.exists());
    }

    #[test]
    fn symlink_pointing_outside_is_refused_for_read_and_write() {
        let fx = Fixture::new();
        std::fs::write(fx.outside.join("secret"), "host").unwrap();
        let link =
            |name: &str, to: &Path| std::os::unix::fs::symlink(to, fx.ws.join(name)).unwrap();
        link("abs", &fx.outside.join("secret"));
        link("rel", Path::new("../outside/secret"));
        link("dir", &fx.outside);
        link("reldir", Path::new("../outside"));
        link("dangling", &fx.outside.join("created-through-link"));
        for path in ["abs", "rel", "dir/secret", "reldir/secret"] {
            let err = read(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "outside_workspace", "{path}: {err}");
        }
        assert_eq!(
            read_dir(&fx.policy, "dir", 10).unwrap_err().kind(),
            "outside_workspace"
        );
        // Writing through a link is refused even where the link points: the final
        // component is never followed, a linked parent never leaves the workspace.
        for path in ["abs", "rel", "dangling"] {
            let err = write(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "invalid_path", "{path}: {err}");
            assert!(err.to_string().contains("symbolic link"), "{err}");
        }
        for path in ["dir/new", "reldir/new", "dir/deeper/new"] {
            let err = write(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "outside_workspace", "{path}: {err}");
        }
        assert_eq!(
            std::fs::read_to_string(fx.outside.join("secret")).unwrap(),
            "host"
        );
        let left: Vec<_> = std::fs::read_dir(&fx.outside).unwrap().collect();
        assert_eq!(left.len(), 1, "something was created outside: {left:?}");
    }

    /// A symlink flipped between a directory inside and one outside, while the tools run:
    /// no read may return the outside file, no write may land outside.
    #[test]
    fn symlink_swapped_during_operation_cannot_escape() {
        let fx = Fixture::new();
        std::fs::create_dir(fx.ws.join("real")).unwrap();
        std::fs::write(fx.ws.join("real/f"), "inside").unwrap();
        std::fs::write(fx.outside.join("f"), "host").unwrap();
        std::os::unix::fs::symlink("real", fx.ws.join("flip")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipper = {
            let (ws, outside, stop) = (fx.ws.clone(), fx.outside.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let tmp = ws.join(format!("tmp-{i}"));
                    // Inside: a relative link (absolute ones are never followed).
                    let to = if i.is_multiple_of(2) {
                        outside.clone()
                    } else {
                        PathBuf::from("real")
                    };
                    std::os::unix::fs::symlink(&to, &tmp).unwrap();
                    std::fs::rename(&tmp, ws.join("flip")).unwrap();
                    i += 1;
                }
            })
        };
        let mut inside_reads = 0;
        for i in 0..2000 {
            if let Ok(text) = read(&fx, "flip/f") {
                assert_eq!(text, "inside");
                inside_reads += 1;
            }
            let _ = write(&fx, &format!("flip/w{i}"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flipper.join().unwrap();
        let outside: Vec<_> = std::fs::read_dir(&fx.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(outside, [OsString::from("f")], "a write escaped");
        assert_eq!(
            std::fs::read_to_string(fx.outside.join("f")).unwrap(),
            "host"
        );
        assert!(inside_reads > 0, "the link never pointed inside when read");
    }

    #[test]
    fn credential_paths_are_refused() {
        let mut fx = Fixture::new();
        std::fs::create_dir(fx.ws.join("secrets")).unwrap();
        std::fs::write(fx.ws.join("secrets/key"), "k").unwrap();
        std::fs::write(fx.ws.join("token.txt"), "t").unwrap();
        std::os::unix::fs::symlink("secrets/key", fx.ws.join("innocent")).unwrap();
        fx.deny_read(&["secrets", "token.txt"]);
        for path in [
            "secrets/key",
            "token.txt",
            "innocent",
            "./secrets/../token.txt",
        ] {
            let err = read(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "credential_path", "{path}: {err}");
        }
        assert_eq!(
            read_dir(&fx.policy, "secrets", 10).unwrap_err().kind(),
            "credential_path"
        );
        assert_eq!(
            write(&fx, "secrets/new").unwrap_err().kind(),
            "credential_path"
        );
        assert!(!fx.ws.join("secrets/new").exists());
        // The home's credential directory is outside the workspace in the first place.
        let ssh = fx.home.join(".ssh/id_ed25519");
        assert_eq!(
            read(&fx, ssh.to_str().unwrap()).unwrap_err().kind(),
            "outside_workspace"
        );
    }

    #[test]
    fn git_internals_and_protected_paths_are_not_written() {
        let fx = Fixture::new();
        for path in [
            ".git/hooks/pre-commit",
            ".git/config",
            ".git/hooks/new-dir/x",
            "sub/.git/hooks/post-checkout",
            "vendor/dep/.git/config",
            ".GIT/config",
            "a/../.git/hooks/pre-push",
        ] {
            let err = write(&fx, path).unwrap_err();
            assert_eq!(err.kind(), "protected_path", "{path}: {err}");
        }
        assert!(
            !fx.ws.join("sub").exists(),
            "directories created for a refused write"
        );
        assert!(!fx.ws.join(".git/hooks/new-dir").exists());
        assert!(!fx.ws.join(".git/hooks/pre-commit").exists());
        // Through a link inside the workspace: refused on the resolved path.
        std::os::unix::fs::symlink(".git/hooks", fx.ws.join("hooks")).unwrap();
        assert_eq!(
            write(&fx, "hooks/pre-commit").unwrap_err().kind(),
            "protected_path"
        );
        assert!(!fx.ws.join(".git/hooks/pre-commit").exists());
        // Reading them is fine.
        assert!(read(&fx, ".git/config").is_ok());
    }

    /// A protected path that must stay absent (a profile's, not there yet) is not made,
    /// nor anything beneath it.
    #[test]
    fn a_protected_path_that_must_stay_absent_is_not_made() {
        let fx = Fixture::new();
        let mut policy = (*fx.policy).clone();
        policy
            .absent
            .extend([fx.ws.join(".envrc"), fx.ws.join("later")]);
        for path in [".envrc", "later/x"] {
            let err = open_write(&policy, path, WriteMode::Create { parents: true }).unwrap_err();
            assert_eq!(err.kind(), "protected_path", "{path}: {err}");
            assert!(err.to_string().contains("protected path"), "{err}");
        }
        assert!(!fx.ws.join(".envrc").exists() && !fx.ws.join("later").exists());
    }

    #[test]
    fn read_only_profile_refuses_writes() {
        let fx = Fixture::with_profile("read-only", |_| {});
        std::fs::write(fx.ws.join("a.txt"), "x").unwrap();
        let err = write(&fx, "a.txt").unwrap_err();
        assert_eq!(err.kind(), "protected_path");
        assert!(err.to_string().contains("read-only"), "{err}");
        let err = open_write(&fx.policy, "a.txt", WriteMode::Existing).unwrap_err();
        assert_eq!(err.kind(), "protected_path");
        assert_eq!(read(&fx, "a.txt").unwrap(), "x");
    }

    #[test]
    fn writes_create_parents_beneath_the_workspace() {
        let fx = Fixture::new();
        let opened = write(&fx, "a/b/c.txt").unwrap();
        assert!(opened.created);
        assert_eq!(opened.path, fx.ws.join("a/b/c.txt"));
        assert!(fx.ws.join("a/b").is_dir());
        let again = write(&fx, "a/b/c.txt").unwrap();
        assert!(!again.created);
        let err =
            open_write(&fx.policy, "x/y.txt", WriteMode::Create { parents: false }).unwrap_err();
        assert_eq!(err.kind(), "not_found", "{err}");
        for path in [".", "a/..", ""] {
            assert_eq!(
                write(&fx, path).unwrap_err().kind(),
                "invalid_path",
                "{path}"
            );
        }
        assert_eq!(write(&fx, "a").unwrap_err().kind(), "invalid_path");
    }

    #[test]
    fn a_file_with_other_names_is_never_written() {
        let fx = Fixture::new();
        std::fs::create_dir_all(fx.ws.join(".git")).unwrap();
        std::fs::write(fx.ws.join(".git/config"), "[core]\n").unwrap();
        // What a sandboxed command can do on landlock, where the workspace grants linking.
        std::fs::hard_link(fx.ws.join(".git/config"), fx.ws.join("cfg")).unwrap();
        for mode in [WriteMode::Existing, WriteMode::Create { parents: false }] {
            let err = open_write(&fx.policy, "cfg", mode).unwrap_err();
            assert_eq!(err.kind(), "protected_path", "{err}");
            assert!(err.to_string().contains("has other names"), "{err}");
        }
        assert_eq!(
            std::fs::read_to_string(fx.ws.join(".git/config")).unwrap(),
            "[core]\n",
            "truncated through its other name"
        );
        // Reading it is fine; so is writing once it has one name again.
        assert_eq!(read(&fx, "cfg").unwrap(), "[core]\n");
        std::fs::remove_file(fx.ws.join(".git/config")).unwrap();
        assert!(write(&fx, "cfg").is_ok());
    }

    #[test]
    fn an_overlong_path_is_refused_before_any_work() {
        let fx = Fixture::new();
        let long = "/x".repeat(1 << 20);
        for err in [
            open_read(&fx.policy, &long).err().unwrap(),
            write(&fx, &long).err().unwrap(),
            read_dir(&fx.policy, &long, 10).err().unwrap(),
        ] {
            assert_eq!(err.kind(), "invalid_path", "{err}");
            assert!(err.to_string().contains("at most 4096 bytes"), "{err}");
        }
        let fits = format!("{}/{}", fx.ws.display(), "a".repeat(200));
        assert_eq!(write(&fx, &fits).unwrap().path, fx.ws.join("a".repeat(200)));
    }

    #[test]
    fn only_the_first_entries_by_name_are_kept() {
        let names = ["d", "b", "e", "a", "c"];
        let entries = names.iter().map(|n| {
            Ok(Entry {
                name: OsString::from(n),
                kind: EntryKind::File,
            })
        });
        let (kept, total) = first_by_name(entries, 3).unwrap();
        let kept: Vec<_> = kept.iter().map(|e| e.name.to_str().unwrap()).collect();
        assert_eq!((kept, total), (vec!["a", "b", "c"], 5));
        let none = std::iter::empty();
        assert_eq!(first_by_name(none, 3).unwrap().1, 0);
    }

    #[test]
    fn kinds_are_checked() {
        let fx = Fixture::new();
        std::fs::create_dir(fx.ws.join("d")).unwrap();
        std::fs::write(fx.ws.join("f"), "").unwrap();
        assert_eq!(read(&fx, "d").unwrap_err().kind(), "invalid_path");
        assert_eq!(read(&fx, "missing").unwrap_err().kind(), "not_found");
        assert_eq!(
            read_dir(&fx.policy, "f", 10).unwrap_err().kind(),
            "invalid_path"
        );
        assert_eq!(resolve_dir(&fx.policy, "d").unwrap(), fx.ws.join("d"));
        assert_eq!(resolve_dir(&fx.policy, "").unwrap(), fx.ws);
        nix::unistd::mkfifo(&fx.ws.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(read(&fx, "fifo").unwrap_err().kind(), "invalid_path");
        assert_eq!(write(&fx, "fifo").unwrap_err().kind(), "invalid_path");
    }

    /// Every file closed after being opened for writing in `dir` since `watch` was made
    /// (inotify's IN_CLOSE_WRITE, which an `O_PATH` descriptor never causes).
    #[cfg(target_os = "linux")]
    fn closed_after_writing(watch: &std::os::fd::OwnedFd) -> Vec<String> {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 4096];
        let n = unsafe { libc::read(watch.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        let mut names = Vec::new();
        let mut at = 0;
        while n > 0 && at < n as usize {
            let header = std::mem::size_of::<libc::inotify_event>();
            let event: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            let name = &buf[at + header..at + header + event.len as usize];
            let name = name.split(|b| *b == 0).next().unwrap_or_default();
            names.push(String::from_utf8_lossy(name).into_owned());
            at += header + event.len as usize;
        }
        names
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn writes_never_open_what_is_not_a_regular_file() {
        use std::os::fd::{FromRawFd, OwnedFd};
        let fx = Fixture::new();
        nix::unistd::mkfifo(&fx.ws.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // A device only root can make: a copy of /dev/null (char 1:3).
        let dev = std::ffi::CString::new(fx.ws.join("null").into_os_string().into_encoded_bytes())
            .unwrap();
        let made_device =
            unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0;
        if !made_device {
            eprintln!("note: mknod refused (not root): only the FIFO is checked here");
        }
        let watch = unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0);
            OwnedFd::from_raw_fd(fd)
        };
        let ws =
            std::ffi::CString::new(fx.ws.clone().into_os_string().into_encoded_bytes()).unwrap();
        let added = unsafe {
            libc::inotify_add_watch(
                std::os::fd::AsRawFd::as_raw_fd(&watch),
                ws.as_ptr(),
                libc::IN_CLOSE_WRITE,
            )
        };
        assert!(added >= 0);
        let mut names = vec!["fifo"];
        if made_device {
            names.push("null");
        }
        for name in names {
            for mode in [WriteMode::Existing, WriteMode::Create { parents: false }] {
                let err = open_write(&fx.policy, name, mode).unwrap_err();
                assert_eq!(err.kind(), "invalid_path", "{name}: {err}");
                assert!(err.to_string().contains("not a regular file"), "{err}");
            }
        }
        assert_eq!(closed_after_writing(&watch), Vec::<String>::new());
        // The watch does see a write that happens.
        write(&fx, "a.txt").unwrap();
        assert_eq!(closed_after_writing(&watch), vec!["a.txt".to_string()]);
    }
}
