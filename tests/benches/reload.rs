//! Hot reload's costs, with the real staged `faulty` library (a "new build" is the library with
//! another trailer: other bytes, another private copy, another mapping):
//!
//! - `reload/direct`: a changed file → `Runtime::reload_plugin` → the new generation serving
//!   (verify, copy, `dlopen`, factory, swap);
//! - `reload/watched`: a changed file → the `PluginWatcher` (20 ms debounce) → the new
//!   generation serving a resolved guard;
//! - `reload/assemble-steady`: one guarded `assemble` of the example conversation, for scale;
//! - printed beside criterion's lines: the p50/p99 of that call while nothing reloads and while
//!   another thread reloads the plugin every 50 ms, and the resident memory each kept (old,
//!   mapped) generation costs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pincer_host::config::PincerHome;
use pincer_host::runtime::{PluginWatcher, WatchOptions};
use pincer_host::Transcript;
use pincer_host::{Runtime, RuntimeOptions};
use pincer_plugin_api::abi::latest::AbortController;
use pincer_tests::*;
use serde_json::json;

struct Bench {
    _home: TempDir,
    library: PathBuf,
    base: Vec<u8>,
    runtime: Arc<Runtime>,
    next: AtomicUsize,
}

impl Bench {
    fn new() -> Self {
        let home = TempDir::new().unwrap();
        let plugin = unpinned_plugin_copy("faulty", &home.path().join("plugins"));
        std::fs::write(
            home.path().join("pincer.json"),
            json!({ "plugins": { "slots": { "contextEngine": "faulty" } } }).to_string(),
        )
        .unwrap();
        let library = library_path(&plugin);
        let base = std::fs::read(&library).unwrap();
        let runtime = Arc::new(
            Runtime::open(RuntimeOptions::new(PincerHome::new(home.path().to_owned()))).unwrap(),
        );
        Bench {
            _home: home,
            library,
            base,
            runtime,
            next: AtomicUsize::new(1),
        }
    }

    /// Writes the next build over the library (by rename, as a build or copy tool does).
    fn new_build(&self) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut bytes = self.base.clone();
        bytes.extend_from_slice(format!("\0bench-build-{n}\0").as_bytes());
        let tmp = self.library.with_extension("tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, &self.library).unwrap();
    }

    fn generation(&self) -> u64 {
        self.runtime.resolve().unwrap().engine.generation()
    }
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Per-call latencies of `assemble` for `window`, on a fresh guard per 16 calls (a "turn").
fn latencies(bench: &Bench, t: &Transcript, window: Duration) -> Vec<Duration> {
    let source = bench.runtime.slot_source(None);
    let mut out = Vec::new();
    let start = Instant::now();
    while start.elapsed() < window {
        let engine = source.current();
        for _ in 0..16 {
            let request = assemble_request(t, "bench");
            let begin = Instant::now();
            let answered = engine
                .assemble(request, Arc::new(AbortController::new()))
                .expect("no call fails");
            out.push(begin.elapsed());
            assert_eq!(answered.answer.answered_by, "faulty");
        }
    }
    out.sort();
    out
}

fn reload(c: &mut Criterion) {
    let bench = Bench::new();
    let t = Transcript::read(&example_conversation()).unwrap();
    let mut group = c.benchmark_group("reload");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));

    group.bench_function("direct", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                bench.new_build();
                let start = Instant::now();
                let outcome = bench.runtime.reload_plugin("faulty").unwrap();
                assert!(!outcome.unchanged);
                total += start.elapsed();
            }
            total
        })
    });

    {
        let watcher = PluginWatcher::start(
            Arc::clone(&bench.runtime),
            WatchOptions {
                debounce: Duration::from_millis(20),
                on_reload: None,
            },
        )
        .unwrap();
        group.bench_function("watched", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let before = bench.generation();
                    let start = Instant::now();
                    bench.new_build();
                    while bench.generation() == before {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    total += start.elapsed();
                }
                total
            })
        });
        drop(watcher);
    }

    let engine = bench.runtime.resolve().unwrap().engine;
    group.bench_function("assemble-steady", |b| {
        b.iter(|| {
            engine
                .assemble(
                    assemble_request(&t, "bench"),
                    Arc::new(AbortController::new()),
                )
                .unwrap()
        })
    });
    drop(engine);
    group.finish();

    // p50/p99 of a call, steady and while another thread reloads every 50 ms: five rounds of
    // one second each, alternating, so the VM's drift falls on both sides alike.
    let _ = latencies(&bench, &t, Duration::from_millis(500));
    let (mut steady, mut during) = (Vec::new(), Vec::new());
    let reloads = AtomicUsize::new(0);
    for _ in 0..5 {
        steady.extend(latencies(&bench, &t, Duration::from_secs(1)));
        let stop = AtomicBool::new(false);
        during.extend(std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    bench.new_build();
                    bench.runtime.reload_plugin("faulty").unwrap();
                    reloads.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let during = latencies(&bench, &t, Duration::from_secs(1));
            stop.store(true, Ordering::Relaxed);
            during
        }));
    }
    steady.sort();
    during.sort();
    eprintln!(
        "reload/call-latency steady: p50 {:?} p99 {:?} ({} calls); during {} reloads: p50 {:?} p99 {:?} ({} calls)",
        percentile(&steady, 0.5),
        percentile(&steady, 0.99),
        steady.len(),
        reloads.load(Ordering::Relaxed),
        percentile(&during, 0.5),
        percentile(&during, 0.99),
        during.len(),
    );

    // Resident memory per kept generation: K more reloads, old generations disposed.
    let kept = |bench: &Bench| {
        bench
            .runtime
            .generations()
            .into_iter()
            .find(|g| g.engine_id == "faulty")
            .unwrap()
    };
    let kept_before = kept(&bench).kept_generations;
    let rss_before = resident_kib();
    let k = 20;
    for _ in 0..k {
        bench.new_build();
        bench.runtime.reload_plugin("faulty").unwrap();
    }
    let start = Instant::now();
    while bench.runtime.generations().iter().any(|g| g.draining > 0)
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rss_after = resident_kib();
    let status = kept(&bench);
    eprintln!(
        "reload/kept-generation: {} KiB resident each over {k} reloads ({} kept in all, {} KiB on disk each)",
        (rss_after.saturating_sub(rss_before)) / k as u64,
        status.kept_generations,
        status.kept_bytes / 1024 / (status.kept_generations.max(1) as u64),
    );
    assert_eq!(status.kept_generations, kept_before + k);
    bench.runtime.shutdown();
}

criterion_group!(benches, reload);
criterion_main!(benches);
