//! The gateway's front door through the real binary: every message a client hands in is
//! checked against OpenClaw's message model before anything is stored (and nothing OpenClaw
//! itself sends is refused), and the HTTP server holds up as a public one would — deadlines
//! for headers, bodies and idle connections, a cap on connections, authentication before
//! routing, JSON bodies on every error, and addresses checked before anything is announced.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pincer_tests::served::{Serve, Served};
use pincer_tests::{pincer_bin, staged_plugins_dir, workspace_root};
use serde_json::{json, Value};

/// `pincer serve --no-watch` in `home` with the staged plugins and `args`, once its socket
/// answers.
fn serve(home: &Path, args: &[&str]) -> Served {
    Served::start(
        home,
        Serve {
            socket: home.join("gw.sock"),
            log: home.join("serve.log"),
            plugins_dir: staged_plugins_dir(),
            global: &[],
            args: &[&["--no-watch"], args].concat(),
        },
    )
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
    let gw = serve(home.path(), &["--engine", "sliding-window"]);
    // One good message first: the session exists and holds it.
    let (status, answer) = gw.call(
        "ingest",
        Some("door"),
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
        let (status, answer) = gw.call(method, Some("door"), params.clone());
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
        Some("door"),
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
    let (status, answer) = gw.call("assemble", Some("door"), json!({"full": true}));
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
/// on a real offline turn (this turn's user and assistant messages, the
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
    let gw = serve(home.path(), &["--engine", "sliding-window"]);
    for (label, message) in &messages {
        let (status, answer) = gw.call("ingest", Some("golden"), json!({"message": message}));
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

/// A home whose `pincer.json` holds `gateway` (the connection limits).
fn home_with_limits(gateway: Value) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({ "gateway": gateway }).to_string(),
    )
    .unwrap();
    home
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Reads one whole answer (the server closes the connection after it); status, headers
/// (lower-cased) and the JSON body (`null` when the body is not JSON).
fn read_answer(stream: &mut impl std::io::Read) -> (u16, String, Value) {
    let mut text = Vec::new();
    let outcome = stream.read_to_end(&mut text);
    assert!(!text.is_empty(), "no answer: {outcome:?}");
    let text = String::from_utf8_lossy(&text).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn http(port: u16, request: &str) -> (u16, String, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    read_answer(&mut stream)
}

fn token_of(home: &Path) -> String {
    std::fs::read_to_string(home.join("state/gateway.token"))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn http_authenticates_before_routing_reads_bearer_in_any_case_and_answers_every_error_in_json() {
    let home = home();
    let port = free_port();
    let gw = serve(home.path(), &["--http", &format!("127.0.0.1:{port}")]);
    let token = token_of(home.path());
    let health = r#"{"method": "health"}"#;
    let post = |auth: &str, body: &str| {
        format!(
            "POST /v1/call HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    // Without a token nothing is routed: an unknown path, another method, a real call.
    for request in [
        "GET /elsewhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned(),
        "GET /v1/call HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned(),
        post("", health),
        post(&format!("Authorization: Basic {token}\r\n"), health),
    ] {
        let (status, head, body) = http(port, &request);
        assert_eq!(status, 401, "{request}: {head} {body}");
        assert_eq!(body["error"]["code"], "unauthorized", "{request}");
        assert!(head.contains("content-type: application/json"), "{head}");
    }
    // The scheme is case-insensitive (RFC 9110).
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let (status, _, body) = http(
            port,
            &post(&format!("Authorization: {scheme} {token}\r\n"), health),
        );
        assert_eq!(status, 200, "{scheme}: {body}");
        assert_eq!(body["ok"], true);
    }
    // With the token, a wrong method and an unknown path get JSON errors too.
    let auth = format!("Authorization: Bearer {token}\r\n");
    let (status, head, body) = http(
        port,
        &format!("GET /v1/call HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"),
    );
    assert_eq!(status, 405, "{head}");
    assert_eq!(body["error"]["code"], "method_not_allowed", "{head} {body}");
    assert!(head.contains("allow: post"), "{head}");
    let (status, _, body) = http(
        port,
        &format!("DELETE /x HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"),
    );
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found", "{body}");
    // Over the socket (no token: the file's mode is the access control) 405 is JSON as well.
    let mut stream = UnixStream::connect(&gw.socket).unwrap();
    stream
        .write_all(b"PUT /v1/call HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (status, _, body) = read_answer(&mut stream);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
}

/// Runs `pincer serve` expecting it to refuse to start; its stderr.
fn serve_refused(home: &Path, socket: &Path, http: &str) -> String {
    let out = Command::new(pincer_bin())
        .arg("--home")
        .arg(home)
        .args(["serve", "--no-watch", "--socket"])
        .arg(socket)
        .args(["--http", http])
        .env_remove("PINCER_HOME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

#[test]
fn serve_binds_and_checks_every_address_before_it_announces_anything() {
    let home = home();
    let socket = home.path().join("refused.sock");
    // Not loopback: refused before any socket exists or anything is announced.
    let stderr = serve_refused(home.path(), &socket, "0.0.0.0:0");
    assert!(stderr.contains("not a loopback address"), "{stderr}");
    assert!(
        !stderr.contains("pincer serve: engine"),
        "announced: {stderr}"
    );
    assert!(!socket.exists());
    // A port another process holds: the same.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let stderr = serve_refused(home.path(), &socket, &addr);
    assert!(
        stderr.contains(&format!("binding {addr}")),
        "names the address: {stderr}"
    );
    assert!(
        !stderr.contains("pincer serve: engine"),
        "announced: {stderr}"
    );
    assert!(!stderr.contains("http://"), "announced: {stderr}");
    assert!(!socket.exists(), "no socket is left behind");
}

/// Whether the server closed `stream` (a read answers end of file) within `within`.
fn closed_within(stream: &mut (impl std::io::Read + ?Sized), within: Duration) -> bool {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
        if start.elapsed() >= within {
            return false;
        }
    }
}

fn unix_stream(socket: &Path) -> UnixStream {
    let stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    stream
}

#[test]
fn slow_and_idle_connections_are_closed_at_their_deadlines() {
    let home = home_with_limits(json!({
        "headerTimeoutSeconds": 1, "bodyTimeoutSeconds": 1, "idleTimeoutSeconds": 3
    }));
    let gw = serve(home.path(), &[]);
    // A connection that never sends anything lives until the idle deadline, not past it.
    let mut idle = unix_stream(&gw.socket);
    // Headers that never end: closed at the header deadline, well before the idle one.
    let mut partial_head = unix_stream(&gw.socket);
    partial_head
        .write_all(b"POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-")
        .unwrap();
    let start = Instant::now();
    assert!(
        closed_within(&mut partial_head, Duration::from_millis(2500)),
        "a partial header was not cut"
    );
    assert!(start.elapsed() >= Duration::from_millis(800));
    assert!(
        !closed_within(&mut idle, Duration::from_millis(200)),
        "the idle connection was closed before its deadline"
    );
    assert!(
        closed_within(&mut idle, Duration::from_secs(4)),
        "an idle connection outlived its deadline"
    );
    // A body that never arrives whole: 408 with a JSON body, then closed.
    let mut partial_body = UnixStream::connect(&gw.socket).unwrap();
    partial_body
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    partial_body
        .write_all(b"POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"method\"")
        .unwrap();
    let (status, _, body) = read_answer(&mut partial_body);
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error"]["code"], "body_timeout", "{body}");
    // A kept-alive connection is closed once idle past the deadline after its last answer.
    let mut kept = unix_stream(&gw.socket);
    let call = r#"{"method": "health"}"#;
    kept.write_all(
        format!(
            "POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{call}",
            call.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut answer = [0u8; 512];
    let n = (0..50)
        .find_map(|_| kept.read(&mut answer).ok())
        .expect("answered");
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        !closed_within(&mut kept, Duration::from_secs(1)),
        "kept alive"
    );
    assert!(
        closed_within(&mut kept, Duration::from_secs(4)),
        "a kept-alive idle connection outlived its deadline"
    );
    // The gateway still serves.
    let (status, answer) = gw.call("assemble", Some("still"), json!({}));
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn connections_over_the_cap_get_a_json_503_and_the_rest_are_served() {
    let home = home_with_limits(json!({ "maxConnections": 4 }));
    let gw = serve(home.path(), &[]);
    let held: Vec<UnixStream> = (0..4).map(|_| unix_stream(&gw.socket)).collect();
    // The fifth is answered and closed.
    let mut fifth = UnixStream::connect(&gw.socket).unwrap();
    fifth
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (status, head, body) = read_answer(&mut fifth);
    assert_eq!(status, 503, "{head}");
    assert_eq!(body["error"]["code"], "too_many_connections", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway.maxConnections"),
        "{body}"
    );
    // Once held ones close, new clients are served.
    drop(held);
    let start = Instant::now();
    loop {
        let answer = gw.try_call("health", None, Value::Null);
        match answer {
            Ok((200, _)) => break,
            other => assert!(
                start.elapsed() < Duration::from_secs(10),
                "not served again: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// File descriptors the process `pid` holds.
fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Raises this process's soft RLIMIT_NOFILE to at least `want` (children inherit it).
fn raise_nofile(want: u64) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return false;
        }
        if limit.rlim_cur >= want {
            return true;
        }
        if limit.rlim_max < want {
            return false;
        }
        limit.rlim_cur = want;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
    }
}

#[test]
fn two_thousand_idle_connections_are_all_let_go_at_the_idle_deadline() {
    const CONNECTIONS: usize = 2_000;
    if !raise_nofile(8_192) {
        eprintln!("notice: skipping: RLIMIT_NOFILE cannot be raised to 8192 here");
        assert!(std::env::var_os("CI").is_none(), "CI must allow 8192 fds");
        return;
    }
    let home = home_with_limits(json!({
        "idleTimeoutSeconds": 8, "headerTimeoutSeconds": 6, "maxConnections": 4096
    }));
    let gw = serve(home.path(), &[]);
    let before = fds_of(gw.pid());
    let mut streams: Vec<Box<dyn std::io::Read>> = Vec::with_capacity(CONNECTIONS);
    for i in 0..CONNECTIONS {
        if i % 2 == 0 {
            streams.push(Box::new(unix_stream(&gw.socket)));
        } else {
            // Half of them send a partial header and stop.
            let mut s = unix_stream(&gw.socket);
            s.write_all(b"POST /v1/call HTTP/1.1\r\n").unwrap();
            streams.push(Box::new(s));
        }
    }
    let opened = Instant::now();
    // Every connection accepted (wait for the gateway to catch up with the backlog: on a loaded
    // machine that takes seconds, so the deadlines are longer than this wait).
    let mut held = fds_of(gw.pid());
    while held < before + CONNECTIONS && opened.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        held = fds_of(gw.pid());
    }
    // Past the deadlines every one is let go.
    let mut after = held;
    while opened.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(250));
        after = fds_of(gw.pid());
        if after <= before {
            break;
        }
    }
    let let_go = opened.elapsed();
    eprintln!(
        "figures: {CONNECTIONS} idle connections (half with a partial header): gateway fds \
         {before} before, {held} while held, {after} {:.1} s after they opened (idle \
         deadline 8 s, header deadline 6 s)",
        let_go.as_secs_f64()
    );
    assert!(
        held >= before + CONNECTIONS * 9 / 10,
        "the connections were held: {held}"
    );
    assert!(
        after <= before,
        "fds still held after the deadlines: {after} > {before}"
    );
    let closed = streams
        .iter_mut()
        .map(|s| closed_within(s.as_mut(), Duration::from_millis(1)))
        .filter(|closed| *closed)
        .count();
    assert_eq!(
        closed, CONNECTIONS,
        "every client saw its connection closed"
    );
    // And the gateway serves on.
    let (status, answer) = gw.call("assemble", Some("after"), json!({}));
    assert_eq!(status, 200, "{answer}");
}
