//! No silent no-ops, through the real binary and gateway: imports refuse what is not a
//! transcript and leave nothing behind when they fail; a transcript's final unanswered user
//! message is reported; a key is never pointed at a new session without `--force` (which says
//! what it replaced); sessions pincer creates use one id for the header, the index and the file
//! name; and a compaction that is not smaller — the built-in one, or an engine's claim — is
//! reported as none and appends nothing.

use std::path::{Path, PathBuf};

use pincer_tests::{pincer_bin, run_pincer, staged_plugins_dir, stderr_text, stdout_text};
use serde_json::{json, Value};

/// Every session file (`*.jsonl`) and import staging folder under `root`.
fn session_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".import-") || name.ends_with(".jsonl") {
                out.push(path.clone());
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

fn write_json(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).unwrap();
    path
}

fn index(home: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(home.join("agents/main/sessions/sessions.json")).unwrap(),
    )
    .unwrap()
}

fn header_of(file: &Path) -> Value {
    let text = std::fs::read_to_string(file).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// A short OpenAI chat transcript.
fn chat() -> Value {
    json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "how are you?"},
        {"role": "assistant", "content": "fine"},
    ])
}

#[test]
fn imports_refuse_what_is_not_a_transcript_with_exit_2_and_create_nothing() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let inputs = [
        (
            "tasks.json",
            json!([{"task_id": 0, "reward": 1.0, "traj": [{"role": "user", "content": "hi"}]}]),
            "τ-bench task",
        ),
        ("foo.json", json!([{"foo": 1}]), "no string \"role\""),
        ("numbers.json", json!([1, 2]), "not a message object"),
        ("object.json", json!({"foo": []}), "without a \"messages\""),
        ("empty.json", json!([]), "no message"),
        (
            "system.json",
            json!([{"role": "system", "content": "only"}]),
            "no message but a system prompt",
        ),
        ("text.json", json!("a string"), "it holds a string"),
    ];
    for (name, value, why) in inputs {
        let file = write_json(root.path(), name, &value);
        let file = file.to_str().unwrap();
        for args in [
            vec!["run", "--import", file],
            vec!["sessions", "import", file],
        ] {
            let out = run_pincer(&home, &args);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?}: {}",
                stderr_text(&out)
            );
            let stderr = stderr_text(&out);
            assert!(
                stderr.contains("is not a transcript") && stderr.contains(why),
                "{args:?} says why: {stderr}"
            );
            assert!(
                stderr.contains("expected a JSON array of chat messages"),
                "{stderr}"
            );
        }
    }
    assert_eq!(session_files(root.path()), Vec::<PathBuf>::new());
    let listed = run_pincer(&home, &["sessions", "list", "--json"]);
    assert_eq!(stdout_text(&listed).trim(), "[]");
}

#[test]
fn a_failed_import_leaves_no_partial_session_file() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Message 2 is of a role the mapping does not know: found after two were written.
    let file = write_json(
        root.path(),
        "bad.json",
        &json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "wizard", "content": "abracadabra"},
        ]),
    );
    let out_path = root.path().join("out.jsonl");
    for extra in [vec![], vec!["--out", out_path.to_str().unwrap()]] {
        let mut args = vec!["sessions", "import", file.to_str().unwrap()];
        args.extend(extra);
        let out = run_pincer(&home, &args);
        assert_eq!(out.status.code(), Some(2), "{}", stderr_text(&out));
        assert!(
            stderr_text(&out).contains("message 2"),
            "{}",
            stderr_text(&out)
        );
        assert_eq!(
            session_files(root.path()),
            Vec::<PathBuf>::new(),
            "{args:?}"
        );
    }
    assert!(!home.join("agents/main/sessions/sessions.json").exists());
}

#[test]
fn a_final_user_message_without_an_answer_is_reported() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut transcript = chat();
    transcript
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "are you there?"}));
    let file = write_json(root.path(), "open.json", &transcript);
    for json in [false, true] {
        let mut args = vec!["run", "--import", file.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        let out = run_pincer(&home, &args);
        assert!(out.status.success(), "{}", stderr_text(&out));
        let note = stderr_text(&out);
        assert!(
            note.contains("ends on a user message with no answer")
                && note.contains("no model call")
                && note.contains("(entry "),
            "{args:?}: {note}"
        );
        if json {
            // Stdout stays one turn report per line.
            for line in stdout_text(&out).lines() {
                let turn: Value = serde_json::from_str(line).unwrap();
                assert!(turn["turn"].is_u64(), "{line}");
            }
        }
    }
}

#[test]
fn a_held_key_is_never_pointed_at_a_new_session_without_force() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let file = write_json(root.path(), "chat.json", &chat());
    let file = file.to_str().unwrap();

    // `sessions import` twice under its default key.
    let first = run_pincer(&home, &["sessions", "import", file]);
    assert!(first.status.success(), "{}", stderr_text(&first));
    let first_id = index(&home)["import:chat"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = run_pincer(&home, &["sessions", "import", file]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr_text(&again));
    let stderr = stderr_text(&again);
    assert!(
        stderr.contains("already names session")
            && stderr.contains(&first_id)
            && stderr.contains("new key")
            && stderr.contains("--force"),
        "says what to do: {stderr}"
    );
    assert_eq!(index(&home)["import:chat"]["sessionId"], first_id.as_str());
    assert_eq!(session_files(&home).len(), 1, "nothing was written");
    let forced = run_pincer(&home, &["sessions", "import", file, "--force"]);
    assert!(forced.status.success(), "{}", stderr_text(&forced));
    assert!(
        stderr_text(&forced).contains(&format!(
            "replaced: key \"import:chat\" named session {first_id}"
        )),
        "{}",
        stderr_text(&forced)
    );
    assert_ne!(index(&home)["import:chat"]["sessionId"], first_id.as_str());
    assert_eq!(session_files(&home).len(), 2, "the old file is kept");

    // `run --import` under a held key.
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--import", file, "--session", "k"];
        args.extend_from_slice(extra);
        run_pincer(&home, &args)
    };
    let out = run(&[]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let k_id = index(&home)["k"]["sessionId"].as_str().unwrap().to_owned();
    let k_file = home.join(format!("agents/main/sessions/{k_id}.jsonl"));
    let k_bytes = std::fs::read(&k_file).unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_text(&out));
    assert!(
        stderr_text(&out).contains("already names session"),
        "{}",
        stderr_text(&out)
    );
    assert_eq!(index(&home)["k"]["sessionId"], k_id.as_str());
    assert_eq!(std::fs::read(&k_file).unwrap(), k_bytes, "unchanged");

    // A key whose file is a directory: refused without --force, replaced with it.
    std::fs::remove_file(&k_file).unwrap();
    std::fs::create_dir(&k_file).unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_text(&out));
    assert_eq!(index(&home)["k"]["sessionId"], k_id.as_str());
    let out = run(&["--force"]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert!(
        stderr_text(&out).contains(&format!("replaced: key \"k\" named session {k_id}")),
        "{}",
        stderr_text(&out)
    );
    assert_ne!(index(&home)["k"]["sessionId"], k_id.as_str());
    assert!(k_file.is_dir(), "what was replaced is left as it was");
}

#[test]
fn sessions_pincer_creates_use_one_id_for_header_index_and_file_name() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let file = write_json(root.path(), "chat.json", &chat());
    let file = file.to_str().unwrap();
    let out = run_pincer(&home, &["run", "--import", file, "--session", "ran"]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let out = run_pincer(&home, &["sessions", "import", file, "--key", "imported"]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let index = index(&home);
    for key in ["ran", "imported"] {
        let id = index[key]["sessionId"].as_str().unwrap();
        let path = home.join(format!("agents/main/sessions/{id}.jsonl"));
        assert_eq!(header_of(&path)["id"], id, "{key}");
        let out = run_pincer(&home, &["sessions", "context", id]);
        assert!(out.status.success(), "{key}: {}", stderr_text(&out));
        assert!(stdout_text(&out).contains("how are you?"));
    }
}

#[test]
fn a_builtin_compaction_that_is_not_smaller_is_reported_as_none_and_appends_nothing() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let file = write_json(root.path(), "small.json", &chat());
    let out = run_pincer(&home, &["sessions", "import", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let session = PathBuf::from(stdout_text(&out).trim());
    let before = std::fs::read(&session).unwrap();
    let out = run_pincer(&home, &["compact", "import:small", "--json"]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let report: Value = serde_json::from_str(&stdout_text(&out)).unwrap();
    assert_eq!(report["compacted"], false, "{report:#}");
    assert!(
        report["reason"].as_str().unwrap().contains("not smaller"),
        "{report:#}"
    );
    let out = run_pincer(&home, &["compact", "import:small"]);
    assert!(
        stdout_text(&out).contains("not compacted: not smaller"),
        "{}",
        stdout_text(&out)
    );
    assert_eq!(std::fs::read(&session).unwrap(), before, "nothing appended");
    assert!(index(&home)["import:small"]
        .get("compactionCount")
        .is_none());
}

/// A home whose `faulty` engine claims a compaction from 89 to 191 tokens.
fn claiming_home(root: &Path) -> PathBuf {
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("pincer.json"),
        json!({"plugins": {"entries": {"faulty": {"config": {
            "compactClaim": {"tokensBefore": 89, "tokensAfter": 191}
        }}}}})
        .to_string(),
    )
    .unwrap();
    home
}

#[test]
fn an_engine_claiming_compacted_while_its_tokens_rose_is_reported_as_not_compacted() {
    let root = tempfile::tempdir().unwrap();
    let home = claiming_home(root.path());
    let file = write_json(root.path(), "small.json", &chat());
    let out = run_pincer(&home, &["sessions", "import", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let session = PathBuf::from(stdout_text(&out).trim());
    let before = std::fs::read(&session).unwrap();
    let plugins = staged_plugins_dir();
    let out = run_pincer(
        &home,
        &[
            "compact",
            "import:small",
            "--engine",
            "faulty",
            "--plugins-dir",
            plugins.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr_text(&out));
    let report: Value = serde_json::from_str(&stdout_text(&out)).unwrap();
    assert_eq!(report["answeredBy"], "faulty", "{report:#}");
    assert_eq!(report["compacted"], false, "{report:#}");
    let reason = report["reason"].as_str().unwrap();
    assert!(
        reason.contains("89 -> 191") && reason.contains("not compacted"),
        "{reason}"
    );
    assert_eq!(std::fs::read(&session).unwrap(), before, "nothing appended");
    assert!(index(&home)["import:small"]
        .get("compactionCount")
        .is_none());

    // The gateway's `compact` (the harness) says the same.
    let socket = home.join("gw.sock");
    let mut child = std::process::Command::new(pincer_bin())
        .arg("--home")
        .arg(&home)
        .args(["serve", "--engine", "faulty", "--socket"])
        .arg(&socket)
        .arg("--plugins-dir")
        .arg(&plugins)
        .env_remove("PINCER_HOME")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(start.elapsed().as_secs() < 60, "no gateway");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (status, answer) = pincer_host::gateway::client::call(
        &socket,
        &pincer_host::gateway::CallRequest {
            method: "compact".into(),
            session: Some("import:small".into()),
            params: None,
        },
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["compacted"], false, "{answer}");
    assert!(
        answer["result"]["detail"]
            .as_str()
            .unwrap()
            .contains("89 -> 191"),
        "{answer}"
    );
    assert!(index(&home)["import:small"]
        .get("compactionCount")
        .is_none());
}
