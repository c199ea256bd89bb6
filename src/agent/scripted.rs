//! A provider that plays back a script, for testing the loop without a model.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::Value;

use crate::provider::{
    AssistantTurn, Message, Provider, ProviderError, Reply, Request, TextSink, ToolCall,
};

#[derive(Default)]
pub struct Scripted {
    replies: Mutex<VecDeque<Result<Reply, ProviderError>>>,
    /// The conversation as sent with each request.
    pub requests: Mutex<Vec<Vec<Message>>>,
}

impl Scripted {
    pub fn new(replies: impl IntoIterator<Item = Result<Reply, ProviderError>>) -> Scripted {
        Scripted {
            replies: Mutex::new(replies.into_iter().collect()),
            requests: Mutex::default(),
        }
    }

    pub fn requests(&self) -> Vec<Vec<Message>> {
        self.requests.lock().unwrap().clone()
    }
}

/// A reply that calls tools: `(id, name, args)`.
pub fn calls(list: &[(&str, &str, Value)]) -> Result<Reply, ProviderError> {
    let calls = list
        .iter()
        .map(|(id, name, args)| ToolCall {
            id: id.to_string(),
            id_from_model: true,
            name: name.to_string(),
            args: args.clone(),
        })
        .collect();
    Ok(Reply {
        turn: AssistantTurn {
            calls,
            ..AssistantTurn::default()
        },
        usage: None,
    })
}

/// A reply that answers in text.
pub fn answer(text: &str) -> Result<Reply, ProviderError> {
    Ok(Reply {
        turn: AssistantTurn {
            text: text.to_string(),
            ..AssistantTurn::default()
        },
        usage: None,
    })
}

impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "script"
    }

    async fn complete<'a>(
        &'a self,
        request: Request<'a>,
        on_text: TextSink<'a>,
    ) -> Result<Reply, ProviderError> {
        self.requests
            .lock()
            .unwrap()
            .push(request.messages.to_vec());
        let next = self.replies.lock().unwrap().pop_front();
        let reply = next.unwrap_or_else(|| Err(ProviderError::bad_reply("the script ran out")));
        if let Ok(reply) = &reply {
            on_text(&reply.turn.text);
        }
        reply
    }
}
