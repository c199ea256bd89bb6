//! A Policy and a command become a process ready to spawn under a sandbox backend.
//!
//! This module never imports the agent, tools or providers. It picks a backend, checks
//! that the backend can enforce the policy here (refusing otherwise), and produces a
//! [`Prepared`] launch that `exec` runs and supervises.

pub mod bwrap_args;
pub mod capabilities;
pub mod cleanup;
mod git_config;
pub mod landlock_rules;
#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod nested_git;
#[cfg(target_os = "linux")]
pub mod nofollow;
#[cfg(target_os = "linux")]
pub mod protect;
pub mod rlimits;
pub mod seatbelt;
#[cfg(target_os = "linux")]
pub mod shared_baseline;

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::canonical::canonicalize;

use serde::Serialize;

pub use capabilities::Capabilities;
use rlimits::Rlimits;

use crate::policy::{CredentialSearch, Policy};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Bwrap,
    Landlock,
    Seatbelt,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Bwrap,
    Landlock,
    Seatbelt,
    /// Explicitly unsandboxed: supervised (timeout, tree kill), nothing enforced.
    None,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Bwrap => "bwrap",
            Backend::Landlock => "landlock",
            Backend::Seatbelt => "seatbelt",
            Backend::None => "none",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox cannot be set up; nothing ran (exit 125).
    #[error("{0}")]
    Unavailable(String),
    /// The command does not exist (exit 127).
    #[error("{0}")]
    NotFound(String),
    /// The command exists but cannot be executed (exit 126).
    #[error("{0}")]
    NotExecutable(String),
    /// What became of the command is unknown: the process that watched it is gone (exit
    /// 125, as for a sandbox that failed; unlike that, the command may have run).
    #[error("{0}")]
    Lost(String),
}

impl SandboxError {
    pub fn exit_code(&self) -> i32 {
        match self {
            SandboxError::Unavailable(_) | SandboxError::Lost(_) => 125,
            SandboxError::NotFound(_) => 127,
            SandboxError::NotExecutable(_) => 126,
        }
    }
}

/// The backend `choice` resolves to on this machine, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Selection {
    pub backend: Backend,
    pub reason: String,
}

/// Picks the backend. `auto` prefers bwrap (namespaces: the strongest isolation), then
/// landlock; when neither can enforce the policy it refuses and names every blocker.
pub fn select(
    choice: BackendChoice,
    caps: &Capabilities,
    state_dir: &Path,
) -> Result<Selection, SandboxError> {
    let chosen = |backend, reason: &str| Selection {
        backend,
        reason: reason.to_string(),
    };
    let refuse =
        |flag: &str, why: String| SandboxError::Unavailable(format!("--backend {flag}: {why}"));
    match choice {
        BackendChoice::None => Ok(chosen(Backend::None, "explicitly requested: NOTHING is enforced")),
        BackendChoice::Bwrap => bwrap_usable(caps, state_dir)
            .map(|()| chosen(Backend::Bwrap, "requested with --backend bwrap"))
            .map_err(|why| refuse("bwrap", why)),
        BackendChoice::Landlock => match caps.landlock_blocker() {
            None => Ok(chosen(Backend::Landlock, "requested with --backend landlock")),
            Some(why) => Err(refuse("landlock", why)),
        },
        BackendChoice::Seatbelt => match caps.seatbelt_blocker() {
            None => Ok(chosen(Backend::Seatbelt, "requested with --backend seatbelt")),
            Some(why) => Err(refuse("seatbelt", why)),
        },
        BackendChoice::Auto if caps.os == "macos" => match caps.seatbelt_blocker() {
            None => Ok(chosen(Backend::Seatbelt, "macOS: sandbox-exec with a generated Seatbelt profile")),
            Some(why) => Err(SandboxError::Unavailable(format!(
                "no sandbox backend can enforce the policy on this machine: {why}"
            ))),
        },
        BackendChoice::Auto if caps.os != "linux" => Err(SandboxError::Unavailable(format!(
            "no sandbox backend for {}: chitti supports Linux (bwrap, landlock) and macOS (seatbelt)",
            caps.os
        ))),
        BackendChoice::Auto => {
            let bwrap_why = match bwrap_usable(caps, state_dir) {
                Ok(()) => return Ok(chosen(Backend::Bwrap, "bubblewrap is installed and can create namespaces")),
                Err(why) => why,
            };
            match caps.landlock_blocker() {
                None => Ok(Selection {
                    backend: Backend::Landlock,
                    reason: format!("bwrap unusable ({bwrap_why}); Landlock and seccomp are available"),
                }),
                Some(landlock_why) => Err(SandboxError::Unavailable(format!(
                    "no sandbox backend can enforce the policy on this machine:\n  \
                     bwrap: {bwrap_why}\n  landlock: {landlock_why}\n\
                     Fix one of these (see `chitti doctor`). chitti never runs commands \
                     unsandboxed unless you pass --backend none."
                ))),
            }
        }
    }
}

/// bwrap works here: static checks, then a real probe whose success is cached per boot.
fn bwrap_usable(caps: &Capabilities, state_dir: &Path) -> Result<(), String> {
    if let Some(why) = caps.bwrap_static_blocker() {
        return Err(why);
    }
    let bwrap = &caps.bwrap().expect("checked by the static blocker").path;
    let cache = capabilities::ProbeCache::new(state_dir, bwrap);
    if cache.holds() {
        return Ok(());
    }
    match capabilities::probe_bwrap(bwrap) {
        Ok(()) => {
            cache.record();
            Ok(())
        }
        Err(why) => Err(format!(
            "bubblewrap is installed but cannot create its sandbox here: {why}"
        )),
    }
}

/// How the sandboxed process is started.
// One per call, moved a few times before the launch: boxing the larger variant would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Launch {
    /// A program spawned directly: bubblewrap, which isolates and supervises itself.
    Command {
        program: PathBuf,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: PathBuf,
        /// Descriptors the program inherits at the same numbers (seccomp programs).
        pass_fds: Vec<OwnedFd>,
        /// Limits applied to the program itself; bwrap passes them on.
        rlimits: Rlimits,
    },
    /// Forked by chitti under a supervisor that kills the whole tree (landlock, none).
    #[cfg(target_os = "linux")]
    Supervised(linux::supervisor::LaunchSpec),
}

/// A launch ready for `exec`, and what must live until the call is over.
pub struct Prepared {
    pub backend: Backend,
    pub launch: Launch,
    /// Runs once every sandboxed process is gone (restoring protected paths on backends
    /// that cannot mount them read-only); returns what it had to repair.
    pub after: Vec<Box<dyn AfterCall>>,
    /// Temporary directories (the private TMPDIR, a Seatbelt profile), removed on drop.
    pub temp_dirs: Vec<tempfile::TempDir>,
    /// Held until the call is over: a session's Landlock ruleset goes back to its cache
    /// then, once the command has enforced it.
    pub held: Vec<Box<dyn std::any::Any + Send>>,
    /// bwrap's on-disk memo that it works here, forgotten if bwrap then fails to set a
    /// call up, so that the next call probes it again instead of trusting the memo.
    pub bwrap_probe_memo: Option<PathBuf>,
}

impl Prepared {
    /// For the one call of a chitti that has a single thread and exits after it (`sandbox
    /// exec`): lets chitti make the masks' mount namespace in its own process, where that
    /// overlaps the supervisor's start, for the command to join (`supervisor::spawn`).
    pub fn as_the_only_call(mut self) -> Prepared {
        #[cfg(target_os = "linux")]
        if let Launch::Supervised(spec) = &mut self.launch {
            spec.masks_made_by = linux::supervisor::MasksMadeBy::Chitti;
        }
        self
    }
}

/// What a long-lived session (chat, mcp) keeps from one call to the next to make calls
/// cheaper, never anything that changes what a call enforces. One per session, shared by
/// its calls.
#[derive(Default)]
pub struct SessionCache {
    #[cfg(target_os = "linux")]
    pub(crate) landlock: std::sync::Arc<linux::landlock::RulesetCache>,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCache").finish_non_exhaustive()
    }
}

/// Work that must wait until every sandboxed process is gone.
pub trait AfterCall: Send {
    /// Does the work; returns one line per repair made.
    fn run(self: Box<Self>) -> Vec<String>;
    /// Descriptors the work needs, which a forked supervisor must keep open.
    fn fds(&self) -> Vec<std::os::fd::RawFd> {
        Vec::new()
    }
    /// From here on, dropping this without running it counts as a call killed before its
    /// repairs (what it recorded stays for the next call to repair), not as one that never
    /// started: called on chitti's copy once a forked supervisor has its own, and once the
    /// command has started.
    fn disarm(&mut self) {}
    /// `pid`, a supervisor forked for the call, now holds its own copy of the work and does
    /// it: its end, however it comes, ends the call (see `shared_baseline`).
    fn supervised_by(&self, _pid: libc::pid_t) {}
    /// The sandbox's own process is dead, however it ended (by itself, stopped, killed
    /// from outside): the moment to end what it left behind, before the call's pipes are
    /// read to their end.
    fn sandbox_ended(&mut self) {}
}

/// The environment of the sandboxed command: the policy's allow-list, the private
/// TMPDIR, and a marker telling scripts which sandbox they run in.
pub fn sandbox_env(
    policy: &Policy,
    backend: Backend,
    tmpdir: Option<&Path>,
) -> Vec<(OsString, OsString)> {
    let mut env = policy.env.clone();
    if let Some(tmp) = tmpdir {
        env.push(("TMPDIR".into(), tmp.into()));
    }
    env.push(("CHITTI_SANDBOX".into(), backend.name().into()));
    env
}

/// A fresh private directory on the host (the sandbox's TMPDIR, or a place for a
/// profile file), and its canonical path.
pub fn private_dir(prefix: &str) -> Result<(tempfile::TempDir, PathBuf), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        // Private to the user: other local users must not read what the command writes.
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| {
            SandboxError::Unavailable(format!("cannot create a private directory: {e}"))
        })?;
    let path = canonicalize(dir.path()).map_err(|e| {
        SandboxError::Unavailable(format!("cannot resolve a private directory: {e}"))
    })?;
    Ok((dir, path))
}

/// Resolves the command the way the sandbox will, so that "not found" and "not
/// executable" are reported as 127/126 by every backend.
pub fn resolve_command(
    program: &OsString,
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> Result<PathBuf, SandboxError> {
    find_program(program, crate::policy::env::get(env, "PATH"), cwd)
}

/// [`resolve_command`] given the sandbox's PATH alone.
pub fn find_program(
    program: &OsString,
    path_var: Option<&std::ffi::OsStr>,
    cwd: &Path,
) -> Result<PathBuf, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let name = program.to_string_lossy();
    let path = if name.contains('/') {
        cwd.join(program)
    } else {
        let search = path_var.unwrap_or_default();
        which::which_in(program, Some(search), cwd).map_err(|_| {
            SandboxError::NotFound(format!(
                "{name}: command not found (searched the sandbox PATH)"
            ))
        })?
    };
    let meta = std::fs::metadata(&path)
        .map_err(|_| SandboxError::NotFound(format!("{name}: no such file")))?;
    if meta.is_dir() || meta.permissions().mode() & 0o111 == 0 {
        return Err(SandboxError::NotExecutable(format!(
            "{name}: permission denied (not an executable file)"
        )));
    }
    Ok(path)
}

/// Builds the launch for `command` under `backend`.
pub fn prepare(
    backend: Backend,
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
) -> Result<Prepared, SandboxError> {
    prepare_in(backend, policy, command, cwd, None)
}

/// [`prepare`] for the one call of a chitti that has a single thread and exits after it
/// (`sandbox exec`), whose policy still lacks its credential locations: `policy` and
/// `credentials` come from `PolicySource::resolve_without_credentials`. A Landlock call
/// started by root leaves the search to chitti after the supervisor's fork, where it
/// overlaps the command's start (`linux::prepare_finding_credentials_later`); every
/// other call runs it first. The launch is [`Prepared::as_the_only_call`].
pub fn prepare_the_only_call(
    backend: Backend,
    policy: &Policy,
    credentials: CredentialSearch,
    command: &[OsString],
    cwd: &Path,
) -> Result<Prepared, SandboxError> {
    prepare_finding_credentials(backend, policy, credentials, command, cwd, None)
        .map(Prepared::as_the_only_call)
}

/// [`prepare_in_session`] for a policy that still lacks its credential locations (from
/// `PolicySource::resolve_without_credentials`): a Landlock call started by root runs the
/// search after the supervisor's fork, while the command starts, on a thread of its own
/// that masks what it finds in a mount namespace the command joins. Policy errors the
/// search finds then end the call before the command runs anything.
pub fn prepare_in_session_finding_credentials_later(
    backend: Backend,
    policy: &Policy,
    credentials: CredentialSearch,
    command: &[OsString],
    cwd: &Path,
    session: &SessionCache,
) -> Result<Prepared, SandboxError> {
    prepare_finding_credentials(backend, policy, credentials, command, cwd, Some(session))
}

/// The launch for a policy that still lacks its credential locations: the search is left
/// until after the fork where [`credentials_can_wait`], else run now.
fn prepare_finding_credentials(
    backend: Backend,
    policy: &Policy,
    credentials: CredentialSearch,
    command: &[OsString],
    cwd: &Path,
    session: Option<&SessionCache>,
) -> Result<Prepared, SandboxError> {
    require_command(command)?;
    #[cfg(target_os = "linux")]
    if credentials_can_wait(backend, session.is_some()) {
        return linux::prepare_finding_credentials_later(
            policy,
            credentials,
            command,
            cwd,
            session,
        );
    }
    let mut policy = policy.clone();
    policy.hide(
        credentials
            .run()
            .map_err(|e| SandboxError::Unavailable(e.to_string()))?,
    );
    prepare_in(backend, &policy, command, cwd, session)
}

/// Whether a call on `backend` from this process may leave the credential search until
/// after the fork: the one call of a chitti with a single thread (`sandbox exec`), or,
/// `in_session`, a call of a long-lived session, which has threads. Where it may not,
/// resolving the policy whole costs the same and is simpler.
pub fn credentials_can_wait(backend: Backend, in_session: bool) -> bool {
    #[cfg(target_os = "linux")]
    return backend == Backend::Landlock && linux::credentials_can_wait(in_session);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (backend, in_session);
        false
    }
}

/// [`prepare`] for a call of a long-lived session, which may reuse what `session` kept.
pub fn prepare_in_session(
    backend: Backend,
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
    session: &SessionCache,
) -> Result<Prepared, SandboxError> {
    prepare_in(backend, policy, command, cwd, Some(session))
}

/// [`prepare`] for a bwrap that already runs and holds the other ends of `fds`
/// (`linux::early_bwrap`).
#[cfg(target_os = "linux")]
pub fn prepare_started_bwrap(
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
    fds: linux::BwrapFds,
) -> Result<Prepared, SandboxError> {
    require_command(command)?;
    linux::prepare_bwrap(policy, command, cwd, Some(fds))
}

fn require_command(command: &[OsString]) -> Result<(), SandboxError> {
    if command.is_empty() || command[0].is_empty() {
        return Err(SandboxError::Unavailable(
            "no command given: pass one after `--`, e.g. `chitti sandbox exec -- ls`".into(),
        ));
    }
    Ok(())
}

fn prepare_in(
    backend: Backend,
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
    session: Option<&SessionCache>,
) -> Result<Prepared, SandboxError> {
    require_command(command)?;
    match backend {
        #[cfg(target_os = "linux")]
        Backend::Bwrap | Backend::Landlock | Backend::None => {
            linux::prepare(backend, policy, command, cwd, session)
        }
        #[cfg(target_os = "macos")]
        Backend::Seatbelt => macos::prepare(policy, command, cwd),
        #[cfg(not(target_os = "linux"))]
        Backend::None => unsandboxed(policy, command, cwd),
        #[allow(unreachable_patterns)]
        _ => {
            let _ = (policy, cwd, session);
            Err(SandboxError::Unavailable(format!(
                "the {} backend does not exist on {}",
                backend.name(),
                std::env::consts::OS
            )))
        }
    }
}

/// `--backend none` where there is no supervisor: the command itself, nothing enforced.
#[cfg(not(target_os = "linux"))]
fn unsandboxed(
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
) -> Result<Prepared, SandboxError> {
    let env = sandbox_env(policy, Backend::None, None);
    let program = resolve_command(&command[0], &env, cwd)?;
    Ok(Prepared {
        backend: Backend::None,
        launch: Launch::Command {
            program,
            args: command[1..].to_vec(),
            env,
            cwd: cwd.to_path_buf(),
            pass_fds: Vec::new(),
            rlimits: Rlimits::default(),
        },
        after: Vec::new(),
        temp_dirs: Vec::new(),
        held: Vec::new(),
        bwrap_probe_memo: None,
    })
}

/// How an after-call line begins that could not put a protected path back (or move a
/// plant aside): the call then broke its promise, and `sandbox exec` fails with 125.
pub const UNREPAIRED: &str = "NOT REPAIRED: ";

/// `what` as a line that says a repair failed (see [`UNREPAIRED`]).
pub fn unrepaired(what: impl std::fmt::Display) -> String {
    format!("{UNREPAIRED}{what}")
}

/// Whether an after-call line says a repair failed.
pub fn is_unrepaired(line: &str) -> bool {
    line.starts_with(UNREPAIRED)
}

/// The after-call checks every sandboxed launch gets: nested repositories staged or
/// changed during the call, or holding what could run code, lose their config and hooks.
/// Always one, even where no root is a repository: the command may make one.
pub fn nested_repo_checks(policy: &Policy) -> Vec<Box<dyn AfterCall>> {
    let protected = [&policy.read_only[..], &policy.absent[..]].concat();
    let guard = nested_git::NestedRepoGuard::before(&policy.writable).trusting(&protected);
    vec![Box::new(guard)]
}

/// The after-call work of a write no mount holds the protected paths against (a landlock
/// call; on Linux, a file tool's write, which chitti makes itself): the protected paths
/// recorded now (with the calls running meanwhile, see `protect::Snapshot::take_shared`)
/// and put back after, then [`nested_repo_checks`], then the write's presence among the
/// running calls. A command running meanwhile can move a protected directory to another
/// name and back, and a file tool's write made by that name lands inside it.
pub fn protected_paths_kept(policy: &Policy) -> Result<Vec<Box<dyn AfterCall>>, SandboxError> {
    create_missing_hooks(policy)?;
    let protected = [&policy.read_only[..], &policy.absent[..]].concat();
    let (snapshot, present) = protect::Snapshot::take_shared(
        &policy.state_dir,
        &policy.writable,
        &policy.pinned,
        &protected,
        &[],
    )
    .map_err(SandboxError::Unavailable)?;
    let mut after: Vec<Box<dyn AfterCall>> = vec![Box::new(snapshot)];
    after.extend(nested_repo_checks(policy));
    after.push(Box::new(present));
    Ok(after)
}

/// A name part no other process can guess: repairs name their staging and quarantine
/// files with it, so that the sandbox cannot take those names first and make a repair fail.
pub fn unguessable() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState's keys come from the OS's random source, once per process.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:016x}", hasher.finish())
}

/// Creates the directory `path`, not through a symlink on the way (another call's sandbox
/// may be changing the tree meanwhile).
#[cfg(target_os = "linux")]
fn create_dir_nofollow(path: &Path) -> std::io::Result<()> {
    nofollow::Entry::locate(path)?.make_dir(0o755)
}

#[cfg(not(target_os = "linux"))]
fn create_dir_nofollow(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir(path)
}

/// The `hooks` directories of protected repositories that do not exist (yet).
fn hooks_to_make(policy: &Policy) -> impl Iterator<Item = &PathBuf> {
    policy
        .read_only
        .iter()
        .filter(|path| path.ends_with("hooks") && !path.exists())
}

/// Whether [`create_missing_hooks`] has a directory to make.
pub fn missing_hooks(policy: &Policy) -> bool {
    hooks_to_make(policy).next().is_some()
}

/// Creates missing `hooks` directories of protected repositories, so that they can be
/// held read-only (a missing one could otherwise be created with a hook inside).
pub fn create_missing_hooks(policy: &Policy) -> Result<(), SandboxError> {
    for path in hooks_to_make(policy) {
        create_dir_nofollow(path).map_err(|e| {
            SandboxError::Unavailable(format!(
                "cannot create {} to protect it: {e}",
                path.display()
            ))
        })?;
    }
    Ok(())
}
