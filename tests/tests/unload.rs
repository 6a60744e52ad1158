//! Libraries after a hot reload, through the library's `Runtime` and the real staged `faulty`
//! library: kept mapped by default; with `plugins.entries.<id>.unloadOnReload` closed once
//! nothing from the old build is alive — and never before. The first tests hold one object of
//! every kind the old generation hands out (its guarded engine and so its instance, a result
//! the engine allocated, an error, a subagent rollback handle) across a reload, drop them one
//! by one, and read `/proc/self/maps` for the old build's private copy after each drop: the
//! guard and the rollback handle keep it mapped (the instance is disposed first), the result
//! and the error are host copies that outlive the unmap. The others make engine code leave
//! thread-exit work (a thread-local destructor, `std`'s exit hook) wherever it runs — from a
//! long-lived session worker, in the factory, `dispose`, a rollback, the engine's `Drop` — and
//! check that none of it stays on a host thread: the library is unloaded, not pinned, and the
//! worker's thread exits without calling into the closed library.
//!
//! A "new build" is the staged library with a trailer appended (another content hash, so
//! another private copy and another mapping), as in `reload.rs`.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pincer_host::config::PincerHome;
use pincer_host::testing::engines::instance::EngineOrigin;
use pincer_host::testing::engines::request::{
    CompactRequest, HostInputs, IngestRequest, SubagentSpawnRequest,
};
use pincer_host::SessionWorker;
use pincer_host::Transcript;
use pincer_host::{GenerationStatus, GuardedEngine, Runtime, RuntimeOptions};
use pincer_plugin_api::abi::latest::{AbortController, CompactionTarget, SubagentContextMode};
use pincer_tests::*;
use serde_json::json;

/// A home with an unpinned copy of `faulty`; `compact` fails with a known text (an error to
/// hold), every other method works, and `dispose` is logged.
struct Setup {
    home: TempDir,
    library: PathBuf,
    base: Vec<u8>,
    dispose_log: PathBuf,
}

const ERROR_TEXT: &str = "faulty: an error held across the unload";

impl Setup {
    fn new(unload_on_reload: Option<bool>) -> Self {
        Self::with_methods(unload_on_reload, json!({}))
    }

    /// As [`Setup::new`], with more of faulty's per-method behaviours.
    fn with_methods(unload_on_reload: Option<bool>, methods: serde_json::Value) -> Self {
        let home = TempDir::new().unwrap();
        let plugin = unpinned_plugin_copy("faulty", &home.path().join("plugins"));
        let library = library_path(&plugin);
        let base = std::fs::read(&library).unwrap();
        let dispose_log = home.path().join("dispose.log");
        let mut entry = json!({
            "config": {
                "compact": "error",
                "errorMessage": ERROR_TEXT,
                "disposeLog": dispose_log.display().to_string(),
            }
        });
        for (method, behaviour) in methods.as_object().unwrap() {
            entry["config"][method] = behaviour.clone();
        }
        if let Some(unload) = unload_on_reload {
            entry["unloadOnReload"] = json!(unload);
        }
        let config = json!({
            "plugins": {
                "slots": { "contextEngine": "faulty" },
                "entries": { "faulty": entry }
            }
        });
        std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
        Setup {
            home,
            library,
            base,
            dispose_log,
        }
    }

    fn runtime(&self) -> Arc<Runtime> {
        let options = RuntimeOptions::new(PincerHome::new(self.home.path().to_owned()));
        Arc::new(Runtime::open(options).unwrap())
    }

    /// Writes build `n` over the library (by rename, as a build tool does).
    fn replace(&self, n: usize) {
        let mut bytes = self.base.clone();
        bytes.extend_from_slice(format!("\0pincer-unload-test-build-{n}\0").as_bytes());
        let tmp = self.library.with_extension("tmp");
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(&tmp, &self.library).unwrap();
    }

    fn disposed(&self) -> usize {
        std::fs::read_to_string(&self.dispose_log)
            .unwrap_or_default()
            .lines()
            .count()
    }
}

/// Whether `path` is mapped into this process, read from `/proc/self/maps` by the test itself.
fn mapped(path: &Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = path.to_str().unwrap();
    maps.lines()
        .any(|line| line.ends_with(path) || line.ends_with(&format!("{path} (deleted)")))
}

/// The private copy the guard's engine was loaded from.
fn library_of(engine: &GuardedEngine) -> PathBuf {
    match engine.primary().origin() {
        EngineOrigin::Plugin { library, .. } => PathBuf::from(library),
        other => panic!("not a plugin engine: {other:?}"),
    }
}

fn status(runtime: &Runtime) -> GenerationStatus {
    runtime
        .generations()
        .into_iter()
        .find(|g| g.engine_id == "faulty")
        .expect("faulty is registered")
}

/// Waits (bounded) until `check` holds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Gives the reaper time to do whatever it would do (used where nothing must happen).
fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

fn compact_request(t: &Transcript) -> Arc<CompactRequest> {
    Arc::new(CompactRequest {
        session_id: Arc::from("s"),
        session_file: Arc::from("/nonexistent/s.jsonl"),
        agent_id: None,
        messages: t.shared_messages(),
        entry_ids: t.entry_ids(),
        token_budget: None,
        force: true,
        force_reason: None,
        current_token_count: None,
        compaction_target: CompactionTarget::default(),
        custom_instructions: None,
        host: HostInputs::default(),
    })
}

fn spawn_request() -> Arc<SubagentSpawnRequest> {
    Arc::new(SubagentSpawnRequest {
        parent_session_key: Arc::from("parent"),
        child_session_key: Arc::from("child"),
        context_mode: Some(SubagentContextMode::Fork),
        parent_session_id: None,
        parent_session_file: None,
        child_session_id: None,
        child_session_file: None,
        ttl_ms: None,
    })
}

/// Everything generation 1 hands out, held by the caller.
struct Held {
    engine: GuardedEngine,
    /// An `assemble` result: its items and its system-prompt addition were allocated by the
    /// engine.
    assembled: pincer_plugin_api::abi::latest::AssembleResult,
    /// A failed call's error.
    error: pincer_host::GuardError,
    /// A `prepareSubagentSpawn` rollback handle: the engine's code.
    rollback: pincer_host::testing::engines::instance::Rollback,
}

fn take_everything(runtime: &Runtime) -> Held {
    let t = Transcript::read(&example_conversation()).unwrap();
    let engine = runtime.resolve().unwrap().engine;
    assert_eq!(engine.generation(), 1);
    let assembled = engine
        .assemble(assemble_request(&t, "s"), Arc::new(AbortController::new()))
        .unwrap();
    assert_eq!(assembled.answer.answered_by, "faulty");
    let rollback = engine
        .prepare_subagent_spawn(spawn_request())
        .unwrap()
        .expect("faulty has prepareSubagentSpawn")
        .value
        .expect("faulty offers a rollback");
    // `compact` fails closed: the caller gets the engine's own error (and faulty is
    // quarantined, which the reload clears).
    let error = engine
        .compact(compact_request(&t), Arc::new(AbortController::new()))
        .unwrap_err();
    assert_eq!(error.error.message, ERROR_TEXT);
    Held {
        engine,
        assembled: assembled.value,
        error,
        rollback,
    }
}

/// The addition faulty writes into every `assemble` result.
fn addition(result: &pincer_plugin_api::abi::latest::AssembleResult) -> String {
    result
        .system_prompt_addition
        .as_ref()
        .map(|s| s.to_string())
        .into_option()
        .unwrap_or_default()
}

fn reload_to_generation_2(setup: &Setup, runtime: &Runtime) {
    setup.replace(1);
    let outcome = runtime.reload_plugin("faulty").unwrap();
    assert_eq!(outcome.engines.get("faulty"), Some(&2), "{outcome:?}");
}

#[test]
fn unload_on_reload_closes_the_old_library_after_the_last_object_from_it_is_dropped() {
    let setup = Setup::new(Some(true));
    let runtime = setup.runtime();
    let held = take_everything(&runtime);
    let old = library_of(&held.engine);
    assert!(mapped(&old), "generation 1 is mapped while it serves");
    let Held {
        engine,
        assembled,
        error,
        rollback,
    } = held;

    reload_to_generation_2(&setup, &runtime);
    let new_engine = runtime.resolve().unwrap().engine;
    assert_eq!(new_engine.generation(), 2);
    let new = library_of(&new_engine);
    assert_ne!(new, old, "the new build is another private copy");
    settle();
    assert!(mapped(&old), "the guard of generation 1 holds it");
    assert_eq!(setup.disposed(), 0, "not disposed while a guard holds it");
    let s = status(&runtime);
    assert_eq!(
        (s.kept_generations, s.unloading, s.unloaded_generations),
        (1, 1, 0),
        "{s:?}"
    );

    // 1. The guard (and with it generation 1's instance): disposed by the reaper, but the
    // rollback handle still holds the library.
    drop(engine);
    eventually("generation 1 is disposed", || setup.disposed() == 1);
    settle();
    assert!(mapped(&old), "the rollback handle still holds generation 1");
    assert_eq!(status(&runtime).unloading, 1);

    // 2. The rollback handle, run by the new generation's guard: the old build's code runs
    // after its instance is gone, and the handle is the last thing holding the library.
    new_engine.rollback(rollback).unwrap();
    eventually("generation 1 is unmapped", || !mapped(&old));
    let s = status(&runtime);
    assert_eq!(
        (
            s.kept_generations,
            s.kept_bytes,
            s.unloading,
            s.pinned,
            s.unloaded_generations
        ),
        (0, 0, 0, 0, 1),
        "{s:?}"
    );
    assert!(mapped(&new), "the serving build is untouched");

    // 3. The result and the error outlive the library: they are host memory, read and freed
    // without its code.
    assert!(
        addition(&assembled).starts_with("faulty engine was here"),
        "{}",
        addition(&assembled)
    );
    assert!(!assembled.items.is_empty());
    assert_eq!(error.error.message, ERROR_TEXT);
    drop(assembled);
    drop(error);

    // The new generation serves on.
    let t = Transcript::read(&example_conversation()).unwrap();
    let answer = new_engine
        .assemble(assemble_request(&t, "s"), Arc::new(AbortController::new()))
        .unwrap();
    assert_eq!(
        (answer.answer.answered_by.as_str(), answer.answer.generation),
        ("faulty", 2)
    );
    drop(answer);
    drop(new_engine);
    runtime.shutdown();
}

#[test]
fn unload_on_reload_waits_for_a_rollback_handle_dropped_unused() {
    let setup = Setup::new(Some(true));
    let runtime = setup.runtime();
    let held = take_everything(&runtime);
    let old = library_of(&held.engine);
    reload_to_generation_2(&setup, &runtime);
    // The other order: the rollback handle first (dropped, never run), then the guard.
    drop(held.rollback);
    settle();
    assert!(mapped(&old), "the guard of generation 1 still holds it");
    assert_eq!(setup.disposed(), 0);
    drop(held.engine);
    eventually("generation 1 is unmapped", || !mapped(&old));
    assert_eq!(setup.disposed(), 1, "disposed before it was unmapped");
    assert_eq!(status(&runtime).unloaded_generations, 1);
    assert_eq!(held.error.error.message, ERROR_TEXT);
    assert!(addition(&held.assembled).starts_with("faulty engine was here"));
    drop(held.assembled);
    runtime.shutdown();
}

#[test]
fn by_default_the_old_library_stays_mapped_after_everything_from_it_is_dropped() {
    for unload in [None, Some(false)] {
        let setup = Setup::new(unload);
        let runtime = setup.runtime();
        let held = take_everything(&runtime);
        let old = library_of(&held.engine);
        reload_to_generation_2(&setup, &runtime);
        drop(held);
        eventually("generation 1 is disposed", || setup.disposed() == 1);
        settle();
        assert!(mapped(&old), "kept mapped ({unload:?})");
        let s = status(&runtime);
        assert_eq!(
            (
                s.kept_generations,
                s.unloading,
                s.pinned,
                s.unloaded_generations
            ),
            (1, 0, 0, 0),
            "{s:?}"
        );
        assert!(s.kept_bytes >= setup.base.len() as u64);
        runtime.shutdown();
    }
}

/// Calls `ingest` (configured as `behaviour`) from a session worker, a host thread that
/// outlives the old generation; reloads; drops the guard; then checks that generation 1 was
/// unloaded — not pinned by a thread-local destructor on the worker — and that the worker's
/// thread then exits cleanly (a destructor of the closed library left on it would crash the
/// process as the thread exits).
fn calls_on_a_session_worker_leave_nothing_behind(behaviour: &str) {
    let setup = Setup::with_methods(Some(true), json!({ "ingest": behaviour }));
    let runtime = setup.runtime();
    let engine = Arc::new(runtime.resolve().unwrap().engine);
    let old = library_of(&engine);
    let worker = SessionWorker::new("unload-test-session");
    let t = Transcript::read(&example_conversation()).unwrap();
    let request = Arc::new(IngestRequest {
        session_id: Arc::from("s"),
        messages: t.shared_messages(),
        entry_ids: t.entry_ids(),
        index: 0,
        is_heartbeat: false,
        host: HostInputs::default(),
    });
    // A panic quarantines faulty: one call is all that reaches it.
    let calls = if behaviour == "panic" { 1 } else { 3 };
    for _ in 0..calls {
        let (on_worker, request) = (Arc::clone(&engine), Arc::clone(&request));
        let answer = worker
            .run(move || on_worker.ingest(request, Arc::new(AbortController::new())))
            .unwrap()
            .unwrap();
        if behaviour == "panic" {
            let failure = answer.answer.failure.expect("faulty panicked");
            assert_eq!(failure.code(), "panicked", "{failure:?}");
            assert!(
                failure.message.contains("configured to panic in ingest"),
                "{failure:?}"
            );
        } else {
            assert_eq!(answer.answer.failure, None);
        }
    }
    reload_to_generation_2(&setup, &runtime);
    drop(engine);
    eventually("generation 1 is closed", || status(&runtime).unloading == 0);
    let s = status(&runtime);
    assert_eq!((s.pinned, s.unloaded_generations), (0, 1), "{s:?}");
    assert!(!mapped(&old));
    // The worker's thread exits now, running whatever thread-exit destructors it holds.
    drop(worker);
    std::thread::sleep(Duration::from_millis(200));
    runtime.shutdown();
}

#[test]
fn calls_made_from_a_long_lived_session_worker_leave_nothing_behind_on_it() {
    calls_on_a_session_worker_leave_nothing_behind("ok");
}

/// A panic runs the adapter's panic hook and its caught-panic path (the location recorded,
/// then taken) on the calling thread.
#[test]
fn a_call_that_panicked_from_a_long_lived_session_worker_leaves_nothing_behind_on_it() {
    calls_on_a_session_worker_leave_nothing_behind("panic");
}

/// Every method of faulty, the factory and `dispose` included, leaves thread-exit work on
/// whatever thread runs it (a `thread_local!` with a destructor, `std::thread::current()`),
/// as a careless engine does. Called from a long-lived session worker and from the test's
/// thread, none of it may stay on those threads: every call into a library closed after
/// reload runs on a thread of its own that ends before the library can close.
#[test]
fn thread_exit_work_of_engine_code_never_outlives_the_library_on_host_threads() {
    let every = json!({
        "factory": "touch-thread",
        "info": "touch-thread",
        "ingest": "touch-thread",
        "assemble": "touch-thread",
        "prepareSubagentSpawn": "touch-thread",
        "rollback": "touch-thread",
        "dispose": "touch-thread",
    });
    let setup = Setup::with_methods(Some(true), every);
    let runtime = setup.runtime();
    let worker = SessionWorker::new("unload-test-session");
    let on_worker = Arc::clone(&runtime);
    let engine = Arc::new(
        worker
            .run(move || {
                let resolved = on_worker.resolve().unwrap();
                assert!(
                    resolved.resolution.fallback.is_none(),
                    "{:?}",
                    resolved.resolution
                );
                resolved.engine
            })
            .unwrap(),
    );
    let old = library_of(&engine);
    let t = Transcript::read(&example_conversation()).unwrap();
    let (on_worker, request) = (Arc::clone(&engine), assemble_request(&t, "s"));
    let (assembled, rollback) = worker
        .run(move || {
            let assembled = on_worker
                .assemble(request, Arc::new(AbortController::new()))
                .unwrap();
            let rollback = on_worker
                .prepare_subagent_spawn(spawn_request())
                .unwrap()
                .unwrap()
                .value
                .unwrap();
            (assembled, rollback)
        })
        .unwrap();
    assert_eq!(
        (
            assembled.answer.answered_by.as_str(),
            &assembled.answer.failure
        ),
        ("faulty", &None)
    );
    // From the test's thread too (elsewhere than on a session worker).
    let again = engine
        .assemble(assemble_request(&t, "s"), Arc::new(AbortController::new()))
        .unwrap();
    assert_eq!(again.answer.failure, None);
    let on_worker = Arc::clone(&engine);
    worker
        .run(move || on_worker.rollback(rollback))
        .unwrap()
        .unwrap();

    reload_to_generation_2(&setup, &runtime);
    drop(engine);
    eventually("generation 1 is closed", || status(&runtime).unloading == 0);
    let s = status(&runtime);
    assert_eq!((s.pinned, s.unloaded_generations), (0, 1), "{s:?}");
    assert!(!mapped(&old));
    assert_eq!(setup.disposed(), 1);
    drop((assembled, again));
    // The worker's thread exits now: nothing of the closed library may run as it does.
    drop(worker);
    std::thread::sleep(Duration::from_millis(200));
    runtime.shutdown();
}

/// The serving generation's library closes too when its runtime is dropped, on whatever
/// thread drops it: the engine's own `Drop` (here leaving thread-exit work, `touch-thread`)
/// runs on a thread of its own, so the dropping thread — a long-lived session worker — carries
/// nothing of the library when it later exits.
#[test]
fn the_engine_dropped_with_its_runtime_on_a_host_thread_leaves_nothing_behind_on_it() {
    let setup = Setup::with_methods(Some(true), json!({ "drop": "touch-thread" }));
    let runtime = setup.runtime();
    let worker = SessionWorker::new("unload-test-session");
    let engine = runtime.resolve().unwrap().engine;
    let library = library_of(&engine);
    let t = Transcript::read(&example_conversation()).unwrap();
    let answer = engine
        .assemble(assemble_request(&t, "s"), Arc::new(AbortController::new()))
        .unwrap();
    assert_eq!(answer.answer.failure, None);
    worker
        .run(move || {
            runtime.shutdown();
            drop((engine, runtime));
        })
        .unwrap();
    assert_eq!(setup.disposed(), 1);
    eventually("the library is unmapped", || !mapped(&library));
    drop(answer);
    drop(worker);
    std::thread::sleep(Duration::from_millis(200));
}
