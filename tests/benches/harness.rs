//! The turn harness's own cost: one turn through `legacy` on a session of 10,000 entries with a
//! model that answers at once (so what is measured is the harness — context, assemble, precheck,
//! appends, finalize — not a model), with appends left to the OS (`durability: none`) and, for
//! scale, with an fsync per append; and the same turn run on the session's own worker
//! (`SessionRunner`: engine calls inline, plus one hand-off of the turn to the worker).

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use pincer_host::config::PincerHome;
use pincer_host::harness::{Harness, HarnessOptions, SessionRunner};
use pincer_host::model::{ModelError, ModelProvider, ModelReply, ModelRequest, NoTools};
use pincer_host::session::Durability;
use pincer_host::session::JsonlStore;
use pincer_host::{Runtime, RuntimeOptions};
use pincer_plugin_api::abi::latest::Message;

/// A model that answers at once.
struct Instant;

impl ModelProvider for Instant {
    fn name(&self) -> &str {
        "instant"
    }

    fn complete(&self, _: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        Ok(ModelReply {
            message: Message::assistant("Noted."),
        })
    }
}

fn one_turn(c: &mut Criterion) {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let runtime = Runtime::open(RuntimeOptions::new(PincerHome::new(home.path().into()))).unwrap();
    let engine = Arc::new(runtime.resolve().unwrap().engine);
    let mut group = c.benchmark_group("harness-turn");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    for (name, durability, on_runner) in [
        ("10k-none", Durability::None, false),
        ("10k-entry", Durability::Entry, false),
        ("10k-none-runner", Durability::None, true),
    ] {
        let store = JsonlStore::new(home.path().join("agents"));
        let sessions = store.sessions_dir(&pincer_host::session::AgentId::main());
        std::fs::create_dir_all(&sessions).unwrap();
        let file = sessions.join(format!("{name}.jsonl"));
        pincer_tests::generate_session(&tasks, 10_000, &file);
        let key: pincer_host::session::SessionKey = name.parse().unwrap();
        store
            .register(&key, name, &file, pincer_host::session::OnExisting::Refuse)
            .unwrap();
        let mut options = HarnessOptions::new(10_000_000);
        options.durability = durability;
        let harness = Arc::new(Harness::new(
            engine.clone(),
            store,
            Arc::new(Instant),
            Arc::new(NoTools),
            options,
        ));
        let prompt = || Message::user("Is my flight on time?");
        if on_runner {
            let runner = SessionRunner::open(harness, &key).unwrap();
            group.bench_function(name, |b| b.iter(|| runner.run_turn(prompt()).unwrap()));
        } else {
            let mut session = harness.open_session(&key).unwrap();
            group.bench_function(name, |b| {
                b.iter(|| harness.turn(&mut session, prompt()).unwrap())
            });
        }
    }
    group.finish();
    runtime.shutdown();
}

criterion_group!(benches, one_turn);
criterion_main!(benches);
