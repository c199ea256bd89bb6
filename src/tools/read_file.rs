//! `read_file`: a text file's lines, numbered, so that a model can cite and edit them.
//! Output is bounded however large the file or its lines are.

use std::io::{self, BufRead, BufReader};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{confine, looks_binary, FileTool, ToolResult, ToolSpec};
use crate::policy::Policy;

/// Lines shown when no `end_line` says otherwise.
pub const DEFAULT_MAX_LINES: u64 = 2000;
/// Bytes of numbered output at most, whatever the range.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// A longer line is cut (minified files would otherwise fill the output with one line).
pub const MAX_LINE_BYTES: usize = 4000;
/// Bytes read at most per call, to reach `start_line` and show the range: a file can be
/// far larger than it looks (a sparse file of zeros, a log of one endless line), and file
/// tools run one at a time.
pub const MAX_SCAN_BYTES: u64 = 256 * 1024 * 1024;

pub struct ReadFile;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file: relative to the workspace, or absolute inside it.
    pub path: String,
    /// First line to show (1-based). Default: 1.
    #[schemars(range(min = 1))]
    pub start_line: Option<u64>,
    /// Last line to show, inclusive. Default: start_line + 1999.
    #[schemars(range(min = 1))]
    pub end_line: Option<u64>,
}

impl ToolSpec for ReadFile {
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str = "Read a text file in the workspace. Lines come numbered \
        (`     n<TAB>line`); at most 2000 lines or 256 KiB per call, so pass start_line and \
        end_line to read a large file in parts. Binary files are refused.";
    type Args = Args;

    fn needs_sandbox() -> bool {
        false
    }

    fn is_read_only() -> bool {
        true
    }
}

impl FileTool for ReadFile {
    fn run(policy: &Policy, args: Args) -> ToolResult {
        let start = args.start_line.unwrap_or(1).max(1);
        let last = match args.end_line {
            Some(end) if end < start => {
                return ToolResult::error(format!("end_line {end} is before start_line {start}"))
            }
            Some(end) => end,
            None => start.saturating_add(DEFAULT_MAX_LINES - 1),
        };
        let opened = match confine::open_read(policy, &args.path) {
            Ok(opened) => opened,
            Err(e) => return e.into(),
        };
        let shown = confine::display(policy, &opened.path);
        match read_window(opened.file, start, last, MAX_SCAN_BYTES) {
            Ok(Some(window)) => render(&shown, start, last, args.end_line.is_none(), window),
            Ok(None) => ToolResult::error(format!(
                "`{shown}` is a binary file; read_file shows text only"
            )),
            Err(e) => ToolResult::error(format!("cannot read `{shown}`: {e}")),
        }
    }
}

/// The lines of a read, and why it stopped where it did.
struct Window {
    text: String,
    /// Lines seen in the file, up to where reading stopped.
    lines_seen: u64,
    last_shown: Option<u64>,
    /// Reading stopped before the end of the file.
    more: bool,
    cut_by_size: bool,
    long_lines_cut: bool,
    /// Reading stopped at the scan limit (MAX_SCAN_BYTES).
    cut_by_scan: bool,
}

/// [`read_lines`] of `file`, reading at most `scan_limit` bytes of it.
fn read_window(
    file: impl io::Read,
    start: u64,
    last: u64,
    scan_limit: u64,
) -> io::Result<Option<Window>> {
    let mut reader = BufReader::with_capacity(64 * 1024, file.take(scan_limit));
    let mut window = read_lines(&mut reader, start, last)?;
    if let Some(w) = &mut window {
        if reader.get_ref().limit() == 0 && w.last_shown != Some(last) {
            w.cut_by_scan = true;
            w.more = true;
        }
    }
    Ok(window)
}

/// Numbered lines `start..=last`, or `None` for a binary file.
fn read_lines(reader: &mut impl BufRead, start: u64, last: u64) -> io::Result<Option<Window>> {
    if looks_binary(reader.fill_buf()?) {
        return Ok(None);
    }
    let mut w = Window {
        text: String::new(),
        lines_seen: 0,
        last_shown: None,
        more: false,
        cut_by_size: false,
        long_lines_cut: false,
        cut_by_scan: false,
    };
    let mut line = Vec::new();
    while let Some(cut) = next_line(reader, &mut line, MAX_LINE_BYTES)? {
        w.lines_seen += 1;
        let n = w.lines_seen;
        if n < start {
            continue;
        }
        let mut rendered = format!("{n:>6}\t{}", String::from_utf8_lossy(&line));
        if cut {
            rendered.push_str(" … [line cut]");
            w.long_lines_cut = true;
        }
        if w.text.len() + rendered.len() + 1 > MAX_OUTPUT_BYTES {
            w.cut_by_size = true;
            w.more = true;
            return Ok(Some(w));
        }
        w.text.push_str(&rendered);
        w.text.push('\n');
        w.last_shown = Some(n);
        if n == last {
            w.more = !reader.fill_buf()?.is_empty();
            break;
        }
    }
    Ok(Some(w))
}

/// Reads one line into `buf` without its line ending, keeping at most `max` bytes of it.
/// `None` at the end of the file, else whether the line was cut.
fn next_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Option<bool>> {
    buf.clear();
    let mut any = false;
    let mut cut = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        any = true;
        let (part, used, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], i + 1, true),
            None => (chunk, chunk.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        cut |= part.len() > room;
        buf.extend_from_slice(&part[..part.len().min(room)]);
        reader.consume(used);
        if done {
            break;
        }
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(any.then_some(cut))
}

/// `default_range`: no end_line was given, so stopping early deserves a note.
fn render(shown: &str, start: u64, last: u64, default_range: bool, w: Window) -> ToolResult {
    let scan_limit = format!(
        "read_file reads at most {} MiB of a file per call; read this part with execute_bash \
         (e.g. `sed -n '{start},{last}p'`)",
        MAX_SCAN_BYTES / (1024 * 1024)
    );
    let Some(last_shown) = w.last_shown else {
        if w.cut_by_scan {
            return ToolResult::error(format!(
                "line {start} of `{shown}` was not reached ({} lines seen): {scan_limit}",
                w.lines_seen
            ));
        }
        if w.lines_seen == 0 && start == 1 {
            return ToolResult::success(
                json!({"path": shown, "start_line": 1, "end_line": 0, "more": false, "lines": ""}),
                format!("`{shown}` is empty"),
            );
        }
        return ToolResult::error(format!(
            "start_line {start} is past the end of `{shown}`, which has {} lines",
            w.lines_seen
        ));
    };
    let mut text = w.text.clone();
    if w.long_lines_cut {
        text.push_str(&format!(
            "[lines longer than {MAX_LINE_BYTES} bytes were cut]\n"
        ));
    }
    if w.cut_by_scan {
        text.push_str(&format!(
            "[showing lines {start}-{last_shown}; stopped there: {scan_limit}]\n"
        ));
    } else if w.cut_by_size || (default_range && w.more) {
        let why = if w.cut_by_size {
            format!("output is limited to {} KiB", MAX_OUTPUT_BYTES / 1024)
        } else {
            format!("at most {DEFAULT_MAX_LINES} lines are shown by default")
        };
        text.push_str(&format!(
            "[showing lines {start}-{last_shown}; the file goes on ({why}): pass start_line={} to read on]\n",
            last_shown + 1
        ));
    }
    ToolResult::success(
        json!({
            "path": shown,
            "start_line": start,
            "end_line": last_shown,
            "more": w.more,
            "truncated": w.cut_by_size || w.long_lines_cut || w.cut_by_scan,
            "lines": w.text,
        }),
        text,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::tools::testing::Fixture;

    fn run(fx: &Fixture, args: Value) -> ToolResult {
        ReadFile::run(&fx.policy, serde_json::from_value(args).unwrap())
    }

    #[test]
    fn numbered_lines_and_ranges() {
        let fx = Fixture::new();
        let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(fx.ws.join("f.txt"), body).unwrap();
        let all = run(&fx, json!({"path": "f.txt"}));
        assert!(all.ok, "{}", all.text);
        assert!(
            all.text.starts_with("     1\tline 1\n     2\tline 2\n"),
            "{}",
            all.text
        );
        assert!(all.text.ends_with("    10\tline 10\n"), "{}", all.text);
        assert_eq!(all.content["more"], false);
        let part = run(
            &fx,
            json!({"path": "f.txt", "start_line": 3, "end_line": 4}),
        );
        assert_eq!(part.text, "     3\tline 3\n     4\tline 4\n");
        assert_eq!(part.content["start_line"], 3);
        assert_eq!(part.content["end_line"], 4);
        assert_eq!(part.content["more"], true);
        let tail = run(
            &fx,
            json!({"path": "f.txt", "start_line": 9, "end_line": 50}),
        );
        assert_eq!(tail.text, "     9\tline 9\n    10\tline 10\n");
        let past = run(&fx, json!({"path": "f.txt", "start_line": 11}));
        assert!(!past.ok);
        assert!(
            past.text.contains("past the end") && past.text.contains("10 lines"),
            "{}",
            past.text
        );
        let backwards = run(
            &fx,
            json!({"path": "f.txt", "start_line": 5, "end_line": 4}),
        );
        assert!(!backwards.ok && backwards.text.contains("before start_line"));
    }

    #[test]
    fn crlf_and_missing_final_newline() {
        let fx = Fixture::new();
        std::fs::write(fx.ws.join("w.txt"), "a\r\nb").unwrap();
        assert_eq!(
            run(&fx, json!({"path": "w.txt"})).text,
            "     1\ta\n     2\tb\n"
        );
        std::fs::write(fx.ws.join("empty"), "").unwrap();
        let empty = run(&fx, json!({"path": "empty"}));
        assert!(empty.ok && empty.text.contains("empty"), "{}", empty.text);
    }

    #[test]
    fn long_files_are_cut_with_a_note() {
        let fx = Fixture::new();
        let body: String = (1..=2500).map(|i| format!("{i}\n")).collect();
        std::fs::write(fx.ws.join("long.txt"), body).unwrap();
        let r = run(&fx, json!({"path": "long.txt"}));
        assert!(r.text.contains("  2000\t2000\n"));
        assert!(!r.text.contains("\t2001\n"));
        assert!(r.text.contains("pass start_line=2001"), "{}", r.text);
        assert_eq!(r.content["more"], true);
        let rest = run(&fx, json!({"path": "long.txt", "start_line": 2001}));
        assert!(rest.text.ends_with("  2500\t2500\n"), "{}", rest.text);
        assert!(!rest.text.contains("start_line="));

        let huge_line = "x".repeat(MAX_LINE_BYTES * 3);
        let body: String = (0..100).map(|_| format!("{huge_line}\n")).collect();
        std::fs::write(fx.ws.join("wide.txt"), body).unwrap();
        let r = run(&fx, json!({"path": "wide.txt"}));
        assert!(r.ok);
        assert!(r.text.len() <= MAX_OUTPUT_BYTES + 1024, "{}", r.text.len());
        assert!(
            r.text.contains("[line cut]") && r.text.contains("256 KiB"),
            "{}",
            &r.text[r.text.len() - 300..]
        );
        assert_eq!(r.content["truncated"], true);
    }

    #[test]
    fn binary_files_are_refused() {
        let fx = Fixture::new();
        std::fs::write(fx.ws.join("bin"), b"\x7fELF\x02\x01\x00\x00rest").unwrap();
        let r = run(&fx, json!({"path": "bin"}));
        assert!(!r.ok);
        assert!(r.text.contains("binary"), "{}", r.text);
    }

    #[test]
    fn errors_are_results() {
        let fx = Fixture::new();
        let r = run(&fx, json!({"path": "nope.txt"}));
        assert!(!r.ok && r.text.contains("does not exist"), "{}", r.text);
        assert_eq!(r.content["kind"], "not_found");
        let r = run(&fx, json!({"path": "/etc/passwd"}));
        assert_eq!(r.content["kind"], "outside_workspace");
    }

    #[test]
    fn reading_stops_at_the_scan_limit_with_what_to_do_instead() {
        // Twenty lines, then a "line" of zeros with no end (a sparse file reads like this).
        let mut body: Vec<u8> = (1..=20)
            .flat_map(|i| format!("l{i}\n").into_bytes())
            .collect();
        body.extend(std::iter::repeat_n(b'x', 100_000));
        let far = read_window(&body[..], 30, 40, 10_000).unwrap().unwrap();
        let result = render("big", 30, 40, false, far);
        assert!(!result.ok);
        assert!(result.text.contains("not reached") && result.text.contains("sed -n '30,40p'"));

        let near = read_window(&body[..], 19, 40, 10_000).unwrap().unwrap();
        let result = render("big", 19, 40, false, near);
        assert!(result.ok, "{}", result.text);
        assert!(
            result.text.starts_with("    19\tl19\n    20\tl20\n"),
            "{}",
            result.text
        );
        assert!(result.text.contains("stopped there"), "{}", result.text);
        assert_eq!(result.content["more"], true);

        // A range that ends inside the limit is not marked.
        let whole = read_window(&body[..20 * 4], 1, 5, 10_000).unwrap().unwrap();
        assert!(!whole.cut_by_scan);
        let exact = read_window(&body[..], 1, 5, 16).unwrap().unwrap();
        assert!(
            !exact.cut_by_scan && exact.last_shown == Some(5),
            "{:?}",
            exact.last_shown
        );
    }
}
