//! Runs a [`Prepared`] launch: spawn, stream or capture output, enforce the timeout,
//! make sure the whole tree is gone, and turn what happened into an [`Outcome`].

pub mod capture;

use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
#[cfg(not(target_os = "linux"))]
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use capture::{Captured, HeadTail};

use crate::sandbox::{Backend, Launch, Prepared, SandboxError};

/// Default cap per captured stream.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;

/// How long the tree may take to die after it was told to, before chitti kills harder.
const KILL_GRACE: Duration = Duration::from_secs(5);

#[cfg(target_os = "linux")]
use crate::sandbox::linux::supervisor::CHECKS_PATIENCE;

pub enum Output {
    /// stdout and stderr go straight to chitti's own.
    Stream,
    /// Captured, each stream capped at `max_bytes` (head and tail kept).
    Capture { max_bytes: usize },
}

impl Output {
    /// The cap per captured stream, if output is captured.
    fn capture_max(&self) -> Option<usize> {
        match self {
            Output::Stream => None,
            Output::Capture { max_bytes } => Some(*max_bytes),
        }
    }
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
    /// chitti gave up on the supervisor still ending the call's processes, and killed it:
    /// that none outlives the call is not known (the call is an error).
    pub end_unconfirmed: bool,
}

/// What a call's error says when chitti had to give up on the supervisor ending its processes.
pub const UNCONFIRMED_END: &str =
    "the sandbox's supervisor was still ending the command's processes 10 s after it was \
     told to, and chitti killed it: chitti cannot confirm that none of them outlives the \
     call. Look for them (`ps -ef`) and kill what is left";

/// How the run ended, before it is turned into an [`Outcome`].
enum Ended {
    Exited,
    TimedOut,
    Cancelled,
}

/// The command's stdio, as chitti creates it: the child's ends and chitti's ends.
struct Pipes {
    child_stdin: Option<OwnedFd>,
    child_stdout: Option<OwnedFd>,
    child_stderr: Option<OwnedFd>,
    own: OwnEnds,
}

/// chitti's ends of the command's stdio, and how much captured output it keeps.
struct OwnEnds {
    capture_max: Option<usize>,
    stdin_bytes: Option<(OwnedFd, Vec<u8>)>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let fail = |e: nix::Error| SandboxError::Unavailable(format!("cannot create a pipe: {e}"));
    #[cfg(target_os = "linux")]
    {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(fail)
    }
    #[cfg(not(target_os = "linux"))]
    {
        // No pipe2 on macOS: set close-on-exec right after creation.
        let (r, w) = nix::unistd::pipe().map_err(fail)?;
        for fd in [&r, &w] {
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            )
            .map_err(fail)?;
        }
        Ok((r, w))
    }
}

impl Pipes {
    /// Captured output is piped, and so is stderr when `pipe_stderr` (bwrap's own set-up
    /// errors arrive there, to be told from the command's).
    fn new(input: Input, output: &Output, pipe_stderr: bool) -> Result<Pipes, SandboxError> {
        let capture_max = output.capture_max();
        let mut p = Pipes {
            child_stdin: None,
            child_stdout: None,
            child_stderr: None,
            own: OwnEnds {
                capture_max,
                stdin_bytes: None,
                stdout: None,
                stderr: None,
            },
        };
        match input {
            Input::Inherit => {}
            Input::Null => {
                let null = std::fs::File::open("/dev/null")
                    .map_err(|e| SandboxError::Unavailable(format!("/dev/null: {e}")))?;
                p.child_stdin = Some(null.into());
            }
            Input::Bytes(bytes) => {
                let (r, w) = pipe()?;
                p.child_stdin = Some(r);
                p.own.stdin_bytes = Some((w, bytes));
            }
        }
        if capture_max.is_some() {
            let (r, w) = pipe()?;
            p.own.stdout = Some(r);
            p.child_stdout = Some(w);
        }
        if capture_max.is_some() || pipe_stderr {
            let (r, w) = pipe()?;
            p.own.stderr = Some(r);
            p.child_stderr = Some(w);
        }
        Ok(p)
    }
}

/// The spawned process, whichever way it was started.
enum Running {
    #[cfg(not(target_os = "linux"))]
    Command(tokio::process::Child),
    /// bubblewrap, started without a fork of chitti.
    #[cfg(target_os = "linux")]
    Direct(crate::sandbox::linux::direct::DirectChild),
    #[cfg(target_os = "linux")]
    Supervised {
        pid: libc::pid_t,
        pidfd: OwnedFd,
        status: OwnedFd,
        /// Readable once the command's processes are all dead (see `Supervised::ended`).
        ended: OwnedFd,
        /// Dropping it makes the supervisor kill the tree and exit.
        lifeline: Option<OwnedFd>,
        /// At EOF once the command has exec'd or failed to (see [`start_and_wait`]); `None`
        /// once waited for.
        started: Option<OwnedFd>,
        /// The program, for naming it when its exec fails.
        program: String,
        /// See [`CHECKS_PATIENCE`].
        checks_patience: Duration,
        /// What the supervisor wrote on its status pipe while chitti waited for its checks.
        heard: Vec<u8>,
        /// How long chitti waited for the checks before it stopped them, if it did.
        checks_stopped: Option<Duration>,
    },
}

/// Runs the launch until it exits, `timeout` passes, or `cancel` resolves. For a
/// process that goes on after the call (a session, `sandbox test`): a supervisor that has
/// reported may still be exiting when this returns, and is reaped in the background.
pub async fn run(
    prepared: Prepared,
    input: Input,
    output: Output,
    timeout: Duration,
    cancel: impl Future<Output = ()>,
) -> Result<Outcome, SandboxError> {
    let mut prepared = prepared;
    // The supervisor's own deadline is this call's, not the policy's.
    #[cfg(target_os = "linux")]
    if let Launch::Supervised(spec) = &mut prepared.launch {
        spec.timeout = Some(timeout);
    }
    let started = start(prepared, input, output)?;
    follow(started, timeout, cancel, Reap::InBackground).await
}

/// When the supervisor of a call that ended on its own is reaped. Either way the outcome
/// is returned once its report is read: the report is its last act (the command's tree
/// is dead and every repair and cleanup done by then), and what is left is its exit, the
/// teardown of a copy of this process (0.05-0.1 ms here).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reap {
    /// By [`reap_exiting_supervisors`], which a process that ends after its call (a
    /// one-shot `sandbox exec`) calls before it exits, so that nothing of the call is
    /// left by then: the outcome is worked on and printed while the supervisor exits,
    /// instead of after.
    BeforeExit,
    /// By a task of the runtime, for a process that goes on after the call.
    InBackground,
}

/// How often [`reap_exiting_supervisors`] looks for an exit before it blocks (about a
/// millisecond in all).
#[cfg(target_os = "linux")]
const EXIT_SPINS: u32 = 1000;

/// Supervisors that have reported and are exiting, for [`reap_exiting_supervisors`].
#[cfg(target_os = "linux")]
static EXITING: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

/// Waits for the supervisors of calls followed by [`finish`] to exit, and reaps them.
/// Call it before this process exits: until then a supervisor may still be exiting, and
/// one left unreaped would be handed to PID 1 (or the caller's subreaper) to reap.
pub fn reap_exiting_supervisors() {
    #[cfg(target_os = "linux")]
    {
        let exiting = std::mem::take(&mut *EXITING.lock().unwrap_or_else(|e| e.into_inner()));
        for pid in exiting {
            // Its exit is a matter of some 0.05 ms: looked for a while before blocking,
            // which would let this CPU halt and cost a wake-up on a virtual machine.
            let mut reaped = false;
            for _ in 0..EXIT_SPINS {
                match unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } {
                    0 => unsafe {
                        libc::sched_yield();
                    },
                    -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                    _ => {
                        reaped = true;
                        break;
                    }
                }
            }
            while !reaped
                && unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) } < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
    }
}

/// A launch whose process is running; [`finish`] follows it to the end. Dropped without
/// that, the process is killed (bwrap) or its supervisor kills the tree (Landlock).
pub struct Started {
    call: Call,
    own: OwnEnds,
    started: Instant,
    /// The process group to sweep after a normal exit (see `finish`).
    leader: Option<u32>,
    running: Running,
}

/// What a call keeps of its [`Prepared`] besides the launch, until it is over.
struct Call {
    backend: Backend,
    after: Vec<Box<dyn crate::sandbox::AfterCall>>,
    temp_dirs: Vec<tempfile::TempDir>,
    held: Vec<Box<dyn std::any::Any + Send>>,
    bwrap_probe_memo: Option<std::path::PathBuf>,
}

impl Call {
    /// From here on the command may run: a call dropped now leaves its records to be
    /// repaired, as a killed one does (see `AfterCall::disarm`).
    fn command_may_run(&mut self) {
        for after in &mut self.after {
            after.disarm();
        }
    }

    fn split(prepared: Prepared) -> (Launch, Call) {
        let Prepared {
            backend,
            launch,
            after,
            temp_dirs,
            held,
            bwrap_probe_memo,
        } = prepared;
        let call = Call {
            backend,
            after,
            temp_dirs,
            held,
            bwrap_probe_memo,
        };
        (launch, call)
    }
}

/// Creates the command's stdio and starts the process. On Linux this needs no async
/// runtime, so a one-shot call can build its runtime while the command starts up; on
/// other systems it must run inside one (the child is a `tokio::process::Child`).
pub fn start(prepared: Prepared, input: Input, output: Output) -> Result<Started, SandboxError> {
    start_with(prepared, input, output, None)
}

/// [`start`], then blocks, for `limit` at most, until the command has been started (for a
/// Landlock launch; bwrap is not waited for). A fork often lands on the forking process's
/// CPU, where it waits until the parent blocks: a one-shot call that went on to build its
/// runtime (some 0.08 ms) kept the supervisor and the command waiting that long (seen in
/// scheduler traces), and even the few closes after the fork cost their copy-on-write
/// faults. Waiting at once lets the command start first; the runtime is built while it
/// runs. Past `limit` (an exec stuck on a slow filesystem) the call goes on as before: the
/// runtime's timeout and signals take over.
pub fn start_and_wait(
    prepared: Prepared,
    input: Input,
    output: Output,
    limit: Duration,
) -> Result<Started, SandboxError> {
    start_with(prepared, input, output, Some(limit))
}

fn start_with(
    prepared: Prepared,
    input: Input,
    output: Output,
    wait_for_start: Option<Duration>,
) -> Result<Started, SandboxError> {
    #[cfg(not(target_os = "linux"))]
    let _ = wait_for_start;
    let (launch, mut call) = Call::split(prepared);
    let is_bwrap = matches!(launch, Launch::Command { .. });
    let Pipes {
        child_stdin,
        child_stdout,
        child_stderr,
        own,
    } = Pipes::new(input, &output, is_bwrap)?;

    let started = Instant::now();
    let leader: Option<u32>;
    let running = match launch {
        #[cfg(target_os = "linux")]
        Launch::Command {
            program,
            args,
            env,
            cwd,
            pass_fds,
            rlimits,
        } => {
            use crate::sandbox::linux::direct;
            let child = direct::DirectChild::spawn(
                &program,
                &args,
                &env,
                &cwd,
                &pass_fds,
                rlimits,
                &direct::Stdio {
                    stdin: child_stdin,
                    stdout: child_stdout,
                    stderr: child_stderr,
                },
            )
            .map_err(|e| {
                SandboxError::Unavailable(format!("cannot start {}: {e}", program.display()))
            })?;
            drop(pass_fds);
            leader = Some(child.pid as u32);
            Running::Direct(child)
        }
        #[cfg(not(target_os = "linux"))]
        Launch::Command {
            program,
            args,
            env,
            cwd,
            pass_fds,
            rlimits,
        } => {
            let mut cmd = tokio::process::Command::new(&program);
            cmd.args(&args)
                .env_clear()
                .envs(env)
                .current_dir(&cwd)
                .kill_on_drop(true)
                .stdin(child_stdin.map_or_else(Stdio::inherit, Stdio::from))
                .stdout(child_stdout.map_or_else(Stdio::inherit, Stdio::from))
                .stderr(child_stderr.map_or_else(Stdio::inherit, Stdio::from));
            let raw_fds: Vec<i32> = pass_fds.iter().map(|f| f.as_raw_fd()).collect();
            unsafe {
                cmd.pre_exec(move || {
                    // Its own session and process group: no controlling terminal, a
                    // terminal's Ctrl-C reaches chitti (which tears down in order), and
                    // the whole group can be killed at the end.
                    if libc::setsid() < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // Nothing chitti's caller left open may reach the sandbox: mark
                    // every descriptor close-on-exec, then reopen only the ones passed.
                    close_on_exec_from_3();
                    for fd in &raw_fds {
                        if libc::fcntl(*fd, libc::F_SETFD, 0) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    rlimits.apply()
                });
            }
            let child = cmd.spawn().map_err(|e| {
                SandboxError::Unavailable(format!("cannot start {}: {e}", program.display()))
            })?;
            drop(pass_fds);
            leader = child.id();
            Running::Command(child)
        }
        #[cfg(target_os = "linux")]
        Launch::Supervised(spec) => {
            use crate::sandbox::linux::supervisor;
            let program = spec.image.program().to_string_lossy().into_owned();
            let sup = supervisor::spawn(
                spec,
                supervisor::ChildStdio {
                    stdin: child_stdin,
                    stdout: child_stdout,
                    stderr: child_stderr,
                },
                wait_for_start,
            )
            .map_err(|e| {
                // The program, looked up by the supervisor, is not there or not runnable.
                match e
                    .get_ref()
                    .and_then(|e| e.downcast_ref::<supervisor::Unrunnable>())
                {
                    Some(unrunnable) => SandboxError::from(unrunnable.clone()),
                    None => SandboxError::Unavailable(format!("cannot start the sandbox: {e}")),
                }
            })?;
            // Kept until the call is over, then released (see `namespace_release`).
            call.held.push(Box::new(sup.namespace_holder));
            leader = None;
            Running::Supervised {
                pid: sup.pid,
                pidfd: sup.pidfd,
                status: sup.status,
                ended: sup.ended,
                lifeline: Some(sup.lifeline),
                started: sup.started,
                program,
                checks_patience: CHECKS_PATIENCE,
                heard: Vec::new(),
                checks_stopped: None,
            }
        }
    };
    call.command_may_run();
    Ok(Started {
        call,
        own,
        started,
        leader,
        running,
    })
}

/// bwrap started before its arguments were known (`sandbox::linux::early_bwrap`), and
/// chitti's ends of the stdio made for it.
#[cfg(target_os = "linux")]
pub struct EarlyStart {
    bwrap: crate::sandbox::linux::early_bwrap::EarlyBwrap,
    own: OwnEnds,
}

/// Starts bwrap (`program`) for `command` ahead of its options; [`start_early`] completes
/// the launch once the policy is known. The descriptors returned go to
/// [`crate::sandbox::prepare_started_bwrap`].
#[cfg(target_os = "linux")]
pub fn start_bwrap_early(
    program: &std::path::Path,
    command: &[std::ffi::OsString],
    input: Input,
    output: &Output,
) -> Result<(EarlyStart, crate::sandbox::linux::BwrapFds), SandboxError> {
    use crate::sandbox::linux::{bwrap_fds, direct, early_bwrap::EarlyBwrap};
    let Pipes {
        child_stdin,
        child_stdout,
        child_stderr,
        own,
    } = Pipes::new(input, output, true)?;
    let (fds, passed) = bwrap_fds()?;
    let stdio = direct::Stdio {
        stdin: child_stdin,
        stdout: child_stdout,
        stderr: child_stderr,
    };
    let bwrap = EarlyBwrap::spawn(program, command, passed, stdio).map_err(|e| {
        SandboxError::Unavailable(format!("cannot start {}: {e}", program.display()))
    })?;
    Ok((EarlyStart { bwrap, own }, fds))
}

/// Hands the early bwrap the launch `prepared` describes (from
/// [`crate::sandbox::prepare_started_bwrap`]).
#[cfg(target_os = "linux")]
pub fn start_early(early: EarlyStart, prepared: Prepared) -> Result<Started, SandboxError> {
    let (launch, mut call) = Call::split(prepared);
    let Launch::Command {
        program,
        args,
        env,
        cwd,
        rlimits,
        ..
    } = launch
    else {
        return Err(SandboxError::Unavailable(
            "internal error: an early bwrap was given a launch that is not bwrap's".into(),
        ));
    };
    let started = Instant::now();
    let child = early
        .bwrap
        .launch(&args, &env, &cwd, rlimits)
        .map_err(|e| {
            SandboxError::Unavailable(format!("cannot start {}: {e}", program.display()))
        })?;
    call.command_may_run();
    Ok(Started {
        call,
        own: early.own,
        started,
        leader: Some(child.pid as u32),
        running: Running::Direct(child),
    })
}

/// Follows a started launch until it exits, `timeout` passes, or `cancel` resolves.
/// Nothing of the call is left when it returns but, on Linux, its supervisor in the
/// middle of exiting: [`reap_exiting_supervisors`] must be called before this process
/// exits.
pub async fn finish(
    started: Started,
    timeout: Duration,
    cancel: impl Future<Output = ()>,
) -> Result<Outcome, SandboxError> {
    follow(started, timeout, cancel, Reap::BeforeExit).await
}

async fn follow(
    started: Started,
    timeout: Duration,
    cancel: impl Future<Output = ()>,
    reap: Reap,
) -> Result<Outcome, SandboxError> {
    let Started {
        call:
            Call {
                backend,
                mut after,
                temp_dirs,
                // Kept (not dropped) until this function returns: the call is over by then.
                held: _held,
                bwrap_probe_memo,
            },
        own:
            OwnEnds {
                capture_max,
                stdin_bytes,
                stdout,
                stderr,
            },
        started,
        leader,
        mut running,
    } = started;
    #[cfg(not(target_os = "linux"))]
    let _ = reap;
    tokio::pin!(cancel);
    // Let the command start before anything else is set up here, as a one-shot call does
    // with `start_and_wait`: a session's supervisor, forked a moment ago,
    // usually waits for this thread's CPU, and registering the stdio pipes and spawning
    // their readers first kept it waiting about 0.1 ms (seen in an MCP server's scheduler
    // trace). A cancellation meanwhile ends the wait.
    #[cfg(target_os = "linux")]
    let cancelled_early = tokio::select! {
        _ = until_running(&mut running, Duration::from_secs(1)) => false,
        _ = &mut cancel => true,
    };
    #[cfg(not(target_os = "linux"))]
    let cancelled_early = false;
    // The command's pipes are read and written on blocking threads, never on this one:
    // the sandbox can hold a pipe's lock for as long as it likes (a `splice` from an idle
    // socket into its stdout keeps it while it waits), and a read or write of that pipe
    // then sleeps uninterruptibly, signals and SIGKILL included. On this thread, which
    // runs the timeout and (in a session) the server, that froze chitti for good and left
    // the call's processes running (a review).
    if let Some((fd, bytes)) = stdin_bytes {
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let _ = std::fs::File::from(fd).write_all(&bytes);
        });
    }
    // One thread for both streams: each hand-over to a thread is a wake-up of the other CPU.
    let readers = (stdout.is_some() || stderr.is_some()).then(|| {
        let max = capture_max.unwrap_or(0);
        let forward = capture_max.is_none();
        tokio::task::spawn_blocking(move || collect([stdout, stderr], max, forward))
    });

    // The supervisor's report when it was read before its exit.
    let mut report = None;
    let ended = if cancelled_early {
        Ended::Cancelled
    } else {
        tokio::select! {
            r = until_ended(&mut running) => { report = r?; Ended::Exited }
            _ = tokio::time::sleep(timeout) => Ended::TimedOut,
            _ = &mut cancel => Ended::Cancelled,
        }
    };
    // A supervisor that has said its word on the `ended` pipe found the call's processes
    // all dead before the timeout or the cancellation (the command ended, or the
    // supervisor's own deadline passed) and is checking the repositories: the call ended,
    // and the checks get their own patience.
    // (A cancellation still to come shortens the wait for the checks; one that came is
    // not waited for again.)
    #[cfg(target_os = "linux")]
    let ended = match ended {
        Ended::TimedOut | Ended::Cancelled if is_checking(&running) => {
            let to_come = matches!(ended, Ended::TimedOut).then(|| cancel.as_mut());
            await_checks(&mut running, to_come).await?;
            Ended::Exited
        }
        ended => ended,
    };
    let mut end_unconfirmed = false;
    if !matches!(ended, Ended::Exited) {
        let to_come = matches!(ended, Ended::TimedOut).then(|| cancel.as_mut());
        end_unconfirmed = stop(&mut running, to_come).await? == Stopped::GaveUp;
    }
    // bwrap killed after its child left its process group and before that child set
    // `PR_SET_PDEATHSIG` (a cancellation as the sandbox starts, or a kill from outside)
    // leaves that child, the sandbox's init, running the command: adopted by chitti, a
    // child subreaper. The after-call work that knows its number kills it, however the
    // call ended; a process that runs this one call also kills all it has below it when
    // the call was stopped (a test caught the command running on).
    for work in &mut after {
        work.sandbox_ended();
    }
    #[cfg(target_os = "linux")]
    if !matches!(ended, Ended::Exited)
        && reap == Reap::BeforeExit
        && matches!(running, Running::Direct(_))
    {
        crate::sandbox::linux::supervisor::kill_tree_below_this_process();
    }
    if matches!(ended, Ended::Exited) && backend == Backend::Seatbelt {
        // macOS has no PID namespace or subreaper: sweep the command's session so its
        // background children do not outlive the call. While any member lives the group
        // id cannot be reused, so this reaches only our own processes.
        if let Some(pid) = leader {
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    }
    let duration = started.elapsed();

    let [(stdout, _), (stderr, stderr_head)] = match readers {
        Some(task) => task.await.unwrap_or_default(),
        None => Default::default(),
    };
    // Every sandboxed process is gone now, so nothing can race the repairs.
    let mut repairs: Vec<String> = after.into_iter().flat_map(|f| f.run()).collect();
    for dir in temp_dirs {
        if let Err(e) = crate::sandbox::cleanup::remove_tree(&dir.keep()) {
            repairs.push(e);
        }
    }

    let mut outcome = Outcome {
        exit_code: 0,
        signal: None,
        timed_out: matches!(ended, Ended::TimedOut),
        cancelled: matches!(ended, Ended::Cancelled),
        stdout,
        stderr,
        duration,
        backend,
        repairs,
        end_unconfirmed,
    };
    match ended {
        Ended::TimedOut | Ended::Cancelled => {
            outcome.exit_code = if outcome.timed_out { 124 } else { 130 };
            // The supervisor still reports what it repaired after killing the tree.
            #[cfg(target_os = "linux")]
            if let Running::Supervised {
                status,
                ended,
                program,
                heard,
                checks_stopped,
                ..
            } = running
            {
                let said = last_words(ended, heard, status);
                let _ = apply_report(&mut outcome, &said, checks_stopped, backend, &program);
                outcome.exit_code = if outcome.timed_out { 124 } else { 130 };
                outcome.signal = None;
            }
            return Ok(outcome);
        }
        Ended::Exited => {}
    }
    match running {
        #[cfg(target_os = "linux")]
        Running::Direct(mut child) => {
            let status = child
                .reap()
                .map_err(|e| SandboxError::Unavailable(format!("waiting for bwrap: {e}")))?;
            let status = std::process::ExitStatus::from_raw(status);
            check_bwrap_status(&mut outcome, status, &stderr_head, bwrap_probe_memo)?;
        }
        #[cfg(not(target_os = "linux"))]
        Running::Command(mut child) => {
            let status = child
                .wait()
                .await
                .map_err(|e| SandboxError::Unavailable(format!("waiting for bwrap: {e}")))?;
            check_bwrap_status(&mut outcome, status, &stderr_head, bwrap_probe_memo)?;
        }
        #[cfg(target_os = "linux")]
        Running::Supervised {
            pid,
            pidfd,
            status,
            ended,
            program,
            heard,
            checks_stopped,
            ..
        } => {
            let text = match (report, reap) {
                (Some(text), Reap::InBackground) => {
                    tokio::spawn(async move {
                        let _ = readable(&pidfd).await;
                        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                    });
                    text
                }
                (Some(text), Reap::BeforeExit) => {
                    EXITING.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
                    text
                }
                (None, _) => last_words(ended, heard, status),
            };
            apply_report(&mut outcome, &text, checks_stopped, backend, &program)?
        }
    }
    Ok(outcome)
}

/// The exit status of a directly started program (bwrap; sandbox-exec on macOS), with
/// bwrap's own set-up failures told apart from the command's exit code.
fn check_bwrap_status(
    outcome: &mut Outcome,
    status: std::process::ExitStatus,
    stderr_head: &[u8],
    memo: Option<std::path::PathBuf>,
) -> Result<(), SandboxError> {
    // bwrap says why it failed in one `bwrap: ` line and exits 1. Its exec of the command
    // failing (a missing `#!` interpreter, a masked path) is the command's 127 or 126,
    // as on the other backends; anything else before the command is a set-up failure.
    // More than one line of stderr means the command ran and wrote it.
    let text = String::from_utf8_lossy(stderr_head);
    let one_bwrap_line = text.starts_with("bwrap: ") && text.trim_end().lines().count() == 1;
    match status.code() {
        Some(1) if one_bwrap_line => {
            let line = text.trim_end().trim_start_matches("bwrap: ");
            if let Some(failed) = line.strip_prefix("execvp ") {
                let message = format!("cannot execute the command: {failed}");
                return Err(if failed.ends_with("No such file or directory") {
                    SandboxError::NotFound(message)
                } else {
                    SandboxError::NotExecutable(message)
                });
            }
            // Whatever the cause, the memo that bwrap works here is not to be trusted
            // any more: the next call runs the probe again (and `auto` moves on to
            // another backend if bwrap no longer works at all).
            let forgot = memo.is_some_and(|memo| std::fs::remove_file(memo).is_ok());
            Err(SandboxError::Unavailable(format!(
                "bubblewrap could not set up the sandbox: {line}{}",
                if forgot {
                    "; chitti had found bwrap working here earlier, and will test it \
                     again when a chitti command next starts (a running `chat` or `mcp` \
                     session keeps its backend; `chitti doctor` shows what `auto` picks)"
                } else {
                    ""
                }
            )))
        }
        // bwrap reports a command killed by signal N as 128+N; it cannot say more.
        Some(code) => {
            outcome.exit_code = code;
            Ok(())
        }
        None => {
            outcome.exit_code = 128 + status.signal().unwrap_or(libc::SIGKILL);
            Ok(())
        }
    }
}

#[cfg(target_os = "linux")]
/// Applies what the supervisor said to `outcome`; `checks_stopped`: after how long chitti
/// stopped the supervisor at its checks, if it did.
fn apply_report(
    outcome: &mut Outcome,
    text: &str,
    checks_stopped: Option<Duration>,
    backend: Backend,
    program: &str,
) -> Result<(), SandboxError> {
    use crate::sandbox::linux::supervisor::{Ending, Report, Unrunnable};
    let ending = Ending::parse(text);
    if ending.as_ref().is_some_and(|e| e.checking) {
        let why = match checks_stopped {
            Some(waited) => format!(
                "did not finish in the {} s chitti waited for them once the call's processes \
                 were dead, and chitti stopped them",
                waited.as_secs()
            ),
            None => "did not finish: the sandbox's supervisor ended at them (was it killed?)"
                .to_string(),
        };
        outcome.repairs.push(crate::sandbox::unrepaired(format!(
            "the checks of the repositories in the writable roots {why}: a repository there \
             may still hold what the command left to run code on the host (hooks, config)"
        )));
    }
    let report: Option<Report> = ending.map(|e| {
        outcome.repairs.extend(e.repairs);
        e.report
    });
    let errno_text = |errno: i32| std::io::Error::from_raw_os_error(errno).to_string();
    match report {
        Some(Report::Exited { code }) => outcome.exit_code = code,
        Some(Report::Signaled { signal }) => {
            outcome.exit_code = 128 + signal;
            outcome.signal = Some(signal);
        }
        Some(Report::Killed) => {
            outcome.exit_code = 124;
            // Without chitti's timeout or cancellation: the supervisor's own deadline.
            if !outcome.cancelled {
                outcome.timed_out = true;
            }
        }
        Some(Report::ExecFailed { errno }) if errno == libc::ENOENT => {
            return Err(SandboxError::NotFound(format!(
                "cannot execute the command {program}: {}",
                errno_text(errno)
            )))
        }
        Some(Report::ExecFailed { errno }) => {
            return Err(SandboxError::NotExecutable(format!(
                "cannot execute the command {program}: {}",
                errno_text(errno)
            )))
        }
        Some(Report::Unrunnable { message, not_found }) => {
            return Err(Unrunnable { message, not_found }.into())
        }
        Some(Report::SetupFailed { step, errno }) => {
            return Err(SandboxError::Unavailable(format!(
                "the {} sandbox could not be set up: {}",
                backend.name(),
                crate::sandbox::linux::supervisor::setup_failure(&step, errno)
            )))
        }
        None => {
            return Err(SandboxError::Lost(
                "the sandbox supervisor ended without a report (was it killed?): the command \
                 may have run, and how it ended is unknown; it died with the supervisor, but \
                 processes it started may still be running"
                    .into(),
            ))
        }
    }
    Ok(())
}

/// Waits for the spawned process to exit (and reaps it).
async fn wait(running: &mut Running) -> Result<(), SandboxError> {
    match running {
        #[cfg(not(target_os = "linux"))]
        Running::Command(child) => {
            child
                .wait()
                .await
                .map_err(|e| SandboxError::Unavailable(format!("waiting for bwrap: {e}")))?;
        }
        #[cfg(target_os = "linux")]
        Running::Direct(child) => {
            readable(&child.pidfd).await?;
            // However bwrap ended (killed from outside too), its child may still be in its
            // process group, in set-up: the group is killed while bwrap's zombie keeps its
            // number from being reused.
            child.kill();
            child
                .reap()
                .map_err(|e| SandboxError::Unavailable(format!("waiting for bwrap: {e}")))?;
        }
        #[cfg(target_os = "linux")]
        Running::Supervised { pid, pidfd, .. } => {
            readable(pidfd).await?;
            unsafe { libc::waitpid(*pid, std::ptr::null_mut(), 0) };
        }
    }
    Ok(())
}

/// Waits for the launch to end by itself. A supervisor's call has ended once its report
/// (one line) is read: that is returned, and the supervisor is left to exit (see
/// `Reap`). If it closed its pipe without a whole line (killed), or for anything else,
/// the process's exit is waited for and the process reaped.
async fn until_ended(running: &mut Running) -> Result<Option<String>, SandboxError> {
    #[cfg(target_os = "linux")]
    if let Running::Supervised { status, .. } = &*running {
        if let Some(line) = read_line(status).await {
            return Ok(Some(line));
        }
    }
    wait(running).await.map(|()| None)
}

/// Whether the supervisor has said on its `ended` pipe that the call's processes are all
/// dead: it is checking the repositories, or done.
#[cfg(target_os = "linux")]
fn is_checking(running: &Running) -> bool {
    matches!(running, Running::Supervised { ended, .. } if has_spoken(ended.as_raw_fd()))
}

/// Whether anything waits to be read on `pipe`.
#[cfg(target_os = "linux")]
fn has_spoken(pipe: std::os::fd::RawFd) -> bool {
    let mut unread: libc::c_int = 0;
    unsafe { libc::ioctl(pipe, libc::FIONREAD, &mut unread) == 0 && unread > 0 }
}

/// All an exited supervisor said: its `ended` line (when it got that far), then its status
/// line (when it finished; `heard` is what of it was read already), for `Ending::parse`.
#[cfg(target_os = "linux")]
fn last_words(ended: OwnedFd, heard: Vec<u8>, status: OwnedFd) -> String {
    use crate::sandbox::linux::supervisor::read_report;
    read_report(ended) + &String::from_utf8_lossy(&heard) + &read_report(status)
}

/// Waits for a supervisor that is checking the repositories (the call's processes are
/// all dead) to finish and reaps it; stops it once its patience has run out (see
/// [`CHECKS_PATIENCE`]), or [`KILL_GRACE`] after the call is cancelled (`cancel`: the
/// cancellation still to come, `None` once it came), as before its checks. Its last word
/// then shows it (see `apply_report`).
#[cfg(target_os = "linux")]
async fn await_checks<C: Future<Output = ()>>(
    running: &mut Running,
    cancel: Option<Pin<&mut C>>,
) -> Result<(), SandboxError> {
    if let Running::Supervised {
        pid,
        status,
        heard,
        checks_patience,
        checks_stopped,
        ..
    } = running
    {
        let started = tokio::time::Instant::now();
        let mut deadline = started + *checks_patience;
        // Read while waiting: a last word larger than the pipe holds (repairs name paths
        // the command chose) would otherwise keep the supervisor writing until stopped.
        let read = read_until(status, heard, |_| false);
        tokio::pin!(read);
        let finished = match cancel {
            Some(cancel) => tokio::select! {
                _ = &mut read => true,
                _ = tokio::time::sleep_until(deadline) => false,
                _ = cancel => {
                    deadline = deadline.min(tokio::time::Instant::now() + KILL_GRACE);
                    tokio::time::timeout_at(deadline, &mut read).await.is_ok()
                }
            },
            None => {
                deadline = deadline.min(started + KILL_GRACE);
                tokio::time::timeout_at(deadline, &mut read).await.is_ok()
            }
        };
        if !finished {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
            *checks_stopped = Some(started.elapsed());
        }
    }
    wait(running).await
}

/// Reads `pipe` into `into`, without waiting for its other end to close, until `done`
/// says what was read is enough (true), or to its end or an error (false). What is read
/// stays read if the future is dropped.
#[cfg(target_os = "linux")]
async fn read_until(pipe: &OwnedFd, into: &mut Vec<u8>, done: impl Fn(&[u8]) -> bool) -> bool {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let Ok(flags) = fcntl(pipe, FcntlArg::F_GETFL) else {
        return false;
    };
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    if fcntl(pipe, FcntlArg::F_SETFL(flags)).is_err() {
        return false;
    }
    // SAFETY: `pipe` outlives the registration, which ends with this function.
    let Ok(fd) = (unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            pipe.as_raw_fd(),
            tokio::io::Interest::READABLE,
        )
    }) else {
        return false;
    };
    let mut chunk = [0u8; 4096];
    while !done(into) {
        let Ok(mut ready) = fd.readable().await else {
            return false;
        };
        match ready.try_io(|_| nix::unistd::read(pipe, &mut chunk).map_err(std::io::Error::from)) {
            Ok(Ok(0)) | Ok(Err(_)) => return false,
            Ok(Ok(n)) => into.extend_from_slice(&chunk[..n]),
            Err(_would_block) => {}
        }
    }
    true
}

/// Reads one line from a pipe, without waiting for its other end to close; None at EOF
/// before a whole line, or on an error (what was read of the line is then lost: the
/// caller treats the pipe as carrying no report).
#[cfg(target_os = "linux")]
async fn read_line(pipe: &OwnedFd) -> Option<String> {
    let mut line = Vec::new();
    if !read_until(pipe, &mut line, |read| read.contains(&b'\n')).await {
        return None;
    }
    String::from_utf8(line).ok()
}

/// Resolves once a supervised command has exec'd or failed to (its `started` pipe at
/// EOF), after `limit` at most; at once if that was already waited for, or for anything
/// else. Past `limit` (an exec stuck on a slow filesystem) the call goes on as before.
#[cfg(target_os = "linux")]
async fn until_running(running: &mut Running, limit: Duration) {
    if let Running::Supervised { started, .. } = running {
        if let Some(fd) = started.take() {
            let _ = tokio::time::timeout(limit, readable(&fd)).await;
        }
    }
}

/// Resolves once `pidfd` is readable: once its process has exited (or, for a pipe, once
/// it is at EOF).
#[cfg(target_os = "linux")]
async fn readable(pidfd: &OwnedFd) -> Result<(), SandboxError> {
    // SAFETY: `pidfd` outlives the registration, which ends with this function.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            pidfd.as_raw_fd(),
            tokio::io::Interest::READABLE,
        )
    }
    .map_err(|e| SandboxError::Unavailable(format!("watching the sandbox process: {e}")))?;
    let _ = fd.readable().await;
    Ok(())
}

/// How [`stop`] ended the sandbox.
#[derive(Debug, PartialEq, Eq)]
enum Stopped {
    /// The sandbox's own teardown ended, within the grace or with chitti's help.
    Done,
    /// A supervisor still at work after twice the grace was killed: what it had left of
    /// the call's tree, if anything, went to PID 1.
    GaveUp,
}

/// Tears the sandbox down: the supervisor kills its tree when the lifeline closes;
/// bwrap's tree dies with it (`--die-with-parent`, and its PID namespace).
/// (`cancel`: a cancellation still to come, which shortens a supervisor's checks, see
/// [`await_checks`]; `None` once it came.)
async fn stop<C: Future<Output = ()>>(
    running: &mut Running,
    cancel: Option<Pin<&mut C>>,
) -> Result<Stopped, SandboxError> {
    match running {
        #[cfg(not(target_os = "linux"))]
        Running::Command(child) => {
            kill_group(child);
            let _ = child.start_kill();
        }
        #[cfg(target_os = "linux")]
        Running::Direct(child) => child.kill(),
        #[cfg(target_os = "linux")]
        Running::Supervised { lifeline, .. } => drop(lifeline.take()),
    }
    if tokio::time::timeout(KILL_GRACE, wait(running))
        .await
        .is_err()
    {
        // A supervisor still at work is what kills the tree: killing it would hand what is
        // left to PID 1, alive. chitti helps it instead, killing every process below it
        // that it sees, while it waits as long again; only then does it give up on it.
        // (Each round on a blocking thread: a large tree must not hold up the deadline.)
        // A supervisor that has spoken has killed the tree and is checking the
        // repositories: it gets the checks' patience instead, and no help, which would
        // kill its git.
        #[cfg(target_os = "linux")]
        if let Running::Supervised {
            pid, pidfd, ended, ..
        } = running
        {
            // A round still at work when the supervisor is reaped (the wait below ends)
            // goes on alone: it holds its own copies of the descriptors, the pidfd telling
            // it whether `pid` is still the supervisor's.
            let copies = (pidfd.try_clone(), ended.try_clone());
            let pid = *pid;
            let helped = async move {
                let (Ok(pidfd), Ok(ended)) = copies else {
                    return std::future::pending().await;
                };
                while !has_spoken(ended.as_raw_fd()) {
                    let (Ok(own), Ok(spoken)) = (pidfd.try_clone(), ended.try_clone()) else {
                        break;
                    };
                    // Looked at again just before: a supervisor that has spoken may be
                    // running git for its checks.
                    let round = tokio::task::spawn_blocking(move || {
                        if !has_spoken(spoken.as_raw_fd()) {
                            crate::sandbox::linux::supervisor::kill_tree_below(pid, own)
                        }
                    });
                    let _ = round.await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            tokio::select! {
                done = wait(running) => return done.map(|()| Stopped::Done),
                _ = tokio::time::sleep(KILL_GRACE) => {}
                _ = helped => {}
            }
            // Spoken by now, were it in the grace's last moment: not given up on.
            if is_checking(running) {
                return await_checks(running, cancel).await.map(|()| Stopped::Done);
            }
        }
        match running {
            #[cfg(not(target_os = "linux"))]
            Running::Command(child) => {
                let _ = child.start_kill();
            }
            #[cfg(target_os = "linux")]
            Running::Direct(child) => child.kill(),
            #[cfg(target_os = "linux")]
            Running::Supervised { pid, .. } => unsafe {
                libc::kill(*pid, libc::SIGKILL);
            },
        }
        wait(running).await?;
        // bwrap's tree dies with it; on macOS the group was killed above.
        #[cfg(target_os = "linux")]
        if matches!(running, Running::Supervised { .. }) {
            return Ok(Stopped::GaveUp);
        }
    }
    Ok(Stopped::Done)
}

/// Marks every descriptor from 3 up close-on-exec (between fork and exec). macOS has no
/// close_range.
#[cfg(not(target_os = "linux"))]
unsafe fn close_on_exec_from_3() {
    let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(256, 65536) as i32;
    for fd in 3..max {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

/// Kills the process group the spawned program leads (it called setsid), before it is
/// reaped, so the group id cannot have been reused. On macOS this is what reaches the
/// command's background children; bwrap's own PID namespace does that on Linux.
#[cfg(not(target_os = "linux"))]
fn kill_group(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
    }
}

/// What was read of a stream: what was kept of it, and its first bytes.
type Collected = (Captured, Vec<u8>);

/// Reads the command's stdout and stderr pipes (each if given) to their ends, blocking,
/// keeping at most `max` bytes of each; when `forward` is set, copies stderr to chitti's
/// own as it arrives instead. Also returns the first bytes of each.
fn collect(pipes: [Option<OwnedFd>; 2], max: usize, forward: bool) -> [Collected; 2] {
    use std::io::Write;
    let mut kept = [HeadTail::new(max), HeadTail::new(max)];
    let mut first = [Vec::new(), Vec::new()];
    // Read into spare capacity, not a zeroed buffer: in a session every page this process
    // writes after forking a supervisor is a copy-on-write fault, and zeroing 64 KiB per
    // stream was 32 of them per call, whatever the command printed.
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    // Locked per write, not for the call: chitti's own messages go there too.
    let mut out = std::io::stderr();
    let mut open = pipes;
    while open.iter().any(Option::is_some) {
        let mut polled: Vec<libc::pollfd> = open
            .iter()
            .flatten()
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `polled` is as long as the count given.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        let mut ready = polled.iter().filter(|p| p.revents != 0).map(|p| p.fd);
        let Some(fd) = ready.next() else { continue };
        let i = open
            .iter()
            .position(|o| o.as_ref().is_some_and(|o| o.as_raw_fd() == fd))
            .expect("polled from the open pipes");
        // SAFETY: read writes at most the capacity, into memory the Vec owns; the length
        // is set to what it wrote.
        let n = unsafe {
            buf.set_len(0);
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.capacity());
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                open[i] = None;
                continue;
            }
            buf.set_len(n as usize);
            n as usize
        };
        if first[i].len() < 256 {
            let take = (256 - first[i].len()).min(n);
            first[i].extend_from_slice(&buf[..take]);
        }
        if forward && i == 1 {
            let _ = out.write_all(&buf[..n]);
        } else {
            kept[i].push(&buf[..n]);
        }
    }
    let _ = out.flush();
    let [stdout, stderr] = kept;
    let [stdout_first, stderr_first] = first;
    [
        (stdout.finish(), stdout_first),
        (stderr.finish(), stderr_first),
    ]
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::sandbox::linux::supervisor::PendingRules;
    use crate::sandbox::Capabilities;
    use crate::tools::testing::Fixture;

    /// A landlock call of `sleep 30`, just started (None, said loudly, without Landlock);
    /// with `wait_for_start`, waited for that long at most until `sleep` runs.
    fn start_sleep(fx: &Fixture, wait_for_start: Option<Duration>) -> Option<Started> {
        start_sleep_under(fx, &fx.policy, wait_for_start)
    }

    /// [`start_sleep`] under `policy`.
    fn start_sleep_under(
        fx: &Fixture,
        policy: &crate::policy::Policy,
        wait_for_start: Option<Duration>,
    ) -> Option<Started> {
        if let Some(why) = Capabilities::get().landlock_blocker() {
            eprintln!("SKIP: {why}");
            return None;
        }
        let command: Vec<std::ffi::OsString> = vec!["sleep".into(), "30".into()];
        let prepared =
            crate::sandbox::prepare(Backend::Landlock, policy, &command, &fx.ws).unwrap();
        let output = Output::Capture { max_bytes: 64 };
        Some(start_with(prepared, Input::Null, output, wait_for_start).unwrap())
    }

    /// bwrap failing to set a call up (here: a writable root removed after the call was
    /// prepared) makes chitti forget its memo that bwrap works here, so that the next
    /// call probes bwrap again instead of trusting it; the error says so.
    #[test]
    fn a_bwrap_that_fails_to_set_a_call_up_is_probed_again_next_time() {
        if let Some(why) = Capabilities::get().bwrap_static_blocker() {
            eprintln!("SKIP: {why}");
            return;
        }
        let fx = Fixture::new();
        let gone = fx.ws.join("gone");
        std::fs::create_dir(&gone).unwrap();
        let mut policy = (*fx.policy).clone();
        policy.writable.push(gone.clone());
        let memo = crate::sandbox::capabilities::ProbeCache::path(&policy.state_dir);
        std::fs::create_dir_all(memo.parent().unwrap()).unwrap();
        std::fs::write(&memo, "found working").unwrap();
        let command: Vec<std::ffi::OsString> = vec!["true".into()];
        let prepared = crate::sandbox::prepare(Backend::Bwrap, &policy, &command, &fx.ws).unwrap();
        std::fs::remove_dir(&gone).unwrap();
        let output = Output::Capture { max_bytes: 4096 };
        let started = start_with(prepared, Input::Null, output, None).unwrap();
        let finished = finish(started, Duration::from_secs(60), std::future::pending());
        let err = runtime().block_on(finished).unwrap_err();
        let text = err.to_string();
        assert_eq!(err.exit_code(), 125, "{text}");
        assert!(text.contains("could not set up the sandbox"), "{text}");
        assert!(
            text.contains("test it again when a chitti command"),
            "{text}"
        );
        assert!(!memo.exists(), "the memo that bwrap works was kept");
    }

    /// bwrap stopped after its child (the PID namespace's init) left bwrap's process group
    /// and before it bound its life to bwrap's leaves that init running the command. Here it
    /// is held in that gap for good: its `--lock-file` is a FIFO no one opens for writing.
    /// A session's call, cancelled once the command runs, must still end it all and return.
    #[test]
    fn a_call_stopped_while_bwrap_s_init_is_unbound_leaves_nothing_running() {
        let outcome = with_bwrap_s_init_held_unbound(|_| async {});
        if let Some(outcome) = outcome {
            assert!(outcome.cancelled, "{outcome:?}");
        }
    }

    /// The same gap, bwrap killed from outside (the OOM killer, a user's `kill`): the call
    /// ends as bwrap did, and its init goes with it.
    #[test]
    fn a_bwrap_killed_from_outside_while_its_init_is_unbound_leaves_nothing_running() {
        let outcome = with_bwrap_s_init_held_unbound(|fifo| async move {
            let needle = fifo.into_os_string().into_encoded_bytes();
            // bwrap itself, not its child (the same command line, in a namespace of its own).
            let bwrap = running_with(&needle)
                .into_iter()
                .find(|&pid| {
                    crate::sandbox::linux::supervisor::parent_and_namespace_pids(pid)
                        .is_some_and(|(_, ids)| ids.len() == 1)
                })
                .expect("bwrap runs");
            unsafe { libc::kill(bwrap, libc::SIGKILL) };
            std::future::pending::<()>().await;
        });
        if let Some(outcome) = outcome {
            assert!(!outcome.cancelled && !outcome.timed_out, "{outcome:?}");
        }
    }

    /// Runs a session's bwrap call of `sleep` whose init is held between leaving bwrap's
    /// process group and binding its life to bwrap's; once the command runs, `then` (given
    /// the FIFO's path) runs, and the call is cancelled when it resolves. Checks from
    /// outside that the call returned and left nothing running; `None` (said loudly) where
    /// bwrap cannot run.
    fn with_bwrap_s_init_held_unbound<F: Future<Output = ()>>(
        then: impl FnOnce(std::path::PathBuf) -> F,
    ) -> Option<Outcome> {
        if let Some(why) = Capabilities::get().bwrap_static_blocker() {
            eprintln!("SKIP: {why}");
            return None;
        }
        let fx = Fixture::new();
        let fifo = fx.ws.join("held");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // A number no other process runs `sleep` with, to find its processes by.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let mark = format!("3599.{}{nanos}", std::process::id());
        let script = format!("echo > started; exec sleep {mark}");
        let command: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), script.into()];
        let mut prepared =
            crate::sandbox::prepare(Backend::Bwrap, &fx.policy, &command, &fx.ws).unwrap();
        let Launch::Command { args, .. } = &mut prepared.launch else {
            panic!("bwrap is started directly");
        };
        let end_of_options = args.iter().position(|a| a == "--").unwrap();
        args.splice(
            end_of_options..end_of_options,
            ["--lock-file".into(), fifo.clone().into_os_string()],
        );
        let started = fx.ws.join("started");
        let then = then(fifo.clone());
        let cancel = async {
            while !started.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            then.await;
        };
        let output = Output::Capture { max_bytes: 64 };
        let rt = runtime();
        let outcome = rt.block_on(async {
            let call = run(
                prepared,
                Input::Null,
                output,
                Duration::from_secs(600),
                cancel,
            );
            tokio::time::timeout(Duration::from_secs(60), call).await
        });
        let left = running_with(mark.as_bytes());
        // Whatever is left goes before the runtime, whose pipe readers wait for it.
        for &pid in &left {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = nix::fcntl::open(
            &fifo,
            nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_NONBLOCK,
            nix::sys::stat::Mode::empty(),
        );
        assert!(started.exists(), "the command never ran");
        let outcome = outcome
            .expect("the call did not return: its pipes were held open")
            .unwrap();
        assert!(left.is_empty(), "the command outlived its call: {left:?}");
        Some(outcome)
    }

    /// The processes whose command line holds `mark`, seen from outside.
    fn running_with(mark: &[u8]) -> Vec<libc::pid_t> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if cmdline.windows(mark.len()).any(|w| w == mark) {
                found.push(pid);
            }
        }
        found
    }

    /// Checked from outside: the supervisor's child already runs `sleep` (it has exec'd).
    fn assert_the_command_runs_sleep(started: &Started) {
        let command_pid = the_command(started);
        let exe = std::fs::read_link(format!("/proc/{command_pid}/exe")).unwrap();
        assert_eq!(
            exe.file_name().and_then(|n| n.to_str()),
            Some("sleep"),
            "the command runs {}",
            exe.display()
        );
    }

    /// The supervisor's child, the command (its pid, read from outside).
    fn the_command(started: &Started) -> libc::pid_t {
        let Running::Supervised { pid, .. } = &started.running else {
            panic!("a landlock call runs under a supervisor");
        };
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .expect("the supervisor is alive");
        children
            .split_whitespace()
            .next()
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("the supervisor has no child yet: {children:?}"))
    }

    /// The wait ends when the command runs its program, not when the command ends.
    #[test]
    fn start_and_wait_returns_once_the_command_has_execd() {
        let fx = Fixture::new();
        let waited = Instant::now();
        let Some(started) = start_sleep(&fx, Some(Duration::from_secs(20))) else {
            return;
        };
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "waited {:?}: until the command ended?",
            waited.elapsed()
        );
        assert_the_command_runs_sleep(&started);
        // Dropping the call makes the supervisor kill the command.
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Follows a started call to its end (a minute at most, no cancellation).
    fn outcome_of(started: Started) -> Outcome {
        let finished = finish(started, Duration::from_secs(60), std::future::pending());
        runtime().block_on(finished).unwrap()
    }

    /// The supervisor ends the call by itself once the call's timeout has passed (and the
    /// grace after it), whatever chitti does, here nothing: a chitti stuck where no signal
    /// reaches it must not keep the call's processes alive.
    #[test]
    fn the_supervisor_ends_the_call_at_the_deadline_without_chitti() {
        let fx = Fixture::new();
        let mut policy = (*fx.policy).clone();
        policy.timeout = Duration::from_secs(1);
        let started_at = Instant::now();
        let Some(started) = start_sleep_under(&fx, &policy, Some(Duration::from_secs(20))) else {
            return;
        };
        let command = the_command(&started);
        let Running::Supervised { pid, .. } = &started.running else {
            panic!("a landlock call runs under a supervisor");
        };
        let supervisor = crate::sandbox::linux::vfork::open_pidfd(*pid).unwrap();
        crate::sandbox::linux::vfork::wait_readable(&supervisor, Duration::from_secs(30));
        let took = started_at.elapsed();
        let grace = crate::sandbox::linux::supervisor::DEADLINE_GRACE;
        assert!(
            took >= Duration::from_secs(1) + grace && took < Duration::from_secs(20),
            "the supervisor ended the call after {took:?}"
        );
        let exe = std::fs::read_link(format!("/proc/{command}/exe"));
        assert!(
            exe.as_ref().map_or(true, |e| !e.ends_with("sleep")),
            "the command still runs: {exe:?}"
        );
        drop(started);
    }

    /// A supervisor that does not end the call's tree within twice the grace (here one
    /// stopped from outside) is killed, and the outcome says that the end of the call's
    /// processes is not confirmed, instead of claiming them killed.
    #[test]
    fn a_supervisor_given_up_on_leaves_the_end_unconfirmed() {
        let fx = Fixture::new();
        let Some(started) = start_sleep(&fx, Some(Duration::from_secs(20))) else {
            return;
        };
        let Running::Supervised { pid, .. } = &started.running else {
            panic!("a landlock call runs under a supervisor");
        };
        assert_eq!(unsafe { libc::kill(*pid, libc::SIGSTOP) }, 0);
        let waited = Instant::now();
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(outcome.timed_out, "{outcome:?}");
        assert!(outcome.end_unconfirmed, "{outcome:?}");
        // The timeout, twice the grace, and a bound.
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "{:?}",
            waited.elapsed()
        );
        // With a supervisor that does its work, the end is confirmed.
        let Some(started) = start_sleep(&fx, Some(Duration::from_secs(20))) else {
            return;
        };
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(outcome.timed_out && !outcome.end_unconfirmed, "{outcome:?}");
    }

    /// What `finish` waits for before it sets up the stdio readers: the command running
    /// its program, or nothing once it was waited for.
    #[test]
    fn until_running_returns_once_the_command_has_execd() {
        let fx = Fixture::new();
        let Some(mut started) = start_sleep(&fx, None) else {
            return;
        };
        let rt = runtime();
        let waited = Instant::now();
        rt.block_on(until_running(&mut started.running, Duration::from_secs(20)));
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "{:?}",
            waited.elapsed()
        );
        let Running::Supervised { started: fd, .. } = &started.running else {
            panic!("a landlock call runs under a supervisor");
        };
        assert!(fd.is_none(), "the start is waited for once");
        assert_the_command_runs_sleep(&started);
        // A second wait returns at once.
        let again = Instant::now();
        rt.block_on(until_running(&mut started.running, Duration::from_secs(20)));
        assert!(
            again.elapsed() < Duration::from_secs(1),
            "{:?}",
            again.elapsed()
        );
    }

    /// A one-shot landlock call of `sh -c SCRIPT` whose Landlock rules, added by chitti
    /// after the fork, go through `wrap` first (None, said loudly, without Landlock).
    fn start_with_rules(
        fx: &Fixture,
        script: &str,
        wrap: impl FnOnce(PendingRules) -> PendingRules,
    ) -> Option<Result<Started, SandboxError>> {
        Some(start_with_rules_wrapped(
            prepare_sh(fx, script)?,
            wrap,
            |_| {},
        ))
    }

    /// Starts `prepared` (a landlock call, output captured) with its Landlock rules passed
    /// through `wrap`, after `change` had its launch spec.
    fn start_with_rules_wrapped(
        mut prepared: Prepared,
        wrap: impl FnOnce(PendingRules) -> PendingRules,
        change: impl FnOnce(&mut crate::sandbox::linux::supervisor::LaunchSpec),
    ) -> Result<Started, SandboxError> {
        let Launch::Supervised(spec) = &mut prepared.launch else {
            panic!("a landlock call runs under a supervisor");
        };
        change(spec);
        let restrictions = spec.restrictions.as_mut().expect("landlock restrictions");
        let rules = restrictions
            .pending_rules
            .take()
            .expect("a one-shot call adds its rules after the fork");
        restrictions.pending_rules = Some(wrap(rules));
        let output = Output::Capture { max_bytes: 4096 };
        start_with(prepared, Input::Null, output, Some(Duration::from_secs(20)))
    }

    /// The command restricts itself only once chitti has added every rule: rules that
    /// come late (the workspace's write grant among them) are still the ones it runs
    /// under, and the file it writes appears.
    #[test]
    fn the_command_waits_for_rules_added_after_the_fork() {
        let fx = Fixture::new();
        let marker = fx.ws.join("written");
        let script = format!("echo ok > '{}'", marker.display());
        let late = |rules: PendingRules| -> PendingRules {
            Box::new(move |ruleset| {
                std::thread::sleep(Duration::from_millis(300));
                rules(ruleset)
            })
        };
        let Some(started) = start_with_rules(&fx, &script, late) else {
            return;
        };
        let outcome = outcome_of(started.unwrap());
        assert_eq!(outcome.exit_code, 0, "{outcome:?}");
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ok\n");
    }

    /// `rules`, then a failure: every rule but a last one is in, so that the command could
    /// run, and must not.
    fn all_but_a_last_rule(rules: PendingRules) -> PendingRules {
        Box::new(move |ruleset| {
            rules(ruleset)?;
            Err("no last rule, on purpose".to_string())
        })
    }

    /// Rules that cannot all be added stop the call: it fails with chitti's reason, and the
    /// command never runs (the file it would write does not appear).
    #[test]
    fn rules_that_cannot_be_added_after_the_fork_stop_the_command() {
        let fx = Fixture::new();
        let marker = fx.ws.join("written");
        let script = format!("echo ran > '{}'", marker.display());
        let Some(result) = start_with_rules(&fx, &script, all_but_a_last_rule) else {
            return;
        };
        let Err(e) = result else {
            panic!("the call started without its rules");
        };
        assert!(e.to_string().contains("no last rule, on purpose"), "{e}");
        assert!(!e.to_string().contains("had started"), "{e}");
        assert!(!marker.exists(), "the command ran");
    }

    /// A root call whose masks chitti finds after the fork, `sh -c SCRIPT`, with its
    /// Landlock rules (which its supervisor adds) passed through `wrap`, and chitti's search
    /// for the masks slowed by `search_takes`. None, said, where this machine cannot make
    /// such a call (not root: then it asserts why).
    fn start_finding_masks_later(
        fx: &Fixture,
        script: &str,
        wrap: impl FnOnce(PendingRules) -> PendingRules,
        search_takes: Duration,
    ) -> Option<Result<Started, SandboxError>> {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                !crate::sandbox::linux::credentials_can_wait(true),
                "only root finds the masks after the fork"
            );
            return None;
        }
        if !crate::sandbox::linux::credentials_can_wait(true) {
            eprintln!("SKIP: root here cannot make a mount namespace on a thread of its own");
            return None;
        }
        let (policy, search) = fx.source.resolve_without_credentials().unwrap();
        let command: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), script.into()];
        let prepared = crate::sandbox::linux::prepare_finding_credentials_later(
            &policy, search, &command, &fx.ws, None,
        )
        .unwrap();
        let slowed = |spec: &mut crate::sandbox::linux::supervisor::LaunchSpec| {
            // This test process has other threads: the namespace is made on a thread of its
            // own, as a session's is.
            spec.masks_made_by = crate::sandbox::linux::supervisor::MasksMadeBy::ChittiThread;
            let restrictions = spec.restrictions.as_mut().expect("landlock restrictions");
            let search = restrictions
                .late_masks
                .take()
                .expect("masks found after the fork");
            restrictions.late_masks = Some(Box::new(move || {
                std::thread::sleep(search_takes);
                search()
            }));
        };
        Some(start_with_rules_wrapped(prepared, wrap, slowed))
    }

    /// Where chitti finds and mounts the masks after the fork (root), the supervisor adds
    /// the Landlock rules, before the command starts: the command runs under them (it
    /// writes in the workspace, not outside it), and the credential location is masked.
    #[test]
    fn rules_added_by_the_supervisor_hold_for_the_command() {
        let fx = Fixture::new();
        let inside = fx.ws.join("written");
        let outside = fx.outside.join("written");
        let script = format!(
            "echo in > '{}'; echo out > '{}'; cat '{}'",
            inside.display(),
            outside.display(),
            fx.home.join(".ssh/id_ed25519").display()
        );
        let rules = |rules| rules;
        let Some(started) = start_finding_masks_later(&fx, &script, rules, Duration::ZERO) else {
            return;
        };
        let outcome = outcome_of(started.unwrap());
        assert_eq!(
            std::fs::read_to_string(&inside).unwrap(),
            "in\n",
            "{outcome:?}"
        );
        assert!(
            !outside.exists(),
            "written outside the workspace: {outcome:?}"
        );
        assert!(
            !String::from_utf8_lossy(&outcome.stdout.bytes).contains("PRIVATE KEY"),
            "{outcome:?}"
        );
        assert_ne!(outcome.exit_code, 0, "{outcome:?}");
    }

    /// Rules the supervisor cannot all add stop the call with that reason, and the command
    /// never runs (the file it would write does not appear). chitti's search is slowed so
    /// that the supervisor has given up by the time chitti writes to it: the reason is the
    /// supervisor's, not chitti's failed write.
    #[test]
    fn rules_the_supervisor_cannot_add_stop_the_call_with_its_reason() {
        let fx = Fixture::new();
        let marker = fx.ws.join("written");
        let script = format!("echo ran > '{}'", marker.display());
        let slow = Duration::from_millis(500);
        let failing = all_but_a_last_rule;
        let Some(result) = start_finding_masks_later(&fx, &script, failing, slow) else {
            return;
        };
        let e = match result {
            Err(e) => e,
            Ok(started) => {
                let finished = finish(started, Duration::from_secs(60), std::future::pending());
                runtime()
                    .block_on(finished)
                    .expect_err("the call ran without its rules")
            }
        };
        assert!(e.to_string().contains("no last rule, on purpose"), "{e}");
        assert!(!e.to_string().contains("had started"), "{e}");
        assert!(!e.to_string().contains("os error 0"), "{e}");
        assert!(
            !e.to_string().contains("cannot let the command go on"),
            "{e}"
        );
        assert!(!marker.exists(), "the command ran");
    }

    /// A call cancelled before its command has even started (the cancellation is ready at
    /// once) ends cancelled, and leaves no process of the call behind.
    #[test]
    fn a_call_cancelled_at_once_ends_cancelled_and_leaves_nothing_running() {
        let fx = Fixture::new();
        let pid_file = fx.ws.join("pid");
        let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
        for _ in 0..5 {
            let _ = std::fs::remove_file(&pid_file);
            let Some(prepared) = prepare_sh(&fx, &script) else {
                return;
            };
            let begun = Instant::now();
            let outcome = runtime()
                .block_on(run(
                    prepared,
                    Input::Null,
                    Output::Capture { max_bytes: 64 },
                    Duration::from_secs(60),
                    std::future::ready(()),
                ))
                .unwrap();
            assert!(
                begun.elapsed() < Duration::from_secs(10),
                "{:?}",
                begun.elapsed()
            );
            assert!(outcome.cancelled && !outcome.timed_out, "{outcome:?}");
            assert_eq!(outcome.exit_code, 130);
            // If the command got as far as writing its pid, that process is gone now (it
            // may have been killed between creating the file and writing it).
            let written = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if let Ok(pid) = written.trim().parse::<i32>() {
                let alive = unsafe { libc::kill(pid, 0) } == 0;
                assert!(!alive, "the command {pid} outlived its cancelled call");
            }
        }
    }

    /// A landlock call of `sh -c SCRIPT`, prepared (None, said loudly, without Landlock).
    fn prepare_sh(fx: &Fixture, script: &str) -> Option<Prepared> {
        if let Some(why) = Capabilities::get().landlock_blocker() {
            eprintln!("SKIP: {why}");
            return None;
        }
        let command: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), script.into()];
        Some(crate::sandbox::prepare(Backend::Landlock, &fx.policy, &command, &fx.ws).unwrap())
    }

    /// Work after a call that takes its time, as checks of a repository made to slow git
    /// do, and says what it was given.
    struct SlowCheck {
        takes: Duration,
        says: Vec<String>,
    }

    impl crate::sandbox::AfterCall for SlowCheck {
        fn run(self: Box<Self>) -> Vec<String> {
            std::thread::sleep(self.takes);
            self.says
        }
    }

    /// `sh -c SCRIPT` under a supervisor that runs a [`SlowCheck`] of `check` after it,
    /// which says "checked".
    fn start_sh_checked_slowly(fx: &Fixture, script: &str, check: Duration) -> Option<Started> {
        let check = SlowCheck {
            takes: check,
            says: vec!["checked".into()],
        };
        start_sh_checked_by(fx, script, Box::new(check))
    }

    /// `sh -c SCRIPT` under a supervisor that runs `check` after it.
    fn start_sh_checked_by(
        fx: &Fixture,
        script: &str,
        check: Box<dyn crate::sandbox::AfterCall>,
    ) -> Option<Started> {
        let mut prepared = prepare_sh(fx, script)?;
        let Launch::Supervised(spec) = &mut prepared.launch else {
            panic!("a landlock call runs under a supervisor");
        };
        spec.after.push(check);
        let output = Output::Capture { max_bytes: 64 };
        Some(start_with(prepared, Input::Null, output, Some(Duration::from_secs(20))).unwrap())
    }

    /// Gives the supervisor of `started` a second for its checks (see `CHECKS_PATIENCE`);
    /// its pid.
    fn with_a_second_for_checks(started: &mut Started) -> libc::pid_t {
        let Running::Supervised {
            pid,
            checks_patience,
            ..
        } = &mut started.running
        else {
            panic!("a landlock call runs under a supervisor");
        };
        *checks_patience = Duration::from_secs(1);
        *pid
    }

    const SECOND: Duration = Duration::from_secs(1);

    /// Follows `started` to its end under `timeout`, cancelled `after` from now; with how
    /// long that took.
    fn cancelled_after(
        started: Started,
        timeout: Duration,
        after: Duration,
    ) -> (Outcome, Duration) {
        let waited = Instant::now();
        let cancel = async move { tokio::time::sleep(after).await };
        let outcome = runtime()
            .block_on(finish(started, timeout, cancel))
            .unwrap();
        (outcome, waited.elapsed())
    }

    /// Whether the call says, as a failed repair, that chitti stopped its checks.
    fn checks_stopped_by_chitti(outcome: &Outcome) -> bool {
        outcome
            .repairs
            .iter()
            .any(|r| crate::sandbox::is_unrepaired(r) && r.contains("chitti stopped them"))
    }

    /// Checks that outlast chitti's grace after a timeout (5 s, and 5 s more) are not
    /// taken for a supervisor still ending the call: it said first that the call's
    /// processes were dead, so chitti waits for the checks and reports them.
    #[test]
    fn slow_checks_after_a_timeout_are_waited_for() {
        let fx = Fixture::new();
        let check = KILL_GRACE * 2 + Duration::from_secs(2);
        let Some(started) = start_sh_checked_slowly(&fx, "sleep 30", check) else {
            return;
        };
        let waited = Instant::now();
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(outcome.timed_out, "{outcome:?}");
        assert!(!outcome.end_unconfirmed, "{outcome:?}");
        assert!(waited.elapsed() >= check, "{:?}", waited.elapsed());
        assert_eq!(outcome.repairs, ["checked"], "{outcome:?}");
    }

    /// Checks still running at the call's timeout, the command having ended on its own,
    /// are not a timeout of the command; checks that outlast their patience after it are
    /// stopped, and the call says so as a failed repair (the repository was not checked),
    /// not as a call whose processes may live on.
    #[test]
    fn slow_checks_are_not_the_command_s_timeout_and_have_a_patience() {
        let fx = Fixture::new();
        let Some(started) = start_sh_checked_slowly(&fx, "exit 3", Duration::from_secs(3)) else {
            return;
        };
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(!outcome.timed_out && outcome.exit_code == 3, "{outcome:?}");
        assert_eq!(outcome.repairs, ["checked"], "{outcome:?}");

        let Some(mut started) = start_sh_checked_slowly(&fx, "exit 3", Duration::from_secs(600))
        else {
            return;
        };
        let supervisor = with_a_second_for_checks(&mut started);
        let waited = Instant::now();
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "{:?}",
            waited.elapsed()
        );
        assert!(!outcome.timed_out && outcome.exit_code == 3, "{outcome:?}");
        assert!(!outcome.end_unconfirmed, "{outcome:?}");
        assert!(
            matches!(&outcome.repairs[..], [line] if crate::sandbox::is_unrepaired(line)
                && line.contains("did not finish")),
            "{outcome:?}"
        );
        // Stopped and reaped, not left at its checks.
        reap_exiting_supervisors();
        assert!(
            !std::path::Path::new(&format!("/proc/{supervisor}")).exists()
                || std::fs::read_to_string(format!("/proc/{supervisor}/stat"))
                    .is_ok_and(|stat| !stat.contains("chitti")),
            "the supervisor still runs"
        );
    }

    /// A check whose git hangs: `sleep ARG`, run as the checks run git.
    struct HangingGit(String);

    impl crate::sandbox::AfterCall for HangingGit {
        fn run(self: Box<Self>) -> Vec<String> {
            let ran = crate::sandbox::nested_git::run_git(
                std::process::Command::new("sleep").arg(&self.0),
            );
            ran.err().map(|e| e.to_string()).into_iter().collect()
        }
    }

    /// Whether a process runs `sleep ARG`.
    fn sleep_runs(arg: &str) -> bool {
        !running_with(format!("sleep\0{arg}\0").as_bytes()).is_empty()
    }

    /// The supervisor cuts its checks short by itself at its budget (a little before chitti
    /// would stop them), so that one whose chitti is gone (killed, or a server that
    /// exited) does not check for as long as a repository makes it.
    #[test]
    fn the_supervisor_cuts_its_own_checks_at_its_budget() {
        let fx = Fixture::new();
        let arg = format!("601.{}", std::process::id());
        let Some(mut prepared) = prepare_sh(&fx, "exit 0") else {
            return;
        };
        let Launch::Supervised(spec) = &mut prepared.launch else {
            panic!("a landlock call runs under a supervisor");
        };
        spec.after.push(Box::new(HangingGit(arg.clone())));
        spec.checks_budget = Duration::from_secs(1);
        let output = Output::Capture { max_bytes: 64 };
        let started = start_with(prepared, Input::Null, output, Some(Duration::from_secs(20)));
        let waited = Instant::now();
        let outcome = outcome_of(started.unwrap());
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "{:?}",
            waited.elapsed()
        );
        assert!(
            outcome.repairs.iter().any(|r| r.contains("deadline")),
            "{outcome:?}"
        );
        assert!(!sleep_runs(&arg), "the checks' git outlived the budget");
    }

    /// A cancellation that comes while chitti waits for slow checks after a timeout stops
    /// them after the grace, not after the checks' patience.
    #[test]
    fn a_cancellation_during_slow_checks_stops_them_after_the_grace() {
        let fx = Fixture::new();
        let Some(started) = start_sh_checked_slowly(&fx, "exit 0", Duration::from_secs(40)) else {
            return;
        };
        let (outcome, took) = cancelled_after(started, Duration::from_secs(1), 3 * SECOND);
        assert!(
            took < Duration::from_secs(3) + KILL_GRACE + Duration::from_secs(3),
            "{took:?}"
        );
        assert!(checks_stopped_by_chitti(&outcome), "{outcome:?}");
    }

    /// A supervisor stopped at its checks takes the git it runs down with it: nothing
    /// would be left to stop that git otherwise.
    #[test]
    fn a_supervisor_stopped_at_its_checks_leaves_no_git_running() {
        let fx = Fixture::new();
        let arg = format!("600.{}", std::process::id());
        let check = Box::new(HangingGit(arg.clone()));
        let Some(mut started) = start_sh_checked_by(&fx, "exit 0", check) else {
            return;
        };
        with_a_second_for_checks(&mut started);
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(
            outcome.repairs.iter().any(|r| r.contains("did not finish")),
            "{outcome:?}"
        );
        let waited = Instant::now();
        while sleep_runs(&arg) && waited.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !sleep_runs(&arg),
            "the checks' git outlived the stopped supervisor"
        );
    }

    /// A cancelled call whose checks run long stops them after the grace it always had, not
    /// after the checks' patience: a user's Ctrl-C, or a server shutting down (which waits
    /// 15 s for its calls), must not wait a minute. The call says they were not finished.
    #[test]
    fn a_cancelled_call_stops_slow_checks_after_the_grace() {
        let fx = Fixture::new();
        for script in ["exit 0", "sleep 30"] {
            let check = Duration::from_secs(40);
            let Some(started) = start_sh_checked_slowly(&fx, script, check) else {
                return;
            };
            let (outcome, took) = cancelled_after(started, Duration::from_secs(60), SECOND);
            assert!(
                took < KILL_GRACE * 2 + Duration::from_secs(3),
                "({script}) {took:?}"
            );
            assert!(!outcome.end_unconfirmed, "({script}) {outcome:?}");
            assert!(checks_stopped_by_chitti(&outcome), "({script}) {outcome:?}");
        }
    }

    /// A last word larger than a pipe holds (a repair per path the command chose) is read
    /// while the checks are waited for, not taken for checks that never finished.
    #[test]
    fn a_long_last_word_after_slow_checks_is_read_whole() {
        let fx = Fixture::new();
        let says: Vec<String> = (0..100)
            .map(|i| format!("{i} {}", "x".repeat(1000)))
            .collect();
        let check = Box::new(SlowCheck {
            takes: Duration::from_secs(2),
            says: says.clone(),
        });
        let Some(started) = start_sh_checked_by(&fx, "sleep 30", check) else {
            return;
        };
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(outcome.timed_out && !outcome.end_unconfirmed, "{outcome:?}");
        assert_eq!(outcome.repairs, says);
    }

    /// The private TMPDIR is cleaned before the checks: a supervisor stopped at them
    /// leaves nothing of the command's there.
    #[test]
    fn a_supervisor_stopped_at_its_checks_leaves_the_tmpdir_clean() {
        let fx = Fixture::new();
        let script = "touch \"$TMPDIR/left\" && printf %s \"$TMPDIR\"";
        let Some(mut started) = start_sh_checked_slowly(&fx, script, Duration::from_secs(600))
        else {
            return;
        };
        with_a_second_for_checks(&mut started);
        let finished = finish(started, Duration::from_secs(1), std::future::pending());
        let outcome = runtime().block_on(finished).unwrap();
        assert!(checks_stopped_by_chitti(&outcome), "{outcome:?}");
        let tmp = String::from_utf8(outcome.stdout.bytes.clone()).unwrap();
        assert!(tmp.starts_with('/'), "{outcome:?}");
        assert!(
            !std::path::Path::new(&tmp).join("left").exists(),
            "the command's file was left in {tmp}"
        );
    }

    /// A supervisor that ends at its checks without chitti stopping it (killed from
    /// outside) is said to have ended there, not to have been stopped by chitti.
    #[test]
    fn checks_ended_from_outside_are_not_said_stopped_by_chitti() {
        let fx = Fixture::new();
        let Some(started) = start_sh_checked_slowly(&fx, "exit 0", Duration::from_secs(30)) else {
            return;
        };
        let Running::Supervised { pid, ended, .. } = &started.running else {
            panic!("a landlock call runs under a supervisor");
        };
        let waited = Instant::now();
        while !has_spoken(ended.as_raw_fd()) && waited.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(unsafe { libc::kill(*pid, libc::SIGKILL) }, 0);
        let outcome = outcome_of(started);
        assert!(
            matches!(&outcome.repairs[..], [line] if crate::sandbox::is_unrepaired(line)
                && line.contains("was it killed?")),
            "{outcome:?}"
        );
    }

    /// A supervisor killed from outside ends its call for the calls that start after it,
    /// though a copy of the call's lock lives on in another process (a child that another
    /// call of a server forks, before it closes what it does not keep): what the call
    /// recorded is left over, to be put back with what replaced it moved aside, not taken
    /// for a running call's.
    #[test]
    fn a_killed_supervisor_ends_its_call_though_a_copy_of_its_lock_lives_on() {
        let fx = Fixture::new();
        let state = tempfile::tempdir().unwrap();
        let config = fx.ws.join(".git/config");
        let (snapshot, present) = crate::sandbox::protect::Snapshot::take_shared(
            state.path(),
            &[],
            &[],
            std::slice::from_ref(&config),
            &[],
        )
        .unwrap();
        drop(present); // the same open of the lock file as the snapshot's
        let [lock] = crate::sandbox::AfterCall::fds(&snapshot)[..] else {
            panic!("one descriptor: the lock file's");
        };
        let mut copy = crate::sandbox::shared_baseline::holding_a_copy_of(lock);
        let Some(started) = start_sh_checked_by(&fx, "exec sleep 60", Box::new(snapshot)) else {
            let _ = copy.kill();
            let _ = copy.wait();
            return;
        };
        let Running::Supervised { pid, .. } = &started.running else {
            panic!("a landlock call runs under a supervisor");
        };
        assert_eq!(unsafe { libc::kill(*pid, libc::SIGKILL) }, 0);
        let finished = finish(started, Duration::from_secs(60), std::future::pending());
        let lost = runtime().block_on(finished);
        assert!(matches!(lost, Err(SandboxError::Lost(_))), "{lost:?}");
        let left_over =
            crate::sandbox::shared_baseline::left_over_for_the_next(state.path(), &config);
        copy.kill().unwrap();
        copy.wait().unwrap();
        assert!(left_over, "the killed call was taken for a running one");
    }

    /// A chitti with other threads (this test process) never makes the masks' namespace
    /// for a call marked as its only one: that would move only the calling thread. The
    /// command makes its own instead, with the same masks (as root: /etc/shadow hidden),
    /// and the thread's mount namespace is the one it had.
    #[test]
    fn a_chitti_with_threads_leaves_the_masks_to_the_command() {
        let fx = Fixture::new();
        let ran = fx.ws.join("ran");
        let copy = fx.ws.join("shadow");
        let script = format!(
            "echo ran > '{}'; cat /etc/shadow > '{}'",
            ran.display(),
            copy.display()
        );
        let Some(prepared) = prepare_sh(&fx, &script) else {
            return;
        };
        let own_namespace = || std::fs::read_link("/proc/thread-self/ns/mnt").unwrap();
        let before = own_namespace();
        let started = start_with(
            prepared.as_the_only_call(),
            Input::Null,
            Output::Capture { max_bytes: 4096 },
            Some(Duration::from_secs(20)),
        )
        .unwrap();
        assert_eq!(
            own_namespace(),
            before,
            "this thread changed its mount namespace"
        );
        let outcome = outcome_of(started);
        reap_exiting_supervisors();
        assert_eq!(
            std::fs::read_to_string(&ran).unwrap(),
            "ran\n",
            "{outcome:?}"
        );
        let leaked = std::fs::read(&copy).unwrap_or_default();
        assert!(leaked.is_empty(), "/etc/shadow was readable: {outcome:?}");
        assert_eq!(own_namespace(), before);
    }

    /// `finish` returns once the supervisor has reported, and leaves it, maybe still
    /// exiting, to `reap_exiting_supervisors`; after that it is no child of this process.
    #[test]
    fn finish_leaves_the_supervisor_to_be_reaped_before_exit() {
        let fx = Fixture::new();
        let Some(prepared) = prepare_sh(&fx, "exit 7") else {
            return;
        };
        let started = start(prepared, Input::Null, Output::Capture { max_bytes: 64 }).unwrap();
        let Running::Supervised { pid, .. } = &started.running else {
            panic!("a landlock call runs under a supervisor");
        };
        let pid = *pid;
        let outcome = outcome_of(started);
        assert_eq!(outcome.exit_code, 7, "{outcome:?}");
        assert!(
            EXITING.lock().unwrap().contains(&pid),
            "the supervisor {pid} was not left to reap"
        );
        reap_exiting_supervisors();
        assert!(EXITING.lock().unwrap().is_empty());
        let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        assert_eq!(
            (r, errno),
            (-1, Some(libc::ECHILD)),
            "the supervisor {pid} is still a child of this process"
        );
    }
}
