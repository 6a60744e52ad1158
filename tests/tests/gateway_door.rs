//! The gateway's front door through the real binary: every message a client hands in is
//! checked against OpenClaw's message model before anything is stored (and nothing OpenClaw
//! itself sends is refused), and the HTTP server holds up as a public one would — deadlines
//! for headers, bodies and idle connections, a cap on connections, authentication before
//! routing, JSON bodies on every error, and addresses checked before anything is announced.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pincer_host::gateway::client;
use pincer_host::gateway::CallRequest;
use pincer_tests::{pincer_bin, staged_plugins_dir, workspace_root};
use serde_json::{json, Value};

/// A running `pincer serve`.
struct Served {
    child: Child,
    socket: PathBuf,
    stderr: PathBuf,
}

impl Served {
    fn start(home: &Path, args: &[&str]) -> Served {
        let socket = home.join("gw.sock");
        let stderr = home.join("serve.log");
        let child = Command::new(pincer_bin())
            .arg("--home")
            .arg(home)
            .args(["serve", "--no-watch", "--socket"])
            .arg(&socket)
            .arg("--plugins-dir")
            .arg(staged_plugins_dir())
            .args(args)
            .env_remove("PINCER_HOME")
            .env_remove("PINCER_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("pincer serve starts");
        let mut served = Served {
            child,
            socket,
            stderr,
        };
        let start = Instant::now();
        while UnixStream::connect(&served.socket).is_err() {
            if let Some(status) = served.child.try_wait().unwrap() {
                panic!("pincer serve exited ({status}): {}", served.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the gateway did not start: {}",
                served.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        served
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn call(&self, method: &str, session: &str, params: Value) -> (u16, Value) {
        client::call(
            &self.socket,
            &CallRequest {
                method: method.to_owned(),
                session: Some(session.to_owned()),
                params: Some(params),
            },
        )
        .expect("the gateway answers")
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("pincer.json"), "{}").unwrap();
    home
}

/// Every `.jsonl` file under the home's session folders, with its bytes.
fn session_files(home: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "jsonl") {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&home.join("agents"), &mut out);
    out.sort();
    out
}

#[test]
fn a_message_outside_openclaw_s_model_is_refused_naming_the_message_and_the_field() {
    let home = home();
    let gw = Served::start(home.path(), &["--engine", "sliding-window"]);
    // One good message first: the session exists and holds it.
    let (status, answer) = gw.call(
        "ingest",
        "door",
        json!({"message": {"role": "user", "content": "hello"}}),
    );
    assert_eq!(status, 200, "{answer}");
    let before = session_files(home.path());
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "ingest",
            json!({"message": {"role": "user", "content": 5}}),
            "params.message.content",
        ),
        (
            "ingest",
            json!({"message": {"role": "user"}}),
            "params.message.content",
        ),
        (
            "ingest",
            json!({"message": {"role": "toolResult", "toolName": "t", "content": "x"}}),
            "params.message.toolCallId",
        ),
        (
            "ingest",
            json!({"message": {"role": "user", "content": [{"type": "wat"}]}}),
            "params.message.content[0].type",
        ),
        (
            "ingest",
            json!({"message": {"role": "wizard", "content": "abracadabra"}}),
            "params.message.role",
        ),
        (
            "ingestBatch",
            json!({"messages": [
                {"role": "user", "content": "fine"},
                {"role": "assistant", "content": [{"type": "text", "text": "ok"}, "loose text"]},
            ]}),
            "params.messages[1].content[1]",
        ),
        (
            "ingestBatch",
            json!({"messages": [
                {"role": "user", "content": "fine"},
                {"role": "toolResult", "toolCallId": "c", "toolName": "t",
                 "content": [{"type": "toolCall", "id": "c", "name": "t", "arguments": {}}]},
            ]}),
            "params.messages[1].content[0].type",
        ),
        (
            "assemble",
            json!({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}]}),
            "params.messages[0].content[0].type",
        ),
        (
            "turn",
            json!({"prompt": {"role": "user", "content": [{"type": "text"}]}}),
            "params.prompt.content[0].text",
        ),
    ];
    for (method, params, field) in cases {
        let (status, answer) = gw.call(method, "door", params.clone());
        assert_eq!(status, 400, "{method} {params}: {answer}");
        assert_eq!(
            answer["error"]["code"], "invalid_message",
            "{method} {params}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field} of {method}")),
            "{method} {params}: the message names {field}: {message}"
        );
    }
    // The unknown role's refusal says why, from OpenClaw's own behaviour.
    let (_, answer) = gw.call(
        "ingest",
        "door",
        json!({"message": {"role": "wizard", "content": "x"}}),
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a role OpenClaw knows"),
        "{answer}"
    );
    // Nothing was stored, not even the good first half of a refused batch.
    assert_eq!(session_files(home.path()), before);
    let (status, answer) = gw.call("assemble", "door", json!({"full": true}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["count"], 1, "{answer}");
}

/// `../shared/data/openclaw-golden` beside the repository (`PINCER_SHARED_DATA` overrides
/// `../shared/data`), or `None` with a notice outside CI.
fn golden_dir() -> Option<PathBuf> {
    let data = std::env::var_os("PINCER_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("..").join("shared").join("data"));
    let dir = data.join("openclaw-golden");
    if dir.join("index.json").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but the golden sessions are missing at {}",
        dir.display()
    );
    eprintln!(
        "notice: skipping: golden sessions not found at {}",
        dir.display()
    );
    None
}

/// The messages OpenClaw's own code produced: every message of every golden session's context
/// (what OpenClaw hands an engine) and every message record of the session files of version 3
/// and later (older files use roles OpenClaw migrates on load).
fn golden_messages(dir: &Path) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for path in names {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".context.json") {
            let context: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            for (i, m) in context["messages"].as_array().unwrap().iter().enumerate() {
                out.push((format!("{name} message {i}"), m.clone()));
            }
        } else if name.ends_with(".jsonl") {
            let text = std::fs::read_to_string(&path).unwrap();
            let records: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let version = records
                .iter()
                .find(|r| r["type"] == "session")
                .and_then(|h| h["version"].as_u64())
                .unwrap_or(1);
            if version < 3 {
                continue;
            }
            for (i, r) in records.iter().enumerate() {
                if r["type"] == "message" {
                    out.push((format!("{name} line {}", i + 1), r["message"].clone()));
                }
            }
        }
    }
    out
}

/// A real turn's messages as OpenClaw 2026.9.6 hands them to an engine
/// (`shared/reference/openclaw-live-turn.md`: this turn's user and assistant messages, the
/// model `echo-1` of provider `fake` over `openai-completions`).
fn live_turn_messages() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": "What is the capital of France?", "timestamp": 1_764_806_400_000_i64}),
        json!({"role": "assistant",
               "content": [{"type": "text", "text": "Paris."}],
               "api": "openai-completions", "provider": "fake", "model": "echo-1",
               "usage": {"input": 12, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 14,
                         "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
               "stopReason": "stop", "timestamp": 1_764_806_401_000_i64}),
    ]
}

#[test]
fn every_message_openclaw_itself_writes_is_accepted_and_kept_as_sent() {
    let Some(dir) = golden_dir() else { return };
    let mut messages = golden_messages(&dir);
    messages.extend(
        live_turn_messages()
            .into_iter()
            .enumerate()
            .map(|(i, m)| (format!("live turn message {i}"), m)),
    );
    assert!(messages.len() > 100, "{} golden messages", messages.len());
    let home = home();
    let gw = Served::start(home.path(), &["--engine", "sliding-window"]);
    for (label, message) in &messages {
        let (status, answer) = gw.call("ingest", "golden", json!({"message": message}));
        assert_eq!(status, 200, "{label} was refused: {message}: {answer}");
    }
    // Stored as sent: the session file holds each one unchanged.
    let files = session_files(home.path());
    assert_eq!(files.len(), 1);
    let stored: Vec<Value> = String::from_utf8_lossy(&files[0].1)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["type"] == "message")
        .map(|r| r["message"].clone())
        .collect();
    assert_eq!(stored.len(), messages.len());
    for ((label, sent), kept) in messages.iter().zip(&stored) {
        assert_eq!(sent, kept, "{label}");
    }
}
