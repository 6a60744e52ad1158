//! Session references are keys, never paths, through the real binary: the gateway (`pincer
//! serve`, over its socket and over loopback HTTP) refuses a `session` that is not a key with
//! `400 invalid_session` naming the rule and touches no file outside
//! `$PINCER_HOME/agents/<agent>/sessions/` whatever it is given (a property test), puts
//! `agent:<agentId>:…` keys under their agent, and never points a key at a new file; the CLI
//! takes only session files as paths. Every victim file is the test's own, in its temp dir.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pincer_host::gateway::client;
use pincer_host::gateway::CallRequest;
use pincer_tests::{pincer_bin, run_pincer, staged_plugins_dir, stderr_text, stdout_text};
use serde_json::{json, Value};

/// A running `pincer serve`, started in a working folder of the test's own.
struct Served {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Served {
    fn start(home: &Path, cwd: &Path, args: &[&str]) -> Served {
        let socket = home.join("gw.sock");
        let log = home.join("serve.log");
        let child = Command::new(pincer_bin())
            .current_dir(cwd)
            .arg("--home")
            .arg(home)
            .args(["serve", "--socket"])
            .arg(&socket)
            .arg("--plugins-dir")
            .arg(staged_plugins_dir())
            .args(args)
            .env_remove("PINCER_HOME")
            .env_remove("PINCER_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("pincer serve starts");
        let mut served = Served { child, socket, log };
        let start = Instant::now();
        while UnixStream::connect(&served.socket).is_err() {
            if let Some(status) = served.child.try_wait().unwrap() {
                panic!(
                    "pincer serve exited ({status}): {}",
                    std::fs::read_to_string(&served.log).unwrap_or_default()
                );
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no gateway");
            std::thread::sleep(Duration::from_millis(20));
        }
        served
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
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A home with a `pincer.json` and a working folder beside it, both in `root`.
fn home_and_cwd(root: &Path, entries: Value) -> (PathBuf, PathBuf) {
    let home = root.join("home");
    let cwd = root.join("cwd");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(
        home.join("pincer.json"),
        json!({"plugins": {"entries": entries}}).to_string(),
    )
    .unwrap();
    (home, cwd)
}

/// Every file and folder under `root`, with its bytes (folders: `None`), links not followed.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                out.insert(path.clone(), None);
                stack.push(path);
            } else if kind.is_file() {
                out.insert(path.clone(), Some(std::fs::read(&path).unwrap_or_default()));
            } else {
                out.insert(path, Some(Vec::new()));
            }
        }
    }
    out
}

/// The paths created, changed or removed between two snapshots.
fn changed(
    before: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    after: &BTreeMap<PathBuf, Option<Vec<u8>>>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = after
        .iter()
        .filter(|(path, bytes)| before.get(*path) != Some(bytes))
        .map(|(path, _)| path.clone())
        .collect();
    out.extend(before.keys().filter(|p| !after.contains_key(*p)).cloned());
    out
}

/// Whether `path` lies in `home/agents/<agent id>/sessions/` (or is one of the folders above),
/// the agent id being one OpenClaw's rule accepts.
fn in_a_sessions_folder(home: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(home.join("agents")) else {
        return false;
    };
    let parts: Vec<&str> = rest.iter().map(|p| p.to_str().unwrap()).collect();
    let agent_ok = |id: &str| {
        !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    match parts.as_slice() {
        [] => true,
        [agent] => agent_ok(agent),
        [agent, "sessions", ..] => agent_ok(agent),
        _ => false,
    }
}

/// The gateway's own files, which no request makes: its socket, log, token and state.
fn gateways_own(home: &Path, path: &Path) -> bool {
    path == home.join("gw.sock")
        || path == home.join("serve.log")
        || path.starts_with(home.join("state"))
}

/// The index of `agent`.
fn index_of(home: &Path, agent: &str) -> Value {
    let path = home.join(format!("agents/{agent}/sessions/sessions.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e}", path.display());
    }))
    .unwrap()
}

/// The header of a session file.
fn header_of(file: &Path) -> Value {
    let text = std::fs::read_to_string(file).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 POST of `body` to the gateway on `port` with `token`; status and JSON answer.
fn http_post(port: u16, token: &str, body: &str) -> (u16, Value) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn a_path_given_as_session_is_refused_over_the_socket_and_http_and_the_victim_is_untouched() {
    let root = tempfile::tempdir().unwrap();
    let (home, cwd) = home_and_cwd(root.path(), json!({}));
    let victims = root.path().join("victims");
    std::fs::create_dir_all(&victims).unwrap();
    let victim = victims.join("victim.txt");
    std::fs::write(&victim, "precious data\n").unwrap();
    // A file in the gateway's working folder, named as a relative path would name it.
    std::fs::write(cwd.join("victim.txt"), "also precious\n").unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let gw = Served::start(&home, &cwd, &["--http", &addr]);
    let token = std::fs::read_to_string(home.join("state/gateway.token"))
        .unwrap()
        .trim()
        .to_owned();
    let before = snapshot(root.path());

    let absolute = victim.to_str().unwrap().to_owned();
    let relative = "../victims/victim.txt".to_owned();
    for session in [&absolute, &relative] {
        for method in ["assemble", "compact", "maintain"] {
            let (status, answer) = gw.call(method, session, json!({}));
            assert_eq!(status, 400, "{method} {session}: {answer}");
            assert_eq!(answer["error"]["code"], "invalid_session", "{answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("never a path") && message.contains("1–256 characters"),
                "names the rule: {message}"
            );
        }
        let body = json!({"method": "assemble", "session": session}).to_string();
        let (status, answer) = http_post(port, &token, &body);
        assert_eq!(status, 400, "HTTP {session}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_session");
    }
    let after = snapshot(root.path());
    let touched: Vec<PathBuf> = changed(&before, &after)
        .into_iter()
        .filter(|p| !gateways_own(&home, p))
        .collect();
    assert!(touched.is_empty(), "refused calls touched {touched:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious data\n");

    // A bare name that is a file in the gateway's working folder is a key like any other:
    // its session lives in the store, and the file is not read or changed.
    let (status, answer) = gw.call("assemble", "victim.txt", json!({}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        std::fs::read_to_string(cwd.join("victim.txt")).unwrap(),
        "also precious\n"
    );
    let index = index_of(&home, "main");
    let id = index["victim.txt"]["sessionId"].as_str().unwrap();
    assert!(home
        .join(format!("agents/main/sessions/{id}.jsonl"))
        .is_file());
    // A child session is named by a key too.
    for method in ["prepareSubagentSpawn", "onSubagentEnded"] {
        let (status, answer) = gw.call(method, "parent", json!({"childSessionKey": absolute}));
        assert_eq!(status, 400, "{method}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_session", "{answer}");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious data\n");
    let strays: Vec<PathBuf> = std::fs::read_dir(&cwd)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap() != "victim.txt")
        .collect();
    assert!(strays.is_empty(), "nothing beside the victim: {strays:?}");
}

#[test]
fn agent_keys_put_sessions_under_their_agent_with_one_id_for_header_index_and_file() {
    let root = tempfile::tempdir().unwrap();
    let (home, cwd) = home_and_cwd(root.path(), json!({}));
    let gw = Served::start(&home, &cwd, &[]);
    let message = json!({"message": {"role": "user", "content": "hi"}});
    for (key, agent) in [
        ("agent:ops:main", "ops"),
        ("agent:Ops:telegram:group:-100123", "ops"),
        (
            "agent:main:subagent:0b7c5a6e-3f1d-4b8e-9a55-1c2d3e4f5a6b",
            "main",
        ),
        (
            "agent:main:slack:channel:c1:thread:1700000000.000100",
            "main",
        ),
        ("cron:daily-report", "main"),
        ("hook:0b7c5a6e-3f1d-4b8e-9a55-1c2d3e4f5a6b", "main"),
        ("main", "main"),
    ] {
        let (status, answer) = gw.call("ingest", key, message.clone());
        assert_eq!(status, 200, "{key}: {answer}");
        let index = index_of(&home, agent);
        let id = index[key]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{key} is in agent {agent}'s index: {index}"));
        let file = home.join(format!("agents/{agent}/sessions/{id}.jsonl"));
        assert!(file.is_file(), "{key}: {}", file.display());
        assert_eq!(
            header_of(&file)["id"],
            id,
            "{key}: header id is the session id"
        );
        assert!(
            index[key].get("sessionFile").is_none(),
            "{key}: the file is where the id says"
        );
    }
    // The session's id names it too: no new session.
    let index = index_of(&home, "ops");
    let id = index["agent:ops:main"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, answer) = gw.call("assemble", &format!("agent:ops:{id}"), json!({}));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = gw.call("assemble", &id, json!({}));
    assert_eq!(status, 200, "{answer}");
    // Agent ids OpenClaw's rule refuses.
    for bad in [
        "agent:a.b:main",
        "agent:-x:main",
        "agent::main",
        "agent:main",
    ] {
        let (status, answer) = gw.call("assemble", bad, json!({}));
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(
            answer["error"]["code"], "invalid_session",
            "{bad}: {answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("a-z, 0-9"),
            "{answer}"
        );
    }
    let agents: Vec<String> = std::fs::read_dir(home.join("agents"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut agents = agents;
    agents.sort();
    assert_eq!(agents, ["main", "ops"]);
}

#[test]
fn a_key_whose_file_is_unusable_is_refused_and_keeps_its_session() {
    let root = tempfile::tempdir().unwrap();
    let (home, cwd) = home_and_cwd(root.path(), json!({}));
    let gw = Served::start(&home, &cwd, &[]);
    let message = json!({"message": {"role": "user", "content": "hi"}});
    let (status, answer) = gw.call("ingest", "kept", message.clone());
    assert_eq!(status, 200, "{answer}");
    drop(gw);
    let id = index_of(&home, "main")["kept"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = home.join(format!("agents/main/sessions/{id}.jsonl"));
    // The key's file is made a directory.
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let gw = Served::start(&home, &cwd, &[]);
    let index_before = index_of(&home, "main");
    let (status, answer) = gw.call("ingest", "kept", message);
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "session_unusable", "{answer}");
    let text = answer["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("is a directory") && text.contains("new key"),
        "says what to do: {text}"
    );
    assert_eq!(
        index_of(&home, "main"),
        index_before,
        "the key still names its session"
    );
    assert!(file.is_dir());
    drop(gw);

    // An index entry naming a session file outside the store, and one naming a link to it:
    // refused too, the victim untouched.
    let victim = root.path().join("victim.jsonl");
    let text = "{\"type\":\"session\",\"version\":3,\"id\":\"v\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/\"}\n";
    std::fs::write(&victim, text).unwrap();
    let link = home.join("agents/main/sessions/link.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let index_path = home.join("agents/main/sessions/sessions.json");
    let mut index = index_of(&home, "main");
    index["outside"] = json!({"sessionId": "v", "sessionFile": victim});
    index["linked"] = json!({"sessionId": "link"});
    std::fs::write(&index_path, index.to_string()).unwrap();
    let gw = Served::start(&home, &cwd, &[]);
    for (key, why) in [
        ("outside", "outside the agent's sessions folder"),
        ("linked", "symbolic link"),
    ] {
        let (status, answer) = gw.call(
            "ingest",
            key,
            json!({"message": {"role": "user", "content": "x"}}),
        );
        assert_eq!(status, 409, "{key}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(why),
            "{answer}"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), text);
}

#[test]
fn pincer_compact_and_sessions_refuse_a_file_that_is_not_a_session_and_leave_it_as_it_is() {
    let root = tempfile::tempdir().unwrap();
    let (home, _) = home_and_cwd(root.path(), json!({}));
    let dir = root.path().join("victims");
    std::fs::create_dir_all(&dir).unwrap();
    let victims = [
        ("notes.txt", "precious data\n"),
        ("list.json", "[{\"foo\":1}]\n"),
        (
            "headless.jsonl",
            "{\"type\":\"message\",\"id\":\"a\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n",
        ),
        ("empty.jsonl", ""),
    ];
    for (name, text) in victims {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let before = snapshot(root.path());
    for (name, text) in victims {
        let path = dir.join(name);
        let path = path.to_str().unwrap();
        for args in [
            vec!["compact", path],
            vec!["sessions", "context", path],
            vec!["sessions", "show", path],
            vec!["run", "--import", path, "--session", path],
        ] {
            let out = run_pincer(&home, &args);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?}: {}",
                stderr_text(&out)
            );
            let stderr = stderr_text(&out);
            if args[0] != "run" {
                assert!(
                    stderr.contains("is not a session file") && stderr.contains("not changed"),
                    "{args:?}: {stderr}"
                );
            }
        }
        assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), text);
    }
    let touched: Vec<PathBuf> = changed(&before, &snapshot(root.path()))
        .into_iter()
        .filter(|p| !p.starts_with(home.join("state")))
        .collect();
    assert!(
        touched.is_empty(),
        "nothing moved aside or written: {touched:?}"
    );

    // A real session file named by its path still works.
    let session = dir.join("real.jsonl");
    std::fs::write(
        &session,
        "{\"type\":\"session\",\"version\":3,\"id\":\"real\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/srv\"}\n{\"type\":\"message\",\"id\":\"a\",\"parentId\":null,\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n",
    )
    .unwrap();
    let out = run_pincer(&home, &["sessions", "context", session.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert!(stdout_text(&out).contains("\"hi\""));
}

#[test]
fn a_version_1_session_file_named_by_path_is_kept_beside_before_its_first_append() {
    let root = tempfile::tempdir().unwrap();
    let (home, _) = home_and_cwd(root.path(), json!({}));
    let dir = root.path().join("files");
    std::fs::create_dir_all(&dir).unwrap();
    // Version 1 (no `version`, no entry ids), as pi wrote it: migrated, so kept beside.
    let legacy = dir.join("legacy.jsonl");
    let mut text = String::from(
        "{\"type\":\"session\",\"id\":\"legacy\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/srv\"}\n",
    );
    for i in 0..12 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let content = if role == "user" {
            json!(format!("question {i} {}", "word ".repeat(400)))
        } else {
            json!([{"type": "text", "text": format!("answer {i} {}", "word ".repeat(400))}])
        };
        text.push_str(
            &json!({"type": "message", "timestamp": "2025-01-01T00:00:01.000Z", "message": {"role": role, "content": content}})
                .to_string(),
        );
        text.push('\n');
    }
    std::fs::write(&legacy, &text).unwrap();
    let out = run_pincer(
        &home,
        &[
            "compact",
            legacy.to_str().unwrap(),
            "--context-window",
            "4096",
        ],
    );
    assert!(out.status.success(), "{}", stderr_text(&out));
    let aside: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("legacy.v1-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the original is kept beside: {aside:?}");
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), text);
    assert_eq!(header_of(&legacy)["version"], 4);
}

/// Strings a hostile client would try as `session`: paths (absolute, relative, through `..`,
/// to the test's victims), near-keys, and any text at all.
fn session_strings(victims: &Path) -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let victim = victims.join("victim.txt").to_string_lossy().into_owned();
    let pieces = prop::collection::vec(
        prop::sample::select(vec![
            "/",
            "..",
            ".",
            "victim.txt",
            "victim.jsonl",
            "agent:",
            "main",
            ":",
            "ops",
            "Ops",
            "x",
            "-",
            "_",
            "~",
            "%2e",
            "\\",
            " ",
            "\n",
            "\u{0}",
            "é",
            "sessions",
            "agents",
            "sessions.json",
            "..:",
            "agent:..:",
            "*",
            "?",
        ]),
        0..8,
    )
    .prop_map(|parts| parts.concat());
    prop_oneof![
        3 => pieces,
        1 => Just(victim.clone()),
        1 => Just(format!("{victim}/../victim.jsonl")),
        1 => Just("../victims/victim.txt".to_owned()),
        2 => any::<String>(),
        1 => "[a-zA-Z0-9:._+@=#!~-]{1,300}",
        1 => "agent:[a-zA-Z0-9_.-]{0,70}:[a-z0-9:./]{0,10}",
    ]
}

/// For any string as `session`, whatever the method: every file the gateway creates or
/// changes lies in `$PINCER_HOME/agents/<valid agent id>/sessions/`, and the victims in the
/// working folder and beside it stay as they are.
#[test]
fn no_session_string_makes_the_gateway_touch_a_file_outside_the_store() {
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let root = tempfile::tempdir().unwrap();
    let (home, cwd) = home_and_cwd(root.path(), json!({}));
    let victims = root.path().join("victims");
    std::fs::create_dir_all(&victims).unwrap();
    for dir in [&victims, &cwd] {
        std::fs::write(dir.join("victim.txt"), "precious\n").unwrap();
        std::fs::write(dir.join("victim.jsonl"), "{\"type\":\"message\"}\n").unwrap();
    }
    let gw = Served::start(&home, &cwd, &[]);
    let methods = [
        "assemble",
        "ingest",
        "ingestBatch",
        "compact",
        "afterTurn",
        "maintain",
        "turn",
        "prepareSubagentSpawn",
        "onSubagentEnded",
        "callTool",
    ];
    let params = |method: &str| match method {
        "ingest" => json!({"message": {"role": "user", "content": "hi"}}),
        "ingestBatch" => json!({"messages": [{"role": "user", "content": "hi"}]}),
        "afterTurn" => json!({"prePromptMessageCount": 0}),
        "turn" => json!({"prompt": "hi"}),
        "prepareSubagentSpawn" | "onSubagentEnded" => {
            json!({"childSessionKey": "/tmp/child", "reason": "completed"})
        }
        "callTool" => json!({"name": "none", "arguments": {}}),
        _ => json!({}),
    };
    let mut runner = TestRunner::new(Config {
        cases: 160,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        session_strings(&victims),
        proptest::sample::select(methods.to_vec()),
    );
    let accepted = std::cell::Cell::new(0usize);
    let result = runner.run(&strategy, |(session, method)| {
        let before = snapshot(root.path());
        let (status, answer) = gw.call(method, &session, params(method));
        if status == 200 {
            accepted.set(accepted.get() + 1);
        }
        let outside: Vec<PathBuf> = changed(&before, &snapshot(root.path()))
            .into_iter()
            .filter(|p| !gateways_own(&home, p) && !in_a_sessions_folder(&home, p))
            .collect();
        if !outside.is_empty() {
            return Err(TestCaseError::fail(format!(
                "{method} {session:?} ({status} {answer}) touched {outside:?}"
            )));
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
    for dir in [&victims, &cwd] {
        assert_eq!(
            std::fs::read_to_string(dir.join("victim.txt")).unwrap(),
            "precious\n"
        );
    }
    assert!(accepted.get() > 0, "some keys were valid and served");
}
