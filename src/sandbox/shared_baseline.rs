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
//! (it is a credential location, and a writable root overlapping one is refused). It holds
//! the records; its first byte says whether it holds records of calls (`A`) or nothing
//! (`C`, written by the last call to leave; what follows is left in place, so that the next
//! call, alone, need not write the same record again). Two one-byte locks on it (open file
//! description locks, which belong to the call's own open of the file):
//! - byte 0, held exclusively for the short steps of joining and leaving, so that these
//!   never interleave;
//! - byte 1, held shared by every call from joining until its repairs are done; whoever
//!   can lock it exclusively knows that no other call is running.
//!
//! A call that finds records (`A`) while no call is running knows that a call ended without
//! its repairs (its supervisor was killed). It adopts those records too, so that its own
//! repairs undo what that call's command left behind.
//!
//! Calls share the record when they share the state directory: the same user, with the
//! same `HOME` and `XDG_STATE_HOME`. What this costs a call in a repository is a dozen
//! system calls: the record is rewritten in place, in a format of chitti's own (JSON took
//! 0.1 ms for a repository's sample hooks, and a file made and removed per call 0.05 ms).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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
const MAGIC: &[u8] = b"chitti protected paths 1\n";
const HOLDS_RECORDS: u8 = b'A';
const CLEARED: u8 = b'C';

/// A call joining: the store is locked until [`Joining::finish`].
pub struct Joining {
    dir: PathBuf,
    /// The record file, this call's own open of it.
    file: std::fs::File,
    /// What the file held when this call joined, state byte first.
    stored: Vec<u8>,
    records: BTreeMap<PathBuf, Before>,
    /// No other call is running: records found now were left by a call that ended
    /// without its repairs.
    alone: bool,
    changed: bool,
}

/// A call that has joined: it leaves once its repairs are done.
#[derive(Debug)]
pub struct Member {
    dir: PathBuf,
    file: std::fs::File,
}

/// The byte locked while a call joins or leaves.
const STEP: i64 = 0;
/// The byte every running call holds shared.
const RUNNING: i64 = 1;

fn store_error(dir: &Path, what: &str, e: impl std::fmt::Display) -> String {
    format!(
        "cannot {what} in {}, where calls running at once share what their protected \
         paths held before them: {e}. chitti needs its state directory; set \
         XDG_STATE_HOME or HOME to a directory you can write",
        dir.display()
    )
}

fn open_record(dir: &Path) -> std::io::Result<std::fs::File> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(dir.join("record"))
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            open()
        }
        opened => opened,
    }
}

/// Locks (`F_RDLCK`, `F_WRLCK`) or unlocks (`F_UNLCK`) one byte of `file` for this open
/// of it, waiting or not. False when `wait` is off and another open holds it.
fn lock_byte(
    file: &std::fs::File,
    byte: i64,
    kind: libc::c_int,
    wait: bool,
) -> std::io::Result<bool> {
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = byte;
    lock.l_len = 1;
    let command = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        if unsafe { libc::fcntl(file.as_raw_fd(), command, &lock) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Joins the calls running now in the store under `state_dir`: until [`Joining::finish`],
/// no other call joins or leaves.
pub fn join(state_dir: &Path) -> Result<Joining, String> {
    let dir = state_dir.join("protect");
    let locked = (|| {
        let file = open_record(&dir)?;
        lock_byte(&file, STEP, libc::F_WRLCK, true)?;
        let alone = lock_byte(&file, RUNNING, libc::F_WRLCK, false)?;
        // Atomic for these locks: from exclusive (alone) to shared, or shared at once (no
        // other open holds the byte exclusively without holding STEP, which this one does).
        lock_byte(&file, RUNNING, libc::F_RDLCK, true)?;
        let len = file.metadata()?.len();
        let mut stored = Vec::with_capacity(usize::try_from(len).unwrap_or(0).saturating_add(1));
        std::io::Read::read_to_end(&mut &file, &mut stored)?;
        Ok::<_, std::io::Error>((file, alone, stored))
    })();
    let (file, alone, stored) = locked.map_err(|e| store_error(&dir, "use the record", e))?;
    let unreadable = |what: &str| {
        format!(
            "{} is not a record chitti wrote ({what}). It holds what protected paths held \
             before the calls running now; if no chitti call is running, remove it",
            dir.join("record").display()
        )
    };
    let records = match stored.split_first() {
        None | Some((&CLEARED, _)) => BTreeMap::new(),
        Some((&HOLDS_RECORDS, body)) => {
            decode(body).ok_or_else(|| unreadable("its records do not parse"))?
        }
        Some(_) => return Err(unreadable("an unknown first byte")),
    };
    Ok(Joining {
        dir,
        file,
        stored,
        records,
        alone,
        changed: false,
    })
}

impl Joining {
    /// Whether the file held records when this call joined (rather than nothing).
    fn held_records(&self) -> bool {
        self.stored.first() == Some(&HOLDS_RECORDS)
    }

    /// What `path` held before the calls running now, if one of them recorded it.
    pub fn recorded(&self, path: &Path) -> Option<&Before> {
        self.records.get(path)
    }

    /// True when the records found were left by a call that ended without its repairs,
    /// rather than kept by calls still running.
    pub fn left_over(&self) -> bool {
        self.alone && self.held_records()
    }

    /// Adds this call's record of a path no running call had recorded.
    pub fn record(&mut self, path: &Path, before: Before) {
        self.records.insert(path.to_path_buf(), before);
        self.changed = true;
    }

    /// Saves what this call added and lets other calls join and leave.
    pub fn finish(self) -> Result<Member, String> {
        if self.changed {
            let mut whole = Vec::with_capacity(self.stored.len().max(1));
            whole.push(HOLDS_RECORDS);
            encode(&self.records, &mut whole);
            let saved = if !self.held_records() && self.stored.get(1..) == Some(&whole[1..]) {
                // The last call left this very record: marking it is enough.
                self.file.write_all_at(&[HOLDS_RECORDS], 0)
            } else {
                self.file
                    .write_all_at(&whole, 0)
                    .and_then(|()| self.file.set_len(whole.len() as u64))
            };
            saved.map_err(|e| store_error(&self.dir, "save the record", e))?;
        }
        lock_byte(&self.file, STEP, libc::F_UNLCK, false)
            .map_err(|e| store_error(&self.dir, "unlock the record", e))?;
        Ok(Member {
            dir: self.dir,
            file: self.file,
        })
    }
}

impl Member {
    /// The descriptor whose lock says this call is running: a forked supervisor that does
    /// the repairs must keep it.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Runs the repairs with the store locked, then leaves; the last call to leave clears
    /// the records. A store that cannot be locked does not stop the repairs.
    pub fn leave<R>(self, repairs: impl FnOnce() -> R) -> (R, Option<String>) {
        let file = &self.file;
        let step = lock_byte(file, STEP, libc::F_WRLCK, true);
        let done = repairs();
        let left = step.and_then(|_| {
            if lock_byte(file, RUNNING, libc::F_WRLCK, false)? {
                file.write_all_at(&[CLEARED], 0)?;
            }
            Ok(())
        });
        // Unlocked explicitly: a copy of the descriptor may live on in chitti.
        let _ = lock_byte(file, RUNNING, libc::F_UNLCK, false);
        let _ = lock_byte(file, STEP, libc::F_UNLCK, false);
        let trouble = left
            .err()
            .map(|e| store_error(&self.dir, "leave the record", e));
        (done, trouble)
    }
}

/// Little-endian lengths and numbers; every path and file as its bytes.
fn encode(records: &BTreeMap<PathBuf, Before>, out: &mut Vec<u8>) {
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(records.len() as u64).to_le_bytes());
    for (path, before) in records {
        bytes(out, path.as_os_str().as_bytes());
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

fn decode(input: &[u8]) -> Option<BTreeMap<PathBuf, Before>> {
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
    if r.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let mut records = BTreeMap::new();
    for _ in 0..r.u64()? {
        let path = r.path()?;
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
        records.insert(path, before);
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
        let mut first = join(state.path()).unwrap();
        assert!(first.recorded(config).is_none());
        assert!(!first.left_over());
        first.record(config, file("clean"));
        let first = first.finish().unwrap();

        let second = join(state.path()).unwrap();
        assert_eq!(second.recorded(config), Some(&file("clean")));
        assert!(!second.left_over(), "the first call is still running");
        let second = second.finish().unwrap();

        // The first leaves; the record stays for the second, which is still running.
        let ((), trouble) = first.leave(|| ());
        assert!(trouble.is_none());
        assert!(stored_records(state.path()));
        let third = join(state.path()).unwrap();
        assert_eq!(third.recorded(config), Some(&file("clean")));
        let third = third.finish().unwrap();
        let ((), _) = second.leave(|| ());
        let ((), _) = third.leave(|| ());
        assert!(
            !stored_records(state.path()),
            "the last call to leave clears the record"
        );
        let mut fresh = join(state.path()).unwrap();
        assert!(fresh.recorded(config).is_none());
        assert!(!fresh.left_over());
        // Alone, with the same record as the last call's: only the state byte is written.
        fresh.record(config, file("clean"));
        let fresh = fresh.finish().unwrap();
        assert!(stored_records(state.path()));
        let again = join(state.path()).unwrap();
        assert_eq!(again.recorded(config), Some(&file("clean")));
        drop(again);
        let ((), _) = fresh.leave(|| ());
        let mut changed = join(state.path()).unwrap();
        changed.record(config, file("edited since"));
        let changed = changed.finish().unwrap();
        let check = join(state.path()).unwrap();
        assert_eq!(check.recorded(config), Some(&file("edited since")));
        drop(check);
        drop(changed);
    }

    #[test]
    fn a_record_left_by_a_call_that_never_left_is_adopted_and_said_to_be() {
        let state = tempfile::tempdir().unwrap();
        let config = Path::new("/repo/.git/config");
        let mut crashed = join(state.path()).unwrap();
        crashed.record(config, file("clean"));
        let crashed = crashed.finish().unwrap();
        // Its supervisor was killed: the lock goes with the descriptor, the record stays.
        drop(crashed);

        let next = join(state.path()).unwrap();
        assert!(next.left_over());
        assert_eq!(next.recorded(config), Some(&file("clean")));
        let next = next.finish().unwrap();
        let ((), _) = next.leave(|| ());
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
        let mut first = join(state.path()).unwrap();
        for (n, kind) in kinds.iter().enumerate() {
            first.record(&odd.join(n.to_string()), kind.clone());
        }
        let _running = first.finish().unwrap();
        let second = join(state.path()).unwrap();
        for (n, kind) in kinds.iter().enumerate() {
            assert_eq!(second.recorded(&odd.join(n.to_string())), Some(kind));
        }
    }

    #[test]
    fn a_record_chitti_did_not_write_is_refused_with_what_to_do() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("protect")).unwrap();
        let record = state.path().join("protect/record");
        std::fs::write(&record, b"A{not a record").unwrap();
        let err = join(state.path()).err().unwrap();
        assert!(
            err.contains("protect/record is not a record chitti wrote"),
            "{err}"
        );
        assert!(
            err.contains("if no chitti call is running, remove it"),
            "{err}"
        );
        // Cut short.
        let mut first = join(&state.path().join("other")).unwrap();
        first.record(Path::new("/repo/.git/config"), file("clean"));
        let _running = first.finish().unwrap();
        let whole = std::fs::read(state.path().join("other/protect/record")).unwrap();
        std::fs::write(&record, &whole[..whole.len() - 1]).unwrap();
        let err = join(state.path()).err().unwrap();
        assert!(err.contains("its records do not parse"), "{err}");
    }

    #[test]
    fn a_state_directory_that_cannot_be_made_refuses_with_what_to_do() {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("file"), "").unwrap();
        let err = join(&state.path().join("file/chitti")).err().unwrap();
        assert!(err.contains("cannot use the record in"), "{err}");
        assert!(err.contains("set XDG_STATE_HOME or HOME"), "{err}");
    }
}
