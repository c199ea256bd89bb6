//! The loop against a scripted model and the real sandbox.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::approval::testing::ScriptedAsker;
use super::approval::{Answer, Approval};
use super::events::EventLog;
use super::scripted::{answer, calls, Scripted};
use super::{Agent, TurnEnd};
use crate::cli::ApprovalMode;
use crate::provider::{ErrorKind, Message, ProviderError, Reply};
use crate::sandbox::Backend;
use crate::tools::testing::Fixture;
use crate::tools::Toolbox;

struct Setup {
    fx: Fixture,
    asker: Arc<Mutex<ScriptedAsker>>,
    log: std::path::PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let fx = Fixture::new();
        let log = fx.ws.parent().unwrap().join("events.jsonl");
        Setup {
            fx,
            asker: Arc::new(Mutex::new(ScriptedAsker::default())),
            log,
        }
    }

    fn answers(self, answers: &[Answer]) -> Setup {
        self.asker.lock().unwrap().answers = answers.iter().copied().collect();
        self
    }

    fn agent(
        &self,
        mode: ApprovalMode,
        replies: Vec<Result<Reply, ProviderError>>,
    ) -> Agent<Scripted> {
        self.agent_with(self.fx.toolbox(), mode, replies, 25)
    }

    fn agent_with(
        &self,
        toolbox: Toolbox,
        mode: ApprovalMode,
        replies: Vec<Result<Reply, ProviderError>>,
        max_steps: u32,
    ) -> Agent<Scripted> {
        let events = Arc::new(EventLog::open(&self.log).unwrap());
        Agent::new(
            Scripted::new(replies),
            toolbox,
            "system".into(),
            Approval::new(mode),
            self.asker.clone(),
            events,
            max_steps,
        )
    }

    fn questions(&self) -> Vec<String> {
        self.asker.lock().unwrap().questions.clone()
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

async fn turn(agent: &mut Agent<Scripted>, prompt: &str) -> TurnEnd {
    let mut sink = |_: &str| {};
    agent
        .turn(prompt, &mut sink, &CancellationToken::new())
        .await
}

/// The tool results sent with the last request.
fn last_results(agent: &Agent<Scripted>) -> Vec<crate::provider::ToolOutput> {
    let requests = agent.provider.requests();
    let last = requests.last().unwrap();
    match last.last().unwrap() {
        Message::ToolResults(outputs) => outputs.clone(),
        other => panic!("the last message is not tool results: {other:?}"),
    }
}

#[tokio::test]
async fn a_plain_answer_ends_the_turn() {
    let s = Setup::new();
    let mut agent = s.agent(ApprovalMode::Ask, vec![answer("42")]);
    assert_eq!(
        turn(&mut agent, "the answer?").await,
        TurnEnd::Answer("42".into())
    );
    assert_eq!(agent.history().len(), 2);
    assert_eq!(agent.stats.steps, 1);
    let kinds: Vec<String> = s
        .events()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["user", "request", "response", "turn_end"]);
}

#[tokio::test]
async fn parallel_calls_run_concurrently_and_answer_in_order() {
    let s = Setup::new();
    // Each command waits until the other has started: run one after the other, both
    // would give up and print "alone".
    let rendezvous = |me: &str, other: &str| {
        format!(
            "touch {me}.started; for i in $(seq 100); do [ -e {other}.started ] && echo {me} met && exit 0; \
             sleep 0.05; done; echo {me} alone"
        )
    };
    let mut agent = s.agent(
        ApprovalMode::AutoSandboxed,
        vec![
            calls(&[
                (
                    "c1",
                    "execute_bash",
                    json!({"command": rendezvous("a", "b")}),
                ),
                (
                    "c2",
                    "execute_bash",
                    json!({"command": rendezvous("b", "a")}),
                ),
                ("c3", "list_dir", json!({"path": "."})),
            ]),
            answer("done"),
        ],
    );
    assert_eq!(turn(&mut agent, "go").await, TurnEnd::Answer("done".into()));
    let results = last_results(&agent);
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert!(results[0].text.contains("a met"), "{}", results[0].text);
    assert!(results[1].text.contains("b met"), "{}", results[1].text);
    assert!(results[2].ok, "{}", results[2].text);
    assert!(s.questions().is_empty());
    assert_eq!(agent.stats.tool_calls, 3);
}

/// A reply may ask for any number of calls at once: at most 16 run at a time (a review ran
/// 100 sandboxes at once with one reply).
#[tokio::test]
async fn at_most_sixteen_calls_of_a_reply_run_at_once() {
    let s = Setup::new();
    let command = |n: usize| {
        format!(
            "mkdir -p live && touch live/{n} && ls live | wc -l > most.{n}; sleep 1; rm live/{n}"
        )
    };
    let ids: Vec<String> = (0..20).map(|n| format!("c{n}")).collect();
    let requested: Vec<(&str, &str, serde_json::Value)> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| {
            (
                id.as_str(),
                "execute_bash",
                json!({ "command": command(n) }),
            )
        })
        .collect();
    let mut agent = s.agent(
        ApprovalMode::AutoSandboxed,
        vec![calls(&requested), answer("done")],
    );
    assert_eq!(turn(&mut agent, "go").await, TurnEnd::Answer("done".into()));
    let most = (0..20)
        .map(|n| {
            let seen = std::fs::read_to_string(s.fx.ws.join(format!("most.{n}"))).unwrap();
            seen.trim().parse::<usize>().unwrap()
        })
        .max()
        .unwrap();
    assert!(most <= 16, "{most} calls ran at once");
}

#[tokio::test]
async fn a_denied_call_does_not_run_and_the_model_is_told() {
    let s = Setup::new().answers(&[Answer::No]);
    let marker = s.fx.ws.join("made-by-command");
    let mut agent = s.agent(
        ApprovalMode::Ask,
        vec![
            calls(&[(
                "c1",
                "execute_bash",
                json!({"command": format!("touch {}", marker.display())}),
            )]),
            answer("ok, I will not"),
        ],
    );
    assert_eq!(
        turn(&mut agent, "go").await,
        TurnEnd::Answer("ok, I will not".into())
    );
    assert!(!marker.exists(), "a denied command ran");
    let results = last_results(&agent);
    assert!(!results[0].ok);
    assert!(
        results[0].text.contains("denied by the user"),
        "{}",
        results[0].text
    );
    assert_eq!(agent.stats.denials, 1);
    let questions = s.questions();
    assert_eq!(questions.len(), 1);
    assert!(
        questions[0].contains(&format!("$ touch {}", marker.display())),
        "{}",
        questions[0]
    );
    let approval = s
        .events()
        .into_iter()
        .find(|e| e["event"] == "approval")
        .unwrap();
    assert_eq!(approval["decision"], "denied");
    assert_eq!(approval["asked"], true);
}

#[tokio::test]
async fn stop_ends_the_turn_and_runs_nothing() {
    let s = Setup::new().answers(&[Answer::Yes, Answer::Stop]);
    let (a, b) = (s.fx.ws.join("a"), s.fx.ws.join("b"));
    let mut agent = s.agent(
        ApprovalMode::Ask,
        vec![calls(&[
            ("c1", "write_file", json!({"path": "a", "content": "x"})),
            ("c2", "execute_bash", json!({"command": "touch b"})),
        ])],
    );
    assert_eq!(turn(&mut agent, "go").await, TurnEnd::Stopped);
    assert!(!a.exists() && !b.exists(), "a stopped turn ran something");
    // The history answers every call, so the next turn is valid for the API.
    match agent.history().last().unwrap() {
        Message::ToolResults(outputs) => assert_eq!(outputs.len(), 2),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn always_stops_the_questions_for_that_tool() {
    let s = Setup::new().answers(&[Answer::Always]);
    let mut agent = s.agent(
        ApprovalMode::Ask,
        vec![
            calls(&[("c1", "execute_bash", json!({"command": "echo one > one"}))]),
            calls(&[("c2", "execute_bash", json!({"command": "echo two > two"}))]),
            answer("done"),
        ],
    );
    assert_eq!(turn(&mut agent, "go").await, TurnEnd::Answer("done".into()));
    assert_eq!(s.questions().len(), 1);
    assert!(s.fx.ws.join("one").exists() && s.fx.ws.join("two").exists());
}

/// A reply cut off at the token limit may end in half a call: none of its calls runs, and
/// the model is told why and can send them again.
#[tokio::test]
async fn calls_of_a_reply_cut_off_at_the_token_limit_do_not_run() {
    let s = Setup::new();
    let mut cut = calls(&[
        ("c1", "execute_bash", json!({"command": "echo one > one"})),
        ("c2", "execute_bash", json!({"command": "echo tw"})),
    ]);
    if let Ok(reply) = &mut cut {
        reply.turn.cut_off = true;
    }
    let mut agent = s.agent(ApprovalMode::AutoSandboxed, vec![cut, answer("resent")]);
    assert_eq!(
        turn(&mut agent, "go").await,
        TurnEnd::Answer("resent".into())
    );
    assert!(
        !s.fx.ws.join("one").exists(),
        "a call of a cut-off reply ran"
    );
    let results = last_results(&agent);
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| !r.ok && r.text.contains("cut off at the output token limit")),
        "{results:?}"
    );
}

#[tokio::test]
async fn bad_arguments_are_answered_without_asking() {
    let s = Setup::new();
    let mut agent = s.agent(
        ApprovalMode::Ask,
        vec![
            calls(&[
                ("c1", "execute_bash", json!("{\"command\": \"ls\"")),
                ("c2", "execute_bash", json!({"cmd": "ls"})),
                ("c3", "no_such_tool", json!({})),
            ]),
            answer("sorry"),
        ],
    );
    assert_eq!(
        turn(&mut agent, "go").await,
        TurnEnd::Answer("sorry".into())
    );
    assert!(
        s.questions().is_empty(),
        "asked about calls that cannot run"
    );
    let results = last_results(&agent);
    assert!(
        results[0].text.contains("not valid JSON"),
        "{}",
        results[0].text
    );
    assert!(
        results[1]
            .text
            .contains("missing required argument `command`"),
        "{}",
        results[1].text
    );
    assert!(
        results[2].text.contains("unknown tool"),
        "{}",
        results[2].text
    );
    assert!(results.iter().all(|r| !r.ok));
}

#[tokio::test]
async fn the_step_limit_ends_a_runaway_turn() {
    let s = Setup::new();
    let replies = (0..10)
        .map(|i| calls(&[(&format!("c{i}"), "list_dir", json!({"path": "."}))]))
        .collect();
    let mut agent = s.agent_with(s.fx.toolbox(), ApprovalMode::Ask, replies, 2);
    assert_eq!(turn(&mut agent, "loop").await, TurnEnd::MaxSteps(2));
    assert_eq!(agent.stats.steps, 3);
    match agent.history().last().unwrap() {
        Message::ToolResults(outputs) => assert!(outputs[0].text.contains("step limit")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn without_a_sandbox_every_command_is_asked_even_in_auto_mode() {
    let s = Setup::new().answers(&[Answer::No, Answer::No]);
    let toolbox = Toolbox::new(Arc::clone(&s.fx.policy), Backend::None);
    let mut agent = s.agent_with(
        toolbox,
        ApprovalMode::Auto,
        vec![
            calls(&[
                ("c1", "execute_bash", json!({"command": "touch x"})),
                ("c2", "write_file", json!({"path": "y", "content": "y"})),
                ("c3", "read_file", json!({"path": ".git/config"})),
            ]),
            answer("ok"),
        ],
        25,
    );
    assert_eq!(turn(&mut agent, "go").await, TurnEnd::Answer("ok".into()));
    let questions = s.questions();
    assert_eq!(questions.len(), 2, "{questions:?}");
    assert!(
        questions[0].contains("OUTSIDE THE SANDBOX"),
        "{}",
        questions[0]
    );
    assert!(!s.fx.ws.join("x").exists() && !s.fx.ws.join("y").exists());
    assert!(last_results(&agent)[2].ok, "read-only tools still run");
}

#[tokio::test]
async fn an_unsandboxed_call_is_asked_about_in_auto_sandboxed_mode() {
    let s = Setup::new().answers(&[Answer::Yes]);
    let mut toolbox = s.fx.toolbox();
    toolbox.allow_sandbox_false = true;
    let mut agent = s.agent_with(
        toolbox,
        ApprovalMode::AutoSandboxed,
        vec![
            calls(&[
                ("c1", "execute_bash", json!({"command": "echo inside"})),
                (
                    "c2",
                    "execute_bash",
                    json!({"command": "echo $CHITTI_SANDBOX outside", "sandbox": false}),
                ),
            ]),
            answer("ok"),
        ],
        25,
    );
    assert_eq!(turn(&mut agent, "go").await, TurnEnd::Answer("ok".into()));
    let questions = s.questions();
    assert_eq!(questions.len(), 1, "{questions:?}");
    assert!(questions[0].contains("OUTSIDE THE SANDBOX"));
    assert!(last_results(&agent)[1].text.contains("none outside"));
    // The log names the backend each call ran under.
    let approvals: Vec<_> = s
        .events()
        .into_iter()
        .filter(|e| e["event"] == "approval")
        .collect();
    assert_eq!(approvals.len(), 2);
    assert_eq!(approvals[0]["sandboxed"], true);
    assert_ne!(approvals[0]["backend"], "none");
    assert_eq!(approvals[1]["sandboxed"], false);
    assert_eq!(approvals[1]["backend"], "none");
}

#[tokio::test]
async fn an_api_failure_ends_the_turn_with_its_message() {
    let s = Setup::new();
    let error = ProviderError::new(ErrorKind::Auth, "HTTP 401: bad key");
    let mut agent = s.agent(ApprovalMode::Ask, vec![Err(error.clone())]);
    assert_eq!(turn(&mut agent, "hi").await, TurnEnd::Failed(error));
    let failure = s
        .events()
        .into_iter()
        .find(|e| e["event"] == "api_error")
        .unwrap();
    assert_eq!(failure["kind"], "auth");
}

#[tokio::test]
async fn cancelling_a_turn_kills_the_running_command() {
    let s = Setup::new();
    let late = s.fx.ws.join("late");
    let mut agent = s.agent(
        ApprovalMode::Auto,
        vec![calls(&[(
            "c1",
            "execute_bash",
            json!({"command": "sleep 2; touch late"}),
        )])],
    );
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let mut sink = |_: &str| {};
    assert_eq!(
        agent.turn("go", &mut sink, &cancel).await,
        TurnEnd::Cancelled
    );
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert!(!late.exists(), "the command outlived its cancelled turn");
}
