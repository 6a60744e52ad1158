//! The `lossless` engine through the real `pincer` binary and its staged library: every
//! τ-bench airline task (read from `../shared/data`) replayed with `pincer run --import …
//! --engine lossless --context-window 4096`, then read back with `pincer tool` and with SQLite
//! itself; a crash mid-run; bootstrap onto an existing session.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::sync::Arc;

use pincer_host::config::PincerHome;
use pincer_host::testing::engines::request::{
    HostInputs, SubagentEndedRequest, SubagentSpawnRequest, ToolCallRequest,
};
use pincer_host::GuardedEngine;
use pincer_host::{Runtime, RuntimeOptions};
use pincer_plugin_api::abi::latest::{AbortController, SubagentContextMode, SubagentEndReason};
use pincer_tests::*;
use serde_json::{json, Value};

const WINDOW: &str = "4096";

fn db_path(home: &Path) -> PathBuf {
    home.join("state")
        .join("engines")
        .join("lossless")
        .join("lossless.db")
}

/// Entry ids of the stored messages of conversation `key`, in seq order (SQLite's own view).
fn stored_ids(home: &Path, key: &str) -> Vec<Option<String>> {
    let conn = rusqlite::Connection::open(db_path(home)).unwrap();
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let mut stmt = conn
        .prepare(
            "SELECT m.entry_id FROM messages m JOIN conversations c ON c.id = m.conversation_id \
             WHERE c.key = ?1 ORDER BY m.seq",
        )
        .unwrap();
    stmt.query_map([key], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn tool(home: &Path, key: &str, name: &str, args: Value) -> Value {
    let plugins = staged_plugins_dir();
    let out = run_pincer(
        home,
        &[
            "tool",
            name,
            "--session",
            key,
            "--args",
            &args.to_string(),
            "--engine",
            "lossless",
            "--plugins-dir",
            plugins.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "pincer tool {name} {args}: {}{}",
        stdout_text(&out),
        stderr_text(&out)
    );
    let answer = stdout_json(&out);
    assert_eq!(answer["isError"], false, "{answer}");
    answer["result"].clone()
}

/// How many user messages end the transcript after its last answer.
fn trailing_unanswered(traj: &Value) -> usize {
    traj.as_array()
        .unwrap()
        .iter()
        .rev()
        .take_while(|m| m["role"] == "user")
        .count()
}

/// The task's transcript with a fact planted in its first user message.
fn planted(task: &Value, fact: &str) -> Value {
    let mut traj = task["traj"].clone();
    let first_user = traj
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["role"] == "user")
        .expect("a user message");
    let text = first_user["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    first_user["content"] = json!(format!("{text} (By the way, my locker code is {fact}.)"));
    traj
}

/// The arguments of `pincer run --import traj --session key --engine engine` in a 4096-token
/// window with the plugins of `plugins`.
fn run_args<'a>(traj: &'a Path, key: &'a str, engine: &'a str, plugins: &'a Path) -> Vec<&'a str> {
    vec![
        "run",
        "--import",
        traj.to_str().unwrap(),
        "--session",
        key,
        "--engine",
        engine,
        "--context-window",
        WINDOW,
        "--plugins-dir",
        plugins.to_str().unwrap(),
        "--json",
    ]
}

/// The file the index of agent `main` names for `key`.
fn indexed_session_file(home: &Path, key: &str) -> PathBuf {
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("agents/main/sessions/sessions.json")).unwrap(),
    )
    .unwrap();
    let id = index[key]["sessionId"]
        .as_str()
        .expect("the key is indexed");
    home.join(format!("agents/main/sessions/{id}.jsonl"))
}

fn run_import(home: &Path, traj: &Path, key: &str, engine: &str) -> std::process::Output {
    let plugins = staged_plugins_dir();
    run_pincer(home, &run_args(traj, key, engine, &plugins))
}

/// The staged `lossless` alone in a folder of its own (a host verifies every plugin it sees
/// at start: one library keeps each of the many runs quick).
fn lossless_only(dir: &Path) -> PathBuf {
    let plugins = dir.join("lossless-only");
    let to = plugins.join("lossless");
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(staged_plugin("lossless")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    plugins
}

/// The outcome of one task's `pincer run`.
struct Replayed {
    index: usize,
    fact: String,
    /// `None`: the run succeeded; else its error.
    failed: Option<String>,
    turns: usize,
    compactions: usize,
}

/// Replays one task through `pincer run` and checks its turn reports.
fn replay(home: &Path, plugins: &Path, index: usize, task: &Value) -> Replayed {
    let key = format!("tau:{index}");
    let fact = format!("LOCKER{index:03}ZQ");
    let traj = home.join(format!("task{index}.json"));
    std::fs::write(&traj, planted(task, &fact).to_string()).unwrap();
    let out = run_pincer(home, &run_args(&traj, &key, "lossless", plugins));
    let mut replayed = Replayed {
        index,
        fact,
        failed: (!out.status.success()).then(|| stderr_text(&out)),
        turns: 0,
        compactions: 0,
    };
    for line in stdout_text(&out).lines() {
        let report: Value = serde_json::from_str(line).unwrap();
        replayed.turns += 1;
        assert_eq!(
            report["assembled"]["answeredBy"], "lossless",
            "task {index}: no fallback"
        );
        // No broken tool pair: the host had nothing to repair.
        assert_eq!(
            report["assembled"]["repairs"]["orphanResultsDropped"], 0,
            "task {index}: {report}"
        );
        assert_eq!(
            report["assembled"]["repairs"]["missingResultsAdded"], 0,
            "task {index}: {report}"
        );
        // Within the window (the replay model refuses anything larger; checked here anyway).
        assert!(
            report["usage"][0].as_u64().unwrap() <= 4096,
            "task {index}: {report}"
        );
        for compaction in report["compactions"].as_array().unwrap() {
            replayed.compactions += 1;
            if compaction["compacted"] == false {
                let detail = compaction["detail"].as_str().unwrap_or_default();
                assert!(
                    ["budget_met", "no_candidate", "no_progress"]
                        .iter()
                        .any(|r| detail.starts_with(r)),
                    "task {index}: a compaction that did nothing says why: {compaction}"
                );
            }
        }
    }
    replayed
}

/// Calls `name` of the loaded engine for session `key`, as `pincer tool` does.
fn call(engine: &GuardedEngine, key: &str, name: &str, args: Value) -> Value {
    let request = Arc::new(ToolCallRequest {
        session_id: Arc::from(key),
        tool_name: Arc::from(name),
        arguments_json: Arc::from(args.to_string().as_str()),
        host: HostInputs {
            session_key: Some(Arc::from(key)),
            ..HostInputs::default()
        },
    });
    let answer = engine
        .call_tool(request, Arc::new(AbortController::new()))
        .unwrap()
        .expect("lossless answers callTool");
    assert!(
        !answer.value.is_error,
        "{name} {args}: {}",
        answer.value.content
    );
    serde_json::from_str(answer.value.content.as_str()).unwrap()
}

#[test]
fn every_tau_bench_task_replays_losslessly_in_a_4096_token_window() {
    let Some(data) = tau_bench_transcripts() else {
        return;
    };
    let tasks: Vec<(usize, Value)> = data
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .enumerate()
        .collect();
    assert!(tasks.len() >= 100);
    let home = TempDir::new().unwrap();
    let plugins = lossless_only(home.path());
    // Two runs at a time (one per core), each task in its own session of one home.
    let replayed: Vec<Replayed> = std::thread::scope(|scope| {
        let handles: Vec<_> = tasks
            .chunks(tasks.len().div_ceil(2))
            .map(|chunk| {
                let (home, plugins) = (home.path(), plugins.as_path());
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|(i, task)| replay(home, plugins, *i, task))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(replayed.len(), tasks.len());

    // A run may fail only where one turn alone (with the 1.5k-token system prompt) cannot fit
    // 4096 tokens: the current turn is the host's to split, and its built-in compaction (what
    // sliding-window delegates to) fails on the same task.
    let mut irreducible = Vec::new();
    for r in replayed.iter().filter(|r| r.failed.is_some()) {
        let error = r.failed.as_deref().unwrap();
        assert!(
            error.contains("context overflow"),
            "task {}: {error}",
            r.index
        );
        let traj = home.path().join(format!("task{}.json", r.index));
        let staged = staged_plugins_dir();
        let builtin = run_pincer(
            home.path(),
            &run_args(
                &traj,
                &format!("builtin:{}", r.index),
                "sliding-window",
                &staged,
            ),
        );
        assert!(
            !builtin.status.success(),
            "task {}: lossless failed where the built-in compaction fits: {error}",
            r.index
        );
        irreducible.push(r.index);
    }

    // Every message offered is in the store exactly once, in the session's order; the fact
    // planted in the first turn is found and expanded back; prefix stability is summed.
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    std::fs::write(
        home.path().join("pincer.json"),
        json!({ "plugins": { "slots": { "contextEngine": "lossless" } } }).to_string(),
    )
    .unwrap();
    options.extra_plugin_dirs = vec![plugins.clone()];
    let runtime = Runtime::open(options).unwrap();
    let engine = runtime.resolve().unwrap().engine;
    let (mut assemblies, mut after, mut stable, mut summaries) = (0, 0, 0, 0);
    for r in &replayed {
        let key = format!("tau:{}", r.index);
        let task = &tasks[r.index].1;
        let session = session_message_ids(home.path(), &key);
        let stored: Vec<String> = stored_ids(home.path(), &key)
            .into_iter()
            .map(|id| id.expect("entry ids kept"))
            .collect();
        // A transcript's last user message with no answer is appended after the last turn:
        // no engine call offers it. A failed run stopped inside a turn whose messages were
        // offered to compact (stored) but never acknowledged by afterTurn.
        if r.failed.is_none() {
            let unanswered = trailing_unanswered(&task["traj"]);
            assert_eq!(
                stored[..],
                session[..session.len() - unanswered],
                "task {}",
                r.index
            );
        } else {
            assert_eq!(stored[..], session[..stored.len()], "task {}", r.index);
        }
        let hits = call(&engine, &key, "lcm_grep", json!({ "query": r.fact }));
        let hit = hits["matches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["kind"] == "message")
            .unwrap_or_else(|| panic!("task {}: {} not found: {hits}", r.index, r.fact))
            .clone();
        let described = call(&engine, &key, "lcm_describe", json!({ "id": hit["id"] }));
        let target = described["parents"]
            .get(0)
            .cloned()
            .unwrap_or(hit["id"].clone());
        summaries += usize::from(target != hit["id"]);
        let mut page = 0;
        let original = loop {
            let expanded = call(
                &engine,
                &key,
                "lcm_expand",
                json!({ "id": target, "page": page }),
            );
            let found = expanded["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["id"] == hit["id"])
                .cloned();
            if let Some(found) = found {
                break found;
            }
            page = expanded["nextPage"]
                .as_u64()
                .expect("the covered message is on a page") as usize;
        };
        assert!(
            original["message"]["content"].to_string().contains(&r.fact),
            "task {}: {original}",
            r.index
        );
        let stats = call(&engine, &key, "lcm_stats", json!({}));
        assemblies += stats["prefixStability"]["assemblies"].as_i64().unwrap();
        after += stats["prefixStability"]["afterCompaction"]
            .as_i64()
            .unwrap();
        stable += stats["prefixStability"]["stable"].as_i64().unwrap();
    }
    drop(engine);
    runtime.shutdown();
    let turns: usize = replayed.iter().map(|r| r.turns).sum();
    let compactions: usize = replayed.iter().map(|r| r.compactions).sum();
    // Each task's first assembly has nothing to compare with.
    let compared = assemblies - tasks.len() as i64 - after;
    let share = stable as f64 / compared as f64;
    eprintln!(
        "lossless τ-bench replay: {} tasks, {turns} turns, {compactions} host-requested compactions, \
         {} tasks irreducible in {WINDOW} tokens for the built-in compaction too ({irreducible:?}); \
         planted fact expanded from a summary in {summaries} tasks; prefix stability {stable}/{compared} = {:.1}% \
         ({after} assemblies after a compaction excluded, of {assemblies})",
        tasks.len(),
        irreducible.len(),
        share * 100.0
    );
    assert!(irreducible.len() <= tasks.len() / 10, "{irreducible:?}");
    assert!(
        summaries > tasks.len() / 2,
        "most planted facts were summarized away: {summaries}"
    );
    assert!(share >= 0.9, "prefix stability {share:.3} below 90%");
}

#[test]
fn a_run_killed_mid_turn_loses_no_acknowledged_message() {
    let Some(data) = tau_bench_transcripts() else {
        return;
    };
    let task = data
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|t| t["traj"].as_array().unwrap().len())
        .unwrap();
    let home = TempDir::new().unwrap();
    let traj = home.path().join("task.json");
    std::fs::write(&traj, task["traj"].to_string()).unwrap();
    let plugins = staged_plugins_dir();
    let mut child = Command::new(pincer_bin())
        .arg("--home")
        .arg(home.path())
        .args(run_args(&traj, "crash", "lossless", &plugins))
        .env_remove("PINCER_HOME")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // A turn's report is printed after its afterTurn returned: its messages are acknowledged.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged_added = 0;
    for _ in 0..4 {
        let report: Value =
            serde_json::from_str(&lines.next().expect("a turn report").unwrap()).unwrap();
        acknowledged_added += report["messagesAdded"].as_u64().unwrap() as usize;
    }
    child.kill().unwrap(); // SIGKILL, mid-way through the next turn
    child.wait().unwrap();
    let preamble = task["traj"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .take_while(|m| m["role"] != "user")
        .count();
    let acknowledged = preamble + acknowledged_added;
    let session = session_message_ids(home.path(), "crash");
    let stored: Vec<String> = stored_ids(home.path(), "crash")
        .into_iter()
        .flatten()
        .collect();
    assert!(session.len() >= acknowledged);
    assert!(
        stored.len() >= acknowledged,
        "stored {} of {acknowledged} acknowledged",
        stored.len()
    );
    assert_eq!(
        stored[..],
        session[..stored.len()],
        "what is stored is the session's prefix, once"
    );
}

#[test]
fn bootstrap_imports_an_existing_session_once() {
    let Some(data) = tau_bench_transcripts() else {
        return;
    };
    let tasks = data.as_array().unwrap();
    let home = TempDir::new().unwrap();
    let (first, second) = (
        home.path().join("first.json"),
        home.path().join("second.json"),
    );
    std::fs::write(&first, tasks[0]["traj"].to_string()).unwrap();
    std::fs::write(&second, tasks[1]["traj"].to_string()).unwrap();
    // A session lossless never saw, then lossless on it twice: bootstrap reconciles each time.
    assert!(run_import(home.path(), &first, "shared", "sliding-window")
        .status
        .success());
    let before = session_message_ids(home.path(), "shared").len();
    // A held key is never imported into again (it would be refused): the session goes on by
    // its file's path, which keeps its key.
    let file = indexed_session_file(home.path(), "shared");
    let file = file.to_str().unwrap();
    let out = run_import(home.path(), &second, file, "lossless");
    assert!(out.status.success(), "{}", stderr_text(&out));
    let after_first = session_message_ids(home.path(), "shared");
    assert!(after_first.len() > before);
    let stored: Vec<String> = stored_ids(home.path(), "shared")
        .into_iter()
        .flatten()
        .collect();
    let unanswered = trailing_unanswered(&tasks[1]["traj"]);
    assert_eq!(
        stored[..],
        after_first[..after_first.len() - unanswered],
        "the old history imported by bootstrap, the new by afterTurn"
    );
    let out = run_import(home.path(), &first, file, "lossless");
    assert!(out.status.success(), "{}", stderr_text(&out));
    let stored: Vec<String> = stored_ids(home.path(), "shared")
        .into_iter()
        .flatten()
        .collect();
    let session = session_message_ids(home.path(), "shared");
    let unanswered = trailing_unanswered(&tasks[0]["traj"]);
    assert_eq!(
        stored[..],
        session[..session.len() - unanswered],
        "nothing imported twice"
    );
    // The doctor view through the CLI agrees.
    let stats = tool(home.path(), "shared", "lcm_stats", json!({}));
    assert_eq!(stats["messages"], stored.len(), "{stats}");
}

fn spawn_request(parent: &str, child: &str, ttl_ms: Option<u64>) -> Arc<SubagentSpawnRequest> {
    Arc::new(SubagentSpawnRequest {
        parent_session_key: Arc::from(parent),
        child_session_key: Arc::from(child),
        context_mode: Some(SubagentContextMode::Fork),
        parent_session_id: None,
        parent_session_file: None,
        child_session_id: None,
        child_session_file: None,
        ttl_ms,
    })
}

fn grep_count(engine: &GuardedEngine, key: &str, query: &str) -> usize {
    call(engine, key, "lcm_grep", json!({ "query": query }))["matches"]
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn a_subagent_reads_its_parents_store_only_while_its_grant_lives() {
    let home = TempDir::new().unwrap();
    let plugins = lossless_only(home.path());
    let out = run_pincer(
        home.path(),
        &[
            "run",
            "--import",
            example_conversation().to_str().unwrap(),
            "--session",
            "parent",
            "--engine",
            "lossless",
            "--plugins-dir",
            plugins.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr_text(&out));
    std::fs::write(
        home.path().join("pincer.json"),
        json!({ "plugins": { "slots": { "contextEngine": "lossless" } } }).to_string(),
    )
    .unwrap();
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    options.extra_plugin_dirs = vec![plugins];
    let runtime = Runtime::open(options).unwrap();
    let engine = runtime.resolve().unwrap().engine;
    let word = "Seattle";
    assert!(grep_count(&engine, "parent", word) > 0);
    assert_eq!(grep_count(&engine, "child", word), 0, "no grant, no access");

    // Granted, then ended: read access while the child lives, none after.
    let grant = engine
        .prepare_subagent_spawn(spawn_request("parent", "child", None))
        .unwrap();
    assert!(grant.unwrap().value.is_some(), "a rollback is offered");
    assert!(grep_count(&engine, "child", word) > 0);
    // No recursive grants: the child's own child sees nothing of the parent.
    engine
        .prepare_subagent_spawn(spawn_request("child", "grandchild", None))
        .unwrap();
    assert_eq!(grep_count(&engine, "grandchild", word), 0);
    engine
        .on_subagent_ended(Arc::new(SubagentEndedRequest {
            child_session_key: Arc::from("child"),
            reason: SubagentEndReason::Completed,
        }))
        .unwrap();
    assert_eq!(
        grep_count(&engine, "child", word),
        0,
        "revoked when the child ended"
    );

    // A failed spawn's rollback undoes the grant.
    let handle = engine
        .prepare_subagent_spawn(spawn_request("parent", "failed", None))
        .unwrap()
        .unwrap()
        .value
        .unwrap();
    assert!(grep_count(&engine, "failed", word) > 0);
    engine.rollback(handle).unwrap();
    assert_eq!(grep_count(&engine, "failed", word), 0, "rolled back");

    // A grant past its TTL reads nothing; results are capped at grantMaxResults (50) anyway.
    engine
        .prepare_subagent_spawn(spawn_request("parent", "brief", Some(1)))
        .unwrap();
    // Once its 1 ms have passed (observed, not slept: the grant reads nothing then).
    wait_for(std::time::Duration::from_secs(60), || {
        grep_count(&engine, "brief", word) == 0
    });
    assert_eq!(grep_count(&engine, "brief", word), 0, "expired");
    drop(engine);
    runtime.shutdown();
}
