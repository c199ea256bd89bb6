//! `chitti run` end to end: the real binary, the real sandbox, and a loopback server
//! speaking each model API's wire format from a script. Every security check is decided
//! outside the sandbox: files that did (not) appear, what reached the "model".

mod common;
#[path = "common/model_server.rs"]
mod model_server;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{marker, Fixture, PATH};
use model_server::{ModelServer, Recorded, Reply};
use serde_json::{json, Value};

const MODEL: &str = "test-model";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `chitti run` against `server`, in the fixture's workspace, with the decoy HOME, a
/// config that retries fast, and `stdin` as standard input. It runs in a new session,
/// so it has no terminal to ask on and must read answers from stdin.
struct Agent<'a> {
    fx: &'a Fixture,
    provider: &'a str,
    server: &'a ModelServer,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: String,
    events: PathBuf,
}

impl<'a> Agent<'a> {
    fn new(fx: &'a Fixture, provider: &'a str, server: &'a ModelServer) -> Agent<'a> {
        let config = fx.home.join(".config/chitti/config.toml");
        common::write(&config, "max_retries = 2\nrequest_timeout_secs = 2\n");
        Agent {
            fx,
            provider,
            server,
            args: Vec::new(),
            env: vec![(key_var(provider).into(), "test-key-not-secret".into())],
            stdin: String::new(),
            events: fx.root.join("events.jsonl"),
        }
    }

    fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    fn stdin(mut self, text: &str) -> Self {
        self.stdin = text.into();
        self
    }

    fn events_at(mut self, path: &str) -> Self {
        self.events = PathBuf::from(path);
        self
    }

    fn config(self, text: &str) -> Self {
        common::write(&self.fx.home.join(".config/chitti/config.toml"), text);
        self
    }

    fn run(&self, prompt: &str) -> Run {
        let mut cmd = self.command("run");
        cmd.arg(prompt);
        let mut child = cmd.spawn().expect("spawn chitti run");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(self.stdin.as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let run = Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        eprintln!("--- chitti run stderr ---\n{}", run.stderr);
        run
    }

    /// `chitti chat`, started; the caller writes its input.
    fn chat(&self) -> std::process::Child {
        self.command("chat").spawn().expect("spawn chitti chat")
    }

    fn command(&self, subcommand: &str) -> Command {
        let base_url = match self.provider {
            "openai" => format!("{}/v1", self.server.url),
            _ => self.server.url.clone(),
        };
        let mut cmd = Command::new(common::chitti_bin());
        cmd.args([
            subcommand,
            "--provider",
            self.provider,
            "--model",
            MODEL,
            "--base-url",
            &base_url,
        ])
        .arg("--events")
        .arg(&self.events)
        .args(&self.args)
        .current_dir(&self.fx.ws)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &self.fx.home)
        .env("LANG", "C.UTF-8")
        .envs(self.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        // No controlling terminal: approvals come from stdin.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        cmd
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("each event is one JSON line"))
            .collect()
    }
}

fn key_var(provider: &str) -> &'static str {
    if provider == "gemini" {
        "GEMINI_API_KEY"
    } else {
        "OPENAI_API_KEY"
    }
}

// --- Gemini wire format --------------------------------------------------------------

fn gemini_calls(calls: &[(Option<&str>, &str, Value, Option<&str>)]) -> Value {
    let parts: Vec<Value> = calls
        .iter()
        .map(|(id, name, args, signature)| {
            let mut call = json!({"name": name, "args": args});
            if let Some(id) = id {
                call["id"] = json!(id);
            }
            let mut part = json!({"functionCall": call});
            if let Some(sig) = signature {
                part["thoughtSignature"] = json!(sig);
            }
            part
        })
        .collect();
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
           "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10}})
}

fn gemini_text(text: &str) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
           "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 5}})
}

fn bash(command: &str) -> Value {
    json!({"command": command})
}

/// The functionResponse parts of a Gemini request's last content.
fn gemini_responses(request: &Recorded) -> Vec<Value> {
    let contents = request.body["contents"].as_array().expect("contents");
    let last = contents.last().unwrap();
    assert_eq!(last["role"], "user");
    last["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["functionResponse"].clone())
        .collect()
}

fn gemini_parallel_calls(stream: bool) {
    let fx = Fixture::new();
    common::write(&fx.ws("notes.txt"), "hello\n");
    let first = gemini_calls(&[
        (
            Some("id-1"),
            "execute_bash",
            bash("echo from-bash"),
            Some("c2lnLW9uZQ=="),
        ),
        (None, "read_file", json!({"path": "notes.txt"}), None),
    ]);
    let script = if stream {
        // The reply split over two chunks, the signature on the second.
        let mut a = first.clone();
        let mut b = first.clone();
        a["candidates"][0]["content"]["parts"] =
            json!([first["candidates"][0]["content"]["parts"][0]]);
        b["candidates"][0]["content"]["parts"] =
            json!([first["candidates"][0]["content"]["parts"][1]]);
        vec![
            Reply::Sse(vec![a, b]),
            Reply::Sse(vec![gemini_text("All "), gemini_text("done.")]),
        ]
    } else {
        vec![
            Reply::Json(200, first.clone()),
            Reply::Json(200, gemini_text("All done.")),
        ]
    };
    let server = ModelServer::start(script);
    let mut agent = Agent::new(&fx, "gemini", &server)
        .arg("--approval")
        .arg("auto-sandboxed");
    if !stream {
        agent = agent.arg("--no-stream");
    }
    let run = agent.run("look around");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "All done.\n", "only the answer goes to stdout");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let method = if stream {
        "streamGenerateContent?alt=sse"
    } else {
        "generateContent"
    };
    assert_eq!(requests[0].path, format!("/v1beta/models/{MODEL}:{method}"));
    assert_eq!(
        requests[0].header("x-goog-api-key"),
        Some("test-key-not-secret")
    );
    let body = &requests[0].body;
    assert!(body["systemInstruction"]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("sandbox"));
    let names: Vec<&str> = body["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "execute_bash",
            "read_file",
            "list_dir",
            "write_file",
            "edit_file"
        ]
    );

    // The model's parts come back exactly as sent, signature included.
    let echoed = &requests[1].body["contents"][1];
    assert_eq!(echoed["role"], "model");
    assert_eq!(echoed["parts"], first["candidates"][0]["content"]["parts"]);
    // One functionResponse per call, in order; the id only where the model gave one.
    let responses = gemini_responses(&requests[1]);
    assert_eq!(responses.len(), 2);
    assert_eq!(responses[0]["name"], "execute_bash");
    assert_eq!(responses[0]["id"], "id-1");
    assert!(responses[0]["response"]["output"]
        .as_str()
        .unwrap()
        .contains("from-bash"));
    assert_eq!(responses[1]["name"], "read_file");
    assert!(responses[1].get("id").is_none());
    assert!(responses[1]["response"]["output"]
        .as_str()
        .unwrap()
        .contains("hello"));
    assert!(run.stderr.contains("2 tool calls"), "{}", run.stderr);
}

#[test]
fn gemini_parallel_calls_keep_signatures_and_ids() {
    gemini_parallel_calls(false);
}

#[test]
fn gemini_streaming_parallel_calls_keep_signatures_and_ids() {
    gemini_parallel_calls(true);
}

// --- OpenAI-compatible wire format ---------------------------------------------------

fn openai_calls(calls: &[(&str, &str, &str)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls},
           "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 50, "completion_tokens": 7}})
}

fn openai_text(text: &str) -> Value {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
}

/// The role:tool messages at the end of an OpenAI request.
fn openai_tool_messages(request: &Recorded) -> Vec<Value> {
    let messages = request.body["messages"].as_array().unwrap();
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

#[test]
fn openai_parallel_calls_are_answered_by_id() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            openai_calls(&[
                ("call_a", "execute_bash", r#"{"command": "echo alpha"}"#),
                ("call_b", "list_dir", r#"{"path": "."}"#),
                ("call_c", "read_file", r#"{"path": "x""#),
            ]),
        ),
        Reply::Json(200, openai_text("Finished.")),
    ]);
    let run = Agent::new(&fx, "openai", &server)
        .arg("--approval")
        .arg("auto-sandboxed")
        .arg("--no-stream")
        .run("go");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "Finished.\n");
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer test-key-not-secret")
    );
    assert_eq!(requests[0].body["model"], MODEL);
    assert_eq!(requests[0].body["tools"][0]["type"], "function");
    let tools = openai_tool_messages(&requests[1]);
    let ids: Vec<&str> = tools
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_a", "call_b", "call_c"]);
    assert!(tools[0]["content"].as_str().unwrap().contains("alpha"));
    // Bad JSON from the model becomes an error the model can read, not a crash.
    assert!(
        tools[2]["content"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{}",
        tools[2]
    );
    // The assistant message is echoed with the arguments exactly as the model wrote them.
    let assistant = &requests[1].body["messages"][2];
    assert_eq!(
        assistant["tool_calls"][2]["function"]["arguments"],
        r#"{"path": "x""#
    );
}

/// A stream that breaks off mid-answer (no finish_reason, no [DONE]) is never taken for
/// an answer. `run` shows a reply only once it is whole, so nobody saw the first part: it
/// is asked for again, and the answer is the whole second reply.
#[test]
fn an_openai_stream_cut_off_midway_is_not_an_answer() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Sse(vec![
            json!({"choices": [{"index": 0, "delta": {"content": "Yes, it is safe to delete the"}}]}),
        ]),
        Reply::Sse(vec![
            json!({"choices": [{"index": 0, "delta": {"content": "No."}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ]),
    ]);
    let run = Agent::new(&fx, "openai", &server).run("is it safe?");
    assert_cut_off_and_asked_again(&run, &server, "No.\n");
}

/// A run whose streamed reply was cut off after some text: reported, asked again, and
/// only the second, whole reply is the answer.
fn assert_cut_off_and_asked_again(run: &Run, server: &ModelServer, answer: &str) {
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, answer, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the stream ended before the reply was complete"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("retrying"), "{}", run.stderr);
    assert_eq!(server.requests().len(), 2, "{}", run.stderr);
}

/// The same for Gemini, whose last chunk carries the finishReason.
#[test]
fn a_gemini_stream_cut_off_midway_is_not_an_answer() {
    let fx = Fixture::new();
    let mut partial = gemini_text("Yes, it is safe to delete the");
    partial["candidates"][0]
        .as_object_mut()
        .unwrap()
        .remove("finishReason");
    let server = ModelServer::start(vec![
        Reply::Sse(vec![partial]),
        Reply::Sse(vec![gemini_text("No.")]),
    ]);
    let run = Agent::new(&fx, "gemini", &server).run("is it safe?");
    assert_cut_off_and_asked_again(&run, &server, "No.\n");
}

/// `chat` streams text to the terminal as it arrives: a reply cut off after some of it
/// was shown is an error, not asked again (a second reply would follow the first half).
#[test]
fn a_chat_reply_cut_off_after_it_was_shown_is_not_asked_again() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Sse(vec![
            json!({"choices": [{"index": 0, "delta": {"content": "Yes, it is safe to delete the"}}]}),
        ]),
        Reply::Sse(vec![
            json!({"choices": [{"index": 0, "delta": {"content": "second reply"}}]}),
            json!("[DONE]"),
        ]),
    ]);
    let mut child = Agent::new(&fx, "openai", &server).chat();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"is it safe?\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stderr.contains("the stream ended before the reply was complete"),
        "{stderr}"
    );
    assert!(!stdout.contains("second reply"), "{stdout}");
    assert_eq!(server.requests().len(), 1, "{stderr}");
}

/// A reply that stopped at the model's output token limit is not an answer: `run` prints
/// what there is, says it is incomplete, and exits 1; the event log says `cut_off`.
#[test]
fn an_answer_cut_off_at_the_token_limit_is_not_taken_for_a_whole_one() {
    let fx = Fixture::new();
    for (provider, reply) in [
        (
            "openai",
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "partial ans"},
                "finish_reason": "length"}]}),
        ),
        ("gemini", {
            let mut r = gemini_text("partial ans");
            r["candidates"][0]["finishReason"] = json!("MAX_TOKENS");
            r
        }),
    ] {
        let server = ModelServer::start(vec![Reply::Json(200, reply)]);
        let log = fx.root.join(format!("{provider}-events.jsonl"));
        let run = Agent::new(&fx, provider, &server)
            .arg("--no-stream")
            .events_at(log.to_str().unwrap())
            .run("explain");
        assert_eq!(run.code, Some(1), "{provider}: {}", run.stderr);
        assert_eq!(run.stdout, "partial ans\n", "{provider}");
        assert!(
            run.stderr
                .contains("cut off at the model's output token limit"),
            "{provider}: {}",
            run.stderr
        );
        let events = std::fs::read_to_string(&log).unwrap();
        assert!(events.contains(r#""how":"cut_off""#), "{events}");
    }
}

/// A reply that broke off before any of its text was passed on was seen by no one: the
/// request is sent again, and the user gets one whole reply.
#[test]
fn a_reply_cut_off_before_anything_was_shown_is_asked_again() {
    let fx = Fixture::new();
    // Gemini, not streamed: the connection closes half-way through the body.
    let server = ModelServer::start(vec![
        Reply::BrokenOff(gemini_text("lost")),
        Reply::Json(200, gemini_text("recovered")),
    ]);
    let run = Agent::new(&fx, "gemini", &server)
        .arg("--no-stream")
        .run("hello");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "recovered\n");
    assert_eq!(server.requests().len(), 2);
    assert!(
        run.stderr.contains("the reply was cut off"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("retrying"), "{}", run.stderr);

    // OpenAI, streamed: half a tool call and no end; nothing was shown, nothing runs.
    let chunk = |delta: Value| json!({"choices": [{"index": 0, "delta": delta}]});
    let server = ModelServer::start(vec![
        Reply::Sse(vec![chunk(json!({"tool_calls": [{"index": 0, "id": "c1",
            "type": "function", "function": {"name": "execute_bash",
            "arguments": "{\"command\": \"touch half"}}]}))]),
        Reply::Sse(vec![
            chunk(json!({"content": "whole answer"})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!("[DONE]"),
        ]),
    ]);
    let run = Agent::new(&fx, "openai", &server)
        .arg("--approval")
        .arg("auto-sandboxed")
        .run("hello");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "whole answer\n");
    assert_eq!(server.requests().len(), 2);
    assert!(!fx.ws("half").exists(), "a cut-off call ran");
    // A stream with nothing in it (no message, no end): asked again, not an empty answer.
    let server = ModelServer::start(vec![
        Reply::Sse(vec![]),
        Reply::Sse(vec![
            chunk(json!({"content": "whole answer"})),
            json!("[DONE]"),
        ]),
    ]);
    let run = Agent::new(&fx, "openai", &server).run("hello");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "whole answer\n");
    assert!(
        run.stderr.contains("without a reply in it"),
        "{}",
        run.stderr
    );
    // Bounded: a reply that keeps breaking off is an error in the end.
    let server = ModelServer::start(vec![
        Reply::BrokenOff(gemini_text("lost")),
        Reply::BrokenOff(gemini_text("lost")),
        Reply::BrokenOff(gemini_text("lost")),
        Reply::Json(200, gemini_text("too late")),
    ]);
    let run = Agent::new(&fx, "gemini", &server)
        .arg("--no-stream")
        .run("hello");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(
        server.requests().len(),
        3,
        "max_retries = 2: three attempts"
    );
}

#[test]
fn openai_streaming_calls_are_assembled_and_answered() {
    let fx = Fixture::new();
    let chunk = |delta: Value| json!({"choices": [{"index": 0, "delta": delta}]});
    let server = ModelServer::start(vec![
        Reply::Sse(vec![
            chunk(json!({"role": "assistant", "content": "Checking."})),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "s1", "type": "function", "function": {"name": "execute_bash", "arguments": "{\"comm"}}]}),
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "and\": \"echo streamed\"}"}}]}),
            ),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            json!("[DONE]"),
        ]),
        Reply::Sse(vec![
            chunk(json!({"content": "Done "})),
            chunk(json!({"content": "streaming."})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!("[DONE]"),
        ]),
    ]);
    let run = Agent::new(&fx, "openai", &server)
        .arg("--approval")
        .arg("auto-sandboxed")
        .run("go");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "Done streaming.\n");
    assert!(
        run.stderr.contains("Checking."),
        "commentary goes to stderr: {}",
        run.stderr
    );
    let requests = server.requests();
    assert_eq!(requests[0].body["stream"], true);
    let tools = openai_tool_messages(&requests[1]);
    assert_eq!(tools[0]["tool_call_id"], "s1");
    assert!(tools[0]["content"].as_str().unwrap().contains("streamed"));
}

// --- The sandbox holds under the agent -------------------------------------------------

fn escape_attempt_is_blocked(provider: &str) {
    let fx = Fixture::new();
    let secret = marker("SSH-KEY");
    common::write(&fx.home.join(".ssh/id_ed25519"), &secret);
    let api_key = marker("API-KEY");
    let outside = fx.outside.join("pwned");
    let command = format!(
        "echo pwned > {out}; cat ~/.ssh/id_ed25519; env; echo ran-to-the-end",
        out = outside.display()
    );
    let first = match provider {
        "gemini" => gemini_calls(&[(Some("e1"), "execute_bash", bash(&command), None)]),
        _ => openai_calls(&[("e1", "execute_bash", &bash(&command).to_string())]),
    };
    let last = if provider == "gemini" {
        gemini_text("ok")
    } else {
        openai_text("ok")
    };
    let server = ModelServer::start(vec![Reply::Json(200, first), Reply::Json(200, last)]);
    let run = Agent::new(&fx, provider, &server)
        .env(key_var(provider), &api_key)
        .env("GITHUB_TOKEN", &marker("GH-TOKEN"))
        .arg("--approval")
        .arg("auto-sandboxed")
        .arg("--no-stream")
        .run("try to escape");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        !outside.exists(),
        "the sandboxed command wrote outside the workspace"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let sent_back = &requests[1].raw_body;
    assert!(
        sent_back.contains("ran-to-the-end"),
        "the command did not run: {sent_back}"
    );
    assert!(sent_back.contains("PATH="), "env did not run: {sent_back}");
    assert!(
        !sent_back.contains(&secret),
        "a credential reached the model"
    );
    assert!(
        !sent_back.contains(&api_key),
        "the API key was visible in the sandbox"
    );
    assert!(
        !sent_back.contains("GH-TOKEN"),
        "a token was visible in the sandbox"
    );
}

#[test]
fn gemini_escape_attempt_through_execute_bash_is_blocked() {
    escape_attempt_is_blocked("gemini");
}

#[test]
fn openai_escape_attempt_through_execute_bash_is_blocked() {
    escape_attempt_is_blocked("openai");
}

#[test]
fn file_tools_cannot_leave_the_workspace() {
    let fx = Fixture::new();
    let secret = marker("SECRET");
    common::write(&fx.outside.join("secret.txt"), &secret);
    std::os::unix::fs::symlink(&fx.outside, fx.ws("link")).unwrap();
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            openai_calls(&[
                (
                    "r1",
                    "read_file",
                    &json!({"path": fx.outside.join("secret.txt")}).to_string(),
                ),
                ("r2", "read_file", r#"{"path": "link/secret.txt"}"#),
                (
                    "w1",
                    "write_file",
                    r#"{"path": "link/planted.txt", "content": "x"}"#,
                ),
                (
                    "w2",
                    "write_file",
                    r#"{"path": ".git/hooks/pre-commit", "content": "evil"}"#,
                ),
            ]),
        ),
        Reply::Json(200, openai_text("ok")),
    ]);
    std::fs::create_dir_all(fx.ws(".git/hooks")).unwrap();
    let run = Agent::new(&fx, "openai", &server)
        .arg("--approval")
        .arg("auto")
        .arg("--no-stream")
        .run("read the secret");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!fx.outside.join("planted.txt").exists());
    assert!(!fx.ws(".git/hooks/pre-commit").exists());
    let requests = server.requests();
    assert!(
        !requests[1].raw_body.contains(&secret),
        "a file outside the workspace was read"
    );
    let tools = openai_tool_messages(&requests[1]);
    assert_eq!(tools.len(), 4);
}

// --- Approval ------------------------------------------------------------------------

#[test]
fn a_denial_is_fed_back_to_the_model_and_nothing_runs() {
    let fx = Fixture::new();
    let made = fx.ws("made-by-model");
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            gemini_calls(&[(
                Some("d1"),
                "execute_bash",
                bash("touch made-by-model"),
                None,
            )]),
        ),
        Reply::Json(200, gemini_text("Understood, I did not touch it.")),
    ]);
    let run = Agent::new(&fx, "gemini", &server)
        .stdin("n\n")
        .run("make a file");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!made.exists(), "a denied command ran");
    assert!(
        run.stderr.contains("$ touch made-by-model"),
        "the exact command is shown: {}",
        run.stderr
    );
    let responses = gemini_responses(&server.requests()[1]);
    assert!(responses[0]["response"]["error"]
        .as_str()
        .unwrap()
        .contains("denied by the user"));
    assert!(run.stderr.contains("1 denied"), "{}", run.stderr);
}

#[test]
fn end_of_input_means_no_and_yes_runs() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            gemini_calls(&[(Some("y1"), "execute_bash", bash("touch first"), None)]),
        ),
        Reply::Json(
            200,
            gemini_calls(&[(Some("y2"), "execute_bash", bash("touch second"), None)]),
        ),
        Reply::Json(200, gemini_text("done")),
    ]);
    // One "yes", then end of input: the second call is denied.
    let run = Agent::new(&fx, "gemini", &server)
        .stdin("y\n")
        .run("two files");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(fx.ws("first").exists(), "an approved command did not run");
    assert!(!fx.ws("second").exists(), "end of input was taken as yes");
}

#[test]
fn write_approval_shows_a_diff() {
    let fx = Fixture::new();
    common::write(&fx.ws("a.txt"), "one\ntwo\n");
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            gemini_calls(&[(
                Some("w"),
                "edit_file",
                json!({"path": "a.txt", "old_string": "two", "new_string": "TWO"}),
                None,
            )]),
        ),
        Reply::Json(200, gemini_text("edited")),
    ]);
    let run = Agent::new(&fx, "gemini", &server).stdin("y\n").run("edit");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("-two") && run.stderr.contains("+TWO"),
        "{}",
        run.stderr
    );
    assert_eq!(common::read(&fx.ws("a.txt")), "one\nTWO\n");
}

#[test]
fn stop_ends_the_run_without_an_answer() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![Reply::Json(
        200,
        gemini_calls(&[(Some("s"), "execute_bash", bash("touch never"), None)]),
    )]);
    let run = Agent::new(&fx, "gemini", &server).stdin("s\n").run("go");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("stopped by the user"), "{}", run.stderr);
    assert!(!fx.ws("never").exists());
    assert_eq!(server.requests().len(), 1);
    assert_eq!(run.stdout, "");
}

// --- Limits and API errors -----------------------------------------------------------

#[test]
fn max_steps_gives_up() {
    let fx = Fixture::new();
    let script = (0..10)
        .map(|i| {
            Reply::Json(
                200,
                gemini_calls(&[(
                    Some(&format!("m{i}")),
                    "list_dir",
                    json!({"path": "."}),
                    None,
                )]),
            )
        })
        .collect();
    let server = ModelServer::start(script);
    let run = Agent::new(&fx, "gemini", &server)
        .arg("--max-steps")
        .arg("2")
        .run("loop");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("after 2 rounds"), "{}", run.stderr);
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn an_unauthorised_key_is_reported_without_retrying() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![Reply::Json(
        401,
        json!({"error": {"code": 401, "message": "API key not valid.", "status": "UNAUTHENTICATED"}}),
    )]);
    let run = Agent::new(&fx, "gemini", &server).run("hi");
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("HTTP 401") && run.stderr.contains("API key not valid."),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("GEMINI_API_KEY"), "{}", run.stderr);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn rate_limits_and_server_errors_are_retried() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Raw(
            429,
            vec![("retry-after", "1".into())],
            r#"{"error": {"message": "slow down"}}"#.into(),
        ),
        Reply::Json(503, json!({"error": {"message": "overloaded"}})),
        Reply::Json(200, openai_text("made it")),
    ]);
    let run = Agent::new(&fx, "openai", &server)
        .arg("--no-stream")
        .run("hi");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "made it\n");
    assert!(
        run.stderr
            .contains("HTTP 429 (rate limited): slow down; retrying in 1.0 s"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("HTTP 503"), "{}", run.stderr);
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn retries_are_bounded() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Json(500, json!({"error": {"message": "boom"}}));
        5
    ]);
    let run = Agent::new(&fx, "openai", &server)
        .config("max_retries = 1\n")
        .arg("--no-stream")
        .run("hi");
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("gave up after 2 attempts"),
        "{}",
        run.stderr
    );
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_malformed_reply_is_a_clear_error() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![Reply::Raw(200, vec![], "{\"candidates\": [".into())]);
    let run = Agent::new(&fx, "gemini", &server)
        .arg("--no-stream")
        .run("hi");
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("not valid JSON"), "{}", run.stderr);
}

#[test]
fn a_silent_api_times_out() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![Reply::Hang]);
    let started = Instant::now();
    let run = Agent::new(&fx, "openai", &server)
        .config("max_retries = 0\nrequest_timeout_secs = 1\n")
        .run("hi");
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("timed out"), "{}", run.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a 1 s timeout took {:?}",
        started.elapsed()
    );
}

// --- Bad input -----------------------------------------------------------------------

#[test]
fn bad_input_is_refused_before_any_request() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![]);
    let expect_refusal = |agent: Agent, expected: &str| {
        let run = agent.run("hi");
        assert_eq!(run.code, Some(2), "{expected}: {}", run.stderr);
        assert!(
            !agent.events.exists(),
            "{expected}: a refused run left an event log at {}",
            agent.events.display()
        );
        assert!(
            run.stderr.contains(expected),
            "expected `{expected}` in: {}",
            run.stderr
        );
    };
    expect_refusal(
        Agent::new(&fx, "gemini", &server).env("GEMINI_API_KEY", ""),
        "no Gemini API key",
    );
    expect_refusal(
        Agent::new(&fx, "gemini", &server).arg("-w").arg("/"),
        "refusing workspace /",
    );
    expect_refusal(
        Agent::new(&fx, "gemini", &server)
            .arg("-p")
            .arg("no-such-profile"),
        "no-such-profile",
    );
    expect_refusal(
        Agent::new(&fx, "gemini", &server).config("provider = \"gemini\"\nbogus = 1\n"),
        "line 2, column 1",
    );
    expect_refusal(
        Agent::new(&fx, "gemini", &server).events_at("/proc/nope/events.jsonl"),
        "event log",
    );
    assert!(server.requests().is_empty());
}

/// A malformed base URL is bad input, named with where it came from, not a network
/// error retried for seconds.
#[test]
fn a_malformed_base_url_is_refused_at_once() {
    let fx = Fixture::new();
    for url in [
        "http://",
        "http://exa mple.com",
        "http://[::1",
        "ftp://example.com",
    ] {
        let out = Command::new(common::chitti_bin())
            .args([
                "run",
                "--provider",
                "openai",
                "--model",
                MODEL,
                "--base-url",
                url,
            ])
            .arg("--events")
            .arg(fx.root.join("events.jsonl"))
            .arg("hi")
            .current_dir(&fx.ws)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .env("OPENAI_API_KEY", "k")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {stderr}");
        assert!(
            stderr.contains(&format!("--base-url `{url}`")),
            "{url}: {stderr}"
        );
    }
}

// --- Events --------------------------------------------------------------------------

#[test]
fn every_step_is_in_the_event_log() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            gemini_calls(&[(Some("e"), "execute_bash", bash("seq 100000"), None)]),
        ),
        Reply::Json(200, gemini_text("counted")),
    ]);
    let agent = Agent::new(&fx, "gemini", &server)
        .arg("--approval")
        .arg("auto-sandboxed");
    let run = agent.run("count");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let events = agent.events();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session",
            "user",
            "request",
            "response",
            "tool_call",
            "approval",
            "tool_result",
            "request",
            "response",
            "turn_end"
        ]
    );
    let result = &events[6];
    assert_eq!(result["exit_code"], 0);
    assert!(
        result["stdout_truncated_bytes"].as_u64().unwrap() > 0,
        "{result}"
    );
    assert!(result["duration_ms"].is_u64());
    assert_eq!(events[0]["backend"], events[6]["backend"]);
    assert_eq!(events[5]["decision"], "approved");
    assert_eq!(events[5]["asked"], false);
    let usage = &events[9]["stats"]["usage"];
    assert_eq!(usage["input_tokens"], 220);
    assert!(run.stderr.contains("220 tokens in"), "{}", run.stderr);
    let mode = std::fs::metadata(&agent.events).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        mode.permissions().mode() & 0o077,
        0,
        "the event log is private"
    );
}

// --- Unsandboxed calls -----------------------------------------------------------------

#[test]
fn sandbox_false_is_refused_unless_the_config_allows_it() {
    let fx = Fixture::new();
    let escaped = fx.outside.join("escaped");
    let command = format!("touch {}", escaped.display());
    let call = json!({"command": command, "sandbox": false});
    let script = || {
        vec![
            Reply::Json(
                200,
                gemini_calls(&[(Some("u"), "execute_bash", call.clone(), None)]),
            ),
            Reply::Json(200, gemini_text("ok")),
        ]
    };
    // Not allowed by the config: refused, and the user is not even asked.
    let server = ModelServer::start(script());
    let run = Agent::new(&fx, "gemini", &server)
        .arg("--approval")
        .arg("auto")
        .stdin("y\n")
        .run("go");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!escaped.exists());
    let responses = gemini_responses(&server.requests()[1]);
    assert!(
        responses[0]["response"]["error"]
            .as_str()
            .unwrap()
            .contains("not allowed"),
        "{responses:?}"
    );
    assert!(
        !run.stderr.contains("OUTSIDE THE SANDBOX"),
        "{}",
        run.stderr
    );

    // Allowed: asked even in auto mode, and "no" keeps it from running.
    let server = ModelServer::start(script());
    let run = Agent::new(&fx, "gemini", &server)
        .config("allow_unsandboxed = true\n")
        .arg("--approval")
        .arg("auto")
        .stdin("n\n")
        .run("go");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("OUTSIDE THE SANDBOX"), "{}", run.stderr);
    assert!(!escaped.exists(), "a denied unsandboxed command ran");

    // Allowed and approved: it really runs outside.
    let server = ModelServer::start(script());
    let run = Agent::new(&fx, "gemini", &server)
        .config("allow_unsandboxed = true\n")
        .arg("--approval")
        .arg("auto-sandboxed")
        .stdin("y\n")
        .run("go");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        escaped.exists(),
        "an approved unsandboxed command did not run"
    );
}

// --- chat ----------------------------------------------------------------------------

#[test]
fn chat_streams_answers_and_keeps_the_conversation() {
    let fx = Fixture::new();
    let chunk = |delta: Value| json!({"choices": [{"index": 0, "delta": delta}]});
    let server = ModelServer::start(vec![
        Reply::Sse(vec![
            chunk(json!({"content": "first "})),
            chunk(json!({"content": "answer"})),
            json!("[DONE]"),
        ]),
        Reply::Sse(vec![
            chunk(json!({"content": "second answer"})),
            json!("[DONE]"),
        ]),
    ]);
    let agent = Agent::new(&fx, "openai", &server);
    let mut child = agent.chat();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\n\ntwo\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("first answer\n") && stdout.contains("second answer\n"),
        "{stdout}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "an empty line is not a prompt");
    let messages = requests[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(messages[2]["content"], "first answer");
}

#[test]
fn ctrl_c_in_chat_stops_the_turn_not_the_program() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            gemini_calls(&[(
                Some("long"),
                "execute_bash",
                bash("touch started; sleep 4; touch late"),
                None,
            )]),
        ),
        Reply::Json(200, gemini_text("still here")),
    ]);
    let agent = Agent::new(&fx, "gemini", &server)
        .arg("--approval")
        .arg("auto-sandboxed")
        .arg("--no-stream");
    let mut child = agent.chat();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"start something long\n").unwrap();
    assert!(
        common::wait_until(Duration::from_secs(20), || fx.ws("started").exists()),
        "waited 20 s for the command to start"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // The turn ends and the command dies with it; chitti waits for the next prompt.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "Ctrl-C ended chitti chat"
    );
    stdin.write_all(b"are you there?\n/exit\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("still here"), "{stdout}\n{stderr}");
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        !fx.ws("late").exists(),
        "the cancelled command kept running"
    );
    // The model was told the call was cancelled, so the conversation stays valid.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let responses = gemini_responses_before_last_user(&requests[1]);
    assert!(responses.contains("cancel"), "{responses}");
}

/// The text of the functionResponse parts sent before the last user message.
fn gemini_responses_before_last_user(request: &Recorded) -> String {
    let contents = request.body["contents"].as_array().unwrap();
    contents[contents.len() - 2].to_string()
}

#[test]
fn without_a_sandbox_every_command_is_put_to_the_user() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            gemini_calls(&[(Some("n1"), "execute_bash", bash("touch unsandboxed"), None)]),
        ),
        Reply::Json(200, gemini_text("ok")),
    ]);
    let run = Agent::new(&fx, "gemini", &server)
        .arg("--backend")
        .arg("none")
        .arg("--approval")
        .arg("auto")
        .stdin("n\n")
        .run("go");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("UNSANDBOXED"),
        "a loud warning: {}",
        run.stderr
    );
    assert!(run.stderr.contains("OUTSIDE THE SANDBOX"), "{}", run.stderr);
    assert!(!fx.ws("unsandboxed").exists(), "ran without a yes");
    let body = &server.requests()[0].body;
    let system = body["systemInstruction"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(system.contains("WITHOUT a sandbox"), "{system}");
}

#[test]
fn piped_chat_never_takes_a_prompt_line_as_an_answer() {
    let fx = Fixture::new();
    let server = ModelServer::start(vec![
        Reply::Json(
            200,
            gemini_calls(&[(Some("p1"), "execute_bash", bash("touch made"), None)]),
        ),
        Reply::Json(200, gemini_text("not done")),
        Reply::Json(200, gemini_text("second answer")),
    ]);
    // "y" would approve if stdin answered questions; it is the second prompt instead.
    let agent = Agent::new(&fx, "gemini", &server).arg("--no-stream");
    let mut child = agent.chat();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"make a file\ny\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!fx.ws("made").exists(), "a prompt line approved a command");
    assert!(stderr.contains("no terminal to ask on"), "{stderr}");
    assert!(stdout.contains("second answer"), "{stdout}\n{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{stderr}");
    let contents = requests[2].body["contents"].as_array().unwrap();
    assert_eq!(contents.last().unwrap()["parts"][0]["text"], "y");
}

/// Text the model wrote that would drive a terminal: set its title, clear it.
const TERMINAL_CONTROL: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J";

#[test]
fn model_text_cannot_drive_the_terminal() {
    let fx = Fixture::new();
    let mut commentary = gemini_calls(&[(Some("t1"), "list_dir", json!({"path": "."}), None)]);
    commentary["candidates"][0]["content"]["parts"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"text": format!("looking{TERMINAL_CONTROL}")}));
    let server = ModelServer::start(vec![
        Reply::Json(200, commentary),
        Reply::Json(200, gemini_text(&format!("answer{TERMINAL_CONTROL}"))),
    ]);
    let pty = common::Pty::open();
    let agent = Agent::new(&fx, "gemini", &server);
    let mut cmd = agent.command("run");
    cmd.arg("look around")
        .stdin(Stdio::null())
        .stdout(pty.slave_stdio());
    let out = cmd.spawn().unwrap().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let shown = pty.drain();
    assert!(shown.contains("answer"), "{shown:?}");
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "control characters reached the terminal: {shown:?}"
    );
    assert!(shown.contains(r"\u{1b}[2J"), "{shown:?}");
    // Commentary goes to stderr, shown the same way whatever stderr is.
    assert!(stderr.contains(r"looking\u{1b}]0;owned\u{7}"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");

    // Into a pipe, the answer is the model's own text.
    let server = ModelServer::start(vec![Reply::Json(
        200,
        gemini_text(&format!("answer{TERMINAL_CONTROL}")),
    )]);
    let run = Agent::new(&fx, "gemini", &server).run("again");
    assert_eq!(run.stdout, format!("answer{TERMINAL_CONTROL}\n"));
}
