//! The macOS backend: `/usr/bin/sandbox-exec` with a generated Seatbelt profile.
//!
//! The profile is written to a file in a private directory that no writable root
//! contains, so the sandboxed command cannot change its own policy. Paths travel as
//! `-D` parameters (see `sandbox::seatbelt`).

use std::ffi::OsString;
use std::path::Path;

use super::{private_dir, sandbox_env, seatbelt, Backend, Launch, Prepared, SandboxError};
use crate::policy::Policy;
use crate::sandbox::rlimits::Rlimits;

pub fn prepare(
    policy: &Policy,
    command: &[OsString],
    cwd: &Path,
) -> Result<Prepared, SandboxError> {
    if !Path::new(seatbelt::SANDBOX_EXEC).exists() {
        return Err(SandboxError::Unavailable(format!(
            "{} is missing; chitti needs it to sandbox commands on macOS",
            seatbelt::SANDBOX_EXEC
        )));
    }
    let mut temp_dirs = Vec::new();
    let mut tmp_path = None;
    if policy.private_tmp {
        let (dir, path) = private_dir("chitti-tmp-")?;
        temp_dirs.push(dir);
        tmp_path = Some(path);
    }
    let env = sandbox_env(policy, Backend::Seatbelt, tmp_path.as_deref());
    let program = super::resolve_command(&command[0], &env, cwd)?;
    // Only once the command is known to exist: a call that cannot run changes nothing.
    super::create_missing_hooks(policy)?;

    let generated = seatbelt::generate(policy, tmp_path.as_deref());
    let (profile_dir, profile_dir_path) = private_dir("chitti-seatbelt-")?;
    let profile_file = profile_dir_path.join("profile.sb");
    std::fs::write(&profile_file, &generated.profile).map_err(|e| {
        SandboxError::Unavailable(format!("cannot write the Seatbelt profile: {e}"))
    })?;
    temp_dirs.push(profile_dir);

    let mut args = seatbelt::args(&generated, &profile_file);
    args.push("--".into());
    args.push(program.into());
    args.extend(command[1..].iter().cloned());
    Ok(Prepared {
        backend: Backend::Seatbelt,
        launch: Launch::Command {
            program: seatbelt::SANDBOX_EXEC.into(),
            args,
            env,
            cwd: cwd.to_path_buf(),
            pass_fds: Vec::new(),
            rlimits: Rlimits::from(&policy.limits),
        },
        after: super::nested_repo_checks(policy),
        temp_dirs,
        held: Vec::new(),
        bwrap_probe_memo: None,
    })
}
