//! `cargo bench -p lossless`: the engine's costs on a real database file.
//!
//! - `ingest_durable`: one message through `ingest` (the ABI path), committed with WAL and
//!   `synchronous = FULL` before it returns;
//! - `assemble/{1k,10k,100k}`: `assemble` over that many stored messages, all but the newest
//!   60 covered by leaf summaries of 100 messages, under a 3000-token budget;
//! - `leaf_pass`, `condensed_pass`: one pass with the offline summariser;
//! - the store's size per 1k messages is printed (not a timing).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use lossless::compaction::{context_tokens, Policy, Run};
use lossless::store::{Incoming, Store};
use lossless::summarize::Mode;
use lossless::Lossless;
use pincer_plugin_api::testing::{Conversation, TestEngine, TestHost};
use pincer_plugin_api::{ContentBlock, Message};
use serde_json::json;

/// Message `i` of a τ-bench-like conversation (user, call, result, answer).
fn message(i: usize) -> Message {
    match i % 4 {
        0 => Message::user(format!("Please look up reservation ZQ{i:05} for the flight to Denver next week.")),
        1 => Message::assistant_blocks(vec![ContentBlock::tool_call(
            format!("call_{i}"),
            "get_reservation_details",
            &json!({"reservation_id": format!("ZQ{i:05}")}),
        )]),
        2 => Message::tool_result(
            format!("call_{}", i - 1),
            "get_reservation_details",
            format!("{{\"reservation_id\":\"ZQ{i:05}\",\"origin\":\"JFK\",\"destination\":\"DEN\",\"flights\":[{{\"flight_number\":\"HAT{:03}\",\"date\":\"2024-05-{:02}\",\"price\":{}}}],\"cabin\":\"economy\",\"passengers\":2}}", i % 300, i % 28 + 1, 100 + i % 400),
            false,
        ),
        _ => Message::assistant(format!("Reservation ZQ{:05} flies JFK to DEN in economy for two passengers.", i - 3)),
    }
}

fn conversation(n: usize) -> Conversation {
    (0..n).fold(Conversation::new(), |c, i| c.message(message(i)))
}

/// A store (in memory for `None`) holding every message of `c` as conversation
/// `test-session` (the test engine's session).
fn stored(path: Option<&std::path::Path>, c: &Conversation) -> (Store, i64) {
    let store = Store::open(path).unwrap();
    let id = store.conversation("test-session").unwrap();
    let incoming: Vec<Incoming<'_>> = (0..c.len())
        .map(|i| Incoming {
            message: &c.messages()[i],
            entry_id: c.entry_id(i),
        })
        .collect();
    store.ingest(id, &incoming).unwrap();
    (store, id)
}

/// A store at `path` holding `n` messages of conversation `test-session` (the test engine's
/// session), all but the newest 60 under leaf summaries of 100 messages each.
fn populate(path: &std::path::Path, c: &Conversation, summarised: bool) {
    let (store, conversation) = stored(Some(path), c);
    if summarised {
        let covered = c.len().saturating_sub(60) as i64 / 100 * 100;
        for first in (0..covered).step_by(100) {
            store
                .insert_leaf(conversation, first..=first + 99, "summary of 100 messages: reservations ZQ…, flights HAT…\nExpand for details about: ZQ, HAT", 30, 2_000, "normal")
                .unwrap();
        }
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();

    // Store size per 1k messages.
    let thousand = conversation(1_000);
    let size_db = dir.path().join("size.db");
    populate(&size_db, &thousand, false);
    {
        let store = Store::open(Some(&size_db)).unwrap();
        store.index_pending().unwrap();
        store
            .with(|conn| {
                conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                    .map_err(|e| pincer_plugin_api::EngineError::failed(e.to_string()))
            })
            .unwrap();
    }
    let bytes = std::fs::metadata(&size_db).unwrap().len();
    let raw: usize = thousand
        .messages()
        .iter()
        .map(|m| m.to_value().to_string().len())
        .sum();
    eprintln!("store size per 1k messages: {bytes} bytes in the database (messages, parts, full-text index) for {raw} bytes of message JSON");

    let host = TestHost::new();
    let ingest_db = dir.path().join("ingest.db");
    let engine = TestEngine::new::<Lossless>(&host, json!({"databasePath": ingest_db})).unwrap();
    let mut i = 0usize;
    c.bench_function("ingest_durable", |b| {
        b.iter(|| {
            i += 1;
            let entry = format!("b{i}");
            black_box(engine.ingest(&message(i), Some(&entry)).unwrap());
        });
    });

    let mut group = c.benchmark_group("assemble");
    for (name, n) in [("1k", 1_000), ("10k", 10_000), ("100k", 100_000)] {
        let conv = conversation(n);
        let db = dir.path().join(format!("assemble-{name}.db"));
        populate(&db, &conv, true);
        let engine = TestEngine::new::<Lossless>(&host, json!({"databasePath": db})).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| black_box(engine.assemble(&conv, Some(3_000)).unwrap()));
        });
    }
    group.finish();

    let policy = Policy {
        fresh_tail_messages: 8,
        fresh_tail_max_tokens: 500,
        leaf_chunk_tokens: 600,
        condense_fan_in: 4,
        mode: Mode::Offline,
    };
    let pass_conv = conversation(200);
    c.bench_function("leaf_pass", |b| {
        b.iter_batched(
            || {
                let (store, id) = stored(None, &pass_conv);
                (store, id)
            },
            |(store, id)| {
                let run = Run {
                    store: &store,
                    host: None,
                    conversation: id,
                    policy,
                    instructions: None,
                };
                let target = context_tokens(&store, id).unwrap() - 1;
                let outcome = run.until(target).unwrap();
                assert_eq!(outcome.passes.len(), 1);
                black_box(outcome)
            },
            BatchSize::PerIteration,
        );
    });
    c.bench_function("condensed_pass", |b| {
        b.iter_batched(
            || {
                let (store, id) = stored(None, &pass_conv);
                let text = "- m1 user: Please look up reservation ZQ00001 for the flight to Denver next week.\n".repeat(6);
                for k in 0..4 {
                    store.insert_leaf(id, k * 40..=k * 40 + 39, &text, 150, 1_500, "normal").unwrap();
                }
                (store, id)
            },
            |(store, id)| {
                let run = Run { store: &store, host: None, conversation: id, policy, instructions: None };
                let target = context_tokens(&store, id).unwrap() - 1;
                let outcome = run.until(target).unwrap();
                assert_eq!(outcome.passes[0].kind, "condensed");
                black_box(outcome)
            },
            BatchSize::PerIteration,
        );
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
