//! The Linux backends: bubblewrap, and Landlock + seccomp through chitti's helper.

pub mod bwrap;
pub mod caps;
pub mod helper;
pub mod landlock;
pub mod seccomp;

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use super::{protect, Backend, Capabilities, Control, Prepared, SandboxError};
use crate::policy::Policy;
use crate::sandbox::rlimits::Rlimits;

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::Unavailable(format!("cannot create a pipe: {e}")))
}

fn sandbox_env(
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

pub fn prepare(
    backend: Backend,
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
) -> Result<Prepared, SandboxError> {
    match backend {
        Backend::Bwrap => prepare_bwrap(policy, command, cwd),
        Backend::Landlock | Backend::None => prepare_helper(backend, policy, command, cwd),
    }
}

fn prepare_bwrap(
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
) -> Result<Prepared, SandboxError> {
    let bwrap = Capabilities::get()
        .bwrap
        .as_ref()
        .ok_or_else(|| SandboxError::Unavailable("bubblewrap is not installed".into()))?
        .path
        .clone();
    super::create_missing_hooks(policy)?;
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

    let mut pass_fds = Vec::new();
    let mut seccomp_fds = Vec::new();
    let programs =
        seccomp::programs(policy.network).map_err(|e| SandboxError::Unavailable(e.to_string()))?;
    for program in &programs {
        let (read, write) = pipe()?;
        // A few KiB: fits in the pipe buffer, so the write never blocks.
        std::fs::File::from(write)
            .write_all(&seccomp::to_bytes(program))
            .map_err(|e| {
                SandboxError::Unavailable(format!("cannot pass the seccomp filter: {e}"))
            })?;
        seccomp_fds.push(read.as_raw_fd());
        pass_fds.push(read);
    }
    let (status_read, status_write) = pipe()?;
    let call = bwrap::CallArgs {
        cwd: cwd.to_path_buf(),
        seccomp_fds,
        status_fd: Some(status_write.as_raw_fd()),
    };
    pass_fds.push(status_write);
    Ok(Prepared {
        backend: Backend::Bwrap,
        program: bwrap,
        args: bwrap::args(policy, &call, command),
        env,
        cwd: cwd.to_path_buf(),
        pass_fds,
        rlimits: Some(Rlimits::from(&policy.limits)),
        control: Control::Bwrap {
            status: status_read,
        },
        snapshot: None,
        tmp: None,
    })
}

/// Paths bwrap mounts over: a command there is not what the sandbox would run.
fn hidden_in_bwrap(path: &Path, policy: &Policy) -> bool {
    let replaced = ["/tmp", "/run", "/dev", "/proc"];
    replaced.iter().any(|r| path.starts_with(r))
        && !policy.writable.iter().any(|w| path.starts_with(w))
}

fn prepare_helper(
    backend: Backend,
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
) -> Result<Prepared, SandboxError> {
    let sandboxed = backend == Backend::Landlock;
    let mut snapshot = None;
    let mut tmp = None;
    let mut tmp_path: Option<PathBuf> = None;
    if sandboxed {
        super::create_missing_hooks(policy)?;
        snapshot = Some(
            protect::Snapshot::take(&policy.pinned, &policy.read_only)
                .map_err(SandboxError::Unavailable)?,
        );
        if policy.private_tmp {
            let dir = tempfile::Builder::new()
                .prefix("chitti-tmp-")
                .tempdir()
                .map_err(|e| {
                    SandboxError::Unavailable(format!("cannot create a private TMPDIR: {e}"))
                })?;
            tmp_path = Some(dir.path().canonicalize().map_err(|e| {
                SandboxError::Unavailable(format!("cannot resolve the private TMPDIR: {e}"))
            })?);
            tmp = Some(dir);
        }
    }
    let env = if sandboxed {
        sandbox_env(policy, backend, tmp_path.as_deref())
    } else {
        // `none` runs the command as the caller would, environment included.
        std::env::vars_os().collect()
    };
    super::resolve_command(&command[0], &env, cwd)?;

    let (lifeline_read, lifeline_write) = pipe()?;
    let (status_read, status_write) = pipe()?;
    let mut writable = policy.writable.clone();
    writable.extend(tmp_path.clone());
    let spec = helper::Spec {
        mode: if sandboxed {
            helper::Mode::Landlock
        } else {
            helper::Mode::None
        },
        writable,
        deny_read: policy.deny_read.clone(),
        network: policy.network,
        rlimits: if sandboxed {
            Rlimits::from(&policy.limits)
        } else {
            Rlimits::default()
        },
        lifeline_fd: lifeline_read.as_raw_fd(),
        status_fd: status_write.as_raw_fd(),
    };
    let spec_json = serde_json::to_string(&spec).map_err(|e| {
        SandboxError::Unavailable(format!(
            "cannot encode the helper's instructions (paths must be UTF-8): {e}"
        ))
    })?;
    let mut args: Vec<OsString> = vec![helper::HELPER_ARG.into(), spec_json.into(), "--".into()];
    args.extend(command.iter().cloned());
    Ok(Prepared {
        backend,
        // The running binary, even if it was replaced on disk since it started.
        program: PathBuf::from("/proc/self/exe"),
        args,
        env,
        cwd: cwd.to_path_buf(),
        pass_fds: vec![lifeline_read, status_write],
        rlimits: None,
        control: Control::Helper {
            lifeline: lifeline_write,
            status: status_read,
        },
        snapshot,
        tmp,
    })
}
