//! `chitti run` and `chitti chat`: the agent on the command line.
//!
//! Everything but `run`'s final answer goes to stderr, so that `chitti run … > answer.md`
//! captures the answer alone. Exit status of `run`: 0 answered; 1 the turn ended without
//! an answer (API failure, step limit, stopped by the user); 2 bad input (config, flags,
//! workspace); 125 the sandbox asked for with `--backend` cannot be set up.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{report_error, AgentArgs, ApprovalMode, ProviderName};
use crate::agent::approval::{Answer, Approval, Asker, SharedAsker, TerminalAsker, CHOICES};
use crate::agent::events::EventLog;
use crate::agent::instructions::{self, SandboxFacts};
use crate::agent::{Agent, Progress, TurnEnd};
use crate::config::Config;
use crate::policy::{profile, ChittiDirs, Overrides, PolicySource};
use crate::provider::http::RetryNotice;
use crate::provider::{gemini, openai, AnyProvider, Endpoint, HttpOptions};
use crate::sandbox::{self, Backend, BackendChoice, Capabilities};
use crate::tools::Toolbox;

pub const DEFAULT_MAX_STEPS: u32 = 25;

/// A failure before the agent started: the message and the exit status.
struct Refusal(i32, String);

fn bad_input(message: impl Into<String>) -> Refusal {
    Refusal(2, message.into())
}

/// Everything a session needs, resolved from flags, the config file and the machine.
struct Session {
    provider: AnyProvider,
    toolbox: Toolbox,
    system: String,
    approval: ApprovalMode,
    max_steps: u32,
    events: Arc<EventLog>,
}

impl Session {
    /// `shows_text`: the model's text goes to the terminal as it streams (`chat`).
    fn build(args: &AgentArgs, stream: bool, shows_text: bool) -> Result<Session, Refusal> {
        let dirs = ChittiDirs::from_env().map_err(|e| bad_input(e.to_string()))?;
        let config_path = Config::path(&dirs.config);
        let config = Config::load(&config_path).map_err(bad_input)?;
        crate::config::warn_if_exposed(&config_path, &config);

        // The sandbox first: a bad workspace or profile is reported before any key.
        let profile_name = args
            .profile
            .clone()
            .or_else(|| config.profile.clone())
            .unwrap_or_else(|| profile::DEFAULT_PROFILE.to_string());
        let profile = profile::load(&profile_name, Some(&dirs.user_profiles()))
            .map_err(|e| bad_input(e.to_string()))?;
        let workspace = match &args.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir()
                .map_err(|e| bad_input(format!("cannot read the current directory: {e}")))?,
        };
        let source = PolicySource {
            profile,
            workspace,
            overrides: Overrides::default(),
            dirs: dirs.clone(),
            env: std::env::vars_os().collect(),
        };
        // Resolved now, so that bad input is refused before anything starts.
        let policy = source.resolve().map_err(|e| bad_input(e.to_string()))?;
        let backend = pick_backend(args.backend, &dirs.state)?;

        let approval = args
            .approval
            .or(config.approval)
            .unwrap_or(ApprovalMode::Ask);
        if approval == ApprovalMode::Auto {
            eprintln!(
                "chitti: warning: --approval auto: sandboxed commands and file changes run \
                 without asking (anything outside the sandbox is still asked about)"
            );
        }
        // The provider's input is checked before the log exists: a refused run leaves
        // no empty log behind. Its retry notices reach the log once it is open.
        let late_events: Arc<OnceLock<Arc<EventLog>>> = Arc::default();
        let provider = build_provider(args, &config, stream, shows_text, &late_events)?;
        let events = Arc::new(
            match &args.events {
                Some(path) => EventLog::open(path),
                None => EventLog::open_creating_dirs(&EventLog::default_path(&dirs.state)),
            }
            .map_err(bad_input)?,
        );
        let _ = late_events.set(Arc::clone(&events));
        let mut toolbox = Toolbox::resolving_each_call(policy, source, backend);
        toolbox.allow_sandbox_false = config.allow_unsandboxed;
        if let Some(cap) = config.output_cap {
            toolbox.output_cap = cap.get();
        }
        let facts = SandboxFacts {
            backend: (backend != Backend::None).then(|| backend.name().to_string()),
            network: toolbox.policy.network,
            extra_writable: toolbox
                .policy
                .writable
                .iter()
                .filter(|w| **w != toolbox.policy.workspace)
                .map(|w| w.display().to_string())
                .collect(),
        };
        let path_var = crate::policy::env::get(&toolbox.policy.env, "PATH").unwrap_or_default();
        let system = instructions::system_instruction(
            &toolbox.policy.workspace,
            &facts,
            &path_var.to_string_lossy(),
        );
        events.log(
            "session",
            json!({"provider": crate::provider::Provider::name(&provider),
                   "model": crate::provider::Provider::model(&provider),
                   "workspace": toolbox.policy.workspace, "profile": toolbox.policy.profile,
                   "backend": backend.name(), "approval": approval,
                   "network": toolbox.policy.network, "version": env!("CARGO_PKG_VERSION")}),
        );
        eprintln!(
            "chitti: {} {} · workspace {} · sandbox {} · approval {} · events {}",
            crate::provider::Provider::name(&provider),
            crate::provider::Provider::model(&provider),
            toolbox.policy.workspace.display(),
            backend.name(),
            clap::ValueEnum::to_possible_value(&approval)
                .expect("every approval mode has a name")
                .get_name(),
            events.path().display()
        );
        Ok(Session {
            provider,
            toolbox,
            system,
            approval,
            max_steps: args
                .max_steps
                .or(config.max_steps.map(|n| n.get()))
                .unwrap_or(DEFAULT_MAX_STEPS),
            events,
        })
    }

    fn into_agent(
        self,
        asker: SharedAsker,
        progress: crate::agent::ProgressFn,
    ) -> Agent<AnyProvider> {
        Agent::new(
            self.provider,
            self.toolbox,
            self.system,
            Approval::new(self.approval),
            asker,
            self.events,
            self.max_steps,
        )
        .with_progress(progress)
    }
}

/// The backend for execute_bash. When `auto` finds none, the session still starts, but
/// every command is put to the user first: never a silent run outside the sandbox.
fn pick_backend(choice: BackendChoice, state_dir: &std::path::Path) -> Result<Backend, Refusal> {
    match sandbox::select(choice, Capabilities::get(), state_dir) {
        Ok(selection) if selection.backend == Backend::None => {
            eprintln!(
                "chitti: WARNING: --backend none: commands run UNSANDBOXED; you will be \
                 asked before each one"
            );
            Ok(Backend::None)
        }
        Ok(selection) => Ok(selection.backend),
        Err(e) if choice == BackendChoice::Auto => {
            eprintln!(
                "chitti: WARNING: no sandbox can be set up here, so every command will be \
                 put to you before it runs, unsandboxed.\n{e}"
            );
            Ok(Backend::None)
        }
        Err(e) => Err(Refusal(125, e.to_string())),
    }
}

fn build_provider(
    args: &AgentArgs,
    config: &Config,
    stream: bool,
    shows_text: bool,
    events: &Arc<OnceLock<Arc<EventLog>>>,
) -> Result<AnyProvider, Refusal> {
    let name = args
        .provider
        .or(config.provider)
        .unwrap_or(ProviderName::Gemini);
    let settings = config.provider(name);
    let events = Arc::clone(events);
    let options = HttpOptions {
        idle_timeout: Duration::from_secs(config.request_timeout_secs.map_or(120, |s| s.get())),
        reply_timeout: Duration::from_secs(
            config
                .reply_timeout_secs
                .map_or(crate::provider::http::DEFAULT_REPLY_TIMEOUT_SECS, |s| {
                    s.get()
                }),
        ),
        max_retries: config.max_retries.unwrap_or(3),
        on_retry: Some(Arc::new(move |notice: &RetryNotice| {
            eprintln!(
                "chitti: {}; retrying in {:.1} s (attempt {} of {})",
                crate::agent::preview::visible(&notice.reason),
                notice.wait.as_secs_f64(),
                notice.attempt,
                notice.max_attempts
            );
            if let Some(events) = events.get() {
                events.log(
                    "api_retry",
                    json!({"reason": notice.reason, "wait_ms": notice.wait.as_millis() as u64,
                           "attempt": notice.attempt}),
                );
            }
        })),
        streamed_text_is_shown: shows_text,
        ..HttpOptions::default()
    };
    let from_env = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    let model = args.model.clone().or_else(|| settings.model.clone());
    let base_url = args.base_url.clone().or_else(|| settings.base_url.clone());
    if let Some(url) = &base_url {
        let source = if args.base_url.is_some() {
            "--base-url".to_string()
        } else {
            let section = match name {
                ProviderName::Gemini => "gemini",
                ProviderName::Openai => "openai",
            };
            format!("base_url in the config's [{section}] section")
        };
        // Parsed now, so that a typo is bad input (exit 2) rather than a network error
        // retried four times.
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            bad_input(format!(
                "{source} `{url}` is not a valid URL ({e}); e.g. http://localhost:11434/v1"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(bad_input(format!(
                "{source} `{url}`: expected an http:// or https:// URL with a host"
            )));
        }
    }
    let endpoint = |default_base: &str, default_model: &str| {
        Endpoint::new(
            base_url.as_deref().unwrap_or(default_base),
            model.as_deref().unwrap_or(default_model),
            stream,
            options.clone(),
        )
        .map_err(|e| Refusal(1, e.to_string()))
    };
    Ok(match name {
        ProviderName::Gemini => {
            let key = from_env("GEMINI_API_KEY")
                .or_else(|| settings.api_key.clone())
                .ok_or_else(|| {
                    bad_input(
                        "no Gemini API key: set GEMINI_API_KEY, or put `api_key = \"…\"` under \
                     [gemini] in ~/.config/chitti/config.toml (or use --provider openai)",
                    )
                })?;
            let endpoint = endpoint(gemini::DEFAULT_BASE_URL, gemini::DEFAULT_MODEL)?;
            AnyProvider::Gemini(gemini::Gemini::new(endpoint, key))
        }
        ProviderName::Openai => {
            let key = from_env("OPENAI_API_KEY").or_else(|| settings.api_key.clone());
            let base = base_url.as_deref().unwrap_or(openai::DEFAULT_BASE_URL);
            if key.is_none() && base == openai::DEFAULT_BASE_URL {
                return Err(bad_input(
                    "no OpenAI API key: set OPENAI_API_KEY, or put `api_key = \"…\"` under \
                     [openai] in ~/.config/chitti/config.toml; for a local server, pass \
                     --base-url (e.g. http://localhost:11434/v1)",
                ));
            }
            let endpoint = endpoint(openai::DEFAULT_BASE_URL, openai::DEFAULT_MODEL)?;
            AnyProvider::OpenAi(openai::OpenAi::new(endpoint, key))
        }
    })
}

/// `run`: commentary was not shown as it streamed, so it is shown now, on stderr.
fn print_progress(progress: Progress<'_>) {
    use crate::agent::preview::visible;
    let mut err = std::io::stderr().lock();
    let _ = match progress {
        Progress::Commentary(text) => writeln!(err, "{}", visible(text.trim_end())),
        // A model-chosen tool name or a command's output must not drive the terminal.
        Progress::ToolStart { name, summary } => {
            writeln!(err, "→ {}: {}", visible(name), visible(summary))
        }
        Progress::ToolDone { name, ok, summary } => {
            let mark = if ok { "←" } else { "✗" };
            writeln!(err, "{mark} {}: {}", visible(name), visible(summary))
        }
    };
}

/// Prints the model's text on stdout. On a terminal, control characters and invisible
/// format characters are shown as escapes, so that the model (or a file it read) cannot
/// drive the terminal: clear it, retitle it, redraw an earlier approval question. Into a
/// pipe or a file the text goes as the model wrote it.
fn out_model_text(text: &str) {
    if std::io::stdout().is_terminal() {
        super::out(&crate::agent::preview::visible(text));
    } else {
        super::out(text);
    }
}

/// `chat`: commentary already streamed to stdout; end its line before the tool lines.
fn print_chat_progress(progress: Progress<'_>) {
    match progress {
        Progress::Commentary(_) => super::out("\n"),
        other => print_progress(other),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Refusal> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Refusal(1, format!("cannot start the async runtime: {e}")))
}

/// `chitti run PROMPT`.
pub fn run(args: AgentArgs, prompt: String) -> i32 {
    match run_task(&args, &prompt) {
        Ok(code) => code,
        Err(Refusal(code, message)) => {
            report_error(&message);
            code
        }
    }
}

fn run_task(args: &AgentArgs, prompt: &str) -> Result<i32, Refusal> {
    if prompt.trim().is_empty() {
        return Err(bad_input(
            "the prompt is empty: say what to do, e.g. chitti run \"list the TODOs\"",
        ));
    }
    let rt = runtime()?;
    let session = Session::build(args, !args.no_stream, false)?;
    let asker: SharedAsker = Arc::new(Mutex::new(TerminalAsker::new()));
    let mut agent = session.into_agent(asker, Box::new(print_progress));
    let started = Instant::now();
    // Text arrives in pieces; whether it is the answer is known only at the end.
    let mut sink = |_: &str| {};
    let end = rt.block_on(agent.turn(prompt, &mut sink, &CancellationToken::new()));
    let code = match end {
        TurnEnd::Answer(ref text) | TurnEnd::CutOff(ref text) => {
            out_model_text(text);
            if !text.ends_with('\n') {
                super::out("\n");
            }
            // A cut-off answer goes out too, but not as an answer: a script must not
            // take it for one.
            if matches!(end, TurnEnd::CutOff(_)) {
                report_error(&describe_end(&end));
                1
            } else {
                0
            }
        }
        other => {
            report_error(&describe_end(&other));
            1
        }
    };
    eprintln!("chitti: {}", agent.stats.summary(started.elapsed()));
    Ok(code)
}

fn describe_end(end: &TurnEnd) -> String {
    match end {
        TurnEnd::Answer(_) => "answered".to_string(),
        TurnEnd::CutOff(_) => "the answer was cut off at the model's output token limit: \
            what it wrote is incomplete (ask for a shorter answer, or raise the model's \
            output limit on its server)"
            .to_string(),
        TurnEnd::Stopped => "stopped by the user".to_string(),
        TurnEnd::MaxSteps(n) => format!(
            "gave up: the model was still calling tools after {n} rounds (raise --max-steps)"
        ),
        TurnEnd::Cancelled => "cancelled".to_string(),
        TurnEnd::Failed(e) => e.message.clone(),
    }
}

/// Reads lines (and approval answers) with line editing on a terminal, plainly from
/// stdin otherwise.
struct LineEditor(rustyline::DefaultEditor);

impl Asker for Arc<Mutex<LineEditor>> {
    fn ask(&mut self, question: &str) -> Answer {
        use rustyline::error::ReadlineError;
        eprint!("{question}");
        let mut editor = self.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match editor.0.readline(&format!("Allow? {CHOICES}: ")) {
                Ok(line) => match Answer::parse(&line) {
                    Some(answer) => return answer,
                    None => eprintln!("please answer y, a, n or s"),
                },
                // Ctrl-C at the question ends the turn; end of input means no.
                Err(ReadlineError::Interrupted) => return Answer::Stop,
                Err(_) => return Answer::No,
            }
        }
    }
}

/// `chitti chat`.
pub fn chat(args: AgentArgs) -> i32 {
    match chat_session(&args) {
        Ok(code) => code,
        Err(Refusal(code, message)) => {
            report_error(&message);
            code
        }
    }
}

fn chat_session(args: &AgentArgs) -> Result<i32, Refusal> {
    let rt = runtime()?;
    let session = Session::build(args, !args.no_stream, true)?;
    let editor = rustyline::DefaultEditor::new()
        .map_err(|e| Refusal(1, format!("cannot set up line editing: {e}")))?;
    let editor = Arc::new(Mutex::new(LineEditor(editor)));
    let interactive = std::io::stdin().is_terminal();
    // Piped stdin carries prompts: approvals then come from the terminal or are no.
    let asker: SharedAsker = if interactive {
        Arc::new(Mutex::new(Arc::clone(&editor)))
    } else {
        Arc::new(Mutex::new(TerminalAsker::terminal_only()))
    };
    let mut agent = session.into_agent(asker, Box::new(print_chat_progress));
    let started = Instant::now();
    if interactive {
        eprintln!("chitti: ask away. Ctrl-C stops the current turn; Ctrl-D or /exit quits.");
    }
    rt.block_on(async {
        // From here on Ctrl-C cancels a turn instead of ending chitti.
        let mut interrupts =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(|e| Refusal(1, format!("cannot handle Ctrl-C: {e}")))?;
        loop {
            let line = {
                let editor = Arc::clone(&editor);
                tokio::task::spawn_blocking(move || {
                    editor
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                        .readline("› ")
                })
                .await
                .map_err(|e| Refusal(1, format!("the input thread failed: {e}")))?
            };
            let line = match line {
                Ok(line) => line,
                Err(rustyline::error::ReadlineError::Interrupted) => continue,
                Err(rustyline::error::ReadlineError::Eof) => break,
                Err(e) => return Err(Refusal(1, format!("cannot read input: {e}"))),
            };
            let prompt = line.trim();
            if prompt.is_empty() {
                continue;
            }
            if prompt == "/exit" || prompt == "/quit" {
                break;
            }
            let _ = editor
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .0
                .add_history_entry(prompt);
            // A Ctrl-C pressed while no turn ran belongs to no turn: drop it.
            while let Some(Some(())) = futures::FutureExt::now_or_never(interrupts.recv()) {}
            let cancel = CancellationToken::new();
            let mut sink = |text: &str| out_model_text(text);
            // Ctrl-C cancels the token; the turn itself then kills what it runs and
            // returns, so nothing is left behind.
            let turn = agent.turn(prompt, &mut sink, &cancel);
            tokio::pin!(turn);
            let end = loop {
                tokio::select! {
                    end = &mut turn => break end,
                    _ = interrupts.recv(), if !cancel.is_cancelled() => {
                        cancel.cancel();
                        eprintln!("\nchitti: stopping this turn…");
                    }
                }
            };
            match end {
                TurnEnd::Answer(_) => super::out("\n"),
                TurnEnd::CutOff(_) => {
                    super::out("\n");
                    report_error(&describe_end(&end));
                }
                TurnEnd::Cancelled => eprintln!("chitti: turn stopped; what ran was killed"),
                other => report_error(&describe_end(&other)),
            }
        }
        Ok(())
    })?;
    eprintln!("chitti: {}", agent.stats.summary(started.elapsed()));
    Ok(0)
}
