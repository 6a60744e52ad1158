//! The token estimate (`tokens::estimate_tokens`) per message, before and after its fast path,
//! side by side in one run: every τ-bench airline message converted with the golden data's
//! mapping (3,834 messages, about 260 chars of text each, 67 of them with non-ASCII text), and
//! the golden data's own strings (CJK, kana, emoji, weighted punctuation) as one message each.
//!
//! Before measuring, both implementations must agree on every one of those messages and on
//! every golden message case: the benchmark panics otherwise. `before` is the implementation of
//! commit 8710702 (`support/before.rs`). A synthetic airline conversation stands in when the
//! shared data is not on disk.
//!
//! `cargo bench -p pincer-plugin-api --bench tokens`; criterion's figure is for the whole set,
//! divide by the message count in the group's name for ns per message. With
//! `--features tiktoken`, also what `preload` of an already-built encoding costs.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pincer_plugin_api::interop::openai_chat_messages;
use pincer_plugin_api::tokens::{estimate_message_tokens, estimate_tokens};
use pincer_plugin_api::Message;
use serde_json::Value;

#[path = "support/before.rs"]
mod before;

fn shared(file: &str) -> Option<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(file);
    let text = std::fs::read_to_string(&path).ok()?;
    Some(serde_json::from_str(&text).expect("json"))
}

/// Every τ-bench airline message, in OpenClaw's shape.
fn tau_messages() -> Vec<Message> {
    let Some(tasks) = shared("tau-bench-airline/gpt-4o-airline.shared.json") else {
        eprintln!("notice: τ-bench data not found; using a synthetic conversation");
        return (0..3_000)
            .map(|i| match i % 3 {
                0 => Message::user(format!(
                    "Please change reservation R{i} to May {}.",
                    i % 28 + 1
                )),
                1 => {
                    Message::assistant(format!("Reservation R{i} is on HAT{i:03}. Anything else?"))
                }
                _ => Message::tool_result(
                    format!("call_{i}"),
                    "get_reservation_details",
                    "{\"status\":\"ok\"}",
                    false,
                ),
            })
            .collect();
    };
    tasks
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|task| {
            openai_chat_messages(task["traj"].as_array().map_or(&[][..], Vec::as_slice))
        })
        .collect()
}

/// The golden strings as user messages, and the golden message cases.
fn golden_messages() -> (Vec<Message>, Vec<Message>) {
    let Some(golden) = shared("openclaw-golden/estimate-tokens.json") else {
        return (Vec::new(), Vec::new());
    };
    let strings = golden["strings"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, case)| Message::user(case["text"].as_str().expect("text")))
        .collect();
    let cases = golden["messages"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, case)| Message::from_value(case["message"].clone()).expect("message"))
        .collect();
    (strings, cases)
}

fn assert_same(what: &str, messages: &[Message]) {
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(
            estimate_message_tokens(m),
            before::estimate_message_tokens(m),
            "{what} message {i}: {m:?}"
        );
    }
}

fn bench_estimate(c: &mut Criterion) {
    let tau = tau_messages();
    let (strings, cases) = golden_messages();
    assert_same("τ-bench", &tau);
    assert_same("golden string", &strings);
    assert_same("golden case", &cases);
    eprintln!(
        "checked: before and after agree on {} τ-bench messages, {} golden strings, {} golden cases",
        tau.len(),
        strings.len(),
        cases.len()
    );

    for (name, messages) in [("tau", &tau), ("golden-strings", &strings)] {
        if messages.is_empty() {
            continue;
        }
        let mut group = c.benchmark_group(format!("estimate-tokens/{name}/{}", messages.len()));
        group.throughput(Throughput::Elements(messages.len() as u64));
        group.bench_function("before", |b| {
            b.iter(|| {
                black_box(
                    black_box(messages.as_slice())
                        .iter()
                        .map(before::estimate_message_tokens)
                        .sum::<u64>(),
                )
            })
        });
        group.bench_function("after", |b| {
            b.iter(|| black_box(estimate_tokens(black_box(messages.as_slice()))))
        });
        group.finish();
    }
}

/// With `tiktoken`: an encoding is built once per process and shared, so `preload` after the
/// first build costs nothing worth measuring (it was a test's < 50 ms bound; here it is a figure).
/// The first build's time is printed once (45–100 ms in a release build).
#[cfg(feature = "tiktoken")]
fn bench_preload(c: &mut Criterion) {
    use pincer_plugin_api::tokens::tiktoken::Encoding;
    let start = std::time::Instant::now();
    Encoding::O200kBase.preload();
    eprintln!("o200k_base: first build {:?}", start.elapsed());
    c.bench_function("tiktoken/preload-built/o200k_base", |b| {
        b.iter(|| Encoding::O200kBase.preload())
    });
}

#[cfg(not(feature = "tiktoken"))]
fn bench_preload(_: &mut Criterion) {}

criterion_group!(benches, bench_estimate, bench_preload);
criterion_main!(benches);
