//! The engine as a host drives it: created through the library's exported entry point and
//! called through the ABI object (`pincer_plugin_api::testing`), its database a real file
//! that each test opens again with SQLite to see what was stored.

use lossless::Lossless;
use pincer_plugin_api::testing::{Assembled, CompactOptions, Conversation, TestEngine, TestHost};
use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{ContentBlock, Message, Role};
use serde_json::{json, Value};

struct Fixture {
    engine: TestEngine,
    host: TestHost,
    db: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn fixture(config: Value) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lossless.db");
    let mut config = config;
    config["databasePath"] = json!(db.to_string_lossy());
    let host = TestHost::new();
    let engine = TestEngine::new::<Lossless>(&host, config).expect("engine created");
    Fixture {
        engine,
        host,
        db,
        _dir: dir,
    }
}

/// `(seq, entry_id, role, json)` of every stored message, in seq order, read by SQLite itself.
fn stored(db: &std::path::Path) -> Vec<(i64, Option<String>, String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT seq, entry_id, role, json FROM messages ORDER BY seq")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn tool(engine: &TestEngine, name: &str, args: Value) -> Value {
    let (content, is_error) = engine.call_tool(name, args).expect("callTool answers");
    assert!(!is_error, "{name} failed: {content}");
    serde_json::from_str(&content).expect("tool answers are JSON")
}

/// A τ-bench-like conversation: turns of user text, parallel tool calls with reused ids and
/// results in another order, answers. Turn 0 plants a fact.
fn conversation(turns: usize) -> Conversation {
    let mut c = Conversation::new();
    for t in 0..turns {
        let user = if t == 0 {
            "My reservation is QX7PLANT and my cat is called Marzipan. ".repeat(3)
        } else {
            format!("Turn {t}: please check flight HAT{t:03} and the weather in Denver. ").repeat(4)
        };
        c = c.user(&user);
        c = c.message(Message::assistant_blocks(vec![
            ContentBlock::tool_call("call_1", "search", &json!({"flight": format!("HAT{t:03}")})),
            ContentBlock::tool_call("call_2", "weather", &json!({"city": "Denver"})),
        ]));
        c = c.tool_result(
            "call_2",
            "weather",
            &format!("Denver sunny {t} ").repeat(20),
        );
        c = c.tool_result(
            "call_1",
            "search",
            &format!("HAT{t:03} departs 10:{:02} gate B{t} ", t % 60).repeat(25),
        );
        c = c.assistant(&format!("Flight HAT{t:03} is on time; Denver is sunny. ").repeat(3));
    }
    c
}

/// Checks what a model provider would reject: a result without its call right before, a call
/// without every result.
fn assert_tool_pairs(messages: &[Message]) {
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        match m.role() {
            Role::ToolResult => {
                let id = m.tool_result_id().unwrap().to_owned();
                let at = open
                    .iter()
                    .position(|o| *o == id)
                    .unwrap_or_else(|| panic!("result {id} without its call"));
                open.remove(at);
            }
            _ => {
                assert!(open.is_empty(), "calls {open:?} without results");
                open = m.tool_call_ids().map(str::to_owned).collect();
            }
        }
    }
    assert!(open.is_empty(), "calls {open:?} without results at the end");
}

/// `compact` as the host calls it with `budget`.
fn compact(f: &Fixture, c: &Conversation, budget: u64) -> pincer_plugin_api::CompactResult {
    f.engine
        .compact_with(
            c,
            CompactOptions {
                token_budget: Some(budget),
                ..Default::default()
            },
        )
        .unwrap()
}

fn tokens(assembled: &Assembled) -> u64 {
    assembled.messages.iter().map(estimate_message_tokens).sum()
}

/// Runs the conversation turn by turn as a host would: assemble the history, then afterTurn
/// with the snapshot, then maintain. Returns each turn's assembly.
fn drive(f: &Fixture, c: &Conversation, budget: u64) -> Vec<Assembled> {
    let mut out = Vec::new();
    let turn_starts: Vec<usize> = (0..c.len())
        .filter(|&i| c.messages()[i].role() == Role::User)
        .collect();
    for (n, &start) in turn_starts.iter().enumerate() {
        let end = turn_starts.get(n + 1).copied().unwrap_or(c.len());
        let history = prefix(c, start);
        out.push(
            f.engine
                .assemble(&history, Some(budget))
                .expect("assembled"),
        );
        f.engine
            .after_turn(&prefix(c, end), start)
            .expect("afterTurn");
        f.engine.maintain("turn").expect("maintain");
    }
    out
}

fn prefix(c: &Conversation, len: usize) -> Conversation {
    (0..len).fold(Conversation::new(), |acc, i| {
        acc.message_with_entry(c.messages()[i].clone(), c.entry_id(i))
    })
}

#[test]
fn every_message_is_stored_once_in_order_whatever_is_sent_twice() {
    let f = fixture(json!({}));
    let c = conversation(6);
    f.engine.after_turn(&prefix(&c, 10), 0).unwrap();
    f.engine.after_turn(&prefix(&c, 10), 5).unwrap(); // the same snapshot again
    f.engine.ingest_batch(&c).unwrap(); // everything, overlapping
    f.engine.ingest(&c.messages()[3], c.entry_id(3)).unwrap(); // one old message again
    let rows = stored(&f.db);
    assert_eq!(rows.len(), c.len(), "each message exactly once");
    for (i, (seq, entry, _, json)) in rows.iter().enumerate() {
        assert_eq!(*seq, i as i64);
        assert_eq!(entry.as_deref(), c.entry_id(i), "in the host's order");
        assert_eq!(
            serde_json::from_str::<Value>(json).unwrap(),
            c.messages()[i].to_value()
        );
    }
}

#[test]
fn without_entry_ids_a_reused_tool_call_id_is_not_an_identity() {
    let f = fixture(json!({}));
    // τ-bench reuses call ids: same id, same tool, different results are different messages.
    let a = Message::tool_result("call_1", "search", "first answer", false);
    let b = Message::tool_result("call_1", "search", "second answer", false);
    assert!(f.engine.ingest(&a, None).unwrap().ingested);
    assert!(f.engine.ingest(&b, None).unwrap().ingested);
    assert!(
        !f.engine.ingest(&b, None).unwrap().ingested,
        "a retried ingest is a duplicate"
    );
    assert_eq!(stored(&f.db).len(), 2);
}

#[test]
fn compaction_converges_with_a_stop_reason_and_never_claims_work_it_did_not_do() {
    let f = fixture(json!({"summarizer": "offline"}));
    let c = conversation(30);
    f.engine.after_turn(&c, 0).unwrap();
    let budget = 3_000;
    f.engine.assemble(&c, Some(budget)).unwrap(); // the budget compaction plans with
    let first = compact(&f, &c, budget);
    assert!(first.is_compacted(), "{:?}", first.reason());
    let (before, after) = first.tokens().unwrap();
    assert!(after.unwrap() < before);
    // Again and again: each call either writes nodes or says why not; it never loops.
    let mut reasons = Vec::new();
    for _ in 0..5 {
        let again = compact(&f, &c, budget);
        if !again.is_compacted() {
            reasons.push(again.reason().unwrap().to_owned());
        }
    }
    assert!(!reasons.is_empty());
    for reason in &reasons {
        assert!(
            reason.starts_with("budget_met")
                || reason.starts_with("no_candidate")
                || reason.starts_with("no_progress"),
            "{reason}"
        );
    }
    // Every message is still there, exactly once.
    assert_eq!(stored(&f.db).len(), c.len());
}

#[test]
fn an_irreducible_tail_stops_with_no_candidate_and_no_loop() {
    let f = fixture(json!({"summarizer": "offline"}));
    let huge = "an enormous paste ".repeat(5_000);
    let c = Conversation::new().user(&huge);
    f.engine.after_turn(&c, 0).unwrap();
    for _ in 0..3 {
        let result = f
            .engine
            .compact_with(
                &c,
                CompactOptions {
                    token_budget: Some(1_000),
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(!result.is_compacted());
        assert!(
            result.reason().unwrap().starts_with("no_candidate"),
            "{:?}",
            result.reason()
        );
    }
    assert_eq!(f.host.delegated_compactions(), 0);
    // A measured overflow that no pass can reduce is inside the current turn, which only the
    // host can split: the engine hands that one to the runtime compaction.
    f.engine
        .compact_with(
            &c,
            CompactOptions {
                token_budget: Some(4_096),
                current_token_count: Some(30_000),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(f.host.delegated_compactions(), 1);
    // The assembly keeps the one message (the model must see the turn) and says it may overflow.
    let assembled = f.engine.assemble(&c, Some(1_000)).unwrap();
    assert_eq!(assembled.messages.len(), 1);
    assert!(assembled.may_overflow);
}

#[test]
fn assembly_fits_the_budget_keeps_tool_pairs_and_keeps_its_prefix_between_compactions() {
    let f = fixture(json!({"summarizer": "offline"}));
    let c = conversation(40);
    let budget = 2_500;
    let turns = drive(&f, &c, budget);
    let mut compared = 0;
    let mut stable = 0;
    for (n, assembled) in turns.iter().enumerate() {
        assert!(
            tokens(assembled) <= budget,
            "turn {n}: {} > {budget}",
            tokens(assembled)
        );
        assert_eq!(
            assembled.estimated_tokens,
            Some(tokens(assembled)),
            "honest estimate"
        );
        assert_tool_pairs(&assembled.messages);
        // Summaries first, then host messages in order.
        let first_raw = assembled
            .kept_indices
            .iter()
            .position(Option::is_some)
            .unwrap_or(assembled.kept_indices.len());
        assert!(assembled.kept_indices[first_raw..]
            .iter()
            .all(Option::is_some));
        let kept: Vec<usize> = assembled.kept_indices.iter().flatten().copied().collect();
        assert!(
            kept.windows(2).all(|w| w[1] == w[0] + 1),
            "raw messages contiguous"
        );
        if n > 0 {
            let previous = &turns[n - 1];
            let summaries_same = previous
                .messages
                .iter()
                .zip(&assembled.messages)
                .take_while(|(a, b)| a == b)
                .count();
            compared += 1;
            if summaries_same == previous.messages.len() {
                stable += 1;
            }
        }
    }
    let stats = tool(&f.engine, "lcm_stats", json!({}));
    let share = stats["prefixStability"]["share"].as_f64().unwrap();
    let after_compaction = stats["prefixStability"]["afterCompaction"]
        .as_i64()
        .unwrap();
    eprintln!("prefix stability: {stable}/{compared} turns overall; {share:.3} excluding {after_compaction} turns after a compaction");
    assert!(
        after_compaction > 0,
        "the conversation outgrew the budget: {stats}"
    );
    assert!(share >= 0.9, "{stats}");
    assert!(stats["summaries"].as_i64().unwrap() > 0);
    // The engine's own count agrees with what the prompts show.
    assert_eq!(
        compared as i64,
        stats["prefixStability"]["assemblies"].as_i64().unwrap() - 1
    );
    assert!(stats["prefixStability"]["stable"].as_i64().unwrap() <= stable as i64);
}

#[test]
fn a_planted_fact_is_found_by_grep_and_expanded_back_to_its_original_text() {
    let f = fixture(json!({"summarizer": "offline"}));
    let c = conversation(30);
    drive(&f, &c, 2_000);
    let hits = tool(&f.engine, "lcm_grep", json!({"query": "Marzipan"}));
    let matches = hits["matches"].as_array().unwrap();
    let message = matches
        .iter()
        .find(|m| m["kind"] == "message")
        .expect("the message matches");
    assert!(message["snippet"].as_str().unwrap().contains("[Marzipan]"));
    // The message is covered by a summary: describe shows the summary, expand its originals.
    let id = message["id"].as_str().unwrap();
    let described = tool(&f.engine, "lcm_describe", json!({"id": id}));
    let summary = described["parents"][0]
        .as_str()
        .expect("summarized by a leaf")
        .to_owned();
    let node = tool(&f.engine, "lcm_describe", json!({"id": summary}));
    assert_eq!(node["depth"], 0);
    assert!(node["covers"].as_array().unwrap().iter().any(|m| m == id));
    assert!(node["text"]
        .as_str()
        .unwrap()
        .contains("Expand for details about: "));
    let mut page = 0;
    let mut originals = Vec::new();
    loop {
        let expanded = tool(
            &f.engine,
            "lcm_expand",
            json!({"id": summary, "page": page}),
        );
        originals.extend(expanded["messages"].as_array().unwrap().iter().cloned());
        match expanded.get("nextPage") {
            Some(next) => page = next.as_u64().unwrap() as usize,
            None => break,
        }
    }
    assert_eq!(originals.len(), node["covers"].as_array().unwrap().len());
    let planted = originals.iter().find(|m| m["id"] == id).unwrap();
    assert_eq!(
        planted["message"],
        c.messages()[0].to_value(),
        "the original, byte for byte"
    );
    // The DAG: once condensed, a leaf has a parent whose children include it.
    let stats = tool(&f.engine, "lcm_stats", json!({}));
    if stats["summariesByDepth"].get("1").is_some() {
        let leaf = tool(&f.engine, "lcm_describe", json!({"id": summary}));
        let parent = leaf["parents"][0].as_str().unwrap();
        let up = tool(&f.engine, "lcm_describe", json!({"id": parent}));
        assert!(up["children"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == summary.as_str()));
    }
}

#[test]
fn tools_refuse_bad_arguments_and_unknown_ids_with_a_clear_message() {
    let f = fixture(json!({}));
    f.engine.after_turn(&conversation(1), 0).unwrap();
    for (name, args, expected) in [
        ("lcm_expand", json!({"id": "s999"}), "no s999"),
        ("lcm_describe", json!({"id": "x1"}), "ids look like s12"),
        ("lcm_grep", json!({"query": "   "}), "query is empty"),
        ("lcm_grep", json!({"q": "x"}), "bad arguments"),
        ("lcm_nope", json!({}), "has no tool"),
    ] {
        let (content, is_error) = f.engine.call_tool(name, args).unwrap();
        assert!(is_error, "{name}");
        assert!(content.contains(expected), "{name}: {content}");
    }
    // FTS syntax in a query is text, not an error.
    let hits = tool(
        &f.engine,
        "lcm_grep",
        json!({"query": "NEAR( \"Marzipan* OR"}),
    );
    assert!(hits["matches"].is_array());
}

#[test]
fn the_hosts_model_summarises_when_it_has_one_with_untrusted_framing() {
    let f =
        fixture(json!({"summarizer": "auto", "freshTailMessages": 2, "leafChunkTokens": 100000}));
    f.host
        .reply_with("They discussed QX7PLANT.\nExpand for details about: QX7PLANT");
    let c = conversation(6);
    f.engine.after_turn(&c, 0).unwrap();
    f.engine.assemble(&c, Some(2_000)).unwrap();
    let result = f
        .engine
        .compact_with(
            &c,
            CompactOptions {
                token_budget: Some(2_000),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(result.is_compacted());
    let requests = f.host.model_requests();
    assert!(!requests.is_empty());
    let body = requests[0][0].plain_text();
    assert!(body.contains("<conversation-data>"), "{body}");
    assert!(result.summary().is_some());
    let hits = tool(&f.engine, "lcm_grep", json!({"query": "They discussed"}));
    assert!(
        hits["matches"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["kind"] == "summary"),
        "{hits}"
    );
}

#[test]
fn a_database_from_a_newer_engine_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lossless.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let host = TestHost::new();
    let err = TestEngine::new::<Lossless>(&host, json!({"databasePath": db})).unwrap_err();
    assert!(
        err.message().contains("schema version 99"),
        "{}",
        err.message()
    );
    let err = TestEngine::new::<Lossless>(&host, json!({"compactTarget": 0.9})).unwrap_err();
    assert!(err.message().contains("compactTarget"), "{}", err.message());
}

#[test]
fn maintain_moves_large_payloads_to_files_and_expand_reads_them_back() {
    let f = fixture(json!({"largePayloadChars": 1000}));
    let big = "row ".repeat(2_000);
    let c = Conversation::new()
        .user("fetch")
        .tool_call("c1", "dump", json!({}))
        .tool_result("c1", "dump", &big);
    f.engine.after_turn(&c, 0).unwrap();
    let report = f.engine.maintain("turn").unwrap();
    assert_eq!(report.rewritten_entries, 1);
    assert!(report.bytes_freed > 7_000, "{report:?}");
    let rows = stored(&f.db);
    assert!(rows[2].3.len() < 1_000, "the row keeps a reference");
    let expanded = tool(&f.engine, "lcm_expand", json!({"id": "m3"}));
    assert_eq!(
        expanded["messages"][0]["message"],
        c.messages()[2].to_value()
    );
    let again = f.engine.maintain("turn").unwrap();
    assert_eq!(
        (again.rewritten_entries, again.bytes_freed),
        (0, 0),
        "honest: nothing more to do"
    );
}
