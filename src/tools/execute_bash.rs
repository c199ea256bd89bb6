//! `execute_bash`: one bash command in the OS sandbox, its output captured and bounded.
//!
//! The command's own failure (a non-zero exit, a timeout) is a result the model should
//! see and act on; only a call that could not run at all (a bad working directory, a
//! sandbox that cannot be set up) is a tool error.

use std::ffi::OsString;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{confine, ToolResult, ToolSpec, Toolbox};
use crate::exec::{self, Captured, Input, Outcome, Output};
use crate::sandbox::{self, Backend, SandboxError};

/// The longest a single call may run, whatever the profile or the model asks.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

pub struct ExecuteBash;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The command, run as `bash -c COMMAND` in the sandbox: it can write only inside
    /// the workspace (and its own TMPDIR), cannot read credentials, and has no network
    /// unless the profile allows it.
    pub command: String,
    /// Where to run it: relative to the workspace, or absolute inside it. Default: the
    /// workspace root.
    pub working_directory: Option<String>,
    /// Wall-clock limit in seconds; when it passes, the command and everything it
    /// started are killed. Default: the profile's limit. At most 600.
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: Option<u64>,
    /// Set to false to run outside the sandbox, with full access to the user's files and
    /// network. The user must approve each such call.
    pub sandbox: Option<bool>,
}

impl ToolSpec for ExecuteBash {
    const NAME: &'static str = "execute_bash";
    const DESCRIPTION: &'static str = "Run a bash command in the workspace, inside a sandbox. \
        Returns the exit code and the output; long output keeps its beginning and end. Use \
        it to build, test, search (rg, grep, find) and run git.";
    type Args = Args;

    fn needs_sandbox() -> bool {
        true
    }

    fn is_read_only() -> bool {
        false
    }
}

/// Runs the command; `cancel` resolving kills it (and its whole process tree).
pub async fn run(toolbox: &Toolbox, args: Args, cancel: impl Future<Output = ()>) -> ToolResult {
    let policy = &toolbox.policy;
    if args.command.trim().is_empty() {
        return ToolResult::error("`command` is empty");
    }
    let backend = match args.sandbox {
        Some(false) if toolbox.allow_sandbox_false => Backend::None,
        Some(false) => {
            return ToolResult::error(
                "running outside the sandbox (`sandbox: false`) is not allowed in this \
                 session; run the command in the sandbox (leave `sandbox` out)",
            )
        }
        _ => toolbox.backend,
    };
    let cwd = match &args.working_directory {
        None => policy.workspace.clone(),
        Some(dir) => match confine::resolve_dir(policy, dir) {
            Ok(dir) => dir,
            Err(e) => {
                let mut result = ToolResult::from(e);
                result.text = format!("working_directory: {}", result.text);
                result.content["error"] = json!(result.text);
                return result;
            }
        },
    };
    let requested = args
        .timeout_seconds
        .map(Duration::from_secs)
        .unwrap_or(policy.timeout);
    // A model's value over the limit is refused by the schema check; the profile's own
    // limit may be longer, and is cut to it.
    let timeout = requested.min(MAX_TIMEOUT);

    let command: Vec<OsString> = vec!["bash".into(), "-c".into(), args.command.into()];
    let outcome = async {
        let mut cancel = std::pin::pin!(cancel);
        // Off the async thread: preparing may wait (up to a minute, for another chitti
        // call holding the protected paths' record), and a server must go on serving
        // and hearing cancellations meanwhile. A call cancelled then never starts (what
        // was prepared is undone when it is dropped).
        let (policy, session) = (Arc::clone(&toolbox.policy), Arc::clone(&toolbox.session));
        let credentials_later = toolbox.credentials_later.clone();
        let preparing = tokio::task::spawn_blocking(move || match credentials_later {
            Some(search) => sandbox::prepare_in_session_finding_credentials_later(
                backend, &policy, search, &command, &cwd, &session,
            ),
            None => sandbox::prepare_in_session(backend, &policy, &command, &cwd, &session),
        });
        let prepared = tokio::select! {
            prepared = preparing => prepared.map_err(|e| {
                SandboxError::Unavailable(format!("preparing the sandbox failed: {e}"))
            })??,
            () = &mut cancel => return Ok(None),
        };
        let output = Output::Capture {
            max_bytes: toolbox.output_cap,
        };
        exec::run(prepared, Input::Null, output, timeout, cancel)
            .await
            .map(Some)
    }
    .await;
    match outcome {
        Ok(Some(outcome)) => render(&outcome, timeout, toolbox.output_cap),
        Ok(None) => ToolResult::error("cancelled before the command started"),
        Err(e @ SandboxError::Lost(_)) => {
            ToolResult::error(format!("{e} (sandbox backend: {})", backend.name()))
        }
        Err(e) => ToolResult::error(format!(
            "the command did not run: {e} (sandbox backend: {})",
            backend.name()
        )),
    }
}

/// How a model is told of one after-call repair of what a `who` (the command, a write)
/// did, or of one that failed.
pub fn repair_line(who: &str, repair: &str) -> String {
    match repair.strip_prefix(sandbox::UNREPAIRED) {
        Some(failure) => format!(
            "[the {who} changed a protected path and chitti could NOT put it back: {failure}. \
             Tell the user; git must not be run there until they have checked it]"
        ),
        // Not "restored" for every line: some say what could not be, and why that is safe
        // (a path deleted with its directory).
        None => format!("[the {who} changed a protected path; chitti: {repair}]"),
    }
}

fn render(outcome: &Outcome, timeout: Duration, cap: usize) -> ToolResult {
    let text_of = |c: &Captured| String::from_utf8_lossy(&c.bytes).into_owned();
    let (stdout, stderr) = (text_of(&outcome.stdout), text_of(&outcome.stderr));
    let content = json!({
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "timed_out": outcome.timed_out,
        "cancelled": outcome.cancelled,
        "duration_ms": outcome.duration.as_millis() as u64,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated_bytes": outcome.stdout.truncated_bytes,
        "stderr_truncated_bytes": outcome.stderr.truncated_bytes,
        "backend": outcome.backend.name(),
        "protected_paths_restored": outcome.repairs,
        "end_unconfirmed": outcome.end_unconfirmed,
    });

    let mut text = if outcome.end_unconfirmed {
        format!(
            "{}: {}\n",
            if outcome.timed_out {
                "timed out"
            } else {
                "cancelled"
            },
            crate::exec::UNCONFIRMED_END
        )
    } else if outcome.timed_out {
        format!(
            "timed out after {} s: the command and everything it started were killed\n",
            timeout.as_secs()
        )
    } else if outcome.cancelled {
        "cancelled: the command and everything it started were killed\n".to_string()
    } else if let Some(signal) = outcome.signal {
        format!(
            "killed by signal {signal} (exit code {})\n",
            outcome.exit_code
        )
    } else if (129..160).contains(&outcome.exit_code) {
        // bwrap reports a command killed by a signal only as 128+N.
        format!(
            "exit code {} (likely killed by signal {})\n",
            outcome.exit_code,
            outcome.exit_code - 128
        )
    } else {
        format!("exit code {}\n", outcome.exit_code)
    };
    for (name, body, captured) in [
        ("stdout", &stdout, &outcome.stdout),
        ("stderr", &stderr, &outcome.stderr),
    ] {
        if body.is_empty() {
            continue;
        }
        text.push_str(&format!("--- {name} ---\n{body}"));
        if !body.ends_with('\n') {
            text.push('\n');
        }
        if captured.truncated_bytes > 0 {
            text.push_str(&format!(
                "[{name} was cut: {} bytes were left out of the middle, the first and last \
                 {} bytes are shown; redirect the output to a file and read parts of it if \
                 you need more]\n",
                captured.truncated_bytes,
                cap / 2
            ));
        }
    }
    if stdout.is_empty() && stderr.is_empty() {
        text.push_str("(no output)\n");
    }
    for repair in &outcome.repairs {
        text.push_str(&repair_line("command", repair));
        text.push('\n');
    }
    text.push_str(&format!(
        "(wall time {:.2} s)\n",
        outcome.duration.as_secs_f64()
    ));
    // The sandbox did not keep its promise: an error, whatever the command's own exit (as
    // `sandbox exec` exits 125), so that a client sees it without reading the text.
    let broken = if outcome.end_unconfirmed {
        Some(crate::exec::UNCONFIRMED_END)
    } else if outcome.repairs.iter().any(|r| sandbox::is_unrepaired(r)) {
        Some(super::UNREPAIRED_ERROR)
    } else {
        None
    };
    match broken {
        Some(error) => ToolResult::failed(content, text, error),
        None => ToolResult::success(content, text),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::Value;

    use super::*;
    use crate::tools::testing::Fixture;

    async fn bash(tb: &Toolbox, args: Value) -> ToolResult {
        tb.call("execute_bash", args).await
    }

    #[tokio::test]
    async fn output_is_captured_in_the_sandbox() {
        let fx = Fixture::new();
        let tb = fx.toolbox();
        let r = bash(
            &tb,
            json!({"command": "echo out; echo err >&2; echo $CHITTI_SANDBOX"}),
        )
        .await;
        assert!(r.ok, "{}", r.text);
        assert_eq!(r.content["exit_code"], 0);
        assert_eq!(r.content["stdout"], format!("out\n{}\n", tb.backend.name()));
        assert_eq!(r.content["stderr"], "err\n");
        assert_eq!(r.content["backend"], tb.backend.name());
        assert_ne!(tb.backend, Backend::None);
        assert!(
            r.text.starts_with("exit code 0\n--- stdout ---\nout\n"),
            "{}",
            r.text
        );
        assert!(r.text.contains("--- stderr ---\nerr\n"), "{}", r.text);
    }

    #[tokio::test]
    async fn non_zero_exit_is_a_result() {
        let fx = Fixture::new();
        let r = bash(&fx.toolbox(), json!({"command": "echo failing; exit 3"})).await;
        assert!(r.ok, "{}", r.text);
        assert_eq!(r.content["exit_code"], 3);
        assert!(r.text.starts_with("exit code 3"), "{}", r.text);
        assert!(
            r.text.ends_with(" s)\n") && r.text.contains("(wall time "),
            "{}",
            r.text
        );
    }

    #[tokio::test]
    async fn working_directory_is_confined() {
        let fx = Fixture::new();
        std::fs::create_dir(fx.ws.join("sub")).unwrap();
        let tb = fx.toolbox();
        let r = bash(&tb, json!({"command": "pwd", "working_directory": "sub"})).await;
        assert!(r.ok, "{}", r.text);
        assert_eq!(
            r.content["stdout"],
            format!("{}\n", fx.ws.join("sub").display())
        );
        let abs = fx.ws.join("sub");
        let r = bash(&tb, json!({"command": "pwd", "working_directory": abs})).await;
        assert!(r.ok, "{}", r.text);
        for outside in [fx.outside.to_str().unwrap(), "..", "/"] {
            let r = bash(&tb, json!({"command": "pwd", "working_directory": outside})).await;
            assert!(!r.ok, "{outside}: {}", r.text);
            assert!(r.text.starts_with("working_directory: "), "{}", r.text);
            assert_eq!(r.content["kind"], "outside_workspace", "{outside}");
        }
        let r = bash(
            &tb,
            json!({"command": "pwd", "working_directory": "missing"}),
        )
        .await;
        assert!(!r.ok && r.text.contains("does not exist"), "{}", r.text);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn every_linux_backend_confines_the_command() {
        use crate::sandbox::BackendChoice;
        let fx = Fixture::new();
        let mut ran = Vec::new();
        for choice in [BackendChoice::Bwrap, BackendChoice::Landlock] {
            let Ok(tb) = fx.toolbox_on(choice) else {
                continue;
            };
            let target = fx.outside.join(format!("pwned-{}", tb.backend.name()));
            let command = format!(
                "echo x > {}; cat ~/.ssh/id_ed25519; echo done",
                target.display()
            );
            let r = bash(&tb, json!({ "command": command })).await;
            assert!(r.ok, "{}", r.text);
            assert_eq!(r.content["backend"], tb.backend.name());
            assert!(
                r.content["stdout"].as_str().unwrap().ends_with("done\n"),
                "{}",
                r.text
            );
            assert!(!r.text.contains("PRIVATE KEY"), "{}", r.text);
            assert!(!target.exists(), "{}: a write escaped", tb.backend.name());
            ran.push(tb.backend);
        }
        assert!(!ran.is_empty(), "no Linux backend is usable here");
    }

    #[tokio::test]
    async fn timeout_is_reported() {
        let fx = Fixture::new();
        let started = Instant::now();
        let r = bash(
            &fx.toolbox(),
            json!({"command": "sleep 30", "timeout_seconds": 1}),
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(r.ok, "{}", r.text);
        assert_eq!(r.content["timed_out"], true);
        assert!(r.text.starts_with("timed out after 1 s"), "{}", r.text);
    }

    #[tokio::test]
    async fn writes_outside_the_workspace_do_not_reach_the_host() {
        let fx = Fixture::new();
        let target = fx.outside.join("pwned");
        let command = format!(
            "echo x > {0}; echo y > {1}/inside; cat {0} 2>/dev/null; true",
            target.display(),
            fx.ws.display()
        );
        let r = bash(&fx.toolbox(), json!({ "command": command })).await;
        assert!(r.ok, "{}", r.text);
        assert!(!target.exists(), "the sandbox let a write outside through");
        assert_eq!(
            std::fs::read_to_string(fx.ws.join("inside")).unwrap(),
            "y\n"
        );
    }

    #[tokio::test]
    async fn long_output_is_cut_with_a_note() {
        let fx = Fixture::new();
        let mut tb = fx.toolbox();
        tb.output_cap = 1000;
        let r = bash(
            &tb,
            json!({"command": "head -c 5000 /dev/zero | tr '\\0' a; echo; echo END"}),
        )
        .await;
        assert!(r.ok, "{}", r.text);
        assert_eq!(r.content["stdout_truncated_bytes"], 5005 - 1000);
        let stdout = r.content["stdout"].as_str().unwrap();
        assert!(
            stdout.starts_with("aaaa") && stdout.ends_with("END\n"),
            "{stdout}"
        );
        assert!(r.text.contains("[stdout was cut: 4005 bytes"), "{}", r.text);
        assert!(r.text.len() < 2000, "{}", r.text.len());
    }

    #[tokio::test]
    async fn sandbox_false_needs_permission() {
        let fx = Fixture::new();
        let mut tb = fx.toolbox();
        let r = bash(
            &tb,
            json!({"command": "echo $CHITTI_SANDBOX", "sandbox": false}),
        )
        .await;
        assert!(!r.ok);
        assert!(r.text.contains("not allowed"), "{}", r.text);
        tb.allow_sandbox_false = true;
        let r = bash(
            &tb,
            json!({"command": "echo $CHITTI_SANDBOX", "sandbox": false}),
        )
        .await;
        assert!(r.ok, "{}", r.text);
        assert_eq!(r.content["backend"], "none");
    }

    #[tokio::test]
    async fn cancellation_kills_the_command() {
        let fx = Fixture::new();
        let tb = fx.toolbox();
        let started = Instant::now();
        let cancel = tokio::time::sleep(Duration::from_millis(300));
        let r = tb
            .call_with_cancel("execute_bash", json!({"command": "sleep 30"}), cancel)
            .await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(r.ok && r.content["cancelled"] == true, "{}", r.text);
        assert!(r.text.starts_with("cancelled"), "{}", r.text);
    }

    /// A call cancelled while its preparation waits for the protected paths' record
    /// (held here as another chitti call stuck in its join would hold it) never starts
    /// its command, and says so.
    #[tokio::test]
    async fn a_call_cancelled_while_it_waits_for_the_record_never_starts() {
        use std::os::fd::AsRawFd;
        let fx = Fixture::new();
        let tb = fx.toolbox();
        let r = bash(&tb, json!({"command": "true"})).await;
        assert!(r.ok, "{}", r.text);
        let lock_file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fx.home.join(".local/state/chitti/protect/lock"))
            .expect("the record's lock file (is the fixture's workspace a repository?)");
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_len = 1;
        let fd = lock_file.as_raw_fd();
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &lock) }, 0);
        // Let go in a while, whatever happens: a call that did not hear the cancellation
        // then runs, and the test fails on what it returned instead of hanging.
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            lock.l_type = libc::F_UNLCK as libc::c_short;
            unsafe { libc::fcntl(lock_file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
        });
        let cancel = tokio::time::sleep(Duration::from_millis(300));
        let r = tb
            .call_with_cancel("execute_bash", json!({"command": "echo > started"}), cancel)
            .await;
        assert!(!r.ok, "{}", r.text);
        assert_eq!(r.text, "cancelled before the command started");
        letting_go.join().unwrap();
        // Another call goes through the record once it is free, after the cancelled one
        // finished preparing and was dropped.
        let r = bash(&tb, json!({"command": "true"})).await;
        assert!(r.ok, "{}", r.text);
        assert!(!fx.ws.join("started").exists(), "the cancelled command ran");
    }

    #[tokio::test]
    async fn setup_failure_is_a_tool_error() {
        let fx = Fixture::new();
        // Seatbelt exists only on macOS: preparing it elsewhere fails before anything runs.
        let mut tb = fx.toolbox();
        tb.backend = if cfg!(target_os = "macos") {
            Backend::Landlock
        } else {
            Backend::Seatbelt
        };
        let r = bash(&tb, json!({"command": "echo hi"})).await;
        assert!(!r.ok, "{}", r.text);
        assert!(
            r.text.starts_with("the command did not run: "),
            "{}",
            r.text
        );
    }

    fn ended_with(repairs: Vec<String>, end_unconfirmed: bool) -> Outcome {
        Outcome {
            exit_code: 0,
            signal: None,
            timed_out: false,
            cancelled: false,
            stdout: Captured::default(),
            stderr: Captured::default(),
            duration: Duration::from_millis(5),
            backend: Backend::None,
            repairs,
            end_unconfirmed,
        }
    }

    #[test]
    fn a_broken_promise_is_an_error_that_keeps_the_whole_result() {
        let second = Duration::from_secs(1);
        let repaired = render(
            &ended_with(vec!["put .git/hooks back".into()], false),
            second,
            64,
        );
        assert!(repaired.ok, "{}", repaired.text);
        assert!(
            repaired.content.get("error").is_none(),
            "{}",
            repaired.content
        );

        let unrepaired = sandbox::unrepaired("could not restore .git/config");
        let r = render(&ended_with(vec![unrepaired.clone()], false), second, 64);
        assert!(!r.ok, "an unrepaired path read as a success: {}", r.text);
        assert_eq!(r.content["error"], super::super::UNREPAIRED_ERROR);
        assert_eq!(r.content["exit_code"], 0, "{}", r.content);
        assert_eq!(r.content["protected_paths_restored"], json!([unrepaired]));
        assert!(r.text.contains("could NOT put it back"), "{}", r.text);

        let r = render(&ended_with(vec![], true), second, 64);
        assert!(!r.ok, "an unconfirmed end read as a success: {}", r.text);
        assert_eq!(r.content["error"], exec::UNCONFIRMED_END);
        assert_eq!(r.content["end_unconfirmed"], true);
    }

    #[test]
    fn a_write_s_unrepaired_path_is_an_error() {
        let written = || ToolResult::success(json!({"path": "a"}), "wrote a");
        let r = super::super::with_repairs(written(), vec!["moved x aside".into()]);
        assert!(r.ok, "{}", r.text);
        let r = super::super::with_repairs(written(), vec![sandbox::unrepaired("x stayed")]);
        assert!(!r.ok, "{}", r.text);
        assert_eq!(r.content["error"], super::super::UNREPAIRED_ERROR);
        assert_eq!(r.content["path"], "a");
    }
}
