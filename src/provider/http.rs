//! HTTP for the model APIs: one client, bounded retries with backoff, errors that say
//! what went wrong and what to do.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// How requests are sent and retried.
#[derive(Clone)]
pub struct HttpOptions {
    /// The longest the API may stay silent (connecting, or between two chunks).
    pub idle_timeout: Duration,
    /// The longest one request may take, its whole reply read: a server that keeps
    /// sending a little (keep-alive comments in a stream) never goes silent, and would
    /// otherwise keep an unattended run waiting for ever.
    pub reply_timeout: Duration,
    /// Retries after a 429, a 5xx, a timeout or a lost connection.
    pub max_retries: u32,
    /// The first retry waits this long; each later one twice as long.
    pub backoff: Duration,
    /// A 429 that asks to wait longer than this is not retried.
    pub max_retry_after: Duration,
    /// Told about every retry (the agent prints it and logs an event).
    pub on_retry: Option<RetryHook>,
    /// Whether streamed text is shown as it arrives (`chat`). When it is not (`run`, which
    /// shows a turn only once it is complete), a reply that broke off part-way can be
    /// asked for again: nobody saw its first part.
    pub streamed_text_is_shown: bool,
}

pub type RetryHook = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

/// Half an hour: a slow local model writing a long answer takes minutes, not hours.
pub const DEFAULT_REPLY_TIMEOUT_SECS: u64 = 30 * 60;

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            idle_timeout: Duration::from_secs(120),
            reply_timeout: Duration::from_secs(DEFAULT_REPLY_TIMEOUT_SECS),
            max_retries: 3,
            backoff: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(60),
            on_retry: None,
            streamed_text_is_shown: true,
        }
    }
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("idle_timeout", &self.idle_timeout)
            .field("reply_timeout", &self.reply_timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

/// A retry about to happen.
#[derive(Debug, Clone)]
pub struct RetryNotice {
    /// Why: "HTTP 429 (rate limited)", "timed out", …
    pub reason: String,
    pub wait: Duration,
    /// The attempt about to be made (2 = the first retry).
    pub attempt: u32,
    pub max_attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 401/403: the key is missing, wrong or lacks access.
    Auth,
    /// 429 after every retry, or asked to wait too long.
    RateLimited,
    /// 5xx after every retry.
    Server,
    /// Another 4xx: the request itself was refused (unknown model, bad schema, …).
    Rejected,
    /// No connection, or the API went silent, after every retry.
    Network,
    /// The reply broke off part-way (the connection was lost while it was read, or a
    /// stream ended without saying it was finished): what arrived is not the whole reply.
    CutOff,
    /// The reply was not what the wire format promises (bad JSON, missing fields).
    BadReply,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ProviderError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            kind,
            message: message.into(),
        }
    }

    pub fn bad_reply(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadReply, message)
    }
}

pub fn client(options: &HttpOptions) -> Result<reqwest::Client, ProviderError> {
    crate::name_service::builtin_sources_only();
    // aws-lc is built without its start-up constructor (.cargo/config.toml): let it look at
    // the CPU now, before any TLS, rather than at every chitti start.
    aws_lc_rs::init();
    reqwest::Client::builder()
        // A redirect would carry the request, and Gemini's key header with it (reqwest
        // drops only `Authorization` across origins), to wherever the server says.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(options.idle_timeout.min(Duration::from_secs(30)))
        .read_timeout(options.idle_timeout)
        .timeout(options.reply_timeout)
        .user_agent(concat!("chitti/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ProviderError::new(ErrorKind::Network, format!("cannot set up HTTPS: {e}")))
}

/// What one attempt came to.
enum Attempt {
    Done(reqwest::Response),
    Retry {
        reason: String,
        wait: Option<Duration>,
    },
    Fail(ProviderError),
}

/// POSTs `body` to `url` (headers from `headers`), retrying what is worth retrying.
/// Returns the response once its status is a success; its body is not read yet.
pub async fn post_json(
    client: &reqwest::Client,
    options: &HttpOptions,
    api: &str,
    url: &str,
    headers: &[(&str, String)],
    body: &Value,
) -> Result<reqwest::Response, ProviderError> {
    let body = serde_json::to_vec(body)
        .map_err(|e| ProviderError::bad_reply(format!("cannot encode the request: {e}")))?;
    let max_attempts = options.max_retries + 1;
    let mut attempt = 1;
    loop {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.clone());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let outcome = match request.send().await {
            Ok(response) => judge(api, response).await,
            Err(e) => Attempt::Retry {
                reason: describe_transport_error(&e),
                wait: None,
            },
        };
        match outcome {
            Attempt::Done(response) => return Ok(response),
            Attempt::Fail(e) => return Err(e),
            Attempt::Retry { reason, wait } => {
                if attempt >= max_attempts {
                    let kind = if reason.contains("429") {
                        ErrorKind::RateLimited
                    } else if reason.starts_with("HTTP 5") {
                        ErrorKind::Server
                    } else {
                        ErrorKind::Network
                    };
                    return Err(ProviderError::new(
                        kind,
                        format!(
                            "{api} API at {}: {reason} (gave up after {attempt} attempts)",
                            origin(url)
                        ),
                    ));
                }
                let wait = wait.unwrap_or(options.backoff * 2u32.saturating_pow(attempt - 1));
                if wait > options.max_retry_after {
                    return Err(ProviderError::new(
                        ErrorKind::RateLimited,
                        format!(
                            "{api} API: {reason}; it asks to wait {} s, longer than chitti \
                             waits ({} s): try again later",
                            wait.as_secs(),
                            options.max_retry_after.as_secs()
                        ),
                    ));
                }
                attempt += 1;
                if let Some(on_retry) = &options.on_retry {
                    on_retry(&RetryNotice {
                        reason,
                        wait,
                        attempt,
                        max_attempts,
                    });
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Sorts a response into success, worth retrying, or a final error with a message.
async fn judge(api: &str, response: reqwest::Response) -> Attempt {
    let status = response.status();
    if status.is_success() {
        return Attempt::Done(response);
    }
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    if status.is_redirection() {
        let to = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("nowhere said")
            .to_string();
        return Attempt::Fail(ProviderError::new(
            ErrorKind::Rejected,
            format!(
                "{api} API answered with a redirect (HTTP {}) to {to}: chitti follows none, \
                 since the request and its API key would go along; if that is the server, \
                 set its address as the base URL",
                status.as_u16()
            ),
        ));
    }
    let body = response.text().await.unwrap_or_default();
    let detail = api_error_message(&body);
    let code = status.as_u16();
    match code {
        429 => Attempt::Retry {
            reason: format!("HTTP 429 (rate limited){}", suffix(&detail)),
            wait: retry_after.or_else(|| gemini_retry_delay(&body)),
        },
        500 | 502 | 503 | 504 => Attempt::Retry {
            reason: format!("HTTP {code} (server error){}", suffix(&detail)),
            wait: retry_after,
        },
        401 | 403 => Attempt::Fail(ProviderError::new(
            ErrorKind::Auth,
            format!(
                "{api} API refused the request (HTTP {code}){}: check the API key \
                 ({} or the config file) and that it may use this model",
                suffix(&detail),
                key_variable(api)
            ),
        )),
        _ => Attempt::Fail(ProviderError::new(
            if code >= 500 {
                ErrorKind::Server
            } else {
                ErrorKind::Rejected
            },
            format!(
                "{api} API refused the request (HTTP {code}){}",
                suffix(&detail)
            ),
        )),
    }
}

fn suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

fn key_variable(api: &str) -> &'static str {
    if api == "gemini" {
        "GEMINI_API_KEY"
    } else {
        "OPENAI_API_KEY"
    }
}

/// `{"error": {"message": …}}` (both Gemini and OpenAI), else the start of the body.
pub fn api_error_message(body: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let error = &json["error"];
        if let Some(message) = error["message"].as_str().or(error.as_str()) {
            return message.trim().to_string();
        }
    }
    let body = body.trim();
    let mut shown: String = body.chars().take(300).collect();
    if shown.len() < body.len() {
        shown.push('…');
    }
    shown
}

/// Gemini says how long to wait in the body: `details[{"retryDelay": "20s"}]`.
fn gemini_retry_delay(body: &str) -> Option<Duration> {
    let json: Value = serde_json::from_str(body).ok()?;
    json["error"]["details"]
        .as_array()?
        .iter()
        .find_map(|d| d["retryDelay"].as_str())
        .and_then(|s| s.trim_end_matches('s').parse::<f64>().ok())
        // Any number a server sends: one too large for a Duration is no delay chitti takes
        // (the wait is capped later anyway).
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
}

fn describe_transport_error(e: &reqwest::Error) -> String {
    use std::error::Error;
    if e.is_timeout() {
        return "timed out waiting for the API (silent for longer than request_timeout_secs, \
                or the whole reply took longer than reply_timeout_secs)"
            .to_string();
    }
    // reqwest's own text ("error sending request") hides the cause; show the deepest one.
    let mut cause: &dyn Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_connect() {
        format!("cannot connect ({cause})")
    } else {
        format!("the connection failed ({cause})")
    }
}

/// Scheme, host and port of a URL: enough to say which server, without query strings
/// (which may hold a key).
fn origin(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => "the configured URL".to_string(),
    }
}

/// Reads a whole JSON body.
pub async fn read_json(api: &str, mut response: reqwest::Response) -> Result<Value, ProviderError> {
    let mut bytes = Vec::new();
    let mut read = 0;
    while let Some(chunk) =
        next_chunk(api, &mut response, &mut read, "the reply was cut off").await?
    {
        bytes.extend_from_slice(chunk.as_ref());
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        ProviderError::bad_reply(format!(
            "{api} API: the reply is not valid JSON ({e}); it began: {}",
            api_error_message(&String::from_utf8_lossy(&bytes))
        ))
    })
}

/// The most a reply may hold, whole or streamed: far beyond any model's output.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// The next piece of a reply, `None` at its end. Read piece by piece up to a limit, counted
/// in `read`: a server (or whatever answers in its place) could send gigabytes. `broken`
/// says what a transport error means here ("the reply was cut off").
async fn next_chunk(
    api: &str,
    response: &mut reqwest::Response,
    read: &mut usize,
    broken: &str,
) -> Result<Option<impl AsRef<[u8]>>, ProviderError> {
    let chunk = response.chunk().await.map_err(|e| {
        ProviderError::new(
            ErrorKind::CutOff,
            format!("{api} API: {broken}: {}", describe_transport_error(&e)),
        )
    })?;
    if let Some(chunk) = &chunk {
        *read += chunk.len();
        if *read > MAX_REPLY_BYTES {
            return Err(ProviderError::bad_reply(format!(
                "{api} API: the reply went past {} MiB, more than any model's answer: \
                 stopped reading it",
                MAX_REPLY_BYTES >> 20
            )));
        }
    }
    Ok(chunk)
}

/// Reads a server-sent-events body, handing each event's data to `on_event`.
pub async fn read_sse(
    api: &str,
    mut response: reqwest::Response,
    mut on_event: impl FnMut(&str) -> Result<(), ProviderError>,
) -> Result<(), ProviderError> {
    // Some proxies and local servers answer a streaming request with one JSON body.
    let is_json = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        let json = read_json(api, response).await?;
        return on_event(&json.to_string());
    }
    let mut parser = super::sse::Parser::default();
    let mut read = 0;
    while let Some(chunk) =
        next_chunk(api, &mut response, &mut read, "the stream broke off").await?
    {
        for data in parser.feed(chunk.as_ref()) {
            on_event(&data)?;
        }
    }
    for data in parser.finish() {
        on_event(&data)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_the_json_body() {
        let body =
            r#"{"error": {"code": 400, "message": "model not found", "status": "NOT_FOUND"}}"#;
        assert_eq!(api_error_message(body), "model not found");
        assert_eq!(api_error_message("<html>oops</html>"), "<html>oops</html>");
        let long = "x".repeat(1000);
        assert_eq!(api_error_message(&long).chars().count(), 301);
    }

    #[test]
    fn gemini_retry_delay_is_read_from_details() {
        let body = r#"{"error": {"code": 429, "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]}}"#;
        assert_eq!(gemini_retry_delay(body), Some(Duration::from_secs(7)));
        assert_eq!(gemini_retry_delay("{}"), None);
        // A review made chitti panic with this one.
        let huge = r#"{"error": {"details": [{"retryDelay": "1e300s"}]}}"#;
        assert_eq!(gemini_retry_delay(huge), None);
        let negative = r#"{"error": {"details": [{"retryDelay": "-5s"}]}}"#;
        assert_eq!(gemini_retry_delay(negative), None);
    }

    /// Sends the request `build` makes (given a client and a port) to a listener on
    /// 127.0.0.1 that never answers, and returns the first N bytes the listener received,
    /// or None when nothing connected within 10 s.
    async fn first_bytes_of<const N: usize>(
        build: impl FnOnce(&reqwest::Client, u16) -> reqwest::RequestBuilder,
    ) -> Option<[u8; N]> {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let mut conn = loop {
                match listener.accept() {
                    Ok((conn, _)) => break conn,
                    Err(_) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => return None,
                }
            };
            conn.set_nonblocking(false).unwrap();
            let mut head = [0u8; N];
            conn.read_exact(&mut head).ok()?;
            Some(head)
        });
        let client = client(&HttpOptions::default()).unwrap();
        let sent = build(&client, port).send().await;
        assert!(sent.is_err(), "the listener never answers");
        server.join().unwrap()
    }

    /// The client is built with TLS: an HTTPS request opens with a TLS ClientHello,
    /// observed by the listener.
    /// A redirect is not followed: Gemini's key travels in a header of its own, which
    /// reqwest would have sent on to another origin (a review saw it arrive there).
    #[tokio::test]
    async fn redirects_are_not_followed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (elsewhere_port, port) = (
            elsewhere.local_addr().unwrap().port(),
            server.local_addr().unwrap().port(),
        );
        tokio::spawn(async move {
            let (mut conn, _) = server.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request).await;
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://localhost:{elsewhere_port}/x\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        });
        let options = HttpOptions::default();
        let client = client(&options).unwrap();
        let url = format!("http://127.0.0.1:{port}/v1beta/models/m:generateContent");
        let headers = [("x-goog-api-key", "secret".to_string())];
        let result = post_json(
            &client,
            &options,
            "gemini",
            &url,
            &headers,
            &serde_json::json!({}),
        )
        .await;
        let e = result.expect_err("a redirect is an error");
        assert!(e.to_string().contains("redirect"), "{e}");
        let followed = tokio::time::timeout(Duration::from_millis(200), elsewhere.accept()).await;
        assert!(followed.is_err(), "the redirect was followed");
    }

    /// A server on 127.0.0.1 that answers one request with a 200 of `content_type` and
    /// hands the connection to `body` for the rest of the reply; its port.
    async fn answering_once<F, Fut>(content_type: &'static str, body: F) -> u16
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = server.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut conn, _) = server.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n"
            );
            let _ = conn.write_all(head.as_bytes()).await;
            body(conn).await;
        });
        port
    }

    /// A reply is read up to a limit, not whole (a review had chitti buffer 600 MB).
    #[tokio::test]
    async fn a_reply_past_the_limit_is_refused_unread() {
        use tokio::io::AsyncWriteExt;
        let port = answering_once("application/json", |mut conn| async move {
            let block = vec![b' '; 1 << 20];
            for _ in 0..(MAX_REPLY_BYTES >> 20) + 2 {
                if conn.write_all(&block).await.is_err() {
                    return;
                }
            }
        })
        .await;
        let client = client(&HttpOptions::default()).unwrap();
        let response = client
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap();
        let e = read_json("openai", response).await.unwrap_err();
        assert!(e.to_string().contains("went past"), "{e}");
    }

    /// A server that never goes silent but never finishes (a keep-alive comment every
    /// 50 ms) ends the request at the reply's deadline.
    #[tokio::test]
    async fn a_reply_that_never_ends_stops_at_its_deadline() {
        use tokio::io::AsyncWriteExt;
        let port = answering_once("text/event-stream", |mut conn| async move {
            while conn.write_all(b": keep-alive\n\n").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let options = HttpOptions {
            reply_timeout: Duration::from_secs(1),
            ..HttpOptions::default()
        };
        let client = client(&options).unwrap();
        let started = std::time::Instant::now();
        let read = async {
            let response = client.get(format!("http://127.0.0.1:{port}/")).send().await;
            read_sse("openai", response.unwrap(), |_| Ok(())).await
        };
        let ended = tokio::time::timeout(Duration::from_secs(5), read).await;
        let e = ended
            .expect("the reply's deadline did not end it")
            .unwrap_err();
        assert!(e.to_string().contains("timed out"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn https_requests_start_a_tls_handshake() {
        let head = first_bytes_of::<2>(|c, port| c.get(format!("https://127.0.0.1:{port}/")));
        // A TLS record of type handshake (22), protocol major version 3.
        assert_eq!(head.await, Some([22, 3]));
    }

    /// Host names go through the system resolver (on Linux, glibc linked statically: see
    /// .cargo/config.toml): `localhost`, from /etc/hosts, reaches a listener on 127.0.0.1.
    #[tokio::test]
    async fn host_names_are_resolved() {
        let head = first_bytes_of::<14>(|c, port| {
            c.post(format!("http://localhost:{port}/v1/chat/completions"))
        });
        assert_eq!(head.await.as_ref(), Some(b"POST /v1/chat/"));
    }

    #[test]
    fn origin_hides_paths_and_queries() {
        assert_eq!(
            origin("https://example.com:8443/v1beta/models/m:generateContent?key=SECRET"),
            "https://example.com:8443"
        );
    }
}
