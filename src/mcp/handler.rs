//! The MCP face of the toolbox: which tools are listed, and how a call and its result
//! cross the protocol.
//!
//! The argument schemas are generated at run time from the tools' argument types (and
//! `sandbox` is removed from `execute_bash`), so `list_tools` and `call_tool` are written
//! by hand instead of with rmcp's `#[tool]` macros, which expect one Rust method per
//! tool with its schema known at compile time.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, CallToolResponse, CallToolResult, ConstString,
    ContentBlock, CustomRequest, CustomResult, ErrorCode, ErrorData, Implementation,
    InitializeRequestParams, InitializeResultMethod, ListToolsRequestMethod, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool as WireTool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ServerHandler;
use serde_json::{json, Value};
use tokio::sync::{RwLock, Semaphore};
use tokio_util::sync::CancellationToken;

use super::untold::{Report, Untold};
use crate::tools::{Tool, ToolDefinition, ToolResult, Toolbox};

/// Serves one toolbox to one MCP client.
#[derive(Clone)]
pub struct McpTools {
    toolbox: Toolbox,
    /// The tools this session offers, in listing order.
    offered: Arc<[Tool]>,
    /// Their wire definitions, built once: listing is cheap and always the same.
    listing: Arc<[WireTool]>,
    /// Cancelled when the server shuts down: every running command is killed.
    shutdown: CancellationToken,
    /// Each call holds a read guard; shutdown takes the write lock to wait for them.
    in_flight: Arc<RwLock<()>>,
    /// Calls running at once; the rest wait their turn (a client sending hundreds at once
    /// gets them run, not hundreds of sandboxes).
    running: Arc<Semaphore>,
    /// What cancelled calls' sandboxes failed to keep, told with a later answer.
    untold: Arc<Untold>,
}

/// How many calls one server runs at once.
pub const MAX_CALLS_AT_ONCE: usize = 16;

impl McpTools {
    /// The read-only tools and `execute_bash`; `write_file` and `edit_file` only when
    /// `write_tools` is set. `toolbox.allow_sandbox_false` must be false: a client of an
    /// MCP server cannot be asked for approval.
    pub fn new(toolbox: Toolbox, write_tools: bool) -> McpTools {
        assert!(
            !toolbox.allow_sandbox_false,
            "the MCP server never runs commands outside the sandbox"
        );
        let offered: Arc<[Tool]> = Tool::ALL
            .into_iter()
            .filter(|t| write_tools || t.is_read_only() || *t == Tool::ExecuteBash)
            .collect();
        let network = toolbox.policy.network;
        let listing = toolbox
            .definitions()
            .into_iter()
            .filter_map(|def| {
                let tool = Tool::from_name(&def.name)?;
                offered
                    .contains(&tool)
                    .then(|| wire_tool(tool, def, network))
            })
            .collect();
        McpTools {
            toolbox,
            offered,
            listing,
            shutdown: CancellationToken::new(),
            in_flight: Arc::new(RwLock::new(())),
            running: Arc::new(Semaphore::new(MAX_CALLS_AT_ONCE)),
            untold: Arc::default(),
        }
    }

    /// `result` with what earlier calls, cancelled, could not say: in its text first, and
    /// as `earlier_calls`.
    fn with_earlier(mut result: ToolResult, earlier: &[Report]) -> ToolResult {
        if earlier.is_empty() {
            return result;
        }
        let lines: String = earlier.iter().map(Report::line).collect();
        result.text = lines + &result.text;
        if let Some(fields) = result.content.as_object_mut() {
            let values = earlier.iter().map(Report::value).collect();
            fields.insert("earlier_calls".into(), Value::Array(values));
        }
        result
    }

    /// Cancelling it kills every running command (as `shut_down` does, without waiting).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Kills every running command and waits (at most `limit`) until each call has
    /// cleaned up after itself (sandbox torn down, protected paths restored).
    pub async fn shut_down(&self, limit: std::time::Duration) -> bool {
        self.shutdown.cancel();
        tokio::time::timeout(limit, self.in_flight.write())
            .await
            .is_ok()
    }

    fn instructions(&self) -> String {
        let policy = &self.toolbox.policy;
        format!(
            "chitti's sandboxed tools for the workspace {}. execute_bash runs `bash -c` in \
             an OS sandbox ({} backend): it can write only inside the workspace, cannot read \
             credentials, and {}. The file tools refuse paths outside the workspace.",
            policy.workspace.display(),
            self.toolbox.backend.name(),
            if policy.network {
                "may use the network"
            } else {
                "has no network"
            }
        )
    }

    async fn call(&self, tool: Tool, args: Value, ct: CancellationToken) -> ToolResult {
        let _running = self.in_flight.read().await;
        // A call cancelled while it waits for its turn never starts.
        let _turn = tokio::select! {
            turn = self.running.acquire() => match turn {
                Ok(turn) => turn,
                Err(_) => return ToolResult::error("the server is shutting down"),
            },
            _ = ct.cancelled() => return ToolResult::error("cancelled before it started"),
            _ = self.shutdown.cancelled() => {
                return ToolResult::error("the server is shutting down")
            }
        };
        let shutdown = self.shutdown.clone();
        let cancel = async move {
            tokio::select! {
                _ = ct.cancelled() => {}
                _ = shutdown.cancelled() => {}
            }
        };
        self.toolbox
            .call_with_cancel(tool.name(), args, cancel)
            .await
    }
}

/// A tool definition as MCP lists it, with hints derived from what the tool does.
fn wire_tool(tool: Tool, def: ToolDefinition, network: bool) -> WireTool {
    let schema = match def.parameters {
        Value::Object(map) => map,
        other => unreachable!("tool schemas are objects, got {other}"),
    };
    let read_only = tool.is_read_only();
    let mut hints = ToolAnnotations::new()
        .read_only(read_only)
        .destructive(!read_only)
        .open_world(tool == Tool::ExecuteBash && network);
    if read_only {
        hints = hints.idempotent(true);
    }
    WireTool::new(def.name, def.description, schema).with_annotations(hints)
}

/// A toolbox result as an MCP tool result: the text models read, and the JSON object
/// programs read as structured content. A refused or malformed call is `isError`.
fn wire_result(result: ToolResult) -> CallToolResult {
    let text = vec![ContentBlock::text(result.text)];
    let mut wire = if result.ok {
        CallToolResult::success(text)
    } else {
        CallToolResult::error(text)
    };
    wire.structured_content = Some(result.content);
    wire
}

impl ServerHandler for McpTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("chitti", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.listing.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        let Some(tool) = Tool::from_name(name).filter(|t| self.offered.contains(t)) else {
            let offered: Vec<_> = self.offered.iter().map(|t| t.name()).collect();
            let hint = match Tool::from_name(name) {
                Some(_) => {
                    " (write_file and edit_file are offered only when the server runs \
                            with --allow-write-tools)"
                }
                None => "",
            };
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{name}`; the tools are: {}{hint}",
                    offered.join(", ")
                ),
                None,
            ));
        };
        let args = request.arguments.map_or(Value::Null, Value::Object);
        let cancelled = context.ct.clone();
        let result = self.call(tool, args, context.ct).await;
        // Said as it happens, whatever becomes of the answer: a cancelled call gets none,
        // and the client of a server shutting down may be gone.
        let broke_a_promise = result.broke_a_promise();
        if broke_a_promise {
            eprintln!(
                "chitti mcp: call {}: its sandbox failed a promise: {}",
                context.id,
                result.content["error"].as_str().unwrap_or_default()
            );
        }
        if cancelled.is_cancelled() {
            // Not sent (rmcp drops it): its report goes with the next answer.
            if broke_a_promise {
                let report = Report::new(json!(context.id), result.content.clone());
                self.untold.queue(report);
            }
            return Ok(wire_result(result).into());
        }
        let result = Self::with_earlier(result, &self.untold.take());
        Ok(wire_result(result).into())
    }

    fn get_tool(&self, name: &str) -> Option<WireTool> {
        self.listing.iter().find(|t| t.name == name).cloned()
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(unparsed_request(&request.method, request.params.as_ref()))
    }
}

/// The answer to a request rmcp could not parse. rmcp hands a request whose params do
/// not fit its method over as a "custom" request, so a malformed `tools/call` would be
/// answered "method not found"; the client must hear "invalid params" and what is wrong.
fn unparsed_request(method: &str, params: Option<&Value>) -> ErrorData {
    fn check<P: serde::de::DeserializeOwned>(params: Option<&Value>) -> String {
        match serde_json::from_value::<P>(params.cloned().unwrap_or(Value::Null)) {
            Err(e) => e.to_string(),
            Ok(_) => "they do not match the method's schema".into(),
        }
    }
    let (problem, expected) = match method {
        CallToolRequestMethod::VALUE => (
            check::<CallToolRequestParams>(params),
            r#"{"name": "<tool>", "arguments": {...}}"#,
        ),
        ListToolsRequestMethod::VALUE => (
            check::<PaginatedRequestParams>(params),
            r#"none, or {"cursor": "..."}"#,
        ),
        InitializeResultMethod::VALUE => (
            check::<InitializeRequestParams>(params),
            r#"{"protocolVersion": ..., "capabilities": {...}, "clientInfo": {...}}"#,
        ),
        _ => {
            return ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "unknown method `{method}`; this server answers initialize, ping, \
                     tools/list and tools/call"
                ),
                None,
            )
        }
    };
    ErrorData::invalid_params(
        format!("invalid params for {method}: {problem}; expected {expected}"),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::Fixture;

    fn names(server: &McpTools) -> Vec<String> {
        server.listing.iter().map(|t| t.name.to_string()).collect()
    }

    #[test]
    fn write_tools_are_listed_only_when_allowed() {
        let fx = Fixture::new();
        let read_only = McpTools::new(fx.toolbox(), false);
        assert_eq!(names(&read_only), ["execute_bash", "read_file", "list_dir"]);
        let all = McpTools::new(fx.toolbox(), true);
        assert_eq!(
            names(&all),
            [
                "execute_bash",
                "read_file",
                "list_dir",
                "write_file",
                "edit_file"
            ]
        );
    }

    #[test]
    fn execute_bash_does_not_offer_sandbox_false() {
        let fx = Fixture::new();
        let server = McpTools::new(fx.toolbox(), true);
        let bash = server.get_tool("execute_bash").unwrap();
        let props = bash.input_schema["properties"].as_object().unwrap();
        assert!(props.contains_key("command"));
        assert!(!props.contains_key("sandbox"), "{props:?}");
    }

    #[test]
    fn results_keep_text_and_structure() {
        let ok = wire_result(ToolResult::success(serde_json::json!({"a": 1}), "done"));
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(ok.structured_content, Some(serde_json::json!({"a": 1})));
        let err = wire_result(ToolResult::error("bad"));
        assert_eq!(err.is_error, Some(true));
        assert_eq!(
            err.structured_content,
            Some(serde_json::json!({"error": "bad"}))
        );
        // A call that ran but whose sandbox failed a promise keeps its whole result.
        let failed = ToolResult::failed(serde_json::json!({"exit_code": 0}), "ran".into(), "x");
        let failed = wire_result(failed);
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(
            failed.structured_content,
            Some(serde_json::json!({"exit_code": 0, "error": "x"}))
        );
    }
}
