//! `chitti sandbox profile`: the resolved policy and exactly what a backend would be
//! given. It only generates, so it works on any OS (the Seatbelt profile can be read on
//! Linux, the bwrap arguments on macOS).

use std::path::{Path, PathBuf};

use super::report_error;
use crate::policy::{profile, ChittiDirs, Overrides, Policy};
use crate::sandbox::{bwrap_args, landlock_rules, rlimits::Rlimits, seatbelt, BackendChoice};

#[inline(never)] // see cli::run
pub fn run(
    workspace: Option<PathBuf>,
    profile_spec: &str,
    backend: BackendChoice,
    bwrap_args0: bool,
) -> i32 {
    let backend = if bwrap_args0 { None } else { Some(backend) };
    match render(workspace, profile_spec, backend) {
        Ok(text) => {
            super::out(&text);
            0
        }
        Err(e) => {
            report_error(&e);
            125
        }
    }
}

/// `backend: None` asks for the raw bwrap arguments only.
fn render(
    workspace: Option<PathBuf>,
    profile_spec: &str,
    backend: Option<BackendChoice>,
) -> Result<String, String> {
    let dirs = ChittiDirs::from_env().map_err(|e| e.to_string())?;
    let profile =
        profile::load(profile_spec, Some(&dirs.user_profiles())).map_err(|e| e.to_string())?;
    let workspace = match workspace {
        Some(w) => w,
        None => std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}"))?,
    };
    let policy = Policy::resolve(
        &profile,
        &workspace,
        &Overrides::default(),
        &dirs,
        std::env::vars_os(),
    )
    .map_err(|e| e.to_string())?;
    let Some(backend) = backend else {
        let call = bwrap_args::CallArgs {
            cwd: policy.workspace.clone(),
            seccomp_fds: Vec::new(),
            status_fd: None,
        };
        let mut args = bwrap_args::args(&policy, &call, &[]);
        args.pop(); // the trailing "--": the caller appends its own command
        return Ok(args
            .iter()
            .map(|a| format!("{}\0", a.to_string_lossy()))
            .collect());
    };
    let mut out = describe_policy(&policy, &profile.description);
    // `auto` shows what a call here would really get, or why it would be refused.
    let backend = match backend {
        BackendChoice::Auto => {
            let selection = crate::sandbox::select(
                BackendChoice::Auto,
                crate::sandbox::Capabilities::get(),
                &dirs.state,
            )
            .map_err(|e| format!("--backend auto: {e}"))?;
            out.push_str(&format!(
                "\nauto picks {}: {}\n",
                selection.backend.name(),
                selection.reason
            ));
            match selection.backend {
                crate::sandbox::Backend::Landlock => BackendChoice::Landlock,
                crate::sandbox::Backend::Seatbelt => BackendChoice::Seatbelt,
                _ => BackendChoice::Bwrap,
            }
        }
        other => other,
    };
    // As `sandbox exec` would: the caller's directory when it lies in the workspace.
    let cwd = policy.working_dir(std::env::current_dir().ok().as_deref());
    let command: Vec<std::ffi::OsString> = vec!["COMMAND".into(), "ARGS...".into()];
    match backend {
        BackendChoice::Bwrap => {
            // The descriptor numbers are examples: a real call passes whichever are free.
            let call = bwrap_args::CallArgs {
                cwd,
                seccomp_fds: vec![3],
                status_fd: Some(4),
            };
            out.push_str("\nbackend bwrap: bwrap");
            for arg in bwrap_args::args(&policy, &call, &command) {
                let arg = arg.to_string_lossy();
                if arg.starts_with("--") {
                    out.push_str(" \\\n    ");
                } else {
                    out.push(' ');
                }
                out.push_str(&shell_quote(&arg));
            }
            out.push_str(&format!(
                "\n  fd 3: the seccomp program ({}); fd 4: bwrap's JSON status (the child's pid)\n  environment: the allow-list above, TMPDIR=/tmp\n  limits on bwrap: {}\n",
                seccomp_summary(policy.network),
                Rlimits::from(&policy.limits).describe()
            ));
        }
        BackendChoice::Landlock => {
            let tmp = Path::new("/tmp/chitti-tmp-XXXXXX").to_path_buf();
            let mut writable = policy.writable.clone();
            if policy.private_tmp {
                writable.push(tmp);
            }
            let (masks, deny_read, private_dev) = landlock_masks(&policy.deny_read, &writable)?;
            let rules = landlock_rules::plan(&landlock_rules::Spec {
                writable: &writable,
                deny_read,
                terminals: &[],
                private_dev: private_dev.as_deref(),
                by_inode: policy.deny_read_by_inode,
            });
            out.push_str(&format!(
                "\nbackend landlock: Landlock ABI 6 (fs + signal/abstract-socket scoping), {} rules:\n{}",
                rules.len(),
                landlock_rules::describe(&rules)
            ));
            if let Some(masks) = masks {
                out.push_str(&format!(
                    "  hidden by mounts in the command's private mount namespace (chitti runs \
                     as root):\n{}",
                    masks
                ));
            }
            out.push_str(&format!(
                "  seccomp: {}\n  also: setsid, and no way out of that process group, which is \
                 killed at once (setsid and setpgid succeed doing nothing; signals to a \
                 whole group refused); capabilities dropped, no_new_privs; {}\n  \
                 protected paths: snapshot before the call, restored after it\n",
                seccomp_summary(policy.network),
                Rlimits::from(&policy.limits).describe()
            ));
        }
        BackendChoice::Seatbelt => {
            let tmp = policy
                .private_tmp
                .then(|| PathBuf::from("/private/var/folders/XX/T/chitti-tmp-XXXXXX"));
            let generated = seatbelt::generate(&policy, tmp.as_deref());
            out.push_str(&format!(
                "\nbackend seatbelt: {} -f PROFILE",
                seatbelt::SANDBOX_EXEC
            ));
            for (name, value) in &generated.params {
                out.push_str(&format!(
                    " \\\n    -D {}",
                    shell_quote(&format!("{name}={}", value.display()))
                ));
            }
            out.push_str(" \\\n    -- COMMAND ARGS...\n\nPROFILE:\n");
            out.push_str(&generated.profile);
        }
        BackendChoice::None | BackendChoice::Auto => {
            out.push_str(
                "\nbackend none: the command runs unsandboxed (environment allow-list only)\n",
            );
        }
    }
    Ok(out)
}

fn describe_policy(p: &Policy, description: &str) -> String {
    let list = |v: &[PathBuf]| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.iter().map(|p| format!("\n    {}", p.display())).collect()
        }
    };
    let env: Vec<String> = p
        .env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    format!(
        "profile {} ({description})\n  workspace: {}\n  writable: {}\n  private TMPDIR: {}\n  \
         unreadable: {}\n  read-only inside writable roots: {}\n  not to be moved or replaced: {}\n  \
         network: {}\n  environment passed: {}\n  timeout: {} s\n",
        p.profile,
        p.workspace.display(),
        list(&p.writable),
        if p.private_tmp { "yes" } else { "no" },
        list(&p.deny_read),
        list(&p.read_only),
        list(&p.pinned),
        if p.network { "on (IP only; no unix sockets)" } else { "off" },
        env.join(" "),
        p.timeout.as_secs(),
    )
}

/// What a Landlock call plans besides its rules: the mounts, described, that would hide
/// `deny_read` (as root, where it makes them), the paths the rules must still go around,
/// and the minimal /dev's directory if the command gets one.
type LandlockMasks<'a> = (Option<String>, &'a [PathBuf], Option<PathBuf>);

/// [`LandlockMasks`] as `prepare` decides them.
#[cfg(target_os = "linux")]
fn landlock_masks<'a>(
    deny_read: &'a [PathBuf],
    writable: &[PathBuf],
) -> Result<LandlockMasks<'a>, String> {
    let (masks, around) = crate::sandbox::linux::masks::for_policy(deny_read, writable)?;
    let private_dev = masks
        .as_ref()
        .and_then(|m| m.private_dev().map(Path::to_path_buf));
    Ok((masks.map(|m| m.describe()), around, private_dev))
}

/// Off Linux the Landlock plan is shown as Linux would make it for a user.
#[cfg(not(target_os = "linux"))]
fn landlock_masks<'a>(
    deny_read: &'a [PathBuf],
    _writable: &[PathBuf],
) -> Result<LandlockMasks<'a>, String> {
    Ok((None, deny_read, None))
}

#[cfg(target_os = "linux")]
fn seccomp_summary(network: bool) -> String {
    crate::sandbox::linux::seccomp::summary(network)
}

#[cfg(not(target_os = "linux"))]
fn seccomp_summary(_network: bool) -> String {
    "the seccomp filter is compiled on Linux only".into()
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
