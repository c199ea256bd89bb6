//! The JSONL event log: one JSON object per line, appended and flushed as each step
//! happens, so that a session killed half-way still leaves its trail.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

pub struct EventLog {
    path: PathBuf,
    file: Mutex<File>,
    /// Set after the first failed write, so that a full disk is reported once.
    failed: std::sync::atomic::AtomicBool,
}

impl EventLog {
    /// Opens (appends to) `path`, creating it private to the user; its directory must
    /// exist. The path may lie in a workspace a sandboxed command could write, so the log
    /// is only ever a regular file with that one name: a symbolic link or a hard link
    /// planted there could otherwise steer chitti's own (unsandboxed) writes, and its
    /// change of mode, to a file elsewhere.
    pub fn open(path: &Path) -> Result<EventLog, String> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
        let shown = path.display();
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            // O_NONBLOCK: a FIFO without a reader fails at once instead of hanging.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => format!(
                    "the event log {shown} is a symbolic link; chitti does not write its log \
                     through links (one in a workspace may have been planted by a sandboxed \
                     command): name the file itself"
                ),
                Some(libc::ENXIO) => format!("the event log {shown} is not a regular file"),
                _ => format!("cannot open the event log {shown}: {e}"),
            })?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot inspect the event log {shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("the event log {shown} is not a regular file"));
        }
        if meta.nlink() > 1 {
            return Err(format!(
                "the event log {shown} has other names (hard links); chitti does not write \
                 its log to a file that may be another one elsewhere: name a new file"
            ));
        }
        // The log holds the conversation: private even when the file already existed.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot make the event log {shown} private: {e}"))?;
        Ok(EventLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            failed: Default::default(),
        })
    }

    /// Like [`EventLog::open`], creating the directories of chitti's own default path.
    pub fn open_creating_dirs(path: &Path) -> Result<EventLog, String> {
        if let Some(parent) = path.parent().filter(|p| !p.is_dir()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                format!(
                    "cannot create the event log directory {}: {e}",
                    parent.display()
                )
            })?;
        }
        EventLog::open(path)
    }

    /// A new log under `state_dir/events/`, named after the time and the process.
    pub fn default_path(state_dir: &Path) -> PathBuf {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        state_dir
            .join("events")
            .join(format!("{}-{}.jsonl", utc_stamp(secs), std::process::id()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `{"ts_ms", "event": kind, …fields}`.
    pub fn log(&self, kind: &str, fields: Value) {
        let ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut record = json!({"ts_ms": ts_ms, "event": kind});
        if let (Some(record), Value::Object(fields)) = (record.as_object_mut(), fields) {
            record.extend(fields);
        }
        let mut line = ascii_safe(&record.to_string());
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(line.as_bytes()) {
            if !self.failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
                eprintln!(
                    "chitti: warning: cannot write the event log {}: {e}",
                    self.path.display()
                );
            }
        }
    }
}

/// A JSON line with the characters serde_json leaves as they are but that readers and
/// terminals may take for line breaks or controls (C1 controls such as NEL and CSI, the
/// line and paragraph separators, bidi and other format characters) written as `\u`
/// escapes: the same JSON, and a line that stays one line wherever it is read.
fn ascii_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        let risky = ('\u{80}'..='\u{9f}').contains(&c)
            || matches!(c, '\u{2028}' | '\u{2029}')
            || crate::agent::preview::hides(c);
        if risky && c > '\u{7f}' {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `20261123-135700` for a Unix time, in UTC.
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model's text in the log stays on its line wherever it is read: the characters
    /// some readers take for line breaks (NEL, the line separator) or controls are
    /// escaped, and the JSON reads back the same (a review found them written raw).
    #[test]
    fn risky_characters_are_escaped_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let log = EventLog::open(&path).unwrap();
        let text = "a\u{85}b\u{2028}c\u{202e}d\u{9b}e\u{1F600}é";
        log.log("model_text", json!({ "text": text }));
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            !written
                .chars()
                .any(|c| matches!(c, '\u{85}' | '\u{2028}' | '\u{202e}' | '\u{9b}')),
            "{written:?}"
        );
        assert_eq!(written.lines().count(), 1);
        let back: Value = serde_json::from_str(written.trim_end()).unwrap();
        assert_eq!(back["text"], text);
    }

    #[test]
    fn stamps_are_utc_dates() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(1_795_442_220), "20261123-135700");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
    }

    #[test]
    fn events_are_appended_as_json_lines_private_to_the_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/log.jsonl");
        let log = EventLog::open_creating_dirs(&path).unwrap();
        log.log("request", json!({"step": 1}));
        log.log("final", json!({"answer": "a\nb"}));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "request");
        assert_eq!(lines[0]["step"], 1);
        assert_eq!(lines[1]["answer"], "a\nb");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);
    }

    #[test]
    fn an_existing_log_is_made_private_and_a_named_one_needs_its_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        EventLog::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0);
        assert!(EventLog::open(&dir.path().join("missing/log.jsonl")).is_err());
        assert!(!dir.path().join("missing").exists());
    }

    /// A link planted where the log is to go (a sandboxed command may write the
    /// workspace) must not lead chitti's writes, or its chmod, to another file.
    #[test]
    fn a_log_path_that_is_a_link_or_not_a_file_is_refused_and_nothing_is_touched() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.path().join("events.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = EventLog::open(&link).err().expect("a symlink was followed");
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!e.contains("  "), "a message with a run of spaces: {e}");
        let hard = dir.path().join("hard.jsonl");
        std::fs::hard_link(&victim, &hard).unwrap();
        let e = EventLog::open(&hard)
            .err()
            .expect("a hard link was written");
        assert!(e.contains("hard links"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "the other file's mode was changed");

        let fifo = dir.path().join("fifo.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = EventLog::open(&fifo)
            .err()
            .expect("a FIFO was taken as the log");
        assert!(e.contains("not a regular file"), "{e}");
        let e = EventLog::open(dir.path())
            .err()
            .expect("a directory was taken");
        assert!(e.contains(&dir.path().display().to_string()), "{e}");
    }

    #[test]
    fn an_unopenable_log_is_an_error_naming_it() {
        let e = EventLog::open(Path::new("/proc/nope/log.jsonl"))
            .err()
            .unwrap();
        assert!(e.contains("/proc/nope"), "{e}");
    }
}
