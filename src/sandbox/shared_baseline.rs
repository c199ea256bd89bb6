//! What protected paths held before the calls running now, one record shared by all of them.
//!
//! Why: on landlock, a call puts its protected paths back after its command, to what it
//! recorded before the command started. Recorded while another call's command runs, that
//! record would hold the other command's changes, and the second call would put them back
//! after the first call had undone them: two calls at once in one repository, and a
//! `core.fsmonitor` one of them planted outlives both. So the first record of a path stands
//! for every call that overlaps it: while any call runs, the others adopt its records
//! instead of taking their own. The paths that must stay absent, which bwrap checks after
//! the call, are shared the same way.
//!
//! Where: `protect/record` in chitti's state directory, which no sandbox can read or write
//! (it is a credential location, made before the policy's search so that it is hidden
//! from the call that makes it, and a writable root overlapping one is refused). Its first
//! byte says whether it holds records (`A`) or nothing (`C`, written when the last record
//! goes; what follows is left in place, so that the next call, alone, need not write the
//! same record again); a generation follows, then the records, each naming the calls
//! using it, by slot. Only its header is written in place (one write of at most nine
//! bytes); a whole new record is written beside it and renamed over it, so that a call
//! killed while writing leaves the last one whole. Locks on `protect/lock` (open file
//! description locks, which belong to the call's own open of it, shared with its
//! supervisor and gone when both are):
//! - byte 0, held exclusively for the short steps of joining and leaving, so that these
//!   never interleave;
//! - byte 1, held shared by every call from joining until its repairs are done; whoever
//!   can lock it exclusively knows that no other call is running;
//! - byte 2 + n, held exclusively by the call in slot n: whether a call named by a record
//!   still runs. A lock can outlive its call for a moment: a child that another call in
//!   the same process forks (a supervisor, before it closes what it does not keep) holds a
//!   copy of the descriptor, locks and all. So the call also names the process whose end
//!   ends it (chitti, then its supervisor; see [`Member::supervised_by`]): a byte held for
//!   a process that has exited is a killed call's.
//!
//! A record goes when the last call using it leaves: a call that starts later, when no
//! call using it runs any more, records afresh (so that a host edit made between calls is
//! never undone). A record whose calls all ended without their repairs (their supervisors
//! were killed) is kept, whatever other calls come and go, until a call protecting that
//! path adopts it: that call's repairs then undo what those commands left behind.
//!
//! Calls share the record when they share the state directory: the same user, with the
//! same `HOME` and `XDG_STATE_HOME`. What this costs a call in a repository alone in it is
//! some twenty system calls: when the records are the last call's, only the header is
//! written, in a format of chitti's own (JSON took 0.1 ms for a repository's sample hooks,
//! and a file made and removed per call 0.05 ms).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What one protected path held before the call: what is put back after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    /// A directory (or file) that must stay where it is, as it is.
    Pinned {
        dev: u64,
        ino: u64,
        mode: u32,
    },
    File {
        bytes: Vec<u8>,
        mode: u32,
    },
    Dir {
        mode: u32,
        tree: Vec<TreeItem>,
    },
    /// Did not exist: must not exist after the call.
    Absent,
}

/// One entry of a protected directory's tree, relative to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeItem {
    pub rel: PathBuf,
    /// The contents of a regular file; `None` for a directory.
    pub contents: Option<Vec<u8>>,
    pub mode: u32,
}

/// The first bytes of a record file, after the state byte.
const MAGIC: &[u8] = b"chitti protected paths 3\n";
/// The format before records named their calls: read as records left over.
const MAGIC_1: &[u8] = b"chitti protected paths 1\n";
const HOLDS_RECORDS: u8 = b'A';
/// The state byte, then a number bumped by every whole write: a call that finds the number
/// it wrote knows nobody rewrote the records since.
const HEADER: usize = 9;
const CLEARED: u8 = b'C';

/// A record and the slots of the running calls using it (none: left by calls that ended
/// without their repairs).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    members: u64,
    before: Before,
}

type Records = BTreeMap<PathBuf, Stored>;

/// A call joining: the store is locked until [`Joining::finish`].
pub struct Joining {
    dir: PathBuf,
    /// The lock file, this call's own open of it.
    file: std::fs::File,
    /// What the file held when this call joined, state byte first.
    stored: Vec<u8>,
    records: Records,
    /// This call's slot, as a bit of `Stored::members`.
    bit: u64,
    /// The paths whose records this call uses.
    mine: BTreeSet<PathBuf>,
    changed: bool,
    /// The writable roots of the other calls running now.
    running_roots: Vec<RunningRoot>,
}

/// A call that has joined: it leaves once its repairs are done.
#[derive(Debug)]
pub struct Member {
    dir: PathBuf,
    file: std::fs::File,
    bit: u64,
    mine: BTreeSet<PathBuf>,
    /// The generation of the file as this call left it after joining, and whether every
    /// record in it was this call's alone: if so, and nothing changed since, leaving only
    /// marks it cleared.
    written: u64,
    only_mine: bool,
    /// Leaves when dropped without [`Member::leave`]: a call that ends before its command
    /// could start (a set-up error) must not leave its records behind as if it had been
    /// killed. Off once the command has started, and in chitti's copy once a supervisor
    /// has its own.
    armed: bool,
}

/// The byte locked while a call joins or leaves.
const STEP: i64 = 0;
/// The byte every running call holds shared.
const RUNNING: i64 = 1;
/// Calls at once per state directory: one bit each in a record's members.
const SLOTS: u32 = 64;

/// The byte a call in `slot` holds while it runs.
fn slot_byte(slot: u32) -> i64 {
    2 + i64::from(slot)
}

fn store_error(dir: &Path, what: &str, e: std::io::Error) -> String {
    let remedy = if e.kind() == std::io::ErrorKind::TimedOut {
        "Is a chitti process stopped (Ctrl-Z) or hung? Resume or end it"
    } else {
        "chitti needs its state directory; set XDG_STATE_HOME or HOME to a directory you \
         can write"
    };
    format!(
        "cannot {what} in {}, where calls running at once share what their protected \
         paths held before them: {e}. {remedy}",
        dir.display()
    )
}

/// How long a call waits for another to finish joining or leaving: those steps take well
/// under a millisecond, so a wait this long means a stopped or hung chitti.
const PATIENCE: Duration = Duration::from_secs(60);

/// How the store's files are opened: never through a symlink, never blocking (on a FIFO
/// put there), never as a terminal, never inherited by a command.
const OPEN_FLAGS: i32 = libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;

/// The lock file, made if missing (with the state directory).
fn open_locks(dir: &Path) -> std::io::Result<std::fs::File> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(OPEN_FLAGS)
            .open(dir.join("lock"))
    };
    let file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::policy::make_own_dir(dir)?;
            open()
        }
        opened => opened,
    }?;
    own_file(&file, &dir.join("lock"))?;
    Ok(file)
}

/// Refuses a file that is not a regular file of this user's that only they may write:
/// what the record holds is put back onto protected paths (and root run with another
/// user's HOME would find theirs).
fn own_file(file: &std::fs::File, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file of user {euid}'s that only they may write: if it is \
             another user's, set XDG_STATE_HOME to a directory of your own; else, if no \
             chitti call is running, remove it",
            path.display()
        )));
    }
    Ok(())
}

/// The record file opened for reading, or for writing its header; None if there is none.
fn open_record(dir: &Path, write: bool) -> std::io::Result<Option<std::fs::File>> {
    let path = dir.join("record");
    let opened = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(OPEN_FLAGS)
        .open(&path);
    match opened {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
        Ok(file) => {
            own_file(&file, &path)?;
            Ok(Some(file))
        }
    }
}

/// Everything the record file holds (nothing if there is none).
fn read_record(dir: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let Some(mut file) = open_record(dir, false)? else {
        return Ok(Vec::new());
    };
    let len = usize::try_from(file.metadata()?.len()).unwrap_or(0);
    // A guess, capped: a sparse file's length is no reason to reserve gigabytes.
    let mut stored = Vec::with_capacity(len.saturating_add(1).min(64 << 20));
    file.read_to_end(&mut stored)?;
    Ok(stored)
}

/// Replaces the record file with `whole`, atomically: written beside it, then renamed over
/// it, so that a call killed while writing leaves the previous record whole.
fn write_record(dir: &Path, whole: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let staged = dir.join("record.new");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(OPEN_FLAGS)
        .open(&staged)?;
    own_file(&file, &staged)?;
    file.write_all(whole)?;
    std::fs::rename(&staged, dir.join("record"))
}

/// Writes the first bytes of the record file in place: its state byte, or its header (one
/// write within a page, which a killed call makes whole or not at all).
fn write_header(dir: &Path, header: &[u8]) -> std::io::Result<()> {
    match open_record(dir, true)? {
        Some(file) => file.write_all_at(header, 0),
        None => Err(std::io::Error::other("the record file is gone")),
    }
}

/// Locks (`F_RDLCK`, `F_WRLCK`) or unlocks (`F_UNLCK`) one byte of `file` for this open
/// of it, waiting up to `patience` or not at all. False when it does not wait and another
/// open holds the byte; an error of kind `TimedOut` when the wait ran out.
fn lock_byte(
    file: &std::fs::File,
    byte: i64,
    kind: libc::c_int,
    patience: Option<Duration>,
) -> std::io::Result<bool> {
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = byte;
    lock.l_len = 1;
    // Tried again and again rather than waited for in the kernel, so that a holder that
    // never lets go is reported instead of waited for forever.
    let started = std::time::Instant::now();
    let mut pause = Duration::from_micros(20);
    loop {
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match (e.raw_os_error(), patience) {
            (Some(libc::EINTR), _) => continue,
            (Some(libc::EAGAIN) | Some(libc::EACCES), None) => return Ok(false),
            (Some(libc::EAGAIN) | Some(libc::EACCES), Some(limit)) => {
                if started.elapsed() >= limit {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "another chitti call has held its lock for over {} s",
                            limit.as_secs_f64()
                        ),
                    ));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            _ => return Err(e),
        }
    }
}

/// For tests: the pid of a process that has exited and is not reaped, as a killed
/// supervisor is until chitti reaps it (its pid stays its own meanwhile). One for the
/// whole test process: every fork copies all descriptors of every test running then.
#[cfg(test)]
#[allow(clippy::zombie_processes)] // a zombie on purpose
pub(crate) fn an_exited_process() -> libc::pid_t {
    static EXITED: std::sync::OnceLock<libc::pid_t> = std::sync::OnceLock::new();
    *EXITED.get_or_init(|| {
        let child = std::process::Command::new("true").spawn().unwrap();
        until_exited(&child);
        child.id() as libc::pid_t
    })
}

/// For tests: a child holding a copy of descriptor `fd` of this process (an open file
/// description's locks go with it) until killed: what a child that another call forks is,
/// until it closes what it does not keep.
#[cfg(test)]
pub(crate) fn holding_a_copy_of(fd: RawFd) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("60");
    unsafe {
        sleep.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    sleep.spawn().unwrap()
}

/// For tests: whether a call joining now, in the store under `state_dir`, finds the record
/// of `path` left over.
#[cfg(test)]
pub(crate) fn left_over_for_the_next(state_dir: &Path, path: &Path) -> bool {
    join(state_dir, &[]).unwrap().left_over(path)
}

/// For tests: waits until `child` has exited, without reaping it.
#[cfg(test)]
pub(crate) fn until_exited(child: &std::process::Child) {
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOWAIT;
    let id = child.id() as libc::id_t;
    assert_eq!(
        unsafe { libc::waitid(libc::P_PID, id, &mut info, flags) },
        0
    );
}

/// A running call's hold on the store: an open of the lock file holding the running byte
/// shared and a presence byte of its own, beside which its writable roots are kept (see
/// [`enter`]). Closing every copy of it (chitti's and its supervisor's) ends the call's
/// presence; nothing unlocks it explicitly, as the copies share the locks.
#[derive(Debug)]
pub struct Presence {
    file: std::fs::File,
}

impl Presence {
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Counts this call among the calls running now, for a call that records nothing, with
/// the roots its command may write: calls that start while it runs see them (see
/// [`Joining::may_be_written_by_running_call`]).
pub fn be_present(state_dir: &Path, roots: &[PathBuf]) -> Result<Presence, String> {
    let dir = state_dir.join("protect");
    let present = (|| {
        let file = open_locks(&dir)?;
        lock_byte(&file, STEP, libc::F_WRLCK, Some(PATIENCE))?;
        lock_byte(&file, RUNNING, libc::F_RDLCK, Some(PATIENCE))?;
        let entered = enter(&file, roots)?;
        lock_byte(&file, STEP, libc::F_UNLCK, None)?;
        Ok(entered.then_some(Presence { file }))
    })();
    match present.map_err(|e| store_error(&dir, "use the record", e))? {
        Some(presence) => Ok(presence),
        None => Err(too_many_calls(state_dir)),
    }
}

fn too_many_calls(state_dir: &Path) -> String {
    format!(
        "more than {SLOTS} chitti calls are running at once with the state directory {}; \
         wait for some of them to end",
        state_dir.display()
    )
}

/// The first of the bytes a running call holds from its first step to its last (after
/// its repairs and its nested-repository check), one per call: whether the roots kept
/// for that byte are a running call's.
const PRESENT: i64 = 2 + SLOTS as i64;
/// Where in the lock file the process is named whose end ends the call in slot `n`
/// (`IDENTITY_AT + n * IDENTITY_SPAN`): its pid (four bytes), four zero bytes, then its PID
/// namespace's inode (eight bytes; zero: unknown, and the lock alone tells).
const IDENTITY_AT: u64 = 1024;
const IDENTITY_SPAN: u64 = 16;
const _: () = assert!(IDENTITY_AT + SLOTS as u64 * IDENTITY_SPAN <= ROOTS_AT);

static PID_NAMESPACE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// The PID namespace this process sees pids in (its inode), 0 when it cannot be told: a
/// pid named by a call in another namespace means nothing here.
fn own_pid_namespace() -> u64 {
    *PID_NAMESPACE.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
        }
        // No PID namespaces: every process sees the same pids.
        #[cfg(not(target_os = "linux"))]
        1
    })
}

/// Names `pid`, of the PID namespace `namespace` (0: unknown), as the process whose end
/// ends the call in `slot`.
fn name_holder(
    file: &std::fs::File,
    slot: u32,
    pid: libc::pid_t,
    namespace: u64,
) -> std::io::Result<()> {
    let mut identity = [0u8; IDENTITY_SPAN as usize];
    identity[..4].copy_from_slice(&pid.to_le_bytes());
    identity[8..].copy_from_slice(&namespace.to_le_bytes());
    file.write_all_at(&identity, IDENTITY_AT + u64::from(slot) * IDENTITY_SPAN)
}

/// Whether the process named for `slot` has exited (a zombie too): then the byte is held
/// only by a copy of a killed call's descriptor. False whenever that cannot be told.
fn holder_has_exited(file: &std::fs::File, slot: u32) -> bool {
    let read = || {
        let mut identity = [0u8; IDENTITY_SPAN as usize];
        file.read_exact_at(&mut identity, IDENTITY_AT + u64::from(slot) * IDENTITY_SPAN)
            .ok()
            .map(|()| identity)
    };
    let Some(identity) = read() else {
        return false;
    };
    let pid = libc::pid_t::from_le_bytes(identity[..4].try_into().unwrap_or_default());
    let namespace = u64::from_le_bytes(identity[8..].try_into().unwrap_or_default());
    if pid <= 0 || namespace == 0 || namespace != own_pid_namespace() {
        return false;
    }
    // Read again after the look: a name being written while it was read (not under the
    // step's lock: see `Member::supervised_by`) may have been read torn.
    has_exited(pid) && read() == Some(identity)
}

#[cfg(target_os = "linux")]
fn has_exited(pid: libc::pid_t) -> bool {
    use super::linux::vfork::{open_pidfd, wait_readable};
    // A pidfd is readable once its process has exited, reaped or not.
    match open_pidfd(pid) {
        Ok(pidfd) => wait_readable(&pidfd, Duration::ZERO),
        Err(e) => e.raw_os_error() == Some(libc::ESRCH),
    }
}

/// Gone, rather than a zombie (taken for running: the lock decides then).
#[cfg(not(target_os = "linux"))]
fn has_exited(pid: libc::pid_t) -> bool {
    let signalled = unsafe { libc::kill(pid, 0) };
    signalled != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Where in the lock file the roots of the call holding presence byte `n` are kept:
/// `ROOTS_AT + n * ROOTS_SPAN`, a length (four bytes), then each root: its device and
/// inode (eight bytes each; all ones where it could not be looked at), and its path, ended
/// by NUL.
const ROOTS_AT: u64 = 4096;
const ROOTS_SPAN: u64 = 64 * 1024;

/// A running call's writable root, by its path and by what directory it is: a second
/// mount shows one directory under two paths (a review ran two calls at once in one
/// workspace through a bind mount).
#[derive(Debug, Clone)]
struct RunningRoot {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

fn directory_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// With STEP held: takes a free presence byte for this open of the lock file and keeps
/// `roots` beside it. False when every byte is taken.
fn enter(file: &std::fs::File, roots: &[PathBuf]) -> std::io::Result<bool> {
    let Some(n) = (0..SLOTS)
        .map(|n| lock_byte(file, PRESENT + i64::from(n), libc::F_WRLCK, None).map(|ok| (n, ok)))
        .find(|taken| !matches!(taken, Ok((_, false))))
        .transpose()?
        .map(|(n, _)| n)
    else {
        return Ok(false);
    };
    let listing = |roots: &[&Path]| {
        let mut listed: Vec<u8> = Vec::new();
        for root in roots {
            let (dev, ino) = directory_id(root).unwrap_or((u64::MAX, u64::MAX));
            listed.extend_from_slice(&dev.to_le_bytes());
            listed.extend_from_slice(&ino.to_le_bytes());
            listed.extend_from_slice(root.as_os_str().as_bytes());
            listed.push(0);
        }
        listed
    };
    let mut listed = listing(&roots.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    if listed.len() as u64 > ROOTS_SPAN - 4 {
        // Too many to keep: the whole filesystem stands for them (later calls are then
        // stricter than they need be, never less strict).
        listed = listing(&[Path::new("/")]);
    }
    let mut kept = (listed.len() as u32).to_le_bytes().to_vec();
    kept.extend_from_slice(&listed);
    file.write_all_at(&kept, ROOTS_AT + u64::from(n) * ROOTS_SPAN)?;
    Ok(true)
}

/// With STEP held: the writable roots of the calls running now but this open's own
/// (whose presence byte another open holds).
fn running_roots(file: &std::fs::File) -> std::io::Result<Vec<RunningRoot>> {
    let mut held = Vec::new();
    held_bytes(file, PRESENT, PRESENT + i64::from(SLOTS), &mut held)?;
    let mut roots = Vec::new();
    for byte in held {
        let at = ROOTS_AT + (byte - PRESENT) as u64 * ROOTS_SPAN;
        let mut len = [0u8; 4];
        file.read_exact_at(&mut len, at)?;
        let len = u64::from(u32::from_le_bytes(len)).min(ROOTS_SPAN - 4);
        let mut listed = vec![0u8; len as usize];
        file.read_exact_at(&mut listed, at + 4)?;
        let mut rest = &listed[..];
        while rest.len() > 16 {
            let number = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
            let (dev, ino) = (number(&rest[..8]), number(&rest[8..16]));
            let tail = &rest[16..];
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            roots.push(RunningRoot {
                path: PathBuf::from(OsString::from_vec(tail[..end].to_vec())),
                id: (dev, ino).ne(&(u64::MAX, u64::MAX)).then_some((dev, ino)),
            });
            rest = tail.get(end + 1..).unwrap_or_default();
        }
    }
    Ok(roots)
}

/// The bytes in `from..to` that another open of the file holds (`F_OFD_GETLK` names one
/// holder at a time, not always the first: the rest of the range is asked on both sides).
fn held_bytes(
    file: &std::fs::File,
    from: i64,
    to: i64,
    held: &mut Vec<i64>,
) -> std::io::Result<()> {
    if from >= to {
        return Ok(());
    }
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = from;
    lock.l_len = to - from;
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lock.l_type == libc::F_UNLCK as libc::c_short {
        return Ok(());
    }
    // A holder's lock is one byte; a longer one (chitti writes none) counts whole.
    let start = lock.l_start.max(from);
    let end = if lock.l_len == 0 {
        to
    } else {
        (lock.l_start + lock.l_len).min(to)
    };
    held_bytes(file, from, start, held)?;
    held.extend(start..end);
    held_bytes(file, end, to, held)
}

/// Joins the calls running now in the store under `state_dir`: until [`Joining::finish`],
/// no other call joins or leaves.
pub fn join(state_dir: &Path, roots: &[PathBuf]) -> Result<Joining, String> {
    join_within(state_dir, roots, PATIENCE)
}

/// [`join`], waiting at most `patience` for a call joining or leaving now.
fn join_within(state_dir: &Path, roots: &[PathBuf], patience: Duration) -> Result<Joining, String> {
    let dir = state_dir.join("protect");
    let locked = (|| {
        let file = open_locks(&dir)?;
        lock_byte(&file, STEP, libc::F_WRLCK, Some(patience))?;
        let alone = lock_byte(&file, RUNNING, libc::F_WRLCK, None)?;
        // Atomic for these locks: from exclusive (alone) to shared, or shared at once (no
        // other open holds the byte exclusively without holding STEP, which this one does).
        lock_byte(&file, RUNNING, libc::F_RDLCK, Some(patience))?;
        if !enter(&file, roots)? {
            return Ok(None);
        }
        let running_roots = if alone {
            Vec::new()
        } else {
            running_roots(&file)?
        };
        let stored = read_record(&dir)?;
        Ok::<_, std::io::Error>(Some((file, alone, stored, running_roots)))
    })();
    let (file, alone, stored, running_roots) = locked
        .map_err(|e| store_error(&dir, "use the record", e))?
        .ok_or_else(|| too_many_calls(state_dir))?;
    let mut records = parse(&dir, &stored)?;
    // Calls named by a record that no longer run: alone, none runs.
    let live = if alone {
        0
    } else {
        live_members(&file, &records, 0).map_err(|e| store_error(&dir, "use the record", e))?
    };
    let mut changed = false;
    for stored in records.values_mut() {
        if stored.members & !live != 0 {
            stored.members &= live;
            changed = true;
        }
    }
    let slot = (0..SLOTS).filter(|&n| live & (1 << n) == 0).find_map(|n| {
        match lock_byte(&file, slot_byte(n), libc::F_WRLCK, None) {
            Ok(true) => Some(Ok(n)),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    });
    let slot = match slot {
        Some(Ok(n)) => n,
        Some(Err(e)) => return Err(store_error(&dir, "use the record", e)),
        None => return Err(too_many_calls(state_dir)),
    };
    // This process, until a supervisor takes the call over. Its namespace only where
    // already known (a server's later calls): looking it up here would cost a one-shot
    // call some microseconds before its command starts, and while this process holds the
    // lock the call runs in any case.
    let namespace = PID_NAMESPACE.get().copied().unwrap_or(0);
    name_holder(&file, slot, std::process::id() as libc::pid_t, namespace)
        .map_err(|e| store_error(&dir, "use the record", e))?;
    Ok(Joining {
        dir,
        file,
        stored,
        records,
        bit: 1 << slot,
        mine: BTreeSet::new(),
        changed,
        running_roots,
    })
}

/// Whether the file is of the first format, which had no generation after its state byte.
fn first_format(stored: &[u8]) -> bool {
    stored
        .get(1..)
        .is_some_and(|body| body.starts_with(MAGIC_1))
}

/// The generation in a file's header (0 for a file without one).
fn generation(stored: &[u8]) -> u64 {
    match stored.get(1..HEADER) {
        Some(n) if !first_format(stored) => u64::from_le_bytes(n.try_into().unwrap_or_default()),
        _ => 0,
    }
}

/// The records in what the file holds; an error says what to do about a file chitti did
/// not write.
fn parse(dir: &Path, stored: &[u8]) -> Result<Records, String> {
    let unreadable = |what: &str| {
        format!(
            "{} is not a record chitti wrote ({what}). It holds what protected paths held \
             before the calls running now; if no chitti call is running, remove it",
            dir.join("record").display()
        )
    };
    match stored.split_first() {
        None | Some((&CLEARED, _)) => Ok(Records::new()),
        Some((&HOLDS_RECORDS, body)) if first_format(stored) => {
            decode(body).ok_or_else(|| unreadable("its records do not parse"))
        }
        Some((&HOLDS_RECORDS, _)) => stored
            .get(HEADER..)
            .and_then(decode)
            .ok_or_else(|| unreadable("its records do not parse")),
        Some(_) => Err(unreadable("an unknown first byte")),
    }
}

/// The slots, among those `records` name, whose calls still run (hold their byte, for a
/// process that has not exited), but for `own` (this open's slot, which the test would
/// release). Called with STEP held: no call joins or leaves meanwhile.
fn live_members(file: &std::fs::File, records: &Records, own: u64) -> std::io::Result<u64> {
    let named = records.values().fold(0u64, |all, r| all | r.members) & !own;
    let mut live = 0;
    for slot in (0..SLOTS).filter(|n| named & (1 << n) != 0) {
        if lock_byte(file, slot_byte(slot), libc::F_WRLCK, None)? {
            lock_byte(file, slot_byte(slot), libc::F_UNLCK, None)?;
        } else if holder_has_exited(file, slot) {
            // Held by a copy of a killed call's descriptor, which goes in a moment.
        } else {
            live |= 1 << slot;
        }
    }
    Ok(live)
}

impl Joining {
    /// What `path` held before the calls running now, if one of them recorded it (or
    /// calls that ended without their repairs did).
    pub fn recorded(&self, path: &Path) -> Option<&Before> {
        self.records.get(path).map(|r| &r.before)
    }

    /// Whether `path` lies in a writable root of another call running now: what this
    /// call would record of it afresh may be what that call's command planted.
    pub fn may_be_written_by_running_call(&self, path: &Path) -> Option<&Path> {
        if self.running_roots.is_empty() {
            return None;
        }
        if let Some(root) = self
            .running_roots
            .iter()
            .find(|r| path.starts_with(&r.path))
        {
            return Some(&root.path);
        }
        // Under another name (a second mount of the root, or of a directory above it):
        // the same directory on the way.
        path.ancestors().find_map(|dir| {
            let id = directory_id(dir)?;
            self.running_roots
                .iter()
                .find(|r| r.id == Some(id))
                .map(|r| r.path.as_path())
        })
    }

    /// True when the record of `path` was left by calls that ended without their repairs,
    /// rather than kept by calls still running (ask before adopting it).
    pub fn left_over(&self, path: &Path) -> bool {
        self.records.get(path).is_some_and(|r| r.members == 0)
    }

    /// Uses the record of `path` (kept by running calls, or left over) for this call too.
    pub fn adopt(&mut self, path: &Path) {
        if let Some(stored) = self.records.get_mut(path) {
            if stored.members & self.bit == 0 {
                stored.members |= self.bit;
                self.changed = true;
            }
            self.mine.insert(path.to_path_buf());
        }
    }

    /// Adds this call's record of a path no running call had recorded (or replaces one
    /// left over that no longer applies).
    pub fn record(&mut self, path: &Path, before: Before) {
        let stored = Stored {
            members: self.bit,
            before,
        };
        self.records.insert(path.to_path_buf(), stored);
        self.mine.insert(path.to_path_buf());
        self.changed = true;
    }

    /// Saves what this call added and lets other calls join and leave.
    pub fn finish(self) -> Result<Member, String> {
        let mut written = generation(&self.stored);
        if self.changed {
            written = written.wrapping_add(1);
            let whole = whole_file(&self.records, written);
            let cleared = self.stored.first() != Some(&HOLDS_RECORDS);
            let saved = if cleared && self.stored.get(HEADER..) == Some(&whole[HEADER..]) {
                // The last call left this very record: the header is enough (the generation
                // moves on all the same, so that no call takes the file for unchanged).
                write_header(&self.dir, &whole[..HEADER])
            } else {
                write_record(&self.dir, &whole)
            };
            saved.map_err(|e| store_error(&self.dir, "save the record", e))?;
        }
        lock_byte(&self.file, STEP, libc::F_UNLCK, None)
            .map_err(|e| store_error(&self.dir, "unlock the record", e))?;
        let only_mine =
            !self.records.is_empty() && self.records.values().all(|r| r.members == self.bit);
        Ok(Member {
            dir: self.dir,
            file: self.file,
            bit: self.bit,
            mine: self.mine,
            written,
            only_mine,
            armed: true,
        })
    }
}

impl Member {
    /// The descriptor whose locks say this call is running: a forked supervisor that does
    /// the repairs must keep it.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// This call's presence among the running calls (the same open of the lock file),
    /// to hold until its last step: leaving the record does not end it.
    pub fn presence(&self) -> Result<Presence, String> {
        let file = self
            .file
            .try_clone()
            .map_err(|e| store_error(&self.dir, "use the record", e))?;
        Ok(Presence { file })
    }

    /// Names `pid`, the supervisor chitti forked for this call, as the process whose end
    /// ends the call, however it ends (killed, it leaves its records behind). Named after
    /// the supervisor holds its copy of the lock and before chitti closes its own; a name
    /// that cannot be written leaves chitti's, and the lock alone tells.
    pub fn supervised_by(&self, pid: libc::pid_t) {
        let _ = name_holder(
            &self.file,
            self.bit.trailing_zeros(),
            pid,
            own_pid_namespace(),
        );
    }

    /// Dropped from now on, this copy does not leave (see `armed`).
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// Runs the repairs with the store locked, then leaves: the records no running call
    /// uses any more go (those left over by calls that ended without their repairs stay).
    /// A store that cannot be locked does not stop the repairs.
    pub fn leave<R>(self, repairs: impl FnOnce() -> R) -> (R, Option<String>) {
        self.leave_unless_failed(repairs, |_| false)
    }

    /// [`Member::leave`]; but where `failed` says the repairs did not all succeed, this
    /// call's records stay, as a killed call's do, for the next call protecting those
    /// paths to adopt and put back (rather than that call recording what was left).
    pub fn leave_unless_failed<R>(
        mut self,
        repairs: impl FnOnce() -> R,
        failed: impl FnOnce(&R) -> bool,
    ) -> (R, Option<String>) {
        self.armed = false;
        self.leave_now(repairs, failed)
    }

    fn leave_now<R>(
        &self,
        repairs: impl FnOnce() -> R,
        failed: impl FnOnce(&R) -> bool,
    ) -> (R, Option<String>) {
        let file = &self.file;
        let step = lock_byte(file, STEP, libc::F_WRLCK, Some(PATIENCE));
        let done = repairs();
        let left = match step {
            Ok(_) if failed(&done) => Ok(()),
            Ok(_) => self.drop_own_records(),
            Err(e) => Err(store_error(&self.dir, "leave the record", e)),
        };
        // Unlocked explicitly: a copy of the descriptor may live on in chitti. The running
        // and presence bytes stay, until the call's last step (see `Presence`).
        let slot = self.bit.trailing_zeros();
        let _ = lock_byte(file, slot_byte(slot), libc::F_UNLCK, None);
        let _ = lock_byte(file, STEP, libc::F_UNLCK, None);
        (done, left.err())
    }

    /// With STEP held: takes this call off its records and drops those it was the last
    /// running call of.
    fn drop_own_records(&self) -> Result<(), String> {
        let file = &self.file;
        let trouble = |e: std::io::Error| store_error(&self.dir, "leave the record", e);
        let alone = lock_byte(file, RUNNING, libc::F_WRLCK, None).map_err(trouble)?;
        // Back to shared at once: this call is present until its last step.
        lock_byte(file, RUNNING, libc::F_RDLCK, None).map_err(trouble)?;
        if alone && self.only_mine {
            let mut header = [0u8; HEADER];
            let read = open_record(&self.dir, false)
                .and_then(|f| f.ok_or_else(|| std::io::Error::other("the record file is gone")))
                .and_then(|f| f.read_exact_at(&mut header, 0));
            if read.is_ok() && header[0] == HOLDS_RECORDS && generation(&header) == self.written {
                // Nobody rewrote it since: every record in it is this call's alone.
                return write_header(&self.dir, &[CLEARED]).map_err(trouble);
            }
        }
        let stored = read_record(&self.dir).map_err(trouble)?;
        let mut records = parse(&self.dir, &stored)?;
        let others = if alone {
            0
        } else {
            live_members(file, &records, self.bit).map_err(trouble)?
        };
        records.retain(|path, r| {
            let used = r.members & self.bit != 0 && self.mine.contains(path);
            r.members &= others;
            // Left over (no running call, and not this call's): kept for adoption.
            !(used && r.members == 0)
        });
        let before = stored.first().copied();
        if records.is_empty() {
            if before == Some(HOLDS_RECORDS) {
                write_header(&self.dir, &[CLEARED]).map_err(trouble)?;
            }
            return Ok(());
        }
        let whole = whole_file(&records, generation(&stored).wrapping_add(1));
        write_record(&self.dir, &whole).map_err(trouble)
    }
}

/// What the file holds for `records` (state byte, generation, records).
fn whole_file(records: &Records, generation: u64) -> Vec<u8> {
    let mut whole = Vec::with_capacity(32 * 1024);
    whole.push(HOLDS_RECORDS);
    whole.extend_from_slice(&generation.to_le_bytes());
    encode(records, &mut whole);
    whole
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.armed {
            let ((), _) = self.leave_now(|| (), |_| false);
        }
    }
}

/// Little-endian lengths and numbers; every path and file as its bytes.
fn encode(records: &Records, out: &mut Vec<u8>) {
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(records.len() as u64).to_le_bytes());
    for (path, Stored { members, before }) in records {
        bytes(out, path.as_os_str().as_bytes());
        out.extend_from_slice(&members.to_le_bytes());
        match before {
            Before::Pinned { dev, ino, mode } => {
                out.push(0);
                out.extend_from_slice(&dev.to_le_bytes());
                out.extend_from_slice(&ino.to_le_bytes());
                out.extend_from_slice(&mode.to_le_bytes());
            }
            Before::File { bytes: b, mode } => {
                out.push(1);
                out.extend_from_slice(&mode.to_le_bytes());
                bytes(out, b);
            }
            Before::Dir { mode, tree } => {
                out.push(2);
                out.extend_from_slice(&mode.to_le_bytes());
                out.extend_from_slice(&(tree.len() as u64).to_le_bytes());
                for item in tree {
                    bytes(out, item.rel.as_os_str().as_bytes());
                    out.extend_from_slice(&item.mode.to_le_bytes());
                    match &item.contents {
                        None => out.push(0),
                        Some(b) => {
                            out.push(1);
                            bytes(out, b);
                        }
                    }
                }
            }
            Before::Absent => out.push(3),
        }
    }
}

fn decode(input: &[u8]) -> Option<Records> {
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Option<&[u8]> {
            if n > self.0.len() {
                return None;
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Some(head)
        }
        fn u8(&mut self) -> Option<u8> {
            Some(self.take(1)?[0])
        }
        fn u32(&mut self) -> Option<u32> {
            Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
        }
        fn u64(&mut self) -> Option<u64> {
            Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
        }
        fn bytes(&mut self) -> Option<Vec<u8>> {
            let n = usize::try_from(self.u64()?).ok()?;
            Some(self.take(n)?.to_vec())
        }
        fn path(&mut self) -> Option<PathBuf> {
            Some(PathBuf::from(OsString::from_vec(self.bytes()?)))
        }
    }
    let mut r = Reader(input);
    let with_members = match r.take(MAGIC.len())? {
        magic if magic == MAGIC => true,
        magic if magic == MAGIC_1 => false,
        _ => return None,
    };
    let mut records = BTreeMap::new();
    for _ in 0..r.u64()? {
        let path = r.path()?;
        let members = if with_members { r.u64()? } else { 0 };
        let before = match r.u8()? {
            0 => Before::Pinned {
                dev: r.u64()?,
                ino: r.u64()?,
                mode: r.u32()?,
            },
            1 => Before::File {
                mode: r.u32()?,
                bytes: r.bytes()?,
            },
            2 => {
                let mode = r.u32()?;
                let mut tree = Vec::new();
                for _ in 0..r.u64()? {
                    let rel = r.path()?;
                    let item_mode = r.u32()?;
                    let contents = match r.u8()? {
                        0 => None,
                        1 => Some(r.bytes()?),
                        _ => return None,
                    };
                    tree.push(TreeItem {
                        rel,
                        contents,
                        mode: item_mode,
                    });
                }
                Before::Dir { mode, tree }
            }
            3 => Before::Absent,
            _ => return None,
        };
        records.insert(path, Stored { members, before });
    }
    r.0.is_empty().then_some(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the record file holds records (rather than nothing).
    fn stored_records(state: &Path) -> bool {
        std::fs::read(state.join("protect/record")).unwrap()[0] == HOLDS_RECORDS
    }

    /// A call that has joined, recording what `path` held (`before`).
    fn recording(state: &Path, path: &Path, before: Before) -> Member {
        let mut call = join(state, &[]).unwrap();
        call.record(path, before);
        call.finish().unwrap()
    }

    /// What a call's supervisor being killed leaves: its descriptors closed, nothing else.
    /// (A child another test forks now may hold a copy of them for a moment, locks and all:
    /// the supervisor named for the call has exited all the same.)
    fn killed(mut member: Member) {
        member.supervised_by(an_exited_process());
        member.disarm();
        drop(member);
    }

    /// A call that recorded `path`, and a child holding a copy of its lock.
    fn recorded_with_a_copy(state: &Path, path: &Path) -> (Member, std::process::Child) {
        let call = recording(state, path, file("clean"));
        let copy = holding_a_copy_of(call.fd());
        (call, copy)
    }

    /// A killed call's lock lives on in a copy of its descriptor: its supervisor's end says
    /// that the call ended, and its record is left over, not a running call's. (Taken for a
    /// running call's, it was put back without its replacement moved aside.)
    #[test]
    fn a_killed_call_is_not_kept_running_by_a_copy_of_its_lock() {
        let state = tempfile::tempdir().unwrap();
        let config = Path::new("/repo/.git/config");
        let (mut call, mut copy) = recorded_with_a_copy(state.path(), config);
        let mut supervisor = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        call.supervised_by(supervisor.id() as libc::pid_t);
        call.disarm();
        drop(call);
        let ended = || left_over_for_the_next(state.path(), config);
        assert!(!ended(), "its supervisor runs: so does the call");
        supervisor.kill().unwrap();
        // Not reaped yet on Linux, where a zombie has ended too (its pidfd says so);
        // elsewhere a zombie counts as running, the cautious side, until it is reaped.
        if cfg!(target_os = "linux") {
            until_exited(&supervisor);
        } else {
            supervisor.wait().unwrap();
        }
        assert!(ended(), "a copy of its lock kept a killed call running");
        let _ = supervisor.wait();
        copy.kill().unwrap();
        copy.wait().unwrap();
    }

    /// A process named from another PID namespace (or none named) tells nothing here: the
    /// lock alone says whether the call runs.
    #[test]
    fn a_call_named_from_another_pid_namespace_is_judged_by_its_lock() {
        let state = tempfile::tempdir().unwrap();
        let config = Path::new("/repo/.git/config");
        let (mut call, mut copy) = recorded_with_a_copy(state.path(), config);
        let elsewhere = own_pid_namespace() + 1;
        name_holder(
            &call.file,
            call.bit.trailing_zeros(),
            an_exited_process(),
            elsewhere,
        )
        .unwrap();
        call.disarm();
        drop(call);
        let ended = || left_over_for_the_next(state.path(), config);
        assert!(!ended(), "taken for ended by a pid of another namespace");
        copy.kill().unwrap();
        copy.wait().unwrap();
        assert!(ended(), "the lock went with the last copy");
    }

    #[test]
    fn a_call_that_ends_before_its_command_leaves_nothing_behind() {
        let state = tempfile::tempdir().unwrap();
        let config = Path::new("/repo/.git/config");
        let mut failed = join(state.path(), &[]).unwrap();
        failed.record(config, file("clean"));
        drop(failed.finish().unwrap()); // a set-up error: dropped, never handed over
        let next = join(state.path(), &[]).unwrap();
        assert!(next.recorded(config).is_none());
        drop(next);
        assert!(!stored_records(state.path()));
    }

    fn file(text: &str) -> Before {
        Before::File {
            bytes: text.as_bytes().to_vec(),
            mode: 0o644,
        }
    }

    #[test]
    fn a_call_joining_while_another_runs_adopts_its_record() {
        let state = tempfile::tempdir().unwrap();
        let config = Path::new("/repo/.git/config");
        let mut first = join(state.path(), &[]).unwrap();
        assert!(first.recorded(config).is_none());
        first.record(config, file("clean"));
        let first = first.finish().unwrap();

        let mut second = join(state.path(), &[]).unwrap();
        assert_eq!(second.recorded(config), Some(&file("clean")));
        assert!(!second.left_over(config), "the first call is still running");
        second.adopt(config);
        let second = second.finish().unwrap();

        // The first leaves; the record stays for the second, which is still running.
        let ((), trouble) = first.leave(|| ());
        assert!(trouble.is_none());
        assert!(stored_records(state.path()));
        let mut third = join(state.path(), &[]).unwrap();
        assert_eq!(third.recorded(config), Some(&file("clean")));
        third.adopt(config);
        let third = third.finish().unwrap();
        let ((), _) = second.leave(|| ());
        let ((), _) = third.leave(|| ());
        assert!(
            !stored_records(state.path()),
            "the last call to leave clears the record"
        );
        let mut fresh = join(state.path(), &[]).unwrap();
        assert!(fresh.recorded(config).is_none());
        // Alone, with the same record as the last call's: only the state byte is written.
        fresh.record(config, file("clean"));
        let fresh = fresh.finish().unwrap();
        assert!(stored_records(state.path()));
        let again = join(state.path(), &[]).unwrap();
        assert_eq!(again.recorded(config), Some(&file("clean")));
        drop(again);
        let ((), _) = fresh.leave(|| ());
        let changed = recording(state.path(), config, file("edited since"));
        let check = join(state.path(), &[]).unwrap();
        assert_eq!(check.recorded(config), Some(&file("edited since")));
        drop(check);
        drop(changed);
    }

    #[test]
    fn a_record_left_by_a_call_that_never_left_is_adopted_and_said_to_be() {
        let state = tempfile::tempdir().unwrap();
        let config = Path::new("/repo/.git/config");
        let crashed = recording(state.path(), config, file("clean"));
        // Its supervisor was killed: the lock goes with the descriptor, the record stays.
        killed(crashed);

        let mut next = join(state.path(), &[]).unwrap();
        assert!(next.left_over(config));
        assert_eq!(next.recorded(config), Some(&file("clean")));
        next.adopt(config);
        assert!(!next.left_over(config), "adopted");
        let next = next.finish().unwrap();
        let ((), _) = next.leave(|| ());
        assert!(!stored_records(state.path()));
    }

    /// A record lives as long as the calls using it: a call that starts after they all
    /// ended records afresh, even while calls in other repositories run.
    #[test]
    fn a_record_goes_with_the_last_call_using_it_whatever_else_runs() {
        let state = tempfile::tempdir().unwrap();
        let (one, two) = (Path::new("/r1/.git/config"), Path::new("/r2/.git/config"));
        let long = recording(state.path(), one, file("r1"));
        let short = recording(state.path(), two, file("before the host's edit"));
        let ((), trouble) = short.leave(|| ());
        assert!(trouble.is_none(), "{trouble:?}");
        // The user edits r2's config on the host; the next call there must not undo it.
        let later = join(state.path(), &[]).unwrap();
        assert!(later.recorded(two).is_none());
        assert_eq!(later.recorded(one), Some(&file("r1")));
        assert!(!later.left_over(one), "the long call still runs");
        drop(later);
        let ((), _) = long.leave(|| ());
        assert!(!stored_records(state.path()));
    }

    /// What calls that never left recorded stays until a call protecting those paths
    /// adopts it: calls elsewhere, alone or not, leave it alone.
    #[test]
    fn a_record_left_over_stays_until_a_call_for_its_path_adopts_it() {
        let state = tempfile::tempdir().unwrap();
        let (one, two) = (Path::new("/r1/.git/config"), Path::new("/r2/.git/config"));
        let running = recording(state.path(), two, file("r2"));
        let crashed = recording(state.path(), one, file("clean r1"));
        killed(crashed); // its slot's lock went with its descriptors
        let elsewhere = join(state.path(), &[]).unwrap();
        assert!(elsewhere.left_over(one), "found while another call runs");
        assert!(!elsewhere.left_over(two));
        drop(elsewhere);
        let ((), _) = running.leave(|| ());
        // Alone, in r2: its own record comes and goes, r1's stays.
        let alone = recording(state.path(), two, file("r2"));
        let ((), _) = alone.leave(|| ());
        assert!(stored_records(state.path()));
        let mut in_one = join(state.path(), &[]).unwrap();
        assert!(in_one.left_over(one));
        assert_eq!(in_one.recorded(one), Some(&file("clean r1")));
        assert!(in_one.recorded(two).is_none());
        in_one.adopt(one);
        let ((), _) = in_one.finish().unwrap().leave(|| ());
        assert!(!stored_records(state.path()));
    }

    /// The last call to leave, alone now but not when another joined meanwhile, reads the
    /// records again rather than marking them all cleared.
    #[test]
    fn a_call_leaving_alone_keeps_what_a_killed_call_added_meanwhile() {
        let state = tempfile::tempdir().unwrap();
        let (mine, theirs) = (Path::new("/r1/.git/config"), Path::new("/r2/.git/config"));
        let first = recording(state.path(), mine, file("r1"));
        let mut second = join(state.path(), &[]).unwrap();
        second.record(theirs, file("r2"));
        killed(second.finish().unwrap());
        let ((), trouble) = first.leave(|| ());
        assert!(trouble.is_none(), "{trouble:?}");
        let next = join(state.path(), &[]).unwrap();
        assert!(next.recorded(mine).is_none());
        assert!(next.left_over(theirs));
    }

    /// A call with no records of its own, leaving alone, must not clear what a call that
    /// joined after it (same records as the last ones, so only the header was written)
    /// left when it was killed.
    #[test]
    fn a_call_without_records_leaving_alone_keeps_a_killed_calls_records() {
        let state = tempfile::tempdir().unwrap();
        let path = Path::new("/r/.git/config.worktree");
        // Two earlier calls leave the file cleared with this very record, of slot 1, in place.
        let beside = join(state.path(), &[]).unwrap().finish().unwrap(); // slot 0, records nothing
        let mut earlier = join(state.path(), &[]).unwrap(); // slot 1
        earlier.record(path, Before::Absent);
        let ((), _) = earlier.finish().unwrap().leave(|| ());
        let ((), _) = beside.leave(|| ());
        let first = join(state.path(), &[]).unwrap().finish().unwrap(); // slot 0, records nothing
        let mut second = join(state.path(), &[]).unwrap(); // slot 1: the same record again
        second.record(path, Before::Absent);
        killed(second.finish().unwrap());
        let ((), trouble) = first.leave(|| ());
        assert!(trouble.is_none(), "{trouble:?}");
        let next = join(state.path(), &[]).unwrap();
        assert!(next.left_over(path), "the killed call's record was cleared");
    }

    /// A call killed while it wrote a whole record leaves the one before it whole: the new
    /// one is written beside it (`record.new`) and renamed over it. What such a call left
    /// beside it neither is read nor stops the next writer.
    #[test]
    fn a_record_half_written_beside_by_a_killed_call_changes_nothing() {
        let state = tempfile::tempdir().unwrap();
        let config = Path::new("/r/.git/config");
        let first = recording(state.path(), config, file("clean"));
        // What a writer killed half-way leaves: the staged file, cut short.
        let record = std::fs::read(state.path().join("protect/record")).unwrap();
        std::fs::write(
            state.path().join("protect/record.new"),
            &record[..record.len() / 2],
        )
        .unwrap();
        let mut second = join(state.path(), &[]).unwrap();
        assert_eq!(second.recorded(config), Some(&file("clean")));
        second.adopt(config);
        second.record(Path::new("/r/.git/hooks"), Before::Absent);
        let second = second.finish().unwrap();
        let ((), trouble) = first.leave(|| ());
        assert!(trouble.is_none(), "{trouble:?}");
        let third = join(state.path(), &[]).unwrap();
        assert_eq!(third.recorded(config), Some(&file("clean")));
        drop(third);
        let ((), _) = second.leave(|| ());
        assert!(!stored_records(state.path()));
    }

    /// The roots a call joining sees: those of every other call present, whichever
    /// order they came and went in, and only while they are present.
    #[test]
    fn a_call_sees_the_roots_of_every_call_present_and_only_those() {
        let state = tempfile::tempdir().unwrap();
        let roots = |names: &[&str]| -> Vec<PathBuf> { names.iter().map(PathBuf::from).collect() };
        let seen = |joining: &Joining| -> Vec<&str> {
            ["/a/x", "/b/y", "/c", "/d/z", "/e"]
                .into_iter()
                .filter(|p| {
                    joining
                        .may_be_written_by_running_call(Path::new(p))
                        .is_some()
                })
                .collect()
        };
        let first = be_present(state.path(), &roots(&["/a", "/b"])).unwrap();
        let member = join(state.path(), &roots(&["/c"]))
            .unwrap()
            .finish()
            .unwrap();
        let second = member.presence().unwrap();
        // Leaving the record does not end the presence.
        let ((), trouble) = member.leave(|| ());
        assert!(trouble.is_none(), "{trouble:?}");
        let third = be_present(state.path(), &roots(&["/d"])).unwrap();
        let joining = join(state.path(), &roots(&["/e"])).unwrap();
        assert_eq!(seen(&joining), ["/a/x", "/b/y", "/c", "/d/z"]);
        assert_eq!(
            joining.may_be_written_by_running_call(Path::new("/ab")),
            None
        );
        drop(joining);
        // A presence goes with the last copy of its open (a child another test forks holds
        // one for a moment: waited for, 10 s at most): the middle one first.
        let seen_after = |expected: &[&str]| -> Vec<String> {
            let asked = std::time::Instant::now();
            loop {
                let joining = join(state.path(), &[]).unwrap();
                let now: Vec<String> = seen(&joining).into_iter().map(String::from).collect();
                if now == expected || asked.elapsed() > Duration::from_secs(10) {
                    return now;
                }
                drop(joining);
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        drop(second);
        assert_eq!(
            seen_after(&["/a/x", "/b/y", "/d/z"]),
            ["/a/x", "/b/y", "/d/z"]
        );
        drop(first);
        assert_eq!(seen_after(&["/d/z"]), ["/d/z"]);
        drop(third);
        // Roots too many to keep stand for the whole filesystem.
        let many: Vec<PathBuf> = (0..20_000)
            .map(|n| PathBuf::from(format!("/many/{n}")))
            .collect();
        let _many = be_present(state.path(), &many).unwrap();
        let joining = join(state.path(), &[]).unwrap();
        assert_eq!(seen(&joining), ["/a/x", "/b/y", "/c", "/d/z", "/e"]);
    }

    /// A running call's root is known by what directory it is, too: under another name
    /// (a bind mount; here a symlink stands in), what lies in it is still its.
    #[test]
    fn a_running_root_is_known_under_another_name() {
        let state = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        let alias = base.join("alias");
        std::os::unix::fs::symlink(&ws, &alias).unwrap();
        let _running = be_present(state.path(), std::slice::from_ref(&alias)).unwrap();
        let joining = join(state.path(), &[]).unwrap();
        assert_eq!(
            joining.may_be_written_by_running_call(&ws.join(".git/config")),
            Some(alias.as_path())
        );
        assert_eq!(
            joining.may_be_written_by_running_call(&base.join("other")),
            None
        );
    }

    #[test]
    fn more_calls_present_than_slots_are_refused_with_what_to_do() {
        let state = tempfile::tempdir().unwrap();
        let present: Vec<Presence> = (0..SLOTS)
            .map(|_| be_present(state.path(), &[]).unwrap())
            .collect();
        let err = be_present(state.path(), &[]).err().unwrap();
        assert!(
            err.contains("more than 64 chitti calls are running at once"),
            "{err}"
        );
        let err = join(state.path(), &[]).err().unwrap();
        assert!(
            err.contains("more than 64 chitti calls are running at once"),
            "{err}"
        );
        drop(present);
        assert!(be_present(state.path(), &[]).is_ok());
    }

    #[test]
    fn more_calls_at_once_than_slots_are_refused_with_what_to_do() {
        let state = tempfile::tempdir().unwrap();
        let mut running = Vec::new();
        for n in 0..SLOTS {
            let mut call = join(state.path(), &[]).unwrap();
            call.record(&Path::new("/r").join(n.to_string()), file("x"));
            running.push(call.finish().unwrap());
        }
        let err = join(state.path(), &[]).err().unwrap();
        assert!(
            err.contains("more than 64 chitti calls are running at once"),
            "{err}"
        );
        let ((), _) = running.pop().unwrap().leave(|| ());
        let mut call = join(state.path(), &[]).unwrap();
        assert!(call.recorded(Path::new("/r/63")).is_none());
        assert!(!call.left_over(Path::new("/r/0")));
        call.record(Path::new("/r/63"), file("y"));
        running.push(call.finish().unwrap());
        for call in running {
            let ((), trouble) = call.leave(|| ());
            assert!(trouble.is_none(), "{trouble:?}");
        }
        assert!(!stored_records(state.path()));
    }

    #[test]
    fn records_keep_names_that_are_not_utf8_and_every_kind() {
        let state = tempfile::tempdir().unwrap();
        let odd = PathBuf::from(OsString::from_vec(b"/repo/\xff/.git/hooks".to_vec()));
        let kinds = [
            Before::Pinned {
                dev: 1,
                ino: 2,
                mode: 0o40755,
            },
            Before::Dir {
                mode: 0o40700,
                tree: vec![
                    TreeItem {
                        rel: PathBuf::from(OsString::from_vec(b"a\xfe".to_vec())),
                        contents: None,
                        mode: 0o40755,
                    },
                    TreeItem {
                        rel: PathBuf::from("a/pre-commit"),
                        contents: Some(vec![0, 1, 255]),
                        mode: 0o100755,
                    },
                ],
            },
            file(""),
            Before::Absent,
        ];
        let mut first = join(state.path(), &[]).unwrap();
        for (n, kind) in kinds.iter().enumerate() {
            first.record(&odd.join(n.to_string()), kind.clone());
        }
        let _running = first.finish().unwrap();
        let second = join(state.path(), &[]).unwrap();
        for (n, kind) in kinds.iter().enumerate() {
            assert_eq!(second.recorded(&odd.join(n.to_string())), Some(kind));
        }
    }

    #[test]
    fn a_record_of_the_first_format_is_read_as_left_over() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("protect")).unwrap();
        let mut old = vec![HOLDS_RECORDS];
        old.extend_from_slice(MAGIC_1);
        old.extend_from_slice(&1u64.to_le_bytes());
        let path = b"/repo/.git/config";
        old.extend_from_slice(&(path.len() as u64).to_le_bytes());
        old.extend_from_slice(path);
        old.push(3); // Absent
        std::fs::write(state.path().join("protect/record"), old).unwrap();
        let call = join(state.path(), &[]).unwrap();
        let config = Path::new("/repo/.git/config");
        assert_eq!(call.recorded(config), Some(&Before::Absent));
        assert!(call.left_over(config));
    }

    #[test]
    fn a_record_chitti_did_not_write_is_refused_with_what_to_do() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("protect")).unwrap();
        let record = state.path().join("protect/record");
        std::fs::write(&record, b"A{not a record").unwrap();
        let err = join(state.path(), &[]).err().unwrap();
        assert!(
            err.contains("protect/record is not a record chitti wrote"),
            "{err}"
        );
        assert!(
            err.contains("if no chitti call is running, remove it"),
            "{err}"
        );
        // Cut short.
        let mut first = join(&state.path().join("other"), &[]).unwrap();
        first.record(Path::new("/repo/.git/config"), file("clean"));
        let _running = first.finish().unwrap();
        let whole = std::fs::read(state.path().join("other/protect/record")).unwrap();
        std::fs::write(&record, &whole[..whole.len() - 1]).unwrap();
        let err = join(state.path(), &[]).err().unwrap();
        assert!(err.contains("its records do not parse"), "{err}");
    }

    #[test]
    fn a_record_anyone_else_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("protect")).unwrap();
        let record = state.path().join("protect/record");
        std::fs::write(&record, b"C").unwrap();
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = join(state.path(), &[]).err().unwrap();
        assert!(err.contains("only they may write"), "{err}");
        std::fs::remove_file(&record).unwrap();
        nix::unistd::mkfifo(&record, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = join(state.path(), &[]).err().unwrap();
        assert!(err.contains("is not a regular file"), "{err}");
    }

    #[test]
    fn a_call_stuck_in_its_join_is_reported_not_waited_for_forever() {
        let state = tempfile::tempdir().unwrap();
        let stuck = join(state.path(), &[]).unwrap(); // joining, and stopped there
        let started = std::time::Instant::now();
        let err = join_within(state.path(), &[], Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(err.contains("has held its lock for over 0.2 s"), "{err}");
        assert!(
            err.contains("Is a chitti process stopped (Ctrl-Z)"),
            "{err}"
        );
        drop(stuck);
        assert!(join_within(state.path(), &[], Duration::from_millis(200)).is_ok());
    }

    #[test]
    fn a_state_directory_that_cannot_be_made_refuses_with_what_to_do() {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("file"), "").unwrap();
        let err = join(&state.path().join("file/chitti"), &[]).err().unwrap();
        assert!(err.contains("cannot use the record in"), "{err}");
        assert!(err.contains("set XDG_STATE_HOME or HOME"), "{err}");
    }
}
