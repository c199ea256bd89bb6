//! Launching a command under Landlock + seccomp without re-executing chitti.
//!
//! chitti forks a **supervisor** (a copy of itself that never execs), which forks the
//! **command**. The command restricts itself between fork and exec — new session,
//! rlimits, capabilities dropped, no_new_privs, Landlock, seccomp — in a process that has
//! a single thread, because `landlock_restrict_self` binds only the calling thread.
//!
//! A one-shot call's Landlock rules are added by chitti after the fork, on another CPU
//! than the supervisor's start and the command's set-up; the command waits for a byte on
//! the go pipe before it restricts itself, and gives up without it. As root, a one-shot
//! `sandbox exec` also makes the masks' mount namespace there (`MasksMadeBy::Chitti`), and
//! the command joins it instead of making its own; chitti even looks for the credential
//! locations to mask only then (`late_masks`), and a policy error found there ends the
//! call before the command runs anything.
//!
//! The supervisor stays outside the sandbox. It is a child subreaper: when the command
//! exits, when chitti closes the lifeline pipe (timeout, cancellation), or when chitti
//! dies (the kernel closes the pipe), it kills every remaining descendant, including
//! daemonised ones, then reports how the command ended and exits.
//!
//! Everything that allocates or opens files is done in chitti before the first fork;
//! after it, only system calls (glibc keeps malloc usable after fork, but nothing here
//! needs it on the success path).

use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::caps;
use super::masks::Masks;
use super::vfork::{c_string, open_pidfd, wait_readable, ExecImage, Execve};
use crate::sandbox::rlimits::Rlimits;

/// Adds its rules to the ruleset it is given (created empty); an error names what failed.
pub type PendingRules = Box<dyn FnOnce(BorrowedFd) -> Result<(), String> + Send>;

/// The masks chitti plans after the fork, once it has found the credential locations
/// (`Masks::made_by_chitti`).
pub type LateMasks = Box<dyn FnOnce() -> Result<Masks, String> + Send>;

/// How the command ended, as the supervisor reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Report {
    Exited {
        code: i32,
    },
    Signaled {
        signal: i32,
    },
    /// The lifeline closed before the command finished (timeout or cancellation), or the
    /// call's deadline passed (see `LaunchSpec::timeout`).
    Killed,
    /// exec failed with this errno; nothing ran.
    ExecFailed {
        errno: i32,
    },
    /// A set-up step failed with this errno; nothing ran.
    SetupFailed {
        step: String,
        errno: i32,
    },
    /// The program is not on the sandbox's PATH, or is no executable file, as the
    /// supervisor found when it looked (see [`LaunchSpec::find_program`]); nothing ran.
    Unrunnable {
        message: String,
        not_found: bool,
    },
}

/// The restrictions the command applies to itself.
pub struct Restrictions {
    pub landlock: OwnedFd,
    /// Rules added to `landlock` only after the supervisor's fork: by chitti, or, where
    /// chitti finds the masks after the fork, by the supervisor (see [`spawn`]).
    pub pending_rules: Option<PendingRules>,
    pub seccomp: &'static seccompiler::BpfProgram,
    /// Mounts hiding the unreadable paths, made before the capabilities go (root only).
    pub masks: Option<Masks>,
    /// Where `masks` are chitti's to plan after the fork: how (see [`spawn`]).
    pub late_masks: Option<LateMasks>,
}

/// Who makes the masks' mount namespace, when there are masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasksMadeBy {
    /// The command, for itself, before it drops its capabilities.
    Command,
    /// chitti, after forking the supervisor, for the command to join (see [`spawn`]):
    /// only a chitti that has a single thread and exits after the call (`sandbox exec`),
    /// as it moves into that namespace for good. Should it fail, the command makes its
    /// own, unless the masks are left to chitti.
    Chitti,
    /// For a chitti that has other threads and goes on after the call (`chat`, `mcp`):
    /// [`spawn`] does its work on a thread of its own, which makes the namespace for
    /// itself alone and ends once the command has exec'd.
    ChittiThread,
}

/// Everything needed to run one command, prepared before any fork.
pub struct LaunchSpec {
    pub image: ExecImage,
    pub cwd: CString,
    pub rlimits: Rlimits,
    pub restrictions: Option<Restrictions>,
    /// Run by the supervisor once the tree is dead (restoring protected paths), so it
    /// happens even when chitti itself was killed.
    pub after: Vec<Box<dyn crate::sandbox::AfterCall>>,
    /// Removed by the supervisor once the tree is dead (the private TMPDIR).
    pub cleanup: Vec<std::path::PathBuf>,
    /// Who may make the masks' mount namespace (see [`spawn`]).
    pub masks_made_by: MasksMadeBy,
    /// The private TMPDIR when it is a slot of the pool: claimed by the supervisor before
    /// the command starts, released once the tree is dead.
    pub tmp_slot: Option<super::tmp_pool::Slot>,
    /// The call's timeout: the supervisor ends the call by itself [`DEADLINE_GRACE`]
    /// after it, whatever chitti does. chitti stuck where no signal reaches it (a read of
    /// a pipe whose lock the sandbox holds) must not keep the call alive.
    pub timeout: Option<std::time::Duration>,
    /// How long the supervisor's checks may take once the call's processes are dead: a
    /// little less than chitti waits for them, and a bound where chitti is gone.
    pub checks_budget: std::time::Duration,
    /// The program, still to be looked up on PATH by the supervisor before it claims
    /// anything (`image` names it as typed meanwhile). Root's one-shot call leaves the
    /// search to it: the supervisor's side of the fork has time to spare there, chitti's
    /// (which finds and makes the masks) none.
    pub find_program: Option<ProgramSearch>,
}

/// [`Report::Unrunnable`] as [`spawn`]'s error, where the supervisor had given up
/// before chitti's last word to it.
#[derive(Debug, Clone)]
pub struct Unrunnable {
    pub message: String,
    pub not_found: bool,
}

impl std::fmt::Display for Unrunnable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Unrunnable {}

impl From<Unrunnable> for crate::sandbox::SandboxError {
    /// What chitti would have said had it looked the program up itself (127 or 126).
    fn from(unrunnable: Unrunnable) -> Self {
        match unrunnable.not_found {
            true => Self::NotFound(unrunnable.message),
            false => Self::NotExecutable(unrunnable.message),
        }
    }
}

/// What the supervisor needs to look a program up as [`crate::sandbox::find_program`]
/// does before the fork: the same PATH and directory, the same answers.
pub struct ProgramSearch {
    pub name: OsString,
    /// The sandbox's PATH (its environment's, not chitti's).
    pub path_var: Option<OsString>,
    pub cwd: std::path::PathBuf,
}

impl ProgramSearch {
    /// The program's path, or the report of a call that cannot run.
    fn run(&self) -> Result<CString, Report> {
        use crate::sandbox::SandboxError;
        let unrunnable = |message, not_found| Report::Unrunnable { message, not_found };
        match crate::sandbox::find_program(&self.name, self.path_var.as_deref(), &self.cwd) {
            Ok(path) => c_string(path.as_os_str().as_bytes())
                .map_err(|step| Report::SetupFailed { step, errno: 0 }),
            Err(SandboxError::NotFound(message)) => Err(unrunnable(message, true)),
            Err(SandboxError::NotExecutable(message)) => Err(unrunnable(message, false)),
            Err(other) => Err(Report::SetupFailed {
                step: format!("looking the program up: {other}"),
                errno: 0,
            }),
        }
    }
}

/// The supervisor's word on the call: how the command ended and what had to be repaired.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ending {
    pub report: Report,
    pub repairs: Vec<String>,
    /// Said on the `ended` pipe, before the checks (see `finish`): every process of the
    /// call is dead, and the repairs are still to come. As the last word, the checks never
    /// finished (the supervisor was killed at them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checking: bool,
}

impl Ending {
    /// Reads the supervisor's last word from what it wrote (one JSON line per pipe; given
    /// the `ended` pipe's line, then the status pipe's); None if it ended without one.
    pub fn parse(text: &str) -> Option<Ending> {
        text.lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
    }
}

/// Everything the supervisor wrote on its status pipe, once it has exited.
pub fn read_report(status: OwnedFd) -> String {
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(&mut std::fs::File::from(status), &mut text);
    text
}

impl LaunchSpec {
    pub fn new(
        program: &Path,
        args: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &Path,
        rlimits: Rlimits,
        restrictions: Option<Restrictions>,
    ) -> Result<LaunchSpec, String> {
        Ok(LaunchSpec {
            image: ExecImage::new(program, args, env)?,
            cwd: c_string(cwd.as_os_str().as_bytes())?,
            rlimits,
            restrictions,
            after: Vec::new(),
            cleanup: Vec::new(),
            masks_made_by: MasksMadeBy::Command,
            tmp_slot: None,
            timeout: None,
            checks_budget: CHECKS_PATIENCE.saturating_sub(CHECKS_OWN_MARGIN),
            find_program: None,
        })
    }
}

/// The running supervisor, from chitti's side.
pub struct Supervised {
    pub pid: libc::pid_t,
    /// Readable when the supervisor has exited.
    pub pidfd: OwnedFd,
    /// Drop it to make the supervisor kill the tree and exit.
    pub lifeline: OwnedFd,
    /// One JSON [`Ending`] line, then EOF.
    pub status: OwnedFd,
    /// One JSON [`Ending`] line (`checking`) once the command's processes are all dead,
    /// before the supervisor's checks; read only when the supervisor is slow to end.
    pub ended: OwnedFd,
    /// At EOF once the command has been started (it has exec'd, or failed to); `None`
    /// when [`spawn`] already waited for that.
    pub started: Option<OwnedFd>,
    /// Where a session's masks thread leaves what holds the call's namespace once the
    /// command runs (see `namespace_release`): keep it until the call is over.
    pub namespace_holder: NamespaceHolder,
}

/// What a masks thread leaves holding its call's namespace (see [`Supervised`]).
pub type NamespaceHolder = std::sync::Arc<std::sync::OnceLock<OwnedFd>>;

/// The command's stdio: `None` keeps chitti's own descriptor.
pub struct ChildStdio {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

fn last_error() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Forks the supervisor. With `wait_for_start`, returns once the command has exec'd (or
/// failed to), or that long at most; else at once, and `Supervised::started` says when.
pub fn spawn(
    spec: LaunchSpec,
    stdio: ChildStdio,
    wait_for_start: Option<std::time::Duration>,
) -> std::io::Result<Supervised> {
    if spec.masks_made_by != MasksMadeBy::ChittiThread {
        return spawn_here(spec, stdio, wait_for_start);
    }
    // `unshare` moves only the calling thread (its filesystem context and mount
    // namespace): a thread of its own makes this call's masks' namespace, the command
    // joins it through that thread's pidfd, and the thread ends once the command has
    // exec'd (after joining), leaving the namespace to the command. No thread that goes
    // on, nor the supervisor (forked before), is ever in it. The caller waits only until
    // the masks are in place (the go byte), as it used to wait for the search.
    let (send, receive) = std::sync::mpsc::sync_channel(1);
    let job: MasksJob = Box::new(move || {
        let mut spawned = spawn_here(spec, stdio, None);
        // The caller gets a copy (or, without one, does not wait for the start).
        let started = match &mut spawned {
            Ok(supervised) => supervised.started.take().inspect(|started| {
                supervised.started = started.try_clone().ok();
            }),
            Err(_) => None,
        };
        let holder = spawned.as_ref().ok().map(|s| s.namespace_holder.clone());
        let _ = send.send(spawned);
        if let Some(started) = started {
            wait_readable(&started, OWN_THREAD_WAITS_FOR_START);
            // The namespace is the command's now; held by a ring the caller keeps until
            // the call is over, its teardown happens after the call, in a kernel worker,
            // not in the command's exit, which the supervisor waits for.
            if let Some(holder) = holder {
                if let Some(ring) = super::namespace_release::ring_holding_own(None) {
                    let _ = holder.set(ring);
                }
            }
        }
    });
    // The thread started after the last such call, if it is there; else one now.
    let spare = SPARE_MASKS_THREAD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let job = match spare {
        Some(thread) => thread.send(job).err().map(|unsent| unsent.0),
        None => Some(job),
    };
    if let Some(job) = job {
        start_masks_thread()?
            .send(job)
            .map_err(|_| std::io::Error::other("the thread that starts the sandbox ended"))?;
    }
    let supervised = receive.recv().unwrap_or_else(|_| {
        Err(std::io::Error::other(
            "the thread that starts the sandbox ended without a word",
        ))
    });
    // Starting a thread takes some 0.07 ms here: the next call's is started now, while
    // this call's command starts on the other CPU, rather than when that call comes.
    if let Ok(thread) = start_masks_thread() {
        SPARE_MASKS_THREAD
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(thread);
    }
    let mut supervised = supervised?;
    if let (Some(limit), Some(started)) = (wait_for_start, supervised.started.take()) {
        wait_readable(&started, limit);
    }
    Ok(supervised)
}

/// One call's work on a thread of its own ([`MasksMadeBy::ChittiThread`]).
type MasksJob = Box<dyn FnOnce() + Send>;

/// A thread started for the next call that needs one: waiting for its one job in the
/// process's own namespaces, as every thread that goes on is.
static SPARE_MASKS_THREAD: std::sync::Mutex<Option<std::sync::mpsc::SyncSender<MasksJob>>> =
    std::sync::Mutex::new(None);

thread_local! {
    /// Set on a masks thread once its job begins (see [`start_masks_thread`]).
    static ON_A_MASKS_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A thread that runs one [`MasksJob`] and ends. It is started from a thread in the
/// process's namespaces, so that it shares them and the process's root and working
/// directory until its job moves it; started from a masks thread, it would share that
/// thread's.
fn start_masks_thread() -> std::io::Result<std::sync::mpsc::SyncSender<MasksJob>> {
    // A thread started by a masks thread would share the namespace that thread made.
    if ON_A_MASKS_THREAD.get() {
        return Err(std::io::Error::other(
            "a thread that makes a call's namespace starts no other",
        ));
    }
    let (jobs, job) = std::sync::mpsc::sync_channel::<MasksJob>(1);
    // Signals for the process go to its other threads: none interrupts this one's waits
    // (a wait cut short would end the thread before the command joins its namespace).
    // Blocked before it starts, so that none arrives in between; the supervisor, forked
    // there, unblocks them for itself.
    let started = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut before);
        let started = std::thread::Builder::new()
            .name("chitti-masks".into())
            .spawn(move || {
                if let Ok(job) = job.recv() {
                    ON_A_MASKS_THREAD.set(true);
                    job();
                }
            });
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        started
    };
    started.map(|_| jobs)
}

/// How long a thread that made the masks' namespace waits for the command to join it
/// before it ends. The command joins before it asks for anything else; past this (a
/// machine stalled that long), the thread's end makes the join fail and the call with it.
const OWN_THREAD_WAITS_FOR_START: std::time::Duration = std::time::Duration::from_secs(60);

/// A pidfd of the calling thread (Linux 6.9), through which another process can join the
/// thread's own mount namespace.
fn open_thread_pidfd() -> std::io::Result<OwnedFd> {
    // PIDFD_THREAD has the value of O_EXCL.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::gettid(), libc::O_EXCL) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether a thread of this process can make a mount namespace for a command to join
/// ([`MasksMadeBy::ChittiThread`]): pidfds of threads exist (Linux 6.9).
pub fn threads_can_make_masks() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| open_thread_pidfd().is_ok())
}

fn spawn_here(
    mut spec: LaunchSpec,
    stdio: ChildStdio,
    wait_for_start: Option<std::time::Duration>,
) -> std::io::Result<Supervised> {
    let (lifeline_read, lifeline_write) = pipe()?;
    let (status_read, status_write) = pipe()?;
    let (ended_read, ended_write) = pipe()?;
    let (started_read, started_write) = pipe()?;
    let mut pending_rules = spec
        .restrictions
        .as_mut()
        .and_then(|r| r.pending_rules.take());
    let late_masks = spec.restrictions.as_mut().and_then(|r| r.late_masks.take());
    // The masks' namespace made here (see below) is joined through this process's pidfd.
    let masks = spec.restrictions.as_ref().and_then(|r| r.masks.as_ref());
    let chitti_pidfd = match masks {
        // Without it the command could neither join nor make the masks (they are left to
        // this thread): the call would fail in the command, for a reason it cannot name.
        Some(_) if spec.masks_made_by == MasksMadeBy::ChittiThread => {
            Some(open_thread_pidfd().map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot open a pidfd of the thread that hides the credentials: {e}"),
                )
            })?)
        }
        Some(_) if spec.masks_made_by == MasksMadeBy::Chitti => {
            open_pidfd(unsafe { libc::getpid() }).ok()
        }
        _ => None,
    };
    // Where chitti finds and mounts the masks after the fork (root's one-shot call), that
    // work is the longer side: the command, ready first, waits for it. The supervisor then
    // adds the rules, before it starts the command, on the other CPU (the command starts
    // a little later and waits a little less), and chitti says at once that they are in.
    let rules_by_supervisor = match (&late_masks, &chitti_pidfd) {
        (Some(_), Some(_)) => pending_rules.take(),
        _ => None,
    };
    // With rules still to add, or a namespace to make, the command waits on this pipe.
    let go = match (&pending_rules, &chitti_pidfd) {
        (None, None) => None,
        _ => Some(pipe()?),
    };
    // Raw pointers for execve, built before fork.
    let execve = spec.image.execve();
    // The supervisor allocates (its report, the repairs).
    crate::allocator_survives_fork();
    // A process forked from a thread is named after it (`chitti-masks`, a runtime's
    // worker): the supervisor goes by chitti's name wherever it was forked.
    let renamed = unsafe { libc::gettid() != libc::getpid() };

    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // Supervisor. Never returns.
        if renamed {
            unsafe { libc::prctl(libc::PR_SET_NAME, c"chitti".as_ptr(), 0, 0, 0) };
        }
        let keep = Keep {
            stdin: stdio.stdin.as_ref().map(|f| f.as_raw_fd()),
            stdout: stdio.stdout.as_ref().map(|f| f.as_raw_fd()),
            stderr: stdio.stderr.as_ref().map(|f| f.as_raw_fd()),
            lifeline: lifeline_read.as_raw_fd(),
            status: status_write.as_raw_fd(),
            ended: ended_write.as_raw_fd(),
            started: started_write.as_raw_fd(),
            landlock: spec.restrictions.as_ref().map(|r| r.landlock.as_raw_fd()),
            go: go.as_ref().map(|(r, _)| r.as_raw_fd()),
            chitti: chitti_pidfd.as_ref().map(|f| f.as_raw_fd()),
        };
        let after = std::mem::take(&mut spec.after);
        let aftermath = Aftermath {
            after,
            cleanup: std::mem::take(&mut spec.cleanup),
            tmp_slot: spec.tmp_slot.take(),
            checks_budget: spec.checks_budget,
        };
        unsafe { supervisor_main(&spec, &execve, keep, aftermath, rules_by_supervisor) }
    }
    for after in &mut spec.after {
        after.disarm();
    }
    // Adding the rules (planning them lists directories: 0.1 ms or more) overlaps the
    // supervisor's start and the command's set-up, on another CPU. The ruleset object is
    // shared with the forked copies of its descriptor; the command enforces it only once
    // every rule is in: it waits for the byte written below, and fails on end of file,
    // which is all it gets if a rule cannot be added or chitti dies meanwhile.
    let mut rules_added = Ok(());
    // Whether the supervisor is gone before the command could go on: its report says why.
    let mut supervisor_gone = false;
    // Whether this process moved into the masks' namespace for good (`MasksMadeBy::Chitti`).
    let mut in_own_namespace = false;
    if let (Some((go_read, go_write)), Some(restrictions)) = (go, spec.restrictions.as_ref()) {
        drop(go_read);
        super::cpu::move_to_another_cpu(pid);
        let mut send = |byte: u8| {
            if unsafe { libc::write(go_write.as_raw_fd(), [byte].as_ptr().cast(), 1) } == 1 {
                Ok(())
            } else {
                let e = std::io::Error::last_os_error();
                supervisor_gone = e.raw_os_error() == Some(libc::EPIPE);
                Err(format!("cannot let the command go on: {e}"))
            }
        };
        // The masks' private mount namespace costs its creation and mounts (some 0.1 ms):
        // made here, while the supervisor and the command start on the other CPU, the
        // command only joins it. It joins as soon as the namespace exists, and mounts made
        // in it afterwards are its mounts too: they are all in place before the go byte,
        // and nothing runs before that but the command's own set-up. Should the namespace
        // not be made here, the command makes its own as ever, with the same masks; but
        // where they are left to chitti (`late_masks`) the call ends instead (the command
        // fails at the closed pipe).
        let mut entered = None;
        if chitti_pidfd.is_some() {
            entered = restrictions.masks.as_ref().filter(|_| {
                (spec.masks_made_by == MasksMadeBy::ChittiThread || single_threaded())
                    && unsafe { Masks::enter() }.is_ok()
            });
        }
        in_own_namespace = entered.is_some() && spec.masks_made_by == MasksMadeBy::Chitti;
        rules_added = match (entered, &late_masks, &chitti_pidfd) {
            (Some(_), _, _) => send(JOIN_CHITTI),
            (None, None, Some(_)) => send(MAKE_OWN),
            (None, None, None) => Ok(()),
            (None, Some(_), _) => Err(format!(
                "cannot make the private mount namespace that hides the credential locations \
                 (run as root): {MASKS_HINT}"
            )),
        };
        // Before the mounts: a terminal's rule names it by its path under the host's /dev.
        if let (Some(add_rules), Ok(())) = (pending_rules, &rules_added) {
            rules_added = add_rules(restrictions.landlock.as_fd());
        }
        // Masks still to find and make: the command may restrict itself meanwhile.
        if entered.is_some() && rules_added.is_ok() {
            rules_added = send(RULES_IN);
        }
        // Found only now, policy errors included, while the command sets itself up; made
        // only in the namespace entered above, never in the host's.
        let late = match (late_masks, entered, &rules_added) {
            (Some(plan), Some(_), Ok(())) => plan().map_err(|e| rules_added = Err(e)).ok(),
            _ => None,
        };
        let to_cover = late.as_ref().or(entered);
        if let (Some(masks), Ok(())) = (to_cover, &rules_added) {
            if let Err((step, errno)) = unsafe { masks.cover() } {
                rules_added = Err(format!(
                    "cannot hide the credential locations ({}): {}; {MASKS_HINT}",
                    String::from_utf8_lossy(step),
                    nix::errno::Errno::from_raw(errno)
                ));
            }
        }
        if rules_added.is_ok() {
            rules_added = send(1);
        }
    }
    // Unless it was moved above, the supervisor was most likely placed on this CPU, where
    // it runs only once this process blocks: block first, and close the rest while the
    // command runs. Every page written here before blocking is a copy-on-write fault the
    // supervisor waits behind.
    drop(started_write);
    let started = match wait_for_start {
        Some(limit) => {
            wait_readable(&started_read, limit);
            // This process is idle while the command runs on the other CPU: time to have
            // the namespace torn down after it exits, rather than in its exit.
            if in_own_namespace {
                super::namespace_release::at_exit(chitti_pidfd.as_ref().map(|fd| fd.as_fd()));
            }
            None
        }
        None => Some(started_read),
    };
    // Before this process's copies close: from here on the call ends with the supervisor.
    for after in &spec.after {
        after.supervised_by(pid);
    }
    drop(chitti_pidfd);
    drop(lifeline_read);
    drop(status_write);
    drop(ended_write);
    drop(stdio);
    // The supervisor holds the slot's lock from here on.
    drop(spec.tmp_slot.take());
    if let Err(e) = rules_added {
        // The command gives up at the closed pipe; the supervisor reports that and exits.
        drop(lifeline_write);
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        let report = Ending::parse(&read_report(status_read)).map(|ending| ending.report);
        let ran = !matches!(
            report,
            Some(
                Report::SetupFailed { .. } | Report::ExecFailed { .. } | Report::Unrunnable { .. }
            )
        );
        return Err(std::io::Error::other(match report {
            // Gone first (the rules it adds could not all be added, the program is not
            // there): chitti's own failure to write to it only echoes that.
            Some(Report::SetupFailed { step, errno }) if supervisor_gone => {
                setup_failure(&step, errno)
            }
            Some(Report::Unrunnable { message, not_found }) if supervisor_gone => {
                return Err(std::io::Error::other(Unrunnable { message, not_found }));
            }
            _ if ran => format!("{e} (and the command had started all the same: it was killed)"),
            _ => e,
        }));
    }
    let pidfd = match open_pidfd(pid) {
        Ok(fd) => fd,
        Err(e) => {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return Err(e);
        }
    };
    Ok(Supervised {
        pid,
        pidfd,
        lifeline: lifeline_write,
        status: status_read,
        ended: ended_read,
        started,
        namespace_holder: NamespaceHolder::default(),
    })
}

/// The descriptors the supervisor keeps; everything else chitti had open is closed
/// (another call's lifeline among them, which must not be held open by this one). They
/// keep their numbers: the after-call work may hold descriptors of its own.
struct Keep {
    stdin: Option<RawFd>,
    stdout: Option<RawFd>,
    stderr: Option<RawFd>,
    lifeline: RawFd,
    status: RawFd,
    ended: RawFd,
    started: RawFd,
    landlock: Option<RawFd>,
    /// Readable once chitti has added every rule (see `spawn`).
    go: Option<RawFd>,
    /// chitti's pidfd, when the command may join chitti's mount namespace (see `spawn`).
    chitti: Option<RawFd>,
}

/// The supervisor's descriptors, once stdio is in place.
#[derive(Clone, Copy)]
struct Fds {
    lifeline: RawFd,
    status: RawFd,
    /// Written once the call's processes are dead, before the checks (see `finish`).
    ended: RawFd,
    started: RawFd,
    landlock: Option<RawFd>,
    /// Readable once chitti has added every rule (see `spawn`).
    go: Option<RawFd>,
    chitti: Option<RawFd>,
}

/// What the supervisor does once the tree is dead.
struct Aftermath {
    after: Vec<Box<dyn crate::sandbox::AfterCall>>,
    cleanup: Vec<std::path::PathBuf>,
    tmp_slot: Option<super::tmp_pool::Slot>,
    /// See `LaunchSpec::checks_budget`.
    checks_budget: std::time::Duration,
}

impl Aftermath {
    fn run(self) -> Vec<String> {
        // The private TMPDIR first: checks that take too long are stopped (by chitti,
        // which kills this process), and the TMPDIR must not be left behind then.
        let mut repairs = Vec::new();
        for dir in self.cleanup {
            if let Err(e) = crate::sandbox::cleanup::remove_tree(&dir) {
                repairs.push(e);
            }
        }
        if let Some(slot) = self.tmp_slot {
            if let Err(e) = slot.release() {
                repairs.push(e);
            }
        }
        repairs.extend(self.after.into_iter().flat_map(|f| f.run()));
        repairs
    }
}

/// Closes every descriptor from 3 up except those in `keep`.
unsafe fn close_all_but(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut next: u32 = 3;
    for &fd in keep.iter().filter(|fd| **fd >= 3) {
        let fd = fd as u32;
        if fd > next {
            libc::syscall(libc::SYS_close_range, next, fd - 1, 0u32);
        }
        next = next.max(fd + 1);
    }
    libc::syscall(libc::SYS_close_range, next, u32::MAX, 0u32);
}

unsafe fn supervisor_main(
    spec: &LaunchSpec,
    execve: &Execve,
    keep: Keep,
    aftermath: Aftermath,
    rules: Option<PendingRules>,
) -> ! {
    // Counted from here, before chitti starts its own timer (none where it is too far off
    // to be told).
    let deadline = spec.timeout.and_then(|timeout| {
        std::time::Instant::now().checked_add(timeout.saturating_add(DEADLINE_GRACE))
    });
    for (src, dst) in [(keep.stdin, 0), (keep.stdout, 1), (keep.stderr, 2)] {
        if let Some(src) = src {
            libc::dup2(src, dst);
        }
    }
    let fds = Fds {
        lifeline: keep.lifeline,
        status: keep.status,
        ended: keep.ended,
        started: keep.started,
        landlock: keep.landlock,
        go: keep.go,
        chitti: keep.chitti,
    };
    let mut kept = vec![fds.lifeline, fds.status, fds.ended, fds.started];
    kept.extend(fds.landlock);
    kept.extend(fds.go);
    kept.extend(fds.chitti);
    for after in &aftermath.after {
        kept.extend(after.fds());
    }
    kept.extend(aftermath.tmp_slot.as_ref().map(|slot| slot.fd()));
    close_all_but(&mut kept);

    // Terminal signals do not concern the supervisor: chitti decides, through the lifeline.
    // Nor do the others chitti takes as a request to stop (its handlers, inherited from a
    // session's runtime, must never run here).
    libc::setpgid(0, 0);
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGPIPE,
        libc::SIGTSTP,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
    ] {
        libc::signal(sig, libc::SIG_IGN);
    }
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    // chitti may hold its termination signals back while it starts a call; not here.
    super::vfork::unblock_all_signals();
    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    // The program, where chitti left its search here: before anything is claimed, so
    // that a call that cannot run changes nothing.
    let found = match spec.find_program.as_ref().map(ProgramSearch::run) {
        None => None,
        Some(Ok(program)) => Some(program),
        Some(Err(report)) => finish(report, aftermath, fds),
    };
    let found_execve = found
        .as_ref()
        .map(|program| spec.image.execve_with(program));
    let execve = found_execve.as_ref().unwrap_or(execve);

    // Non-blocking: see the read below.
    let step_pipe =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(std::io::Error::from);
    let (step_read, step_write) = match step_pipe {
        Ok(p) => p,
        Err(e) => finish(
            Report::SetupFailed {
                step: "pipe".into(),
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
            aftermath,
            fds,
        ),
    };
    // Out of the pool until released: should this process die before then, the call's
    // processes may outlive it, and its TMPDIR must never serve another call.
    if let Some(slot) = &aftermath.tmp_slot {
        if let Err(errno) = slot.claim() {
            finish(
                Report::SetupFailed {
                    step: "claiming the private TMPDIR".into(),
                    errno,
                },
                aftermath,
                fds,
            );
        }
    }
    // The rules, where they are this process's to add (see `spawn`): every one is in
    // before the command exists, and none is added in chitti's namespace of masks.
    if let (Some(add), Some(ruleset)) = (rules, fds.landlock) {
        if let Err(e) = add(BorrowedFd::borrow_raw(ruleset)) {
            finish(
                Report::SetupFailed {
                    step: format!("adding the Landlock rules: {e}"),
                    errno: 0,
                },
                aftermath,
                fds,
            );
        }
    }
    // The command shares the supervisor's memory until it execs (no page tables copied);
    // the supervisor waits meanwhile, so the two never run at once.
    let (step_r, step_w) = (step_read.as_raw_fd(), step_write.as_raw_fd());
    let supervisor = libc::getpid();
    let child = super::vfork::spawn(&mut || {
        libc::close(step_r);
        command_main(spec, execve, step_w, fds, supervisor);
    });
    let child = match child {
        Ok(pid) => pid,
        Err(e) => finish(
            Report::SetupFailed {
                step: "clone".into(),
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
            aftermath,
            fds,
        ),
    };
    drop(step_write);
    // The command holds its Landlock domain now, and this copy of the ruleset is of no
    // use. Closed before `started`, so that chitti, still waiting for it, holds the last
    // copy and frees the ruleset (some 30-40 rules, more where many entries sit beside a
    // hidden path) on its own CPU, not on the command's, nor in an exit anyone waits for.
    // (A session keeps a copy for its next call.)
    if let Some(ruleset) = fds.landlock {
        libc::close(ruleset);
    }
    if let Some(chitti) = fds.chitti {
        libc::close(chitti);
    }
    // The command has exec'd or given up: chitti may go on (see `Supervised::started`).
    libc::close(fds.started);

    // A failure is written to the step pipe before the child exits. This process resumes
    // once the child has exited, or once its exec is past the point of no return (any
    // later failure kills it, and is reported as a signal): no message now means the
    // exec succeeded. Not waiting for the pipe to close (later in the exec) spares a
    // wake-up on the command's CPU.
    let mut buf = [0u8; 128];
    let n = libc::read(step_read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len());
    drop(step_read);
    if n > 4 {
        let errno = i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let step = String::from_utf8_lossy(&buf[4..n as usize]).into_owned();
        libc::waitpid(child, std::ptr::null_mut(), 0);
        kill_descendants();
        finish(
            if step == "exec" {
                Report::ExecFailed { errno }
            } else {
                Report::SetupFailed { step, errno }
            },
            aftermath,
            fds,
        );
    }

    let report = wait_or_lifeline(child, fds.lifeline, deadline);
    kill_the_call(child);
    finish(report, aftermath, fds)
}

/// The command: restrict, then exec. Never returns. Runs in a `vfork::spawn` child:
/// system calls only, nothing that allocates.
unsafe fn command_main(
    spec: &LaunchSpec,
    execve: &Execve,
    step: RawFd,
    fds: Fds,
    supervisor: libc::pid_t,
) -> ! {
    let fail = |name: &[u8], errno: i32| -> ! {
        let mut msg = [0u8; 64];
        msg[..4].copy_from_slice(&errno.to_ne_bytes());
        let len = name.len().min(60);
        msg[4..4 + len].copy_from_slice(&name[..len]);
        libc::write(step, msg.as_ptr().cast(), 4 + len);
        libc::_exit(125);
    };
    // Back to default signal handling: SIG_IGN would survive exec.
    super::vfork::reset_signals();
    // The command must not hold chitti's pipes (they are close-on-exec too).
    libc::close(fds.lifeline);
    libc::close(fds.status);
    libc::close(fds.ended);
    libc::close(fds.started);

    // A new session: no controlling terminal, so no TIOCSTI into the user's shell.
    if libc::setsid() < 0 {
        fail(b"setsid", last_error());
    }
    // Should the supervisor be killed outright (SIGKILL: it cannot clean up), the command
    // dies with it; what the command has started by then does not (a known limit).
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
        fail(b"PR_SET_PDEATHSIG", last_error());
    }
    if libc::getppid() != supervisor {
        fail(b"the supervisor died", libc::ESRCH);
    }
    if let Err(e) = spec.rlimits.apply() {
        fail(b"setrlimit", e.raw_os_error().unwrap_or(libc::EIO));
    }
    if let Some(masks) = spec.restrictions.as_ref().and_then(|r| r.masks.as_ref()) {
        let made = match joined_chitti_s_namespace(fds) {
            Ok(true) => Ok(()),
            Ok(false) => masks.apply(),
            Err(e) => Err(e),
        };
        if let Err((step, errno)) = made {
            fail(step, errno);
        }
    }
    // After the masks: joining a mount namespace moves the working directory to its root.
    if libc::chdir(spec.cwd.as_ptr()) < 0 {
        fail(b"chdir", last_error());
    }
    if let Some(r) = &spec.restrictions {
        if let Err(e) = caps::drop_all() {
            fail(
                b"dropping capabilities",
                e.raw_os_error().unwrap_or(libc::EPERM),
            );
        }
        if let Err(e) = caps::set_no_new_privs() {
            fail(b"no_new_privs", e.raw_os_error().unwrap_or(libc::EPERM));
        }
        // Installed before the wait below, not after Landlock: installing costs the
        // kernel a check, a conversion and a JIT compilation (some 0.08 ms here), which
        // then overlaps chitti adding the rules. The filter allows what is left to do
        // (read, fcntl, sched_yield, close, landlock_restrict_self, execve), and nothing
        // runs before exec.
        if seccompiler::apply_filter(r.seccomp).is_err() {
            fail(b"installing seccomp", last_error());
        }
        let restrict = || {
            let Some(ruleset) = fds.landlock else {
                fail(b"landlock ruleset", libc::EBADF);
            };
            if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) < 0 {
                fail(b"landlock_restrict_self", last_error());
            }
            libc::close(ruleset);
        };
        // chitti may still be adding rules to the ruleset (see `spawn`), and, as root,
        // then finding and mounting the masks. Told that the rules are in, the command
        // restricts itself while chitti works on the masks: Landlock's domain (some 5 us
        // to make) is then off the call's critical path, which runs from chitti's last
        // byte to the exec. Until that byte the command only waits; at the pipe's end it
        // gives up, as before (the masks could not be made).
        match fds.go {
            Some(go) => match read_go_byte(go) {
                Some(RULES_IN) => {
                    restrict();
                    if read_go_byte(go).is_none() {
                        fail(b"waiting for the masks", libc::ECANCELED);
                    }
                    libc::close(go);
                }
                Some(_) => {
                    libc::close(go);
                    restrict();
                }
                None => fail(b"waiting for the Landlock rules", libc::ECANCELED),
            },
            None => restrict(),
        }
    }
    execve.exec();
    fail(b"exec", last_error())
}

/// A set-up step that failed, as said to the user: `errno` 0 when `step` says why itself.
pub fn setup_failure(step: &str, errno: i32) -> String {
    if errno == 0 {
        step.to_string()
    } else {
        format!("{step}: {}", std::io::Error::from_raw_os_error(errno))
    }
}

/// What to do when the masks cannot be made: words for the one who started chitti,
/// whether from a shell or as an agent's MCP server.
const MASKS_HINT: &str =
    "start chitti (`sandbox exec`, `mcp`, `chat`, `run`) with `--backend bwrap`, or run it as \
     a normal user";

/// chitti's answer on the go pipe when it made the masks' namespace (see `spawn`).
const JOIN_CHITTI: u8 = b'J';
/// ... when it did not, and the command makes its own.
const MAKE_OWN: u8 = b'S';
/// Every Landlock rule is in, the masks are not yet: the command restricts itself and
/// waits for the next byte (see `command_main`).
const RULES_IN: u8 = b'R';

/// Whether this process has a single thread: `unshare(CLONE_NEWNS)` moves only the
/// calling thread, and a chitti with other threads must not be left split.
pub fn single_threaded() -> bool {
    // The kernel's own count, with no side effect: unsharing CLONE_THREAD is refused
    // (EINVAL) in a process with other threads and otherwise has nothing to do. A
    // refusal for any other reason (a filter) reads as "not alone", the cautious side.
    // Reading /proc/self/task cost some 5 us in a fresh process, three times per call.
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_THREAD).is_ok()
}

/// In the command, when chitti may have made the masks' namespace: waits for chitti's
/// answer and joins it (true), or learns that it must make its own (false). chitti's
/// death meanwhile ends the call (an error: the step and errno).
unsafe fn joined_chitti_s_namespace(fds: Fds) -> Result<bool, (&'static [u8], i32)> {
    let (Some(chitti), Some(go)) = (fds.chitti, fds.go) else {
        return Ok(false);
    };
    let Some(answer) = read_go_byte(go) else {
        return Err((b"waiting for the mount namespace", libc::ECANCELED));
    };
    match answer {
        JOIN_CHITTI => {
            if libc::setns(chitti, libc::CLONE_NEWNS) < 0 {
                return Err((b"joining chitti's mount namespace", last_error()));
            }
            libc::close(chitti);
            Ok(true)
        }
        MAKE_OWN => Ok(false),
        _ => Err((b"waiting for the mount namespace", libc::EPROTO)),
    }
}

/// The next byte chitti writes on the go pipe; `None` at its end (chitti gave up, or died).
///
/// The command waits for it a fraction of a millisecond, on a CPU of its own that would
/// otherwise halt: on a virtual machine, waking a halted CPU costs some 20 us of the
/// call's critical path. So it looks again and again for a while, giving the CPU up
/// whenever something else could run there, before it blocks. (System calls only: this
/// runs in the command's `vfork` child.)
unsafe fn read_go_byte(go: RawFd) -> Option<u8> {
    let mut byte = 0u8;
    let flags = libc::fcntl(go, libc::F_GETFL);
    // (An earlier wait may have left the pipe non-blocking.)
    let blocking = flags & !libc::O_NONBLOCK;
    if flags >= 0 && libc::fcntl(go, libc::F_SETFL, blocking | libc::O_NONBLOCK) == 0 {
        for _ in 0..GO_SPINS {
            match libc::read(go, (&mut byte as *mut u8).cast(), 1) {
                1 => return Some(byte),
                0 => return None,
                _ if last_error() == libc::EAGAIN => {
                    libc::sched_yield();
                }
                _ => return None,
            }
        }
        if libc::fcntl(go, libc::F_SETFL, blocking) < 0 {
            return None;
        }
    }
    (libc::read(go, (&mut byte as *mut u8).cast(), 1) == 1).then_some(byte)
}

/// How often the command looks for the go byte before it blocks: about a millisecond.
const GO_SPINS: u32 = 1000;

/// How long chitti waits for the supervisor's checks once the call's processes are dead
/// (each git run of the checks is cut at 15 s) before it stops them.
pub const CHECKS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// How much sooner than [`CHECKS_PATIENCE`] the supervisor cuts its own checks short.
const CHECKS_OWN_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long after the call's timeout the supervisor ends it without chitti (see
/// [`LaunchSpec::timeout`]).
pub const DEADLINE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits for the command or for the lifeline to close, whichever comes first, or until
/// `deadline` has passed.
unsafe fn wait_or_lifeline(
    child: libc::pid_t,
    lifeline: RawFd,
    deadline: Option<std::time::Instant>,
) -> Report {
    let pidfd = libc::syscall(libc::SYS_pidfd_open, child, 0) as RawFd;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: lifeline,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Without a pidfd (Linux < 5.3) poll the lifeline and check the child periodically.
        let (nfds, mut timeout) = if pidfd >= 0 { (2, -1) } else { (1, 10) };
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Report::Killed;
            }
            // Rounded up: a poll of 0 ms would spin until the deadline.
            let left = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            timeout = if timeout < 0 { left } else { timeout.min(left) };
        }
        let start = if pidfd >= 0 { 0 } else { 1 };
        let n = libc::poll(fds[start..].as_mut_ptr(), nfds as libc::nfds_t, timeout);
        if n < 0 && last_error() != libc::EINTR {
            return Report::SetupFailed {
                step: "poll".into(),
                errno: last_error(),
            };
        }
        // Not reaped (WNOWAIT): see `kill_the_call`.
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, child as libc::id_t, &mut info, flags) == 0
            && info.si_pid() == child
        {
            match info.si_code {
                libc::CLD_EXITED => {
                    return Report::Exited {
                        code: info.si_status(),
                    }
                }
                libc::CLD_KILLED | libc::CLD_DUMPED => {
                    return Report::Signaled {
                        signal: info.si_status(),
                    }
                }
                _ => {}
            }
        }
        if fds[1].revents != 0 {
            return Report::Killed;
        }
    }
}

/// Ends every process of the call once the command has exited, unreaped, or must be
/// killed. The command leads a process group that no process of the call can leave (the
/// seccomp filter makes setsid and setpgid succeed doing nothing), and one kill of the
/// group reaches every member at once: the kernel fails a fork that would come after it,
/// or kills its child too. A family forking as fast as it can outran any walk of `/proc` (a review's
/// processes lived on after the call, writing the workspace). The group id is safe to
/// use by number while the command is unreaped: its number cannot be anyone else's yet.
/// The walk of the tree then reaps what died, and is what kills the tree of a command
/// without the filter.
unsafe fn kill_the_call(command: libc::pid_t) {
    libc::kill(-command, libc::SIGKILL);
    libc::waitpid(command, std::ptr::null_mut(), libc::__WALL);
    kill_descendants();
}

/// Kills every process left under the supervisor, however deep the tree and however busy
/// it keeps the CPUs. Each round walks the whole tree from the supervisor's children down
/// (`/proc/PID/task/TID/children` of every thread) and kills each process as it is
/// reached, then reaps what died: a chain hundreds of processes deep, or one holding
/// spinning threads that starve this process, dies in one round, where killing only the
/// direct children took a round per generation (a review outlasted chitti's patience so,
/// and its processes outlived the call). Orphans reparent to the supervisor (a
/// subreaper), so what forks meanwhile is met in the next round; until every child is
/// reaped, none remains.
unsafe fn kill_descendants() {
    // Usually nothing is left at all, which needs no listing: once every child is reaped,
    // no descendant remains (an orphan is reparented here before its parent can be).
    if libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL) < 0
        && last_error() == libc::ECHILD
    {
        return;
    }
    let own = libc::getpid();
    // Rounds in which a child exists but is not listed yet, each a millisecond's wait.
    let mut unlisted = 0;
    loop {
        let any = kill_tree(own, None, true);
        // Reap everything that has died, then, if children remain, wait for one.
        let mut reaped_any = false;
        loop {
            let reaped = libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL);
            if reaped < 0 && last_error() == libc::ECHILD {
                return;
            }
            if reaped <= 0 {
                break;
            }
            reaped_any = true;
        }
        if reaped_any {
            continue;
        }
        if any {
            let reaped = libc::waitpid(-1, std::ptr::null_mut(), libc::__WALL);
            if reaped < 0 && last_error() == libc::ECHILD {
                return;
            }
        } else {
            unlisted += 1;
            if unlisted > 100_000 {
                return;
            }
            libc::usleep(1000);
        }
    }
}

/// Kills every process below this one that it sees (one round of [`kill_descendants`]),
/// for a chitti that runs one call and adopts orphans (bwrap's, see `bwrap_init`): once
/// its bwrap is dead, whatever is left below it is that call's.
pub fn kill_tree_below_this_process() {
    unsafe { kill_tree(libc::getpid(), None, true) };
}

/// Kills `pid` if it is an orphaned sandbox init: this process's child (adopted, as a
/// subreaper) and PID 1 of a namespace of its own. Anything else under that number (the
/// init reaped and its number taken since) is left alone.
pub fn kill_orphaned_init(pid: libc::pid_t) {
    let Ok(pidfd) = super::vfork::open_pidfd(pid) else {
        return;
    };
    // Once it is this process's child its number is its own until this process reaps it.
    let Some((parent, ids)) = parent_and_namespace_pids(pid) else {
        return;
    };
    if parent == unsafe { libc::getpid() } && ids.len() > 1 && ids.last() == Some(&1) {
        signal_through(&pidfd, libc::SIGKILL);
    }
}

/// A process's parent, and its number in each PID namespace it is in, outermost first
/// (`PPid` and `NSpid` of its /proc status, read once).
pub(crate) fn parent_and_namespace_pids(
    pid: libc::pid_t,
) -> Option<(libc::pid_t, Vec<libc::pid_t>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let parent = field("PPid:")?.trim().parse().ok()?;
    let ids = field("NSpid:")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    Some((parent, ids))
}

/// Sends `signal` (0: none, only the check) to the process `pidfd` names; whether it went.
fn signal_through(pidfd: &OwnedFd, signal: libc::c_int) -> bool {
    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), signal, 0, 0) == 0 }
}

/// Kills every process below the supervisor `supervisor` that chitti sees (one round of
/// [`kill_descendants`], from outside): chitti's help when the supervisor is slow to end
/// its tree. The supervisor itself is left alone. Its number is trusted only while its
/// `pidfd` shows it unreaped: a round can outlast chitti's wait for it.
pub fn kill_tree_below(supervisor: libc::pid_t, pidfd: OwnedFd) {
    unsafe { kill_tree(supervisor, Some(pidfd), false) };
}

/// One round of [`kill_descendants`]: kills every process in the tree under `own` that the
/// listings show; whether there was any. A process is signalled only through a pidfd
/// opened while it is seen to be its parent's child (its number, read from the parent's
/// listing, could otherwise name another process by the time the signal goes, had the
/// parent reaped it meanwhile), but for the children of `own` when `own` is this process
/// (`reaped_here`): no one else reaps them, so their numbers stay theirs until it waits
/// for them. `own_pidfd` (where `own` is another process) tells whether `own`'s listing
/// was its own: it is trusted only if `own` is unreaped after it was read.
unsafe fn kill_tree(own: libc::pid_t, own_pidfd: Option<OwnedFd>, reaped_here: bool) -> bool {
    let mut queue: Vec<(libc::pid_t, Option<OwnedFd>)> = vec![(own, own_pidfd)];
    let mut any = false;
    let mut next = 0;
    while next < queue.len() {
        let parent = queue[next].0;
        next += 1;
        let mut children = Vec::new();
        for child in children_of(parent) {
            let pidfd = if parent == own && reaped_here {
                None
            } else {
                let fd = libc::syscall(libc::SYS_pidfd_open, child, 0);
                if fd < 0 {
                    continue;
                }
                let fd = OwnedFd::from_raw_fd(fd as RawFd);
                // The pidfd names whatever had that number when it was opened: only the
                // parent's child is signalled (and walked), and only if it was not reaped
                // since (then the number read its parent from another process's entry).
                if parent_of(child) != Some(parent) || !unreaped(&fd) {
                    continue;
                }
                Some(fd)
            };
            children.push((child, pidfd));
        }
        // The listing and the parent checks named `parent` by its number: they were its
        // own only if it has not been reaped since, as a process keeps its number until
        // it is (a review had such a process reaped by its dying parent mid-walk, its
        // number taken by a host process, and that one's children killed). If it has,
        // what it left reparents to the supervisor, for the next round.
        let (pid, pidfd) = &queue[next - 1];
        let still_its_own = pidfd.as_ref().is_none_or(|fd| unreaped(fd));
        if parent != own {
            // Listed first, then killed: what it forks after the listing reparents here
            // when it dies, for the next round.
            match pidfd {
                Some(fd) => {
                    signal_through(fd, libc::SIGKILL);
                }
                None => {
                    libc::kill(*pid, libc::SIGKILL);
                }
            }
            any = true;
        }
        if still_its_own {
            queue.extend(children);
        }
    }
    any
}

/// Whether the process a pidfd names has not been reaped yet (a zombie has not): until it
/// is, no other process can have its number.
unsafe fn unreaped(pidfd: &OwnedFd) -> bool {
    signal_through(pidfd, 0)
}

/// The children of every thread of `pid`.
fn children_of(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let mut children = Vec::new();
    let tasks = format!("/proc/{pid}/task");
    crate::dir_entries::for_each_entry(Path::new(&tasks), |tid, _| {
        // Read whole: the command may have left more children than any fixed buffer
        // holds, and a number cut short would name some other process of the host.
        let listing =
            std::fs::read(Path::new(&tasks).join(tid).join("children")).unwrap_or_default();
        children.extend(listed_pids(&listing));
    });
    children
}

/// The parent of `pid` (`/proc/PID/stat`'s fourth field, after the name in parentheses).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.iter().rposition(|b| *b == b')')? + 1..];
    let ppid = after_name.split(|b| *b == b' ').nth(2)?;
    std::str::from_utf8(ppid).ok()?.parse().ok()
}

/// The process ids of a `children` listing, each followed by a space: one without it may
/// have been cut short.
fn listed_pids(listing: &[u8]) -> impl Iterator<Item = libc::pid_t> + '_ {
    let complete = match listing.iter().rposition(|b| *b == b' ') {
        Some(last) => &listing[..last],
        None => &[][..],
    };
    complete
        .split(|b| *b == b' ')
        .filter_map(|field| std::str::from_utf8(field).ok()?.parse().ok())
        .filter(|pid: &libc::pid_t| *pid > 0)
}

/// Repairs and cleans up (nothing sandboxed is alive any more), writes the ending to
/// chitti and exits with the matching status.
unsafe fn finish(report: Report, aftermath: Aftermath, fds: Fds) -> ! {
    // chitti gives a supervisor still ending the call only seconds after a timeout before
    // it says that it cannot confirm the end: checks slowed past that (a repository made to
    // slow git) must not look like a call still running. chitti reads this pipe only then,
    // so that writing it wakes nobody.
    write_ending(
        fds.ended,
        &Ending {
            report: report.clone(),
            repairs: Vec::new(),
            checking: true,
        },
    );
    // Over by themselves a little before chitti would stop them, and also where chitti
    // is gone and no one would.
    if let Some(end) = std::time::Instant::now().checked_add(aftermath.checks_budget) {
        crate::sandbox::nested_git::end_checks_by(end);
    }
    let repairs = aftermath.run();
    let code = match &report {
        Report::Exited { code } => *code,
        Report::Signaled { signal } => 128 + signal,
        Report::Killed => 124,
        Report::ExecFailed { errno } if *errno == libc::ENOENT => 127,
        Report::ExecFailed { .. } => 126,
        Report::SetupFailed { .. } => 125,
        Report::Unrunnable {
            not_found: true, ..
        } => 127,
        Report::Unrunnable { .. } => 126,
    };
    let ending = Ending {
        report,
        repairs,
        checking: false,
    };
    // Nothing sandboxed is alive, and this process writes nothing more to the command's
    // stdio: closed now, chitti's readers of the command's output see its end with the
    // report, not only once this process has exited.
    for fd in 0..3 {
        libc::close(fd);
    }
    write_ending(fds.status, &ending);
    libc::_exit(code)
}

/// Writes `ending` to chitti as one line.
unsafe fn write_ending(status: RawFd, ending: &Ending) {
    if let Ok(mut line) = serde_json::to_vec(ending) {
        line.push(b'\n');
        libc::write(status, line.as_ptr().cast(), line.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masks thread, whose job may move it into a namespace of its own, starts no other
    /// (which would share that namespace); any other thread may.
    #[test]
    fn a_masks_thread_starts_no_other() {
        let (answer, answered) = std::sync::mpsc::channel();
        let thread = start_masks_thread().unwrap();
        let job: MasksJob = Box::new(move || {
            let _ = answer.send(start_masks_thread().is_err());
        });
        thread.send(job).ok().unwrap();
        assert!(answered.recv().unwrap(), "a masks thread started another");
    }

    /// A process with other threads is told apart from one alone, without changing
    /// either: the test harness runs this on a thread of its own, and a fork has one.
    #[test]
    fn a_process_with_threads_is_not_single_threaded() {
        // The mount namespace's inode, read without allocating (in a fork too).
        fn namespace() -> u64 {
            let mut stat: libc::stat = unsafe { std::mem::zeroed() };
            assert_eq!(
                unsafe { libc::stat(c"/proc/self/ns/mnt".as_ptr(), &mut stat) },
                0
            );
            stat.st_ino
        }
        let before = namespace();
        assert!(!single_threaded(), "the test harness has other threads");
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // Alone in the fork; asked twice (it changed nothing), its namespace kept.
            let alone = single_threaded() && single_threaded();
            unsafe { libc::_exit(if alone && namespace() == before { 0 } else { 1 }) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        let thread = std::thread::spawn(single_threaded);
        assert!(!thread.join().unwrap(), "asked from a second thread");
        assert_eq!(namespace(), before);
    }

    /// A fork made while another thread allocates can allocate in the child: the handlers
    /// are registered where a second thread runs, not skipped as they are in a process
    /// alone. Without them a child forked while the other thread held dlmalloc's lock
    /// waits forever (its alarm ends it here). Run in a child of the test process that
    /// closed the descriptors it inherited: its many forks must not hold copies of other
    /// tests' descriptors (and their locks).
    #[cfg(target_env = "musl")]
    #[test]
    fn a_fork_beside_an_allocating_thread_can_allocate() {
        let close_inherited =
            || unsafe { libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0) == 0 };
        let code = crate::in_a_child(close_inherited, || {
            use std::sync::atomic::{AtomicBool, Ordering};
            static STOP: AtomicBool = AtomicBool::new(false);
            let busy = std::thread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    std::hint::black_box(vec![0u8; 4096]);
                }
            });
            let mut stuck = 0;
            for _ in 0..200 {
                crate::allocator_survives_fork();
                let child = unsafe { libc::fork() };
                assert!(child >= 0);
                if child == 0 {
                    unsafe { libc::alarm(2) };
                    std::hint::black_box(vec![1u8; 4096]);
                    unsafe { libc::_exit(0) };
                }
                let mut status = 0;
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                let clean = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                stuck += usize::from(!clean);
            }
            STOP.store(true, Ordering::Relaxed);
            busy.join().unwrap();
            stuck == 0
        });
        assert_eq!(
            code, 0,
            "children forked beside the thread could not allocate"
        );
    }

    /// The go byte is waited for past the spinning, however the pipe was left by the wait
    /// before (the first wait, for the namespace, leaves it non-blocking), and its end is
    /// an answer of its own.
    #[test]
    fn the_go_byte_is_waited_for_after_the_spinning() {
        let (read_end, write_end) = pipe().unwrap();
        let write = |fd: &OwnedFd, byte: u8| unsafe {
            assert_eq!(libc::write(fd.as_raw_fd(), [byte].as_ptr().cast(), 1), 1);
        };
        write(&write_end, JOIN_CHITTI);
        let go = read_end.as_raw_fd();
        assert_eq!(unsafe { read_go_byte(go) }, Some(JOIN_CHITTI));
        let late = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            write(&write_end, 1);
            write_end
        });
        assert_eq!(
            unsafe { read_go_byte(go) },
            Some(1),
            "a go byte that came late"
        );
        drop(late.join().unwrap());
        assert_eq!(unsafe { read_go_byte(go) }, None, "the pipe's end");
    }

    /// chitti's help for a slow supervisor kills every process below it, however deep,
    /// and leaves the supervisor itself (here a shell standing in for it) alone.
    #[test]
    fn a_tree_below_a_process_is_killed_and_the_process_left() {
        let marker = format!(
            "{}",
            7_000_000
                + std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos()
                    % 1_000_000
        );
        let script = format!(
            "sleep {marker} & sh -c 'sh -c \"sleep {marker}\" & wait' & touch ready; read x"
        );
        let dir = tempfile::tempdir().unwrap();
        let mut root = std::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            // Held open: the shell waits on it, not on its children.
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let sleepers = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .is_ok_and(|c| c == format!("sleep\0{marker}\0").as_bytes())
                })
                .count()
        };
        let until = |done: &dyn Fn() -> bool| {
            (0..500).any(|_| {
                done() || {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    false
                }
            })
        };
        let started = until(&|| dir.path().join("ready").exists() && sleepers() == 2);
        if !started {
            let _ = root.kill();
        }
        assert!(started, "the tree did not start");
        let root_pid = root.id() as libc::pid_t;
        let pidfd_of = |pid| open_pidfd(pid).unwrap();
        // A pidfd that shows the process named by that number reaped (here: another one,
        // as when the number was taken since): the listing under it is not trusted.
        let mut other = std::process::Command::new("true").spawn().unwrap();
        let reaped = pidfd_of(other.id() as libc::pid_t);
        other.wait().unwrap();
        kill_tree_below(root_pid, reaped);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let spared = sleepers();
        kill_tree_below(root_pid, pidfd_of(root_pid));
        let gone = until(&|| sleepers() == 0);
        let root_alive = root.try_wait().unwrap().is_none();
        let _ = root.kill();
        let _ = root.wait();
        assert_eq!(
            spared, 2,
            "processes were killed under a number no longer trusted"
        );
        assert!(gone, "{} sleepers left below the process", sleepers());
        assert!(root_alive, "the process itself was killed");
    }

    /// The kill walk trusts a number read from /proc only while the process it opened a
    /// pidfd for is unreaped: a zombie counts (it keeps its number), a reaped one not.
    #[test]
    fn a_zombie_is_unreaped_and_a_reaped_process_is_not() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as libc::pid_t;
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0);
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        // Exited, not yet waited for: a zombie.
        let exited = (0..500).any(|_| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|s| s.trim_start().starts_with('Z'))
            }) || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
        });
        assert!(exited);
        assert!(unsafe { unreaped(&fd) });
        let mut child = child;
        child.wait().unwrap();
        assert!(!unsafe { unreaped(&fd) });
    }

    /// A listing read short ends in part of a number, which would name another process.
    #[test]
    fn only_whole_process_ids_are_taken_from_a_listing() {
        let pids = |listing: &[u8]| listed_pids(listing).collect::<Vec<_>>();
        assert_eq!(pids(b"123 4567 "), [123, 4567]);
        assert_eq!(pids(b"123 4567 89"), [123, 4567]);
        assert_eq!(pids(b"12"), Vec::<libc::pid_t>::new());
        assert_eq!(pids(b""), Vec::<libc::pid_t>::new());
        assert_eq!(pids(b"0 x 5 "), [5]);
    }
}
