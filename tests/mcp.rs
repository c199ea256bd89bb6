//! `chitti mcp` end to end: a real MCP client (rmcp) starts the real binary over stdio,
//! on the default backend, and every verdict comes from effects observed outside the
//! sandbox (files that did or did not appear, processes that are gone).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    chitti_bin, ensure_backend, exited_within, marker, read, sleepers, unique_sleep, wait_until,
    write, Fixture, SleepReaper, PATH,
};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};

/// A running `chitti mcp` and the client connected to it.
struct Server {
    client: RunningService<RoleClient, ()>,
    pid: u32,
    fx: Fixture,
    /// A key in the decoy home that no tool may ever return.
    secret: String,
}

impl Server {
    async fn start(extra: &[&str]) -> Server {
        Server::start_in(Fixture::new(), extra).await
    }

    async fn start_in(fx: Fixture, extra: &[&str]) -> Server {
        Server::start_limited(fx, extra, None, None).await
    }

    /// With `max_file_bytes`, the server runs under that file size limit
    /// (`RLIMIT_FSIZE`), with `SIGXFSZ` ignored: a write past it fails with EFBIG, as
    /// one to a full disk fails with ENOSPC.
    /// A server under RLIMIT_FSIZE `max_file_bytes` (SIGXFSZ ignored, so that a write past
    /// it fails with EFBIG) and RLIMIT_NOFILE `max_open_files`.
    async fn start_limited(
        fx: Fixture,
        extra: &[&str],
        max_file_bytes: Option<u64>,
        max_open_files: Option<u64>,
    ) -> Server {
        Server::start_with(fx, extra, max_file_bytes, max_open_files, None).await
    }

    /// With `bind` (root only), the server runs in a mount namespace of its own where
    /// the first directory is also mounted on the second: a filesystem mounted twice.
    async fn start_with(
        fx: Fixture,
        extra: &[&str],
        max_file_bytes: Option<u64>,
        max_open_files: Option<u64>,
        bind: Option<(std::ffi::CString, std::ffi::CString)>,
    ) -> Server {
        let secret = marker("ssh-key");
        write(&fx.home.join(".ssh/id_ed25519"), &format!("{secret}\n"));
        let mut cmd = tokio::process::Command::new(chitti_bin());
        cmd.arg("mcp")
            .arg("-w")
            .arg(&fx.ws)
            .args(extra)
            .current_dir(&fx.ws)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .env("LANG", "C.UTF-8");
        // SAFETY: only async-signal-safe system calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let limit = |resource, limit: Option<u64>| match limit {
                    Some(limit) => {
                        let rlimit = libc::rlimit {
                            rlim_cur: limit,
                            rlim_max: limit,
                        };
                        libc::setrlimit(resource, &rlimit) == 0
                    }
                    None => true,
                };
                if !limit(libc::RLIMIT_FSIZE, max_file_bytes)
                    || !limit(libc::RLIMIT_NOFILE, max_open_files)
                    || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some((from, to)) = &bind {
                    let (none, no_data) = (std::ptr::null(), std::ptr::null());
                    if libc::unshare(libc::CLONE_NEWNS) != 0
                        || libc::mount(
                            none,
                            c"/".as_ptr(),
                            none,
                            libc::MS_REC | libc::MS_PRIVATE,
                            no_data,
                        ) != 0
                        || libc::mount(from.as_ptr(), to.as_ptr(), none, libc::MS_BIND, no_data)
                            != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .expect("start chitti mcp");
        let pid = transport.id().expect("the server's pid");
        let client = ().serve(transport).await.expect("MCP handshake with chitti");
        Server {
            client,
            pid,
            fx,
            secret,
        }
    }

    fn request(name: &str, args: Value) -> CallToolRequestParams {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        CallToolRequestParams::new(name.to_string()).with_arguments(args)
    }

    /// A tool call that the server answered with a result (possibly `isError`).
    async fn call(&self, name: &str, args: Value) -> Called {
        let result = self
            .client
            .call_tool(Server::request(name, args))
            .await
            .unwrap_or_else(|e| panic!("{name}: the server did not answer with a result: {e}"));
        Called::from(result)
    }

    async fn bash(&self, command: &str) -> Called {
        self.call("execute_bash", json!({ "command": command }))
            .await
    }

    async fn tool_names(&self) -> Vec<String> {
        let tools = self.client.list_all_tools().await.expect("tools/list");
        tools.iter().map(|t| t.name.to_string()).collect()
    }

    /// Asserts that nothing the server returned contains the decoy key.
    fn assert_no_secret(&self, called: &Called) {
        assert!(
            !called.text.contains(&self.secret)
                && !called.structured.to_string().contains(&self.secret),
            "the decoy key leaked: {called:?}"
        );
    }
}

/// What a tool call returned: the text a model reads and the structured content.
#[derive(Debug)]
struct Called {
    is_error: bool,
    text: String,
    structured: Value,
}

impl From<CallToolResult> for Called {
    fn from(result: CallToolResult) -> Called {
        let text = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect();
        Called {
            is_error: result.is_error == Some(true),
            text,
            structured: result.structured_content.unwrap_or(Value::Null),
        }
    }
}

/// Polls `cond` every 20 ms without blocking the runtime.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_tools_are_listed_and_served_only_when_allowed() {
    let server = Server::start(&[]).await;
    assert_eq!(
        server.tool_names().await,
        ["execute_bash", "read_file", "list_dir"]
    );
    let tools = server.client.list_all_tools().await.unwrap();
    let bash = tools.iter().find(|t| t.name == "execute_bash").unwrap();
    let props = bash.input_schema["properties"].as_object().unwrap();
    assert!(props.contains_key("command") && props.contains_key("timeout_seconds"));
    assert!(
        !props.contains_key("sandbox"),
        "sandbox:false must not be offered: {props:?}"
    );

    // Not listed means not served either.
    let target = server.fx.ws("written.txt");
    let err = server
        .client
        .call_tool(Server::request(
            "write_file",
            json!({"path": "written.txt", "content": "x"}),
        ))
        .await
        .expect_err("write_file without --allow-write-tools");
    assert!(err.to_string().contains("--allow-write-tools"), "{err}");
    assert!(!target.exists());

    let server = Server::start(&["--allow-write-tools"]).await;
    assert_eq!(
        server.tool_names().await,
        [
            "execute_bash",
            "read_file",
            "list_dir",
            "write_file",
            "edit_file"
        ]
    );
    let target = server.fx.ws("written.txt");
    let r = server
        .call(
            "write_file",
            json!({"path": "written.txt", "content": "hello\n"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(read(&target), "hello\n");
    let r = server
        .call(
            "edit_file",
            json!({"path": "written.txt", "old_string": "hello", "new_string": "bye"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(read(&target), "bye\n");

    // The write tools stay confined to the workspace.
    let outside = server.fx.outside.join("planted.txt");
    let r = server
        .call(
            "write_file",
            json!({"path": outside.to_str().unwrap(), "content": "x"}),
        )
        .await;
    assert!(r.is_error, "{r:?}");
    let r = server
        .call(
            "write_file",
            json!({"path": "../../outside/planted.txt", "content": "x"}),
        )
        .await;
    assert!(r.is_error, "{r:?}");
    assert!(!outside.exists(), "write_file wrote outside the workspace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_bash_returns_text_and_structured_content() {
    let server = Server::start(&[]).await;
    let r = server
        .bash("echo out; echo err >&2; echo made > made.txt; exit 3")
        .await;
    assert!(
        !r.is_error,
        "a failing command is a result, not an error: {r:?}"
    );
    let s = &r.structured;
    assert_eq!(s["exit_code"], 3, "{r:?}");
    assert_eq!(s["stdout"], "out\n");
    assert_eq!(s["stderr"], "err\n");
    assert_eq!(s["timed_out"], false);
    assert_eq!(s["stdout_truncated_bytes"], 0);
    assert!(s["duration_ms"].is_u64(), "{s}");
    assert_ne!(s["backend"], "none");
    assert!(r.text.starts_with("exit code 3\n"), "{}", r.text);
    assert!(r.text.contains("--- stdout ---\nout\n"), "{}", r.text);
    // It ran in the workspace, for real.
    assert_eq!(read(&server.fx.ws("made.txt")), "made\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_attempts_do_not_reach_the_host() {
    let server = Server::start(&[]).await;
    let planted = server.fx.outside.join("pwned");
    let command = format!(
        "echo x > {0}; touch ~/planted; cat ~/.ssh/id_ed25519; cat {1}/.ssh/id_ed25519; \
         echo done",
        planted.display(),
        server.fx.home.display()
    );
    let r = server.bash(&command).await;
    assert!(!r.is_error, "{r:?}");
    assert!(
        r.structured["stdout"].as_str().unwrap().ends_with("done\n"),
        "the command did not run to its end: {r:?}"
    );
    assert!(
        !planted.exists(),
        "a write outside the workspace got through"
    );
    assert!(
        !server.fx.home.join("planted").exists(),
        "a write to HOME got through"
    );
    server.assert_no_secret(&r);

    // `sandbox: false` is neither offered nor honoured.
    let r = server
        .call(
            "execute_bash",
            json!({"command": format!("echo x > {}", planted.display()), "sandbox": false}),
        )
        .await;
    assert!(r.is_error, "{r:?}");
    assert!(r.text.contains("not allowed"), "{}", r.text);
    assert!(
        !planted.exists(),
        "sandbox:false ran the command unsandboxed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_run_concurrently() {
    let server = Server::start(&[]).await;
    let started = Instant::now();
    let commands: Vec<String> = (0..8)
        .map(|i| format!("sleep 1; echo {i} > done-{i}"))
        .collect();
    let results = futures::future::join_all(commands.iter().map(|c| server.bash(c))).await;
    let elapsed = started.elapsed();
    for (i, r) in results.iter().enumerate() {
        assert!(!r.is_error && r.structured["exit_code"] == 0, "{r:?}");
        assert_eq!(read(&server.fx.ws(&format!("done-{i}"))), format!("{i}\n"));
    }
    // Eight one-second calls one after another would take eight seconds.
    assert!(
        elapsed < Duration::from_secs(4),
        "8 × sleep 1 took {elapsed:?}: calls were serialised"
    );
}

/// A client sending many calls at once gets them all run, at most
/// `MAX_CALLS_AT_ONCE` at a time: each call counts the calls running beside it, in the
/// workspace, before it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_limit_wait_their_turn() {
    let server = Server::start(&[]).await;
    let limit = chitti::mcp::MAX_CALLS_AT_ONCE;
    std::fs::create_dir(server.fx.ws("running")).unwrap();
    let commands: Vec<String> = (0..limit + 8)
        .map(|i| {
            format!(
                "touch running/{i}; ls running | wc -l >> counts; sleep 0.5; \
                 ls running | wc -l >> counts; rm running/{i}"
            )
        })
        .collect();
    let results = futures::future::join_all(commands.iter().map(|c| server.bash(c))).await;
    for r in &results {
        assert!(!r.is_error && r.structured["exit_code"] == 0, "{r:?}");
    }
    let counts: Vec<usize> = read(&server.fx.ws("counts"))
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 2 * (limit + 8));
    let most = counts.iter().copied().max().unwrap();
    assert!(
        most <= limit,
        "{most} calls ran at once, over {limit}: {counts:?}"
    );
    assert!(most >= 2, "the calls never ran side by side: {counts:?}");
}

/// A session's calls may reuse one private TMPDIR (a slot of the pool the server keeps),
/// but every call finds it empty, and calls running at once never share one: a call that
/// writes into another's TMPDIR leaves nothing there (that call lists it at its end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_gets_an_empty_private_tmpdir_of_its_own() {
    ensure_backend("landlock");
    let server = Server::start(&["--backend", "landlock"]).await;
    let mut dirs = Vec::new();
    for i in 0..3 {
        let r = server
            .bash(&format!(
                "ls -A \"$TMPDIR\"; echo left-{i} > \"$TMPDIR/left\"; echo \"$TMPDIR\" >&2"
            ))
            .await;
        assert_eq!(r.structured["exit_code"], 0, "{r:?}");
        assert_eq!(
            r.structured["stdout"], "",
            "call {i} found its TMPDIR not empty"
        );
        dirs.push(r.structured["stderr"].as_str().unwrap().trim().to_string());
    }
    // Where the pool is used (a slot), the session keeps its slot from call to call.
    if dirs[0].contains("/slot-") {
        assert!(dirs.iter().all(|d| *d == dirs[0]), "{dirs:?}");
    } else {
        eprintln!(
            "note: no TMPDIR pool here ({}), a fresh directory per call",
            dirs[0]
        );
    }
    let a = server.bash("echo \"$TMPDIR\" > a-tmp; sleep 2; ls -A \"$TMPDIR\" > a-listing");
    let b = server.bash(
        "while [ ! -s a-tmp ]; do sleep 0.05; done; \
         echo x > \"$(cat a-tmp)/planted\"; echo \"$TMPDIR\" > b-tmp",
    );
    let (ra, rb) = futures::join!(a, b);
    assert_eq!(ra.structured["exit_code"], 0, "{ra:?}");
    assert_eq!(rb.structured["exit_code"], 0, "{rb:?}");
    let (a_tmp, b_tmp) = (read(&server.fx.ws("a-tmp")), read(&server.fx.ws("b-tmp")));
    assert_ne!(a_tmp, b_tmp, "two calls running at once shared a TMPDIR");
    assert_eq!(
        read(&server.fx.ws("a-listing")),
        "",
        "another call wrote into this call's TMPDIR"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_command_tree() {
    let server = Server::start(&[]).await;
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let started = Instant::now();
    let r = server
        .call(
            "execute_bash",
            json!({
                "command": format!("(setsid sleep {secs} &); sleep {secs}; echo late > late"),
                "timeout_seconds": 1,
            }),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.structured["timed_out"], true, "{r:?}");
    assert!(r.text.starts_with("timed out after 1 s"), "{}", r.text);
    assert!(
        eventually(Duration::from_secs(5), || sleepers(&secs).is_empty()).await,
        "sleepers survived the timeout: {:?}",
        sleepers(&secs)
    );
    assert!(!server.fx.ws("late").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_capped_per_call() {
    let server = Server::start(&[]).await;
    // Two megabytes of output and a last line that must survive the cut.
    let r = server
        .bash("head -c 2000000 /dev/zero | tr '\\0' a; echo; echo END")
        .await;
    assert!(!r.is_error, "{r:?}");
    let stdout = r.structured["stdout"].as_str().unwrap();
    let cut = r.structured["stdout_truncated_bytes"].as_u64().unwrap();
    // The default cap (30 000 bytes) is kept, plus a note where the middle was cut.
    assert_eq!(cut, 2_000_005 - 30_000);
    assert!(stdout.len() < 30_100, "{} bytes came back", stdout.len());
    assert!(stdout.starts_with("aaaa") && stdout.ends_with("END\n"));
    assert!(stdout.contains(&format!("[... chitti: {cut} bytes cut here ...]")));
    assert!(r.text.contains("[stdout was cut"), "the model is not told");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cancellation_kills_the_command_tree() {
    let server = Server::start(&[]).await;
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let command = format!("(setsid sleep {secs} &); sleep {secs}; echo late > late");
    // Boxed, so that dropping it really drops the request (a pinned local would live on).
    let mut call = Box::pin(server.client.call_tool(Server::request(
        "execute_bash",
        json!({ "command": command }),
    )));
    let running = tokio::select! {
        r = &mut call => panic!("the call finished before it was cancelled: {r:?}"),
        seen = eventually(Duration::from_secs(10), || sleepers(&secs).len() >= 2) => seen,
    };
    assert!(running, "the command's processes never showed up");
    // Dropping the request makes the client send notifications/cancelled.
    drop(call);
    assert!(
        eventually(Duration::from_secs(5), || sleepers(&secs).is_empty()).await,
        "cancellation left processes behind: {:?}",
        sleepers(&secs)
    );
    // The server goes on serving.
    let r = server.bash("echo still here").await;
    assert_eq!(r.structured["stdout"], "still here\n", "{r:?}");
    assert!(!server.fx.ws("late").exists());
}

/// A call the client cancels gets no answer (the protocol's rule, which rmcp keeps). Where
/// its sandbox failed a promise meanwhile (here: a nested repository whose `.git`, made
/// during the call, leads outside the writable roots), the next answer says so, once.
async fn a_cancelled_call_s_broken_promise_is_told_with_the_next_answer(backend: &str) {
    ensure_backend(backend);
    let fx = Fixture::new();
    fx.init_repo("start");
    let outside = fx.outside.join("repo");
    std::fs::create_dir_all(&outside).unwrap();
    for args in [
        &["init", "-q"][..],
        &["commit", "-q", "--allow-empty", "-m", "outside"][..],
    ] {
        let out = common::host_git(&outside, &fx.home, args);
        assert!(out.status.success(), "{out:?}");
    }
    let server = Server::start_in(fx, &["--backend", backend]).await;
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let command = format!(
        "mkdir sub && echo 'gitdir: {}/.git' > sub/.git && git add sub && touch added && \
         sleep {secs}",
        outside.display()
    );
    // Boxed, so that dropping it really drops the request.
    let mut call = Box::pin(server.client.call_tool(Server::request(
        "execute_bash",
        json!({ "command": command }),
    )));
    let added = server.fx.ws("added");
    let running = tokio::select! {
        r = &mut call => panic!("the call finished before it was cancelled: {r:?}"),
        seen = eventually(Duration::from_secs(20), || {
            added.exists() && !sleepers(&secs).is_empty()
        }) => seen,
    };
    assert!(running, "the command never got to its sleep");
    drop(call);
    // The cancelled call's clean-up (and so its checks) may still be under way.
    let mut told = None;
    for _ in 0..100 {
        let r = server.bash("true").await;
        if r.structured.get("earlier_calls").is_some() {
            told = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let told = told.expect("no later answer told of the cancelled call's broken promise");
    assert!(
        told.text.contains("was cancelled, so it got no answer"),
        "{told:?}"
    );
    let earlier = told.structured["earlier_calls"].to_string();
    assert!(
        earlier.contains("NOT REPAIRED") && earlier.contains("outside the writable roots"),
        "{told:?}"
    );
    // The later call's own result is there too (what it says of the repository is its own).
    assert_eq!(told.structured["exit_code"], 0, "{told:?}");
    let again = server.bash("true").await;
    assert!(
        again.structured.get("earlier_calls").is_none(),
        "told twice: {again:?}"
    );
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bwrap_tells_a_cancelled_call_s_broken_promise_with_the_next_answer() {
    a_cancelled_call_s_broken_promise_is_told_with_the_next_answer("bwrap").await;
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn landlock_tells_a_cancelled_call_s_broken_promise_with_the_next_answer() {
    a_cancelled_call_s_broken_promise_is_told_with_the_next_answer("landlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_kills_running_commands() {
    let server = Server::start(&[]).await;
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let command = format!("(setsid sleep {secs} &); sleep {secs}");
    let call = server.client.call_tool(Server::request(
        "execute_bash",
        json!({ "command": command }),
    ));
    tokio::pin!(call);
    tokio::select! {
        r = &mut call => panic!("the call finished early: {r:?}"),
        seen = eventually(Duration::from_secs(10), || sleepers(&secs).len() >= 2) => {
            assert!(seen, "the command's processes never showed up");
        }
    }
    unsafe { libc::kill(server.pid as i32, libc::SIGTERM) };
    let answer = tokio::time::timeout(Duration::from_secs(15), &mut call)
        .await
        .expect("the client heard nothing after the server was stopped");
    // The session may end before or after the killed call's result goes out.
    if let Ok(result) = answer {
        let r = Called::from(result);
        assert_eq!(r.structured["cancelled"], true, "{r:?}");
    }
    assert!(
        eventually(Duration::from_secs(5), || sleepers(&secs).is_empty()).await,
        "the server's shutdown left processes behind: {:?}",
        sleepers(&secs)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_errors_and_the_server_keeps_serving() {
    let server = Server::start(&[]).await;
    for (args, expected) in [
        (json!({}), "missing required argument `command`"),
        (json!({"command": 5}), "argument `command` must be a string"),
        (
            json!({"command": "true", "colour": "red"}),
            "unknown argument `colour`",
        ),
        (
            json!({"command": "true", "timeout_seconds": 0}),
            "`timeout_seconds` must be",
        ),
        (
            json!({"command": "true", "timeout_seconds": "ten"}),
            "`timeout_seconds` must be",
        ),
        (
            json!({"command": "pwd", "working_directory": "/"}),
            "working_directory",
        ),
    ] {
        let r = server.call("execute_bash", args.clone()).await;
        assert!(r.is_error, "{args}: {r:?}");
        assert!(r.text.contains(expected), "{args}: {}", r.text);
        assert_eq!(r.structured["error"], r.text.as_str(), "{args}");
    }
    let err = server
        .client
        .call_tool(Server::request("launch_rockets", json!({})))
        .await
        .expect_err("an unknown tool");
    assert!(
        matches!(&err, ServiceError::McpError(e) if e.message.contains("unknown tool `launch_rockets`")),
        "{err}"
    );
    let r = server.bash("echo fine").await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.structured["stdout"], "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_are_confined_to_the_workspace() {
    let fx = Fixture::new();
    let outside_secret = marker("outside");
    write(&fx.outside.join("secret.txt"), &outside_secret);
    write(&fx.ws("notes.txt"), "first\nsecond\n");
    std::os::unix::fs::symlink(fx.outside.join("secret.txt"), fx.ws("link.txt")).unwrap();
    let server = Server::start_in(fx, &[]).await;

    let r = server.call("read_file", json!({"path": "notes.txt"})).await;
    assert!(!r.is_error, "{r:?}");
    assert!(r.text.contains("second"), "{}", r.text);
    let r = server.call("list_dir", json!({"path": "."})).await;
    assert!(!r.is_error && r.text.contains("notes.txt"), "{r:?}");

    let home_key = server.fx.home.join(".ssh/id_ed25519");
    let absolute = server.fx.outside.join("secret.txt");
    for path in [
        "../../outside/secret.txt",
        absolute.to_str().unwrap(),
        "link.txt",
        home_key.to_str().unwrap(),
        "../.ssh/id_ed25519",
    ] {
        let r = server.call("read_file", json!({ "path": path })).await;
        assert!(r.is_error, "{path}: {r:?}");
        assert!(!r.text.contains(&outside_secret), "{path}: {}", r.text);
        server.assert_no_secret(&r);
    }
    let r = server.call("list_dir", json!({"path": "../.."})).await;
    assert!(r.is_error, "{r:?}");
}

/// A path many levels deep is created, and a failed write into one removes every
/// directory it made, however many: no descriptor is held per level (the server runs
/// here with 256 descriptors and the path has 400 levels).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_new_directories_are_made_and_removed_without_a_descriptor_each() {
    let fx = Fixture::new();
    let server = Server::start_limited(fx, &["--allow-write-tools"], None, Some(256)).await;
    let deep = "d/".repeat(400);
    let r = server
        .call(
            "write_file",
            json!({"path": format!("{deep}{}", "n".repeat(300)), "content": "x"}),
        )
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(!r.text.contains("os error 24"), "{}", r.text);
    assert!(
        !server.fx.ws("d").exists(),
        "the directories made for a file that was not written were left"
    );
    let r = server
        .call(
            "write_file",
            json!({"path": format!("{deep}ok"), "content": "x"}),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(read(&server.fx.ws(&format!("{deep}ok"))), "x");
}

/// A write that fails part-way (here past a file size limit; a full disk or a quota
/// fails the same way) leaves nothing half-done: a replaced or edited file keeps its old
/// content, a new one is not left behind, and no temporary file stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_part_way_leaves_the_file_as_it_was() {
    const LIMIT: u64 = 1 << 20;
    let fx = Fixture::new();
    let original = format!("keep me\n{}\n", "line of text\n".repeat(100));
    write(&fx.ws("kept.txt"), &original);
    write(&fx.ws("edited.txt"), &original);
    let server = Server::start_limited(fx, &["--allow-write-tools"], Some(LIMIT), None).await;
    let too_big = "x".repeat(2 * LIMIT as usize);

    let r = server
        .call(
            "write_file",
            json!({"path": "kept.txt", "content": too_big}),
        )
        .await;
    assert!(r.is_error, "a write past the limit succeeded: {}", r.text);
    assert!(r.text.contains("left as it was"), "{}", r.text);
    assert_eq!(
        read(&server.fx.ws("kept.txt")),
        original,
        "write_file cut it short"
    );

    let r = server
        .call(
            "edit_file",
            json!({"path": "edited.txt", "old_string": "keep me", "new_string": too_big}),
        )
        .await;
    assert!(r.is_error, "an edit past the limit succeeded: {}", r.text);
    assert_eq!(
        read(&server.fx.ws("edited.txt")),
        original,
        "edit_file cut it short"
    );

    let r = server
        .call("write_file", json!({"path": "new.txt", "content": too_big}))
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("not created"), "{}", r.text);
    assert!(
        !server.fx.ws("new.txt").exists(),
        "a half-written new file was left"
    );
    // The directories made for a new file go with it; one that was there stays.
    std::fs::create_dir(server.fx.ws("kept")).unwrap();
    let r = server
        .call(
            "write_file",
            json!({"path": "kept/made/deeper/new.txt", "content": too_big}),
        )
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(
        !server.fx.ws("kept/made").exists(),
        "the directories made for a file that was not written were left"
    );
    assert!(server.fx.ws("kept").is_dir());

    // A file a copy cannot stand in for (its extended attribute would be lost) is written
    // in place, but only once the space for the new text is reserved: refused the same.
    let tagged = server.fx.ws("tagged.txt");
    write(&tagged, &original);
    let c_path = std::ffi::CString::new(tagged.as_os_str().as_encoded_bytes()).unwrap();
    let tag = unsafe {
        libc::setxattr(
            c_path.as_ptr(),
            c"user.chitti-test".as_ptr(),
            b"kept".as_ptr().cast(),
            4,
            0,
        )
    };
    if tag == 0 {
        let r = server
            .call(
                "write_file",
                json!({"path": "tagged.txt", "content": too_big}),
            )
            .await;
        assert!(r.is_error, "{}", r.text);
        assert!(r.text.contains("left as it was"), "{}", r.text);
        assert_eq!(read(&tagged), original, "the in-place write cut it short");
    } else {
        eprintln!(
            "SKIP the in-place part of a_write_that_fails_part_way_leaves_the_file_as_it_was: \
             no user extended attributes here ({})",
            std::io::Error::last_os_error()
        );
    }

    let left: Vec<_> = std::fs::read_dir(server.fx.ws("."))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with(".chitti-write-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");

    // Within the limit the same server writes.
    let r = server
        .call(
            "write_file",
            json!({"path": "kept.txt", "content": "small\n"}),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(read(&server.fx.ws("kept.txt")), "small\n");
}

/// A call waiting for the protected paths' record, which another chitti call holds (one
/// stopped with Ctrl-Z, say; the wait lasts up to a minute), does not stop the server:
/// other requests are answered meanwhile, and the call goes on once the record is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_the_record_does_not_stop_the_server() {
    use std::os::fd::AsRawFd;
    let fx = Fixture::new();
    fx.init_repo("first");
    let server = Server::start_in(fx, &[]).await;
    // A first call makes the state directory and its lock file.
    let r = server.bash("true").await;
    assert!(!r.is_error, "{r:?}");
    let lock_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(server.fx.home.join(".local/state/chitti/protect/lock"))
        .expect("the record's lock file");
    // Byte 0 is held by a call joining or leaving: as another chitti stuck there would.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_len = 1;
    let held = unsafe { libc::fcntl(lock_file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    assert_eq!(held, 0, "lock: {}", std::io::Error::last_os_error());

    let peer = server.client.peer().clone();
    let waiting = tokio::spawn(async move {
        peer.call_tool(Server::request(
            "execute_bash",
            json!({"command": "echo > waited"}),
        ))
        .await
    });
    // Time for the server to reach the lock; were it slower, the test could only pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answered = tokio::time::timeout(
        Duration::from_secs(20),
        server.call("list_dir", json!({"path": "."})),
    )
    .await;
    assert!(
        !server.fx.ws("waited").exists(),
        "the command ran while the record was locked"
    );
    let r = answered.expect("the server stopped answering while a call waited for the record");
    assert!(!r.is_error && r.text.contains("README"), "{r:?}");

    lock.l_type = libc::F_UNLCK as libc::c_short;
    unsafe { libc::fcntl(lock_file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    let r = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiting call did not go on once the record was free")
        .unwrap()
        .expect("the waiting call got no result");
    let r = Called::from(r);
    assert!(!r.is_error, "{r:?}");
    assert!(server.fx.ws("waited").exists(), "the command never ran");
}

#[test]
fn set_up_failures_exit_125_before_serving() {
    let fx = Fixture::new();
    let missing = fx.root.join("missing");
    for (args, expected) in [
        (
            vec!["-w".to_string(), missing.display().to_string()],
            "does not exist",
        ),
        (
            vec!["-p".to_string(), "no-such-profile".to_string()],
            "unknown profile",
        ),
        (
            vec!["--backend".to_string(), "none".to_string()],
            "--backend none",
        ),
    ] {
        let out = std::process::Command::new(chitti_bin())
            .arg("mcp")
            .args(&args)
            .current_dir(&fx.ws)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .stdin(Stdio::null())
            .output()
            .expect("run chitti mcp");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "stdout is for the protocol only");
    }
}

/// The default backend is covered above; each Linux backend must also contain an escape
/// and die with its call when it is served over MCP (they kill trees differently: a PID
/// namespace for bwrap, a subreaper helper for landlock).
async fn backend_contains_and_cancels(backend: &str) {
    ensure_backend(backend);
    let server = Server::start(&["--backend", backend]).await;
    let planted = server.fx.outside.join("pwned");
    let r = server
        .bash(&format!(
            "echo x > {}; cat ~/.ssh/id_ed25519; echo $CHITTI_SANDBOX",
            planted.display()
        ))
        .await;
    assert_eq!(r.structured["backend"], backend, "{r:?}");
    assert!(
        r.structured["stdout"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{backend}\n")),
        "{r:?}"
    );
    assert!(
        !planted.exists(),
        "{backend}: a write outside the workspace got through"
    );
    server.assert_no_secret(&r);

    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let command = format!("(setsid sleep {secs} &); sleep {secs}");
    let mut call = Box::pin(server.client.call_tool(Server::request(
        "execute_bash",
        json!({ "command": command }),
    )));
    tokio::select! {
        r = &mut call => panic!("{backend}: the call finished early: {r:?}"),
        seen = eventually(Duration::from_secs(10), || sleepers(&secs).len() >= 2) => {
            assert!(seen, "{backend}: the command's processes never showed up");
        }
    }
    drop(call);
    assert!(
        eventually(Duration::from_secs(5), || sleepers(&secs).is_empty()).await,
        "{backend}: cancellation left processes behind: {:?}",
        sleepers(&secs)
    );
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bwrap_backend_contains_and_cancels() {
    backend_contains_and_cancels("bwrap").await;
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn landlock_backend_contains_and_cancels() {
    backend_contains_and_cancels("landlock").await;
}

/// The server answers a call as soon as the supervisor has reported, and reaps it in the
/// background: after many calls nothing is left of them, not even a zombie (the server's
/// children, read from /proc, are none).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_calls_leave_no_child_of_the_server() {
    let children = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default()
    };
    for backend in ["landlock", "bwrap"] {
        ensure_backend(backend);
        let server = Server::start(&["--backend", backend]).await;
        for i in 0..30 {
            let r = server.bash(&format!("echo {i}")).await;
            assert_eq!(r.structured["stdout"], format!("{i}\n"), "{backend}: {r:?}");
        }
        assert!(
            eventually(Duration::from_secs(5), || children(server.pid)
                .trim()
                .is_empty())
            .await,
            "{backend}: the server still has children: {}",
            children(server.pid)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_created_after_the_server_started_stay_unreadable() {
    let server = Server::start(&[]).await;
    // Warm up: the first call resolved the policy before these existed.
    server.bash("true").await;
    let aws = marker("aws-key");
    let kube = marker("kube-config");
    write(
        &server.fx.home.join(".aws/credentials"),
        &format!("{aws}\n"),
    );
    write(&server.fx.home.join(".kube/config"), &format!("{kube}\n"));
    let called = server
        .bash("cat ~/.aws/credentials ~/.kube/config; echo ran")
        .await;
    assert!(
        called.text.contains("ran"),
        "the command did not run: {called:?}"
    );
    for secret in [&aws, &kube] {
        assert!(
            !called.text.contains(secret.as_str())
                && !called.structured.to_string().contains(secret.as_str()),
            "a credential created mid-session leaked: {called:?}"
        );
    }
    let read = server
        .call(
            "read_file",
            json!({"path": server.fx.home.join(".aws/credentials")}),
        )
        .await;
    assert!(read.is_error && !read.text.contains(&aws), "{read:?}");
}

/// Where some filesystem is mounted twice, every call looks the credential locations' mounts
/// up in the mount table. A call run by root searches on a thread of the server that has
/// made a mount namespace of its own: the table it reads must be that thread's, whose mount
/// IDs are the ones it sees (every call was refused while it read the main thread's).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_and_hide_credentials_where_a_filesystem_is_mounted_twice() {
    if !common::running_as_root() {
        eprintln!("SKIP: making a second mount for the server needs root");
        return;
    }
    ensure_backend("landlock");
    let fx = Fixture::new();
    let second = fx.outside.with_file_name("second-name");
    std::fs::create_dir(&second).unwrap();
    let c = |p: &std::path::Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let bind = Some((c(&fx.outside), c(&second)));
    let server = Server::start_with(fx, &["--backend", "landlock"], None, None, bind).await;
    for _ in 0..2 {
        let called = server.bash("cat ~/.ssh/id_ed25519; echo ran").await;
        assert!(
            called.text.contains("ran") && !called.text.contains(&server.secret),
            "{called:?}"
        );
    }
}

/// The thread that makes a call's mount namespace (a call run by root, Linux 6.9) ends
/// once the command has joined it: after the calls, every thread of the server is in the
/// server's own mount namespace, and at most one masks thread is left (started ahead for
/// the next call). A thread left behind would hold a namespace, and a descriptor of every
/// pipe it kept, for a minute.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_threads_that_make_the_calls_namespaces_end_with_their_calls() {
    if !chitti::sandbox::credentials_can_wait(chitti::sandbox::Backend::Landlock, true) {
        eprintln!(
            "SKIP: calls search for credentials on a thread of their own only when run by \
             root on Linux 6.9 or later"
        );
        return;
    }
    ensure_backend("landlock");
    let server = Server::start(&["--backend", "landlock"]).await;
    for i in 0..5 {
        let called = server.bash(&format!("echo call-{i}")).await;
        assert!(called.text.contains(&format!("call-{i}")), "{called:?}");
    }
    // Calls at once race for the thread started ahead: each gets one.
    let at_once = tokio::join!(
        server.bash("echo at-once-0"),
        server.bash("echo at-once-1"),
        server.bash("echo at-once-2"),
    );
    for (i, called) in [at_once.0, at_once.1, at_once.2].iter().enumerate() {
        assert!(called.text.contains(&format!("at-once-{i}")), "{called:?}");
    }
    // The supervisor, forked by such a thread, goes by chitti's name, not the thread's.
    let called = server.bash("cat /proc/$PPID/comm").await;
    assert_eq!(called.structured["stdout"], "chitti\n", "{called:?}");
    let own = std::fs::read_link(format!("/proc/{}/ns/mnt", server.pid)).unwrap();
    // (masks threads, threads in another mount namespace)
    let left = || {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid)).unwrap();
        let (mut masks, mut elsewhere) = (0, 0);
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            masks += usize::from(comm.trim() == "chitti-masks");
            // A thread may end meanwhile; one still there must say where it is.
            elsewhere += usize::from(match std::fs::read_link(task.path().join("ns/mnt")) {
                Ok(ns) => ns != own,
                Err(_) => task.path().exists(),
            });
        }
        (masks, elsewhere)
    };
    let since = Instant::now();
    while left() != (1, 0) && since.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (masks, elsewhere) = left();
    assert!(
        masks == 1 && elsewhere == 0,
        "5 s after the calls, the server has {masks} masks thread(s) (one: the next call's) \
         and {elsewhere} thread(s) in another mount namespace"
    );
}

/// A root call's mount namespace, made by the server's masks thread and joined by the
/// command, is held past the command by a ring the call keeps until it is over (see
/// `sandbox::linux::namespace_release`): once the call has returned, the kernel tears the
/// namespace down. A ring the server kept would leave one namespace behind per call.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_s_mount_namespace_goes_away_after_the_call() {
    if !chitti::sandbox::credentials_can_wait(chitti::sandbox::Backend::Landlock, true) {
        eprintln!(
            "SKIP: a call's namespace is made on a thread of the server's only when run by \
             root on Linux 6.9 or later"
        );
        return;
    }
    ensure_backend("landlock");
    let server = Server::start(&["--backend", "landlock"]).await;
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let release = server.fx.ws.join("release");
    let command = format!(
        "sleep {secs} & i=0; while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.05; \
         i=$((i+1)); done; echo released"
    );
    let call = server.bash(&command);
    let look = async {
        let mut pid = None;
        let ran = eventually(Duration::from_secs(30), || {
            pid = sleepers(&secs).first().copied();
            pid.is_some()
        })
        .await;
        assert!(ran, "the call's sleep never ran");
        let seen = pid
            .and_then(common::mount_namespace_of)
            .map(|(id, other)| (id, other, common::mount_namespace_exists(id)));
        std::fs::write(&release, "").unwrap();
        seen
    };
    let (called, seen) = tokio::join!(call, look);
    assert!(called.text.contains("released"), "{called:?}");
    let Some((id, other, visible)) = seen else {
        eprintln!("SKIP: this kernel cannot name a mount namespace by ID (Linux 6.11)");
        return;
    };
    assert!(
        other,
        "a root call's command runs in the server's own mount namespace"
    );
    assert!(
        matches!(visible, Ok(true)),
        "cannot list the call's namespace: {visible:?}"
    );
    let gone = eventually(Duration::from_secs(10), || {
        matches!(common::mount_namespace_exists(id), Ok(false))
    })
    .await;
    assert!(
        gone,
        "the call's mount namespace is still there 10 s after the call: {:?}",
        common::mount_namespace_exists(id)
    );
}

/// `chitti mcp` started for a client that speaks the protocol itself (raw JSON lines on
/// its stdin), with `stdout` as its standard output.
fn raw_server(fx: &Fixture, stdout: Stdio) -> std::process::Child {
    std::process::Command::new(chitti_bin())
        .args(["mcp", "-w"])
        .arg(&fx.ws)
        .current_dir(&fx.ws)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &fx.home)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .expect("start chitti mcp")
}

/// A raw server whose one call (id 2) runs `command` with `execute_bash`, and its stdin;
/// whether `sleep {secs}` was seen running within 10 s.
fn raw_server_running(
    fx: &Fixture,
    command: &str,
    secs: &str,
) -> (std::process::Child, std::process::ChildStdin, bool) {
    use std::io::Write;
    let mut server = raw_server(fx, Stdio::null());
    let mut stdin = server.stdin.take().unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "execute_bash", "arguments": {"command": command}}});
    for message in handshake().into_iter().chain([call]) {
        writeln!(stdin, "{message}").unwrap();
    }
    let started = wait_until(Duration::from_secs(10), || !sleepers(secs).is_empty());
    (server, stdin, started)
}

/// What a raw client sends first: `initialize` (id 1), then `notifications/initialized`.
fn handshake() -> [Value; 2] {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

/// A client that closes stdin is gone: its running commands are killed at once, not left
/// to finish while the session winds down (rmcp waits up to 5 s for calls in flight).
#[test]
fn closing_stdin_kills_running_commands() {
    let fx = Fixture::new();
    // Long enough to be caught running, short enough to finish inside rmcp's 5 s wait.
    let secs = format!("3.{}", &unique_sleep()[1..]);
    let _reaper = SleepReaper(secs.clone());
    let command = format!("sleep {secs}; echo > late");
    let (server, stdin, started) = raw_server_running(&fx, &command, &secs);
    drop(stdin);
    let (exited, _) = exited_within(server, Duration::from_secs(15));
    assert!(started, "the command never started");
    assert!(exited, "the server did not exit after its stdin closed");
    assert!(
        sleepers(&secs).is_empty(),
        "the command outlived the server"
    );
    assert!(
        !fx.ws("late").exists(),
        "the command ran to its end after the client had closed stdin"
    );
}

/// A server stopped by a signal kills its running command and exits 128+N, as `sandbox
/// exec` does; Ctrl-\ (SIGQUIT) and the user signals stop it in the same order.
#[test]
fn a_signal_stops_the_server_in_order_with_128_plus_n() {
    for signal in [libc::SIGTERM, libc::SIGQUIT, libc::SIGUSR1] {
        let fx = Fixture::new();
        let secs = unique_sleep();
        let _reaper = SleepReaper(secs.clone());
        // Its stdin kept open: closed, it would stop the server by itself.
        let (server, _stdin, started) = raw_server_running(&fx, &format!("sleep {secs}"), &secs);
        unsafe { libc::kill(server.id() as i32, signal) };
        let (exited, out) = exited_within(server, Duration::from_secs(20));
        let status = out.status;
        assert!(started, "the command never started");
        assert!(exited, "signal {signal}: the server did not exit");
        assert_eq!(
            status.code(),
            Some(128 + signal),
            "signal {signal}: {status:?}"
        );
        assert!(
            sleepers(&secs).is_empty(),
            "signal {signal}: the command outlived the server"
        );
    }
}

/// A request rmcp cannot parse still gets the right JSON-RPC error: invalid params
/// (-32602) saying what is wrong for a malformed `tools/call`, method not found (-32601)
/// for an unknown method. Spoken raw, since a typed client cannot send either.
#[test]
fn malformed_requests_get_json_rpc_errors_that_say_what_is_wrong() {
    use std::io::{BufRead, Write};
    let fx = Fixture::new();
    let mut server = raw_server(&fx, Stdio::piped());
    let mut stdin = server.stdin.take().unwrap();
    let stdout = std::io::BufReader::new(server.stdout.take().unwrap());
    let (lines, answers) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let call = |id: u32, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    for message in handshake().into_iter().chain([
        call(2, json!({"tool": "execute_bash"})),
        call(
            3,
            json!({"name": "execute_bash", "arguments": "echo > made"}),
        ),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/run", "params": {}}),
    ]) {
        writeln!(stdin, "{message}").unwrap();
    }
    let mut errors = std::collections::BTreeMap::new();
    while errors.len() < 3 {
        let line = answers
            .recv_timeout(Duration::from_secs(20))
            .expect("an answer to every request within 20 s");
        let answer: Value = serde_json::from_str(&line).expect("JSON on stdout");
        if let Some(id) = answer["id"].as_u64().filter(|&id| id > 1) {
            errors.insert(id, answer["error"].clone());
        }
    }
    drop(stdin);
    let _ = server.wait();
    let expect = |id: u64, code: i64, says: &str| {
        assert_eq!(errors[&id]["code"], code, "{id}: {}", errors[&id]);
        let message = errors[&id]["message"].as_str().unwrap();
        assert!(message.contains(says), "{id}: {message}");
    };
    expect(2, -32602, "missing field `name`");
    expect(3, -32602, "expected a map");
    expect(4, -32601, "unknown method `tools/run`");
    assert!(!fx.ws("made").exists(), "a malformed call ran");
}
