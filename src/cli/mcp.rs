//! `chitti mcp`: the sandboxed tools served over MCP on stdio.

use super::{report_error, McpArgs};

pub fn run(_args: McpArgs) -> i32 {
    report_error("chitti mcp is not built yet");
    125
}
