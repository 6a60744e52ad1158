//! OpenClaw's own messages through the ABI types: every message in the golden data (output of
//! OpenClaw 2026.9.6's code) and every τ-bench message converted with the golden README's
//! mapping reads into a [`Message`] and writes back to an equal JSON value — unknown keys and
//! block types included — and the mapping gives exactly the messages OpenClaw's code stored.
//!
//! The data lives in `../shared/data/` beside the repository. Without it these tests print a
//! notice and pass, except under CI, where its absence is a failure.

use std::path::{Path, PathBuf};

use pincer_plugin_api::interop::openai_chat_to_openclaw;
use pincer_plugin_api::testing::{Conversation, TestEngine, TestHost};
use pincer_plugin_api::Message;
use serde_json::Value;

fn data_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data");
    if dir.join("openclaw-golden/index.json").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but the shared data is missing at {}",
        dir.display()
    );
    eprintln!(
        "notice: skipping: shared data not found at {}",
        dir.display()
    );
    None
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
}

/// Reads `value` as a message and writes it back; panics with the difference.
fn assert_round_trips(label: &str, value: &Value) -> Message {
    let message = Message::from_value(value.clone())
        .unwrap_or_else(|err| panic!("{label}: not read as a message: {err}"));
    let back = message.to_value();
    assert_eq!(&back, value, "{label}: the message changed in a round trip");
    // And through JSON text, as a session file stores it.
    let text = serde_json::to_string(&message).expect("serializes");
    let again: Message = serde_json::from_str(&text).expect("reads back");
    assert_eq!(again, message, "{label}: text round trip");
    message
}

fn golden_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("openclaw-golden"))
        .expect("golden dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

#[test]
fn every_golden_message_round_trips() {
    let Some(dir) = data_dir() else { return };
    let mut count = 0;
    let mut roles = std::collections::BTreeSet::new();
    for suffix in [".context.json", ".llm.json"] {
        for file in golden_files(&dir, suffix) {
            let value = read(&file);
            let messages = value
                .get("messages")
                .and_then(Value::as_array)
                .or_else(|| value.as_array())
                .unwrap_or_else(|| panic!("{}: no messages", file.display()));
            for (i, message) in messages.iter().enumerate() {
                let m = assert_round_trips(&format!("{}#{i}", file.display()), message);
                roles.insert(m.role_name().to_owned());
                count += 1;
            }
        }
    }
    // Messages stored in the session files themselves (entries of type `message`), including
    // the legacy `hookMessage` role, which a message reader must keep as it is.
    for file in golden_files(&dir, ".jsonl") {
        let text = std::fs::read_to_string(&file).expect("read");
        for (line_no, line) in text.lines().enumerate() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue; // the damaged cases' broken lines
            };
            if let Some(message) = entry.get("message") {
                assert_round_trips(&format!("{}:{}", file.display(), line_no + 1), message);
                count += 1;
            }
        }
    }
    // The estimate cases: images, thinking, unknown block types, bashExecution, summaries,
    // excluded messages, an unknown role.
    let estimates = read(&dir.join("openclaw-golden/estimate-tokens.json"));
    for (name, case) in estimates["messages"].as_object().expect("messages") {
        let m = assert_round_trips(&format!("estimate-tokens {name}"), &case["message"]);
        roles.insert(m.role_name().to_owned());
        count += 1;
    }
    assert!(count > 300, "only {count} messages found");
    for role in [
        "user",
        "assistant",
        "toolResult",
        "custom",
        "compactionSummary",
        "branchSummary",
        "bashExecution",
    ] {
        assert!(
            roles.contains(role),
            "no {role} message in the golden data: {roles:?}"
        );
    }
}

#[test]
fn every_tau_bench_message_round_trips_and_maps_as_openclaw_stored_it() {
    let Some(dir) = data_dir() else { return };
    let tasks = read(&dir.join("tau-bench-airline/gpt-4o-airline.shared.json"));
    let mut count = 0;
    for task in tasks.as_array().expect("tasks") {
        let traj = task["traj"].as_array().expect("traj");
        for (index, raw) in traj.iter().enumerate() {
            if let Some(value) = openai_chat_to_openclaw(raw, index) {
                assert_round_trips(&format!("task {} message {index}", task["task_id"]), &value);
                count += 1;
            }
        }
    }
    assert!(count > 1000, "only {count} τ-bench messages");

    // Differential: golden case 01 is task 0's 31 non-system messages as OpenClaw stored them.
    let task0 = &tasks[0]["traj"];
    let converted: Vec<Value> = task0
        .as_array()
        .expect("traj")
        .iter()
        .enumerate()
        .filter_map(|(i, m)| openai_chat_to_openclaw(m, i))
        .collect();
    let golden = read(&dir.join("openclaw-golden/01-linear-tau.context.json"));
    assert_eq!(
        &Value::Array(converted),
        &golden["messages"],
        "the OpenAI mapping differs from the messages OpenClaw stored"
    );
}

#[test]
fn golden_messages_cross_an_engine_boundary_unchanged() {
    let Some(dir) = data_dir() else { return };
    use pincer_plugin_api::prelude::*;

    /// Keeps everything and adds a copy of the last message as a new one.
    struct Echo;
    impl Engine for Echo {
        const ID: &'static str = "echo";
        fn create(_: FactoryContext<'_>, _: Host) -> Result<Self, EngineError> {
            Ok(Echo)
        }
        fn info(&self) -> Result<EngineInfo, EngineError> {
            Ok(EngineInfo::new("Echo", "0.1.0"))
        }
        fn ingest(&self, _: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
            Ok(IngestResult { ingested: false })
        }
        fn assemble(&self, p: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
            let mut context = ContextBuilder::new();
            context.keep_range(0..p.messages.len());
            if let Some(last) = p.messages.last() {
                context.push(last.clone());
            }
            Ok(context.finish())
        }
        fn compact(&self, _: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
            Ok(CompactResult::nothing_to_do("echo"))
        }
    }
    pincer_plugin_api::export_engine!(Echo);

    let host = TestHost::new();
    let engine = TestEngine::new::<Echo>(&host, serde_json::json!({})).expect("engine");
    for file in golden_files(&dir, ".context.json") {
        let golden = read(&file);
        let values = golden["messages"].as_array().expect("messages");
        let conversation = Conversation::from_messages(
            values
                .iter()
                .map(|v| Message::from_value(v.clone()).expect("message")),
        );
        let assembled = engine.assemble(&conversation, None).expect("assemble");
        let mut expected = values.clone();
        expected.extend(values.last().cloned());
        assert_eq!(
            assembled.messages.len(),
            expected.len(),
            "{}",
            file.display()
        );
        for (i, (message, want)) in assembled.messages.iter().zip(&expected).enumerate() {
            assert_eq!(&message.to_value(), want, "{} message {i}", file.display());
        }
    }
}
