//! The tools the agent (`chitti run`/`chitti chat`) and the MCP server (`chitti mcp`) offer.
//!
//! `execute_bash` runs its command in the OS sandbox. The file tools run in chitti's own
//! process, where the sandbox does not reach, so [`confine`] holds them to the workspace
//! by resolving every path beneath it in the kernel. Arguments are checked against the
//! same JSON schemas the models are shown, so a bad call gets an error that names the
//! argument and the type it needs instead of a generic deserialisation failure.

pub mod confine;
pub mod edit_file;
pub mod execute_bash;
pub mod list_dir;
pub mod read_file;
mod replace;
#[cfg(test)]
pub(crate) mod testing;
pub mod write_file;

use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::policy::{Policy, PolicySource};
use crate::sandbox::Backend;

/// Default cap per captured stream of `execute_bash`: enough for a failing test's report,
/// small enough not to flood a model's context.
pub const DEFAULT_OUTPUT_CAP: usize = 30_000;

/// What every tool declares about itself.
pub trait ToolSpec {
    /// The name models call it by.
    const NAME: &'static str;
    /// What models are told it does.
    const DESCRIPTION: &'static str;
    /// Its arguments; the JSON schema shown to models is generated from this type.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    /// Whether it runs a process in the sandbox (rather than in chitti's own process).
    fn needs_sandbox() -> bool;
    /// Whether it only reads: the agent never asks for approval before these.
    fn is_read_only() -> bool;
}

/// A tool that works on workspace files in chitti's own process (blocking I/O).
pub trait FileTool: ToolSpec {
    fn run(policy: &Policy, args: Self::Args) -> ToolResult;
}

/// Every tool, for dispatch and for the approval logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    ExecuteBash,
    ReadFile,
    ListDir,
    WriteFile,
    EditFile,
}

impl Tool {
    pub const ALL: [Tool; 5] = [
        Tool::ExecuteBash,
        Tool::ReadFile,
        Tool::ListDir,
        Tool::WriteFile,
        Tool::EditFile,
    ];

    pub fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn needs_sandbox(self) -> bool {
        self.info().needs_sandbox
    }

    pub fn is_read_only(self) -> bool {
        self.info().read_only
    }

    /// Checks a call's arguments without running it; returns them as a JSON object
    /// (models may send the object as a string of JSON).
    pub fn check_args(self, args: &Value) -> Result<Value, ToolResult> {
        let args = normalize_args(self.name(), args.clone())?;
        let checked = match self {
            Tool::ExecuteBash => {
                parse_normalized::<execute_bash::ExecuteBash>(args.clone()).map(drop)
            }
            Tool::ReadFile => parse_normalized::<read_file::ReadFile>(args.clone()).map(drop),
            Tool::ListDir => parse_normalized::<list_dir::ListDir>(args.clone()).map(drop),
            Tool::WriteFile => parse_normalized::<write_file::WriteFile>(args.clone()).map(drop),
            Tool::EditFile => parse_normalized::<edit_file::EditFile>(args.clone()).map(drop),
        };
        checked.map(|()| args)
    }

    pub fn definition(self) -> ToolDefinition {
        let info = self.info();
        ToolDefinition {
            name: info.name.to_string(),
            description: info.description.to_string(),
            parameters: (info.parameters)(),
        }
    }

    /// One place that maps the enum to the per-tool declarations.
    fn info(self) -> Info {
        match self {
            Tool::ExecuteBash => Info::of::<execute_bash::ExecuteBash>(),
            Tool::ReadFile => Info::of::<read_file::ReadFile>(),
            Tool::ListDir => Info::of::<list_dir::ListDir>(),
            Tool::WriteFile => Info::of::<write_file::WriteFile>(),
            Tool::EditFile => Info::of::<edit_file::EditFile>(),
        }
    }
}

struct Info {
    name: &'static str,
    description: &'static str,
    needs_sandbox: bool,
    read_only: bool,
    parameters: fn() -> Value,
}

impl Info {
    fn of<T: ToolSpec>() -> Info {
        Info {
            name: T::NAME,
            description: T::DESCRIPTION,
            needs_sandbox: T::needs_sandbox(),
            read_only: T::is_read_only(),
            parameters: parameters::<T::Args>,
        }
    }
}

/// A tool as offered to a model or an MCP client.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// Every tool's definition, with every argument.
pub fn definitions() -> Vec<ToolDefinition> {
    Tool::ALL.into_iter().map(Tool::definition).collect()
}

/// The JSON schema of an argument type, without the keys that only matter for a
/// stand-alone schema document (models get the tool's description separately).
pub fn parameters<T: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(T).to_value();
    if let Some(map) = schema.as_object_mut() {
        for key in ["$schema", "title", "description"] {
            map.remove(key);
        }
    }
    if let Some(props) = schema["properties"].as_object_mut() {
        for prop in props.values_mut() {
            // Doc comments are wrapped for the source, not for the model.
            if let Some(text) = prop["description"].as_str() {
                prop["description"] = Value::String(text.replace('\n', " "));
            }
        }
    }
    schema
}

/// [`parameters`] of `T`, generated once per process: every call checks its arguments
/// against it, and a long session (chat, mcp) makes many calls. One leaked value per tool.
fn cached_parameters<T: JsonSchema + 'static>() -> &'static Value {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<TypeId, &'static Value>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    cache
        .entry(TypeId::of::<T>())
        .or_insert_with(|| Box::leak(Box::new(parameters::<T>())))
}

/// What a call returns: structured content for programs, text for models.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// False when the tool could not do what was asked (bad arguments, refused path,
    /// sandbox failure). A command that ran and failed is `ok`: its exit code says so.
    pub ok: bool,
    pub content: Value,
    pub text: String,
}

impl ToolResult {
    pub fn success(content: Value, text: impl Into<String>) -> ToolResult {
        ToolResult {
            ok: true,
            content,
            text: text.into(),
        }
    }

    /// A call that ran but in which the sandbox failed a promise (a protected path left
    /// changed, an end it cannot confirm): the full result, with `error` added to it.
    pub fn failed(mut content: Value, text: String, error: &str) -> ToolResult {
        if let Some(fields) = content.as_object_mut() {
            fields.insert("error".into(), json!(error));
        }
        ToolResult {
            ok: false,
            content,
            text,
        }
    }

    /// Whether this is the result of a call whose sandbox failed a promise (see
    /// [`ToolResult::failed`]): a protected path left changed, an end not confirmed.
    pub fn broke_a_promise(&self) -> bool {
        let unrepaired = self.content["protected_paths_restored"]
            .as_array()
            .is_some_and(|lines| {
                lines
                    .iter()
                    .any(|l| l.as_str().is_some_and(crate::sandbox::is_unrepaired))
            });
        !self.ok && (unrepaired || self.content["end_unconfirmed"] == true)
    }

    pub fn error(message: impl Into<String>) -> ToolResult {
        let message = message.into();
        ToolResult {
            ok: false,
            content: json!({ "error": message }),
            text: message,
        }
    }
}

/// Held while a file tool runs, across every toolbox of the process.
static FILE_TOOLS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The tools bound to one session's policy and sandbox backend.
#[derive(Debug, Clone)]
pub struct Toolbox {
    pub policy: Arc<Policy>,
    pub backend: Backend,
    /// Cap per captured stream of `execute_bash`, in bytes (head and tail are kept).
    pub output_cap: usize,
    /// Whether `execute_bash` honours `sandbox: false` (the agent must then ask the user).
    pub allow_sandbox_false: bool,
    /// When set, `policy` is resolved again from it for every call.
    source: Option<Arc<PolicySource>>,
    /// What the session's calls reuse from one another (the Landlock ruleset).
    session: Arc<crate::sandbox::SessionCache>,
    /// For one `execute_bash` call of a session: the credential search its sandbox runs
    /// after the fork, `policy` lacking the credential locations until then (see
    /// [`Toolbox::for_a_command`]).
    credentials_later: Option<crate::policy::CredentialSearch>,
}

impl Toolbox {
    pub fn new(policy: Arc<Policy>, backend: Backend) -> Toolbox {
        Toolbox {
            policy,
            backend,
            output_cap: DEFAULT_OUTPUT_CAP,
            allow_sandbox_false: false,
            source: None,
            session: Arc::default(),
            credentials_later: None,
        }
    }

    /// A toolbox for a long-lived session: `policy`, already resolved from `source`,
    /// serves until the first call; every call resolves it again from `source`, so that
    /// what appears on the host mid-session (a new credential directory, a new
    /// repository) is protected too.
    pub fn resolving_each_call(policy: Policy, source: PolicySource, backend: Backend) -> Toolbox {
        let mut toolbox = Toolbox::new(Arc::new(policy), backend);
        toolbox.source = Some(Arc::new(source));
        toolbox
    }

    /// This toolbox with the policy as it stands now (itself when it has no source).
    fn for_this_call(&self) -> Result<Toolbox, ToolResult> {
        let Some(source) = &self.source else {
            return Ok(self.clone());
        };
        let policy = source.resolve().map_err(|e| unresolved(&e))?;
        Ok(Toolbox {
            policy: Arc::new(policy),
            source: None,
            ..self.clone()
        })
    }

    /// [`Toolbox::for_this_call`] for an `execute_bash` call. Where the sandbox can look
    /// for the credential locations after its fork (a Landlock call of a session run by
    /// root, `sandbox::credentials_can_wait`), the search is left to it: it then
    /// overlaps the command's start instead of preceding it (some 0.2-0.3 ms of each
    /// call). Not for a call given a working directory, which is checked against the
    /// credential locations first.
    fn for_a_command(&self, args: &execute_bash::Args) -> Result<Toolbox, ToolResult> {
        let Some(source) = &self.source else {
            return Ok(self.clone());
        };
        let later = args.working_directory.is_none()
            && args.sandbox != Some(false)
            && crate::sandbox::credentials_can_wait(self.backend, true);
        if !later {
            return self.for_this_call();
        }
        let (policy, search) = source
            .resolve_without_credentials()
            .map_err(|e| unresolved(&e))?;
        Ok(Toolbox {
            policy: Arc::new(policy),
            source: None,
            credentials_later: Some(search),
            ..self.clone()
        })
    }

    /// The definitions this toolbox honours: `sandbox` is offered only when allowed, so
    /// models are not tempted by an argument that would be refused.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        let mut defs = definitions();
        if !self.allow_sandbox_false {
            for def in defs
                .iter_mut()
                .filter(|d| d.name == execute_bash::ExecuteBash::NAME)
            {
                if let Some(props) = def.parameters["properties"].as_object_mut() {
                    props.remove("sandbox");
                }
            }
        }
        defs
    }

    /// Calls tool `name`. Never panics: every failure is an error result that says what
    /// is wrong. `args` may also be a JSON string holding the object (as some model
    /// APIs deliver function arguments).
    pub async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.call_with_cancel(name, args, std::future::pending())
            .await
    }

    /// Like [`Toolbox::call`]; when `cancel` resolves, a running command is killed (with
    /// its whole process tree) and reported as cancelled.
    pub async fn call_with_cancel(
        &self,
        name: &str,
        args: Value,
        cancel: impl Future<Output = ()>,
    ) -> ToolResult {
        let Some(tool) = Tool::from_name(name) else {
            let known: Vec<_> = Tool::ALL.iter().map(|t| t.name()).collect();
            return ToolResult::error(format!(
                "unknown tool `{name}`; the tools are: {}",
                known.join(", ")
            ));
        };
        match tool {
            // A command's policy depends on its arguments (see `for_a_command`).
            Tool::ExecuteBash => match parse_args::<execute_bash::ExecuteBash>(args) {
                Ok(args) => match self.for_a_command(&args) {
                    Ok(toolbox) => execute_bash::run(&toolbox, args, cancel).await,
                    Err(e) => e,
                },
                Err(e) => e,
            },
            Tool::ReadFile => self.file_tool::<read_file::ReadFile>(args).await,
            Tool::ListDir => self.file_tool::<list_dir::ListDir>(args).await,
            Tool::WriteFile => self.file_tool::<write_file::WriteFile>(args).await,
            Tool::EditFile => self.file_tool::<edit_file::EditFile>(args).await,
        }
    }

    /// File tools do blocking I/O: off the async threads, on the policy as it stands now.
    async fn file_tool<T: FileTool>(&self, args: Value) -> ToolResult {
        let toolbox = match self.for_this_call() {
            Ok(toolbox) => toolbox,
            Err(e) => return e,
        };
        let args = match parse_args::<T>(args) {
            Ok(args) => args,
            Err(e) => return e,
        };
        let policy = Arc::clone(&toolbox.policy);
        tokio::task::spawn_blocking(move || {
            // One file tool at a time: a model's parallel edits of one file would otherwise
            // read, replace and write over each other (lost updates, reads of a file
            // caught truncated). They are quick; a poisoned lock only means one panicked.
            let _one_at_a_time = FILE_TOOLS.lock().unwrap_or_else(|e| e.into_inner());
            if T::is_read_only() {
                return T::run(&policy, args);
            }
            // A write can complete a nested repository the host's `git status` walks
            // into (its config, its hooks): checked after it as after a command. And the
            // command of a landlock call running meanwhile can move a protected directory
            // (`.git/hooks`) to a name the tool may write, and back while it writes (a
            // review planted a hook the host's next `git commit` ran): the protected
            // paths are recorded before the write and put back after it, as for a call.
            #[cfg(target_os = "linux")]
            let mut checks = match crate::sandbox::protected_paths_kept(&policy) {
                Ok(checks) => checks,
                Err(e) => {
                    return ToolResult::error(format!("{} did not write anything: {e}", T::NAME))
                }
            };
            #[cfg(not(target_os = "linux"))]
            let mut checks = crate::sandbox::nested_repo_checks(&policy);
            // Dropped unrun (a panic), they leave their records for the next call to repair.
            for check in &mut checks {
                check.disarm();
            }
            let result = T::run(&policy, args);
            let repairs: Vec<String> = checks.into_iter().flat_map(|c| c.run()).collect();
            with_repairs(result, repairs)
        })
        .await
        .unwrap_or_else(|e| ToolResult::error(format!("{} failed: {e}", T::NAME)))
    }
}

/// A file tool's result with what the nested-repository check moved aside after it, told
/// as a command's repairs are.
fn with_repairs(mut result: ToolResult, repairs: Vec<String>) -> ToolResult {
    if repairs.is_empty() {
        return result;
    }
    for repair in &repairs {
        result.text.push('\n');
        result
            .text
            .push_str(&execute_bash::repair_line("write", repair));
    }
    if let Some(content) = result.content.as_object_mut() {
        content.insert("protected_paths_restored".into(), json!(repairs));
    }
    if repairs.iter().any(|r| crate::sandbox::is_unrepaired(r)) {
        return ToolResult::failed(result.content, result.text, UNREPAIRED_ERROR);
    }
    result
}

/// A result's error when a protected path was left changed (the lines of its text say
/// which).
pub const UNREPAIRED_ERROR: &str = "a protected path was changed and chitti could not put it \
     back; do not run git there before it has been checked by hand";

/// The error of a call whose policy cannot be resolved.
fn unresolved(e: &crate::policy::PolicyError) -> ToolResult {
    ToolResult::error(format!(
        "the sandbox policy cannot be resolved for this call, so nothing ran: {e}"
    ))
}

/// Turns raw arguments into `T::Args`, or an error result naming the argument at fault.
pub fn parse_args<T: ToolSpec>(args: Value) -> Result<T::Args, ToolResult> {
    parse_normalized::<T>(normalize_args(T::NAME, args)?)
}

/// [`parse_args`] for arguments [`normalize_args`] already made a value: normalising twice
/// would also unwrap JSON encoded twice, which the tools otherwise refuse.
fn parse_normalized<T: ToolSpec>(args: Value) -> Result<T::Args, ToolResult> {
    let bad = |why: String| ToolResult::error(format!("invalid arguments for {}: {why}", T::NAME));
    check_args(cached_parameters::<T::Args>(), &args).map_err(bad)?;
    serde_json::from_value(args).map_err(|e| bad(e.to_string()))
}

/// The arguments as a JSON value: some model APIs deliver them as a string of JSON, and
/// none at all means an empty object (the schema then says which ones are required).
pub fn normalize_args(tool: &str, args: Value) -> Result<Value, ToolResult> {
    match args {
        Value::String(text) => serde_json::from_str(&text).map_err(|e| {
            ToolResult::error(format!(
                "invalid arguments for {tool}: the arguments are not valid JSON ({e})"
            ))
        }),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Ok(other),
    }
}

/// Checks `args` against the flat object schemas the tools use, so that the error names
/// the argument; serde's own messages do not say which field had the wrong type.
fn check_args(schema: &Value, args: &Value) -> Result<(), String> {
    let Value::Object(args) = args else {
        return Err(format!(
            "expected a JSON object of named arguments, got {}",
            describe(args)
        ));
    };
    let empty = Map::new();
    let props = schema["properties"].as_object().unwrap_or(&empty);
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        if !args.contains_key(name) {
            return Err(format!(
                "missing required argument `{name}` ({})",
                expected(props.get(name).unwrap_or(&Value::Null))
            ));
        }
    }
    for (name, value) in args {
        let Some(prop) = props.get(name) else {
            // `sandbox` is offered only where allowed (`Toolbox::definitions`): a model
            // that was not offered it is not told of it here either.
            let known: Vec<String> = props
                .keys()
                .filter(|k| k.as_str() != "sandbox")
                .map(|k| format!("`{k}`"))
                .collect();
            return Err(format!(
                "unknown argument `{name}`; the arguments are {}",
                known.join(", ")
            ));
        };
        let Some(types) = schema_types(prop) else {
            continue;
        };
        let actual = json_type(value);
        let type_ok = types
            .iter()
            .any(|t| *t == actual || (*t == "number" && actual == "integer"));
        let in_range = match value.as_f64() {
            Some(v) => {
                prop["minimum"].as_f64().is_none_or(|min| v >= min)
                    && prop["maximum"].as_f64().is_none_or(|max| v <= max)
            }
            None => true,
        };
        if !type_ok || !in_range {
            return Err(format!(
                "argument `{name}` must be {}, got {}",
                expected(prop),
                describe(value)
            ));
        }
    }
    Ok(())
}

/// "a string", "an integer ≥ 1 (or null)", "an integer from 1 to 600": the type a schema
/// property asks for.
fn expected(prop: &Value) -> String {
    let Some(types) = schema_types(prop) else {
        return "any JSON value".to_string();
    };
    let min = match (prop["minimum"].as_f64(), prop["maximum"].as_f64()) {
        (Some(min), Some(max)) => format!(" from {min} to {max}"),
        (Some(min), None) => format!(" ≥ {min}"),
        (None, Some(max)) => format!(" ≤ {max}"),
        (None, None) => String::new(),
    };
    let mut text = types
        .iter()
        .filter(|t| **t != "null")
        .map(|t| format!("{}{min}", with_article(t)))
        .collect::<Vec<_>>()
        .join(" or ");
    if types.contains(&"null") {
        text.push_str(" (or null)");
    }
    text
}

/// The JSON types a schema property allows (`Option<T>` gives `[T, "null"]`).
fn schema_types(prop: &Value) -> Option<Vec<&str>> {
    match &prop["type"] {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The value's type and a short rendering of it, for error messages.
fn describe(value: &Value) -> String {
    let mut shown = value.to_string();
    if shown.chars().count() > 40 {
        shown = shown.chars().take(40).collect::<String>() + "…";
    }
    match value {
        Value::Null => "null".to_string(),
        Value::Array(_) | Value::Object(_) => {
            format!("{} ({shown})", with_article(json_type(value)))
        }
        _ => format!("{} {shown}", with_article(json_type(value))),
    }
}

fn with_article(word: &str) -> String {
    let article = if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {word}")
}

/// How many bytes of a file decide whether it is text: NUL bytes do not occur in text.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Whether `head` (the start of a file) looks like binary data.
pub fn looks_binary(head: &[u8]) -> bool {
    head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::Fixture;

    /// A toolbox that resolves the policy for each call, on the landlock backend.
    fn landlock_session(fx: &Fixture) -> Toolbox {
        Toolbox::resolving_each_call((*fx.policy).clone(), fx.source.clone(), Backend::Landlock)
    }

    /// Whether Landlock can be used here; says SKIP, and why, if not.
    #[cfg(target_os = "linux")]
    fn landlock_works() -> bool {
        let blocker = crate::sandbox::Capabilities::get().landlock_blocker();
        if let Some(why) = &blocker {
            eprintln!("SKIP: {why}");
        }
        blocker.is_none()
    }

    /// Whether a session's landlock calls search after the fork here; says SKIP if not.
    #[cfg(target_os = "linux")]
    fn searches_after_the_fork() -> bool {
        let can = crate::sandbox::credentials_can_wait(Backend::Landlock, true);
        if !can {
            eprintln!(
                "SKIP: the search after the fork needs root, mounts and pidfds of threads \
                 (Linux 6.9)"
            );
        }
        can
    }

    #[tokio::test]
    async fn a_session_toolbox_covers_credentials_that_appear_mid_session() {
        let fx = Fixture::new();
        let backend = fx.toolbox().backend;
        let session =
            Toolbox::resolving_each_call((*fx.policy).clone(), fx.source.clone(), backend);
        let fixed = fx.toolbox();
        std::fs::create_dir_all(fx.home.join(".aws")).unwrap();
        std::fs::write(fx.home.join(".aws/credentials"), "AWS-DECOY-KEY").unwrap();
        let cat = json!({"command": "cat ~/.aws/credentials; echo ran"});
        let r = session.call("execute_bash", cat.clone()).await;
        assert!(
            r.text.contains("ran") && !r.text.contains("AWS-DECOY-KEY"),
            "{}",
            r.text
        );
        let read = json!({"path": fx.home.join(".aws/credentials")});
        let r = session.call("read_file", read).await;
        assert!(!r.ok && !r.text.contains("AWS-DECOY-KEY"), "{}", r.text);
        // The control: a policy resolved once does not know the new directory.
        let r = fixed.call("execute_bash", cat).await;
        assert!(
            r.text.contains("AWS-DECOY-KEY"),
            "the control could not read it: {}",
            r.text
        );
    }

    /// On landlock a session keeps its ruleset between calls: a credential that appears
    /// after a call, in a directory that call's ruleset granted whole, must still be
    /// hidden from the next (the plan changes, so the kept ruleset is not used).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_kept_landlock_ruleset_does_not_cover_a_credential_that_appeared_since() {
        if !landlock_works() {
            return;
        }
        let fx = Fixture::new();
        // ~/.cargo holds no credential yet: the first plan grants it whole.
        std::fs::create_dir_all(fx.home.join(".cargo")).unwrap();
        std::fs::write(fx.home.join(".cargo/config.toml"), "[build]\n").unwrap();
        let session = landlock_session(&fx);
        let cat =
            json!({"command": "cat ~/.cargo/config.toml ~/.cargo/credentials.toml; echo ran"});
        // Two calls: the second runs under the ruleset the first built.
        for _ in 0..2 {
            let r = session.call("execute_bash", cat.clone()).await;
            assert!(
                r.text.contains("[build]") && r.text.contains("ran"),
                "{}",
                r.text
            );
        }
        std::fs::write(fx.home.join(".cargo/credentials.toml"), "CARGO-DECOY-TOKEN").unwrap();
        let r = session.call("execute_bash", cat).await;
        assert!(
            r.text.contains("[build]") && !r.text.contains("CARGO-DECOY-TOKEN"),
            "{}",
            r.text
        );
    }

    /// As root on landlock, a session's command leaves the credential search to a thread
    /// started for the call, which masks what it finds in a mount namespace of its own
    /// after the fork (`for_a_command`). The masks must be in place in the command's
    /// namespace, and no thread that goes on (the runtime's, including its blocking pool)
    /// may be left in that namespace. Other tests' threads are not looked at: one may be
    /// in a namespace of its own for good reason.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_session_call_searching_after_the_fork_masks_and_leaves_no_thread_behind() {
        if !searches_after_the_fork() {
            return;
        }
        let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        let threads = Arc::new(std::sync::Mutex::new(vec![unsafe { libc::gettid() }]));
        let runtime = {
            let threads = Arc::clone(&threads);
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_start(move || threads.lock().unwrap().push(unsafe { libc::gettid() }))
                .build()
                .unwrap()
        };
        let fx = Fixture::new();
        let session = landlock_session(&fx);
        let command = "readlink /proc/self/ns/mnt; cat ~/.ssh/id_ed25519 /etc/shadow; echo ran";
        for _ in 0..3 {
            let r = runtime.block_on(session.call("execute_bash", json!({ "command": command })));
            assert!(r.text.contains("ran"), "{}", r.text);
            assert!(
                !r.text.contains("PRIVATE KEY") && !r.text.contains("root:"),
                "a credential was readable: {}",
                r.text
            );
            assert!(
                !r.text.contains(&*ours.to_string_lossy()),
                "the command ran in this process's mount namespace: {}",
                r.text
            );
            for tid in threads.lock().unwrap().iter() {
                // A blocking thread may have ended meanwhile.
                if let Ok(ns) = std::fs::read_link(format!("/proc/self/task/{tid}/ns/mnt")) {
                    assert_eq!(ns, ours, "thread {tid} was left in another mount namespace");
                }
            }
        }
    }

    /// The thread that made a call's namespace lives until the command has joined it: a
    /// signal that interrupts its wait (a handled one: the agent handles SIGINT) must not
    /// end it early, or the command's join fails and the call with it (most calls did,
    /// with SIGUSR1 sent to those threads all along).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_signal_to_the_thread_that_makes_the_namespace_does_not_fail_the_call() {
        use std::sync::atomic::{AtomicBool, Ordering};
        if !searches_after_the_fork() {
            return;
        }
        extern "C" fn ignore(_: libc::c_int) {}
        // SIGUSR1 is used by no other test; a handler makes it interrupt, not kill.
        let handler = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
        unsafe { libc::signal(libc::SIGUSR1, handler) };
        let stop = Arc::new(AtomicBool::new(false));
        let pester = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                        let comm = std::fs::read_to_string(task.path().join("comm"));
                        let tid = task.file_name().to_string_lossy().parse::<libc::pid_t>();
                        if let (Ok(comm), Ok(tid)) = (comm, tid) {
                            if comm.trim() == "chitti-masks" {
                                unsafe {
                                    libc::syscall(
                                        libc::SYS_tgkill,
                                        libc::getpid(),
                                        tid,
                                        libc::SIGUSR1,
                                    )
                                };
                            }
                        }
                    }
                }
            })
        };
        let fx = Fixture::new();
        let session = landlock_session(&fx);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut failed = Vec::new();
        for i in 0..60 {
            let call = session.call(
                "execute_bash",
                json!({ "command": format!("echo call-{i}") }),
            );
            let r = runtime.block_on(call);
            if !r.text.contains(&format!("call-{i}")) {
                failed.push(r.text);
            }
        }
        stop.store(true, Ordering::Relaxed);
        pester.join().unwrap();
        assert!(
            failed.is_empty(),
            "{} of 60 calls failed: {:?}",
            failed.len(),
            failed.first()
        );
    }

    /// A credential location that comes to lie in the workspace mid-session (a link
    /// ~/.gnupg into it) ends the next call before its command runs anything, also where
    /// the search runs after the fork.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_session_call_fails_closed_when_the_workspace_comes_to_hold_credentials() {
        if !landlock_works() {
            return;
        }
        let fx = Fixture::new();
        let session = landlock_session(&fx);
        let marker = fx.ws.join("ran-marker");
        let touch = json!({ "command": format!("touch {}", marker.display()) });
        let r = session.call("execute_bash", touch.clone()).await;
        assert!(
            r.ok && marker.exists(),
            "the control did not run: {}",
            r.text
        );
        std::fs::remove_file(&marker).unwrap();
        std::fs::create_dir(fx.ws.join("keys")).unwrap();
        std::os::unix::fs::symlink(fx.ws.join("keys"), fx.home.join(".gnupg")).unwrap();
        let r = session.call("execute_bash", touch).await;
        assert!(!marker.exists(), "the command ran: {}", r.text);
        assert!(!r.ok && r.text.contains(".gnupg"), "{}", r.text);
    }

    /// The landlock supervisor is a fork of chitti, and it allocates (its report, the
    /// repairs). A fork while another thread held the allocator's lock left the supervisor
    /// waiting for that lock forever, and the call hung until its timeout (seen in a
    /// multi-threaded test process; the agent's runtime has worker threads too).
    #[tokio::test]
    async fn landlock_calls_finish_while_another_thread_allocates() {
        use std::sync::atomic::{AtomicBool, Ordering};
        if !landlock_works() {
            return;
        }
        let fx = Fixture::new();
        let session = landlock_session(&fx);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let churn = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let blocks: Vec<Vec<u8>> = (0..64).map(|i| vec![1u8; 16 + i]).collect();
                    std::hint::black_box(blocks);
                }
            })
        };
        for i in 0..40 {
            let call = session.call("execute_bash", json!({"command": format!("echo call-{i}")}));
            let r = tokio::time::timeout(std::time::Duration::from_secs(20), call).await;
            let Ok(r) = r else {
                stop.store(true, Ordering::Relaxed);
                panic!("call {i} did not finish in 20 s: its supervisor is stuck");
            };
            assert!(
                r.text.contains(&format!("call-{i}")),
                "call {i}: {}",
                r.text
            );
        }
        stop.store(true, Ordering::Relaxed);
        churn.join().unwrap();
    }

    #[tokio::test]
    async fn a_session_toolbox_fails_closed_when_the_policy_no_longer_resolves() {
        let fx = Fixture::new();
        let backend = fx.toolbox().backend;
        let session =
            Toolbox::resolving_each_call((*fx.policy).clone(), fx.source.clone(), backend);
        let moved = fx.ws.with_file_name("moved");
        std::fs::rename(&fx.ws, &moved).unwrap();
        let r = session
            .call("execute_bash", json!({"command": "echo RAN$((1+1))"}))
            .await;
        assert!(!r.ok && !r.text.contains("RAN2"), "{}", r.text);
        assert!(r.text.contains("nothing ran"), "{}", r.text);
    }

    #[test]
    fn schemas_are_generated_with_every_field() {
        let defs = definitions();
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
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
        let fields = |tool: &str| -> Vec<String> {
            let def = defs.iter().find(|d| d.name == tool).unwrap();
            assert_eq!(def.parameters["type"], "object", "{tool}");
            assert_eq!(def.parameters["additionalProperties"], false, "{tool}");
            assert!(!def.description.is_empty());
            def.parameters["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        for (tool, expected) in [
            (
                "execute_bash",
                &["command", "working_directory", "timeout_seconds", "sandbox"][..],
            ),
            ("read_file", &["path", "start_line", "end_line"]),
            ("list_dir", &["path"]),
            ("write_file", &["path", "content"]),
            ("edit_file", &["path", "old_string", "new_string"]),
        ] {
            let mut got = fields(tool);
            got.sort();
            let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(got, want, "{tool}");
        }
        let bash = defs.iter().find(|d| d.name == "execute_bash").unwrap();
        assert_eq!(bash.parameters["required"], json!(["command"]));
        let description = bash.parameters["properties"]["command"]["description"]
            .as_str()
            .unwrap();
        assert!(description.contains("bash -c") && !description.contains('\n'));
        assert!(bash.parameters.get("$schema").is_none());
    }

    #[test]
    fn toolbox_hides_sandbox_false_unless_allowed() {
        let fx = Fixture::new();
        let mut tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let has_sandbox = |tb: &Toolbox| {
            tb.definitions()
                .iter()
                .find(|d| d.name == "execute_bash")
                .unwrap()
                .parameters["properties"]
                .get("sandbox")
                .is_some()
        };
        assert!(!has_sandbox(&tb));
        tb.allow_sandbox_false = true;
        assert!(has_sandbox(&tb));
    }

    #[test]
    fn read_only_and_sandbox_flags() {
        assert!(Tool::ReadFile.is_read_only() && Tool::ListDir.is_read_only());
        for tool in [Tool::WriteFile, Tool::EditFile, Tool::ExecuteBash] {
            assert!(!tool.is_read_only(), "{tool:?}");
        }
        assert!(Tool::ExecuteBash.needs_sandbox());
        assert!(!Tool::ReadFile.needs_sandbox() && !Tool::WriteFile.needs_sandbox());
        assert!(read_file::ReadFile::is_read_only());
        assert!(execute_bash::ExecuteBash::needs_sandbox());
        assert_eq!(Tool::from_name("edit_file"), Some(Tool::EditFile));
        assert_eq!(Tool::from_name("rm_rf"), None);
    }

    fn error_of(tool: &str, args: Value) -> String {
        let fx = Fixture::new();
        let tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = rt.block_on(tb.call(tool, args));
        assert!(!result.ok, "{tool} accepted bad arguments: {}", result.text);
        assert_eq!(result.content["error"], result.text);
        result.text
    }

    #[test]
    fn bad_arguments_name_the_field_and_type() {
        let e = error_of("read_file", json!({}));
        assert!(
            e.contains("missing required argument `path` (a string)"),
            "{e}"
        );
        let e = error_of("read_file", json!({"path": 5}));
        assert!(
            e.contains("argument `path` must be a string, got an integer 5"),
            "{e}"
        );
        let e = error_of("read_file", json!({"path": "a", "start_line": "3"}));
        assert!(
            e.contains("`start_line` must be an integer ≥ 1 (or null)"),
            "{e}"
        );
        assert!(e.contains("got a string \"3\""), "{e}");
        let e = error_of("read_file", json!({"path": "a", "start_line": 0}));
        assert!(e.contains("`start_line` must be an integer ≥ 1"), "{e}");
        let e = error_of(
            "execute_bash",
            json!({"command": "ls", "timeout_seconds": -1}),
        );
        assert!(
            e.contains("`timeout_seconds` must be an integer from 1 to 600"),
            "{e}"
        );
        // Over the limit is refused like under it, not quietly cut to 600.
        let e = error_of(
            "execute_bash",
            json!({"command": "ls", "timeout_seconds": 601}),
        );
        assert!(
            e.contains("`timeout_seconds` must be an integer from 1 to 600 (or null), got"),
            "{e}"
        );
        let schema = parameters::<execute_bash::Args>();
        assert_eq!(
            schema["properties"]["timeout_seconds"]["maximum"],
            json!(execute_bash::MAX_TIMEOUT.as_secs()),
            "the schema's limit is the one enforced"
        );
        let e = error_of("read_file", json!({"path": "a", "nope": 1}));
        assert!(e.contains("unknown argument `nope`"), "{e}");
        assert!(e.contains("`start_line`"), "{e}");
        // Not offered here, so not named either.
        let e = error_of("execute_bash", json!({"command": "true", "colour": 1}));
        assert!(e.contains("unknown argument `colour`"), "{e}");
        assert!(e.contains("`command`") && !e.contains("`sandbox`"), "{e}");
        let e = error_of("list_dir", json!(["."]));
        assert!(e.contains("expected a JSON object"), "{e}");
        let e = error_of("list_dir", json!("{\"path\": "));
        assert!(e.contains("not valid JSON"), "{e}");
        let e = error_of("execute_bash", json!({"command": "ls", "sandbox": "no"}));
        assert!(e.contains("`sandbox` must be a boolean (or null)"), "{e}");
        let e = error_of("frobnicate", json!({}));
        assert!(e.contains("unknown tool `frobnicate`"), "{e}");
        assert!(e.contains("read_file"), "{e}");
        assert!(error_of("list_dir", Value::Null).contains("missing required argument `path`"));
    }

    #[tokio::test]
    async fn arguments_may_arrive_as_a_json_string() {
        let fx = Fixture::new();
        std::fs::write(fx.ws.join("a.txt"), "hello\n").unwrap();
        let tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let r = tb
            .call("read_file", Value::String(r#"{"path": "a.txt"}"#.into()))
            .await;
        assert!(r.ok, "{}", r.text);
        assert!(r.text.contains("hello"));
    }

    /// Checking a call and running it agree: arguments sent as a string of JSON pass both,
    /// and JSON encoded twice (a string of a string) is refused by both, where the check
    /// used to unwrap it a second time and pass it.
    #[tokio::test]
    async fn the_check_and_the_call_accept_the_same_arguments() {
        let fx = Fixture::new();
        std::fs::write(fx.ws.join("a.txt"), "hello\n").unwrap();
        let tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let once = Value::String(r#"{"path": "a.txt"}"#.into());
        let twice = Value::String(serde_json::to_string(&once).unwrap());
        assert_eq!(
            Tool::ReadFile.check_args(&once).unwrap(),
            json!({"path": "a.txt"})
        );
        assert!(tb.call("read_file", once).await.ok);
        let refused = Tool::ReadFile.check_args(&twice).unwrap_err();
        assert!(
            refused.text.contains("expected a JSON object"),
            "{}",
            refused.text
        );
        assert!(!tb.call("read_file", twice).await.ok);
    }

    /// The command of a landlock call moves `.git/hooks` to a plain name and plants a large
    /// file there; edit_file is asked to edit it, and once the command sees the tool open
    /// the file it moves the directory back and its call ends (putting back what it
    /// recorded): the tool's write lands in `.git/hooks`. It is taken out again after the
    /// write (a review planted a hook so, which the host's next `git commit` ran).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_landing_in_a_protected_directory_moved_back_is_undone() {
        use std::os::unix::ffi::OsStrExt;
        let fx = Fixture::new();
        let hooks = fx.ws.join(".git/hooks");
        let moved = fx.ws.join("h2");
        assert!(
            fx.policy.read_only.contains(&hooks),
            "{:?}",
            fx.policy.read_only
        );
        // The running call, as its launch records it.
        let mut running = crate::sandbox::protected_paths_kept(&fx.policy).unwrap();
        for check in &mut running {
            check.disarm();
        }
        std::fs::rename(&hooks, &moved).unwrap();
        let planted = moved.join("pre-commit");
        let padding = "# padding\n".repeat(1_500_000);
        std::fs::write(&planted, format!("#!/bin/sh\n{padding}# benign\n")).unwrap();
        let inotify = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        assert!(inotify >= 0);
        let watched = std::ffi::CString::new(planted.as_os_str().as_bytes()).unwrap();
        assert!(unsafe { libc::inotify_add_watch(inotify, watched.as_ptr(), libc::IN_OPEN) } >= 0);
        let (back, from) = (hooks.clone(), moved.clone());
        let command = std::thread::spawn(move || {
            let mut event = [0u8; 4096];
            unsafe { libc::read(inotify, event.as_mut_ptr().cast(), event.len()) };
            let _ = std::fs::rename(&from, &back);
            let repairs: Vec<String> = running.into_iter().flat_map(|c| c.run()).collect();
            unsafe { libc::close(inotify) };
            repairs
        });
        let tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let edit = json!({"path": "h2/pre-commit", "old_string": "# benign\n",
                          "new_string": "touch PWNED\n"});
        let result = rt.block_on(tb.call("edit_file", edit));
        let call_repairs = command.join().unwrap();
        let hook = std::fs::read_to_string(hooks.join("pre-commit")).unwrap_or_default();
        assert!(
            !hook.contains("PWNED"),
            "the edit left a hook in .git/hooks\n{}\n{call_repairs:?}",
            result.text
        );
        // Whichever side put it back, the write's answer says what happened to it.
        if result.ok && !call_repairs.iter().any(|r| r.contains("hooks")) {
            assert!(result.text.contains("restored"), "{}", result.text);
        }
    }

    /// Forty edits of forty lines of one file, all at once: every one lands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn parallel_edits_of_one_file_all_land() {
        let fx = Fixture::new();
        let lines: Vec<String> = (0..40).map(|i| format!("line-{i:02}")).collect();
        std::fs::write(fx.ws.join("race.txt"), lines.join("\n") + "\n").unwrap();
        let tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let edits = lines.iter().map(|line| {
            let tb = tb.clone();
            let args =
                json!({"path": "race.txt", "old_string": line, "new_string": line.to_uppercase()});
            tokio::spawn(async move { tb.call("edit_file", args).await })
        });
        for result in futures::future::join_all(edits).await {
            let result = result.unwrap();
            assert!(result.ok, "{}", result.text);
        }
        let text = std::fs::read_to_string(fx.ws.join("race.txt")).unwrap();
        let want: Vec<String> = lines.iter().map(|l| l.to_uppercase()).collect();
        assert_eq!(text, want.join("\n") + "\n");
    }

    #[tokio::test]
    async fn file_tools_through_call() {
        let fx = Fixture::new();
        let tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let ok = |r: ToolResult| {
            assert!(r.ok, "{}", r.text);
            r
        };
        ok(tb
            .call(
                "write_file",
                json!({"path": "src/lib.rs", "content": "pub fn a() {}\n"}),
            )
            .await);
        let r = ok(tb
            .call(
                "edit_file",
                json!({"path": "src/lib.rs", "old_string": "a()", "new_string": "b()"}),
            )
            .await);
        assert!(
            r.text.contains("-pub fn a() {}\n+pub fn b() {}"),
            "{}",
            r.text
        );
        let r = ok(tb.call("read_file", json!({"path": "src/lib.rs"})).await);
        assert_eq!(r.text, "     1\tpub fn b() {}\n");
        let r = ok(tb.call("list_dir", json!({"path": "src"})).await);
        assert_eq!(r.content["entries"], json!(["lib.rs"]));
        let r = tb.call("read_file", json!({"path": "../../outside"})).await;
        assert!(!r.ok);
        assert_eq!(r.content["kind"], "outside_workspace");
    }

    /// A write that completes a staged nested repository (here its config, in a git
    /// directory with another name than `.git`) is checked as a command is: the config
    /// the host's `git status` would run is moved aside, and the result says so.
    #[tokio::test]
    async fn a_write_into_a_nested_repository_s_git_directory_is_undone() {
        let git = crate::test_git;
        let fx = Fixture::with_profile("workspace-write", |ws| {
            git(ws, &["init", "-q"]);
            std::fs::create_dir(ws.join("sub")).unwrap();
            git(
                &ws.join("sub"),
                &["init", "-q", "--separate-git-dir", "../subgd"],
            );
            git(
                &ws.join("sub"),
                &["commit", "-q", "--allow-empty", "-m", "s"],
            );
            git(ws, &["add", "sub"]);
        });
        let tb = Toolbox::new(fx.policy.clone(), Backend::None);
        let config = "[core]\n\tfsmonitor = \"touch pwned; false\"\n";
        let r = tb
            .call(
                "write_file",
                json!({"path": "subgd/config", "content": config}),
            )
            .await;
        assert!(!fx.ws.join("subgd/config").exists(), "{}", r.text);
        let restored = r.content["protected_paths_restored"].to_string();
        assert!(restored.contains("subgd/config"), "{}", r.content);
        assert!(
            r.text.contains("changed a protected path; chitti: "),
            "{}",
            r.text
        );
    }

    #[test]
    fn binary_detection() {
        assert!(looks_binary(b"ab\0cd"));
        assert!(!looks_binary(b"plain text\n"));
        let mut late = vec![b'a'; BINARY_SNIFF_BYTES];
        late.push(0);
        assert!(!looks_binary(&late));
    }
}
