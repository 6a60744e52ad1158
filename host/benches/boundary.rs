//! What the plugin boundary costs: the `sliding-window` engine called through its loaded
//! library versus the same engine linked statically into this benchmark, side by side in one
//! run; plus the guard's cost and the time of one verified load.
//!
//! Run with `cargo xtask bench` (it stages release builds of the plugins first). Variants:
//! - `static-direct`: the engine's Rust trait, called directly (inlinable);
//! - `static-adapter`: the same engine wrapped by `into_engine_box` (vtable + catch_unwind),
//!   linked statically;
//! - `plugin`: the engine from the loaded `.so`, through `EngineInstance`;
//! - `plugin-guarded`: the same through `GuardedEngine`: quarantine check, projection, and the
//!   bounded call (a hand-off to a worker thread so that a hung engine cannot hold the caller).
//!
//! The guard's own cost, both designs side by side (`guard/…` and `guard-after-idle/…`):
//! - `plugin` vs `plugin-guarded/hand-off`: calls from a thread that is not a session worker,
//!   each handed off to a pooled worker;
//! - `plugin/session-worker` vs `plugin-guarded/inline`: the same loop run on a
//!   `SessionWorker`, where the guarded call runs inline under the watchdog;
//! - `guard-after-idle/…`: one call after 2 ms of idleness (the hand-off's workers have parked),
//!   averaged over at most 50 such calls per sample; `session-worker-job` is the wake-up a turn
//!   pays once to reach its parked session worker.
//! - `plugin-guarded+journal/inline`: the inline guarded call of a plugin engine as the runtime
//!   builds it (`with_trust`): its result checked and the call marked in the crash journal;
//!   `crash-journal/mark` is the mark alone (plain stores into the memory-mapped slot).

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use pincer_host::config::{FallbackPolicy, ResultLimits};
use pincer_host::runtime::Quarantine;
use pincer_host::testing::engines::crash_journal::JournalTag;
use pincer_host::testing::engines::instance::{EngineInstance, EngineOrigin};
use pincer_host::testing::engines::legacy::shared_legacy;
use pincer_host::testing::engines::request::no_entry_ids;
use pincer_host::testing::engines::request::{AssembleRequest, HostInputs, IngestRequest};
use pincer_host::testing::engines::services::{HostServices, NoRuntimeCompaction};
use pincer_host::testing::plugins::library::{EngineDirs, Loader};
use pincer_host::testing::types::{Method, Owner};
use pincer_host::GuardedEngine;
use pincer_host::SessionWorker;
use pincer_plugin_abi::latest::{
    AbortController, AbortSignal, AssembleParams, EntryId, HostParams, IngestParams,
};
use pincer_plugin_abi::{ROption, RSlice, RStr};
use pincer_plugin_api::{into_engine_box, optional_fns, Engine, Host, Message};
use sliding_window::{Config, SlidingWindow};

mod common;
use common::{conversation, staged_dir};

fn services() -> HostServices {
    HostServices::new("sliding-window", Arc::new(NoRuntimeCompaction), None)
}

fn config(budget: u64) -> serde_json::Value {
    serde_json::json!({ "tokenBudget": budget })
}

struct Engines {
    direct: SlidingWindow,
    adapter: EngineInstance,
    plugin: Arc<EngineInstance>,
    guarded: Arc<GuardedEngine>,
    /// The same, as the runtime builds a plugin engine's guard: checked and journaled.
    journaled: Arc<GuardedEngine>,
    _cache: tempfile::TempDir,
}

fn engines(budget: u64) -> Engines {
    let cfg = Config {
        token_budget: Some(budget),
        min_messages: 1,
        keep_system: true,
    };
    let direct =
        SlidingWindow::new(cfg.clone(), Host::from_services(services().into_abi())).unwrap();
    let adapter = EngineInstance::new(
        into_engine_box(
            SlidingWindow::new(cfg, Host::from_services(services().into_abi())).unwrap(),
            optional_fns!(SlidingWindow),
        ),
        EngineOrigin::Builtin,
        None,
    )
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let library = Loader::new(cache.path().to_owned())
        .load(&staged_dir())
        .expect("staged sliding-window loads: run `cargo xtask bench`");
    let plugin = Arc::new(
        EngineInstance::from_library(
            &library,
            "sliding-window",
            &config(budget),
            &EngineDirs::default(),
            services().into_abi(),
            &pincer_host::config::ResultLimits::default(),
        )
        .unwrap(),
    );
    let guard = || {
        GuardedEngine::new(
            "sliding-window",
            Some(Owner::plugin("sliding-window")),
            Arc::clone(&plugin),
            shared_legacy(services()).unwrap(),
            Arc::new(Quarantine::new(None)),
            FallbackPolicy::Legacy,
        )
    };
    let guarded = Arc::new(guard());
    pincer_host::testing::engines::crash_journal::open_global(cache.path())
        .expect("the crash journal opens");
    let journaled = Arc::new(guard().with_trust(ResultLimits::default(), Some(library.sha256())));
    Engines {
        direct,
        adapter,
        plugin,
        guarded,
        journaled,
        _cache: cache,
    }
}

fn host_params(abort: &AbortSignal) -> HostParams<'_> {
    HostParams {
        session_key: ROption::RSome(RStr::from_str("bench")),
        abort_signal: ROption::RSome(abort),
        ..HostParams::default()
    }
}

fn bench_ingest(c: &mut Criterion) {
    let e = engines(10_000);
    let message = Message::user("Please change my flight to May 21.");
    let abort = AbortController::new();
    let entry_id = EntryId::new("e1");
    let params = IngestParams {
        session_id: RStr::from_str("bench"),
        message: &message,
        entry_id: &entry_id,
        is_heartbeat: false,
        host: host_params(abort.signal()),
    };
    let mut group = c.benchmark_group("ingest/one-message");
    group.bench_function("static-direct", |b| {
        b.iter(|| {
            let view = pincer_plugin_api::IngestParams::from_abi(black_box(&params));
            black_box(e.direct.ingest(&view).unwrap())
        })
    });
    group.bench_function("static-adapter", |b| {
        b.iter(|| black_box(e.adapter.ingest(black_box(&params)).unwrap()))
    });
    group.bench_function("plugin", |b| {
        b.iter(|| black_box(e.plugin.ingest(black_box(&params)).unwrap()))
    });
    let request = Arc::new(IngestRequest {
        session_id: Arc::from("bench"),
        messages: Arc::from(vec![message.clone()]),
        entry_ids: no_entry_ids(),
        index: 0,
        is_heartbeat: false,
        host: HostInputs::default(),
    });
    group.bench_function("plugin-guarded", |b| {
        b.iter(|| {
            black_box(
                e.guarded
                    .ingest(Arc::clone(&request), Arc::new(AbortController::new()))
                    .unwrap()
                    .value,
            )
        })
    });
    group.finish();
}

fn bench_assemble(c: &mut Criterion) {
    let mut group = c.benchmark_group("assemble");
    for n in [1_000usize, 10_000, 100_000] {
        let messages = conversation(n);
        let total = pincer_plugin_api::tokens::estimate_tokens(&messages);
        let budget = (total / 3).max(1);
        let e = engines(budget);
        let abort = AbortController::new();
        let params = AssembleParams {
            session_id: RStr::from_str("bench"),
            messages: RSlice::from_slice(&messages),
            entry_ids: RSlice::from_slice(&[]),
            token_budget: ROption::RNone,
            available_tools: RSlice::from_slice(&[]),
            citations_mode: ROption::RNone,
            model: ROption::RNone,
            host: host_params(abort.signal()),
        };
        if n == 100_000 {
            group.sample_size(20);
        }
        group.bench_with_input(BenchmarkId::new("static-direct", n), &n, |b, _| {
            b.iter(|| {
                let view = pincer_plugin_api::AssembleParams::from_abi(black_box(&params));
                black_box(e.direct.assemble(&view).unwrap())
            })
        });
        group.bench_with_input(BenchmarkId::new("static-adapter", n), &n, |b, _| {
            b.iter(|| black_box(e.adapter.assemble(black_box(&params)).unwrap()))
        });
        group.bench_with_input(BenchmarkId::new("plugin", n), &n, |b, _| {
            b.iter(|| black_box(e.plugin.assemble(black_box(&params)).unwrap()))
        });
        let request = Arc::new(AssembleRequest {
            session_id: Arc::from("bench"),
            messages: Arc::from(messages.clone()),
            entry_ids: no_entry_ids(),
            token_budget: None,
            host: HostInputs::default(),
        });
        group.bench_with_input(BenchmarkId::new("plugin-guarded", n), &n, |b, _| {
            b.iter(|| {
                black_box(
                    e.guarded
                        .assemble(Arc::clone(&request), Arc::new(AbortController::new()))
                        .unwrap()
                        .value,
                )
            })
        });
    }
    group.finish();
}

/// How long the idle period before each measured call lasts (the hand-off's workers and
/// callers spin 50 µs, then park).
const IDLE: Duration = Duration::from_millis(2);
/// At most this many idle-then-call rounds per sample; the mean is scaled to `iters`.
const IDLE_CALLS: u64 = 50;

/// `iters` calls' worth of time, measured on at most [`IDLE_CALLS`] calls each after [`IDLE`].
fn after_idle(iters: u64, mut one: impl FnMut() -> Duration) -> Duration {
    let n = iters.clamp(1, IDLE_CALLS);
    let mut total = Duration::ZERO;
    for _ in 0..n {
        std::thread::sleep(IDLE);
        total += one();
    }
    let nanos = total.as_nanos() * u128::from(iters) / u128::from(n);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Times `f`.
fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// What the guard benches call, shareable with a session worker.
#[derive(Clone)]
struct GuardFixture {
    plugin: Arc<EngineInstance>,
    guarded: Arc<GuardedEngine>,
    journaled: Arc<GuardedEngine>,
    request: Arc<IngestRequest>,
    /// One controller for every call: it never fires in time, and the caller owns its cost.
    abort: Arc<AbortController>,
}

impl GuardFixture {
    /// `iters` plain plugin calls (the params built once, as a caller holding them would).
    fn plugin(&self, iters: u64) -> Duration {
        self.request.with_abi(
            self.abort.signal(),
            |host| host,
            |params| {
                timed(|| {
                    for _ in 0..iters {
                        black_box(self.plugin.ingest(black_box(params)).unwrap());
                    }
                })
            },
        )
    }

    /// `iters` guarded calls (`call` borrows the request and the controller; the named
    /// wrappers like `ingest` take them by value, which costs the caller two `Arc` clones).
    fn guarded(&self, iters: u64) -> Duration {
        self.through(&self.guarded, iters)
    }

    /// `iters` guarded calls through the checked and journaled guard.
    fn journaled(&self, iters: u64) -> Duration {
        self.through(&self.journaled, iters)
    }

    fn through(&self, guard: &GuardedEngine, iters: u64) -> Duration {
        timed(|| {
            for _ in 0..iters {
                black_box(
                    guard
                        .call(&self.request, &self.abort)
                        .unwrap()
                        .map(|answered| answered.value),
                );
            }
        })
    }

    /// `measure(self, iters)` run on `worker`.
    fn on(
        &self,
        worker: &SessionWorker,
        iters: u64,
        measure: fn(&Self, u64) -> Duration,
    ) -> Duration {
        let fixture = self.clone();
        worker.run(move || measure(&fixture, iters)).unwrap()
    }
}

fn bench_guard(c: &mut Criterion) {
    let e = engines(10_000);
    let fx = GuardFixture {
        plugin: Arc::clone(&e.plugin),
        guarded: Arc::clone(&e.guarded),
        journaled: Arc::clone(&e.journaled),
        request: Arc::new(IngestRequest {
            session_id: Arc::from("bench"),
            messages: Arc::from(vec![Message::user("Please change my flight to May 21.")]),
            entry_ids: no_entry_ids(),
            index: 0,
            is_heartbeat: false,
            host: HostInputs::default(),
        }),
        abort: Arc::new(AbortController::new()),
    };
    let worker = SessionWorker::new("bench");
    // Starts the worker (and the watchdog) before anything is measured.
    worker.run(|| ()).unwrap();

    let mut group = c.benchmark_group("guard/ingest");
    group.bench_function("plugin", |b| b.iter_custom(|iters| fx.plugin(iters)));
    group.bench_function("plugin-guarded/hand-off", |b| {
        b.iter_custom(|iters| fx.guarded(iters))
    });
    group.bench_function("plugin/session-worker", |b| {
        b.iter_custom(|iters| fx.on(&worker, iters, GuardFixture::plugin))
    });
    group.bench_function("plugin-guarded/inline", |b| {
        b.iter_custom(|iters| fx.on(&worker, iters, GuardFixture::guarded))
    });
    group.bench_function("plugin-guarded+journal/inline", |b| {
        b.iter_custom(|iters| fx.on(&worker, iters, GuardFixture::journaled))
    });
    group.finish();

    let journal =
        pincer_host::testing::engines::crash_journal::global().expect("opened by engines()");
    let tag = JournalTag::new("sliding-window", Some(&"ab".repeat(32)));
    let mut group = c.benchmark_group("crash-journal");
    group.bench_function("mark", |b| {
        b.iter(|| drop(black_box(journal.enter(black_box(&tag), Method::Assemble))))
    });
    group.finish();

    let mut group = c.benchmark_group("guard-after-idle/ingest");
    group.sample_size(10);
    group.bench_function("plugin", |b| {
        b.iter_custom(|iters| after_idle(iters, || fx.plugin(1)))
    });
    group.bench_function("plugin-guarded/hand-off", |b| {
        b.iter_custom(|iters| after_idle(iters, || fx.guarded(1)))
    });
    group.bench_function("plugin-guarded/inline", |b| {
        b.iter_custom(|iters| {
            fx.on(&worker, iters, |fx, iters| {
                after_idle(iters, || fx.guarded(1))
            })
        })
    });
    group.bench_function("session-worker-job", |b| {
        b.iter_custom(|iters| after_idle(iters, || timed(|| worker.run(|| ()).unwrap())))
    });
    group.finish();
}

fn bench_load(c: &mut Criterion) {
    let size = std::fs::metadata(pincer_tests_library(&staged_dir()))
        .map(|m| m.len())
        .unwrap_or(0);
    let mut group = c.benchmark_group("load");
    group.sample_size(20);
    // Every iteration is a fresh load: a new cache folder, so a real copy and a new dlopen
    // handle (each kept copy stays mapped: about 0.4 MiB per iteration).
    group.bench_function(
        format!("verified-load+factory ({} KiB library)", size / 1024),
        |b| {
            b.iter_batched(
                || tempfile::tempdir().unwrap(),
                |cache| {
                    let library = Loader::new(cache.path().to_owned())
                        .load(&staged_dir())
                        .unwrap();
                    let engine = EngineInstance::from_library(
                        &library,
                        "sliding-window",
                        &config(1000),
                        &EngineDirs::default(),
                        services().into_abi(),
                        &pincer_host::config::ResultLimits::default(),
                    )
                    .unwrap();
                    black_box(engine);
                    cache
                },
                BatchSize::PerIteration,
            )
        },
    );
    group.finish();
}

fn pincer_tests_library(dir: &std::path::Path) -> PathBuf {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("pincer.plugin.json")).unwrap())
            .unwrap();
    dir.join(manifest["library"].as_str().unwrap())
}

criterion_group!(
    benches,
    bench_guard,
    bench_ingest,
    bench_assemble,
    bench_load
);
criterion_main!(benches);
