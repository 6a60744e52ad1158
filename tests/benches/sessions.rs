//! Sessions at the sizes OpenClaw 2026.9.6 was measured at (`docs/BENCHMARKS.md`):
//! open + parse + build the leaf's context of generated 1k, 10k and 100k-entry files, and
//! durable appends beside the fsync they cost (one writer; eight threads and eight async tasks
//! sharing a session through group commit), measured in one run.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pincer_host::session::{
    build_session_context, Durability, SessionTree, SessionWriter, SharedSessionWriter,
};
use pincer_plugin_api::abi::latest::Message;

fn open_and_context(c: &mut Criterion) {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("session-open-context");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    for entries in [1_000, 10_000, 100_000] {
        let path = dir.path().join(format!("s{entries}.jsonl"));
        let context = pincer_tests::generate_session(&tasks, entries, &path);
        let size = std::fs::metadata(&path).unwrap().len();
        eprintln!(
            "session of {entries} entries: {:.1} MiB, {context} context messages",
            size as f64 / (1 << 20) as f64
        );
        group.bench_with_input(BenchmarkId::from_parameter(entries), &path, |b, path| {
            b.iter(|| {
                let tree = SessionTree::read(path).unwrap();
                build_session_context(&tree, None).messages.len()
            })
        });
    }
    group.finish();
}

fn durable_appends(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let message = Message::user("Please change my flight to the 20th, same cabin.");
    let mut group = c.benchmark_group("session-append");
    group.sample_size(20);
    // The bound: one fdatasync of a file just appended to.
    let raw = dir.path().join("raw.bin");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&raw)
        .unwrap();
    group.bench_function("fdatasync-alone", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                std::io::Write::write_all(&mut file, b"{\"x\":1}\n").unwrap();
                file.sync_data().unwrap();
            }
            start.elapsed()
        })
    });
    for (name, durability) in [("entry", Durability::Entry), ("none", Durability::None)] {
        let path = dir.path().join(format!("{name}.jsonl"));
        let mut writer = SessionWriter::create(&path, "/srv/agent", durability).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| writer.append_message(&message).unwrap())
        });
    }
    // Eight writers sharing one session through group commit: time per append (the bound is
    // the fdatasync above ÷ 8).
    let path = dir.path().join("shared.jsonl");
    let shared = SharedSessionWriter::new(
        SessionWriter::create(&path, "/srv/agent", Durability::Entry).unwrap(),
    )
    .unwrap();
    group.bench_function("entry-8-writers-group-commit", |b| {
        b.iter_custom(|iters| {
            let per_thread = iters.div_ceil(8);
            let start = Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..8 {
                    scope.spawn(|| {
                        for _ in 0..per_thread {
                            shared.append_message(&message).unwrap();
                        }
                    });
                }
            });
            start.elapsed() * iters as u32 / (per_thread * 8) as u32
        })
    });
    // The same through async appends: eight tasks on a two-thread runtime, a gateway's shape.
    let path = dir.path().join("shared-async.jsonl");
    let shared = std::sync::Arc::new(
        SharedSessionWriter::new(
            SessionWriter::create(&path, "/srv/agent", Durability::Entry).unwrap(),
        )
        .unwrap(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    group.bench_function("entry-8-tasks-group-commit", |b| {
        b.iter_custom(|iters| {
            let per_task = iters.div_ceil(8);
            let start = Instant::now();
            runtime.block_on(async {
                let tasks: Vec<_> = (0..8)
                    .map(|_| {
                        let (shared, message) = (shared.clone(), message.clone());
                        tokio::spawn(async move {
                            for _ in 0..per_task {
                                shared.append_message_async(&message).await.unwrap();
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
            });
            start.elapsed() * iters as u32 / (per_task * 8) as u32
        })
    });
    group.finish();
}

criterion_group!(benches, open_and_context, durable_appends);
criterion_main!(benches);
