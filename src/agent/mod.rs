//! The agent loop: send the conversation, run the tool calls the model asks for (each
//! approved as the mode requires, concurrently when there are several), send the
//! results back, until the model answers or the step budget runs out.
//!
//! The agent knows providers and tools only through their interfaces; it never talks
//! to the sandbox directly (execute_bash does).

pub mod approval;
pub mod events;
pub mod instructions;
pub mod preview;
#[cfg(test)]
mod scripted;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::provider::{
    AssistantTurn, FunctionDecl, Message, Provider, ProviderError, Request, ToolCall, ToolOutput,
    Usage,
};
use crate::sandbox::Backend;
use crate::tools::{Tool, ToolResult, Toolbox};
use approval::{Answer, Approval, CallView, SharedAsker};
use events::EventLog;

/// Counts for the end-of-run summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent to the model.
    pub steps: u32,
    pub tool_calls: u32,
    pub denials: u32,
    /// Token counts, when the API reported any.
    pub usage: Option<Usage>,
}

impl Stats {
    pub fn summary(&self, elapsed: Duration) -> String {
        let tokens = match self.usage {
            Some(u) => format!(", {} tokens in, {} out", u.input_tokens, u.output_tokens),
            None => String::new(),
        };
        let count =
            |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{}, {}, {} denied{tokens}, {:.1} s",
            count(self.steps, "step", "steps"),
            count(self.tool_calls, "tool call", "tool calls"),
            self.denials,
            elapsed.as_secs_f64()
        )
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// The model answered without calling tools.
    Answer(String),
    /// The model's answer stopped at its output token limit: the text is incomplete.
    CutOff(String),
    /// The user answered "stop" to an approval question.
    Stopped,
    /// The model was still calling tools after this many rounds.
    MaxSteps(u32),
    /// Ctrl-C (or the caller) cancelled the turn; running commands were killed.
    Cancelled,
    /// The model API failed after its retries.
    Failed(ProviderError),
}

/// What the agent is doing, for the terminal (the event log has the full record).
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// The text of a reply that also calls tools: commentary, not the answer.
    Commentary(&'a str),
    /// A call is about to run: its tool and a one-line summary.
    ToolStart { name: &'a str, summary: &'a str },
    /// A call finished (or was refused): a one-line summary of the result.
    ToolDone {
        name: &'a str,
        ok: bool,
        summary: &'a str,
    },
}

pub type ProgressFn = Box<dyn Fn(Progress<'_>) + Send + Sync>;

pub struct Agent<P: Provider> {
    provider: P,
    progress: Option<ProgressFn>,
    toolbox: Toolbox,
    system: String,
    functions: Vec<FunctionDecl>,
    approval: Approval,
    asker: SharedAsker,
    events: std::sync::Arc<EventLog>,
    max_steps: u32,
    history: Vec<Message>,
    pub stats: Stats,
}

impl<P: Provider> Agent<P> {
    pub fn new(
        provider: P,
        toolbox: Toolbox,
        system: String,
        approval: Approval,
        asker: SharedAsker,
        events: std::sync::Arc<EventLog>,
        max_steps: u32,
    ) -> Agent<P> {
        let functions = toolbox
            .definitions()
            .into_iter()
            .map(|d| FunctionDecl {
                name: d.name,
                description: d.description,
                parameters: d.parameters,
            })
            .collect();
        Agent {
            provider,
            progress: None,
            toolbox,
            system,
            functions,
            approval,
            asker,
            events,
            max_steps,
            history: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Reports progress to `progress` (the terminal), besides the event log.
    pub fn with_progress(mut self, progress: ProgressFn) -> Agent<P> {
        self.progress = Some(progress);
        self
    }

    fn report(&self, progress: Progress<'_>) {
        if let Some(report) = &self.progress {
            report(progress);
        }
    }

    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// One user message, and everything the model does about it. `on_text` receives
    /// the model's text as it streams; `cancel` stops the turn (killing running commands).
    pub async fn turn(
        &mut self,
        prompt: &str,
        on_text: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> TurnEnd {
        self.events.log("user", json!({"text": prompt}));
        self.history.push(Message::User(prompt.to_string()));
        let history_at_start = self.history.len();
        let mut rounds = 0;
        loop {
            let Some(reply) = self.ask_model(on_text, cancel).await else {
                // Cancelled before the model answered: forget the unanswered message if
                // nothing else happened, so the next turn starts clean.
                if self.history.len() == history_at_start {
                    self.history.pop();
                }
                return self.end(TurnEnd::Cancelled);
            };
            let turn = match reply {
                Ok(turn) => turn,
                Err(e) => {
                    // As above: a message the model never saw is not kept.
                    if self.history.len() == history_at_start {
                        self.history.pop();
                    }
                    return self.end(TurnEnd::Failed(e));
                }
            };
            self.history.push(Message::Assistant(turn.clone()));
            if turn.calls.is_empty() {
                return self.end(if turn.cut_off {
                    TurnEnd::CutOff(turn.text)
                } else {
                    TurnEnd::Answer(turn.text)
                });
            }
            if rounds == self.max_steps {
                // The model wants more; answer its calls so the history stays valid.
                let outputs = none_run(&turn.calls, "the step limit was reached");
                self.history.push(Message::ToolResults(outputs));
                return self.end(TurnEnd::MaxSteps(self.max_steps));
            }
            rounds += 1;
            if !turn.text.trim().is_empty() {
                self.report(Progress::Commentary(&turn.text));
            }
            if turn.cut_off {
                // The reply stopped at the token limit: its last call may be cut short,
                // and the model had not finished. None runs; the model is told why.
                self.events
                    .log("calls_cut_off", json!({"calls": turn.calls.len()}));
                let outputs = none_run(
                    &turn.calls,
                    "your reply was cut off at the output token limit, so these calls may \
                     be incomplete; send them again, shorter (write a large file in parts)",
                );
                self.history.push(Message::ToolResults(outputs));
                continue;
            }
            let (outputs, end) = self.run_calls(&turn.calls, cancel).await;
            self.history.push(Message::ToolResults(outputs));
            if let Some(end) = end {
                return self.end(end);
            }
        }
    }

    fn end(&self, end: TurnEnd) -> TurnEnd {
        let (how, detail) = match &end {
            TurnEnd::Answer(text) => ("answer", json!(text)),
            TurnEnd::CutOff(text) => ("cut_off", json!(text)),
            TurnEnd::Stopped => ("stopped", Value::Null),
            TurnEnd::MaxSteps(n) => ("max_steps", json!(n)),
            TurnEnd::Cancelled => ("cancelled", Value::Null),
            TurnEnd::Failed(e) => ("failed", json!({"kind": e.kind, "message": e.message})),
        };
        self.events.log(
            "turn_end",
            json!({"how": how, "detail": detail, "stats": {
                "steps": self.stats.steps, "tool_calls": self.stats.tool_calls,
                "denials": self.stats.denials, "usage": self.stats.usage,
            }}),
        );
        end
    }

    /// One request; None when cancelled.
    async fn ask_model(
        &mut self,
        on_text: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> Option<Result<AssistantTurn, ProviderError>> {
        self.stats.steps += 1;
        let step = self.stats.steps;
        self.events.log(
            "request",
            json!({"step": step, "provider": self.provider.name(), "model": self.provider.model(),
                   "messages": self.history.len() + 1, "tools": self.functions.len()}),
        );
        let started = Instant::now();
        let request = Request {
            system: &self.system,
            messages: &self.history,
            tools: &self.functions,
        };
        let reply = tokio::select! {
            reply = self.provider.complete(request, on_text) => reply,
            () = cancel.cancelled() => return None,
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        Some(match reply {
            Ok(reply) => {
                if let Some(usage) = reply.usage {
                    self.stats
                        .usage
                        .get_or_insert_with(Usage::default)
                        .add(usage);
                }
                let calls: Vec<Value> = reply
                    .turn
                    .calls
                    .iter()
                    .map(|c| json!({"id": c.id, "name": c.name, "args": c.args}))
                    .collect();
                self.events.log(
                    "response",
                    json!({"step": step, "text": reply.turn.text, "tool_calls": calls,
                           "usage": reply.usage, "duration_ms": duration_ms}),
                );
                Ok(reply.turn)
            }
            Err(e) => {
                self.events.log(
                    "api_error",
                    json!({"step": step, "kind": e.kind, "message": e.message, "duration_ms": duration_ms}),
                );
                Err(e)
            }
        })
    }

    /// Approves each call in order (asking the user when needed), then runs the approved
    /// ones concurrently. Returns one output per call, in order.
    async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        cancel: &CancellationToken,
    ) -> (Vec<ToolOutput>, Option<TurnEnd>) {
        let mut plans = Vec::with_capacity(calls.len());
        let mut stopped = false;
        for call in calls {
            self.stats.tool_calls += 1;
            self.events.log(
                "tool_call",
                json!({"id": call.id, "name": call.name, "args": call.args}),
            );
            // After a "stop" nothing more is asked or run.
            if !stopped {
                let plan = self.plan(call, cancel).await;
                stopped = matches!(plan, Plan::Stop);
                plans.push(plan);
            }
        }
        if cancel.is_cancelled() {
            let outputs = none_run(calls, "the user cancelled this turn");
            return (outputs, Some(TurnEnd::Cancelled));
        }
        if stopped {
            let outputs = none_run(calls, "the user stopped this turn");
            return (outputs, Some(TurnEnd::Stopped));
        }

        let this = &*self;
        // A model may ask for any number of calls at once: at most as many run at a time
        // as the MCP server allows, the rest wait their turn, in order.
        let slots = tokio::sync::Semaphore::new(crate::mcp::MAX_CALLS_AT_ONCE);
        let slots = &slots;
        let runs = calls.iter().zip(plans).map(|(call, plan)| async move {
            match plan {
                Plan::Run { summary } => {
                    let _slot = slots.acquire().await;
                    this.report(Progress::ToolStart {
                        name: &call.name,
                        summary: &summary,
                    });
                    let started = Instant::now();
                    let result = this
                        .toolbox
                        .call_with_cancel(&call.name, call.args.clone(), cancel.cancelled())
                        .await;
                    let elapsed = started.elapsed();
                    log_result(&this.events, call, &result, elapsed);
                    let done = format!(
                        "{} ({:.1} s)",
                        result.text.lines().next().unwrap_or_default(),
                        elapsed.as_secs_f64()
                    );
                    this.report(Progress::ToolDone {
                        name: &call.name,
                        ok: result.ok,
                        summary: &done,
                    });
                    output(call, result.ok, result.text)
                }
                Plan::Deny(text) => {
                    this.report(Progress::ToolDone {
                        name: &call.name,
                        ok: false,
                        summary: "denied by the user",
                    });
                    output(call, false, text)
                }
                Plan::Stop => unreachable!("a stopped turn runs nothing"),
            }
        });
        let outputs = futures::future::join_all(runs).await;
        let end = cancel.is_cancelled().then_some(TurnEnd::Cancelled);
        (outputs, end)
    }

    /// Whether a call runs: invalid calls are answered without asking (they cannot run),
    /// the rest as the approval mode says.
    async fn plan(&mut self, call: &ToolCall, cancel: &CancellationToken) -> Plan {
        // What the terminal shows of the call, even of one that will be refused.
        let shown = crate::tools::normalize_args(&call.name, call.args.clone())
            .map(|args| one_line(&args))
            .unwrap_or_default();
        let Some(tool) = Tool::from_name(&call.name) else {
            return Plan::Run { summary: shown }; // The toolbox lists the real tools.
        };
        let args = match tool.check_args(&call.args) {
            Ok(args) => args,
            Err(_) => return Plan::Run { summary: shown }, // The toolbox says what is wrong.
        };
        if args["sandbox"] == Value::Bool(false) && !self.toolbox.allow_sandbox_false {
            return Plan::Run { summary: shown }; // Refused by the toolbox: no question.
        }
        let view = CallView {
            tool,
            sandboxed: self.is_sandboxed(tool, &args),
            summary: preview::preview(&self.toolbox.policy, tool, &args),
        };
        let decision = if self.approval.must_ask(&view) {
            // The question blocks on the terminal: off the async threads, and abandoned
            // (answered no) if the turn is cancelled meanwhile.
            let asker = std::sync::Arc::clone(&self.asker);
            let question = approval::question(&view);
            let asked = tokio::task::spawn_blocking(move || {
                asker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .ask(&question)
            });
            let answer = tokio::select! {
                joined = asked => joined.unwrap_or(Answer::No),
                () = cancel.cancelled() => Answer::No,
            };
            self.approval.remember(&view, answer);
            approval::Decision {
                answer,
                asked: true,
            }
        } else {
            approval::Decision {
                answer: Answer::Yes,
                asked: false,
            }
        };
        let verdict = match decision.answer {
            Answer::Yes | Answer::Always => "approved",
            Answer::No => "denied",
            Answer::Stop => "stopped",
        };
        self.events.log(
            "approval",
            json!({"id": call.id, "name": call.name, "decision": verdict, "asked": decision.asked,
                   "sandboxed": view.sandboxed, "mode": self.approval.mode(),
                   "backend": if view.sandboxed { self.toolbox.backend.name() } else { "none" }}),
        );
        match decision.answer {
            Answer::Yes | Answer::Always => Plan::Run { summary: shown },
            Answer::No => {
                self.stats.denials += 1;
                Plan::Deny(
                    "denied by the user: this call was not run. Do not repeat it unchanged; \
                     try another way or ask the user."
                        .into(),
                )
            }
            Answer::Stop => {
                self.stats.denials += 1;
                Plan::Stop
            }
        }
    }

    /// A call the sandbox holds: execute_bash on a real backend without `sandbox: false`;
    /// file tools are confined to the workspace by the same policy, and count as
    /// sandboxed only where a sandbox exists at all.
    fn is_sandboxed(&self, tool: Tool, args: &Value) -> bool {
        let have_sandbox = self.toolbox.backend != Backend::None;
        match tool {
            Tool::ExecuteBash => have_sandbox && args["sandbox"].as_bool() != Some(false),
            _ => have_sandbox,
        }
    }
}

enum Plan {
    /// Run it; `summary` is what the terminal shows of it.
    Run { summary: String },
    /// Denied by the user: the text tells the model.
    Deny(String),
    /// The user ended the turn.
    Stop,
}

/// "not run: {why}" for every call: the answers of a turn that ends before running them.
fn none_run(calls: &[ToolCall], why: &str) -> Vec<ToolOutput> {
    calls
        .iter()
        .map(|c| output(c, false, format!("not run: {why}")))
        .collect()
}

fn output(call: &ToolCall, ok: bool, text: String) -> ToolOutput {
    ToolOutput {
        call_id: call.id.clone(),
        id_from_model: call.id_from_model,
        name: call.name.clone(),
        ok,
        text,
    }
}

/// "cargo test --all", "src/main.rs": what a call is about, on one line.
fn one_line(args: &Value) -> String {
    let text = ["command", "path"]
        .iter()
        .find_map(|key| args[key].as_str())
        .unwrap_or_default();
    let mut line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(120)
        .collect();
    if line.len() < text.len() {
        line.push('…');
    }
    line
}

fn log_result(events: &EventLog, call: &ToolCall, result: &ToolResult, elapsed: Duration) {
    let c = &result.content;
    let mut fields = json!({"id": call.id, "name": call.name, "ok": result.ok,
                            "duration_ms": elapsed.as_millis() as u64});
    for key in [
        "exit_code",
        "signal",
        "timed_out",
        "cancelled",
        "backend",
        "stdout_truncated_bytes",
        "stderr_truncated_bytes",
        "protected_paths_restored",
        "error",
    ] {
        if let Some(value) = c.get(key) {
            fields[key] = value.clone();
        }
    }
    events.log("tool_result", fields);
}

#[cfg(test)]
mod tests;
