//! `chitti run`, `chitti chat` and `chitti mcp` are served by a second binary,
//! `chitti-agent` (src/bin/chitti-agent.rs), which `chitti` looks for beside its own
//! executable and execs with the same arguments. `cargo build` builds both and
//! `cargo install` installs both.
//!
//! Why two: every sandboxed call starts the `chitti` binary, and the agent's code (HTTPS and
//! TLS, the model APIs, the MCP server) was two thirds of it. Linked in, it cost every call
//! its relocations (40 more pages written at start), page tables and a larger fork, 0.15 to
//! 0.25 ms per landlock or bwrap call (docs/performance.md), for code no call runs. It
//! also keeps network and TLS code out of the binary that runs the commands.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The agent binary's file name, beside chitti's own.
pub const FILE_NAME: &str = "chitti-agent";

/// Exit status when `chitti-agent` is not there, as a shell reports a missing program.
const NOT_FOUND: i32 = 127;
/// Exit status when it is there but could not be started.
const NOT_STARTED: i32 = 126;

/// Where `chitti-agent` should be: beside this executable (symbolic links resolved, so
/// beside the real file, not beside a link to it on PATH).
pub fn path() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot tell where chitti's own executable is ({e})"))?;
    Ok(exe.with_file_name(FILE_NAME))
}

/// Replaces this process with `chitti-agent`, given this process's own arguments (its
/// `argv[0]` included, so that usage texts still say `chitti`). Returns only if that
/// failed, with the exit status to use; the reason is on stderr.
pub fn exec(subcommand: &str) -> i32 {
    let path = match path() {
        Ok(path) => path,
        Err(why) => {
            super::report_error(&format!("chitti {subcommand} cannot start: {why}"));
            return NOT_FOUND;
        }
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("chitti"));
    let error = std::process::Command::new(&path)
        .arg0(arg0)
        .args(args)
        .exec();
    let (status, hint) = if error.kind() == ErrorKind::NotFound {
        (
            NOT_FOUND,
            "it is built and installed with chitti: `cargo build --release` builds both \
             (`cargo run` builds only chitti), `cargo install --path .` installs both",
        )
    } else {
        (NOT_STARTED, "check that it is an executable file")
    };
    super::report_error(&format!(
        "chitti {subcommand} is served by {FILE_NAME}, which could not be started ({}: \
         {error}); {hint}",
        path.display()
    ));
    status
}
