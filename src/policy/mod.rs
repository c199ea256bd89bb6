//! A profile plus the call's inputs (workspace, overrides) becomes a [`Policy`] once:
//! absolute, canonical paths that backends turn into their own arguments.

pub mod credentials;
pub mod env;
pub mod git;
// Only Linux has a mount table to look in; the parsing is tested everywhere.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod mount_aliases;
mod probe;
pub mod profile;
mod workspace;

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::canonical::canonicalize;

pub use profile::{Limits, Profile};

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{0}")]
    Profile(String),
    #[error("{0}")]
    Workspace(String),
    #[error("{0}")]
    Path(String),
}

/// Where chitti keeps its own files. Both are unreadable inside the sandbox.
#[derive(Debug, Clone)]
pub struct ChittiDirs {
    pub home: PathBuf,
    /// API keys and user profiles (`~/.config/chitti`).
    pub config: PathBuf,
    /// Event logs (`~/.local/state/chitti`).
    pub state: PathBuf,
    /// The user's home in the user database, when `HOME` names another directory: its
    /// credentials are hidden too (a client that starts chitti with a different HOME
    /// must not uncover the real ~/.ssh).
    pub user_home: Option<PathBuf>,
    /// Credential locations the environment names (`credentials::named_by_environment`),
    /// read when chitti starts.
    pub named_by_environment: Vec<PathBuf>,
}

impl ChittiDirs {
    /// From `HOME`, `XDG_CONFIG_HOME` and `XDG_STATE_HOME`, falling back to the passwd entry.
    pub fn from_env() -> Result<Self, PolicyError> {
        let from_passwd = home_from_passwd();
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| from_passwd.clone())
            .ok_or_else(|| {
                PolicyError::Path("cannot tell the home directory: set HOME".to_string())
            })?;
        if !home.is_absolute() {
            return Err(PolicyError::Path(format!(
                "HOME is `{}`, which is not an absolute path; set HOME to your home directory",
                home.display()
            )));
        }
        let user_home = from_passwd.filter(|h| *h != home && h.is_absolute());
        let xdg = |var: &str, default: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| home.join(default))
        };
        Ok(ChittiDirs {
            config: xdg("XDG_CONFIG_HOME", ".config").join("chitti"),
            state: xdg("XDG_STATE_HOME", ".local/state").join("chitti"),
            named_by_environment: credentials::named_by_environment(&home, |name| {
                std::env::var_os(name)
            }),
            home,
            user_home,
        })
    }

    pub fn user_profiles(&self) -> PathBuf {
        self.config.join("profiles")
    }
}

/// The calling user's home directory from the user database: /etc/passwd, read here, and
/// the C library's lookup for a user that /etc/passwd does not list (musl asks nscd;
/// a static glibc has `files` only, see `name_service`). Reading the file here rather
/// than through `getpwuid` spares every call musl's stdio buffers, which its allocator
/// maps and unmaps again (two `munmap`s, each a TLB flush).
fn home_from_passwd() -> Option<PathBuf> {
    let uid = nix::unistd::getuid();
    if let Some(home) = std::fs::read("/etc/passwd")
        .ok()
        .and_then(|text| passwd_home(&text, uid.as_raw()))
    {
        return Some(home);
    }
    crate::name_service::builtin_sources_only();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.dir)
}

/// The home directory (sixth field) of the first /etc/passwd line whose third field is
/// `uid`, as the C library's `files` source reads it: `name:password:uid:gid:gecos:dir:shell`.
fn passwd_home(passwd: &[u8], uid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let uid = uid.to_string();
    passwd.split(|b| *b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|b| *b == b':').collect();
        (fields.len() == 7 && fields[2] == uid.as_bytes())
            .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(fields[5])))
    })
}

/// What the caller asks for, on top of the profile.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub extra_writable: Vec<PathBuf>,
    pub network: Option<bool>,
    pub timeout: Option<Duration>,
}

/// What a policy is resolved from. Long-lived sessions (`chat`, `mcp`) keep it and
/// resolve the policy again for every call (0.15-0.3 ms here, nearly all of it the
/// credential search), so that a credential directory or a repository that appears
/// mid-session is covered like one that existed at start.
#[derive(Debug, Clone)]
pub struct PolicySource {
    pub profile: Profile,
    pub workspace: PathBuf,
    pub overrides: Overrides,
    pub dirs: ChittiDirs,
    /// The caller's whole environment; the allow-list filters it at each resolution.
    pub env: Vec<(OsString, OsString)>,
}

impl PolicySource {
    pub fn resolve(&self) -> Result<Policy, PolicyError> {
        Policy::resolve(
            &self.profile,
            &self.workspace,
            &self.overrides,
            &self.dirs,
            self.env.iter().cloned(),
        )
    }

    /// [`Self::resolve`] but for the credential locations: the policy's `deny_read` is
    /// empty until the search fills it. Only for `sandbox::prepare_the_only_call`, which
    /// runs the search before anything reads the list, or has chitti run it after the
    /// fork (see [`CredentialSearch`]).
    pub fn resolve_without_credentials(&self) -> Result<(Policy, CredentialSearch), PolicyError> {
        Policy::resolve_parts(
            &self.profile,
            &self.workspace,
            &self.overrides,
            &self.dirs,
            self.env.iter().cloned(),
        )
    }
}

/// Which credential locations a call must keep unreadable, and where they really are:
/// some forty paths looked at on every call (about 0.1 ms), the part of a policy that
/// depends on what exists right now. Resolved on its own so that a Landlock call started
/// by root may look them up after the supervisor's fork, while the command starts: only
/// its masks need them, and the command runs nothing before they are in place.
#[derive(Debug, Clone)]
pub struct CredentialSearch {
    profile: String,
    /// The profile's own `deny_read` entries, expanded (globs not yet).
    entries: Vec<PathBuf>,
    dirs: ChittiDirs,
    /// The canonical home.
    home: PathBuf,
    writable: Vec<PathBuf>,
}

/// At most this many link targets are added to the hidden paths per call (see
/// `credentials::links_within`).
const MAX_LINK_TARGETS: usize = 256;

/// What a [`CredentialSearch`] found: the policy's `deny_read` and `deny_read_by_inode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    pub paths: Vec<PathBuf>,
    pub by_inode: bool,
}

impl Policy {
    /// Takes what a [`CredentialSearch`] found.
    pub fn hide(&mut self, hidden: Hidden) {
        self.deny_read = hidden.paths;
        self.deny_read_by_inode = hidden.by_inode;
    }
}

impl CredentialSearch {
    /// The canonical paths that exist and must be unreadable, under every name. Fails if
    /// a writable root lies in a credential location or holds one, or an entry cannot be
    /// expanded.
    pub fn run(&self) -> Result<Hidden, PolicyError> {
        let (dirs, home, writable) = (&self.dirs, &self.home, &self.writable);
        // Only what exists is hidden, and a call may make chitti's state directory (the
        // protected paths' shared record): made now, it is hidden from this call too.
        if std::fs::symlink_metadata(&dirs.state).is_err() {
            let _ = make_own_dir(&dirs.state);
        }
        // chitti's own directories where this environment puts them, and where they are
        // without it (a client may start chitti without the user's XDG variables).
        let mut own = vec![dirs.config.clone(), dirs.state.clone()];
        for default in [".config/chitti", ".local/state/chitti"].map(|d| dirs.home.join(d)) {
            if !own.contains(&default) {
                own.push(default);
            }
        }
        let mut deny_candidates = credentials::builtin(&dirs.home, &own);
        // Only what is there as this call starts: these places may lie in a workspace (a
        // `CARGO_HOME` in the project, say), where a location not there yet would refuse
        // every call, though it holds nothing to read.
        deny_candidates.extend(
            dirs.named_by_environment
                .iter()
                .filter(|path| std::fs::symlink_metadata(path).is_ok())
                .cloned(),
        );
        if let Some(user_home) = &dirs.user_home {
            let own = [".config/chitti", ".local/state/chitti"].map(|d| user_home.join(d));
            deny_candidates.extend(credentials::builtin(user_home, &own));
        }
        let mut prober = probe::Prober::new(&dirs.home, home);
        let root_only = deny_candidates.len(); // from here, root's own: canonical, existing
        if nix::unistd::geteuid().is_root() {
            for path in credentials::ROOT_ONLY {
                // Only what exists: the backends need not cover files root never had.
                let mut found = Vec::new();
                credentials::expand_into(Path::new(path), &mut found);
                deny_candidates.extend(found.iter().filter_map(|p| prober.resolve_existing(p)));
            }
        }
        let from_profile = deny_candidates.len(); // the rest came from `deny_read`
        for path in &self.entries {
            credentials::expand_into(path, &mut deny_candidates);
        }
        let mut deny_read = Vec::new();
        // Every location, there or not yet, for the writable roots' check by inode below.
        let mut locations = Vec::with_capacity(deny_candidates.len());
        // Links inside hidden directories (a dotfiles manager's, one per file, where the
        // directory itself is real) lead to the secret under another name: their targets
        // are hidden too, appended here and looked at as the home's entries are.
        let link_targets_from = deny_candidates.len();
        for index in 0.. {
            // As its components: `link/` would make a link look like what it leads to.
            let Some(path) = deny_candidates.get(index).map(|path| as_components(path)) else {
                break;
            };
            // What to hide (if anything exists there), and how the user would know it.
            let (exists, resolved, named) = if (root_only..from_profile).contains(&index) {
                (true, path.clone(), None)
            } else {
                let found = prober.probe(&path);
                if found.blocked || (found.exists && !found.resolves) || found.through_link {
                    // Followed as the kernel would, one name at a time: a directory closed
                    // to the caller on the way (which the command could open again, with
                    // a chmod of one it owns: Landlock does not govern modes) is hidden
                    // instead, whole; where it ends missing is where it would be created;
                    // and no link on the way may lie where the command could replace it.
                    let walked = walk(&path);
                    if let Some((root, link)) = walked.links.iter().find_map(|link| {
                        writable
                            .iter()
                            .find(|r| lies_within(link, r))
                            .map(|r| (r, link))
                    }) {
                        return Err(PolicyError::Workspace(format!(
                            "writable root {} holds {}, a link on the way to the credential \
                             location {}: the command could point it elsewhere.\n\
                             Choose a workspace that does not hold it.",
                            root.display(),
                            link.display(),
                            path.display()
                        )));
                    }
                    let named = |how: &str| Some(format!("{} ({how})", path.display()));
                    match walked.end {
                        WalkEnd::Closed(closed) => {
                            let how = format!(
                                "hidden as {}, a directory on its way that chitti cannot \
                                 look into",
                                closed.display()
                            );
                            (true, closed, named(&how))
                        }
                        WalkEnd::Missing(at) => {
                            let how =
                                format!("not there yet; it would be created at {}", at.display());
                            (false, at, named(&how))
                        }
                        WalkEnd::Found(at) => {
                            let how = format!("which leads to {}", at.display());
                            (found.exists, at, named(&how))
                        }
                    }
                } else {
                    (found.exists, found.resolved, None)
                }
            };
            locations.push(resolved.clone());
            let as_named = || {
                named
                    .clone()
                    .unwrap_or_else(|| resolved.display().to_string())
            };
            // A writable root inside a credential location, or containing one, would make
            // it readable (and writable) on backends that cannot mask beneath a grant.
            for root in writable {
                if lies_within(&resolved, root) || lies_within(root, &resolved) {
                    if (from_profile..link_targets_from).contains(&index) {
                        return Err(PolicyError::Profile(format!(
                            "profile `{}`: filesystem.deny_read entry {} lies in (or holds) \
                             the writable root {}: a path cannot be both, because Landlock \
                             cannot take a path back out of a writable root. Keep the \
                             secret outside the workspace, or drop the entry.",
                            self.profile,
                            as_named(),
                            root.display()
                        )));
                    }
                    return Err(PolicyError::Workspace(format!(
                        "writable root {} overlaps the credential location {}: \
                         chitti cannot keep it unreadable there.\n\
                         Choose a workspace that neither contains nor lies inside it.",
                        root.display(),
                        as_named()
                    )));
                }
            }
            let home_side = index < root_only || index >= link_targets_from;
            if exists && home_side && deny_candidates.len() - link_targets_from < MAX_LINK_TARGETS {
                for target in credentials::links_within(&resolved, home) {
                    if !deny_candidates.contains(&target)
                        && deny_candidates.len() - link_targets_from < MAX_LINK_TARGETS
                    {
                        deny_candidates.push(target);
                    }
                }
            }
            if exists {
                push_unique(&mut deny_read, resolved);
            }
        }
        // The same locations under other names: the filesystem, or a directory of it,
        // mounted a second time (masks and Landlock's rules act on names).
        let found = mount_aliases::find(&deny_read).map_err(PolicyError::Path)?;
        // Landlock's rules compare inodes wherever a directory on the way to a hidden path,
        // or to one of its other names, may have another name.
        let by_inode = found.ancestors_shared || !found.names.is_empty();
        for (alias, location) in found.names {
            if let Some(root) = writable
                .iter()
                .find(|root| lies_within(&alias, root) || lies_within(root, &alias))
            {
                return Err(PolicyError::Workspace(format!(
                    "writable root {} overlaps {}, which shows the credential location {} \
                     under another name (a second mount, or a directory holding one that \
                     chitti cannot look into): chitti cannot keep it unreadable there.\n\
                     Choose a workspace that neither contains nor lies inside it.",
                    root.display(),
                    alias.display(),
                    location.display()
                )));
            }
            push_unique(&mut deny_read, alias);
        }
        // What lies inside another hidden path (or name) is hidden with it; kept apart, it
        // would make Landlock's plan list the outer one (as a directory on its way) and
        // grant the rest of it, and bwrap could not mount a mask inside a mask.
        let deny_read = outermost(deny_read);
        if found.table_shared {
            // A writable root may then be a directory on the way to a location, or lie in
            // one, under a name that compares with none of theirs; so may one of a
            // location that does not exist yet, which the command could then create.
            locations.extend(deny_read.iter().cloned());
            if let Some((root, location)) = overlap_by_inode(writable, &locations) {
                return Err(PolicyError::Workspace(format!(
                    "writable root {} overlaps the credential location {} under another \
                     name (a directory mounted a second time): chitti cannot keep it \
                     unreadable there.\n\
                     Choose a workspace that neither contains nor lies inside it.",
                    root.display(),
                    location.display()
                )));
            }
        }
        Ok(Hidden {
            paths: deny_read,
            by_inode,
        })
    }
}

/// Where following a path name by name, as the kernel does, ends.
#[derive(Debug, PartialEq, Eq)]
enum WalkEnd {
    /// At what it names, resolved.
    Found(PathBuf),
    /// At a missing name: where it would be created.
    Missing(PathBuf),
    /// At a directory that can be looked at, not into.
    Closed(PathBuf),
}

#[derive(Debug)]
struct Walk {
    end: WalkEnd,
    /// Every link followed, by the path it was met at.
    links: Vec<PathBuf>,
}

/// Follows `path` from `/`, its links one at a time (at most 40, then it stops as if at a
/// missing name).
fn walk(path: &Path) -> Walk {
    use std::collections::VecDeque;
    use std::path::Component;
    let mut at = PathBuf::from("/");
    let mut ahead: VecDeque<std::ffi::OsString> = VecDeque::new();
    let push_front = |ahead: &mut VecDeque<_>, path: &Path| {
        for component in path.components().rev() {
            match component {
                Component::Normal(name) => ahead.push_front(name.to_os_string()),
                Component::ParentDir => ahead.push_front("..".into()),
                _ => {}
            }
        }
    };
    push_front(&mut ahead, path);
    let mut links = Vec::new();
    while let Some(name) = ahead.pop_front() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.is_symlink() => {
                let target = std::fs::read_link(&next).ok().filter(|_| links.len() < 40);
                links.push(next.clone());
                let Some(target) = target else {
                    ahead.push_front(name);
                    break;
                };
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                push_front(&mut ahead, &target);
            }
            Ok(_) => at = next,
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                return Walk {
                    end: WalkEnd::Closed(at),
                    links,
                }
            }
            Err(_) => {
                ahead.push_front(name);
                break;
            }
        }
    }
    if ahead.is_empty() {
        return Walk {
            end: WalkEnd::Found(at),
            links,
        };
    }
    let missing = ahead.iter().fold(at, |at, name| match name.to_str() {
        Some("..") => at.parent().map(Path::to_path_buf).unwrap_or(at),
        _ => at.join(name),
    });
    Walk {
        end: WalkEnd::Missing(missing),
        links,
    }
}

/// `paths` without those inside another of them.
fn outermost(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let inside_another = |path: &PathBuf| {
        paths
            .iter()
            .any(|other| other != path && lies_within(path, other))
    };
    paths
        .iter()
        .filter(|p| !inside_another(p))
        .cloned()
        .collect()
}

/// The first writable root that is, by what its name leads to, one of the `locations`
/// or a directory on the way to one (there or not yet), or lies inside one; with that
/// location.
fn overlap_by_inode<'a>(
    writable: &'a [PathBuf],
    locations: &'a [PathBuf],
) -> Option<(&'a PathBuf, &'a PathBuf)> {
    use std::collections::HashMap;
    // The locations share most of their ancestors (/, /home, the home): each is looked
    // at once.
    let mut known: HashMap<&Path, Option<(u64, u64)>> = HashMap::new();
    let mut identity = |path: &'a Path| {
        *known
            .entry(path)
            .or_insert_with(|| crate::canonical::identity(path))
    };
    type Identity = (u64, u64);
    // Each root, what it leads to, and what it passes through on its way.
    let roots: Vec<(&PathBuf, Option<Identity>, Vec<Identity>)> = writable
        .iter()
        .map(|root| {
            let way = root.ancestors().filter_map(&mut identity).collect();
            (root, identity(root), way)
        })
        .collect();
    for location in locations {
        // Landlock checks every directory from a path up to `/`: a root that is one of
        // them holds the location; a root with the location on its own way lies in it.
        let own = identity(location);
        for dir in location.ancestors() {
            let Some(id) = identity(dir) else {
                continue;
            };
            if let Some((root, _, _)) = roots.iter().find(|(_, root_id, _)| *root_id == Some(id)) {
                return Some((root, location));
            }
        }
        if let Some(own) = own {
            if let Some((root, _, _)) = roots.iter().find(|(_, _, way)| way.contains(&own)) {
                return Some((root, location));
            }
        }
    }
    None
}

/// Makes `dir` and its missing parents, mode 0700, only where the nearest existing one is
/// the effective user's: root run with another user's `HOME` must not leave directories of
/// root's in that home (that user's chitti could no longer write its own state).
pub fn make_own_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let euid = nix::unistd::geteuid().as_raw();
    let existing = dir
        .ancestors()
        .find_map(|a| std::fs::symlink_metadata(a).ok().map(|m| (a, m)));
    if let Some((ancestor, meta)) = existing {
        if ancestor != dir && meta.uid() != euid {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} belongs to another user (uid {}), so chitti (uid {euid}) does not make \
                     {} there; set XDG_STATE_HOME to a directory of your own",
                    ancestor.display(),
                    meta.uid(),
                    dir.display()
                ),
            ));
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The resolved policy: everything a backend needs, nothing it must look up again.
#[derive(Debug, Clone)]
pub struct Policy {
    pub profile: String,
    pub workspace: PathBuf,
    /// Canonical, existing directories the command may write (private tmp excluded).
    pub writable: Vec<PathBuf>,
    /// Whether the profile asks for a private temporary directory (`{tmp}`).
    pub private_tmp: bool,
    /// Canonical paths that must be unreadable. Only paths that exist: a missing one
    /// cannot be created inside the sandbox, because no writable root contains it.
    pub deny_read: Vec<PathBuf>,
    /// Whether a directory on the way to a `deny_read` path has another name as well (a
    /// filesystem mounted more than once): Landlock's rules, which attach to directories,
    /// must then be planned by what each name leads to, not by names.
    pub deny_read_by_inode: bool,
    /// Paths inside writable roots that must not be renamed or replaced.
    pub pinned: Vec<PathBuf>,
    /// Paths inside writable roots that stay read-only. A missing git `hooks` directory
    /// is listed too; backends create it empty before the call.
    pub read_only: Vec<PathBuf>,
    /// Protected paths that do not exist and must not be created (`.git/commondir`,
    /// which would point git at a directory of the sandbox's choosing).
    pub absent: Vec<PathBuf>,
    pub network: bool,
    /// The environment after the allow-list (TMPDIR is set by the backend).
    pub env: Vec<(OsString, OsString)>,
    pub limits: Limits,
    pub timeout: Duration,
    /// chitti's state directory: calls running at once share there what their protected
    /// paths held before them (`sandbox::shared_baseline`).
    pub state_dir: PathBuf,
}

impl Policy {
    /// Resolves `profile` for `workspace`. `caller_env` is the environment to filter.
    pub fn resolve(
        profile: &Profile,
        workspace: &Path,
        overrides: &Overrides,
        dirs: &ChittiDirs,
        caller_env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Policy, PolicyError> {
        let (mut policy, search) =
            Self::resolve_parts(profile, workspace, overrides, dirs, caller_env)?;
        policy.hide(search.run()?);
        Ok(policy)
    }

    /// [`Policy::resolve`] in two parts: the policy with an empty `deny_read`, and the
    /// search that fills it.
    fn resolve_parts(
        profile: &Profile,
        workspace: &Path,
        overrides: &Overrides,
        dirs: &ChittiDirs,
        caller_env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<(Policy, CredentialSearch), PolicyError> {
        // Resolved once: every writable root is checked against it, and the credential
        // paths under it are placed beneath it.
        let home = canonicalize(&dirs.home).unwrap_or_else(|_| dirs.home.clone());
        let workspace = workspace::validate(workspace, &home, "workspace")?;
        env::validate_allow(&profile.env_allow)
            .map_err(|e| PolicyError::Profile(format!("profile `{}`: {e}", profile.name)))?;

        let mut writable = Vec::new();
        let mut private_tmp = false;
        for entry in &profile.writable {
            match entry.as_str() {
                "{tmp}" => private_tmp = true,
                _ => {
                    let path = expand(entry, &workspace, &dirs.home).map_err(|e| {
                        PolicyError::Profile(format!(
                            "profile `{}`: filesystem.writable: {e}",
                            profile.name
                        ))
                    })?;
                    // `{workspace}` itself was checked and resolved above.
                    if path == workspace {
                        push_unique(&mut writable, workspace.clone());
                        continue;
                    }
                    let what = format!("writable root `{entry}` of profile `{}`", profile.name);
                    push_unique(&mut writable, workspace::validate(&path, &home, &what)?);
                }
            }
        }
        for extra in &overrides.extra_writable {
            let path = workspace::validate(extra, &home, "--writable directory")?;
            push_unique(&mut writable, path);
        }

        // Expanded now: a malformed entry is an error before anything runs.
        let entries = profile
            .deny_read
            .iter()
            .map(|entry| {
                expand(entry, &workspace, &dirs.home).map_err(|e| {
                    PolicyError::Profile(format!(
                        "profile `{}`: filesystem.deny_read: {e}",
                        profile.name
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let search = CredentialSearch {
            profile: profile.name.clone(),
            entries,
            dirs: dirs.clone(),
            home,
            writable: writable.clone(),
        };

        let mut pinned = Vec::new();
        let mut read_only = Vec::new();
        let mut absent = Vec::new();
        if profile.protect_git {
            for root in writable.clone() {
                let protection = git::protection_for(&root).map_err(PolicyError::Workspace)?;
                for dir in protection.writable {
                    push_unique(&mut writable, dir);
                }
                for path in protection.pinned {
                    push_unique(&mut pinned, path);
                }
                for path in protection.read_only {
                    // A missing hooks directory is created empty by the backend; any other
                    // missing protected file (config, commondir) must stay missing.
                    if path.exists() || path.ends_with("hooks") {
                        push_unique(&mut read_only, path);
                    } else {
                        push_unique(&mut absent, path);
                    }
                }
            }
        }
        for entry in &profile.protected {
            let path = expand(entry, &workspace, &dirs.home).map_err(|e| {
                PolicyError::Profile(format!(
                    "profile `{}`: filesystem.protected: {e}",
                    profile.name
                ))
            })?;
            // One that does not exist yet inside a writable root must stay so: made by the
            // command, it is moved aside after the call, and the file tools refuse to make
            // it. (Elsewhere the sandbox cannot make it, and the host may.)
            let path = canonical_or_lexical(&path);
            if path.exists() {
                push_unique(&mut read_only, path);
            } else if writable.iter().any(|root| path.starts_with(root)) {
                push_unique(&mut absent, path);
            }
        }

        // A directory on the way to a protected path that lies inside a writable root (the
        // workspace too, when another writable root holds it) can be moved or swapped for
        // a symlink by the sandbox, taking the protected path with it: pin it as well, if
        // it exists (one that does not, made into a symlink by the command, leaves the
        // absent path beyond it out of reach of the repairs, which then fail the call).
        let protected: Vec<PathBuf> = pinned
            .iter()
            .chain(&read_only)
            .chain(&absent)
            .cloned()
            .collect();
        for path in &protected {
            for dir in path.ancestors().skip(1) {
                if writable
                    .iter()
                    .any(|w| dir != w.as_path() && dir.starts_with(w))
                    && std::fs::symlink_metadata(dir).is_ok()
                {
                    push_unique(&mut pinned, dir.to_path_buf());
                }
            }
        }
        let network = overrides.network.unwrap_or(profile.network);
        let timeout = overrides
            .timeout
            .unwrap_or(Duration::from_secs(profile.limits.timeout_seconds));
        let policy = Policy {
            profile: profile.name.clone(),
            workspace,
            writable,
            private_tmp,
            deny_read: Vec::new(),
            deny_read_by_inode: false,
            pinned,
            read_only,
            absent,
            network,
            env: env::filter(caller_env, &profile.env_allow),
            limits: profile.limits,
            timeout,
            state_dir: dirs.state.clone(),
        };
        Ok((policy, search))
    }

    /// The caller's directory when it lies inside the workspace, else the workspace root.
    pub fn working_dir(&self, caller_cwd: Option<&Path>) -> PathBuf {
        caller_cwd
            .and_then(|c| canonicalize(c).ok())
            .filter(|c| c.starts_with(&self.workspace))
            .unwrap_or_else(|| self.workspace.clone())
    }

    pub fn is_writable(&self, path: &Path) -> bool {
        self.writable.iter().any(|root| path.starts_with(root))
            && !self.read_only.iter().any(|ro| path.starts_with(ro))
            && !self.absent.iter().any(|ro| path.starts_with(ro))
    }
}

/// Replaces a leading `{workspace}` or `{home}`; the result must be absolute.
fn expand(entry: &str, workspace: &Path, home: &Path) -> Result<PathBuf, String> {
    let (base, rest) = if let Some(rest) = entry.strip_prefix("{workspace}") {
        (Some(workspace), rest)
    } else if let Some(rest) = entry.strip_prefix("{home}") {
        (Some(home), rest)
    } else {
        (None, entry)
    };
    if rest.contains('{') {
        return Err(format!(
            "`{entry}`: unknown placeholder (use {{workspace}}, {{home}} or {{tmp}} at the start)"
        ));
    }
    let path = match base {
        Some(base) => base.join(rest.trim_start_matches('/')),
        None => PathBuf::from(rest),
    };
    if !path.is_absolute() {
        return Err(format!(
            "`{entry}` is relative: start it with / or a placeholder such as {{workspace}}"
        ));
    }
    if path
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(format!("`{entry}` contains `..`"));
    }
    Ok(path)
}

/// Canonicalises what exists; for a missing path, canonicalises the deepest existing
/// ancestor and appends the rest, so comparisons with canonical roots still work.
pub fn canonical_or_lexical(path: &Path) -> PathBuf {
    if let Ok(p) = canonicalize(path) {
        return p;
    }
    let mut missing = Vec::new();
    let mut cur = path;
    while let Some(parent) = cur.parent() {
        if let Some(name) = cur.file_name() {
            missing.push(name.to_os_string());
        }
        if let Ok(base) = canonicalize(parent) {
            let mut out = base;
            for name in missing.iter().rev() {
                out.push(name);
            }
            return out;
        }
        cur = parent;
    }
    path.to_path_buf()
}

/// Whether `bytes` spell an absolute path in the one way its components do: no `//`, no
/// `.` component, no trailing `/`. Then comparing bytes answers what comparing components
/// would, without parsing either path.
fn plain_absolute(bytes: &[u8]) -> bool {
    // After the root, every name between slashes is neither empty nor `.`.
    bytes == b"/"
        || (bytes.starts_with(b"/")
            && bytes[1..]
                .split(|&b| b == b'/')
                .all(|name| !name.is_empty() && name != b"."))
}

/// `base.join(rest)` in one allocation of the right size (`join` copies `base`, then grows
/// the copy for `rest`): the credential search builds some hundred paths per call.
fn joined(base: &Path, rest: impl AsRef<Path>) -> PathBuf {
    let rest = rest.as_ref();
    let mut path = PathBuf::with_capacity(base.as_os_str().len() + 1 + rest.as_os_str().len());
    path.push(base);
    path.push(rest);
    path
}

/// `path.starts_with(dir)`, comparing bytes when both are plain absolute paths
/// ([`plain_absolute`]), which they nearly always are here: `Path` parses both into
/// components, and a call compares some 70 pairs (about 0.03 ms in all).
fn lies_within(path: &Path, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    if !(plain_absolute(p) && plain_absolute(d)) {
        return path.starts_with(dir);
    }
    match p.strip_prefix(d) {
        Some(rest) => rest.is_empty() || rest[0] == b'/' || d == b"/",
        None => false,
    }
}

/// `path.strip_prefix(dir)`, comparing bytes when both are plain absolute paths, as
/// [`lies_within`] does: the credential search asks it of every candidate and the home,
/// several times each (it was a seventh of a user's search).
fn relative_to<'p>(path: &'p Path, dir: &Path) -> Option<&'p Path> {
    use std::os::unix::ffi::OsStrExt;
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    if !(plain_absolute(p) && plain_absolute(d)) {
        return path.strip_prefix(dir).ok();
    }
    let rest = if d == b"/" {
        &p[1..]
    } else {
        match p.strip_prefix(d)? {
            [] => &[],
            [b'/', rest @ ..] => rest,
            _ => return None,
        }
    };
    Some(Path::new(std::ffi::OsStr::from_bytes(rest)))
}

/// `path` spelt as its components (`dir/` becomes `dir`): a copy where it is already so.
fn as_components(path: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    if plain_absolute(path.as_os_str().as_bytes()) {
        path.to_path_buf()
    } else {
        path.components().collect()
    }
}

fn push_unique(list: &mut Vec<PathBuf>, path: PathBuf) {
    if !list.contains(&path) {
        list.push(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs_in(home: &Path) -> ChittiDirs {
        ChittiDirs {
            home: home.to_path_buf(),
            config: home.join(".config/chitti"),
            state: home.join(".local/state/chitti"),
            user_home: None,
            named_by_environment: Vec::new(),
        }
    }

    #[test]
    fn paths_inside_another_are_dropped() {
        let paths = [
            "/root/.ssh",
            "/root/.aws",
            "/mnt/disk/root/.ssh",
            "/mnt/disk/root/.ssh/inner",
            "/root/.ssh/loop/root/.aws",
            "/mnt/disk2",
            "/mnt/disk2-not-inside",
        ]
        .map(PathBuf::from)
        .to_vec();
        let kept = outermost(paths);
        let expected = [
            "/root/.ssh",
            "/root/.aws",
            "/mnt/disk/root/.ssh",
            "/mnt/disk2",
            "/mnt/disk2-not-inside",
        ];
        assert_eq!(kept, expected.map(PathBuf::from));
    }

    /// Spellings of paths, plain and not, for the byte-wise shortcuts' tests.
    const LIKE_PATHS: [&str; 22] = [
        "/",
        "/a",
        "/a/",
        "/a/b",
        "/a/b/",
        "/a/bc",
        "/a//b",
        "/a/./b",
        "/a/.",
        "/a/b/..",
        "/a/../a/b",
        "//a",
        "/ab",
        "a",
        "a/b",
        "",
        "/a/b/c",
        "/a/b/./",
        "/a/b//",
        "/.",
        "/./a",
        "/a/b/c/..",
    ];

    /// The byte-wise shortcuts answer as `Path`'s own calls do, for the spellings above and
    /// for every spelling of up to five bytes from `/`, `.` and `a`, each against each.
    #[test]
    fn byte_comparisons_answer_like_path_s_own() {
        let mut spellings: Vec<String> = LIKE_PATHS.map(String::from).to_vec();
        let mut last = vec![String::new()];
        for _ in 0..5 {
            last = last
                .iter()
                .flat_map(|s| ["/", ".", "a"].map(|c| format!("{s}{c}")))
                .collect();
            spellings.extend(last.iter().cloned());
        }
        for p in &spellings {
            let path = Path::new(p);
            let components: PathBuf = path.components().collect();
            assert_eq!(as_components(path), components, "{p:?}");
            for d in &spellings {
                let dir = Path::new(d);
                assert_eq!(
                    lies_within(path, dir),
                    path.starts_with(dir),
                    "{p:?} within {d:?}"
                );
                assert_eq!(
                    relative_to(path, dir),
                    path.strip_prefix(dir).ok(),
                    "{p:?} relative to {d:?}"
                );
                assert_eq!(joined(path, dir), path.join(dir), "{p:?} joined with {d:?}");
            }
        }
        assert!(plain_absolute(b"/a/b..c/.d/..") && !plain_absolute(b"/a/b/."));
    }

    #[test]
    fn the_state_directory_is_made_before_the_search_so_that_it_is_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let dirs = dirs_in(dir.path());
        assert!(!dirs.state.exists());
        let profile = profile::load("workspace-write", None).unwrap();
        let policy =
            Policy::resolve(&profile, &ws, &Overrides::default(), &dirs, Vec::new()).unwrap();
        let state = dirs.state.canonicalize().unwrap();
        assert!(policy.deny_read.contains(&state), "{:?}", policy.deny_read);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&state).unwrap().permissions(),
        ) & 0o777;
        assert_eq!(mode, 0o700);
    }

    /// chitti's own config is hidden at its default place too when the environment puts
    /// it elsewhere (a client may start chitti without the user's XDG variables), and
    /// what the environment names is hidden where it is.
    #[test]
    fn own_directories_and_places_the_environment_names_are_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let default_config = base.join(".config/chitti");
        let gnupg = base.join("gnupg");
        for there in [&default_config, &gnupg] {
            std::fs::create_dir_all(there).unwrap();
        }
        let dirs = ChittiDirs {
            config: base.join("xdg/chitti"),
            named_by_environment: vec![gnupg.clone()],
            ..dirs_in(&base)
        };
        let profile = profile::load("workspace-write", None).unwrap();
        let policy =
            Policy::resolve(&profile, &ws, &Overrides::default(), &dirs, Vec::new()).unwrap();
        for hidden in [&default_config, &gnupg] {
            assert!(
                policy.deny_read.contains(hidden),
                "{hidden:?}: {:?}",
                policy.deny_read
            );
        }
    }

    /// A place the environment names is looked at on every call (a session's later call
    /// hides one made since it started), and a trailing slash on a link to it does not
    /// hide the link's name instead of what it leads to (a review read a key so).
    #[test]
    fn places_the_environment_names_are_looked_at_each_call_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let gnupg = base.join("gnupg-real");
        std::fs::create_dir_all(&gnupg).unwrap();
        std::os::unix::fs::symlink(&gnupg, base.join("gnupg-link")).unwrap();
        let later = base.join("aws-credentials");
        let dirs = ChittiDirs {
            named_by_environment: vec![
                PathBuf::from(format!("{}/gnupg-link/", base.display())),
                later.clone(),
            ],
            ..dirs_in(&base)
        };
        let profile = profile::load("workspace-write", None).unwrap();
        let resolve = || {
            Policy::resolve(&profile, &ws, &Overrides::default(), &dirs, Vec::new())
                .unwrap()
                .deny_read
        };
        let first = resolve();
        assert!(first.contains(&gnupg), "{first:?}");
        assert!(!first.contains(&later), "{first:?}");
        std::fs::write(&later, "secret").unwrap();
        let second = resolve();
        assert!(second.contains(&later), "{second:?}");
    }

    #[test]
    fn no_directory_is_made_in_a_directory_of_another_user() {
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        let other = if nix::unistd::geteuid().is_root() {
            65534
        } else {
            0
        };
        if nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(other)), None).is_err() {
            // Only root may give a directory away; as a user, one of root's stands in.
            let err = make_own_dir(Path::new("/chitti-test-never-made/state")).unwrap_err();
            assert!(
                err.to_string().contains("belongs to another user (uid 0)"),
                "{err}"
            );
            return;
        }
        let err = make_own_dir(&theirs.join(".local/state/chitti")).unwrap_err();
        assert!(err.to_string().contains("set XDG_STATE_HOME"), "{err}");
        assert!(!theirs.join(".local").exists());
        make_own_dir(&dir.path().join("mine/state")).unwrap();
    }

    #[test]
    fn a_deny_read_entry_inside_the_workspace_is_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("secret")).unwrap();
        let file = dir.path().join("p.toml");
        std::fs::write(
            &file,
            "extends = \"workspace-write\"\n[filesystem]\ndeny_read = [\"{workspace}/secret\"]\n",
        )
        .unwrap();
        let profile = profile::load(file.to_str().unwrap(), None).unwrap();
        let e = Policy::resolve(
            &profile,
            &ws,
            &Overrides::default(),
            &dirs_in(dir.path()),
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("filesystem.deny_read entry"), "{e}");
    }

    #[test]
    fn credentials_of_the_user_database_home_are_hidden_when_home_points_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        let other = dir.path().join("other");
        for home in [&real, &other] {
            std::fs::create_dir_all(home.join(".ssh")).unwrap();
        }
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let mut dirs = dirs_in(&other);
        dirs.user_home = Some(real.clone());
        let profile = profile::load("workspace-write", None).unwrap();
        let policy =
            Policy::resolve(&profile, &ws, &Overrides::default(), &dirs, Vec::new()).unwrap();
        for home in [&real, &other] {
            let ssh = home.join(".ssh").canonicalize().unwrap();
            assert!(policy.deny_read.contains(&ssh), "{:?}", policy.deny_read);
        }
    }

    fn resolve_in(home: &Path, ws: &Path, profile: &str) -> Result<Policy, PolicyError> {
        let profile = profile::load(profile, None).unwrap();
        Policy::resolve(
            &profile,
            ws,
            &Overrides::default(),
            &dirs_in(home),
            Vec::new(),
        )
    }

    /// Without HOME, the home directory comes from the user database: what chitti reads
    /// from /etc/passwd must be what the C library's lookup says (which also proves that
    /// the statically linked lookup works).
    #[test]
    fn home_without_home_variable_comes_from_passwd() {
        let uid = nix::unistd::getuid();
        let from_libc = nix::unistd::User::from_uid(uid).unwrap().map(|u| u.dir);
        assert!(
            from_libc.is_some(),
            "uid {uid} has no entry in the user database"
        );
        assert_eq!(home_from_passwd(), from_libc);
        let passwd = std::fs::read("/etc/passwd").unwrap();
        if passwd_home(&passwd, uid.as_raw()).is_none() {
            eprintln!("note: uid {uid} is not in /etc/passwd; the C library's lookup answered");
        }
    }

    #[test]
    fn passwd_home_reads_the_sixth_field_of_the_first_line_for_the_uid() {
        let passwd = b"# a comment\n\
            root:x:0:0:root:/root:/bin/bash\n\
            short:x:1000\n\
            alice:x:1000:1000:Alice, Room 1:/home/alice:/bin/sh\n\
            alias:x:1000:1000::/home/alias:/bin/sh\n\
            bob:x:10000:10000::/srv/bob:/usr/sbin/nologin";
        assert_eq!(passwd_home(passwd, 0), Some(PathBuf::from("/root")));
        assert_eq!(
            passwd_home(passwd, 1000),
            Some(PathBuf::from("/home/alice"))
        );
        assert_eq!(passwd_home(passwd, 10000), Some(PathBuf::from("/srv/bob")));
        assert_eq!(passwd_home(passwd, 100), None);
        assert_eq!(passwd_home(passwd, 1), None);
    }

    #[test]
    fn workspace_write_policy() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join("proj/.git")).unwrap();
        let p = resolve_in(&home, &home.join("proj"), "workspace-write").unwrap();
        assert_eq!(p.workspace, home.join("proj"));
        assert_eq!(p.writable, vec![home.join("proj")]);
        assert!(p.private_tmp);
        assert!(p.deny_read.contains(&home.join(".ssh")));
        // Missing credential paths are not listed.
        assert!(!p.deny_read.contains(&home.join(".aws")));
        assert_eq!(p.pinned, vec![home.join("proj/.git")]);
        assert!(p.read_only.contains(&home.join("proj/.git/hooks")));
        assert!(p.absent.contains(&home.join("proj/.git/commondir")));
        assert!(!p.network);
        assert!(!p.is_writable(&home.join("proj/.git/hooks/pre-commit")));
        assert!(p.is_writable(&home.join("proj/src/main.rs")));
    }

    /// A profile's protected path that does not exist yet must not be made: inside a
    /// writable root it is absent (moved aside if made, refused to the file tools); outside
    /// every writable root it is left to the host.
    #[test]
    fn a_protected_path_that_does_not_exist_yet_stays_absent() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join("proj/there")).unwrap();
        let file = home.join("profile.toml");
        std::fs::write(
            &file,
            format!(
                "extends = \"workspace-write\"\n[filesystem]\nprotected = \
                 [\"{{workspace}}/.envrc\", \"{{workspace}}/there\", \
                 \"{{workspace}}/later/x\", \"{}\"]\n",
                home.join("elsewhere").display()
            ),
        )
        .unwrap();
        let profile = profile::load(file.to_str().unwrap(), None).unwrap();
        let ws = home.join("proj");
        let p = Policy::resolve(
            &profile,
            &ws,
            &Overrides::default(),
            &dirs_in(&home),
            Vec::new(),
        )
        .unwrap();
        assert!(p.read_only.contains(&ws.join("there")));
        assert!(p.absent.contains(&ws.join(".envrc")), "{:?}", p.absent);
        assert!(p.absent.contains(&ws.join("later/x")), "{:?}", p.absent);
        assert!(!p.is_writable(&ws.join(".envrc")));
        assert!(p.is_writable(&ws.join("later/y")));
        assert!(!p.pinned.contains(&ws.join("later")), "{:?}", p.pinned);
        assert!(!p.absent.contains(&home.join("elsewhere")));
        assert!(!p.read_only.contains(&home.join("elsewhere")));
    }

    #[test]
    fn read_only_profile_has_no_host_writes() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("proj")).unwrap();
        let p = resolve_in(home.path(), &home.path().join("proj"), "read-only").unwrap();
        assert!(p.writable.is_empty());
        assert!(p.private_tmp);
    }

    #[test]
    fn workspace_overlapping_credentials_is_refused() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".config/gh")).unwrap();
        let err = resolve_in(home.path(), &home.path().join(".config"), "workspace-write")
            .unwrap_err()
            .to_string();
        assert!(err.contains("credential location"), "{err}");
    }

    /// Found apart (`sandbox exec` as root finds them after its fork), the credential
    /// locations are those a whole resolution finds, and an overlapping workspace is
    /// refused by the search, not before it.
    #[test]
    fn the_credential_search_apart_finds_what_a_whole_resolution_finds() {
        let home = tempfile::tempdir().unwrap();
        for dir in [".ssh", ".config/gh", "proj"] {
            std::fs::create_dir_all(home.path().join(dir)).unwrap();
        }
        std::fs::write(home.path().join(".netrc"), "x").unwrap();
        let source = |ws: &str| PolicySource {
            profile: profile::load("workspace-write", None).unwrap(),
            workspace: home.path().join(ws),
            overrides: Overrides::default(),
            dirs: dirs_in(home.path()),
            env: Vec::new(),
        };
        let whole = source("proj").resolve().unwrap();
        let (apart, search) = source("proj").resolve_without_credentials().unwrap();
        assert!(apart.deny_read.is_empty());
        assert_eq!(search.run().unwrap().paths, whole.deny_read);
        assert!(whole.deny_read.len() >= 3, "{:?}", whole.deny_read);
        assert_eq!(apart.writable, whole.writable);

        let (_, search) = source(".config").resolve_without_credentials().unwrap();
        let err = search.run().unwrap_err().to_string();
        assert!(err.contains("credential location"), "{err}");
    }

    #[test]
    fn expand_placeholders() {
        let ws = Path::new("/w");
        let home = Path::new("/h");
        assert_eq!(
            expand("{workspace}/a", ws, home).unwrap(),
            Path::new("/w/a")
        );
        assert_eq!(expand("{home}/.x", ws, home).unwrap(), Path::new("/h/.x"));
        assert!(expand("{nope}/x", ws, home).is_err());
        assert!(expand("rel/x", ws, home).is_err());
        assert!(expand("/a/../b", ws, home).is_err());
    }
}
