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
//! Where: `protect/` in chitti's state directory, which no sandbox can read or write (it is
//! a credential location, and a writable root overlapping one is refused).
//! - `lock`: held exclusively (`flock`) for the short steps of joining and leaving, so
//!   that these never interleave.
//! - `active`: every call holds a shared `flock` on it from joining until its repairs are
//!   done; whoever can lock it exclusively knows that no call is running.
//! - `before`: the records, replaced whole. The last call to leave removes it.
//!
//! A call that finds `before` while no call is running knows that a call ended without its
//! repairs (its supervisor was killed). It adopts those records too, so that its own repairs
//! undo what that call's command left behind.
//!
//! Calls share the record when they share the state directory: the same user, with the
//! same `HOME` and `XDG_STATE_HOME`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A record larger than this is not read: it would have come from something other than
/// chitti (each call's own part is capped at 16 MiB).
const MAX_RECORD_BYTES: u64 = 256 * 1024 * 1024;

/// What one protected path held before the call: what is put back after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Before {
    /// A directory (or file) that must stay where it is, as it is.
    Pinned {
        dev: u64,
        ino: u64,
        mode: u32,
    },
    File {
        #[serde(with = "base64_bytes")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeItem {
    #[serde(with = "base64_path")]
    pub rel: PathBuf,
    /// The contents of a regular file; `None` for a directory.
    #[serde(with = "base64_optional")]
    pub contents: Option<Vec<u8>>,
    pub mode: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Records {
    paths: Vec<Record>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    #[serde(with = "base64_path")]
    path: PathBuf,
    before: Before,
}

/// A call joining: the store is locked until [`Joining::finish`].
pub struct Joining {
    dir: PathBuf,
    lock: OwnedFd,
    active: OwnedFd,
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
    active: OwnedFd,
}

fn store_error(dir: &Path, what: &str, e: impl std::fmt::Display) -> String {
    format!(
        "cannot {what} in {}, where calls running at once share what their protected \
         paths held before them: {e}. chitti needs its state directory; set \
         XDG_STATE_HOME or HOME to a directory you can write",
        dir.display()
    )
}

fn open_lock_file(path: &Path) -> std::io::Result<OwnedFd> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)?;
    Ok(file.into())
}

/// `flock`, retried when a signal interrupts it. False when `LOCK_NB` found it taken.
fn flock(fd: RawFd, operation: libc::c_int) -> std::io::Result<bool> {
    loop {
        if unsafe { libc::flock(fd, operation) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if operation & libc::LOCK_NB != 0 => return Ok(false),
            _ => return Err(e),
        }
    }
}

fn locked(dir: &Path) -> std::io::Result<OwnedFd> {
    let lock = open_lock_file(&dir.join("lock"))?;
    flock(lock.as_raw_fd(), libc::LOCK_EX)?;
    Ok(lock)
}

/// Joins the calls running now in the store under `state_dir`: until [`Joining::finish`],
/// no other call joins or leaves.
pub fn join(state_dir: &Path) -> Result<Joining, String> {
    let dir = state_dir.join("protect");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| store_error(&dir, "create a directory", e))?;
    let lock = locked(&dir).map_err(|e| store_error(&dir, "take the lock", e))?;
    let active = open_lock_file(&dir.join("active"))
        .map_err(|e| store_error(&dir, "open the list of running calls", e))?;
    let alone = flock(active.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)
        .map_err(|e| store_error(&dir, "lock the list of running calls", e))?;
    // Converting is not atomic (the exclusive lock goes first), but nobody looks at
    // `active` without `lock`, which this call holds.
    flock(active.as_raw_fd(), libc::LOCK_SH)
        .map_err(|e| store_error(&dir, "lock the list of running calls", e))?;
    let records = read_records(&dir.join("before"))?;
    Ok(Joining {
        dir,
        lock,
        active,
        records,
        alone,
        changed: false,
    })
}

fn read_records(path: &Path) -> Result<BTreeMap<PathBuf, Before>, String> {
    use std::io::Read;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut text = Vec::new();
    file.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let parsed: Result<Records, String> = if text.len() as u64 > MAX_RECORD_BYTES {
        Err("it is larger than 256 MiB".to_string())
    } else {
        serde_json::from_slice(&text).map_err(|e| e.to_string())
    };
    let records = parsed.map_err(|e| {
        format!(
            "{} is not a record chitti wrote ({e}). It holds what protected paths held \
             before the calls running now; if no chitti call is running, remove it",
            path.display()
        )
    })?;
    Ok(records
        .paths
        .into_iter()
        .map(|r| (r.path, r.before))
        .collect())
}

impl Joining {
    /// What `path` held before the calls running now, if one of them recorded it.
    pub fn recorded(&self, path: &Path) -> Option<&Before> {
        self.records.get(path)
    }

    /// True when the records found were left by a call that ended without its repairs,
    /// rather than kept by calls still running.
    pub fn left_over(&self) -> bool {
        self.alone && !self.records.is_empty()
    }

    /// Adds this call's record of a path no running call had recorded.
    pub fn record(&mut self, path: &Path, before: Before) {
        self.records.insert(path.to_path_buf(), before);
        self.changed = true;
    }

    /// Saves what this call added and lets other calls join and leave.
    pub fn finish(self) -> Result<Member, String> {
        if self.changed {
            let records = Records {
                paths: self
                    .records
                    .into_iter()
                    .map(|(path, before)| Record { path, before })
                    .collect(),
            };
            write_records(&self.dir, &records)?;
        }
        drop(self.lock);
        Ok(Member {
            dir: self.dir,
            active: self.active,
        })
    }
}

fn write_records(dir: &Path, records: &Records) -> Result<(), String> {
    let text = serde_json::to_vec(records).map_err(|e| store_error(dir, "save the record", e))?;
    let new = dir.join("before.new");
    let saved = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&new)?;
        file.write_all(&text)?;
        std::fs::rename(&new, dir.join("before"))
    })();
    saved.map_err(|e| store_error(dir, "save the record", e))
}

impl Member {
    /// The descriptor whose lock says this call is running: a forked supervisor that does
    /// the repairs must keep it.
    pub fn fd(&self) -> RawFd {
        self.active.as_raw_fd()
    }

    /// Runs the repairs with the store locked, then leaves; the last call to leave removes
    /// the records. A store that cannot be locked does not stop the repairs.
    pub fn leave<R>(self, repairs: impl FnOnce() -> R) -> (R, Option<String>) {
        let lock = locked(&self.dir);
        let done = repairs();
        let trouble = match &lock {
            Ok(_) => None,
            Err(e) => Some(store_error(&self.dir, "take the lock", e)),
        };
        // Unlocked explicitly: a copy of the descriptor may live on in chitti.
        let _ = flock(self.active.as_raw_fd(), libc::LOCK_UN);
        drop(self.active);
        if lock.is_ok() {
            let last = open_lock_file(&self.dir.join("active"))
                .and_then(|probe| flock(probe.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB));
            if matches!(last, Ok(true)) {
                let _ = std::fs::remove_file(self.dir.join("before"));
            }
        }
        (done, trouble)
    }
}

mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <&str>::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

mod base64_optional {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Bytes(#[serde(with = "super::base64_bytes")] Vec<u8>);

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        bytes.as_ref().map(|b| Bytes(b.clone())).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<Bytes>::deserialize(d)?.map(|b| b.0))
    }
}

/// Paths as their bytes: a name need not be UTF-8.
mod base64_path {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
        super::base64_bytes::serialize(path.as_os_str().as_bytes(), s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(PathBuf::from(OsString::from_vec(
            super::base64_bytes::deserialize(d)?,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(state.path().join("protect/before").exists());
        let third = join(state.path()).unwrap();
        assert_eq!(third.recorded(config), Some(&file("clean")));
        let third = third.finish().unwrap();
        let ((), _) = second.leave(|| ());
        let ((), _) = third.leave(|| ());
        assert!(
            !state.path().join("protect/before").exists(),
            "the last call to leave removes the record"
        );
        let fresh = join(state.path()).unwrap();
        assert!(fresh.recorded(config).is_none());
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
        assert!(!state.path().join("protect/before").exists());
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
        std::fs::write(state.path().join("protect/before"), "{not json").unwrap();
        let err = join(state.path()).err().unwrap();
        assert!(
            err.contains("protect/before is not a record chitti wrote"),
            "{err}"
        );
        assert!(
            err.contains("if no chitti call is running, remove it"),
            "{err}"
        );
    }

    #[test]
    fn a_state_directory_that_cannot_be_made_refuses_with_what_to_do() {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("file"), "").unwrap();
        let err = join(&state.path().join("file/chitti")).err().unwrap();
        assert!(err.contains("cannot create a directory in"), "{err}");
        assert!(err.contains("set XDG_STATE_HOME or HOME"), "{err}");
    }
}
