//! `edit_file`: replaces one exact, unique occurrence of a string. Uniqueness is what
//! makes the edit safe to apply without line numbers that may have moved.

use std::io::Read;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::confine::{self, WriteMode};
use super::{looks_binary, FileTool, ToolResult, ToolSpec};
use crate::policy::Policy;

/// Larger files are refused: an edit reads and rewrites the whole file.
pub const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;
/// Lines of unchanged context around the change in the diff.
const CONTEXT_LINES: usize = 2;
/// Removed or added lines shown at most in the diff.
const MAX_DIFF_LINES: usize = 200;

pub struct EditFile;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file: relative to the workspace, or absolute inside it.
    pub path: String,
    /// The exact text to replace, including whitespace and indentation. It must occur
    /// exactly once in the file: add surrounding lines to make it unique.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
}

impl ToolSpec for EditFile {
    const NAME: &'static str = "edit_file";
    const DESCRIPTION: &'static str = "Replace one exact occurrence of old_string with \
        new_string in a workspace file. old_string must match the file exactly (whitespace \
        included) and occur exactly once. Returns a diff of the change.";
    type Args = Args;

    fn needs_sandbox() -> bool {
        false
    }

    fn is_read_only() -> bool {
        false
    }
}

impl FileTool for EditFile {
    fn run(policy: &Policy, args: Args) -> ToolResult {
        if args.old_string.is_empty() {
            return ToolResult::error(
                "old_string is empty; to create a file or replace all of it, use write_file",
            );
        }
        if args.old_string == args.new_string {
            return ToolResult::error("old_string and new_string are identical: nothing to change");
        }
        // One descriptor for the read and the write: the file edited is the file read.
        let mut opened = match confine::open_write(policy, &args.path, WriteMode::Existing) {
            Ok(opened) => opened,
            Err(e) => return e.into(),
        };
        let shown = confine::display(policy, &opened.path);
        let fail = |what: &str, e: std::io::Error| {
            ToolResult::error(format!("cannot {what} `{shown}`: {e}"))
        };
        let size = match opened.file.metadata() {
            Ok(m) => m.len(),
            Err(e) => return fail("inspect", e),
        };
        if size > MAX_EDIT_BYTES {
            return ToolResult::error(format!(
                "`{shown}` is {size} bytes; edit_file edits files up to {} MiB (use execute_bash)",
                MAX_EDIT_BYTES / 1024 / 1024
            ));
        }
        let mut bytes = Vec::with_capacity(size as usize);
        // Bounded: a file that grows while it is read (a command still writing it) stops
        // at the limit instead of filling memory.
        if let Err(e) = (&mut opened.file)
            .take(MAX_EDIT_BYTES + 1)
            .read_to_end(&mut bytes)
        {
            return fail("read", e);
        }
        if bytes.len() as u64 > MAX_EDIT_BYTES {
            return ToolResult::error(format!(
                "`{shown}` grew past {} MiB while it was read; edit_file edits files up to \
                 that size (use execute_bash)",
                MAX_EDIT_BYTES / 1024 / 1024
            ));
        }
        if looks_binary(&bytes) {
            return ToolResult::error(format!(
                "`{shown}` is a binary file; edit_file edits text only"
            ));
        }
        let Ok(original) = String::from_utf8(bytes) else {
            return ToolResult::error(format!(
                "`{shown}` is not valid UTF-8; edit_file edits UTF-8 text only"
            ));
        };
        let at = match unique_match(&original, &args.old_string) {
            Ok(at) => at,
            Err(0) => {
                return ToolResult::error(format!(
                    "old_string not found in `{shown}`; it must match exactly, whitespace \
                     and indentation included (read_file shows the current text)"
                ))
            }
            Err(_) => {
                return ToolResult::error(format!(
                    "old_string occurs more than once; add context (the lines around it) so \
                     that it matches exactly once in `{shown}`"
                ))
            }
        };
        let edited = format!(
            "{}{}{}",
            &original[..at],
            args.new_string,
            &original[at + args.old_string.len()..]
        );
        if let Err(e) = opened.write_whole(edited.as_bytes()) {
            return ToolResult::error(format!("cannot write `{shown}`: {e}"));
        }
        let diff = diff_snippet(&original, at, &args.old_string, &args.new_string);
        ToolResult::success(
            json!({"path": shown, "diff": diff, "bytes_written": edited.len()}),
            format!("edited `{shown}`:\n{diff}"),
        )
    }
}

/// The byte offset of `needle`'s only occurrence, or `Err(0)` (none) or `Err(2)` (more
/// than one; overlapping ones count: in "aaa", "aa" is ambiguous). The search stops at the
/// second occurrence: counting them all is quadratic for a needle like "aaa…" in "aaaa…".
fn unique_match(haystack: &str, needle: &str) -> Result<usize, usize> {
    let first = haystack.find(needle).ok_or(0usize)?;
    // One character on, so that an overlapping second occurrence is found too.
    let step = haystack[first..].chars().next().map_or(1, char::len_utf8);
    match haystack[first + step..].find(needle) {
        None => Ok(first),
        Some(_) => Err(2),
    }
}

/// A unified-style hunk: the whole lines the replacement touched, as removed (`-`) and
/// added (`+`), with a little unchanged context (` `).
fn diff_snippet(original: &str, at: usize, old: &str, new: &str) -> String {
    let end = at + old.len();
    let block_start = original[..at].rfind('\n').map_or(0, |i| i + 1);
    // A replacement that ends with a newline ends its last line there.
    let block_end = if old.ends_with('\n') {
        end
    } else {
        original[end..]
            .find('\n')
            .map_or(original.len(), |i| end + i + 1)
    };
    let removed = lines(&original[block_start..block_end]);
    let added_text = format!(
        "{}{new}{}",
        &original[block_start..at],
        &original[end..block_end]
    );
    let added = lines(&added_text);
    let before: Vec<&str> = lines(&original[..block_start]);
    let before = &before[before.len().saturating_sub(CONTEXT_LINES)..];
    let after: Vec<&str> = lines(&original[block_end..])
        .into_iter()
        .take(CONTEXT_LINES)
        .collect();

    let first = original[..block_start].matches('\n').count() + 1 - before.len();
    let context = before.len() + after.len();
    let mut out = format!(
        "@@ -{first},{} +{first},{} @@\n",
        removed.len() + context,
        added.len() + context
    );
    let mut push = |prefix: char, lines: &[&str]| {
        for line in lines.iter().take(MAX_DIFF_LINES) {
            out.push(prefix);
            out.push_str(line);
            out.push('\n');
        }
        if lines.len() > MAX_DIFF_LINES {
            out.push_str(&format!(
                "{prefix}… {} more lines\n",
                lines.len() - MAX_DIFF_LINES
            ));
        }
    };
    push(' ', before);
    push('-', &removed);
    push('+', &added);
    push(' ', &after);
    out
}

/// Lines without their endings; an empty text has none.
fn lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    text.strip_suffix('\n')
        .unwrap_or(text)
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::Fixture;

    fn edit(fx: &Fixture, old: &str, new: &str) -> ToolResult {
        EditFile::run(
            &fx.policy,
            Args {
                path: "f.rs".into(),
                old_string: old.into(),
                new_string: new.into(),
            },
        )
    }

    fn content(fx: &Fixture) -> String {
        std::fs::read_to_string(fx.ws.join("f.rs")).unwrap()
    }

    const TEXT: &str = "fn a() {\n    one();\n}\n\nfn b() {\n    two();\n    one();\n}\n";

    #[test]
    fn unique_match_is_replaced_with_a_diff() {
        let fx = Fixture::new();
        std::fs::write(fx.ws.join("f.rs"), TEXT).unwrap();
        let r = edit(&fx, "two();", "three();\n    four();");
        assert!(r.ok, "{}", r.text);
        assert_eq!(
            content(&fx),
            "fn a() {\n    one();\n}\n\nfn b() {\n    three();\n    four();\n    one();\n}\n"
        );
        assert_eq!(
            r.content["diff"],
            "@@ -4,5 +4,6 @@\n \n fn b() {\n-    two();\n+    three();\n+    four();\n     one();\n }\n"
        );
        assert!(r.text.contains("-    two();\n+    three();"), "{}", r.text);
    }

    /// The edited text replaces the file as a whole copy renamed over it (see
    /// `write_file`), with the file's permissions.
    #[test]
    fn an_edit_replaces_the_file_by_a_copy_with_its_permissions() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let fx = Fixture::new();
        let path = fx.ws.join("f.rs");
        std::fs::write(&path, TEXT).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        let r = edit(&fx, "two();", "three();");
        assert!(r.ok, "{}", r.text);
        let after = std::fs::metadata(&path).unwrap();
        assert_ne!(after.ino(), inode, "rewritten in place");
        assert_eq!(after.mode() & 0o7777, 0o750);
        assert_eq!(content(&fx), TEXT.replace("two();", "three();"));
    }

    #[test]
    fn not_found_and_multiple_are_errors() {
        let fx = Fixture::new();
        std::fs::write(fx.ws.join("f.rs"), TEXT).unwrap();
        let r = edit(&fx, "zero();", "x");
        assert!(!r.ok);
        assert!(r.text.contains("not found"), "{}", r.text);
        let r = edit(&fx, "one();", "x");
        assert!(!r.ok);
        assert!(
            r.text.contains("occurs more than once; add context"),
            "{}",
            r.text
        );
        assert_eq!(content(&fx), TEXT, "a refused edit changed the file");
        // With context it is unique.
        let r = edit(&fx, "    two();\n    one();\n", "    two();\n");
        assert!(r.ok, "{}", r.text);
        assert_eq!(
            r.content["diff"],
            "@@ -4,5 +4,4 @@\n \n fn b() {\n-    two();\n-    one();\n+    two();\n }\n"
        );
        assert!(!edit(&fx, "", "x").ok);
        assert!(!edit(&fx, "fn", "fn").ok);
    }

    #[test]
    fn overlapping_occurrences_are_ambiguous() {
        assert_eq!(unique_match("aaa", "aa"), Err(2));
        assert_eq!(unique_match("xaay", "aa"), Ok(1));
        assert_eq!(unique_match("ééé", "éé"), Err(2));
        assert_eq!(unique_match("abc", "d"), Err(0));
        assert_eq!(unique_match("aXbXc", "X"), Err(2));
        // Two searches, not one per occurrence: 1 MiB of "a" against a 256 KiB needle of
        // "a" (counting every occurrence compared some 2^38 bytes).
        let hay = "a".repeat(1 << 20);
        assert_eq!(unique_match(&hay, &hay[..1 << 18]), Err(2));
    }

    #[test]
    fn refused_files() {
        let fx = Fixture::new();
        std::fs::write(fx.ws.join("f.rs"), b"bin\0ary").unwrap();
        let r = edit(&fx, "bin", "x");
        assert!(!r.ok && r.text.contains("binary"), "{}", r.text);
        std::fs::write(fx.ws.join(".git/config"), "[core]\n").unwrap();
        let r = EditFile::run(
            &fx.policy,
            Args {
                path: ".git/config".into(),
                old_string: "[core]".into(),
                new_string: "[core]\n\tfsmonitor = evil".into(),
            },
        );
        assert_eq!(r.content["kind"], "protected_path", "{}", r.text);
        let r = EditFile::run(
            &fx.policy,
            Args {
                path: "missing.rs".into(),
                old_string: "a".into(),
                new_string: "b".into(),
            },
        );
        assert_eq!(r.content["kind"], "not_found", "{}", r.text);
    }
}
