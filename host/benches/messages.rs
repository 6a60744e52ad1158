//! What the lossless message model costs: reading and writing OpenClaw message JSON as
//! [`Message`] (typed fields, unknown keys kept) against doing the same with a plain
//! `serde_json::Value` (the least any lossless reader must do), side by side in one run, on
//! every τ-bench airline message converted with the golden data's mapping (about 5,400
//! messages); a synthetic airline conversation when the shared data is not on disk. Also the
//! token estimate over the same messages (OpenClaw's measured 400–550 ns per message).

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pincer_plugin_api::interop::openai_chat_to_openclaw;
use pincer_plugin_api::Message;
use serde_json::Value;

/// One JSON text per message.
fn corpus() -> Vec<String> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/tau-bench-airline/gpt-4o-airline.shared.json");
    let mut out = Vec::new();
    if let Ok(text) = std::fs::read_to_string(&data) {
        let tasks: Value = serde_json::from_str(&text).expect("json");
        for task in tasks.as_array().into_iter().flatten() {
            for (i, m) in task["traj"].as_array().into_iter().flatten().enumerate() {
                if let Some(v) = openai_chat_to_openclaw(m, i) {
                    out.push(v.to_string());
                }
            }
        }
    } else {
        eprintln!(
            "notice: {} not found; using a synthetic conversation",
            data.display()
        );
        for i in 0..5_000 {
            let m = match i % 3 {
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
            };
            out.push(serde_json::to_string(&m).expect("json"));
        }
    }
    out
}

fn bench_messages(c: &mut Criterion) {
    let texts = corpus();
    let bytes: usize = texts.iter().map(String::len).sum();
    let values: Vec<Value> = texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    let messages: Vec<Message> = texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();

    let mut group = c.benchmark_group(format!("messages/{}", texts.len()));
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("read-value", |b| {
        b.iter(|| {
            for t in &texts {
                black_box(serde_json::from_str::<Value>(black_box(t)).unwrap());
            }
        })
    });
    group.bench_function("read-message", |b| {
        b.iter(|| {
            for t in &texts {
                black_box(serde_json::from_str::<Message>(black_box(t)).unwrap());
            }
        })
    });
    group.bench_function("write-value", |b| {
        b.iter(|| {
            for v in &values {
                black_box(serde_json::to_string(black_box(v)).unwrap());
            }
        })
    });
    group.bench_function("write-message", |b| {
        b.iter(|| {
            for m in &messages {
                black_box(serde_json::to_string(black_box(m)).unwrap());
            }
        })
    });
    group.bench_function("estimate-tokens", |b| {
        b.iter(|| {
            black_box(pincer_plugin_api::tokens::estimate_tokens(black_box(
                &messages,
            )))
        })
    });
    group.bench_function("clone-value", |b| b.iter(|| black_box(values.clone())));
    group.bench_function("clone-message", |b| b.iter(|| black_box(messages.clone())));
    group.finish();
}

criterion_group!(benches, bench_messages);
criterion_main!(benches);
