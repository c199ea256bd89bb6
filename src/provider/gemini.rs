//! Gemini's native REST API: `generateContent` and `streamGenerateContent?alt=sse`.
//!
//! The model's parts are kept exactly as received and sent back unchanged: Gemini 3
//! rejects a tool loop whose `thoughtSignature`s were dropped or moved.

use std::sync::atomic::AtomicU64;

use serde_json::{json, Map, Value};

use super::http;
use super::{
    made_up_call_id, AssistantTurn, Endpoint, ErrorKind, FunctionDecl, Message, Provider,
    ProviderError, Reply, Request, TextSink, ToolCall, Usage,
};

pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";
pub const DEFAULT_MODEL: &str = "gemini-2.5-flash";

pub struct Gemini {
    endpoint: Endpoint,
    api_key: String,
}

impl Gemini {
    pub fn new(endpoint: Endpoint, api_key: String) -> Gemini {
        Gemini { endpoint, api_key }
    }

    fn url(&self) -> String {
        let method = if self.endpoint.stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        format!(
            "{}/v1beta/models/{}:{method}",
            self.endpoint.base_url, self.endpoint.model
        )
    }
}

impl Provider for Gemini {
    fn name(&self) -> &str {
        "gemini"
    }

    fn model(&self) -> &str {
        &self.endpoint.model
    }

    async fn complete<'a>(
        &'a self,
        request: Request<'a>,
        on_text: TextSink<'a>,
    ) -> Result<Reply, ProviderError> {
        let body = request_body(&request);
        let headers = [("x-goog-api-key", self.api_key.clone())];
        let mut resends = 0;
        loop {
            let response = self
                .endpoint
                .post("gemini", &self.url(), &headers, &body)
                .await?;
            let mut reply = ReplyBuilder::default();
            let mut shown = false;
            let mut sink = |text: &str| {
                shown |= !text.is_empty();
                on_text(text)
            };
            let read = if self.endpoint.stream {
                http::read_sse("gemini", response, |data| reply.add_chunk(data, &mut sink))
                    .await
                    .and_then(|()| reply.ensure_finished())
            } else {
                match http::read_json("gemini", response).await {
                    Ok(json) => reply.add(&json, &mut sink),
                    Err(e) => Err(e),
                }
            };
            let result = read.and_then(|()| reply.finish(&self.endpoint.call_ids));
            match result {
                Err(e) if self.endpoint.resend_after(&e, shown, &mut resends).await => continue,
                other => return other,
            }
        }
    }
}

/// The JSON body of a `generateContent` request.
pub fn request_body(request: &Request<'_>) -> Value {
    let contents: Vec<Value> = request.messages.iter().map(content_of).collect();
    let declarations: Vec<Value> = request.tools.iter().map(declaration).collect();
    let mut body = json!({
        "systemInstruction": {"parts": [{"text": request.system}]},
        "contents": contents,
    });
    if !declarations.is_empty() {
        body["tools"] = json!([{"functionDeclarations": declarations}]);
        body["toolConfig"] = json!({"functionCallingConfig": {"mode": "AUTO"}});
    }
    body
}

fn content_of(message: &Message) -> Value {
    match message {
        Message::User(text) => json!({"role": "user", "parts": [{"text": text}]}),
        Message::Assistant(turn) => match &turn.raw {
            Some(raw) => raw.clone(),
            None => {
                let mut parts = Vec::new();
                if !turn.text.is_empty() {
                    parts.push(json!({"text": turn.text}));
                }
                for call in &turn.calls {
                    let mut function_call = json!({"name": call.name, "args": call.args});
                    if call.id_from_model {
                        function_call["id"] = json!(call.id);
                    }
                    parts.push(json!({"functionCall": function_call}));
                }
                json!({"role": "model", "parts": parts})
            }
        },
        Message::ToolResults(outputs) => {
            let parts: Vec<Value> = outputs
                .iter()
                .map(|out| {
                    let key = if out.ok { "output" } else { "error" };
                    let mut response = json!({"name": out.name, "response": {key: out.text}});
                    if out.id_from_model {
                        response["id"] = json!(out.call_id);
                    }
                    json!({"functionResponse": response})
                })
                .collect();
            json!({"role": "user", "parts": parts})
        }
    }
}

fn declaration(decl: &FunctionDecl) -> Value {
    json!({
        "name": decl.name,
        "description": decl.description,
        "parameters": openapi_schema(&decl.parameters),
    })
}

/// Gemini's `parameters` take an OpenAPI 3 subset, not full JSON Schema: a type is one
/// string (`nullable` marks `Option`), and keys like `additionalProperties` or integer
/// formats such as `uint64` are refused. Keeps what the subset knows.
pub fn openapi_schema(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        match key.as_str() {
            "type" => match value {
                Value::Array(types) => {
                    let named: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                    if let Some(first) = named.first() {
                        out.insert("type".into(), (*first).clone());
                    }
                    if named.len() < types.len() {
                        out.insert("nullable".into(), Value::Bool(true));
                    }
                }
                other => {
                    out.insert("type".into(), other.clone());
                }
            },
            "properties" => {
                let props: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, prop)| (name.clone(), openapi_schema(prop)))
                    .collect();
                out.insert("properties".into(), Value::Object(props));
            }
            "items" => {
                out.insert("items".into(), openapi_schema(value));
            }
            "format" => {
                if matches!(
                    value.as_str(),
                    Some("int32" | "int64" | "float" | "double" | "enum" | "date-time")
                ) {
                    out.insert("format".into(), value.clone());
                }
            }
            "description" | "required" | "enum" | "nullable" | "minimum" | "maximum"
            | "minItems" | "maxItems" => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

/// Collects a reply from one JSON body or many streamed chunks.
#[derive(Default)]
struct ReplyBuilder {
    parts: Vec<Value>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    block_reason: Option<String>,
}

impl ReplyBuilder {
    fn add_chunk(&mut self, data: &str, on_text: TextSink<'_>) -> Result<(), ProviderError> {
        let json: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::bad_reply(format!(
                "gemini API: a streamed chunk is not valid JSON ({e}): {}",
                data.chars().take(200).collect::<String>()
            ))
        })?;
        self.add(&json, on_text)
    }

    fn add(&mut self, json: &Value, on_text: TextSink<'_>) -> Result<(), ProviderError> {
        if !json.is_object() {
            return Err(ProviderError::bad_reply(format!(
                "gemini API: expected a JSON object, got: {}",
                json.to_string().chars().take(200).collect::<String>()
            )));
        }
        if let Some(reason) = json["promptFeedback"]["blockReason"].as_str() {
            self.block_reason = Some(reason.to_string());
        }
        if let Some(meta) = json.get("usageMetadata") {
            let count = |key: &str| meta[key].as_u64().unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: count("promptTokenCount"),
                output_tokens: count("candidatesTokenCount") + count("thoughtsTokenCount"),
            });
        }
        let candidate = &json["candidates"][0];
        if let Some(reason) = candidate["finishReason"].as_str() {
            self.finish_reason = Some(reason.to_string());
        }
        let parts = match &candidate["content"]["parts"] {
            Value::Array(parts) => parts,
            Value::Null => return Ok(()),
            other => {
                return Err(ProviderError::bad_reply(format!(
                    "gemini API: `content.parts` is not a list: {other}"
                )))
            }
        };
        for part in parts {
            let is_thought = part["thought"].as_bool().unwrap_or(false);
            if let (Some(text), false) = (part["text"].as_str(), is_thought) {
                on_text(text);
            }
            self.parts.push(part.clone());
        }
        Ok(())
    }

    /// A stream's last chunk carries the `finishReason`; one that ends without any was
    /// cut off, and what arrived must not be taken for the whole reply.
    fn ensure_finished(&self) -> Result<(), ProviderError> {
        if self.finish_reason.is_some() || self.block_reason.is_some() {
            return Ok(());
        }
        Err(ProviderError::new(
            ErrorKind::CutOff,
            "gemini API: the stream ended before the reply was complete (no finishReason); \
             the connection was probably cut",
        ))
    }

    fn finish(self, ids: &AtomicU64) -> Result<Reply, ProviderError> {
        if self.parts.is_empty() {
            let why = match (&self.block_reason, &self.finish_reason) {
                (Some(block), _) => format!("the prompt was blocked ({block})"),
                (None, Some(finish)) => format!("it stopped with finishReason {finish}"),
                (None, None) => "the reply has no candidates".to_string(),
            };
            return Err(ProviderError::bad_reply(format!(
                "gemini API returned no content: {why}"
            )));
        }
        let mut turn = AssistantTurn::default();
        for part in &self.parts {
            let is_thought = part["thought"].as_bool().unwrap_or(false);
            if let (Some(text), false) = (part["text"].as_str(), is_thought) {
                turn.text.push_str(text);
            }
            if let Some(call) = part.get("functionCall") {
                let name = call["name"].as_str().ok_or_else(|| {
                    ProviderError::bad_reply(format!(
                        "gemini API: a functionCall has no name: {call}"
                    ))
                })?;
                let given_id = call["id"].as_str().filter(|id| !id.is_empty());
                turn.calls.push(ToolCall {
                    id: given_id
                        .map(str::to_string)
                        .unwrap_or_else(|| made_up_call_id(ids)),
                    id_from_model: given_id.is_some(),
                    name: name.to_string(),
                    args: call.get("args").cloned().unwrap_or(Value::Null),
                });
            }
        }
        if turn.text.trim().is_empty() && turn.calls.is_empty() {
            return Err(ProviderError::bad_reply(format!(
                "gemini API: the reply has neither text nor function calls (finishReason {})",
                self.finish_reason.as_deref().unwrap_or("none")
            )));
        }
        turn.raw = Some(json!({"role": "model", "parts": self.parts}));
        turn.cut_off = self.finish_reason.as_deref() == Some("MAX_TOKENS");
        Ok(Reply {
            turn,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolOutput;

    fn collect(chunks: &[&str]) -> Result<(Reply, String), ProviderError> {
        let mut text = String::new();
        let mut sink = |t: &str| text.push_str(t);
        let mut builder = ReplyBuilder::default();
        for chunk in chunks {
            builder.add_chunk(chunk, &mut sink)?;
        }
        let reply = builder.finish(&AtomicU64::new(1))?;
        Ok((reply, text))
    }

    #[test]
    fn parallel_calls_keep_their_signatures_and_ids() {
        let body = r#"{"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Looking."},
            {"functionCall": {"name": "list_dir", "args": {"path": "."}, "id": "a1"}, "thoughtSignature": "c2lnMQ=="},
            {"functionCall": {"name": "read_file", "args": {"path": "x"}}}
        ]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 2}}"#;
        let (reply, text) = collect(&[body]).unwrap();
        assert_eq!(text, "Looking.");
        assert_eq!(reply.turn.calls.len(), 2);
        assert_eq!(reply.turn.calls[0].id, "a1");
        assert!(reply.turn.calls[0].id_from_model);
        assert!(!reply.turn.calls[1].id_from_model);
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 10,
                output_tokens: 7
            })
        );

        // Replayed exactly: the signature stays on the part it came with.
        let messages = vec![
            Message::User("hi".into()),
            Message::Assistant(reply.turn.clone()),
            Message::ToolResults(vec![
                ToolOutput::to(&reply.turn.calls[0], true, "x"),
                ToolOutput::to(&reply.turn.calls[1], false, "denied"),
            ]),
        ];
        let body = request_body(&Request {
            system: "sys",
            messages: &messages,
            tools: &[],
        });
        let original: Value = serde_json::from_str::<Value>(
            r#"[{"text": "Looking."},
            {"functionCall": {"name": "list_dir", "args": {"path": "."}, "id": "a1"}, "thoughtSignature": "c2lnMQ=="},
            {"functionCall": {"name": "read_file", "args": {"path": "x"}}}]"#,
        )
        .unwrap();
        assert_eq!(body["contents"][1]["parts"], original);
        assert_eq!(body["contents"][1]["role"], "model");
        let responses = &body["contents"][2]["parts"];
        assert_eq!(responses[0]["functionResponse"]["id"], "a1");
        assert_eq!(responses[0]["functionResponse"]["response"]["output"], "x");
        assert!(responses[1]["functionResponse"].get("id").is_none());
        assert_eq!(
            responses[1]["functionResponse"]["response"]["error"],
            "denied"
        );
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn streamed_chunks_are_assembled_in_order() {
        let (reply, text) = collect(&[
            r#"{"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]}"#,
            r#"{"candidates": [{"content": {"role": "model", "parts": [{"text": "lo", "thoughtSignature": "AAA"}]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 3}}"#,
        ])
        .unwrap();
        assert_eq!(text, "Hello");
        assert_eq!(reply.turn.text, "Hello");
        assert!(!reply.turn.cut_off);
        assert_eq!(
            reply.turn.raw.unwrap()["parts"][1]["thoughtSignature"],
            "AAA"
        );
        let (cut, _) = collect(&[
            r#"{"candidates": [{"content": {"parts": [{"text": "Long"}]}, "finishReason": "MAX_TOKENS"}]}"#,
        ])
        .unwrap();
        assert!(
            cut.turn.cut_off,
            "a reply stopped at the token limit is marked"
        );
    }

    #[test]
    fn thoughts_are_not_answer_text() {
        let (reply, text) = collect(&[r#"{"candidates": [{"content": {"parts": [
            {"text": "pondering", "thought": true}, {"text": "42"}]}}]}"#])
        .unwrap();
        assert_eq!(text, "42");
        assert_eq!(reply.turn.text, "42");
    }

    #[test]
    fn empty_or_blocked_replies_are_errors() {
        let e = collect(&[r#"{"promptFeedback": {"blockReason": "SAFETY"}}"#]).unwrap_err();
        assert!(e.message.contains("blocked (SAFETY)"), "{e}");
        let e = collect(&[r#"{"candidates": [{"content": {"parts": [{"text": "hm", "thought": true}]}, "finishReason": "MAX_TOKENS"}]}"#]).unwrap_err();
        assert!(
            e.message
                .contains("neither text nor function calls (finishReason MAX_TOKENS)"),
            "{e}"
        );
        let e = collect(&["not json"]).unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{e}");
        let e = collect(&[r#"[1, 2]"#]).unwrap_err();
        assert!(e.message.contains("expected a JSON object"), "{e}");
    }

    #[test]
    fn schemas_are_narrowed_to_the_openapi_subset() {
        let schema = crate::tools::parameters::<crate::tools::execute_bash::Args>();
        let narrowed = openapi_schema(&schema);
        let timeout = &narrowed["properties"]["timeout_seconds"];
        assert_eq!(timeout["type"], "integer");
        assert_eq!(timeout["nullable"], true);
        assert!(timeout.get("format").is_none(), "{timeout}");
        assert_eq!(narrowed["required"], json!(["command"]));
        let text = narrowed.to_string();
        for refused in ["additionalProperties", "$schema", "uint"] {
            assert!(!text.contains(refused), "{refused} in {text}");
        }
    }

    #[test]
    fn tools_and_system_instruction_are_sent() {
        let tools = vec![FunctionDecl {
            name: "list_dir".into(),
            description: "List".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }];
        let messages = vec![Message::User("hi".into())];
        let body = request_body(&Request {
            system: "be careful",
            messages: &messages,
            tools: &tools,
        });
        assert_eq!(body["systemInstruction"]["parts"][0]["text"], "be careful");
        assert_eq!(
            body["tools"][0]["functionDeclarations"][0]["name"],
            "list_dir"
        );
        assert_eq!(
            body["contents"][0],
            json!({"role": "user", "parts": [{"text": "hi"}]})
        );
    }
}
