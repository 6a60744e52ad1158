//! OpenClaw's session files, read by pincer and compared with what OpenClaw 2026.9.6's own code
//! made of them (`shared/data/openclaw-golden/`): for every case, `buildSessionContext` of the
//! active leaf and of every other tip, the LLM projection, the active leaf, and the count of
//! damaged lines. Skipped with a notice without the data (a failure under CI).

use std::path::{Path, PathBuf};

use pincer_host::session::{build_session_context, convert_to_llm, SessionTree};
use serde_json::Value;

fn golden_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/openclaw-golden");
    if dir.join("index.json").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but the golden data is missing at {}",
        dir.display()
    );
    eprintln!("notice: skipping: {} not found", dir.display());
    None
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
}

#[test]
fn every_golden_session_gives_openclaws_context_and_llm_projection() {
    let Some(dir) = golden_dir() else { return };
    let index = read(&dir.join("index.json"));
    let mut cases = 0;
    let mut other_tips = 0;
    for file in index["files"].as_array().expect("files") {
        let name = file["name"].as_str().expect("name");
        let tree = SessionTree::read(&dir.join(format!("{name}.jsonl"))).expect("readable");
        let meta = read(&dir.join(format!("{name}.meta.json")));

        let context = build_session_context(&tree, None);
        let expected = read(&dir.join(format!("{name}.context.json")));
        let got = serde_json::to_value(&context).expect("serializes");
        for key in ["thinkingLevel", "model"] {
            assert_eq!(got[key], expected[key], "{name}: {key}");
        }
        let (got_messages, want) = (
            got["messages"].as_array().unwrap(),
            expected["messages"].as_array().unwrap(),
        );
        assert_eq!(got_messages.len(), want.len(), "{name}: message count");
        for (i, (g, w)) in got_messages.iter().zip(want).enumerate() {
            assert_eq!(g, w, "{name}: context message {i}");
        }

        let llm = convert_to_llm(&context.messages);
        let want_llm = read(&dir.join(format!("{name}.llm.json")));
        let want_llm = want_llm.as_array().expect("an array");
        assert_eq!(llm.len(), want_llm.len(), "{name}: llm message count");
        for (i, (g, w)) in llm.iter().zip(want_llm).enumerate() {
            assert_eq!(g, w, "{name}: llm message {i}");
        }

        if meta["migrated"] != Value::Bool(true) {
            assert_eq!(
                tree.leaf.as_deref(),
                meta["leafId"].as_str(),
                "{name}: leaf"
            );
        }
        let skipped = meta["parseLog"]
            .as_array()
            .and_then(|log| log.first())
            .and_then(Value::as_str)
            .and_then(|line| line.split("skipped ").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .map_or(0, |n| n.parse::<usize>().unwrap());
        assert_eq!(tree.skipped_lines, skipped, "{name}: skipped lines");

        for (tip, expected) in meta["otherLeafContexts"].as_object().expect("other tips") {
            let context = serde_json::to_value(build_session_context(&tree, Some(tip))).unwrap();
            assert_eq!(
                &context["messages"], &expected["messages"],
                "{name}: tip {tip}"
            );
            other_tips += 1;
        }
        cases += 1;
    }
    assert_eq!(cases, 9, "every golden case");
    assert!(other_tips >= 2, "{other_tips} other tips checked");
}

#[test]
fn pincer_sessions_context_prints_openclaws_objects() {
    let Some(dir) = golden_dir() else { return };
    let home = tempfile::TempDir::new().unwrap();
    let index = read(&dir.join("index.json"));
    for file in index["files"].as_array().expect("files") {
        let name = file["name"].as_str().expect("name");
        let session = dir.join(format!("{name}.jsonl")).display().to_string();
        for (format, expected) in [
            ("openclaw", format!("{name}.context.json")),
            ("llm", format!("{name}.llm.json")),
        ] {
            let out = pincer_tests::run_pincer(
                home.path(),
                &[
                    "sessions", "context", &session, "--format", format, "--json",
                ],
            );
            assert_eq!(
                out.status.code(),
                Some(0),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
            assert_eq!(
                printed,
                read(&dir.join(&expected)),
                "{name} --format {format}"
            );
        }
    }
    // A directory, or an entry the file does not have: a clear error, exit 2.
    let out =
        pincer_tests::run_pincer(home.path(), &["sessions", "context", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
    let session = dir.join("02-branch.jsonl").display().to_string();
    let out = pincer_tests::run_pincer(
        home.path(),
        &["sessions", "context", &session, "--leaf", "nope"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no entry \"nope\""));
}

#[test]
fn pincer_assemble_reads_a_session_file_as_its_active_context() {
    let Some(dir) = golden_dir() else { return };
    let home = tempfile::TempDir::new().unwrap();
    let session = dir.join("07-compaction.jsonl").display().to_string();
    let out = pincer_tests::run_pincer(
        home.path(),
        &["assemble", "--json", "--conversation", &session],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kept: Vec<&Value> = printed["keptMessages"]
        .as_array()
        .expect("keptMessages")
        .iter()
        .map(|k| &k["message"])
        .collect();
    let expected = read(&dir.join("07-compaction.context.json"));
    let expected: Vec<&Value> = expected["messages"].as_array().unwrap().iter().collect();
    assert_eq!(
        kept, expected,
        "legacy passes the session's context through unchanged"
    );
    assert_eq!(kept[0]["role"], "compactionSummary");
}

#[test]
fn a_session_context_carries_its_entry_ids_beside_the_messages() {
    let Some(dir) = golden_dir() else { return };
    let tree = SessionTree::read(&dir.join("02-branch.jsonl")).unwrap();
    let transcript = pincer_host::session::Transcript::from_session(&tree);
    let ids = transcript.entry_ids();
    assert_eq!(ids.len(), transcript.messages().len());
    let path: Vec<&str> = tree.path(None).iter().map(|e| e.id()).collect();
    for (id, message) in ids.iter().zip(transcript.messages()) {
        let id = id.as_str().expect("every context message has an entry");
        assert!(path.contains(&id), "{id} lies on the active path");
        // The id is beside the message, never inside its JSON.
        assert!(!message.to_value().to_string().contains(id));
    }
}

#[test]
fn pincer_estimate_prints_openclaws_figures_for_a_session_and_its_messages() {
    let Some(dir) = golden_dir() else { return };
    let home = tempfile::TempDir::new().unwrap();
    let golden = read(&dir.join("estimate-tokens.json"));
    let task = &golden["tauTask0"];
    // The same conversation as a message array and as the session file it was stored in.
    for file in ["01-linear-tau.context.json", "01-linear-tau.jsonl"] {
        let path = dir.join(file).display().to_string();
        let out = pincer_tests::run_pincer(home.path(), &["estimate", &path, "--json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(printed["perMessage"], task["perMessage"], "{file}");
        assert_eq!(printed["sum"], task["sum"], "{file}");
        assert_eq!(
            printed["estimateContextTokens"], task["estimateContextTokens"],
            "{file}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

use pincer_host::session::{Durability, SessionWriteError, SessionWriter};

/// Replays every entry of a golden session through the writer (same tree shape, same fields,
/// fresh ids) and returns the written file's tree.
fn replay(golden: &SessionTree, path: &Path) -> SessionTree {
    use pincer_host::session::EntryKind;
    let mut writer = SessionWriter::create(path, "/srv/agent", Durability::None).unwrap();
    let mut ids: std::collections::HashMap<String, String> = Default::default();
    let map = |ids: &std::collections::HashMap<String, String>, v: Option<&Value>| {
        v.and_then(Value::as_str)
            .map(|id| ids.get(id).cloned().unwrap_or_else(|| id.to_owned()))
    };
    for entry in &golden.entries {
        if let Some(parent) = entry.parent_id() {
            writer.branch(&ids[parent]).unwrap();
        }
        let raw = &entry.record();
        let new_id = match &entry.kind() {
            EntryKind::Message(message) => writer.append_message(message),
            EntryKind::Compaction {
                summary,
                tokens_before,
                ..
            } => writer.append_compaction(
                summary,
                &map(&ids, raw.get("firstKeptEntryId")).unwrap(),
                tokens_before.as_u64().unwrap(),
                raw.get("details").cloned(),
            ),
            EntryKind::Reset { .. } => writer.append_reset(
                raw["reason"].as_str().unwrap(),
                map(&ids, raw.get("firstKeptEntryId")).as_deref(),
            ),
            EntryKind::BranchSummary { summary, .. } => {
                let from = map(&ids, raw.get("fromId")).filter(|f| f != "root");
                writer.branch_with_summary(from.as_deref(), summary, raw.get("details").cloned())
            }
            EntryKind::CustomMessage => writer.append_custom_message(
                raw["customType"].as_str().unwrap(),
                raw["content"].clone(),
                raw["display"].as_bool().unwrap(),
                raw.get("details").cloned(),
            ),
            EntryKind::ThinkingLevelChange(level) => writer.append_thinking_level_change(level),
            EntryKind::ModelChange { provider, model_id } => {
                writer.append_model_change(provider, model_id)
            }
            EntryKind::Other => match raw["type"].as_str().unwrap() {
                "custom" => writer.append_custom(
                    raw["customType"].as_str().unwrap(),
                    raw.get("data").cloned(),
                ),
                "label" => writer.append_label(
                    &map(&ids, raw.get("targetId")).unwrap(),
                    raw.get("label").and_then(Value::as_str),
                ),
                "session_info" => writer.append_session_info(raw["name"].as_str().unwrap()),
                other => panic!("unexpected entry type {other}"),
            },
        }
        .unwrap();
        ids.insert(entry.id().to_owned(), new_id);
    }
    if let Some(leaf) = &golden.leaf {
        writer.branch(&ids[leaf]).unwrap();
    }
    drop(writer); // saves: a leaf record when the leaf is not the last entry
    SessionTree::read(path).unwrap()
}

/// A context's messages without the timestamps OpenClaw derives from entry times (which are
/// the time of writing).
fn without_entry_times(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if matches!(
                m["role"].as_str(),
                Some("compactionSummary" | "branchSummary" | "custom")
            ) && m.get("customType") != Some(&Value::from("hook"))
            {
                m.as_object_mut().unwrap().remove("timestamp");
            }
            // A branch summary names the entry branched back to: a fresh id when rewritten.
            if m["role"] == "branchSummary" {
                m.as_object_mut().unwrap().remove("fromId");
            }
            m
        })
        .collect()
}

#[test]
fn written_sessions_read_back_to_openclaws_contexts() {
    let Some(dir) = golden_dir() else { return };
    let tmp = tempfile::TempDir::new().unwrap();
    for name in [
        "01-linear-tau",
        "02-branch",
        "03-branch-with-summary",
        "07-compaction",
        "11-reset",
        "14-custom-entries",
    ] {
        let golden = SessionTree::read(&dir.join(format!("{name}.jsonl"))).unwrap();
        let written = replay(&golden, &tmp.path().join(format!("{name}.jsonl")));
        assert_eq!(
            written.skipped_lines, 0,
            "{name}: every line written parses"
        );
        assert!(
            written.opaque.is_empty(),
            "{name}: every record written is an entry"
        );
        assert_eq!(written.header.as_ref().unwrap()["version"], 4);
        let got = serde_json::to_value(build_session_context(&written, None)).unwrap();
        let want = read(&dir.join(format!("{name}.context.json")));
        assert_eq!(
            without_entry_times(&got["messages"]),
            without_entry_times(&want["messages"]),
            "{name}"
        );
        assert_eq!(got["thinkingLevel"], want["thinkingLevel"], "{name}");
        assert_eq!(got["model"], want["model"], "{name}");
        // Full UUIDs, one JSON object per line.
        for entry in &written.entries {
            assert_eq!(entry.id().len(), 36, "{name}: {}", entry.id());
        }
    }
}

/// The plain texts of the active context of the session at `path`.
fn context_texts(path: &Path) -> Vec<String> {
    let tree = SessionTree::read(path).unwrap();
    build_session_context(&tree, None)
        .messages
        .iter()
        .map(|m| m.plain_text())
        .collect()
}

#[test]
fn a_branch_without_an_append_is_saved_as_a_leaf_record() {
    let tmp = tempfile::TempDir::new().unwrap();
    let path = tmp.path().join("s.jsonl");
    let mut writer = SessionWriter::create(&path, "/tmp", Durability::Entry).unwrap();
    let first = writer
        .append_message(&pincer_plugin_api::Message::user("one"))
        .unwrap();
    writer
        .append_message(&pincer_plugin_api::Message::assistant("two"))
        .unwrap();
    writer.branch(&first).unwrap();
    drop(writer);
    let text = std::fs::read_to_string(&path).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "leaf");
    assert_eq!(last["targetId"], first.as_str());
    let tree = SessionTree::read(&path).unwrap();
    assert_eq!(tree.leaf.as_deref(), Some(first.as_str()));
    assert_eq!(build_session_context(&tree, None).messages.len(), 1);
    // Continuing the session appends to the branch.
    let mut writer = SessionWriter::open(&path, Durability::Entry).unwrap();
    writer
        .append_message(&pincer_plugin_api::Message::assistant("two, again"))
        .unwrap();
    drop(writer);
    let texts = context_texts(&path);
    assert_eq!(texts, ["one", "two, again"]);
}

#[test]
fn one_writer_at_a_time_and_no_append_to_a_future_version() {
    let tmp = tempfile::TempDir::new().unwrap();
    let path = tmp.path().join("s.jsonl");
    let writer = SessionWriter::create(&path, "/tmp", Durability::Entry).unwrap();
    let second = SessionWriter::open(&path, Durability::Entry).unwrap_err();
    assert!(
        matches!(second, SessionWriteError::Locked { .. }),
        "{second}"
    );
    assert_eq!(second.code(), "session_locked");
    drop(writer);
    assert!(
        SessionWriter::open(&path, Durability::Entry).is_ok(),
        "free once closed"
    );

    let future = tmp.path().join("future.jsonl");
    let text = "{\"type\":\"session\",\"version\":9,\"id\":\"f\"}\n{\"type\":\"message\",\"id\":\"a\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
    std::fs::write(&future, text).unwrap();
    let err = SessionWriter::open(&future, Durability::Entry).unwrap_err();
    assert!(
        matches!(err, SessionWriteError::FutureVersion { version: 9, .. }),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&future).unwrap(),
        text,
        "nothing written"
    );
    // Still read for what is understood.
    assert_eq!(
        build_session_context(&SessionTree::read(&future).unwrap(), None)
            .messages
            .len(),
        1
    );
}

/// The files of `dir` whose names start with `prefix`.
fn files_starting_with(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect()
}

#[test]
fn a_headerless_or_legacy_file_is_kept_beside_before_the_first_append() {
    let Some(dir) = golden_dir() else { return };
    let tmp = tempfile::TempDir::new().unwrap();
    // Version 1: migrated in memory with fresh ids, so it is written out once as version 4.
    let legacy = tmp.path().join("legacy.jsonl");
    std::fs::copy(dir.join("21-legacy-v1-migrated.jsonl"), &legacy).unwrap();
    let original = std::fs::read(&legacy).unwrap();
    let before = serde_json::to_value(build_session_context(
        &SessionTree::read(&legacy).unwrap(),
        None,
    ))
    .unwrap();
    let mut writer = SessionWriter::open(&legacy, Durability::Entry).unwrap();
    writer
        .append_message(&pincer_plugin_api::Message::user("continued"))
        .unwrap();
    drop(writer);
    let aside = files_starting_with(tmp.path(), "legacy.v1-");
    assert_eq!(aside.len(), 1, "the original is kept beside: {aside:?}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), original, "unchanged");
    let tree = SessionTree::read(&legacy).unwrap();
    assert_eq!(tree.header.as_ref().unwrap()["version"], 4);
    let after = serde_json::to_value(build_session_context(&tree, None)).unwrap();
    let mut expected = before["messages"].as_array().unwrap().clone();
    expected.push(serde_json::json!({"role": "user", "content": "continued"}));
    assert_eq!(after["messages"].as_array().unwrap(), &expected);

    // No header at all: backed up as <f>.corrupt-…, then written with one.
    let headless = tmp.path().join("headless.jsonl");
    let text = "{\"type\":\"message\",\"id\":\"a\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
    std::fs::write(&headless, text).unwrap();
    let mut writer = SessionWriter::open(&headless, Durability::Entry).unwrap();
    writer
        .append_message(&pincer_plugin_api::Message::assistant("hello"))
        .unwrap();
    drop(writer);
    let backups = files_starting_with(tmp.path(), "headless.corrupt-");
    assert_eq!(backups.len(), 1);
    assert_eq!(std::fs::read_to_string(&backups[0]).unwrap(), text);
    assert!(SessionTree::read(&headless).unwrap().header.is_some());
    assert_eq!(context_texts(&headless), ["hi", "hello"]);
}

#[test]
fn a_writer_killed_mid_append_loses_no_acknowledged_entry() {
    use std::io::BufRead as _;
    let tmp = tempfile::TempDir::new().unwrap();
    let path = tmp.path().join("crash.jsonl");
    let mut acknowledged: Vec<String> = Vec::new();
    for round in 0..8 {
        if round == 4 {
            // As a crash in the middle of a write leaves it: half a line, no newline.
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            file.write_all(b"{\"type\":\"message\",\"id\":\"torn")
                .unwrap();
        }
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_session-appender"))
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the helper starts");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // Let it acknowledge a few entries, then kill it wherever it is (SIGKILL: no drop, no
        // flush, possibly mid-line).
        for _ in 0..(5 + round * 3) {
            acknowledged.push(lines.next().expect("an ack").expect("utf-8"));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Anything acknowledged after our last read still counts.
        acknowledged.extend(lines.map_while(Result::ok));

        let tree = SessionTree::read(&path).expect("the file always loads");
        assert!(tree.header.is_some(), "round {round}: the header survives");
        assert!(
            tree.skipped_lines <= 1 + usize::from(round >= 4),
            "round {round}: only torn lines are dropped"
        );
        for id in &acknowledged {
            assert!(
                tree.get(id).is_some(),
                "round {round}: acknowledged entry {id} is lost"
            );
        }
    }
    assert!(acknowledged.len() >= 5 * 8);
}

// ---------------------------------------------------------------------------------------------
// OpenAI import and export
// ---------------------------------------------------------------------------------------------

/// `transcript` with every tool call's `arguments` parsed, for comparing JSON values.
fn arguments_parsed(transcript: &[Value]) -> Vec<Value> {
    transcript
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for call in calls {
                    let args = &mut call["function"]["arguments"];
                    if let Some(text) = args.as_str() {
                        *args = serde_json::from_str(text).unwrap();
                    }
                }
            }
            m
        })
        .collect()
}

#[test]
fn every_tau_bench_transcript_imports_exports_and_reimports_unchanged() {
    use pincer_host::session::{export_openai, import_openai};
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let tmp = tempfile::TempDir::new().unwrap();
    let mut count = 0;
    for (i, task) in tasks.as_array().unwrap().iter().enumerate() {
        let traj = task["traj"].as_array().unwrap();
        let path = tmp.path().join(format!("{i}.jsonl"));
        drop(import_openai(traj, &path, "/srv/agent", Durability::None).unwrap());
        let tree = SessionTree::read(&path).unwrap();
        let exported = export_openai(&tree);
        assert_eq!(
            arguments_parsed(&exported),
            arguments_parsed(traj),
            "task {i}"
        );
        // The system prompt is in the session, not in the context.
        let context = build_session_context(&tree, None);
        assert!(
            context.messages.iter().all(|m| m.role_name() != "system"),
            "task {i}"
        );
        assert_eq!(context.messages.len(), traj.len() - 1, "task {i}");
        // Re-import of the export gives the same session context.
        let again = tmp.path().join(format!("{i}-again.jsonl"));
        drop(import_openai(&exported, &again, "/srv/agent", Durability::None).unwrap());
        let again = build_session_context(&SessionTree::read(&again).unwrap(), None);
        assert_eq!(again.messages, context.messages, "task {i}");
        count += 1;
    }
    assert_eq!(count, 150);
}

#[test]
fn pincer_sessions_import_and_export_through_the_binary() {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let home = tempfile::TempDir::new().unwrap();
    let task = home.path().join("task.json");
    std::fs::write(&task, tasks[0].to_string()).unwrap();
    let out =
        pincer_tests::run_pincer(home.path(), &["sessions", "import", task.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(
        session.starts_with(
            &home
                .path()
                .join("agents/main/sessions")
                .display()
                .to_string()
        ),
        "{session}"
    );
    let out = pincer_tests::run_pincer(
        home.path(),
        &["sessions", "export", &session, "--format", "openai"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exported: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        arguments_parsed(&exported),
        arguments_parsed(tasks[0]["traj"].as_array().unwrap())
    );
    let out = pincer_tests::run_pincer(
        home.path(),
        &["sessions", "export", &session, "--format", "jsonl"],
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        std::fs::read_to_string(&session).unwrap()
    );
}

#[test]
fn sessions_are_listed_and_named_by_path_key_or_id() {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let home = tempfile::TempDir::new().unwrap();
    let run = |args: &[&str]| pincer_tests::run_pincer(home.path(), args);
    let out = run(&["sessions", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        serde_json::json!([])
    );

    let task = home.path().join("task0.json");
    std::fs::write(&task, tasks[0].to_string()).unwrap();
    let out = run(&["sessions", "import", task.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let listed: Value =
        serde_json::from_slice(&run(&["sessions", "list", "--json"]).stdout).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["sessionKey"], "import:task0");
    assert_eq!(listed[0]["sessionFile"], file.as_str());
    let id = listed[0]["sessionId"].as_str().unwrap().to_owned();
    // The index is plain JSON, written whole.
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("agents/main/sessions/sessions.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(index["import:task0"]["sessionId"], id.as_str());

    // One argument names a session: its path, its key, or its id; all give the same context.
    let contexts: Vec<Value> = [file.as_str(), "import:task0", id.as_str()]
        .iter()
        .map(|reference| {
            let out = run(&["sessions", "context", reference]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{reference}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    assert_eq!(contexts[0], contexts[1]);
    assert_eq!(contexts[0], contexts[2]);
    assert_eq!(
        contexts[0]["messages"].as_array().unwrap().len(),
        tasks[0]["traj"].as_array().unwrap().len() - 1
    );

    let show: Value =
        serde_json::from_slice(&run(&["sessions", "show", "import:task0"]).stdout).unwrap();
    assert_eq!(show["header"]["version"], 4);
    assert_eq!(show["skippedLines"], 0);
    let tree = String::from_utf8(run(&["sessions", "tree", &id]).stdout).unwrap();
    assert_eq!(
        tree.lines().count(),
        tasks[0]["traj"].as_array().unwrap().len(),
        "one line per entry"
    );
    assert!(
        tree.lines().all(|l| l.starts_with('*')),
        "a linear session is all active path"
    );

    let out = run(&["sessions", "context", "no-such-session"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("no session \"no-such-session\" for agent \"main\""));
}

/// `sessions.durability` in `pincer.json` picks how session files are synced; a value that is
/// not one of the three is refused with the allowed values, before anything is written.
#[test]
fn sessions_durability_is_read_from_the_config_and_a_bad_value_is_refused() {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let home = tempfile::TempDir::new().unwrap();
    let traj = home.path().join("traj.json");
    std::fs::write(&traj, tasks[0]["traj"].to_string()).unwrap();
    let traj = traj.to_str().unwrap();
    for durability in ["entry", "turn", "none"] {
        std::fs::write(
            home.path().join("pincer.json"),
            format!(r#"{{ sessions: {{ durability: "{durability}" }} }}"#),
        )
        .unwrap();
        let key = format!("import:{durability}");
        let out =
            pincer_tests::run_pincer(home.path(), &["sessions", "import", traj, "--key", &key]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(
        home.path().join("pincer.json"),
        r#"{ sessions: { durability: "sometimes" } }"#,
    )
    .unwrap();
    let before = pincer_tests::run_pincer(home.path(), &["sessions", "list", "--json"]);
    let out = pincer_tests::run_pincer(home.path(), &["sessions", "import", traj, "--key", "bad"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sometimes") && stderr.contains("entry") && stderr.contains("turn"),
        "names the bad value and the allowed ones: {stderr}"
    );
    let after = pincer_tests::run_pincer(home.path(), &["sessions", "list", "--json"]);
    assert_eq!(before.stdout, after.stdout, "nothing was imported");
}

#[test]
fn concurrent_index_updates_all_land() {
    use pincer_host::session::{AgentId, JsonlStore, OnExisting, SessionStore};
    let home = tempfile::TempDir::new().unwrap();
    let store = JsonlStore::new(home.path().join("agents"));
    std::thread::scope(|scope| {
        for t in 0..8 {
            let store = &store;
            scope.spawn(move || {
                for i in 0..10 {
                    let key = format!("key-{t}-{i}").parse().unwrap();
                    let created = store
                        .create(&key, "/tmp", Durability::None, OnExisting::Refuse)
                        .unwrap();
                    drop(created.writer);
                }
            });
        }
    });
    let listed = store.list(&AgentId::main()).unwrap();
    assert_eq!(
        listed.iter().filter(|s| s.session_key.is_some()).count(),
        80,
        "no update lost"
    );
    assert_eq!(listed.len(), 80, "every file is indexed");
}

/// `sessions.json` keeps OpenClaw's counters per session key: concurrent updates (as from a CLI
/// beside a gateway) all land, fields pincer does not know survive, and `sessions list --json`
/// shows the counters.
#[test]
fn index_counters_add_up_under_concurrent_updates_and_keep_openclaws_fields() {
    use pincer_host::session::{
        AgentId, CounterUpdate, JsonlStore, OnExisting, SessionKey, SessionStore,
    };
    let home = tempfile::TempDir::new().unwrap();
    let store = JsonlStore::new(home.path().join("agents"));
    let key = "agent:main:main";
    let session_key: SessionKey = key.parse().unwrap();
    let created = store
        .create(&session_key, "/tmp", Durability::None, OnExisting::Refuse)
        .unwrap();
    let summary = created.summary;
    drop(created.writer);
    // Fields OpenClaw writes and pincer does not model, and a count OpenClaw left.
    let index_path = store.sessions_dir(&AgentId::main()).join("sessions.json");
    let mut index: Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    index[key]["chatType"] = "direct".into();
    index[key]["thinkingLevel"] = "high".into();
    index[key]["compactionCount"] = 2.into();
    std::fs::write(&index_path, serde_json::to_string_pretty(&index).unwrap()).unwrap();

    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..10 {
                    store
                        .record(&session_key, CounterUpdate::Compaction)
                        .unwrap();
                }
            });
        }
    });
    let counters = store
        .record(
            &session_key,
            CounterUpdate::Usage {
                input: 1200,
                output: 80,
                total: 1280,
                context: 1150,
            },
        )
        .unwrap();
    assert_eq!(counters.compaction_count, Some(82), "no update lost");

    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let entry = &index[key];
    assert_eq!(entry["sessionId"], summary.session_id.as_str());
    assert_eq!(entry["compactionCount"], 82);
    assert_eq!(entry["inputTokens"], 1200);
    assert_eq!(entry["outputTokens"], 80);
    assert_eq!(entry["totalTokens"], 1280);
    assert_eq!(entry["contextTokens"], 1150);
    assert_eq!(entry["chatType"], "direct", "OpenClaw's fields are kept");
    assert_eq!(entry["thinkingLevel"], "high");

    let listed = pincer_tests::run_pincer(home.path(), &["sessions", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["sessionKey"], key);
    assert_eq!(listed[0]["compactionCount"], 82);
    assert_eq!(listed[0]["contextTokens"], 1150);

    // The key given a new session (`/new`): its settings stay, its counters start again.
    let created = store
        .create(&session_key, "/tmp", Durability::None, OnExisting::Replace)
        .unwrap();
    drop(created.writer);
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    assert_ne!(index[key]["sessionId"], summary.session_id.as_str());
    assert_eq!(index[key]["chatType"], "direct");
    assert!(index[key].get("compactionCount").is_none());

    let err = store
        .record(
            &"agent:main:other".parse().unwrap(),
            CounterUpdate::Compaction,
        )
        .unwrap_err();
    assert_eq!(err.code(), "session_not_found");
}

/// With durability `turn`, appenders sharing a session write without syncing, and the turn's
/// commit syncs once for all of them.
#[test]
fn shared_turn_durability_syncs_once_at_commit() {
    use pincer_host::session::SharedSessionWriter;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turn.jsonl");
    let writer = SessionWriter::create(&path, "/tmp", Durability::Turn).unwrap();
    let shared = SharedSessionWriter::new(writer).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let shared = &shared;
            scope.spawn(move || {
                for i in 0..25 {
                    let message = pincer_plugin_api::abi::latest::Message::user(format!("{t}/{i}"));
                    shared.append_message(&message).unwrap();
                }
            });
        }
    });
    assert_eq!(shared.syncs(), 0, "no sync before the turn ends");
    assert_eq!(
        SessionTree::read(&path).unwrap().entries.len(),
        100,
        "all written"
    );
    shared.commit().unwrap();
    assert_eq!(shared.syncs(), 1, "one sync for the turn");
    drop(shared.into_inner().unwrap());
}

/// Eight async tasks on a two-thread runtime (as a gateway's connections) append to one session
/// through group commit: each append is staged when called, so every task's entries keep its
/// order; every acknowledged entry is in the file; fsyncs are shared; an append whose future is
/// dropped unawaited is still written when the writer closes.
#[test]
fn async_appenders_share_fsyncs_keep_their_order_and_lose_nothing() {
    use pincer_host::session::SharedSessionWriter;
    use pincer_plugin_api::abi::latest::Message;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("async.jsonl");
    let writer = SessionWriter::create(&path, "/tmp", Durability::Entry).unwrap();
    let shared = std::sync::Arc::new(SharedSessionWriter::new(writer).unwrap());
    let (tasks, each) = (8, 50);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let acknowledged: Vec<Vec<String>> = runtime.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for i in 0..each {
                        let message = Message::user(format!("task {t} message {i}"));
                        ids.push(shared.append_message_async(&message).await.unwrap());
                    }
                    ids
                })
            })
            .collect();
        let mut all = Vec::new();
        for handle in handles {
            all.push(handle.await.unwrap());
        }
        all
    });
    let syncs = shared.syncs();
    assert!(
        syncs < (tasks * each) as u64,
        "{syncs} fsyncs for {} appends: none shared",
        tasks * each
    );
    // Staged on the call, not on the first poll: dropped unawaited, still written.
    drop(shared.append_message_async(&Message::user("never awaited")));
    let shared = std::sync::Arc::into_inner(shared).unwrap();
    drop(shared.into_inner().unwrap());

    let tree = SessionTree::read(&path).unwrap();
    assert_eq!(tree.skipped_lines, 0);
    let chain: Vec<&str> = tree.path(None).iter().map(|e| e.id()).collect();
    assert_eq!(chain.len(), tasks * each + 1, "one chain holds every entry");
    let position: std::collections::HashMap<&str, usize> =
        chain.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    for ids in &acknowledged {
        let places: Vec<usize> = ids
            .iter()
            .map(|id| {
                *position
                    .get(id.as_str())
                    .expect("an acknowledged entry is missing")
            })
            .collect();
        assert!(
            places.windows(2).all(|w| w[0] < w[1]),
            "a task's entries keep its order"
        );
    }
    let last = build_session_context(&tree, None)
        .messages
        .last()
        .unwrap()
        .plain_text();
    assert_eq!(last, "never awaited");
}

/// Eight threads appending to one session share fsyncs (group commit): every acknowledged entry
/// is in the file, in one parent chain, and fewer fsyncs than appends were needed.
#[test]
fn concurrent_appenders_share_fsyncs_and_lose_nothing() {
    use pincer_host::session::SharedSessionWriter;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.jsonl");
    let writer = SessionWriter::create(&path, "/tmp", Durability::Entry).unwrap();
    let shared = SharedSessionWriter::new(writer).unwrap();
    let (threads, each) = (8, 50);
    let acknowledged: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let shared = &shared;
                scope.spawn(move || {
                    (0..each)
                        .map(|i| {
                            let message = pincer_plugin_api::abi::latest::Message::user(format!(
                                "thread {t} message {i}"
                            ));
                            shared.append_message(&message).unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let syncs = shared.syncs();
    shared.commit().unwrap();
    drop(shared.into_inner().unwrap());
    assert!(
        syncs < (threads * each) as u64,
        "{syncs} fsyncs for {} appends: none shared",
        threads * each
    );
    let tree = SessionTree::read(&path).unwrap();
    assert_eq!(tree.skipped_lines, 0);
    let on_path: std::collections::HashSet<&str> = tree.path(None).iter().map(|e| e.id()).collect();
    assert_eq!(on_path.len(), threads * each, "one chain holds every entry");
    for id in &acknowledged {
        assert!(
            on_path.contains(id.as_str()),
            "acknowledged {id} is missing"
        );
    }
}
