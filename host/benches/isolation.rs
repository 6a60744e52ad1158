//! What isolation costs: the `sliding-window` engine of one staged library called in process
//! and in a worker process (`isolation: "process"`), side by side in one run.
//!
//! - `isolation/empty-call`: the round trip of an empty call to a worker (a frame each way on
//!   a lane; nothing in process).
//! - `isolation/assemble/{in-process,isolated}/N`: `assemble` of an N-message session held by
//!   the host, with entry ids, as a turn makes it: the worker holds the session's messages
//!   from the first call on and each later call sends only what changed (here nothing), so the
//!   isolated cost is the round trip, the entry-id comparison and the result's frame.
//! - `isolation/assemble-growing/isolated/N`: the same with one new message per call (a turn).
//! - `isolation/worker-start`: starting a worker (spawn, handshake, confinement, `dlopen`,
//!   factory, `info`) and ending it.
//!
//! The resident memory of a worker (after a 10k-message `assemble`) is printed to stderr.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pincer_host::config::Isolation;
use pincer_host::testing::engines::isolation::settings::Confinement;
use pincer_host::testing::engines::services::{HostServices, NoRuntimeCompaction};
use pincer_host::testing::plugins::library::{EngineDirs, LoadedLibrary, Loader};
use pincer_host::EngineInstance;
use pincer_plugin_abi::latest::{AbortController, AssembleParams, EntryId, HostParams};
use pincer_plugin_abi::{ROption, RSlice, RStr};
use pincer_plugin_api::Message;

mod common;
use common::{conversation, staged_dir};

fn services() -> HostServices {
    HostServices::new("sliding-window", Arc::new(NoRuntimeCompaction), None)
}

fn load(cache: &std::path::Path, isolation: Isolation) -> Arc<LoadedLibrary> {
    Loader::new(cache.to_owned())
        .with_isolation(isolation, [])
        .load(&staged_dir())
        .expect("staged sliding-window loads: run `cargo xtask bench`")
}

fn in_process(library: &Arc<LoadedLibrary>, budget: u64) -> EngineInstance {
    EngineInstance::from_library(
        library,
        "sliding-window",
        &serde_json::json!({ "tokenBudget": budget }),
        &EngineDirs::default(),
        services().into_abi(),
        &pincer_host::config::ResultLimits::default(),
    )
    .unwrap()
}

fn isolated(library: &Arc<LoadedLibrary>, budget: u64) -> EngineInstance {
    EngineInstance::from_isolated_library(
        library,
        "sliding-window",
        &serde_json::json!({ "tokenBudget": budget }),
        &EngineDirs::default(),
        services().into_abi(),
        Confinement {
            sandbox: true,
            ..Confinement::default()
        },
        &pincer_host::config::ResultLimits::default(),
    )
    .expect("the worker starts: build the pincer binary (cargo xtask bench does)")
}

fn ids(n: usize) -> Vec<EntryId> {
    (0..n).map(|i| EntryId::new(format!("e{i:08x}"))).collect()
}

fn params<'a>(
    messages: &'a [Message],
    ids: &'a [EntryId],
    abort: &'a AbortController,
) -> AssembleParams<'a> {
    AssembleParams {
        session_id: RStr::from_str("bench"),
        messages: RSlice::from_slice(messages),
        entry_ids: RSlice::from_slice(ids),
        token_budget: ROption::RNone,
        available_tools: RSlice::from_slice(&[]),
        citations_mode: ROption::RNone,
        model: ROption::RNone,
        host: HostParams {
            session_key: ROption::RSome(RStr::from_str("bench")),
            abort_signal: ROption::RSome(abort.signal()),
            ..HostParams::default()
        },
    }
}

fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn bench_isolation(c: &mut Criterion) {
    // The worker is this package's own `pincer` binary, built with the benchmark.
    pincer_host::isolation::set_worker_program(std::path::Path::new(env!("CARGO_BIN_EXE_pincer")))
        .expect("the worker program");
    let cache = tempfile::tempdir().unwrap();
    let shared = load(cache.path(), Isolation::InProcess);
    let apart = load(cache.path(), Isolation::Process);

    let engine = isolated(&apart, 1_000);
    let mut group = c.benchmark_group("isolation");
    group.bench_function("empty-call", |b| b.iter(|| engine.ping().unwrap()));
    drop(engine);
    group.sample_size(10);
    group.bench_function("worker-start", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let engine = isolated(&apart, 1_000);
                total += start.elapsed();
                black_box(&engine);
            }
            total
        })
    });
    group.finish();

    let mut group = c.benchmark_group("isolation/assemble");
    for n in [1_000usize, 10_000, 100_000] {
        let messages = conversation(n);
        let entry_ids = ids(n);
        let budget = (pincer_plugin_api::tokens::estimate_tokens(&messages) / 3).max(1);
        let abort = AbortController::new();
        let p = params(&messages, &entry_ids, &abort);
        let local = in_process(&shared, budget);
        let remote = isolated(&apart, budget);
        // Both answer the same.
        assert_eq!(local.assemble(&p).unwrap(), remote.assemble(&p).unwrap());
        if n == 10_000 {
            if let Some(kib) = remote.worker().and_then(|w| resident_kib(w.pid)) {
                eprintln!(
                    "isolation: worker resident memory after a 10k-message assemble: {kib} KiB"
                );
            }
        }
        if n == 100_000 {
            group.sample_size(20);
        }
        group.bench_with_input(BenchmarkId::new("in-process", n), &n, |b, _| {
            b.iter(|| black_box(local.assemble(black_box(&p)).unwrap()))
        });
        group.bench_with_input(BenchmarkId::new("isolated", n), &n, |b, _| {
            b.iter(|| black_box(remote.assemble(black_box(&p)).unwrap()))
        });
    }
    group.finish();

    // One new message per call, as turns make them (the isolated side sends that one).
    let mut group = c.benchmark_group("isolation/assemble-growing");
    let n = 10_000usize;
    let base = conversation(n);
    let budget = (pincer_plugin_api::tokens::estimate_tokens(&base) / 3).max(1);
    let remote = isolated(&apart, budget);
    let local = in_process(&shared, budget);
    for (name, engine) in [("in-process", &local), ("isolated", &remote)] {
        group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
            let mut messages = base.clone();
            let mut entry_ids = ids(n);
            b.iter(|| {
                let i = entry_ids.len();
                messages.push(Message::user(format!("turn {i}")));
                entry_ids.push(EntryId::new(format!("e{i:08x}")));
                let abort = AbortController::new();
                let p = params(&messages, &entry_ids, &abort);
                black_box(engine.assemble(&p).unwrap())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_isolation);
criterion_main!(benches);
