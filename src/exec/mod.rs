//! Runs a [`Prepared`] launch: spawn, stream or capture output, enforce the timeout,
//! make sure the whole tree is gone, and turn what happened into an [`Outcome`].

pub mod capture;

use std::future::Future;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

pub use capture::{Captured, HeadTail};

use crate::sandbox::linux::helper::Report;
use crate::sandbox::{Backend, Control, Prepared, SandboxError};

/// Default cap per captured stream.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;

/// How long the tree may take to die after it was told to, before chitti kills harder.
const KILL_GRACE: Duration = Duration::from_secs(5);

pub enum Output {
    /// stdout and stderr go straight to chitti's own.
    Stream,
    /// Captured, each stream capped at `max_bytes` (head and tail kept).
    Capture { max_bytes: usize },
}

pub enum Input {
    Null,
    Inherit,
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Cancelled by the caller (Ctrl-C, an MCP cancellation).
    pub cancelled: bool,
    #[serde(skip)]
    pub stdout: Captured,
    #[serde(skip)]
    pub stderr: Captured,
    pub duration: Duration,
    pub backend: Backend,
    /// Protected paths the command changed and chitti put back.
    pub repairs: Vec<String>,
}

/// Runs the launch until it exits, `timeout` passes, or `cancel` resolves.
pub async fn run(
    prepared: Prepared,
    input: Input,
    output: Output,
    timeout: Duration,
    cancel: impl Future<Output = ()>,
) -> Result<Outcome, SandboxError> {
    let Prepared {
        backend,
        program,
        args,
        env,
        cwd,
        pass_fds,
        rlimits,
        control,
        snapshot,
        tmp,
    } = prepared;
    let is_bwrap = matches!(control, Control::Bwrap { .. });

    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&args)
        .env_clear()
        .envs(env)
        .current_dir(&cwd)
        // Its own process group: a terminal's Ctrl-C reaches chitti, which then tears the
        // sandbox down in order, instead of killing the supervisor half-way.
        .process_group(0)
        .kill_on_drop(true);
    cmd.stdin(match &input {
        Input::Null => Stdio::null(),
        Input::Inherit => Stdio::inherit(),
        Input::Bytes(_) => Stdio::piped(),
    });
    let capture_max = match output {
        Output::Stream => None,
        Output::Capture { max_bytes } => Some(max_bytes),
    };
    cmd.stdout(if capture_max.is_some() {
        Stdio::piped()
    } else {
        Stdio::inherit()
    });
    // bwrap's own set-up errors arrive on stderr; read it to tell them from the command's.
    cmd.stderr(if capture_max.is_some() || is_bwrap {
        Stdio::piped()
    } else {
        Stdio::inherit()
    });
    let raw_fds: Vec<i32> = pass_fds.iter().map(|f| f.as_raw_fd()).collect();
    unsafe {
        cmd.pre_exec(move || {
            for fd in &raw_fds {
                if libc::fcntl(*fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(limits) = rlimits {
                limits.apply()?;
            }
            Ok(())
        });
    }

    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|e| {
        SandboxError::Unavailable(format!("cannot start {}: {e}", program.display()))
    })?;
    // The child has its copies; ours would keep pipes open.
    drop(pass_fds);

    if let Input::Bytes(bytes) = input {
        if let Some(mut stdin) = child.stdin.take() {
            tokio::spawn(async move {
                let _ = stdin.write_all(&bytes).await;
            });
        }
    }
    let stdout_task = child
        .stdout
        .take()
        .map(|s| tokio::spawn(collect(s, capture_max.unwrap_or(0), false)));
    let stderr_task = child
        .stderr
        .take()
        .map(|s| tokio::spawn(collect(s, capture_max.unwrap_or(0), capture_max.is_none())));

    let (mut lifeline, status_fd) = match control {
        Control::Bwrap { status } => (None, status),
        Control::Helper { lifeline, status } => (Some(lifeline), status),
    };

    let mut timed_out = false;
    let mut cancelled = false;
    tokio::pin!(cancel);
    let status = tokio::select! {
        status = child.wait() => status,
        _ = tokio::time::sleep(timeout) => { timed_out = true; stop(&mut child, &mut lifeline).await }
        _ = &mut cancel => { cancelled = true; stop(&mut child, &mut lifeline).await }
    }
    .map_err(|e| SandboxError::Unavailable(format!("waiting for the sandbox: {e}")))?;
    let duration = started.elapsed();
    drop(lifeline);

    let stdout = join(stdout_task).await;
    let (stderr, stderr_head) = match stderr_task {
        Some(task) => {
            let (captured, head) = task.await.unwrap_or_default();
            (captured, head)
        }
        None => (Captured::default(), Vec::new()),
    };
    let repairs = snapshot.map(|s| s.restore()).unwrap_or_default();
    drop(tmp);

    let mut outcome = Outcome {
        exit_code: 0,
        signal: None,
        timed_out,
        cancelled,
        stdout,
        stderr,
        duration,
        backend,
        repairs,
    };
    if timed_out {
        outcome.exit_code = 124;
        return Ok(outcome);
    }
    if cancelled {
        outcome.exit_code = 130;
        return Ok(outcome);
    }
    if is_bwrap {
        drop(status_fd);
        if let Some(code) = status.code() {
            if code == 1 && stderr_head.starts_with(b"bwrap: ") {
                let line = String::from_utf8_lossy(&stderr_head);
                return Err(SandboxError::Unavailable(format!(
                    "bubblewrap could not set up the sandbox: {}",
                    line.lines().next().unwrap_or_default()
                )));
            }
            // bwrap reports a command killed by signal N as 128+N; it cannot tell us more.
            outcome.exit_code = code;
        } else {
            outcome.exit_code = 128 + status.signal().unwrap_or(9);
        }
        return Ok(outcome);
    }
    match read_report(status_fd) {
        Some(Report::Exited { code }) => outcome.exit_code = code,
        Some(Report::Signaled { signal }) => {
            outcome.exit_code = 128 + signal;
            outcome.signal = Some(signal);
        }
        Some(Report::Killed) => outcome.exit_code = 124,
        Some(Report::NotFound { message }) => return Err(SandboxError::NotFound(message)),
        Some(Report::NotExecutable { message }) => {
            return Err(SandboxError::NotExecutable(message))
        }
        Some(Report::SetupFailed { message }) => {
            return Err(SandboxError::Unavailable(format!(
                "the {} sandbox could not be set up: {message}",
                backend.name()
            )))
        }
        None => {
            return Err(SandboxError::Unavailable(format!(
                "the sandbox helper ended without a report ({status})"
            )))
        }
    }
    Ok(outcome)
}

/// Tears the sandbox down: the helper kills its tree when the lifeline closes; bwrap's
/// tree dies with it (`--die-with-parent`, and its PID namespace).
async fn stop(
    child: &mut tokio::process::Child,
    lifeline: &mut Option<OwnedFd>,
) -> std::io::Result<std::process::ExitStatus> {
    if lifeline.take().is_none() {
        let _ = child.start_kill();
    }
    match tokio::time::timeout(KILL_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = child.start_kill();
            child.wait().await
        }
    }
}

fn read_report(status: OwnedFd) -> Option<Report> {
    let mut text = String::new();
    std::fs::File::from(status).read_to_string(&mut text).ok()?;
    serde_json::from_str(text.lines().next()?).ok()
}

async fn join(task: Option<tokio::task::JoinHandle<(Captured, Vec<u8>)>>) -> Captured {
    match task {
        Some(task) => task.await.map(|(c, _)| c).unwrap_or_default(),
        None => Captured::default(),
    }
}

/// Reads a stream to its end, keeping at most `max` bytes; when `forward` is set, copies
/// everything to chitti's stderr as it arrives instead. Also returns the first bytes.
async fn collect(
    mut stream: impl AsyncRead + Unpin,
    max: usize,
    forward: bool,
) -> (Captured, Vec<u8>) {
    let mut kept = HeadTail::new(max);
    let mut first = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = tokio::io::stderr();
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if first.len() < 256 {
            let take = (256 - first.len()).min(n);
            first.extend_from_slice(&buf[..take]);
        }
        if forward {
            let _ = out.write_all(&buf[..n]).await;
        } else {
            kept.push(&buf[..n]);
        }
    }
    let _ = out.flush().await;
    (kept.finish(), first)
}
