//! Model APIs: wire formats only. A provider turns the conversation and the tools' JSON
//! schemas into one HTTP request and the reply into text and tool calls. Providers know
//! nothing of the tools themselves, the sandbox or approval.

pub mod gemini;
pub mod http;
pub mod openai;
pub mod sse;

use std::future::Future;

use serde::Serialize;
use serde_json::Value;

pub use http::{ErrorKind, HttpOptions, ProviderError};

/// A function the model may call: its name, what it does, the JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDecl {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// The provider's id, or one chitti made up when the provider gave none.
    pub id: String,
    /// Whether `id` came from the provider (and so must be echoed back).
    #[serde(skip)]
    pub id_from_model: bool,
    pub name: String,
    /// The arguments as sent: an object, or a string holding JSON (which may be bad).
    pub args: Value,
}

/// What the model said in one reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantTurn {
    pub text: String,
    pub calls: Vec<ToolCall>,
    /// The provider's own message, replayed verbatim in later requests: Gemini needs its
    /// parts back exactly as sent, `thoughtSignature` included.
    pub raw: Option<Value>,
    /// The model stopped at its output token limit: the text is not all it meant to say.
    pub cut_off: bool,
}

/// The answer to one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub call_id: String,
    /// Whether the provider gave the call's id (Gemini echoes only ids it gave).
    pub id_from_model: bool,
    pub name: String,
    /// False when the call did not do what was asked (denied, bad arguments, refused).
    pub ok: bool,
    /// What the model reads.
    pub text: String,
}

#[cfg(test)]
impl ToolOutput {
    /// The answer to call `call` (whose id the provider gave, or not).
    pub fn to(call: &ToolCall, ok: bool, text: &str) -> ToolOutput {
        ToolOutput {
            call_id: call.id.clone(),
            id_from_model: call.id_from_model,
            name: call.name.clone(),
            ok,
            text: text.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User(String),
    Assistant(AssistantTurn),
    /// The answers to every call of the assistant turn before it, in the same order.
    ToolResults(Vec<ToolOutput>),
}

/// Token counts, when the API reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [FunctionDecl],
}

#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub turn: AssistantTurn,
    pub usage: Option<Usage>,
}

/// Receives the model's text as it streams in.
pub type TextSink<'a> = &'a mut (dyn FnMut(&str) + Send);

/// A model API.
pub trait Provider: Send + Sync {
    /// "gemini", "openai", …
    fn name(&self) -> &str;
    fn model(&self) -> &str;
    /// One request and its reply. Text is passed to `on_text` as it arrives (all at
    /// once when the provider does not stream). Retries are the provider's business.
    fn complete<'a>(
        &'a self,
        request: Request<'a>,
        on_text: TextSink<'a>,
    ) -> impl Future<Output = Result<Reply, ProviderError>> + Send + 'a;
}

/// Where and how a provider sends its requests: what both wire formats share.
pub struct Endpoint {
    /// Without a trailing slash.
    pub base_url: String,
    pub model: String,
    pub stream: bool,
    pub options: HttpOptions,
    pub client: reqwest::Client,
    call_ids: std::sync::atomic::AtomicU64,
}

impl Endpoint {
    pub fn new(
        base_url: &str,
        model: &str,
        stream: bool,
        options: HttpOptions,
    ) -> Result<Endpoint, ProviderError> {
        Ok(Endpoint {
            base_url: base_url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            stream,
            client: http::client(&options)?,
            options,
            call_ids: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// POSTs `body` to `url` with retries; `api` names the API in error messages.
    async fn post(
        &self,
        api: &str,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<reqwest::Response, ProviderError> {
        http::post_json(&self.client, &self.options, api, url, headers, body).await
    }

    /// Whether a request whose reply failed with `error` is sent again, after a backoff.
    /// Only a reply that broke off before any of its text was passed on (`shown`): nothing
    /// of it was shown or acted on, so the user sees a single reply. Once text has been
    /// shown, a second reply would print it twice, so the error stands; so does any other
    /// kind of error (the request itself was already retried as far as sensible).
    async fn resend_after(&self, error: &ProviderError, shown: bool, resends: &mut u32) -> bool {
        let shown = shown && self.options.streamed_text_is_shown;
        if error.kind != http::ErrorKind::CutOff || shown || *resends >= self.options.max_retries {
            return false;
        }
        *resends += 1;
        let wait = self.options.backoff * 2u32.saturating_pow(*resends - 1);
        if let Some(on_retry) = &self.options.on_retry {
            on_retry(&http::RetryNotice {
                reason: error.message.clone(),
                wait,
                attempt: *resends + 1,
                max_attempts: self.options.max_retries + 1,
            });
        }
        tokio::time::sleep(wait).await;
        true
    }
}

/// An id for a call whose provider gave none: unique within the session.
pub(crate) fn made_up_call_id(counter: &std::sync::atomic::AtomicU64) -> String {
    let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("call_{n}")
}

/// The provider chosen at run time.
pub enum AnyProvider {
    Gemini(gemini::Gemini),
    OpenAi(openai::OpenAi),
}

impl Provider for AnyProvider {
    fn name(&self) -> &str {
        match self {
            AnyProvider::Gemini(p) => p.name(),
            AnyProvider::OpenAi(p) => p.name(),
        }
    }

    fn model(&self) -> &str {
        match self {
            AnyProvider::Gemini(p) => p.model(),
            AnyProvider::OpenAi(p) => p.model(),
        }
    }

    async fn complete<'a>(
        &'a self,
        request: Request<'a>,
        on_text: TextSink<'a>,
    ) -> Result<Reply, ProviderError> {
        match self {
            AnyProvider::Gemini(p) => p.complete(request, on_text).await,
            AnyProvider::OpenAi(p) => p.complete(request, on_text).await,
        }
    }
}
