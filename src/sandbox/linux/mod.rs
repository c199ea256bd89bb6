//! The Linux backends: bubblewrap, and Landlock + seccomp under chitti's supervisor.

pub mod bpf;
pub mod bwrap_init;
pub mod caps;
pub mod cpu;
pub mod direct;
pub mod early_bwrap;
pub mod landlock;
pub mod masks;
pub mod namespace_release;
pub mod root_dirs;
pub mod seccomp;
pub mod supervisor;
pub mod tmp_pool;
pub mod vfork;

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use super::bwrap_args as bwrap;
use super::{
    landlock_rules, private_dir, protect, sandbox_env, Backend, Capabilities, Launch, Prepared,
    SandboxError,
};
use crate::policy::{CredentialSearch, Policy};
use crate::sandbox::rlimits::Rlimits;

/// Whether a kernel release (`6.1.0-18-amd64`) is older than `version` (major, minor);
/// None if it cannot be read.
fn release_older_than(release: &str, version: (u32, u32)) -> Option<bool> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some((major, minor) < version)
}

/// Whether the running kernel is older than `version` (major, minor); None if its release
/// cannot be read.
fn kernel_older_than(version: (u32, u32)) -> Option<bool> {
    let uname = nix::sys::utsname::uname().ok()?;
    release_older_than(&uname.release().to_string_lossy(), version)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::Unavailable(format!("cannot create a pipe: {e}")))
}

pub fn prepare(
    backend: Backend,
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
    session: Option<&super::SessionCache>,
) -> Result<Prepared, SandboxError> {
    match backend {
        Backend::Bwrap => prepare_bwrap(policy, command, cwd, None),
        Backend::Landlock | Backend::None => {
            prepare_supervised(backend, policy, None, command, cwd, session)
        }
        Backend::Seatbelt => Err(SandboxError::Unavailable(
            "the seatbelt backend exists only on macOS".into(),
        )),
    }
}

/// The descriptors a bwrap call names in its arguments, from chitti's side, and the
/// numbers bwrap has them at.
pub struct BwrapFds {
    /// chitti writes the seccomp program here; bwrap reads it at `seccomp_number`.
    pub seccomp: OwnedFd,
    pub seccomp_number: RawFd,
    /// bwrap writes its status at `status_number`; chitti reads it here.
    pub status: OwnedFd,
    pub status_number: RawFd,
}

/// The pipes for one bwrap call: chitti's ends, and bwrap's ends to pass at their numbers.
pub fn bwrap_fds() -> Result<(BwrapFds, Vec<OwnedFd>), SandboxError> {
    let (seccomp_read, seccomp_write) = pipe()?;
    let (status_read, status_write) = pipe()?;
    let fds = BwrapFds {
        seccomp: seccomp_write,
        seccomp_number: seccomp_read.as_raw_fd(),
        status: status_read,
        status_number: status_write.as_raw_fd(),
    };
    Ok((fds, vec![seccomp_read, status_write]))
}

/// The bwrap launch. With `fds`, bwrap already runs and holds their other ends
/// (`early_bwrap`); otherwise they are made here and passed at spawn.
pub(crate) fn prepare_bwrap(
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
    fds: Option<BwrapFds>,
) -> Result<Prepared, SandboxError> {
    let bwrap = Capabilities::get()
        .bwrap()
        .ok_or_else(|| SandboxError::Unavailable("bubblewrap is not installed".into()))?
        .path
        .clone();
    let env = sandbox_env(
        policy,
        Backend::Bwrap,
        policy.private_tmp.then_some(Path::new("/tmp")),
    );
    let resolved = super::resolve_command(&command[0], &env, cwd)?;
    if hidden_in_bwrap(&resolved, policy) {
        return Err(SandboxError::NotFound(format!(
            "{}: lies in a directory the sandbox replaces (/tmp, /run, /dev, /proc)",
            resolved.display()
        )));
    }
    // A bind mount pins a directory, but a symlink cannot be bound in place (bwrap binds
    // what it points to), so a pinned one could be re-pointed during the call.
    if let Some(link) = policy
        .pinned
        .iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
    {
        return Err(SandboxError::Unavailable(format!(
            "{} is a symbolic link: the bwrap backend cannot keep it from being re-pointed \
             during the call. Use `--backend landlock` (which puts it back afterwards), or \
             replace the link with the directory it points to",
            link.display()
        )));
    }
    // Only once the command is known to exist: a call that cannot run changes nothing.
    super::create_missing_hooks(policy)?;

    let (fds, pass_fds) = match fds {
        Some(fds) => (fds, Vec::new()),
        None => bwrap_fds()?,
    };
    let program = seccomp::program(policy.network, false)
        .map_err(|e| SandboxError::Unavailable(e.to_string()))?;
    // A few KiB: fits in the pipe buffer, so the write never blocks.
    std::fs::File::from(fds.seccomp)
        .write_all(&seccomp::to_bytes(program))
        .map_err(|e| SandboxError::Unavailable(format!("cannot pass the seccomp filter: {e}")))?;
    // bwrap names its child on the status descriptor, so that chitti can reap it afterwards.
    let call = bwrap::CallArgs {
        cwd: cwd.to_path_buf(),
        seccomp_fds: vec![fds.seccomp_number],
        status_fd: Some(fds.status_number),
    };
    bwrap_init::adopt_orphans();
    // Mounts cannot protect a file that does not exist yet: check after the call.
    // Mounts keep the rest unchanged, but a call running at once may have recorded one of
    // them as absent before its command planted it, or pinned a directory its command
    // then replaced.
    let guarded = [&policy.read_only[..], &policy.pinned[..]].concat();
    let (absent, present) = protect::Snapshot::take_shared(
        &policy.state_dir,
        &policy.writable,
        &[],
        &policy.absent,
        &guarded,
    )
    .map_err(SandboxError::Unavailable)?;
    // First the wait for the PID namespace to empty: bwrap exits before its init has
    // killed what the command left running, and a check made before that could be
    // undone by a process still alive.
    // Then the planted files go, before the nested-repository check reads the repository
    // (a planted `.git/commondir` would show it another repository's worktrees).
    let mut after: Vec<Box<dyn super::AfterCall>> =
        vec![Box::new(bwrap_init::ReapBwrapInit::new(fds.status))];
    if !absent.is_empty() {
        after.push(Box::new(absent));
    }
    after.extend(super::nested_repo_checks(policy));
    after.push(Box::new(present));
    Ok(Prepared {
        backend: Backend::Bwrap,
        launch: Launch::Command {
            program: bwrap,
            args: bwrap::args(policy, &call, command),
            env,
            cwd: cwd.to_path_buf(),
            pass_fds,
            rlimits: Rlimits::from(&policy.limits),
        },
        after,
        temp_dirs: Vec::new(),
        held: Vec::new(),
        bwrap_probe_memo: Some(crate::sandbox::capabilities::ProbeCache::path(
            &policy.state_dir,
        )),
    })
}

fn plan_rules(
    writable: &[PathBuf],
    deny_read: &[PathBuf],
    by_inode: bool,
    private_dev: Option<&Path>,
) -> Vec<landlock_rules::Rule> {
    landlock_rules::plan(&landlock_rules::Spec {
        writable,
        deny_read,
        terminals: &stdio_terminals(),
        private_dev,
        by_inode,
    })
}

/// Paths bwrap mounts over: a command there is not what the sandbox would run.
fn hidden_in_bwrap(path: &Path, policy: &Policy) -> bool {
    let replaced = super::bwrap_args::FRESH_DIRS;
    replaced.iter().any(|r| path.starts_with(r))
        && !policy.writable.iter().any(|w| path.starts_with(w))
}

/// Whether a Landlock call may leave its credential search until after the supervisor's
/// fork ([`prepare_finding_credentials_later`]): only where chitti makes the masks' mount
/// namespace itself (root that may mount), in its own process where it has a single thread
/// (`sandbox exec`), or, `in_session`, on a thread started for the call (Linux 6.9).
pub fn credentials_can_wait(in_session: bool) -> bool {
    masks::available()
        && if in_session {
            supervisor::threads_can_make_masks()
        } else {
            supervisor::single_threaded()
        }
}

/// A Landlock call whose policy still lacks its credential locations: chitti finds them
/// after forking the supervisor, and masks them in the namespace the command joins
/// (`supervisor::spawn`), made in chitti's process for a one-shot call, on a thread of
/// its own for a call of a long-lived `session`. Only where [`credentials_can_wait`].
pub fn prepare_finding_credentials_later(
    policy: &Policy,
    credentials: CredentialSearch,
    command: &[OsString],
    cwd: &Path,
    session: Option<&super::SessionCache>,
) -> Result<Prepared, SandboxError> {
    let backend = Backend::Landlock;
    let mut prepared =
        prepare_supervised(backend, policy, Some(credentials), command, cwd, session)?;
    if let Launch::Supervised(spec) = &mut prepared.launch {
        spec.masks_made_by = match session {
            Some(_) => supervisor::MasksMadeBy::ChittiThread,
            None => supervisor::MasksMadeBy::Chitti,
        };
    }
    Ok(prepared)
}

fn prepare_supervised(
    backend: Backend,
    policy: &Policy,
    credentials_later: Option<CredentialSearch>,
    command: &[OsString],
    cwd: &Path,
    session: Option<&super::SessionCache>,
) -> Result<Prepared, SandboxError> {
    let sandboxed = backend == Backend::Landlock;
    let masks_after_fork = sandboxed && credentials_later.is_some();
    let mut after: Vec<Box<dyn super::AfterCall>> = Vec::new();
    let mut tmp: Option<PrivateTmp> = None;
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    let restrictions = if sandboxed {
        if let Some(why) = Capabilities::get().landlock_blocker() {
            return Err(SandboxError::Unavailable(why));
        }
        let unavailable = |e: landlock::LandlockError| SandboxError::Unavailable(e.to_string());
        // The private TMPDIR, another for every call, is granted on its own: in a session the
        // rest of the plan can then be the same from one call to the next.
        // As root, mounts hide what Landlock would otherwise have to go around.
        let (masks, deny_read) = match &credentials_later {
            Some(_) => masks::Masks::made_by_chitti(&policy.writable).map(|m| (Some(m), &[][..])),
            None => masks::for_policy(&policy.deny_read, &policy.writable),
        }
        .map_err(SandboxError::Unavailable)?;
        let private_dev = masks.as_ref().and_then(masks::Masks::private_dev);
        // What the command needs besides the ruleset. A one-shot call's TMPDIR comes from
        // the pool; a session's ruleset keeps the grants of earlier calls' TMPDIRs, so
        // each of its calls gets a directory no other call will ever use.
        tmp = match (policy.private_tmp, session) {
            (false, _) => None,
            (true, Some(session)) => {
                let slot = session
                    .landlock
                    .take_slot(&policy.writable, || pool_slot(policy));
                match slot {
                    Some(slot) => Some(PrivateTmp::Session(slot)),
                    None => Some(PrivateTmp::Fresh(private_dir("chitti-tmp-")?)),
                }
            }
            (true, None) => Some(pooled_or_fresh_tmp(policy)?),
        };
        let seccomp = seccomp::program(policy.network, true)
            .map_err(|e| SandboxError::Unavailable(e.to_string()))?;
        let (ruleset, pending_rules) = match session {
            Some(session) => {
                // The session keeps its slot (the lease hands it back); the supervisor
                // gets a second descriptor of its lock, to claim and release it.
                let call_tmp = match tmp.take() {
                    Some(PrivateTmp::Session(slot)) => {
                        let copy = slot.try_clone().map_err(|e| {
                            SandboxError::Unavailable(format!(
                                "cannot hand the private TMPDIR over: {e}"
                            ))
                        })?;
                        tmp = Some(PrivateTmp::Pooled(copy));
                        Some(landlock::CallTmp::Slot(slot))
                    }
                    other => {
                        tmp = other;
                        tmp.as_ref().map(|t| landlock::CallTmp::Fresh(t.path()))
                    }
                };
                let rules = plan_rules(
                    &policy.writable,
                    deny_read,
                    policy.deny_read_by_inode,
                    private_dev,
                );
                let (fd, lease) = session
                    .landlock
                    .ruleset_for(&rules, call_tmp)
                    .map_err(unavailable)?;
                held.push(Box::new(lease));
                (fd, None)
            }
            None => {
                // Created empty; planned and filled once the supervisor is forked, while
                // it and the command start (see `supervisor::spawn`).
                let fd = landlock::create().map_err(unavailable)?;
                let writable = policy.writable.clone();
                let deny_read = deny_read.to_vec();
                let by_inode = policy.deny_read_by_inode;
                let private_dev = private_dev.map(Path::to_path_buf);
                let tmp = tmp.as_ref().map(|t| t.path().to_path_buf());
                let add_rules: supervisor::PendingRules = Box::new(move |ruleset| {
                    let rules = plan_rules(&writable, &deny_read, by_inode, private_dev.as_deref());
                    landlock::add_all(ruleset, &rules).map_err(|e| e.to_string())?;
                    if let Some(tmp) = &tmp {
                        landlock::grant_writable(ruleset, tmp).map_err(|e| e.to_string())?;
                    }
                    Ok(())
                });
                (fd, Some(add_rules))
            }
        };
        let late_masks = credentials_later.map(|search| {
            // The kept directories the rules were planned with.
            let kept = masks.as_ref().map(masks::Masks::kept).unwrap_or_default();
            let plan: supervisor::LateMasks = Box::new(move || {
                let hidden = search.run().map_err(|e| e.to_string())?;
                masks::Masks::plan(&hidden.paths, &kept)
            });
            plan
        });
        Some(supervisor::Restrictions {
            landlock: ruleset,
            pending_rules,
            seccomp,
            masks,
            late_masks,
        })
    } else {
        None
    };
    // `none` enforces nothing, but the environment allow-list still applies: it costs
    // nothing and keeps API keys out of commands the user did not mean to trust.
    let env = sandbox_env(policy, backend, tmp.as_ref().map(PrivateTmp::path));
    // Where chitti finds and makes the masks after the fork (root's one-shot call), its
    // side of the fork is the longer one, and the supervisor, whose side has time to spare,
    // looks the program up instead of chitti before the fork. Not where a missing `hooks`
    // directory is to be made below: that must wait until the program is known to exist.
    // Elsewhere the two sides end together (a user's call), or a server's calls share one
    // process (a session's call): looked up here.
    let search_later = masks_after_fork && session.is_none() && !super::missing_hooks(policy);
    let program = match search_later {
        true => PathBuf::from(&command[0]),
        false => super::resolve_command(&command[0], &env, cwd)?,
    };
    if sandboxed {
        // Only once the command is known to exist: a call that cannot run changes nothing
        // (the private TMPDIR above goes when `tmp` is dropped).
        after.extend(super::protected_paths_kept(policy)?);
    }
    let rlimits = if sandboxed {
        Rlimits::from(&policy.limits)
    } else {
        Rlimits::default()
    };
    let mut spec = supervisor::LaunchSpec::new(&program, command, &env, cwd, rlimits, restrictions)
        .map_err(SandboxError::Unavailable)?;
    // The supervisor repairs and cleans up, so that it happens even if chitti is killed.
    spec.after = after;
    spec.timeout = Some(policy.timeout);
    if search_later {
        spec.find_program = Some(supervisor::ProgramSearch {
            name: command[0].clone(),
            path_var: crate::policy::env::get(&env, "PATH").map(OsString::from),
            cwd: cwd.to_path_buf(),
        });
    }
    let mut temp_dirs = Vec::new();
    match tmp {
        Some(PrivateTmp::Fresh((dir, path))) => {
            temp_dirs.push(dir);
            spec.cleanup.push(path);
        }
        Some(PrivateTmp::Pooled(slot) | PrivateTmp::Session(slot)) => spec.tmp_slot = Some(slot),
        None => {}
    }
    Ok(Prepared {
        backend,
        launch: Launch::Supervised(spec),
        after: Vec::new(),
        temp_dirs,
        held,
        bwrap_probe_memo: None,
    })
}

/// A call's private TMPDIR: a fresh directory, removed after the call, or a slot of the
/// per-user pool, emptied after the call (see `tmp_pool`).
enum PrivateTmp {
    Fresh((tempfile::TempDir, PathBuf)),
    Pooled(tmp_pool::Slot),
    /// The slot a session keeps, before it is handed to the ruleset's lease (which gives
    /// it back to the session) and, as `Pooled`, to the supervisor.
    Session(tmp_pool::Slot),
}

impl PrivateTmp {
    fn path(&self) -> &Path {
        match self {
            PrivateTmp::Fresh((_, path)) => path,
            PrivateTmp::Pooled(slot) | PrivateTmp::Session(slot) => &slot.path,
        }
    }
}

fn pooled_or_fresh_tmp(policy: &Policy) -> Result<PrivateTmp, SandboxError> {
    match pool_slot(policy) {
        Some(slot) => Ok(PrivateTmp::Pooled(slot)),
        None => Ok(PrivateTmp::Fresh(private_dir("chitti-tmp-")?)),
    }
}

/// A free slot of the TMPDIR pool under the user's TMPDIR, if there is one for `policy`.
fn pool_slot(policy: &Policy) -> Option<tmp_pool::Slot> {
    let root = super::canonicalize(&std::env::temp_dir()).ok()?;
    tmp_pool::take(&root, &policy.writable)
}

/// Terminals handed to the command as stdio, which it may keep using (Landlock would
/// otherwise refuse to reopen them, e.g. `echo > /dev/stderr`).
fn stdio_terminals() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for fd in 0..3 {
        if unsafe { libc::isatty(fd) } == 1 {
            if let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{fd}")) {
                if path.starts_with("/dev/") && !out.contains(&path) {
                    out.push(path);
                }
            }
        }
    }
    out
}
