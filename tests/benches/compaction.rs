//! One full compaction of a 100k-entry session with the offline summarizer: open
//! the file (lock, read, parse), prepare (the context's estimate, the cut), summarise with the
//! extractive summariser, append the `compaction` entry and build the context after it. Each
//! sample compacts a fresh copy of the same generated session (the copy is set-up, not
//! measured).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use pincer_host::compaction::{
    compact_session, CompactOptions, CompactOutcome, CompactionSettings, ExtractiveSummarizer,
};
use pincer_host::config::CompactionConfig;
use pincer_host::session::Durability;

fn full_compaction(c: &mut Criterion) {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("s100k.jsonl");
    let context = pincer_tests::generate_session(&tasks, 100_000, &source);
    eprintln!(
        "session of 100000 entries: {:.1} MiB, {context} context messages",
        std::fs::metadata(&source).unwrap().len() as f64 / (1 << 20) as f64
    );
    let settings = CompactionSettings::from_config(&CompactionConfig::default());
    let options = CompactOptions {
        force: true,
        durability: Durability::None,
        ..CompactOptions::default()
    };
    let copy = dir.path().join("copy.jsonl");
    let mut group = c.benchmark_group("compaction");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.bench_function(
        "one full compaction of a 100k-entry session with the offline summarizer",
        |b| {
            b.iter_batched(
                || std::fs::copy(&source, &copy).unwrap(),
                |_| {
                    let outcome =
                        compact_session(&copy, &settings, &ExtractiveSummarizer, &options).unwrap();
                    assert!(matches!(outcome, CompactOutcome::Compacted(_)));
                },
                BatchSize::PerIteration,
            )
        },
    );
    group.finish();
}

criterion_group!(benches, full_compaction);
criterion_main!(benches);
