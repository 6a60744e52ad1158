//! The built-in compaction (docs/CONTRACT.md §9.3) over real session files: τ-bench transcripts
//! imported as sessions and compacted at a 4096-token window, hand-made sessions for the split
//! turn, the anti-loop rule and the 16000-character cap, and `pincer compact` through the real
//! binary with `legacy`. What a user would notice: the cut never separates a tool result from
//! its call, the file keeps every line it had (byte for byte) plus one `compaction` line per
//! compaction, the context afterwards is the summary then the kept tail, and a long transcript
//! ends up inside its window.

use std::path::Path;

use pincer_host::compaction::{
    compact_session, CompactOptions, CompactOutcome, CompactionSettings, ExtractiveSummarizer,
    SessionCompaction, SkipReason, Summarizer, SummaryError, SummaryRequest,
    MAX_COMPACTION_SUMMARY_CHARS, SUMMARY_TRUNCATED_MARKER, TURN_CONTEXT_PREFIX,
};
use pincer_host::config::CompactionConfig;
use pincer_host::session::import_openai;
use pincer_host::session::EntryType;
use pincer_host::session::{build_session_context, Durability, SessionTree, SessionWriter};
use pincer_plugin_api::abi::latest::{Message, Role};
use pincer_plugin_api::tokens::estimate_context_tokens;
use pincer_tests::*;
use serde_json::{json, Value};

const WINDOW: u64 = 4096;

/// The settings of an embedded run (floor 20000) scaled to a 4096-token window.
fn small_window() -> CompactionSettings {
    CompactionSettings::from_config(&CompactionConfig::default()).for_window(WINDOW)
}

fn options(force: bool) -> CompactOptions {
    CompactOptions {
        force,
        context_window: Some(WINDOW),
        durability: Durability::None,
        ..CompactOptions::default()
    }
}

fn compacted(outcome: CompactOutcome) -> SessionCompaction {
    match outcome {
        CompactOutcome::Compacted(done) => done,
        CompactOutcome::Skipped(reason) => panic!("expected a compaction, got: {reason}"),
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// After a compaction: the context is the summary, then (as OpenClaw builds it) the entries
/// from `firstKeptEntryId` on; no kept tool result lacks its call; the kept tail does not start
/// with a tool result.
fn check_context(path: &Path, done: &SessionCompaction) {
    let tree = SessionTree::read(path).unwrap();
    let first_kept = tree
        .get(&done.first_kept_entry_id)
        .expect("the kept entry exists");
    assert_ne!(
        first_kept.entry_type,
        EntryType::Message(Role::ToolResult),
        "the cut landed on a toolResult"
    );
    let context = build_session_context(&tree, None);
    assert_eq!(context.messages[0].role(), Role::CompactionSummary);
    assert_eq!(context.messages[0].summary(), Some(done.summary.as_str()));
    assert_eq!(context.entry_ids[0], done.entry_id);
    // The rest: the message entries on the path from firstKeptEntryId to the leaf.
    let path_entries = tree.path(None);
    let from = path_entries
        .iter()
        .position(|e| e.id() == done.first_kept_entry_id)
        .expect("on the path");
    let expected: Vec<&str> = path_entries[from..]
        .iter()
        .filter(|e| {
            matches!(e.entry_type, EntryType::Message(_))
                && e.message().is_some_and(|m| !m.is_excluded_from_context())
        })
        .map(|e| e.id())
        .collect();
    let got: Vec<&str> = context.entry_ids[1..]
        .iter()
        .map(|id| id.as_str().unwrap_or_default())
        .collect();
    assert_eq!(got, expected, "the context continues from firstKeptEntryId");
    let calls: std::collections::HashSet<&str> = context
        .messages
        .iter()
        .flat_map(Message::tool_call_ids)
        .collect();
    for m in &context.messages {
        if let Some(id) = m.tool_result_id() {
            assert!(
                calls.contains(id),
                "a kept toolResult {id} without its call"
            );
        }
    }
    assert_eq!(
        done.tokens_after,
        estimate_context_tokens(&context.messages).tokens
    );
    // The entry records it too (`tokensAfter`, optional in OpenClaw's format).
    let entry = tree
        .get(&done.entry_id)
        .expect("the compaction entry")
        .record();
    assert_eq!(entry["tokensAfter"], done.tokens_after, "{entry:?}");
}

/// Every τ-bench transcript, imported as a session and compacted whenever its context is over
/// the 4096-token window's threshold, ends inside the window; every compaction appends one
/// line and changes nothing already written; the context after each is the summary and the
/// kept tail; the cut is never a tool result.
#[test]
fn tau_bench_sessions_converge_at_a_4096_token_window_and_keep_every_line() {
    let Some(data) = tau_bench_transcripts() else {
        return;
    };
    let dir = TempDir::new().unwrap();
    let settings = small_window();
    let (mut compactions, mut over_at_start) = (0, 0);
    for (n, task) in data.as_array().unwrap().iter().enumerate() {
        let path = dir.path().join(format!("t{n}.jsonl"));
        let traj = task["traj"].as_array().unwrap();
        drop(import_openai(traj, &path, "/srv", Durability::None).unwrap());
        let original = std::fs::read(&path).unwrap();
        let start = estimate_context_tokens(
            &build_session_context(&SessionTree::read(&path).unwrap(), None).messages,
        )
        .tokens;
        if start > WINDOW - settings.reserve_tokens {
            over_at_start += 1;
        }
        let mut rounds = 0;
        let end = loop {
            match compact_retrying(&path, &settings, &ExtractiveSummarizer, &options(false)) {
                CompactOutcome::Compacted(done) => {
                    rounds += 1;
                    compactions += 1;
                    assert!(rounds <= 8, "task {n}: no convergence after 8 compactions");
                    check_context(&path, &done);
                }
                CompactOutcome::Skipped(reason) => break reason,
            }
        };
        let after = std::fs::read(&path).unwrap();
        assert_eq!(
            &after[..original.len()],
            &original[..],
            "task {n}: the original lines are untouched"
        );
        let added: Vec<Value> = std::str::from_utf8(&after[original.len()..])
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(added.len(), rounds, "task {n}: one line per compaction");
        assert!(added.iter().all(|l| l["type"] == "compaction"));
        let tokens = estimate_context_tokens(
            &build_session_context(&SessionTree::read(&path).unwrap(), None).messages,
        )
        .tokens;
        match end {
            SkipReason::BelowThreshold { .. } => assert!(
                tokens <= WINDOW - settings.reserve_tokens,
                "task {n}: {tokens} tokens"
            ),
            other => panic!("task {n}: stopped at {tokens} tokens: {other}"),
        }
    }
    eprintln!(
        "{compactions} compactions; {over_at_start} of {} transcripts were over the threshold",
        data.as_array().unwrap().len()
    );
    assert!(
        over_at_start >= 10,
        "the window is small enough to force compaction"
    );
}

/// The whole τ-bench set as one long conversation, appended message by message as a harness
/// would, compacted whenever the context goes over the 4096-token window's threshold: every
/// compaction brings the context back inside the window, the previous summary is carried
/// forward, and at the end the context is under the threshold.
#[test]
fn a_whole_tau_bench_run_replayed_at_a_4096_token_window_stays_inside_it() {
    let Some(data) = tau_bench_transcripts() else {
        return;
    };
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("run.jsonl");
    let settings = small_window();
    let threshold = WINDOW - settings.reserve_tokens;
    let messages: Vec<Message> = data
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|task| {
            pincer_plugin_api::interop::openai_chat_messages(task["traj"].as_array().unwrap())
        })
        .filter(|m| m.role() != Role::System)
        .collect();
    let mut writer = SessionWriter::create(&path, "/srv", Durability::None).unwrap();
    let (mut compactions, mut appended_lines) = (0usize, 0usize);
    let mut largest_after = 0;
    for message in &messages {
        writer.append_message(message).unwrap();
        appended_lines += 1;
        let tokens =
            estimate_context_tokens(&build_session_context(writer.tree(), None).messages).tokens;
        // Compact at a turn's end (an assistant answer without tool calls), as a harness's
        // threshold check after a turn does.
        let turn_end =
            message.role() == Role::Assistant && message.tool_call_ids().next().is_none();
        if tokens <= threshold || !turn_end {
            continue;
        }
        drop(writer);
        let outcome = retry_locked(|| {
            compact_session(&path, &settings, &ExtractiveSummarizer, &options(false))
        });
        let done = compacted(outcome);
        compactions += 1;
        appended_lines += 1;
        largest_after = largest_after.max(done.tokens_after);
        assert!(
            done.tokens_after <= WINDOW,
            "compaction {compactions} left {} tokens",
            done.tokens_after
        );
        if compactions > 1 {
            assert!(
                done.summary.contains("## Earlier summary"),
                "the previous summary is carried forward"
            );
        }
        writer = retry_locked(|| SessionWriter::open(&path, Durability::None));
    }
    drop(writer);
    let tree = SessionTree::read(&path).unwrap();
    assert_eq!(
        tree.entries.len(),
        appended_lines,
        "every message and every compaction is a line"
    );
    let messages_kept = tree
        .entries
        .iter()
        .filter(|e| matches!(e.entry_type, EntryType::Message(_)))
        .count();
    assert_eq!(messages_kept, messages.len(), "no message is lost");
    let end = estimate_context_tokens(&build_session_context(&tree, None).messages).tokens;
    eprintln!(
        "{} messages, {compactions} compactions, largest context after one: {largest_after}, at the end: {end}",
        messages.len()
    );
    assert!(compactions > 100);
    assert!(end <= WINDOW, "{end} tokens at the end");
}

/// `f()`, tried again while the file's lock is still held. Another test of this process may
/// spawn `pincer` at the moment a writer closes: between fork and exec the child holds a copy
/// of every open descriptor, and so, for an instant, the closed writer's lock.
fn retry_locked<T, E: std::fmt::Debug + HasCode>(mut f: impl FnMut() -> Result<T, E>) -> T {
    for _ in 0..100 {
        match f() {
            Err(e) if e.code() == "session_locked" => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => return other.unwrap(),
        }
    }
    f().unwrap()
}

/// [`compact_session`], tried again while the file is locked (see [`retry_locked`]).
fn compact_retrying(
    path: &Path,
    settings: &CompactionSettings,
    summarizer: &dyn Summarizer,
    options: &CompactOptions,
) -> CompactOutcome {
    retry_locked(|| compact_session(path, settings, summarizer, options))
}

/// The errors [`retry_locked`] looks into.
trait HasCode {
    fn code(&self) -> &'static str;
}
impl HasCode for pincer_host::compaction::CompactError {
    fn code(&self) -> &'static str {
        pincer_host::compaction::CompactError::code(self)
    }
}
impl HasCode for pincer_host::session::SessionWriteError {
    fn code(&self) -> &'static str {
        pincer_host::session::SessionWriteError::code(self)
    }
}

fn message_line(id: &str, parent: Option<&str>, message: Value) -> String {
    json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z", "message": message}).to_string()
}

fn write_session(path: &Path, lines: &[String]) {
    let mut text = String::from(
        "{\"type\":\"session\",\"version\":4,\"id\":\"01900000-0000-7000-8000-000000000000\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/srv\"}\n",
    );
    for line in lines {
        text += line;
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// One long turn: the user's request, then call/result pairs whose results are large. The
/// keep-recent budget is reached inside the turn, so the turn is split: its start is summarised
/// after the turn-context separator, and the kept tail starts at an assistant message with every
/// kept result beside its call.
#[test]
fn a_cut_inside_a_long_turn_splits_it() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("split.jsonl");
    let mut session = vec![
        message_line(
            "u0",
            None,
            json!({"role": "user", "content": "an earlier question"}),
        ),
        message_line(
            "a0",
            Some("u0"),
            json!({"role": "assistant", "content": [{"type": "text", "text": "an earlier answer"}]}),
        ),
        message_line(
            "u1",
            Some("a0"),
            json!({"role": "user", "content": "check every reservation"}),
        ),
    ];
    let mut parent = "u1".to_owned();
    for i in 0..6 {
        let call = format!("c{i}");
        session.push(message_line(&format!("a{}", i + 1), Some(&parent), json!({"role": "assistant", "content": [{"type": "toolCall", "id": call, "name": "get_reservation_details", "arguments": {"reservation_id": format!("R{i}")}}]})));
        session.push(message_line(&format!("r{}", i + 1), Some(&format!("a{}", i + 1)), json!({"role": "toolResult", "toolCallId": call, "toolName": "get_reservation_details", "content": [{"type": "text", "text": "z".repeat(2000)}], "isError": false})));
        parent = format!("r{}", i + 1);
    }
    write_session(&path, &session);
    let settings = small_window();
    let done = compacted(compact_retrying(
        &path,
        &settings,
        &ExtractiveSummarizer,
        &options(true),
    ));
    let kept = SessionTree::read(&path).unwrap();
    let first = kept.get(&done.first_kept_entry_id).unwrap();
    assert_eq!(first.entry_type, EntryType::Message(Role::Assistant));
    assert!(
        done.summary.contains(TURN_CONTEXT_PREFIX),
        "the turn prefix is summarised after the separator:\n{}",
        done.summary
    );
    let (history, prefix) = done.summary.split_once(TURN_CONTEXT_PREFIX).unwrap();
    assert!(history.contains("an earlier question"));
    assert!(prefix.contains("check every reservation"));
    check_context(&path, &done);
}

/// A reset at the leaf, or a compaction a hook wrote, is not compacted again (the anti-loop
/// rule); the file is left as it was.
#[test]
fn no_compaction_right_after_a_reset_or_a_hook_compaction() {
    let dir = TempDir::new().unwrap();
    let base = vec![
        message_line(
            "u1",
            None,
            json!({"role": "user", "content": "x".repeat(8000)}),
        ),
        message_line(
            "a1",
            Some("u1"),
            json!({"role": "assistant", "content": [{"type": "text", "text": "y".repeat(8000)}]}),
        ),
        message_line(
            "u2",
            Some("a1"),
            json!({"role": "user", "content": "z".repeat(8000)}),
        ),
    ];
    let endings = [
        json!({"type": "reset", "id": "r", "parentId": "u2", "timestamp": "2026-01-01T00:00:00.000Z", "reason": "new"}),
        json!({"type": "compaction", "id": "h", "parentId": "u2", "timestamp": "2026-01-01T00:00:00.000Z", "summary": "hook", "firstKeptEntryId": "u2", "tokensBefore": 6000, "fromHook": true}),
    ];
    for (i, ending) in endings.iter().enumerate() {
        let path = dir.path().join(format!("s{i}.jsonl"));
        let mut session = base.clone();
        session.push(ending.to_string());
        write_session(&path, &session);
        let before = std::fs::read(&path).unwrap();
        let outcome = compact_retrying(
            &path,
            &small_window(),
            &ExtractiveSummarizer,
            &options(true),
        );
        assert_eq!(outcome, CompactOutcome::Skipped(SkipReason::AntiLoop));
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing appended");
    }
    // The same session without the ending compacts; a second forced compaction right after
    // compacts the kept tail down to its last message, then there is nothing left.
    let path = dir.path().join("plain.jsonl");
    write_session(&path, &base);
    let first = compacted(compact_retrying(
        &path,
        &small_window(),
        &ExtractiveSummarizer,
        &options(true),
    ));
    check_context(&path, &first);
    let second = compact_retrying(
        &path,
        &small_window(),
        &ExtractiveSummarizer,
        &options(true),
    );
    assert_eq!(
        second,
        CompactOutcome::Skipped(SkipReason::AlreadyCompacted)
    );
}

/// A summariser that writes far more than the cap allows.
struct Verbose;
impl Summarizer for Verbose {
    fn summarize(&self, request: &SummaryRequest<'_>) -> Result<String, SummaryError> {
        Ok(format!("{:?} ", request.kind).repeat(10_000))
    }
}

/// The persisted summary is at most 16000 characters and says it was cut; the file lists stay
/// at its end.
#[test]
fn a_summary_over_16000_characters_is_capped_with_the_marker() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("cap.jsonl");
    write_session(
        &path,
        &[
            // A long first turn, so that the capped summary is smaller than what it replaces
            // (a compaction that is not smaller is none).
            message_line(
                "u0",
                None,
                json!({"role": "user", "content": "background ".repeat(8000)}),
            ),
            message_line(
                "a0",
                Some("u0"),
                json!({"role": "assistant", "content": [{"type": "text", "text": "noted"}]}),
            ),
            message_line(
                "u1",
                Some("a0"),
                json!({"role": "user", "content": "read the config"}),
            ),
            message_line(
                "a1",
                Some("u1"),
                json!({"role": "assistant", "content": [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "/etc/app.toml"}}]}),
            ),
            message_line(
                "r1",
                Some("a1"),
                json!({"role": "toolResult", "toolCallId": "c1", "toolName": "read", "content": [{"type": "text", "text": "port = 1"}], "isError": false}),
            ),
            message_line(
                "a2",
                Some("r1"),
                json!({"role": "assistant", "content": [{"type": "text", "text": "the port is 1"}]}),
            ),
            message_line(
                "u2",
                Some("a2"),
                json!({"role": "user", "content": "thanks"}),
            ),
            message_line(
                "a3",
                Some("u2"),
                json!({"role": "assistant", "content": [{"type": "text", "text": "welcome"}]}),
            ),
        ],
    );
    let done = compacted(compact_retrying(
        &path,
        &small_window(),
        &Verbose,
        &options(true),
    ));
    let units: usize = done.summary.chars().map(char::len_utf16).sum();
    assert_eq!(units, MAX_COMPACTION_SUMMARY_CHARS);
    assert!(done.summary.contains(SUMMARY_TRUNCATED_MARKER));
    assert!(
        done.summary
            .ends_with("<read-files>\n/etc/app.toml\n</read-files>"),
        "{}",
        &done.summary[done.summary.len() - 200..]
    );
    assert_eq!(done.details.read_files, ["/etc/app.toml"]);
    // What was appended is what was returned.
    let last: Value = serde_json::from_str(lines(&path).last().unwrap()).unwrap();
    assert_eq!(last["summary"], done.summary.as_str());
    assert_eq!(last["details"]["readFiles"], json!(["/etc/app.toml"]));
}

/// A session another writer holds is refused, with nothing appended.
#[test]
fn a_locked_session_is_refused_with_its_code() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("locked.jsonl");
    let mut writer = SessionWriter::create(&path, "/srv", Durability::None).unwrap();
    writer.append_message(&Message::user("hello")).unwrap();
    let err = compact_session(
        &path,
        &small_window(),
        &ExtractiveSummarizer,
        &options(true),
    )
    .unwrap_err();
    assert_eq!(err.code(), "session_locked");
    assert!(err.to_string().contains("another pincer"), "{err}");
}

/// `pincer compact` with `legacy`: the engine's guarded `compact`, forced, reaches the built-in
/// compaction; a session named by its key gets a `compaction` line and the context then starts
/// with the summary; a session too small says so and succeeds.
#[test]
fn pincer_compact_through_the_binary_with_legacy() {
    let home = TempDir::new().unwrap();
    let transcript = home.path().join("t.json");
    // `sessions import` takes an OpenAI chat transcript: the τ-bench data (the example
    // conversation is in OpenClaw's format, which import refuses). Without the data the test
    // skips with the notice `tau_bench_transcripts` printed.
    let Some(data) = tau_bench_transcripts() else {
        return;
    };
    std::fs::write(&transcript, data[0]["traj"].to_string()).unwrap();
    let out = run_pincer(
        home.path(),
        &[
            "sessions",
            "import",
            transcript.to_str().unwrap(),
            "--key",
            "tau",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let before = std::fs::read(&file).unwrap();

    let out = run_pincer(
        home.path(),
        &["compact", "tau", "--context-window", "4096", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["contextEngine"]["resolved"], "legacy");
    assert_eq!(report["answeredBy"], "legacy");
    assert_eq!(report["ok"], true);
    assert_eq!(report["compacted"], true, "{report:#}");
    let result = &report["result"];
    let first_kept = result["firstKeptEntryId"].as_str().unwrap();
    assert!(result["tokensAfter"].as_u64().unwrap() < result["tokensBefore"].as_u64().unwrap());
    let after = std::fs::read(&file).unwrap();
    assert_eq!(&after[..before.len()], &before[..]);
    let added: Vec<&str> = std::str::from_utf8(&after[before.len()..])
        .unwrap()
        .lines()
        .collect();
    assert_eq!(added.len(), 1);
    let entry: Value = serde_json::from_str(added[0]).unwrap();
    assert_eq!(entry["type"], "compaction");
    assert_eq!(entry["firstKeptEntryId"], first_kept);
    assert_eq!(entry["summary"], result["summary"]);

    let out = run_pincer(home.path(), &["sessions", "context", "tau"]);
    let context: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(context["messages"][0]["role"], "compactionSummary");
    assert_eq!(context["messages"][0]["summary"], result["summary"]);

    // The index counts it.
    let out = run_pincer(home.path(), &["sessions", "list", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["compactionCount"], 1);

    // Text output, by path, on a session with one message: nothing to compact, exit 0.
    let tiny = home.path().join("tiny.jsonl");
    drop({
        let mut w = SessionWriter::create(&tiny, "/srv", Durability::None).unwrap();
        w.append_message(&Message::user("hi")).unwrap();
        w
    });
    let out = run_pincer(home.path(), &["compact", tiny.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("not compacted: Nothing to compact (session too small)"),
        "{text}"
    );

    // An unknown session: usage error naming what to give.
    let out = run_pincer(home.path(), &["compact", "no-such-session"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pincer sessions list"));
}

/// The runtime's compactor (what `legacy.compact` and `delegateCompactionToRuntime` reach):
/// a session named only by its key is found in the store; without a store it says what to
/// pass; a fired abort signal appends nothing; `force` off and a context under the threshold
/// is a benign skip.
#[test]
fn the_runtime_compactor_finds_sessions_by_key_and_honours_abort_and_force() {
    use pincer_host::compaction::SessionCompactor;
    use pincer_host::config::Config;
    use pincer_host::session::{JsonlStore, OnExisting, SessionStore};
    use pincer_host::testing::engines::request::{no_entry_ids, CompactRequest, HostInputs};
    use pincer_host::testing::engines::services::RuntimeCompactor;
    use pincer_plugin_api::abi::latest::AbortController;
    use std::sync::Arc;

    let dir = TempDir::new().unwrap();
    let store = JsonlStore::new(dir.path().join("agents"));
    let created = store
        .create(
            &"chat:1".parse().unwrap(),
            "/srv",
            Durability::None,
            OnExisting::Refuse,
        )
        .unwrap();
    let (summary, mut writer) = (created.summary, created.writer);
    for i in 0..6 {
        writer
            .append_message(&Message::user(format!("question {i} {}", "q".repeat(3000))))
            .unwrap();
        writer
            .append_message(&Message::assistant(format!(
                "answer {i} {}",
                "a".repeat(3000)
            )))
            .unwrap();
    }
    drop(writer);
    let request = |force: bool, budget: Option<u64>| {
        // No file, an id the store does not know: the key decides.
        let mut r = CompactRequest::manual(
            Arc::from("not-an-indexed-id"),
            Arc::from(""),
            Arc::from(Vec::new()),
            no_entry_ids(),
            HostInputs {
                session_key: Some(Arc::from("chat:1")),
                ..HostInputs::default()
            },
        );
        r.force = force;
        r.token_budget = budget;
        r
    };
    let compactor = SessionCompactor::from_config(&Config::default());
    let controller = AbortController::new();
    let no_store =
        request(true, None).with_abi(controller.signal(), |h| h, |p| compactor.compact(p));
    let no_store = no_store.unwrap();
    assert!(!no_store.ok && !no_store.compacted);
    assert!(no_store
        .reason
        .as_ref()
        .unwrap()
        .as_str()
        .contains("pass sessionFile"));

    let compactor = compactor.with_store(store.clone());
    let before = std::fs::read(&summary.session_file).unwrap();
    // Not forced, the window large: below the threshold, ok and not compacted.
    let skipped = request(false, Some(200_000))
        .with_abi(controller.signal(), |h| h, |p| compactor.compact(p))
        .unwrap();
    assert!(skipped.ok && !skipped.compacted);
    assert!(skipped
        .reason
        .as_ref()
        .unwrap()
        .as_str()
        .starts_with("below threshold"));
    // Aborted: an error, nothing appended.
    let fired = AbortController::new();
    fired.abort();
    let aborted =
        request(true, Some(4096)).with_abi(fired.signal(), |h| h, |p| compactor.compact(p));
    assert!(aborted.is_err());
    assert_eq!(std::fs::read(&summary.session_file).unwrap(), before);
    // Forced at a 4096 window: compacted, found by key.
    let done = request(true, Some(4096))
        .with_abi(controller.signal(), |h| h, |p| compactor.compact(p))
        .unwrap();
    assert!(done.ok && done.compacted, "{:?}", done.reason);
    let result = done.result.into_option().unwrap();
    assert!(result.tokens_after.into_option().unwrap() < result.tokens_before);
    let details: Value =
        serde_json::from_str(result.details_json.into_option().unwrap().as_str()).unwrap();
    assert_eq!(details, json!({"readFiles": [], "modifiedFiles": []}));
    assert_eq!(
        lines(&summary.session_file).len(),
        14,
        "header, 12 messages, 1 compaction"
    );
}

/// A compaction in the middle of a turn (the path ends on the user's message or on tool
/// results, as during overflow recovery) keeps the request the run resumes, in the summary's
/// `## Latest unresolved user request` block; after an answer it does not.
#[test]
fn a_compaction_inside_a_turn_keeps_the_unresolved_request() {
    let dir = tempfile::TempDir::new().unwrap();
    for (ends_open, name) in [(true, "open"), (false, "answered")] {
        let path = dir.path().join(format!("{name}.jsonl"));
        let mut writer = SessionWriter::create(&path, "/tmp", Durability::None).unwrap();
        for i in 0..30 {
            writer
                .append_message(&Message::user(format!(
                    "question {i}: {}",
                    "please ".repeat(60)
                )))
                .unwrap();
            writer
                .append_message(&Message::assistant(format!(
                    "answer {i}: {}",
                    "sure ".repeat(60)
                )))
                .unwrap();
        }
        writer
            .append_message(&Message::user("Rebook me on the 20th, same cabin."))
            .unwrap();
        if !ends_open {
            writer
                .append_message(&Message::assistant("Done: you are on the 20th."))
                .unwrap();
        }
        drop(writer);
        let done = compacted(compact_retrying(
            &path,
            &small_window(),
            &ExtractiveSummarizer,
            &options(true),
        ));
        let has_block = done.summary.contains("## Latest unresolved user request");
        assert_eq!(has_block, ends_open, "{name}: {}", done.summary);
        if ends_open {
            assert!(done.summary.contains("Rebook me on the 20th"));
        }
    }
}
