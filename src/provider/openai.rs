//! OpenAI-compatible chat completions (OpenAI, Ollama, llama.cpp, vLLM, …):
//! `POST {base}/chat/completions`, streamed or not.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use serde_json::{json, Value};

use super::http;
use super::{
    made_up_call_id, AssistantTurn, Endpoint, ErrorKind, FunctionDecl, Message, Provider,
    ProviderError, Reply, Request, TextSink, ToolCall, Usage,
};

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_MODEL: &str = "gpt-4.1-mini";

pub struct OpenAi {
    endpoint: Endpoint,
    /// Local servers often need none; then no Authorization header is sent.
    api_key: Option<String>,
}

impl OpenAi {
    pub fn new(endpoint: Endpoint, api_key: Option<String>) -> OpenAi {
        OpenAi { endpoint, api_key }
    }
}

impl Provider for OpenAi {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.endpoint.model
    }

    async fn complete<'a>(
        &'a self,
        request: Request<'a>,
        on_text: TextSink<'a>,
    ) -> Result<Reply, ProviderError> {
        let body = request_body(&self.endpoint.model, &request, self.endpoint.stream);
        let headers: Vec<(&str, String)> = self
            .api_key
            .iter()
            .map(|key| ("authorization", format!("Bearer {key}")))
            .collect();
        let url = format!("{}/chat/completions", self.endpoint.base_url);
        let mut resends = 0;
        loop {
            let response = self.endpoint.post("openai", &url, &headers, &body).await?;
            let mut shown = false;
            let result = if self.endpoint.stream {
                let mut stream = StreamedReply::default();
                let mut sink = |text: &str| {
                    shown |= !text.is_empty();
                    on_text(text)
                };
                match http::read_sse("openai", response, |data| stream.add(data, &mut sink)).await {
                    Ok(()) => stream.finish(&self.endpoint.call_ids),
                    Err(e) => Err(e),
                }
            } else {
                match http::read_json("openai", response).await {
                    Ok(json) => parse_reply(&json, &self.endpoint.call_ids).inspect(|reply| {
                        on_text(&reply.turn.text);
                    }),
                    Err(e) => Err(e),
                }
            };
            match result {
                Err(e) if self.endpoint.resend_after(&e, shown, &mut resends).await => continue,
                other => return other,
            }
        }
    }
}

pub fn request_body(model: &str, request: &Request<'_>, stream: bool) -> Value {
    let mut messages = vec![json!({"role": "system", "content": request.system})];
    for message in request.messages {
        match message {
            Message::User(text) => messages.push(json!({"role": "user", "content": text})),
            Message::Assistant(turn) => messages.push(assistant_message(turn)),
            Message::ToolResults(outputs) => messages.extend(outputs.iter().map(
                |out| json!({"role": "tool", "tool_call_id": out.call_id, "content": out.text}),
            )),
        }
    }
    let mut body = json!({"model": model, "messages": messages, "stream": stream});
    if !request.tools.is_empty() {
        body["tools"] = request.tools.iter().map(tool).collect();
    }
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn tool(decl: &FunctionDecl) -> Value {
    json!({"type": "function", "function": {
        "name": decl.name, "description": decl.description, "parameters": decl.parameters,
    }})
}

/// The assistant message as the API expects it back: arguments as the JSON string the
/// model wrote (even when it is not valid JSON), ids as given.
fn assistant_message(turn: &AssistantTurn) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": if turn.text.is_empty() { Value::Null } else { json!(turn.text) },
    });
    if !turn.calls.is_empty() {
        let calls: Vec<Value> = turn
            .calls
            .iter()
            .map(|call| {
                let arguments = match &call.args {
                    Value::String(text) => text.clone(),
                    Value::Null => "{}".to_string(),
                    other => other.to_string(),
                };
                json!({"id": call.id, "type": "function",
                       "function": {"name": call.name, "arguments": arguments}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

fn parse_reply(json: &Value, ids: &AtomicU64) -> Result<Reply, ProviderError> {
    let message = &json["choices"][0]["message"];
    if !message.is_object() {
        return Err(ProviderError::bad_reply(format!(
            "openai API: the reply has no `choices[0].message`: {}",
            json.to_string().chars().take(300).collect::<String>()
        )));
    }
    let mut turn = AssistantTurn {
        text: message["content"].as_str().unwrap_or_default().to_string(),
        cut_off: json["choices"][0]["finish_reason"].as_str() == Some("length"),
        ..AssistantTurn::default()
    };
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let function = &call["function"];
        turn.calls.push(tool_call(
            call["id"].as_str(),
            function["name"].as_str(),
            function.get("arguments").cloned(),
            ids,
        )?);
    }
    not_empty(&turn)?;
    Ok(Reply {
        turn,
        usage: usage_of(&json["usage"]),
    })
}

fn tool_call(
    id: Option<&str>,
    name: Option<&str>,
    arguments: Option<Value>,
    ids: &AtomicU64,
) -> Result<ToolCall, ProviderError> {
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ProviderError::bad_reply("openai API: a tool call has no function name"))?;
    let id = id.filter(|id| !id.is_empty());
    Ok(ToolCall {
        id: id
            .map(str::to_string)
            .unwrap_or_else(|| made_up_call_id(ids)),
        id_from_model: id.is_some(),
        name: name.to_string(),
        // A string of JSON per the API; some local servers send the object itself.
        args: arguments.unwrap_or(Value::Null),
    })
}

fn usage_of(usage: &Value) -> Option<Usage> {
    usage.is_object().then(|| Usage {
        input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
    })
}

/// A tool call assembled from streamed fragments.
#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Default)]
struct StreamedReply {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    /// `[DONE]` arrived.
    done: bool,
    /// The `finish_reason` of the choice, once the server gave one.
    finish_reason: Option<String>,
    /// The server sent one whole message instead of deltas.
    whole: bool,
}

impl StreamedReply {
    fn add(&mut self, data: &str, on_text: TextSink<'_>) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::bad_reply(format!(
                "openai API: a streamed chunk is not valid JSON ({e}): {}",
                data.chars().take(200).collect::<String>()
            ))
        })?;
        if let Some(message) = chunk["error"]["message"].as_str() {
            return Err(ProviderError::bad_reply(format!(
                "openai API reported an error mid-stream: {message}"
            )));
        }
        if let Some(usage) = usage_of(&chunk["usage"]) {
            self.usage = Some(usage);
        }
        // A server that ignores `stream` answers with one whole message instead.
        let choice = &chunk["choices"][0];
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_string());
        }
        let delta = if choice["delta"].is_object() {
            &choice["delta"]
        } else {
            self.whole |= choice["message"].is_object();
            &choice["message"]
        };
        if let Some(text) = delta["content"].as_str() {
            on_text(text);
            self.text.push_str(text);
        }
        for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = fragment["index"]
                .as_u64()
                .unwrap_or(self.calls.len() as u64);
            let call = self.calls.entry(index).or_default();
            if let Some(id) = fragment["id"].as_str() {
                call.id = Some(id.to_string());
            }
            let function = &fragment["function"];
            if let Some(name) = function["name"].as_str() {
                call.name.push_str(name);
            }
            match &function["arguments"] {
                Value::String(piece) => call.arguments.push_str(piece),
                Value::Null => {}
                object => call.arguments.push_str(&object.to_string()),
            }
        }
        Ok(())
    }

    fn finish(self, ids: &AtomicU64) -> Result<Reply, ProviderError> {
        // A stream that stops without saying it is finished was cut off: what arrived is
        // part of an answer, and must not be taken for the whole of it.
        let complete = self.done || self.finish_reason.is_some() || self.whole;
        let nothing_arrived = self.text.is_empty() && self.calls.is_empty();
        if !complete {
            return Err(ProviderError::new(
                ErrorKind::CutOff,
                if nothing_arrived {
                    "openai API: the stream ended without a reply in it (no message, no \
                     finish_reason, no [DONE]): the server sent something other than a \
                     chat completion stream, or the connection was cut"
                } else {
                    "openai API: the stream ended before the reply was complete (no \
                     finish_reason and no [DONE]); the connection was probably cut"
                },
            ));
        }
        let mut turn = AssistantTurn {
            text: self.text,
            cut_off: self.finish_reason.as_deref() == Some("length"),
            ..AssistantTurn::default()
        };
        for call in self.calls.into_values() {
            turn.calls.push(tool_call(
                call.id.as_deref(),
                Some(&call.name),
                Some(Value::String(call.arguments)),
                ids,
            )?);
        }
        not_empty(&turn)?;
        Ok(Reply {
            turn,
            usage: self.usage,
        })
    }
}

/// A reply with neither text nor calls answers nothing: report it rather than
/// presenting an empty answer.
fn not_empty(turn: &AssistantTurn) -> Result<(), ProviderError> {
    if turn.cut_off && turn.text.trim().is_empty() && turn.calls.is_empty() {
        return Err(ProviderError::bad_reply(
            "openai API: the reply stopped at the model's output token limit (finish_reason \
             length) before it said anything",
        ));
    }
    if turn.text.trim().is_empty() && turn.calls.is_empty() {
        return Err(ProviderError::bad_reply(
            "openai API: the reply has neither text nor tool calls",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolOutput;

    #[test]
    fn a_reply_with_parallel_calls_is_parsed_and_echoed_with_its_ids() {
        let json: Value = serde_json::from_str(r#"{"choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [
              {"id": "call_a", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\": \".\"}"}},
              {"id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{bad json"}}
            ]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}"#).unwrap();
        let reply = parse_reply(&json, &AtomicU64::new(1)).unwrap();
        assert_eq!(reply.turn.calls.len(), 2);
        assert_eq!(reply.turn.calls[1].args, json!("{bad json"));
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 9,
                output_tokens: 4
            })
        );

        let messages = vec![
            Message::User("go".into()),
            Message::Assistant(reply.turn.clone()),
            Message::ToolResults(vec![
                ToolOutput::to(&reply.turn.calls[0], true, "a\nb"),
                ToolOutput::to(&reply.turn.calls[1], false, "invalid arguments"),
            ]),
        ];
        let body = request_body(
            "m",
            &Request {
                system: "sys",
                messages: &messages,
                tools: &[],
            },
            false,
        );
        let sent = body["messages"].as_array().unwrap();
        assert_eq!(sent[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(
            sent[2]["tool_calls"][1]["function"]["arguments"],
            "{bad json"
        );
        assert_eq!(sent[2]["content"], Value::Null);
        assert_eq!(
            sent[3],
            json!({"role": "tool", "tool_call_id": "call_a", "content": "a\nb"})
        );
        assert_eq!(sent[4]["tool_call_id"], "call_b");
        assert!(body.get("tools").is_none());
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn streamed_fragments_are_assembled_by_index() {
        let mut text = String::new();
        let mut sink = |t: &str| text.push_str(t);
        let mut s = StreamedReply::default();
        for chunk in [
            r#"{"choices": [{"delta": {"role": "assistant", "content": "Let me "}}]}"#,
            r#"{"choices": [{"delta": {"content": "look."}}]}"#,
            r#"{"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "execute_bash", "arguments": ""}}]}}]}"#,
            r#"{"choices": [{"delta": {"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "list_dir", "arguments": "{\"pa"}}]}}]}"#,
            r#"{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\": \"ls\"}"}}]}}]}"#,
            r#"{"choices": [{"delta": {"tool_calls": [{"index": 1, "function": {"arguments": "th\": \".\"}"}}]}}]}"#,
            r#"{"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}"#,
            "[DONE]",
        ] {
            s.add(chunk, &mut sink).unwrap();
        }
        assert!(s.done);
        let reply = s.finish(&AtomicU64::new(1)).unwrap();
        assert_eq!(text, "Let me look.");
        assert_eq!(reply.turn.text, "Let me look.");
        assert_eq!(reply.turn.calls[0].id, "c1");
        assert_eq!(reply.turn.calls[0].args, json!("{\"command\": \"ls\"}"));
        assert_eq!(reply.turn.calls[1].args, json!("{\"path\": \".\"}"));
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 1,
                output_tokens: 2
            })
        );
    }

    #[test]
    fn a_stream_cut_off_midway_is_an_error_and_a_length_stop_is_marked() {
        let mut sink = |_: &str| {};
        let mut s = StreamedReply::default();
        s.add(
            r#"{"choices": [{"delta": {"content": "Yes, it is safe to delete the"}}]}"#,
            &mut sink,
        )
        .unwrap();
        let e = s.finish(&AtomicU64::new(1)).unwrap_err();
        assert!(e.message.contains("before the reply was complete"), "{e}");

        let mut s = StreamedReply::default();
        for chunk in [
            r#"{"choices": [{"delta": {"content": "Long answer"}}]}"#,
            r#"{"choices": [{"delta": {}, "finish_reason": "length"}]}"#,
        ] {
            s.add(chunk, &mut sink).unwrap();
        }
        let reply = s.finish(&AtomicU64::new(1)).unwrap();
        assert_eq!(reply.turn.text, "Long answer");
        assert!(reply.turn.cut_off);
        let whole =
            json!({"choices": [{"message": {"content": "Long"}, "finish_reason": "length"}]});
        assert!(
            parse_reply(&whole, &AtomicU64::new(1))
                .unwrap()
                .turn
                .cut_off
        );
        let empty = json!({"choices": [{"message": {"content": ""}, "finish_reason": "length"}]});
        let e = parse_reply(&empty, &AtomicU64::new(1)).unwrap_err();
        assert!(e.message.contains("output token limit"), "{e}");
        let whole =
            json!({"choices": [{"message": {"content": "Done."}, "finish_reason": "stop"}]});
        assert!(
            !parse_reply(&whole, &AtomicU64::new(1))
                .unwrap()
                .turn
                .cut_off
        );
    }

    #[test]
    fn missing_ids_are_made_up_and_used_on_both_sides() {
        let json: Value = serde_json::from_str(
            r#"{"choices": [{"message": {"content": "",
            "tool_calls": [{"function": {"name": "list_dir", "arguments": {"path": "."}}}]}}]}"#,
        )
        .unwrap();
        let reply = parse_reply(&json, &AtomicU64::new(7)).unwrap();
        assert_eq!(reply.turn.calls[0].id, "call_7");
        assert!(!reply.turn.calls[0].id_from_model);
        let sent = assistant_message(&reply.turn);
        assert_eq!(sent["tool_calls"][0]["id"], "call_7");
        assert_eq!(
            sent["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\".\"}"
        );
    }

    #[test]
    fn a_whole_message_in_place_of_a_stream_is_understood() {
        let mut text = String::new();
        let mut sink = |t: &str| text.push_str(t);
        let mut s = StreamedReply::default();
        let whole = r#"{"choices": [{"message": {"role": "assistant", "content": "Hi.",
            "tool_calls": [{"id": "w1", "function": {"name": "list_dir", "arguments": "{}"}},
                           {"id": "w2", "function": {"name": "read_file", "arguments": "{}"}}]}}]}"#;
        s.add(whole, &mut sink).unwrap();
        let reply = s.finish(&AtomicU64::new(1)).unwrap();
        assert_eq!(text, "Hi.");
        let ids: Vec<&str> = reply.turn.calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["w1", "w2"]);
    }

    #[test]
    fn an_empty_reply_is_an_error() {
        let json = json!({"choices": [{"message": {"role": "assistant", "content": ""}}]});
        let e = parse_reply(&json, &AtomicU64::new(1)).unwrap_err();
        assert!(e.message.contains("neither text nor tool calls"), "{e}");
        let mut s = StreamedReply::default();
        s.add("[DONE]", &mut |_: &str| {}).unwrap();
        let e = s.finish(&AtomicU64::new(1)).unwrap_err();
        assert!(e.message.contains("neither text nor tool calls"), "{e}");
        // Nothing at all, not even an end: a stream that was not one, or was cut, and is
        // asked for again (a CutOff), not taken for an empty answer.
        let e = StreamedReply::default()
            .finish(&AtomicU64::new(1))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::CutOff);
        assert!(e.message.contains("without a reply in it"), "{e}");
    }

    #[test]
    fn malformed_replies_are_errors() {
        let e = parse_reply(&json!({"oops": 1}), &AtomicU64::new(1)).unwrap_err();
        assert!(e.message.contains("choices[0].message"), "{e}");
        let mut sink = |_: &str| {};
        let e = StreamedReply::default()
            .add("{nope", &mut sink)
            .unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{e}");
        let json = json!({"choices": [{"message": {"tool_calls": [{"id": "x", "function": {}}]}}]});
        let e = parse_reply(&json, &AtomicU64::new(1)).unwrap_err();
        assert!(e.message.contains("no function name"), "{e}");
    }
}
