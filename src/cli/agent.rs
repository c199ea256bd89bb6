//! `chitti run` and `chitti chat`: the agent on the command line.

use super::{report_error, AgentArgs};

pub fn run(_args: AgentArgs, _prompt: String) -> i32 {
    report_error("chitti run is not built yet");
    2
}

pub fn chat(_args: AgentArgs) -> i32 {
    report_error("chitti chat is not built yet");
    2
}
