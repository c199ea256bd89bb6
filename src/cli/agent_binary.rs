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

/// Which sources this binary was built from (see build.rs): `chitti` hands it to
/// `chitti-agent` in [`EXPECTS`], which refuses to serve when its own differs.
pub const SOURCE_ID: &str = env!("CHITTI_SOURCE_ID");

/// The variable that carries `chitti`'s [`SOURCE_ID`] to `chitti-agent`.
pub const EXPECTS: &str = "CHITTI_AGENT_EXPECTS";

/// In `chitti-agent`, before anything else (one thread yet): whether it was built with the
/// `chitti` that started it, if one did. Takes the variable out of the environment, so
/// that nothing this process starts sees it.
pub fn built_with_its_chitti() -> Result<(), String> {
    let Some(expected) = std::env::var_os(EXPECTS) else {
        return Ok(());
    };
    std::env::remove_var(EXPECTS);
    if expected == SOURCE_ID {
        return Ok(());
    }
    Err(format!(
        "{FILE_NAME} was built from other sources than the chitti that started it (source \
         {} there, {SOURCE_ID} here): after a partial upgrade a session would run other \
         sandbox code than `chitti sandbox exec`. Install both from one build: `cargo \
         install --path .`, or copy both binaries of one `cargo build --release`",
        expected.to_string_lossy()
    ))
}

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
#[inline(never)] // see cli::run
pub fn exec(subcommand: &str) -> i32 {
    let path = match path() {
        Ok(path) => path,
        Err(why) => {
            super::report_error(&format!("chitti {subcommand} cannot start: {why}"));
            return NOT_FOUND;
        }
    };
    let mut args = crate::process_start::args_os().into_iter();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("chitti"));
    let error = std::process::Command::new(&path)
        .arg0(arg0)
        .args(args)
        .env(EXPECTS, SOURCE_ID)
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
