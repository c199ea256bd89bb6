//! The command line: every flag is defined here, each subcommand lives in its own file.

mod agent;
pub mod agent_binary;
mod doctor;
mod mcp;
mod sandbox_exec;
mod sandbox_profile;
mod sandbox_test;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::sandbox::BackendChoice;

#[derive(Debug, Parser)]
#[command(
    name = "chitti",
    version,
    about = "A command-line agent whose every shell call runs inside an OS-native sandbox"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run commands inside the sandbox, and inspect it.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// What this machine supports, and which backend `auto` picks and why.
    Doctor {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Do one task: the model calls sandboxed tools until it answers. The final answer
    /// alone goes to stdout; everything else goes to stderr.
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        /// The task, in plain words.
        #[arg(value_name = "PROMPT", required = true, num_args = 1..)]
        prompt: Vec<String>,
    },
    /// An interactive session. Ctrl-C stops the current turn; Ctrl-D or /exit quits.
    Chat {
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Serve the sandboxed tools over MCP (stdio) for other agents.
    #[command(mut_arg("backend", |a| a.help(
        "Which sandbox to use; `none` is refused (an MCP client cannot approve unsandboxed commands)"
    )))]
    Mcp(McpArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderName {
    Gemini,
    Openai,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Ask before every command and every file change.
    Ask,
    /// Run sandboxed calls without asking; ask for anything else.
    AutoSandboxed,
    /// Never ask (explicit opt-in).
    Auto,
}

/// Options of `chitti run` and `chitti chat`.
#[derive(Debug, Args, Clone)]
pub struct AgentArgs {
    /// The model API (default: the config file's, else gemini).
    #[arg(long, value_enum)]
    pub provider: Option<ProviderName>,
    /// The model (default: the config file's, else the provider's default).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The API's base URL. gemini: {URL}/v1beta/models/{model}:generateContent;
    /// openai: {URL}/chat/completions.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The project (default: the current directory).
    #[arg(short = 'w', long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// When to ask before a tool call (default: the config file's, else ask).
    #[arg(long, value_enum)]
    pub approval: Option<ApprovalMode>,
    /// Sandbox profile for execute_bash: a name or a TOML file.
    #[arg(short = 'p', long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Which sandbox to use (default auto; never silently unsandboxed).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Tool-call rounds before giving up.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: Option<u32>,
    /// The JSONL event log (default: a new file under the state directory).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Do not stream the model's text as it arrives.
    #[arg(long)]
    pub no_stream: bool,
}

/// Options of `chitti mcp`.
#[derive(Debug, Args, Clone)]
pub struct McpArgs {
    /// The workspace, the profile for execute_bash, and the backend (`none` is refused).
    #[command(flatten)]
    pub sandbox: SandboxOpts,
    /// Also offer write_file and edit_file.
    #[arg(long)]
    pub allow_write_tools: bool,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run one command in the sandbox.
    ///
    /// Exit status: the command's own; 128+N when killed by signal N; 124 on timeout;
    /// 126 not executable; 127 not found; 125 when the sandbox could not be set up or
    /// the input is bad (then nothing ran).
    Exec(ExecArgs),
    /// Print the resolved policy and what a backend would be given (bwrap arguments,
    /// Landlock rules and seccomp summary, or the Seatbelt profile and its parameters).
    Profile {
        /// The writable root (default: the current directory).
        #[arg(short = 'w', long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// A profile name or a path to a TOML file.
        #[arg(short = 'p', long, value_name = "NAME|FILE", default_value = crate::policy::profile::DEFAULT_PROFILE)]
        profile: String,
        /// The backend whose input to print (default: this OS's preferred one).
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendChoice,
        /// Print only the bwrap arguments (without seccomp), NUL-separated: what
        /// scripts/bench.sh gives raw bubblewrap so that both do the same isolation work.
        #[arg(long, hide = true)]
        bwrap_args0: bool,
    },
    /// Prove a profile on this machine: real probes, a verdict table, exit 0 only when
    /// every promise holds.
    #[command(mut_arg("workspace", |a| a.help(
        "Run the probes on this directory's file system, in a throw-away repository \
         created inside it and removed afterwards (default: under /var/tmp)"
    )))]
    Test {
        #[command(flatten)]
        sandbox: SandboxOpts,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    Off,
    On,
}

/// Options shared by everything that builds a sandbox.
#[derive(Debug, Args, Clone)]
pub struct SandboxOpts {
    /// The writable root (default: the current directory).
    #[arg(short = 'w', long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A profile name (workspace-write, read-only, network, or one in
    /// ~/.config/chitti/profiles) or a path to a TOML file.
    #[arg(short = 'p', long, value_name = "NAME|FILE", default_value = crate::policy::profile::DEFAULT_PROFILE)]
    pub profile: String,
    /// Which sandbox to use; `none` runs unsandboxed (with a warning).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub sandbox: SandboxOpts,
    /// Turn the network off or on, whatever the profile says.
    #[arg(long, value_enum)]
    pub network: Option<OnOff>,
    /// An extra writable directory (repeatable).
    #[arg(long, value_name = "DIR")]
    pub writable: Vec<PathBuf>,
    /// Wall-clock limit in seconds (default: the profile's).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Capture output and print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Cap per captured stream with --json (head and tail are kept). Without --json the
    /// output streams through uncapped, so the option would do nothing: refused.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = crate::exec::DEFAULT_MAX_OUTPUT,
        requires = "json"
    )]
    pub max_output: usize,
    /// The command and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// Parses the command line, or prints help or the error and exits.
///
/// A usage error of `chitti sandbox exec` exits 125, like every other refusal of it:
/// clap's 2 could not be told from the command's own exit status.
pub fn parse(args: Vec<OsString>) -> Cli {
    if let Some(cli) = parse_sandbox_exec(&args) {
        return cli;
    }
    Cli::try_parse_from(&args).unwrap_or_else(|error| {
        let refused = error.use_stderr() && is_sandbox_exec(&args);
        let _ = error.print();
        if refused && asks_for_json(&args) {
            // `--json` promises one JSON object on stdout, refusals included.
            let text = error.render().to_string();
            let first = text.lines().next().unwrap_or("invalid command line");
            let message = first.strip_prefix("error: ").unwrap_or(first);
            out(&format!(
                "{}\n",
                serde_json::json!({"error": message, "exit_code": 125})
            ));
        }
        std::process::exit(if refused { 125 } else { error.exit_code() })
    })
}

/// Whether `--json` comes before the command (after `--` it is the command's own).
fn asks_for_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(3)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

fn is_sandbox_exec(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|a| a == "sandbox") && args.get(2).is_some_and(|a| a == "exec")
}

/// `chitti sandbox exec`, which runs once per sandboxed call, read without clap: clap's
/// parser cost some 0.05 ms of every call's start-up (its code faulted in, the argument
/// table built), for a command line that is nearly always the same few options. This
/// reads only the plain forms (`-w DIR`, `--workspace DIR`, `--workspace=DIR`, each at
/// most once, then `--` and the command); anything else (help, a flag it does not know,
/// a value clap might read differently) returns `None`, and clap parses the line as it
/// always did, errors included. A test holds the two to the same result.
fn parse_sandbox_exec(args: &[OsString]) -> Option<Cli> {
    if !is_sandbox_exec(args) {
        return None;
    }
    let mut exec = ExecArgs {
        sandbox: SandboxOpts {
            workspace: None,
            profile: crate::policy::profile::DEFAULT_PROFILE.to_string(),
            backend: BackendChoice::Auto,
        },
        network: None,
        writable: Vec::new(),
        timeout: None,
        json: false,
        max_output: crate::exec::DEFAULT_MAX_OUTPUT,
        command: Vec::new(),
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut rest = args[3..].iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            // `--max-output` without `--json`: clap's error to report.
            if seen.contains(&"--max-output") && !exec.json {
                return None;
            }
            exec.command = rest.cloned().collect();
            return Some(Cli {
                command: Command::Sandbox(SandboxCommand::Exec(exec)),
            });
        }
        let arg = arg.to_str()?;
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (arg, None),
        };
        let name = match name {
            "-w" => "--workspace",
            "-p" => "--profile",
            other => other,
        };
        // Repeating a single-valued option is clap's error to report.
        if name != "--writable" {
            if seen.contains(&name) {
                return None;
            }
            seen.push(name);
        }
        if name == "--json" {
            if inline.is_some() {
                return None;
            }
            exec.json = true;
            continue;
        }
        let value = match inline {
            Some(value) => value,
            None => rest.next()?.to_str()?,
        };
        // An empty value, or one clap could take for an option: clap decides.
        if value.is_empty() || value.starts_with('-') {
            return None;
        }
        let number = || -> Option<u64> {
            value
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| value.parse().ok())?
        };
        match name {
            "--workspace" => exec.sandbox.workspace = Some(value.into()),
            "--profile" => exec.sandbox.profile = value.to_string(),
            "--backend" => exec.sandbox.backend = BackendChoice::from_str(value, false).ok()?,
            "--network" => exec.network = Some(OnOff::from_str(value, false).ok()?),
            "--writable" => exec.writable.push(value.into()),
            "--timeout" => exec.timeout = Some(number().filter(|t| *t >= 1)?),
            "--max-output" => exec.max_output = usize::try_from(number()?).ok()?,
            _ => return None,
        }
    }
    // No `--`: clap reports what is wrong.
    None
}

/// Runs the parsed command line in the `chitti` binary; returns the process exit status.
/// The agent's commands are handed to `chitti-agent` (see [`agent_binary`]): this process
/// becomes it.
pub fn run(cli: Cli) -> i32 {
    init_tracing();
    // The other commands' handlers are never inlined here (`#[inline(never)]` on each):
    // inlined, their locals made this frame some 16 KiB, which is probed page by page on
    // entry, so that every sandboxed call faulted in four pages of stack it never used.
    match cli.command {
        Command::Sandbox(SandboxCommand::Exec(args)) => sandbox_exec::run(args),
        Command::Sandbox(SandboxCommand::Test { sandbox, json }) => {
            sandbox_test::run(sandbox, json)
        }
        Command::Sandbox(SandboxCommand::Profile {
            workspace,
            profile,
            backend,
            bwrap_args0,
        }) => sandbox_profile::run(workspace, &profile, backend, bwrap_args0),
        Command::Doctor { json } => doctor::run(json),
        Command::Run { .. } => agent_binary::exec("run"),
        Command::Chat { .. } => agent_binary::exec("chat"),
        Command::Mcp(_) => agent_binary::exec("mcp"),
    }
}

/// Runs the parsed command line in `chitti-agent`: the agent's commands here, everything
/// else as `chitti` would. Only this binary links the agent's code.
pub fn run_agent(cli: Cli) -> i32 {
    match cli.command {
        Command::Run { agent, prompt } => {
            init_tracing();
            agent::run(agent, prompt.join(" "))
        }
        Command::Chat { agent } => {
            init_tracing();
            agent::chat(agent)
        }
        Command::Mcp(args) => {
            init_tracing();
            mcp::run(args)
        }
        command => run(Cli { command }),
    }
}

/// Logging is off unless CHITTI_LOG is set (e.g. `CHITTI_LOG=debug`): building a filter
/// costs start-up time that every sandboxed call would pay.
fn init_tracing() {
    if std::env::var_os("CHITTI_LOG").is_some() {
        install_tracing();
    }
}

/// Out of line: inlined, the filter's parsing made the frame of every caller (`run`, where
/// every call starts) some 3 KiB larger.
///
/// The filter is `target=level` directives (`debug`, `rmcp=debug,chitti=trace`), parsed by
/// `Targets`: `EnvFilter`'s span and field matching links a regex engine into chitti, and
/// its tables of pointers were three of the pages every start of chitti relocates.
#[inline(never)]
fn install_tracing() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let Some(value) = std::env::var_os("CHITTI_LOG") else {
        return;
    };
    let filter = match log_filter(&value) {
        Ok(filter) => filter,
        Err(problem) => {
            eprintln!("chitti: warning: {problem}; logging stays off");
            return;
        }
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .without_time();
    let _ = tracing_subscriber::registry()
        .with(layer)
        .with(filter)
        .try_init();
}

/// Parses CHITTI_LOG: comma-separated `level` or `target=level` directives.
fn log_filter(value: &std::ffi::OsStr) -> Result<tracing_subscriber::filter::Targets, String> {
    let text = value
        .to_str()
        .ok_or_else(|| format!("CHITTI_LOG={value:?} is not UTF-8"))?;
    text.parse().map_err(|error| {
        format!(
            "CHITTI_LOG={text:?} is not a log filter ({error}); use a level (error, warn, \
             info, debug, trace) or target=level, comma-separated"
        )
    })
}

/// Writes to stdout, ignoring a closed pipe (`chitti ... | head` must not panic).
pub(crate) fn out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Prints an error the way every chitti command does. Control and invisible characters
/// are shown escaped: an error may quote a model server's words, and an escape sequence
/// there could clear the screen or hide the next approval question.
pub(crate) fn report_error(message: &str) {
    eprintln!("{}", error_line(message));
}

fn error_line(message: &str) -> String {
    format!("chitti: error: {}", crate::agent::preview::visible(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CHITTI_LOG takes the levels and `target=level` directives the README names, and a
    /// value that is none of them is refused with what to write instead.
    #[test]
    fn log_filters_are_levels_and_targets() {
        use tracing::Level;
        let debug = log_filter("debug".as_ref()).unwrap();
        assert!(debug.would_enable("anything", &Level::DEBUG));
        assert!(!debug.would_enable("anything", &Level::TRACE));

        let rmcp = log_filter("rmcp=debug".as_ref()).unwrap();
        assert!(rmcp.would_enable("rmcp::service", &Level::DEBUG));
        assert!(!rmcp.would_enable("chitti", &Level::ERROR));

        let mixed = log_filter("warn,chitti::sandbox=trace".as_ref()).unwrap();
        assert!(mixed.would_enable("chitti::sandbox::exec", &Level::TRACE));
        assert!(!mixed.would_enable("chitti::agent", &Level::INFO));
        assert!(mixed.would_enable("chitti::agent", &Level::WARN));

        let error = log_filter("rmcp=loud".as_ref()).unwrap_err();
        assert!(
            error.contains("CHITTI_LOG=\"rmcp=loud\" is not a log filter"),
            "{error}"
        );
        assert!(error.contains("target=level"), "{error}");
    }

    /// A model server's error text reaches the terminal with its escape sequences shown,
    /// not obeyed (a review cleared the screen and hid the next question with one).
    #[test]
    fn errors_show_control_characters_escaped() {
        let line = error_line("mid\x1b[2J\x1b]0;title\x07stream\r");
        assert!(!line.contains('\x1b') && !line.contains('\x07') && !line.contains('\r'));
        assert!(line.contains(r"\u{1b}[2J"), "{line}");
    }

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    /// The forms every sandboxed call uses are read by the shortcut, exactly as clap
    /// reads them.
    #[test]
    fn the_sandbox_exec_shortcut_parses_exactly_like_the_full_parser() {
        let lines = [
            "chitti sandbox exec -- true",
            "chitti sandbox exec -w /tmp/ws -p read-only --backend landlock -- sh -c true",
            "chitti sandbox exec --workspace=/tmp/ws --profile ./p.toml --backend=none -- ls",
            "chitti sandbox exec --network on --writable /a --writable /b --timeout 5 -- x y",
            "chitti sandbox exec --json --max-output 10 -- -w --not-a-flag-of-chitti",
            "chitti sandbox exec --network=off --writable=/c --timeout=30 --max-output=0 --json --",
        ];
        for line in lines {
            let fast = parse_sandbox_exec(&args(line)).unwrap_or_else(|| panic!("{line}"));
            let full = Cli::try_parse_from(args(line)).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{line}");
        }
    }

    /// Whatever the shortcut reads, clap reads the same way: options in every order and
    /// form, with good and bad values, repeated, or cut short.
    #[test]
    fn the_sandbox_exec_shortcut_never_disagrees_with_clap() {
        let options = [
            "-w /ws",
            "-w=/ws",
            "-w/ws",
            "--workspace /ws",
            "--workspace=/ws",
            "-w",
            "-w ''",
            "-w -x",
            "-p read-only",
            "--profile=p.toml",
            "-p",
            "--backend bwrap",
            "--backend=landlock",
            "--backend Landlock",
            "--backend nope",
            "--network on",
            "--network=off",
            "--network maybe",
            "--writable /a",
            "--writable=/b",
            "--timeout 5",
            "--timeout=0",
            "--timeout +5",
            "--timeout -1",
            "--timeout 99999999999999999999",
            "--max-output 7",
            "--max-output=x",
            "--json",
            "--json=true",
            "-h",
            "--help",
            "--version",
            "--bogus",
            "-x",
            "--",
            "-- true",
            "-- -w /x",
            "true",
        ];
        let mut lines = Vec::new();
        for a in options {
            lines.push(format!("chitti sandbox exec {a} -- cmd"));
            lines.push(format!("chitti sandbox exec {a}"));
            for b in options {
                lines.push(format!("chitti sandbox exec {a} {b} -- cmd"));
            }
        }
        let mut taken = 0;
        for line in &lines {
            let argv: Vec<OsString> = line
                .split_whitespace()
                .map(|w| OsString::from(if w == "''" { "" } else { w }))
                .collect();
            let Some(fast) = parse_sandbox_exec(&argv) else {
                continue;
            };
            taken += 1;
            let full = Cli::try_parse_from(&argv)
                .unwrap_or_else(|e| panic!("{line}: the shortcut took what clap refuses: {e}"));
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{line}");
        }
        // The shortcut is used at all (most of these lines are for clap).
        assert!(
            taken > 200,
            "the shortcut took {taken} of {} lines",
            lines.len()
        );
    }

    /// `--max-output` caps only what `--json` captures: alone it would do nothing, so it
    /// is refused rather than silently ignored.
    #[test]
    fn max_output_without_json_is_refused() {
        let line = args("chitti sandbox exec --max-output 3 -- true");
        assert!(parse_sandbox_exec(&line).is_none());
        let e = Cli::try_parse_from(&line).unwrap_err().to_string();
        assert!(e.contains("--json"), "{e}");
        let line = args("chitti sandbox exec --max-output 3 --json -- true");
        assert!(parse_sandbox_exec(&line).is_some());
    }

    #[test]
    fn help_and_bad_input_go_to_the_full_parser() {
        let lines = [
            "chitti sandbox exec --help",
            "chitti sandbox exec -h",
            "chitti sandbox exec --version",
            "chitti sandbox exec --bogus -- true",
            "chitti sandbox exec --timeout 0 -- true",
            "chitti sandbox exec --network maybe -- true",
            "chitti sandbox exec --backend",
            "chitti sandbox exec true",
            "chitti sandbox exec -w /a -w /b -- true",
            "chitti sandbox exec --json --json -- true",
            "chitti sandbox exec --json=true -- true",
        ];
        for line in lines {
            assert!(parse_sandbox_exec(&args(line)).is_none(), "{line}");
            assert!(Cli::try_parse_from(args(line)).is_err(), "{line}");
        }
        for line in [
            "chitti",
            "chitti sandbox",
            "chitti sandbox test",
            "chitti doctor",
            // Accepted by clap (the missing command is reported later), not hot.
            "chitti sandbox exec",
        ] {
            assert!(parse_sandbox_exec(&args(line)).is_none(), "{line}");
        }
    }
}
