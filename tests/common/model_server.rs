//! A loopback HTTP server that plays a model API from a script and records every
//! request, for end-to-end tests of `chitti run` without a live model.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A JSON body with this status.
    Json(u16, Value),
    /// A raw body with this status and extra headers.
    Raw(u16, Vec<(&'static str, String)>, String),
    /// A `text/event-stream` of these `data:` payloads.
    Sse(Vec<Value>),
    /// Accept the request and never answer.
    Hang,
    /// Promise this JSON body, send the first half of it, and close the connection.
    BrokenOff(Value),
}

#[derive(Debug, Clone)]
pub struct Recorded {
    /// Path and query, e.g. `/v1beta/models/m:generateContent`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub raw_body: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct ModelServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl ModelServer {
    /// Serves `script` in order; a request past its end gets HTTP 500.
    pub fn start(script: Vec<Reply>) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Some(request) = read_request(&stream) else {
                    continue;
                };
                recorded.lock().unwrap().push(request);
                let reply = script.next().unwrap_or(Reply::Raw(
                    500,
                    vec![],
                    "{\"error\": {\"message\": \"the test script ran out\"}}".into(),
                ));
                respond(stream, reply);
            }
        });
        ModelServer { url, requests }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn read_request(stream: &TcpStream) -> Option<Recorded> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    Some(Recorded {
        path,
        headers,
        body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
        raw_body,
    })
}

fn respond(mut stream: TcpStream, reply: Reply) {
    let (status, headers, body) = match reply {
        Reply::Json(status, body) => (
            status,
            vec![("content-type", "application/json".to_string())],
            body.to_string(),
        ),
        Reply::Raw(status, mut headers, body) => {
            headers.push(("content-type", "application/json".to_string()));
            (status, headers, body)
        }
        Reply::Sse(events) => {
            let body: String = events
                .iter()
                // A JSON string is sent as its bare text (the `[DONE]` sentinel).
                .map(|e| match e.as_str() {
                    Some(text) => format!("data: {text}\r\n\r\n"),
                    None => format!("data: {e}\r\n\r\n"),
                })
                .collect();
            (
                200,
                vec![("content-type", "text/event-stream".to_string())],
                body,
            )
        }
        Reply::Hang => {
            std::thread::sleep(Duration::from_secs(30));
            return;
        }
        Reply::BrokenOff(body) => {
            let body = body.to_string();
            let head = format!(
                "HTTP/1.1 200 Scripted\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body.as_bytes()[..body.len() / 2]);
            return;
        }
    };
    let mut head = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
}
