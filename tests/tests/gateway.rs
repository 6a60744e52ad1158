//! The gateway, `pincer serve`, through the real binary: a conversation over its Unix socket
//! with the real `sliding-window` library and a chat-completions server on 127.0.0.1, calls of
//! one session in order while sessions run in parallel, malformed and oversized requests,
//! loopback HTTP and its bearer token, graceful shutdown with calls in flight, the socket's
//! mode, the documented schema checked against live answers, and a Python client.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pincer_tests::chat_server::ChatServer;
use pincer_tests::served::{call, signal, Serve, Served};
use pincer_tests::{pincer_bin, session_message_ids, staged_plugins_dir, wait_for, workspace_root};
use serde_json::{json, Value};

/// `pincer --log info serve` in `home` with the staged plugins and `args`, once its socket
/// answers.
fn serve(home: &Path, args: &[&str]) -> Served {
    serve_with(home, &staged_plugins_dir(), args)
}

/// `pincer --log info serve` with the plugins of `plugins_dir`.
fn serve_with(home: &Path, plugins_dir: &Path, args: &[&str]) -> Served {
    let log = home.join(format!("serve-{}.log", std::process::id()));
    serve_logged(home, log, plugins_dir, args)
}

/// `pincer --log info serve` with the plugins of `plugins_dir`, its log in `log`.
fn serve_logged(home: &Path, log: PathBuf, plugins_dir: &Path, args: &[&str]) -> Served {
    Served::start(
        home,
        Serve {
            socket: home.join("gw.sock"),
            log,
            plugins_dir: plugins_dir.to_owned(),
            global: &["--log", "info"],
            args,
        },
    )
}

/// A home whose config names the chat server and `entries` (plugins.entries).
fn home_with(model_url: Option<&str>, entries: Value) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let mut config = json!({ "plugins": { "entries": entries } });
    if let Some(url) = model_url {
        config["model"] = json!({ "baseUrl": url });
    }
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    home
}

fn queue_replies(server: &ChatServer, n: usize) {
    for i in 0..n {
        server.reply_completion(
            json!({"role": "assistant", "content": format!("answer {}", i + 1)}),
            "stop",
            json!({"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}),
        );
    }
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    }
}

#[test]
fn a_whole_conversation_over_the_socket_every_answer_naming_its_engine_and_generation() {
    let server = ChatServer::start();
    queue_replies(&server, 2);
    let home = home_with(Some(&server.base_url), json!({}));
    let gw = serve(
        home.path(),
        &["--engine", "sliding-window", "--model", "openai:test-model"],
    );
    let session = "agent:main:conv";
    let mut answers = Vec::new();
    let first = gw.ok("turn", session, json!({"prompt": "What is pincer?"}));
    assert_eq!(first["result"]["replyText"], "answer 1");
    let second = gw.ok(
        "turn",
        session,
        json!({"prompt": {"role": "user", "content": "And the gateway?"}}),
    );
    assert_eq!(second["result"]["replyText"], "answer 2");
    // The model saw the first turn: the gateway held the session.
    let sent = &server.recorded()[1].body["messages"];
    let sent_texts: Vec<String> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        sent_texts.iter().any(|t| t == "What is pincer?")
            && sent_texts.iter().any(|t| t == "answer 1"),
        "second turn's request: {sent}"
    );
    let ingested = gw.ok(
        "ingest",
        session,
        json!({"message": {"role": "user", "content": "a note"}}),
    );
    let batch = gw.ok(
        "ingestBatch",
        session,
        json!({"messages": [
            {"role": "user", "content": "note two"},
            {"role": "assistant", "content": [{"type": "text", "text": "noted"}]},
        ]}),
    );
    assert_eq!(batch["result"]["entryIds"].as_array().unwrap().len(), 2);
    // Assemble by reference, each message on its own: entry ids of the session file, in
    // order, and no message sent.
    let each = gw.ok(
        "assemble",
        session,
        json!({"tokenBudget": 100000, "refs": "each"}),
    );
    let ids: Vec<&str> = each["result"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            assert!(item.get("message").is_none(), "by reference: {item}");
            item["entryId"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids, session_message_ids(home.path(), session));
    assert_eq!(ids.len(), 7, "two turns (4 messages) and three ingested");
    assert_eq!(ids[4], ingested["result"]["entryIds"][0]);
    // By default consecutive kept messages come as runs {from, to, count}: the same
    // references, fewer items.
    let refs = gw.ok("assemble", session, json!({"tokenBudget": 100000}));
    assert_eq!(refs["result"]["count"], 7, "{refs}");
    let runs = refs["result"]["items"].as_array().unwrap();
    assert!(runs.len() < 7, "kept messages as runs: {refs}");
    assert_eq!(expand_runs(runs, &ids), ids, "{refs}");
    // In full, on request; and over explicit messages, which need no session history.
    let full = gw.ok("assemble", session, json!({"full": true}));
    let texts: Vec<String> = full["result"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| text_of(&item["message"]))
        .collect();
    assert_eq!(
        texts,
        [
            "What is pincer?",
            "answer 1",
            "And the gateway?",
            "answer 2",
            "a note",
            "note two",
            "noted"
        ]
    );
    let explicit = gw.ok(
        "assemble",
        "agent:main:explicit",
        json!({"messages": [{"role": "user", "content": "only this"}], "full": true}),
    );
    assert_eq!(explicit["result"]["items"][0]["index"], 0);
    assert_eq!(
        text_of(&explicit["result"]["items"][0]["message"]),
        "only this"
    );
    answers.extend([first, second, ingested, batch, each, refs, full, explicit]);
    answers.push(gw.ok("afterTurn", session, json!({"prePromptMessageCount": 5})));
    answers.push(gw.ok("maintain", session, json!({"reason": "turn"})));
    answers.push(gw.ok(
        "callTool",
        session,
        json!({"name": "nothing", "arguments": {}}),
    ));
    answers.push(gw.ok(
        "prepareSubagentSpawn",
        session,
        json!({"childSessionKey": "agent:main:child", "contextMode": "isolated"}),
    ));
    answers.push(gw.ok(
        "onSubagentEnded",
        session,
        json!({"childSessionKey": "agent:main:child", "reason": "completed"}),
    ));
    answers.push(gw.ok("compact", session, json!({})));
    for answer in &answers {
        assert_eq!(answer["engineId"], "sliding-window", "{answer}");
        assert_eq!(answer["generation"], 1, "{answer}");
    }
    let (status, health) = gw.call("health", None, Value::Null);
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["result"]["slot"], "sliding-window");
    assert_eq!(engine_health(&gw, "sliding-window")["generation"], 1);
    assert_eq!(health["result"]["sessions"], 2);
    // The CLI's client and `health --socket` print the same answers.
    let out = Command::new(pincer_bin())
        .args(["health", "--json", "--socket"])
        .arg(&gw.socket)
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["result"]["slot"], "sliding-window");
    assert!(printed["result"]["engines"].as_array().unwrap().len() >= 2);
    let out = Command::new(pincer_bin())
        .args(["client", "--socket"])
        .arg(&gw.socket)
        .args([
            "assemble",
            "--session",
            session,
            "--params",
            "{\"full\":true}",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let compacted = gw.ok("assemble", session, json!({"full": true}));
    assert_eq!(printed["result"], compacted["result"]);
    let (status, _) = gw.stop();
    assert!(status.success());
}

/// The entry ids `items` of an `assemble` answer by reference stand for: each `entryId`, and
/// for each run `{from, to, count}` the `count` ids of `context` (the session's context, in
/// order) from `from` to `to`.
fn expand_runs<'a>(items: &'a [Value], context: &[&'a str]) -> Vec<&'a str> {
    let mut ids = Vec::new();
    for item in items {
        assert!(item.get("message").is_none(), "by reference: {item}");
        if let Some(id) = item["entryId"].as_str() {
            ids.push(id);
            continue;
        }
        let from = item["from"]
            .as_str()
            .unwrap_or_else(|| panic!("a run: {item}"));
        let count = item["count"].as_u64().unwrap() as usize;
        let start = context.iter().position(|id| *id == from).unwrap();
        let run = &context[start..start + count];
        assert_eq!(run.last().copied(), item["to"].as_str(), "{item}");
        ids.extend(run.iter().copied());
    }
    ids
}

#[test]
fn calls_of_one_session_stay_in_order_while_sessions_run_in_parallel() {
    // `faulty` ingests after sleeping when configured to hang: one session's slow call must
    // not hold up another session.
    let home = home_with(
        None,
        json!({"faulty": {"config": {"ingest": "hang", "hangMs": 3000}}}),
    );
    let gw = serve(home.path(), &["--engine", "faulty"]);
    let socket = gw.socket.clone();
    let slow = std::thread::spawn(move || {
        call(
            &socket,
            "ingest",
            Some("slow"),
            json!({"message": {"role": "user", "content": "slow"}}),
        )
    });
    // While the slow session's call sleeps in the engine, other sessions are served.
    gw.wait_for_log("faulty: hanging", 1);
    let fast = gw.ok("assemble", "fast", json!({}));
    assert_eq!(fast["result"]["count"], 0);
    assert!(
        !slow.is_finished(),
        "a call of another session waited for the slow one"
    );
    // The next call of the slow session waits for the first: it sees its message.
    let after = gw.ok("assemble", "slow", json!({"full": true}));
    assert_eq!(slow.join().unwrap().0, 200);
    assert_eq!(text_of(&after["result"]["items"][0]["message"]), "slow");
    drop(gw);

    // Many clients, each appending in order to its own session and to a shared one: nothing
    // lost, nothing reordered.
    let home = home_with(None, json!({}));
    let gw = serve(home.path(), &[]);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let socket = gw.socket.clone();
            std::thread::spawn(move || {
                for i in 0..20 {
                    let message =
                        json!({"message": {"role": "user", "content": format!("{t}:{i}")}});
                    for session in [format!("own-{t}"), "shared".to_owned()] {
                        let (status, answer) =
                            call(&socket, "ingest", Some(&session), message.clone());
                        assert_eq!(status, 200, "{answer}");
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let texts = |session: &str| -> Vec<String> {
        gw.ok("assemble", session, json!({"full": true}))["result"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| text_of(&i["message"]))
            .collect()
    };
    for t in 0..4 {
        let expected: Vec<String> = (0..20).map(|i| format!("{t}:{i}")).collect();
        assert_eq!(texts(&format!("own-{t}")), expected);
        let shared: Vec<String> = texts("shared")
            .into_iter()
            .filter(|m| m.starts_with(&format!("{t}:")))
            .collect();
        assert_eq!(shared, expected, "client {t}'s order in the shared session");
    }
    assert_eq!(texts("shared").len(), 80);
}

/// Sends `raw` bytes on a fresh connection and reads the answer: status and JSON body.
fn raw_exchange(socket: &Path, raw: &[u8]) -> (u16, Value) {
    let mut stream = UnixStream::connect(socket).unwrap();
    let _ = stream.write_all(raw);
    read_answer(&mut stream)
}

fn read_answer(stream: &mut impl std::io::Read) -> (u16, Value) {
    let mut text = Vec::new();
    let outcome = stream.read_to_end(&mut text);
    if text.is_empty() {
        panic!("no answer: {outcome:?}");
    }
    let text = String::from_utf8_lossy(&text).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn post(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn malformed_requests_get_clear_errors_and_everyone_else_is_still_served() {
    let home = home_with(None, json!({}));
    let gw = serve(home.path(), &[]);
    gw.ok(
        "ingest",
        "kept",
        json!({"message": {"role": "user", "content": "before"}}),
    );
    let cases: [(&str, u16, &str); 8] = [
        ("{not json", 400, "bad_json"),
        ("[1, 2]", 400, "bad_request"),
        (
            r#"{"method": "assemble", "session": "s", "extra": 1}"#,
            400,
            "bad_request",
        ),
        (
            r#"{"method": "summon", "session": "s"}"#,
            404,
            "unknown_method",
        ),
        (r#"{"method": "assemble"}"#, 400, "missing_session"),
        (
            r#"{"method": "assemble", "session": "s", "params": [1]}"#,
            400,
            "invalid_params",
        ),
        (
            r#"{"method": "assemble", "session": "s", "params": {"tokenBudget": "lots"}}"#,
            400,
            "invalid_params",
        ),
        (
            r#"{"method": "ingest", "session": "s", "params": {"message": {"role": 7}}}"#,
            400,
            "invalid_message",
        ),
    ];
    for (body, status, code) in cases {
        let (got, answer) = raw_exchange(&gw.socket, &post(body));
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
        assert_eq!(answer["ok"], false);
        assert!(
            answer["error"]["message"].as_str().unwrap().len() > 20,
            "a message saying what was wrong: {answer}"
        );
    }
    // A 100 MB body is refused with 413 before it is read whole.
    let mut stream = UnixStream::connect(&gw.socket).unwrap();
    let head = "POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..100 {
        if stream.write_all(&chunk).is_err() {
            break;
        }
    }
    let (status, answer) = read_answer(&mut stream);
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["code"], "body_too_large");
    // Clients that go away mid-request harm nobody.
    for cut in [20, 120] {
        let mut stream = UnixStream::connect(&gw.socket).unwrap();
        let body = r#"{"method": "ingest", "session": "kept", "params": {"message": {"role": "user", "content": "never"}}}"#;
        let raw = post(body);
        stream.write_all(&raw[..cut.min(raw.len())]).unwrap();
        drop(stream);
    }
    // Unknown paths are answered too.
    let (status, answer) = raw_exchange(
        &gw.socket,
        b"GET /elsewhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    // The gateway still serves, and the cut request touched nothing.
    let full = gw.ok("assemble", "kept", json!({"full": true}));
    let texts: Vec<String> = full["result"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| text_of(&i["message"]))
        .collect();
    assert_eq!(texts, ["before"]);
    let (status, _) = gw.stop();
    assert!(status.success());
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_exchange(port: u16, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let raw = format!(
        "POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(raw.as_bytes()).unwrap();
    read_answer(&mut stream)
}

#[test]
fn loopback_http_refuses_a_missing_or_wrong_token_and_touches_nothing() {
    let home = home_with(None, json!({}));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let gw = serve(home.path(), &["--http", &addr]);
    let token_file = home.path().join("state/gateway.token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the token is the owner's only");
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    let body = r#"{"method": "ingest", "session": "guarded", "params": {"message": {"role": "user", "content": "hi"}}}"#;
    let wrong = format!("{}x", &token[..token.len() - 1]);
    for given in [None, Some("nonsense"), Some(wrong.as_str())] {
        let (status, answer) = http_exchange(port, given, body);
        assert_eq!(status, 401, "{given:?}: {answer}");
        assert_eq!(answer["error"]["code"], "unauthorized");
    }
    assert!(
        !home
            .path()
            .join("agents/main/sessions/sessions.json")
            .exists(),
        "a refused request created no session"
    );
    let (status, answer) = http_exchange(port, Some(&token), body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(session_message_ids(home.path(), "guarded").len(), 1);
    // The socket serves without a token (it is the owner's: mode 0600).
    gw.ok("assemble", "guarded", json!({}));
    drop(gw);
    // The token is kept across restarts.
    let gw = serve(home.path(), &["--http", &addr]);
    let (status, _) = http_exchange(port, Some(&token), body);
    assert_eq!(status, 200);
    // HTTP stays on loopback.
    drop(gw);
    let out = Command::new(pincer_bin())
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--socket"])
        .arg(home.path().join("other.sock"))
        .args(["--http", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
    assert!(
        !home.path().join("other.sock").exists(),
        "a gateway that did not start leaves no socket"
    );
}

#[test]
fn shutdown_answers_calls_in_flight_disposes_once_and_removes_the_socket() {
    let home = home_with(
        None,
        json!({"faulty": {"config": {"ingest": "hang", "hangMs": 1500}}}),
    );
    let gw = serve(home.path(), &["--engine", "faulty"]);
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let socket = gw.socket.clone();
            std::thread::spawn(move || {
                call(
                    &socket,
                    "ingest",
                    Some(&format!("s{i}")),
                    json!({"message": {"role": "user", "content": format!("in flight {i}")}}),
                )
            })
        })
        .collect();
    gw.wait_for_log("faulty: hanging", 3);
    let socket = gw.socket.clone();
    let home_path = home.path().to_owned();
    let (status, log) = gw.stop();
    assert!(status.success(), "{log}");
    for call in calls {
        let (status, answer) = call.join().unwrap();
        assert_eq!(status, 200, "a call in flight was answered: {answer}");
        assert_eq!(answer["result"]["ingested"], true);
    }
    assert_eq!(
        log.matches("faulty: disposed").count(),
        1,
        "dispose once: {log}"
    );
    assert!(!socket.exists(), "the socket is removed");
    for i in 0..3 {
        assert_eq!(session_message_ids(&home_path, &format!("s{i}")).len(), 1);
    }
}

#[test]
fn the_socket_is_private_and_a_live_one_is_never_replaced() {
    let home = home_with(None, json!({}));
    let gw = serve(home.path(), &[]);
    let mode = std::fs::metadata(&gw.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let out = Command::new(pincer_bin())
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--socket"])
        .arg(&gw.socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already serving"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    gw.ok("assemble", "still", json!({}));
    // A regular file in the way is refused, not deleted.
    let file = home.path().join("file.sock");
    std::fs::write(&file, "mine").unwrap();
    let out = Command::new(pincer_bin())
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--socket"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn live_answers_match_the_documented_schema() {
    let schema_path = workspace_root().join("docs/gateway.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&schema_path).unwrap())
        .expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the schema is a valid JSON Schema");
    let server = ChatServer::start();
    queue_replies(&server, 1);
    let home = home_with(Some(&server.base_url), json!({}));
    let gw = serve(
        home.path(),
        &["--engine", "sliding-window", "--model", "openai:test-model"],
    );
    let s = Some("schema");
    let requests: Vec<(&str, Option<&str>, Value)> = vec![
        ("turn", s, json!({"prompt": "hello"})),
        (
            "ingest",
            s,
            json!({"message": {"role": "user", "content": "x"}}),
        ),
        (
            "ingestBatch",
            s,
            json!({"messages": [{"role": "user", "content": "y"}]}),
        ),
        ("assemble", s, json!({})),
        ("assemble", s, json!({"full": true, "tokenBudget": 1000})),
        ("assemble", s, json!({"refs": "each"})),
        (
            "assemble",
            s,
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
        ),
        ("afterTurn", s, json!({})),
        ("maintain", s, json!({})),
        ("callTool", s, json!({"name": "t"})),
        ("prepareSubagentSpawn", s, json!({"childSessionKey": "c"})),
        ("onSubagentEnded", s, json!({"childSessionKey": "c"})),
        ("compact", s, json!({})),
        ("health", None, Value::Null),
        ("doctor", None, Value::Null),
        ("reload", None, json!({"pluginId": "sliding-window"})),
        ("summon", s, Value::Null),
        ("assemble", None, Value::Null),
        ("ingest", s, json!({"message": 3})),
    ];
    let request_schema = json!({"$ref": "#/$defs/CallRequest", "$defs": schema["$defs"]});
    let request_validator = jsonschema::validator_for(&request_schema).unwrap();
    let mut methods_seen = std::collections::BTreeSet::new();
    for (method, session, params) in requests {
        let mut request = json!({"method": method});
        if let Some(session) = session {
            request["session"] = json!(session);
        }
        if !params.is_null() {
            request["params"] = params.clone();
        }
        let (status, answer) = gw.call(method, session, params);
        let errors: Vec<String> = validator
            .iter_errors(&answer)
            .map(|e| format!("{} at {}", e, e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{method} answer {answer}: {errors:?}");
        if status == 200 {
            methods_seen.insert(method);
            let errors: Vec<String> = request_validator
                .iter_errors(&request)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "request {request}: {errors:?}");
            // The result matches the method's own result schema.
            let result_schema =
                json!({"$ref": format!("#/$defs/{method}Result"), "$defs": schema["$defs"]});
            let result_validator = jsonschema::validator_for(&result_schema).unwrap();
            let errors: Vec<String> = result_validator
                .iter_errors(&answer["result"])
                .map(|e| format!("{} at {}", e, e.instance_path))
                .collect();
            assert!(
                errors.is_empty(),
                "{method} result {}: {errors:?}",
                answer["result"]
            );
        }
    }
    assert!(methods_seen.len() >= 12, "{methods_seen:?}");
}

#[test]
fn a_python_standard_library_client_runs_a_whole_conversation() {
    let python = Command::new("python3").arg("--version").output();
    if !python.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is required in CI for the any-language gateway test"
        );
        eprintln!("skipping: python3 is not installed");
        return;
    }
    let server = ChatServer::start();
    queue_replies(&server, 3);
    let home = home_with(Some(&server.base_url), json!({}));
    let gw = serve(
        home.path(),
        &["--engine", "sliding-window", "--model", "openai:test-model"],
    );
    let out = Command::new("python3")
        .arg(workspace_root().join("tests/python/gateway_client.py"))
        .arg(&gw.socket)
        .arg("agent:main:python")
        .arg("3")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python client: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["replies"],
        json!(["answer 1", "answer 2", "answer 3"])
    );
    assert_eq!(summary["servedBy"], json!([["sliding-window", 1]]));
    let ids = session_message_ids(home.path(), "agent:main:python");
    assert_eq!(
        ids.len(),
        7,
        "three turns and the note, in the session file"
    );
    assert_eq!(summary["referenceEntryIds"], json!(ids));
    assert_eq!(summary["ingestedEntry"], json!(ids[6]));
    assert_eq!(summary["health"]["slot"], "sliding-window");
    let (status, _) = gw.stop();
    assert!(status.success());
}

/// How a new build replaces the old library file.
#[derive(Debug, Clone, Copy)]
enum Replace {
    /// Written over the same inode.
    InPlace,
    /// Written beside and renamed over.
    Rename,
    /// Deleted, then created again.
    DeleteRecreate,
}

/// Puts a "new build" of the plugin in `dir`: the original library with `trailer` appended (a
/// different content hash, the same code), its manifest's sha256 updated; `library` may be cut
/// short (a broken build).
fn install_build(dir: &Path, original: &[u8], trailer: &str, how: Replace, truncate: bool) {
    let mut bytes = original.to_vec();
    bytes.extend_from_slice(trailer.as_bytes());
    if truncate {
        bytes.truncate(bytes.len() / 2);
    }
    let library = pincer_tests::library_path(dir);
    match how {
        Replace::InPlace => {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&library)
                .unwrap();
            file.write_all(&bytes).unwrap();
        }
        Replace::Rename => {
            let tmp = dir.join(".new-build");
            std::fs::write(&tmp, &bytes).unwrap();
            std::fs::rename(&tmp, &library).unwrap();
        }
        Replace::DeleteRecreate => {
            std::fs::remove_file(&library).unwrap();
            std::fs::write(&library, &bytes).unwrap();
        }
    }
    let mut manifest = pincer_tests::read_manifest_json(dir);
    manifest["sha256"] = json!(pincer_host::testing::plugins::verify::sha256_hex(&bytes));
    pincer_tests::write_manifest_json(dir, &manifest);
}

fn engine_health(gw: &Served, engine: &str) -> Value {
    let (status, health) = gw.call("health", None, Value::Null);
    assert_eq!(status, 200, "{health}");
    health["result"]["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["engineId"] == engine)
        .cloned()
        .unwrap_or_else(|| panic!("{engine} in {health}"))
}

/// Waits until `engine` serves generation `generation`.
fn wait_for_generation(gw: &Served, engine: &str, generation: u64) {
    let start = Instant::now();
    while engine_health(gw, engine)["generation"] != generation {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{engine} never reached generation {generation}: {}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn reload_under_load_fails_no_call_and_disposes_each_generation_once() {
    let server = ChatServer::start();
    queue_replies(&server, 5000);
    let plugins = tempfile::tempdir().unwrap();
    let dir = pincer_tests::copy_plugin(
        &pincer_tests::staged_plugin("faulty"),
        plugins.path(),
        "faulty",
    );
    let original = std::fs::read(pincer_tests::library_path(&dir)).unwrap();
    let dispose_log = plugins.path().join("disposed.log");
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({
            "model": {"baseUrl": server.base_url},
            "plugins": {
                "slots": {"contextEngine": "faulty"},
                // `sandbox: false`: the dispose log lies outside the engine's own directories,
                // where an isolated engine's sandbox would refuse the write (the third pass).
                "entries": {"faulty": {"config": {"disposeLog": dispose_log}, "sandbox": false}},
            },
        })
        .to_string(),
    )
    .unwrap();
    // Only the copy: the staged folder is not watched. The log goes outside the watched
    // home: a file written on every call there would keep the watcher's debounce from ever
    // settling.
    let logs = tempfile::tempdir().unwrap();
    let gw = serve_logged(
        home.path(),
        logs.path().join("serve.log"),
        plugins.path(),
        &["--model", "openai:test-model"],
    );
    gw.ok("assemble", "warm", json!({}));
    assert_eq!(engine_health(&gw, "faulty")["generation"], 1);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Every call the clients got an answer to, so that the builds below land between calls.
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..3)
        .map(|c| {
            let socket = gw.socket.clone();
            let stop = stop.clone();
            let answered = answered.clone();
            std::thread::spawn(move || {
                let session = format!("load-{c}");
                let mut generations = Vec::new();
                let mut failures = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let (method, params) = match n % 3 {
                        0 => (
                            "ingest",
                            json!({"message": {"role": "user", "content": format!("m{n}")}}),
                        ),
                        1 => ("assemble", json!({})),
                        _ if c == 0 => ("turn", json!({"prompt": format!("q{n}")})),
                        _ => ("assemble", json!({"full": true})),
                    };
                    let (status, answer) = call(&socket, method, Some(&session), params);
                    answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if status == 200 && answer["ok"] == true {
                        generations.push(answer["generation"].as_u64().unwrap());
                    } else {
                        failures.push(answer);
                    }
                }
                (generations, failures)
            })
        })
        .collect();
    // Waits until the clients have had four more answers: with three clients, at least one
    // of them is to a call made after this point.
    let more_answers = || {
        let from = answered.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            wait_for(Duration::from_secs(60), || {
                answered.load(std::sync::atomic::Ordering::Relaxed) >= from + 4
            }),
            "the clients got no answers: {}",
            gw.log()
        );
    };
    let modes = [Replace::InPlace, Replace::Rename, Replace::DeleteRecreate];
    for (k, how) in modes.into_iter().enumerate() {
        more_answers();
        install_build(&dir, &original, &format!("build {k}"), how, false);
        wait_for_generation(&gw, "faulty", k as u64 + 2);
    }
    // A broken build is refused and the generation in force keeps serving.
    install_build(&dir, &original, "broken", Replace::Rename, true);
    let start = Instant::now();
    while !gw.log().contains("reload refused") {
        assert!(start.elapsed() < Duration::from_secs(60), "{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // `pincer plugins reload` refuses it too, with its reason.
    let out = Command::new(pincer_bin())
        .args(["plugins", "reload", "faulty", "--socket"])
        .arg(&gw.socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let refused: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(refused["error"]["code"], "reload_refused", "{refused}");
    more_answers();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut seen = std::collections::BTreeSet::new();
    for client in clients {
        let (generations, failures) = client.join().unwrap();
        assert!(failures.is_empty(), "failed calls: {failures:?}");
        assert!(
            generations.windows(2).all(|w| w[0] <= w[1]),
            "a client never goes back to an older generation"
        );
        seen.extend(generations);
    }
    // Three builds: three new generations, never more (a reload racing the next build's
    // files once made one build two generations: see `Runtime::reload_plugin`'s fingerprint,
    // and reload.rs's `a_build_landing_while_a_reload_verifies_…`). Every generation is
    // disposed exactly once.
    let last = engine_health(&gw, "faulty")["generation"].as_u64().unwrap();
    assert_eq!(last, 4, "three builds, three new generations: {}", gw.log());
    assert!(
        seen.is_subset(&(1..=last).collect()),
        "generations answered: {seen:?}"
    );
    assert!(
        seen.contains(&last),
        "the newest generation served: {seen:?}"
    );
    let kept = engine_health(&gw, "faulty");
    assert!(kept["keptGenerations"].as_u64().unwrap() >= 3, "{kept}");
    let (status, log) = gw.stop();
    assert!(status.success(), "{log}");
    // Each replaced generation disposed once, and the last one once at shutdown.
    let lines: Vec<String> = std::fs::read_to_string(&dispose_log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let distinct: std::collections::BTreeSet<&String> = lines.iter().collect();
    assert_eq!(
        lines.len() as u64,
        last,
        "one dispose per generation: {lines:?}"
    );
    assert_eq!(
        distinct.len(),
        lines.len(),
        "no instance disposed twice: {lines:?}"
    );
}

/// A private copy of the staged `faulty` plugin (to rebuild in place) and a home selecting it
/// with `entry` as its `plugins.entries.faulty`.
struct OwnFaulty {
    plugins: tempfile::TempDir,
    home: tempfile::TempDir,
    dir: PathBuf,
    original: Vec<u8>,
}

impl OwnFaulty {
    fn new(entry: Value) -> Self {
        let plugins = tempfile::tempdir().unwrap();
        let dir = pincer_tests::copy_plugin(
            &pincer_tests::staged_plugin("faulty"),
            plugins.path(),
            "faulty",
        );
        let original = std::fs::read(pincer_tests::library_path(&dir)).unwrap();
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("pincer.json"),
            json!({"plugins": {
                "slots": {"contextEngine": "faulty"},
                "entries": {"faulty": entry},
            }})
            .to_string(),
        )
        .unwrap();
        OwnFaulty {
            plugins,
            home,
            dir,
            original,
        }
    }

    /// `pincer serve` over this copy, without file watching.
    fn serve(&self) -> Served {
        serve_with(self.home.path(), self.plugins.path(), &["--no-watch"])
    }
}

#[test]
fn a_successful_reload_clears_the_quarantine() {
    let own = OwnFaulty::new(json!({"config": {"assemble": "error"}}));
    let (dir, original) = (&own.dir, &own.original);
    let gw = own.serve();
    let failed = gw.ok("assemble", "q", json!({}));
    assert_eq!(failed["result"]["answeredBy"], "legacy", "{failed}");
    assert_eq!(engine_health(&gw, "faulty")["quarantined"], true);
    // Unchanged files: nothing reloaded, still quarantined.
    let same = gw.call("reload", None, json!({"pluginId": "faulty"})).1;
    assert_eq!(same["result"]["reloaded"][0]["unchanged"], true, "{same}");
    assert_eq!(engine_health(&gw, "faulty")["quarantined"], true);
    install_build(dir, original, "fixed", Replace::Rename, false);
    let out = Command::new(pincer_bin())
        .args(["plugins", "reload", "faulty", "--socket"])
        .arg(&gw.socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reloaded: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reloaded["result"]["reloaded"][0]["engines"]["faulty"], 2);
    let health = engine_health(&gw, "faulty");
    assert_eq!(health["quarantined"], false, "{health}");
    assert_eq!(health["generation"], 2);
}

#[test]
fn sighup_reloads_and_a_changed_config_takes_effect_for_new_calls() {
    let plugins = tempfile::tempdir().unwrap();
    let dir = pincer_tests::copy_plugin(
        &pincer_tests::staged_plugin("faulty"),
        plugins.path(),
        "faulty",
    );
    let original = std::fs::read(pincer_tests::library_path(&dir)).unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("pincer.json"), json!({}).to_string()).unwrap();
    let gw = serve_logged(
        home.path(),
        home.path().join("serve.log"),
        plugins.path(),
        &["--no-watch"],
    );
    assert_eq!(gw.ok("assemble", "s", json!({}))["engineId"], "legacy");
    // The operator selects faulty in pincer.json and sends SIGHUP: new calls go to faulty.
    std::fs::write(
        home.path().join("pincer.json"),
        json!({"plugins": {"slots": {"contextEngine": "faulty"}}}).to_string(),
    )
    .unwrap();
    signal(gw.pid(), "HUP");
    let start = Instant::now();
    while gw.ok("assemble", "s", json!({}))["engineId"] != "faulty" {
        assert!(start.elapsed() < Duration::from_secs(60), "{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // A config that no longer parses is refused; faulty keeps serving.
    std::fs::write(home.path().join("pincer.json"), "{ plugins: ").unwrap();
    signal(gw.pid(), "HUP");
    let start = Instant::now();
    while !gw.log().contains("SIGHUP: reload refused") {
        assert!(start.elapsed() < Duration::from_secs(60), "{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gw.ok("assemble", "s", json!({}))["engineId"], "faulty");
    // A new build and SIGHUP: the next generation serves.
    std::fs::write(
        home.path().join("pincer.json"),
        json!({"plugins": {"slots": {"contextEngine": "faulty"}}}).to_string(),
    )
    .unwrap();
    install_build(&dir, &original, "sighup build", Replace::Rename, false);
    signal(gw.pid(), "HUP");
    wait_for_generation(&gw, "faulty", 2);
    assert_eq!(gw.ok("assemble", "s", json!({}))["generation"], 2);
}

/// `pincer serve` in `home` (its pincer.json already written) with the staged plugins, no file
/// watching, and `args`.
fn serve_faulty(home: &Path, args: &[&str]) -> Served {
    serve(home, &[&["--no-watch"], args].concat())
}

/// A home whose slot is `faulty` with `config`.
fn home_with_faulty(config: Value) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({"plugins": {
            "slots": {"contextEngine": "faulty"},
            "entries": {"faulty": {"config": config}},
        }})
        .to_string(),
    )
    .unwrap();
    home
}

#[test]
fn a_call_past_call_timeout_is_answered_timeout_and_the_gateway_keeps_serving() {
    // assemble hangs 5 s (ignoring its abort; the engine deadline, 60 s, is far): the client
    // gets `timeout` after --call-timeout 2 while the call goes on in its session.
    let home = home_with_faulty(json!({"assemble": "hang", "hangMs": 5000}));
    let gw = serve_faulty(home.path(), &["--call-timeout", "2"]);
    // Both sessions opened first (creating a session file may itself take a while on a
    // loaded machine: a call that timed out goes on, the next one waits for it).
    for session in ["stuck", "other"] {
        let start = Instant::now();
        while gw.call("maintain", Some(session), json!({})).0 != 200 {
            assert!(start.elapsed() < Duration::from_secs(60), "{}", gw.log());
        }
    }
    let started = Instant::now();
    // Whether the engine's hang was over when an answer came: `faulty` logs "faulty: hang over"
    // as its call returns. (How long each took is benches/gateway.rs's `gateway-call-timeout`.)
    let hang_over = |log: &Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("faulty: hang over")
    };
    let hanging = {
        let socket = gw.socket.clone();
        let log = gw.log_path().to_owned();
        std::thread::spawn(move || {
            let answer = call(&socket, "assemble", Some("stuck"), json!({}));
            (answer, hang_over(&log))
        })
    };
    // Meanwhile another session and the gateway's own methods are served, not held back.
    gw.wait_for_log("faulty: hanging", 1);
    let other = gw.ok(
        "ingest",
        "other",
        json!({"message": {"role": "user", "content": "hi"}}),
    );
    assert_eq!(other["engineId"], "faulty");
    assert_eq!(gw.call("health", None, Value::Null).0, 200);
    assert!(
        !hang_over(gw.log_path()),
        "other calls waited for the hanging one: {:?}",
        started.elapsed()
    );
    let ((status, answer), over_when_answered) = hanging.join().unwrap();
    assert_eq!(status, 504, "{answer}");
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["error"]["code"], "timeout", "{answer}");
    assert_eq!(
        answer["engineId"], "faulty",
        "the engine involved: {answer}"
    );
    assert_eq!(answer["generation"], 1, "{answer}");
    assert!(
        !over_when_answered,
        "answered after --call-timeout, before the engine returned"
    );
    // The session's next call waits for the hanging one (order kept; one queued behind it
    // may itself time out), then is served.
    let next = loop {
        let (status, answer) = gw.call("maintain", Some("stuck"), json!({}));
        if status == 200 {
            break answer;
        }
        assert_eq!(answer["error"]["code"], "timeout", "{answer}");
        assert!(started.elapsed() < Duration::from_secs(60), "{}", gw.log());
    };
    assert!(
        hang_over(gw.log_path()),
        "the next call of the session ran before the hanging one ended: {:?}",
        started.elapsed()
    );
    assert_eq!(next["engineId"], "faulty", "{next}");
    let (status, log) = gw.stop();
    assert!(status.success(), "{log}");
}

#[test]
fn error_answers_name_the_engine_and_generation_involved() {
    let home = home_with_faulty(json!({"prepareSubagentSpawn": "error"}));
    let gw = serve_faulty(home.path(), &[]);
    // A refused reload names the engine that keeps serving.
    let (status, answer) = gw.call("reload", None, json!({"pluginId": "no-such-plugin"}));
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["engineId"], "faulty", "{answer}");
    assert_eq!(answer["generation"], 1, "{answer}");
    // The engine failed with no fallback: the answer names it.
    let (status, answer) = gw.call(
        "prepareSubagentSpawn",
        Some("parent"),
        json!({"childSessionKey": "child"}),
    );
    assert_eq!(status, 500, "{answer}");
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["engineId"], "faulty", "{answer}");
    assert_eq!(answer["generation"], 1, "{answer}");
    // Quarantined now: a refused reload names the engine serving instead.
    let (status, answer) = gw.call("reload", None, json!({"pluginId": "no-such-plugin"}));
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["engineId"], "legacy", "{answer}");
    // A request refused before any engine was taken names none.
    let (status, answer) = gw.call("assemble", Some("parent"), json!({"tokenBudget": "x"}));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.get("engineId").is_none(), "{answer}");
    assert!(answer.get("generation").is_none(), "{answer}");
    // Each of them as the schema says.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace_root().join("docs/gateway.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for answer in [
        gw.call(
            "prepareSubagentSpawn",
            Some("parent"),
            json!({"childSessionKey": "c2"}),
        )
        .1,
        gw.call("assemble", Some("parent"), json!({"tokenBudget": "x"}))
            .1,
    ] {
        let errors: Vec<String> = validator
            .iter_errors(&answer)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{answer}: {errors:?}");
    }
}

#[test]
fn health_without_a_gateway_shows_each_engine_as_a_fresh_process_would_serve_it() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({"plugins": {
            "slots": {"contextEngine": "sliding-window"},
            "load": {"paths": [staged_plugins_dir()]},
        }})
        .to_string(),
    )
    .unwrap();
    let out = Command::new(pincer_bin())
        .arg("--home")
        .arg(home.path())
        .args(["health", "--json"])
        .env_remove("PINCER_HOME")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["offline"], true, "{health}");
    assert_eq!(health["slot"], "sliding-window", "{health}");
    let engines = health["engines"].as_array().unwrap();
    for id in ["legacy", "sliding-window", "faulty"] {
        let engine = engines
            .iter()
            .find(|e| e["engineId"] == id)
            .unwrap_or_else(|| panic!("{id} in {health}"));
        assert_eq!(engine["generation"], 1, "{engine}");
        assert_eq!(engine["keptGenerations"], 0, "{engine}");
        assert_eq!(engine["keptBytes"], 0, "{engine}");
        assert_eq!(engine["draining"], 0, "{engine}");
        assert_eq!(engine["quarantined"], false, "{engine}");
    }
    let out = Command::new(pincer_bin())
        .arg("--home")
        .arg(home.path())
        .arg("health")
        .env_remove("PINCER_HOME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sliding-window (slot): generation 1, no old generations kept"),
        "{text}"
    );
}

#[test]
fn a_turn_whose_model_fails_names_the_engine_it_started_on() {
    let server = ChatServer::start();
    for _ in 0..10 {
        server.reply(
            400,
            json!({"error": {"message": "bad request, on purpose"}}),
        );
    }
    let home = home_with(Some(&server.base_url), json!({}));
    let gw = serve(
        home.path(),
        &["--engine", "sliding-window", "--model", "openai:test-model"],
    );
    let (status, answer) = gw.call("turn", Some("t"), json!({"prompt": "hello"}));
    assert_eq!(status, 502, "{answer}");
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["engineId"], "sliding-window", "{answer}");
    assert_eq!(answer["generation"], 1, "{answer}");
}

/// The private copies of `libfaulty.so` mapped into process `pid`.
#[cfg(target_os = "linux")]
fn faulty_mappings(pid: u32) -> std::collections::BTreeSet<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.ends_with("libfaulty.so"))
        .map(str::to_owned)
        .collect()
}

/// Waits until `engine`'s health satisfies `check`.
fn wait_for_health(gw: &Served, engine: &str, what: &str, check: impl Fn(&Value) -> bool) {
    let start = Instant::now();
    loop {
        let health = engine_health(gw, engine);
        if check(&health) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{engine} never got {what}: {health}\n{}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `plugins.entries.<id>.unloadOnReload` through the real binary: an old build stays mapped
/// while the gateway keeps a subagent's rollback handle from it, `pincer health --socket` says
/// so, and once the rollback has run the old copy leaves the gateway's address space and
/// health counts it unloaded.
#[cfg(target_os = "linux")]
#[test]
fn unload_on_reload_in_the_gateway_health_tells_kept_from_unloaded() {
    if pincer_tests::isolated_run() {
        // Isolated, the library is never mapped in the gateway: nothing to unload.
        eprintln!("notice: skipped under PINCER_ISOLATION=process");
        return;
    }
    let own = OwnFaulty::new(json!({"unloadOnReload": true}));
    let (dir, original) = (&own.dir, &own.original);
    let gw = own.serve();
    let pid = gw.pid();
    gw.ok("assemble", "parent", json!({}));
    let spawned = gw.ok(
        "prepareSubagentSpawn",
        "parent",
        json!({"childSessionKey": "child"}),
    );
    assert_eq!(spawned["result"]["rollback"], true, "{spawned}");
    let first = faulty_mappings(pid);
    assert_eq!(first.len(), 1, "{first:?}");

    install_build(dir, original, "build 1", Replace::Rename, false);
    let out = Command::new(pincer_bin())
        .args(["plugins", "reload", "faulty", "--socket"])
        .arg(&gw.socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    gw.ok("assemble", "parent", json!({}));
    // The rollback handle the gateway keeps for "child" is generation 1's code.
    wait_for_health(&gw, "faulty", "generation 1 disposed", |h| {
        h["generation"] == 2 && h["draining"] == 0
    });
    let out = Command::new(pincer_bin())
        .args(["health", "--json", "--socket"])
        .arg(&gw.socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    let faulty = health["result"]["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["engineId"] == "faulty")
        .cloned()
        .unwrap();
    assert_eq!(
        (
            &faulty["keptGenerations"],
            &faulty["unloading"],
            &faulty["unloadedGenerations"]
        ),
        (&json!(1), &json!(1), &json!(0)),
        "{faulty}"
    );
    assert!(faulty["keptBytes"].as_u64().unwrap() >= original.len() as u64);
    let both = faulty_mappings(pid);
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(both.is_superset(&first));

    // The child's spawn failed: the gateway runs the kept rollback, then lets go of it.
    let ended = gw.ok(
        "onSubagentEnded",
        "parent",
        json!({"childSessionKey": "child", "spawnFailed": true}),
    );
    assert_eq!(ended["result"]["rolledBack"], true, "{ended}");
    wait_for_health(&gw, "faulty", "generation 1 unloaded", |h| {
        h["unloadedGenerations"] == 1
    });
    let health = engine_health(&gw, "faulty");
    assert_eq!(
        (
            &health["keptGenerations"],
            &health["keptBytes"],
            &health["unloading"],
            &health["pinned"]
        ),
        (&json!(0), &json!(0), &json!(0), &json!(0)),
        "{health}"
    );
    let last = faulty_mappings(pid);
    assert_eq!(last.len(), 1, "{last:?}");
    assert!(
        last.is_disjoint(&first),
        "generation 1's copy is unmapped: {last:?}"
    );
    gw.ok("assemble", "parent", json!({}));
    let (status, log) = gw.stop();
    assert!(status.success(), "{log}");
}
