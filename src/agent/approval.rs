//! Who decides whether a tool call runs: the approval mode, the user's earlier "always"
//! answers, and — when it must — the user, asked on the terminal or on stdin.
//!
//! A call that would run outside the sandbox is always asked about, whatever the mode:
//! that is the one promise no setting can turn off.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use crate::cli::ApprovalMode;
use crate::tools::Tool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Yes,
    /// Yes, and do not ask again for this tool (sandboxed calls only) this session.
    Always,
    No,
    /// No, and end the turn.
    Stop,
}

impl Answer {
    pub fn parse(text: &str) -> Option<Answer> {
        match text.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Some(Answer::Yes),
            "a" | "always" => Some(Answer::Always),
            "n" | "no" => Some(Answer::No),
            "s" | "stop" => Some(Answer::Stop),
            _ => None,
        }
    }
}

pub const CHOICES: &str = "[y]es / [a]lways for this session / [n]o / [s]top";

/// Asks the user one question (blocking). End of input must mean [`Answer::No`].
pub trait Asker: Send {
    fn ask(&mut self, question: &str) -> Answer;
}

pub type SharedAsker = Arc<Mutex<dyn Asker>>;

/// A call as the approval logic sees it.
#[derive(Debug, Clone)]
pub struct CallView {
    pub tool: Tool,
    /// Whether it is held by the sandbox (or, for file tools, confined to the workspace
    /// by the same policy).
    pub sandboxed: bool,
    /// What the user is shown: the exact command, or a diff.
    pub summary: String,
}

/// What was decided about one call, and whether the user was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub answer: Answer,
    pub asked: bool,
}

pub struct Approval {
    mode: ApprovalMode,
    always: HashSet<Tool>,
}

impl Approval {
    pub fn new(mode: ApprovalMode) -> Approval {
        Approval {
            mode,
            always: HashSet::new(),
        }
    }

    pub fn mode(&self) -> ApprovalMode {
        self.mode
    }

    /// Whether this call must be put to the user.
    pub fn must_ask(&self, call: &CallView) -> bool {
        if call.tool.is_read_only() {
            return false;
        }
        if !call.sandboxed {
            return true;
        }
        match self.mode {
            ApprovalMode::Ask => !self.always.contains(&call.tool),
            ApprovalMode::AutoSandboxed | ApprovalMode::Auto => false,
        }
    }

    /// Decides, asking through `asker` when the mode requires it.
    pub fn decide(&mut self, call: &CallView, asker: &mut dyn Asker) -> Decision {
        if !self.must_ask(call) {
            return Decision {
                answer: Answer::Yes,
                asked: false,
            };
        }
        let answer = asker.ask(&question(call));
        self.remember(call, answer);
        Decision {
            answer,
            asked: true,
        }
    }
}

impl Approval {
    /// Records the user's answer: "always" holds for later sandboxed calls of the tool.
    pub fn remember(&mut self, call: &CallView, answer: Answer) {
        if answer == Answer::Always && call.sandboxed {
            self.always.insert(call.tool);
        }
    }
}

/// What the user is asked.
pub fn question(call: &CallView) -> String {
    let what = match (call.tool, call.sandboxed) {
        (Tool::ExecuteBash, true) => "chitti wants to run, in the sandbox:",
        (Tool::ExecuteBash, false) => {
            "chitti wants to run OUTSIDE THE SANDBOX (full access to your files, credentials and network):"
        }
        (Tool::WriteFile, _) => "chitti wants to write a file:",
        (Tool::EditFile, _) => "chitti wants to edit a file:",
        (tool, _) => return format!("chitti wants to call {}:\n{}\n", tool.name(), call.summary),
    };
    // Said again last, right above the answer: the text in between is the model's, and
    // however it is drawn (long, wrapped, full of blank lines) it cannot stand in for this.
    // How much there is to read, so that a question taller than the screen says so.
    let size = format!(
        "{} lines, {} characters",
        call.summary.lines().count(),
        call.summary.chars().count()
    );
    let reminder = match (call.tool, call.sandboxed) {
        (Tool::ExecuteBash, true) => format!("(the command above, {size}, runs in the sandbox)"),
        (Tool::ExecuteBash, false) => format!(
            "(the command above, {size}, runs OUTSIDE THE SANDBOX, with full access to your \
             files, credentials and network)"
        ),
        (Tool::WriteFile, _) => format!("(the file above, {size}, is written in the workspace)"),
        _ => format!("(the edit above, {size}, is made in the workspace)"),
    };
    format!("{what}\n{}\n{reminder}\n", call.summary)
}

/// Asks on the controlling terminal when there is one, else (for `chitti run`, whose
/// stdin carries nothing else) on stdin/stderr.
pub struct TerminalAsker {
    /// The terminal, read through one buffer for the whole session so that answers
    /// typed ahead are not lost between questions.
    tty: Option<std::io::BufReader<std::fs::File>>,
    /// Whether stdin may answer when there is no terminal.
    stdin_answers: bool,
}

impl TerminalAsker {
    pub fn new() -> TerminalAsker {
        TerminalAsker {
            tty: open_terminal(),
            stdin_answers: true,
        }
    }

    /// For `chitti chat` with prompts piped in: stdin holds prompts, so a line of it must
    /// never be taken as an answer (nor an answer swallow a prompt). Without a terminal
    /// every question is answered no, and the user is told why.
    pub fn terminal_only() -> TerminalAsker {
        TerminalAsker {
            tty: open_terminal(),
            stdin_answers: false,
        }
    }

    fn read_line(&mut self) -> Option<String> {
        let mut line = String::new();
        let read = match &mut self.tty {
            Some(tty) => tty.read_line(&mut line),
            None if self.stdin_answers => std::io::stdin().lock().read_line(&mut line),
            None => return None,
        };
        match read {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    }

    fn show(&mut self, text: &str) {
        match &mut self.tty {
            Some(tty) => {
                let tty = tty.get_mut();
                let _ = tty.write_all(text.as_bytes());
                let _ = tty.flush();
            }
            None => {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(text.as_bytes());
                let _ = err.flush();
            }
        }
    }
}

fn open_terminal() -> Option<std::io::BufReader<std::fs::File>> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()
        .map(std::io::BufReader::new)
}

impl Default for TerminalAsker {
    fn default() -> Self {
        Self::new()
    }
}

impl Asker for TerminalAsker {
    fn ask(&mut self, question: &str) -> Answer {
        self.show(question);
        if self.tty.is_none() && !self.stdin_answers {
            self.show(
                "(no terminal to ask on, and stdin carries prompts, not answers: no; \
                 choose --approval auto-sandboxed to let sandboxed calls run)\n",
            );
            return Answer::No;
        }
        loop {
            self.show(&format!("Allow? {CHOICES}: "));
            let Some(line) = self.read_line() else {
                self.show("\n(end of input: no)\n");
                return Answer::No;
            };
            match Answer::parse(&line) {
                Some(answer) => return answer,
                None => self.show("please answer y, a, n or s\n"),
            }
        }
    }
}

#[cfg(test)]
pub mod testing {
    use super::*;

    /// Answers from a list; records every question. Out of answers means no.
    #[derive(Default)]
    pub struct ScriptedAsker {
        pub answers: std::collections::VecDeque<Answer>,
        pub questions: Vec<String>,
    }

    impl Asker for ScriptedAsker {
        fn ask(&mut self, question: &str) -> Answer {
            self.questions.push(question.to_string());
            self.answers.pop_front().unwrap_or(Answer::No)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::ScriptedAsker;
    use super::*;

    fn view(tool: Tool, sandboxed: bool) -> CallView {
        CallView {
            tool,
            sandboxed,
            summary: "$ true".into(),
        }
    }

    #[test]
    fn answers_parse() {
        assert_eq!(Answer::parse(" Y\n"), Some(Answer::Yes));
        assert_eq!(Answer::parse("always"), Some(Answer::Always));
        assert_eq!(Answer::parse("s"), Some(Answer::Stop));
        assert_eq!(Answer::parse("maybe"), None);
    }

    #[test]
    fn ask_mode_asks_for_changes_and_never_for_reads() {
        let approval = Approval::new(ApprovalMode::Ask);
        assert!(approval.must_ask(&view(Tool::ExecuteBash, true)));
        assert!(approval.must_ask(&view(Tool::WriteFile, true)));
        assert!(approval.must_ask(&view(Tool::EditFile, true)));
        assert!(!approval.must_ask(&view(Tool::ReadFile, true)));
        assert!(!approval.must_ask(&view(Tool::ListDir, false)));
    }

    #[test]
    fn auto_modes_still_ask_for_anything_outside_the_sandbox() {
        for mode in [ApprovalMode::AutoSandboxed, ApprovalMode::Auto] {
            let approval = Approval::new(mode);
            assert!(
                !approval.must_ask(&view(Tool::ExecuteBash, true)),
                "{mode:?}"
            );
            assert!(
                approval.must_ask(&view(Tool::ExecuteBash, false)),
                "{mode:?}"
            );
            assert!(approval.must_ask(&view(Tool::WriteFile, false)), "{mode:?}");
        }
    }

    #[test]
    fn always_holds_for_sandboxed_calls_of_that_tool_only() {
        let mut approval = Approval::new(ApprovalMode::Ask);
        let mut asker = ScriptedAsker {
            answers: [Answer::Always, Answer::Always].into(),
            ..Default::default()
        };
        let d = approval.decide(&view(Tool::ExecuteBash, true), &mut asker);
        assert_eq!(
            d,
            Decision {
                answer: Answer::Always,
                asked: true
            }
        );
        let d = approval.decide(&view(Tool::ExecuteBash, true), &mut asker);
        assert_eq!(
            d,
            Decision {
                answer: Answer::Yes,
                asked: false
            }
        );
        // Another tool is still asked about.
        assert!(approval.must_ask(&view(Tool::WriteFile, true)));
        // "always" for an unsandboxed call is a one-time yes.
        approval.decide(&view(Tool::ExecuteBash, false), &mut asker);
        assert!(approval.must_ask(&view(Tool::ExecuteBash, false)));
        assert_eq!(asker.questions.len(), 2);
        assert!(
            asker.questions[1].contains("OUTSIDE THE SANDBOX"),
            "{}",
            asker.questions[1]
        );
    }

    #[test]
    fn no_answer_left_means_no() {
        let mut approval = Approval::new(ApprovalMode::Ask);
        let mut asker = ScriptedAsker::default();
        let d = approval.decide(&view(Tool::ExecuteBash, true), &mut asker);
        assert_eq!(d.answer, Answer::No);
    }
}
