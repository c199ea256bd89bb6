//! `chitti mcp`: the sandboxed tools served over the Model Context Protocol on stdio,
//! so that other agents (Claude Code, Codex, Cursor, ...) run their shell commands in
//! chitti's sandbox.
//!
//! Every call goes through the same [`Toolbox`] as the agent's, with the same policy,
//! backend, path confinement, timeout and output cap; the one difference is that
//! `sandbox: false` is never offered, because nobody is there to approve it. Calls run
//! concurrently (rmcp spawns a task per request), and a client's cancellation, or the
//! server shutting down, kills the command's whole process tree.
//!
//! stdout carries the protocol and nothing else; logs go to stderr.

mod bad_input;
mod eof;
mod handler;
mod untold;

use std::future::Future;
use std::time::Duration;

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

pub use handler::{McpTools, MAX_CALLS_AT_ONCE};

use crate::tools::Toolbox;

/// How long shutdown waits for running calls to tear their sandboxes down: longer than a
/// cancelled call takes at most (5 s for its tree, 5 s more for its supervisor's checks or
/// its end), so that none is left behind.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// Serves `toolbox` on stdin/stdout until the client disconnects or `stop` resolves
/// (e.g. on SIGTERM). Running commands are killed before this returns.
pub async fn serve(
    toolbox: Toolbox,
    write_tools: bool,
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    let tools = McpTools::new(toolbox, write_tools);
    let stopping = CancellationToken::new();
    let session = async {
        // With pipes (how clients start servers), reads and writes stay on the I/O
        // reactor instead of a blocking thread per message.
        let (stdin, stdout) = rmcp::transport::stdio_pipes();
        let stdin = eof::EofSignal {
            inner: bad_input::ReportBadLines::new(stdin),
            on_eof: tools.shutdown_token(),
        };
        let running = tools
            .clone()
            .serve_with_ct((stdin, stdout), stopping.clone())
            .await
            .map_err(|e| format!("the MCP session did not start: {e}"))?;
        running
            .waiting()
            .await
            .map(drop)
            .map_err(|e| format!("the MCP session failed: {e}"))
    };
    let outcome = tokio::select! {
        outcome = session => outcome,
        () = stop => {
            stopping.cancel();
            Ok(())
        }
    };
    if !tools.shut_down(SHUTDOWN_GRACE).await {
        tracing::warn!("some calls were still cleaning up when the server exited");
    }
    outcome
}
