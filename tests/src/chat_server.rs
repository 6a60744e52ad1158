//! A chat-completions server on 127.0.0.1 for tests: it answers each request with the next
//! scripted reply (status and JSON body) and records what it was sent (headers and body), so a
//! test checks both sides of an OpenAI-compatible model call over real HTTP.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST /v1/chat/completions`, as sent.
    pub request_line: String,
    /// Header lines, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

impl Recorded {
    /// The value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<(u16, Value)>,
    recorded: Vec<Recorded>,
}

/// The server; it stops when dropped (the listener thread ends with the process).
pub struct ChatServer {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

impl ChatServer {
    /// Starts a server on a free port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        ChatServer {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            state,
        }
    }

    /// Queues a reply.
    pub fn reply(&self, status: u16, body: Value) {
        self.state.lock().unwrap().replies.push_back((status, body));
    }

    /// Queues a successful completion with `message` and `usage`.
    pub fn reply_completion(&self, message: Value, finish_reason: &str, usage: Value) {
        self.reply(
            200,
            serde_json::json!({
                "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
                "usage": usage,
            }),
        );
    }

    /// What was sent so far.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().recorded.clone()
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = Vec::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let (name, value) = (name.trim().to_lowercase(), value.trim().to_owned());
                if name == "content-length" {
                    length = value.parse().unwrap_or(0);
                }
                headers.push((name, value));
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let (status, reply) = {
            let mut state = state.lock().unwrap();
            state.recorded.push(Recorded {
                request_line: request_line.trim_end().to_owned(),
                headers,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            });
            state.replies.pop_front().unwrap_or((
                500,
                serde_json::json!({"error": {"message": "the test server has no reply queued"}}),
            ))
        };
        let text = reply.to_string();
        let mut out = reader.get_ref();
        let _ = write!(
            out,
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        let _ = out.flush();
    }
}
