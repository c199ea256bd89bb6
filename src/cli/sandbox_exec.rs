//! `chitti sandbox exec`: one command, one sandbox, the command's exit status.

use std::io::IsTerminal;
use std::time::Duration;

use serde_json::json;

use super::{report_error, ExecArgs, OnOff, SandboxOpts};
use crate::exec::{self, Input, Outcome, Output};
use crate::policy::{profile, ChittiDirs, CredentialSearch, Overrides, Policy, PolicySource};
use crate::sandbox::{self, Backend, Capabilities, SandboxError};

/// Everything up to a ready launch: input checks, policy, backend.
pub(crate) struct Setup {
    pub policy: Policy,
    pub backend: Backend,
    /// What `policy` was resolved from, for sessions that resolve it per call.
    pub source: PolicySource,
    /// The credential search still to run, for `sandbox exec`'s one call only (see
    /// `sandbox::prepare_the_only_call`): while it is here, `policy.deny_read` is empty.
    pub credentials_later: Option<CredentialSearch>,
}

fn bad(e: crate::policy::PolicyError) -> SandboxError {
    SandboxError::Unavailable(e.to_string())
}

/// Builds the policy and picks the backend; every failure here means nothing ran.
pub(crate) fn setup(opts: &SandboxOpts, overrides: &Overrides) -> Result<Setup, SandboxError> {
    let dirs = ChittiDirs::from_env().map_err(bad)?;
    let selection = sandbox::select(opts.backend, Capabilities::get(), &dirs.state);
    setup_selected(opts, overrides, dirs, selection, false)
}

/// [`setup`] once the backend was picked; a failed pick is reported after the profile
/// and workspace errors, as ever. With `the_only_call`, the credential search is left in
/// the setup where the call can run it after its fork.
fn setup_selected(
    opts: &SandboxOpts,
    overrides: &Overrides,
    dirs: ChittiDirs,
    selection: Result<sandbox::Selection, SandboxError>,
    the_only_call: bool,
) -> Result<Setup, SandboxError> {
    let profile = profile::load(&opts.profile, Some(&dirs.user_profiles())).map_err(bad)?;
    let workspace = match &opts.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| {
            SandboxError::Unavailable(format!("cannot read the current directory: {e}"))
        })?,
    };
    let source = PolicySource {
        profile,
        workspace,
        overrides: overrides.clone(),
        dirs,
        env: std::env::vars_os().collect(),
    };
    let later = the_only_call
        && selection
            .as_ref()
            .is_ok_and(|s| sandbox::credentials_can_wait(s.backend, false));
    let (policy, credentials_later) = if later {
        let (policy, search) = source.resolve_without_credentials().map_err(bad)?;
        (policy, Some(search))
    } else {
        (source.resolve().map_err(bad)?, None)
    };
    let selection = selection?;
    if selection.backend == Backend::None {
        eprintln!(
            "chitti: WARNING: --backend none: the command runs UNSANDBOXED (full access to \
             your files, credentials and network)"
        );
    }
    tracing::debug!(backend = selection.backend.name(), reason = %selection.reason, "backend");
    Ok(Setup {
        policy,
        backend: selection.backend,
        source,
        credentials_later,
    })
}

pub fn run(args: ExecArgs) -> i32 {
    let overrides = Overrides {
        extra_writable: args.writable.clone(),
        network: args.network.map(|n| n == OnOff::On),
        timeout: args.timeout.map(Duration::from_secs),
    };
    let output = if args.json {
        Output::Capture {
            max_bytes: args.max_output,
        }
    } else {
        Output::Stream
    };
    // From here until the runtime listens for them, termination signals wait (see there).
    #[cfg(target_os = "linux")]
    hold_termination_signals();
    let result = ChittiDirs::from_env().map_err(bad).and_then(|dirs| {
        let selection = sandbox::select(args.sandbox.backend, Capabilities::get(), &dirs.state);
        // bwrap starts now and loads while chitti works out the policy.
        #[cfg(target_os = "linux")]
        let early = match &selection {
            Ok(s) if s.backend == Backend::Bwrap => start_bwrap_early(&args.command, &output),
            _ => None,
        };
        let mut setup = setup_selected(&args.sandbox, &overrides, dirs, selection, true)?;
        let cwd = setup
            .policy
            .working_dir(std::env::current_dir().ok().as_deref());
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| SandboxError::Unavailable(format!("cannot start the runtime: {e}")))
        };
        // On Linux the command starts first, and the runtime is built while it runs; the
        // supervisor is forked from a smaller process.
        #[cfg(target_os = "linux")]
        let (started, runtime) = {
            let started = match early {
                Some((early, fds)) => exec::start_early(
                    early,
                    sandbox::prepare_started_bwrap(&setup.policy, &args.command, &cwd, fds)?,
                )?,
                None => exec::start_and_wait(
                    match setup.credentials_later.take() {
                        Some(credentials) => sandbox::prepare_the_only_call(
                            setup.backend,
                            &setup.policy,
                            credentials,
                            &args.command,
                            &cwd,
                        )?,
                        None => {
                            sandbox::prepare(setup.backend, &setup.policy, &args.command, &cwd)?
                                .as_the_only_call()
                        }
                    },
                    stdin_input(),
                    output,
                    Duration::from_secs(1),
                )?,
            };
            (started, runtime()?)
        };
        #[cfg(not(target_os = "linux"))]
        let (runtime, started) = {
            let prepared = sandbox::prepare(setup.backend, &setup.policy, &args.command, &cwd)?;
            let runtime = runtime()?;
            // tokio's process spawning needs the runtime's context.
            let started = {
                let _context = runtime.enter();
                exec::start(prepared, stdin_input(), output)?
            };
            (runtime, started)
        };
        // Boxed: kept in this frame, the future's state (some 16 KiB) made the frame that
        // large, and every page of it is touched (probed) on entry, before the policy is
        // even read: page faults on the way to starting the command.
        let outcome = runtime.block_on(Box::pin(exec::finish(
            started,
            setup.policy.timeout,
            termination_signal(),
        )));
        // chitti exits right after: tearing the runtime down (its drivers, the signal
        // pipe) is left to the kernel.
        std::mem::forget(runtime);
        outcome.map(|outcome| (outcome, setup.policy.profile, setup.policy.timeout))
    });
    match result {
        Ok((outcome, profile, timeout)) => {
            for repair in &outcome.repairs {
                eprintln!("chitti: the command tampered with a protected path: {repair}");
            }
            // The timeout, not the call's duration: ending the tree and the checks after
            // it add to that.
            if outcome.timed_out && !outcome.end_unconfirmed {
                eprintln!(
                    "chitti: timed out after {} s; the command and every process it started were killed",
                    timeout.as_secs()
                );
            }
            let signal = RECEIVED_SIGNAL.load(std::sync::atomic::Ordering::Relaxed);
            let mut exit_code = if outcome.cancelled && signal != 0 {
                128 + signal
            } else {
                outcome.exit_code
            };
            let error = unrepaired_error(&outcome.repairs, exit_code).or_else(|| {
                outcome
                    .end_unconfirmed
                    .then(|| exec::UNCONFIRMED_END.to_string())
            });
            if let Some(error) = &error {
                report_error(error);
                exit_code = 125;
            }
            if args.json {
                let mut json = outcome_json(&outcome, &profile);
                json["exit_code"] = exit_code.into();
                if let Some(error) = error {
                    json["error"] = error.into();
                }
                super::out(&format!("{json}\n"));
            }
            exit_code
        }
        Err(e) => {
            report_error(&e.to_string());
            if args.json {
                super::out(&format!(
                    "{}\n",
                    json!({"error": e.to_string(), "exit_code": e.exit_code()})
                ));
            }
            e.exit_code()
        }
    }
}

/// The call's error when a protected path was left as the command made it: the call did
/// not keep its promise, whatever the command's own exit code.
fn unrepaired_error(repairs: &[String], exit_code: i32) -> Option<String> {
    repairs.iter().any(|r| sandbox::is_unrepaired(r)).then(|| {
        format!(
            "the command changed protected paths that chitti could not put back (the lines \
             above say which, and why; the command exited with {exit_code}). Do not run git \
             there before you have checked them by hand"
        )
    })
}

/// A terminal on stdin is never handed over; piped data is.
fn stdin_input() -> Input {
    if std::io::stdin().is_terminal() {
        Input::Null
    } else {
        Input::Inherit
    }
}

/// bwrap started ahead of the policy, or `None` to start it the usual way (any failure
/// here is met again, and reported, there).
#[cfg(target_os = "linux")]
fn start_bwrap_early(
    command: &[std::ffi::OsString],
    output: &Output,
) -> Option<(exec::EarlyStart, sandbox::linux::BwrapFds)> {
    if command.first().is_none_or(|c| c.is_empty()) {
        return None;
    }
    let bwrap = Capabilities::get().bwrap()?.path.clone();
    exec::start_bwrap_early(&bwrap, command, stdin_input(), output).ok()
}

pub(crate) fn outcome_json(outcome: &Outcome, profile: &str) -> serde_json::Value {
    json!({
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "timed_out": outcome.timed_out,
        "cancelled": outcome.cancelled,
        "stdout": String::from_utf8_lossy(&outcome.stdout.bytes),
        "stderr": String::from_utf8_lossy(&outcome.stderr.bytes),
        "stdout_truncated_bytes": outcome.stdout.truncated_bytes,
        "stderr_truncated_bytes": outcome.stderr.truncated_bytes,
        "duration_ms": outcome.duration.as_millis() as u64,
        "backend": outcome.backend.name(),
        "profile": profile,
        "protected_paths_restored": outcome.repairs,
    })
}

/// Resolves on any of [`TERMINATION_SIGNALS`], so that chitti can tear the sandbox down
/// and restore protected paths before it exits.
pub(crate) async fn termination_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    // One that arrived while held back is taken here, at once, rather than through tokio's
    // handler, pipe and driver (a signal pending at the unblock below was seen lost on that
    // way, rarely: chitti then went on as if never told to stop).
    // The others stay held back from then on: chitti is stopping, and no handler listens
    // for them on this way, so a second one unblocked would kill chitti with its default
    // action before the sandbox is down (a review saw bwrap's sandbox left running).
    #[cfg(target_os = "linux")]
    if let Some(signal) = take_pending_termination_signal() {
        RECEIVED_SIGNAL.store(signal, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    let listening: Result<Vec<_>, _> = TERMINATION_SIGNALS
        .iter()
        .map(|&n| signal(SignalKind::from_raw(n)).map(|s| (n, s)))
        .collect();
    let Ok(mut listening) = listening else {
        return std::future::pending().await;
    };
    // Listened for now: one held back meanwhile is delivered here.
    let _ = termination_signals().thread_unblock();
    let arrivals = listening.iter_mut().map(|(n, stream)| {
        Box::pin(async move {
            stream.recv().await;
            *n
        })
    });
    let (signal, _, _) = futures::future::select_all(arrivals).await;
    RECEIVED_SIGNAL.store(signal, std::sync::atomic::Ordering::Relaxed);
}

/// The signals that stop a call in order (chitti then exits 128+N): the usual three, and
/// the others whose default action would kill chitti on the spot (a terminal's Ctrl-\ is
/// SIGQUIT), where bwrap, dying with chitti as it sets a sandbox up, would leave that
/// sandbox's init running (README, known limits). SIGKILL cannot be caught.
const TERMINATION_SIGNALS: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
];

/// A termination signal held back (pending) for this thread or the process, taken without
/// waiting; `None` when there is none.
#[cfg(target_os = "linux")]
fn take_pending_termination_signal() -> Option<i32> {
    let set = termination_signals();
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid set and timeout; no siginfo wanted.
    let taken = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &zero) };
    (taken > 0).then_some(taken)
}

fn termination_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for signal in TERMINATION_SIGNALS {
        set.add(Signal::try_from(signal).expect("a signal of this platform"));
    }
    set
}

/// Holds [`TERMINATION_SIGNALS`] back while a call is set up and its command started,
/// until [`termination_signal`] listens for them (the runtime is built only once the
/// command runs). One arriving in between would otherwise kill chitti with the default
/// action: the supervisor (or bwrap) would still end the command, but chitti would not
/// exit 128+N nor report the call cancelled. The supervisor, bwrap and the command do not
/// inherit the mask (each child sets its own).
#[cfg(target_os = "linux")]
fn hold_termination_signals() {
    let _ = termination_signals().thread_block();
}

/// The signal that stopped the call, so that chitti exits 128+N for it like a shell.
pub(crate) static RECEIVED_SIGNAL: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    /// Repairs made are no error; one that could not be made fails the call (125), and
    /// the message keeps the command's own exit code.
    #[test]
    fn a_repair_that_could_not_be_made_is_the_call_s_error() {
        let made = vec!["restored /w/.git/config".to_string()];
        assert_eq!(unrepaired_error(&made, 0), None);
        let failed = vec![
            made[0].clone(),
            sandbox::unrepaired("could not restore /w/.git/hooks: No space left on device"),
        ];
        let error = unrepaired_error(&failed, 3).expect("an error");
        assert!(error.contains("could not put back") && error.contains("exited with 3"));
        assert!(sandbox::is_unrepaired(&failed[1]) && !sandbox::is_unrepaired(&made[0]));
        let told = crate::tools::execute_bash::repair_line("command", &failed[1]);
        assert!(
            told.contains("could NOT put it back: could not restore"),
            "{told}"
        );
        assert!(!told.contains(sandbox::UNREPAIRED), "{told}");
    }
}
