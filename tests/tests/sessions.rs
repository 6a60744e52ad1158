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
    let path: Vec<&str> = tree.path(None).iter().map(|e| e.id.as_str()).collect();
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
