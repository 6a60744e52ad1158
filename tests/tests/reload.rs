//! Hot reload through the library's `Runtime`, against the real staged `faulty` library: its
//! file replaced in place (same inode), by rename and by delete-then-recreate while callers
//! on many threads keep calling; generations, drain-then-dispose exactly once (counted by the
//! engine itself through `disposeLog`), broken builds refused with the old generation still
//! serving, quarantine cleared by a reload, `pincer.json` changes taking effect, and a
//! harness turn in flight finishing on the generation it started on.
//!
//! A "new build" is the staged library with a different trailer appended: other bytes, so
//! another content hash, another private copy and another mapping of the code, which is
//! what the host sees of a rebuild.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pincer_host::config::PincerHome;
use pincer_host::harness::{Harness, HarnessOptions};
use pincer_host::model::{ModelError, ModelProvider, ModelReply, ModelRequest, NoTools};
use pincer_host::runtime::{PluginWatcher, WatchEvent, WatchOptions};
use pincer_host::session::JsonlStore;
use pincer_host::Transcript;
use pincer_host::{GuardedEngine, ReloadError, Runtime, RuntimeOptions};
use pincer_plugin_api::abi::latest::AbortController;
use pincer_tests::*;
use serde_json::{json, Value};

/// A home whose plugins folder holds a private copy of `faulty` (no sha256 pin, so a new
/// build needs no manifest edit), with `disposeLog` pointing into the home.
struct Setup {
    home: TempDir,
    plugin: PathBuf,
    library: PathBuf,
    base: Vec<u8>,
    dispose_log: PathBuf,
}

impl Setup {
    fn new(engine_config: Value) -> Self {
        let home = TempDir::new().unwrap();
        let plugin = unpinned_plugin_copy("faulty", &home.path().join("plugins"));
        let library = library_path(&plugin);
        let base = std::fs::read(&library).unwrap();
        let dispose_log = home.path().join("dispose.log");
        let setup = Setup {
            home,
            plugin,
            library,
            base,
            dispose_log,
        };
        setup.write_config(engine_config, json!({}));
        setup
    }

    fn write_config(&self, engine_config: Value, extra: Value) {
        let mut engine_config = engine_config;
        engine_config["disposeLog"] = json!(self.dispose_log.display().to_string());
        let mut config = json!({
            "plugins": {
                "slots": { "contextEngine": "faulty" },
                // `sandbox: false`: the dispose log lies outside the engine's own directories,
                // where an isolated engine's sandbox would refuse the write (the third pass).
                "entries": { "faulty": { "config": engine_config, "sandbox": false } }
            }
        });
        if let (Some(into), Value::Object(more)) = (config.as_object_mut(), extra) {
            for (k, v) in more {
                into.insert(k, v);
            }
        }
        std::fs::write(self.home.path().join("pincer.json"), config.to_string()).unwrap();
    }

    fn runtime(&self) -> Arc<Runtime> {
        let options = RuntimeOptions::new(PincerHome::new(self.home.path().to_owned()));
        Arc::new(Runtime::open(options).unwrap())
    }

    /// The bytes of build `n` (0: the staged library as it is).
    fn build(&self, n: usize) -> Vec<u8> {
        let mut bytes = self.base.clone();
        if n > 0 {
            bytes.extend_from_slice(format!("\0pincer-reload-test-build-{n}\0").as_bytes());
        }
        bytes
    }

    /// Writes build `n` over the library the way `mode` says.
    fn replace(&self, n: usize, mode: Replace) {
        let bytes = self.build(n);
        match mode {
            Replace::InPlace => {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(&self.library)
                    .unwrap();
                file.write_all(&bytes).unwrap();
                file.sync_all().unwrap();
            }
            Replace::Rename => {
                let tmp = self.plugin.join(".new-build.tmp");
                std::fs::write(&tmp, &bytes).unwrap();
                std::fs::rename(&tmp, &self.library).unwrap();
            }
            Replace::DeleteThenRecreate => {
                std::fs::remove_file(&self.library).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                std::fs::write(&self.library, &bytes).unwrap();
            }
        }
    }

    /// The instances the engine says it disposed, one tag per `dispose`.
    fn disposed(&self) -> Vec<String> {
        std::fs::read_to_string(&self.dispose_log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[derive(Debug, Clone, Copy)]
enum Replace {
    InPlace,
    Rename,
    DeleteThenRecreate,
}

fn transcript() -> Transcript {
    Transcript::read(&example_conversation()).unwrap()
}

/// One `assemble` and one `ingest` on `engine`; the generations that answered them.
fn call_both(engine: &GuardedEngine, t: &Transcript, session: &str) -> Result<[u64; 2], String> {
    let assembled = engine
        .assemble(
            assemble_request(t, session),
            Arc::new(AbortController::new()),
        )
        .map_err(|e| e.to_string())?;
    let ingested = engine
        .ingest(ingest_request(t, session), Arc::new(AbortController::new()))
        .map_err(|e| e.to_string())?;
    for answer in [&assembled.answer, &ingested.answer] {
        if answer.answered_by != "faulty" || answer.failure.is_some() {
            return Err(format!("answered by {answer:?}"));
        }
    }
    Ok([assembled.answer.generation, ingested.answer.generation])
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

fn faulty_status(runtime: &Runtime) -> pincer_host::GenerationStatus {
    runtime
        .generations()
        .into_iter()
        .find(|g| g.engine_id == "faulty")
        .expect("faulty is registered")
}

#[test]
fn reload_under_load_by_the_watcher_fails_no_call_and_disposes_each_generation_once() {
    let setup = Setup::new(json!({}));
    let runtime = setup.runtime();
    // Generation 1 exists before the callers start (first use by four threads at once may
    // run the factory twice; the spare instance is disposed at once and would be counted).
    assert_eq!(runtime.resolve().unwrap().engine.generation(), 1);
    let (events, reloads) = mpsc::channel();
    let on_reload: pincer_host::runtime::OnReload = Arc::new(move |event: &WatchEvent| {
        if let WatchEvent::Plugin(Ok(outcome)) = event {
            let _ = events.send(outcome.clone());
        }
    });
    let watcher = PluginWatcher::start(
        Arc::clone(&runtime),
        WatchOptions {
            debounce: Duration::from_millis(50),
            on_reload: Some(on_reload),
        },
    )
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::new(Mutex::new(BTreeSet::<u64>::new()));
    let callers: Vec<_> = (0..4)
        .map(|n| {
            let (runtime, stop, calls, failures, seen) = (
                Arc::clone(&runtime),
                Arc::clone(&stop),
                Arc::clone(&calls),
                Arc::clone(&failures),
                Arc::clone(&seen),
            );
            std::thread::spawn(move || {
                let t = transcript();
                let source = runtime.slot_source(None);
                let session = format!("session-{n}");
                while !stop.load(Ordering::Relaxed) {
                    // A "turn": the engine is taken once, then several calls run on it.
                    let engine = source.current();
                    for _ in 0..3 {
                        match call_both(&engine, &t, &session) {
                            Ok(generations) => {
                                // Exactly one generation answered each call: the turn's.
                                if generations != [engine.generation(); 2] {
                                    failures.lock().unwrap().push(format!(
                                        "answered by generations {generations:?} on a guard of generation {}",
                                        engine.generation()
                                    ));
                                }
                                seen.lock().unwrap().insert(engine.generation());
                            }
                            Err(err) => failures.lock().unwrap().push(err),
                        }
                        calls.fetch_add(2, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    let modes = [
        Replace::InPlace,
        Replace::Rename,
        Replace::DeleteThenRecreate,
    ];
    let rounds = 6;
    for n in 1..=rounds {
        let before = calls.load(Ordering::Relaxed);
        // Let traffic run on the serving generation first.
        eventually("callers make progress", || {
            calls.load(Ordering::Relaxed) > before + 20
        });
        setup.replace(n, modes[(n - 1) % modes.len()]);
        let expected = (n + 1) as u64;
        loop {
            let outcome = reloads
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no reload after build {n} ({:?})", modes[(n - 1) % 3]));
            if outcome.engines.get("faulty") == Some(&expected) {
                assert!(!outcome.unchanged);
                break;
            }
        }
        assert_eq!(faulty_status(&runtime).generation, expected);
    }
    let before = calls.load(Ordering::Relaxed);
    eventually("callers make progress on the last generation", || {
        calls.load(Ordering::Relaxed) > before + 20
    });
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.join().unwrap();
    }
    drop(watcher);

    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} calls failed: {:?}",
        failures.len(),
        calls.load(Ordering::Relaxed),
        &failures[..failures.len().min(5)]
    );
    assert!(
        runtime.quarantine().list().is_empty(),
        "nothing quarantined"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.first(), Some(&1));
    assert_eq!(seen.last(), Some(&(rounds as u64 + 1)));

    // Every replaced generation is disposed once its last call is over, and only once.
    eventually("every replaced generation is disposed", || {
        setup.disposed().len() >= rounds && faulty_status(&runtime).draining == 0
    });
    assert_eq!(setup.disposed().len(), rounds, "{:?}", setup.disposed());
    let status = faulty_status(&runtime);
    assert_eq!(status.draining, 0);
    assert_eq!(status.kept_generations, rounds, "old libraries stay mapped");
    assert!(status.kept_bytes >= rounds as u64 * setup.base.len() as u64);

    runtime.shutdown();
    let disposed = setup.disposed();
    assert_eq!(
        disposed.len(),
        rounds + 1,
        "one dispose per replaced generation and one at shutdown: {disposed:?}"
    );
    let unique: BTreeSet<&String> = disposed.iter().collect();
    assert_eq!(unique.len(), disposed.len(), "no instance disposed twice");
}

#[test]
fn a_turn_in_flight_keeps_its_generation_and_it_is_disposed_once_when_the_turn_ends() {
    let setup = Setup::new(json!({}));
    let runtime = setup.runtime();
    let t = transcript();
    let source = runtime.slot_source(None);
    let turn = source.current();
    assert_eq!(turn.generation(), 1);
    assert_eq!(call_both(&turn, &t, "s").unwrap(), [1, 1]);

    setup.replace(1, Replace::Rename);
    let outcome = runtime.reload_plugin("faulty").unwrap();
    assert_eq!(outcome.engines["faulty"], 2);
    // The next turn takes the new generation; the turn in flight still runs on its own.
    let next = source.current();
    assert_eq!(call_both(&next, &t, "s").unwrap(), [2, 2]);
    assert_eq!(call_both(&turn, &t, "s").unwrap(), [1, 1]);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        setup.disposed().is_empty(),
        "generation 1 is not disposed while a turn holds it"
    );
    assert_eq!(faulty_status(&runtime).draining, 1);

    drop(turn);
    eventually("generation 1 is disposed", || setup.disposed().len() == 1);
    assert_eq!(faulty_status(&runtime).draining, 0);
    drop(next);
    runtime.shutdown();
    assert_eq!(setup.disposed().len(), 2, "{:?}", setup.disposed());
}

#[test]
fn unchanged_files_do_nothing_and_a_touch_through_the_watcher_reloads_nothing() {
    let setup = Setup::new(json!({}));
    let runtime = setup.runtime();
    let first = runtime.resolve().unwrap().engine.generation();
    assert_eq!(first, 1);
    // Same bytes written again (a new mtime, a new inode by rename): nothing to do.
    setup.replace(0, Replace::Rename);
    let outcome = runtime.reload_plugin("faulty").unwrap();
    assert!(outcome.unchanged, "{outcome:?}");
    assert_eq!(outcome.engines["faulty"], 1);

    let (events, reloads) = mpsc::channel();
    let watcher = PluginWatcher::start(
        Arc::clone(&runtime),
        WatchOptions {
            debounce: Duration::from_millis(50),
            on_reload: Some(Arc::new(move |event: &WatchEvent| {
                if let WatchEvent::Plugin(result) = event {
                    let _ = events.send(
                        result
                            .as_ref()
                            .map(|o| o.unchanged)
                            .map_err(|e| e.to_string()),
                    );
                }
            })),
        },
    )
    .unwrap();
    setup.replace(0, Replace::InPlace);
    assert_eq!(
        reloads.recv_timeout(Duration::from_secs(30)).unwrap(),
        Ok(true),
        "the watcher saw the write and found the content unchanged"
    );
    drop(watcher);
    assert_eq!(runtime.resolve().unwrap().engine.generation(), 1);
    runtime.shutdown();
    assert_eq!(setup.disposed().len(), 1);
}

/// Files written all the time beside the watched ones (a log in `$PINCER_HOME`, a scratch file
/// in the plugins folder) do not hold a reload back: only events about the plugin's files and
/// `pincer.json` restart the debounce.
#[test]
fn unrelated_files_written_without_pause_do_not_hold_a_reload_back() {
    let setup = Setup::new(json!({}));
    let runtime = setup.runtime();
    assert_eq!(runtime.resolve().unwrap().engine.generation(), 1);
    let (events, reloads) = mpsc::channel();
    let watcher = PluginWatcher::start(
        Arc::clone(&runtime),
        WatchOptions {
            debounce: Duration::from_millis(100),
            on_reload: Some(Arc::new(move |event: &WatchEvent| {
                if let WatchEvent::Plugin(Ok(outcome)) = event {
                    let _ = events.send(outcome.engines["faulty"]);
                }
            })),
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let noise = {
        let stop = Arc::clone(&stop);
        let files = [
            setup.home.path().join("gateway.log"),
            setup.home.path().join("plugins").join("scratch.txt"),
        ];
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for file in &files {
                    std::fs::write(file, n.to_string()).unwrap();
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    setup.replace(1, Replace::Rename);
    let generation = reloads.recv_timeout(Duration::from_secs(20));
    stop.store(true, Ordering::Relaxed);
    noise.join().unwrap();
    assert_eq!(
        generation,
        Ok(2),
        "the plugin was reloaded while other files kept changing"
    );
    drop(watcher);
    runtime.shutdown();
}

#[test]
fn broken_builds_are_refused_with_their_reason_and_the_old_generation_keeps_serving() {
    let setup = Setup::new(json!({}));
    let runtime = setup.runtime();
    let t = transcript();
    let serving = runtime.resolve().unwrap().engine;
    assert_eq!(call_both(&serving, &t, "s").unwrap(), [1, 1]);

    let refused = |what: &str| -> ReloadError {
        let err = runtime
            .reload_plugin("faulty")
            .expect_err(&format!("{what} must be refused"));
        assert_eq!(err.code(), "reload_refused", "{what}: {err}");
        let message = err.to_string();
        assert!(
            message.contains("generation 1 keeps serving"),
            "{what}: {message}"
        );
        // The serving generation still answers, and so does a fresh resolution.
        let again = runtime.resolve().unwrap();
        assert!(
            again.resolution.fallback.is_none(),
            "{what}: {:?}",
            again.resolution
        );
        assert_eq!(call_both(&again.engine, &t, "s").unwrap(), [1, 1], "{what}");
        assert!(
            runtime.quarantine().list().is_empty(),
            "{what}: not quarantined"
        );
        err
    };

    // Truncated (as a copy caught half way would be).
    std::fs::write(&setup.library, &setup.base[..setup.base.len() / 2]).unwrap();
    let err = refused("a truncated library");
    eprintln!("truncated: {err}");

    // Another ABI: a plugin built against API 2.0 put in its place (manifest and library).
    let future = staged_variant("future-api");
    for entry in std::fs::read_dir(&setup.plugin).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    copy_plugin(&future, setup.plugin.parent().unwrap(), "faulty");
    let err = refused("a library built against another API major");
    eprintln!("api: {err}");

    // A build whose factory panics, then one whose factory fails.
    for entry in std::fs::read_dir(&setup.plugin).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let fresh = Setup::new(json!({}));
    copy_plugin(&fresh.plugin, setup.plugin.parent().unwrap(), "faulty");
    std::fs::write(&setup.library, setup.build(7)).unwrap();
    std::fs::write(setup.plugin.join("factory-behaviour"), "panic").unwrap();
    let err = refused("a build whose factory panics");
    assert!(err.to_string().contains("panicked"), "{err}");
    std::fs::write(setup.library.clone(), setup.build(8)).unwrap();
    std::fs::write(setup.plugin.join("factory-behaviour"), "error").unwrap();
    let err = refused("a build whose factory fails");
    assert!(
        err.to_string().contains("configured to fail in factory"),
        "{err}"
    );
    // Refused builds never got an engine; the serving one was not touched.
    assert!(setup.disposed().is_empty(), "{:?}", setup.disposed());
    let disposed_refused = 0;

    // A good build after all that: generation 2.
    std::fs::remove_file(setup.plugin.join("factory-behaviour")).unwrap();
    let outcome = runtime.reload_plugin("faulty").unwrap();
    assert_eq!(outcome.engines["faulty"], 2);
    assert_eq!(
        call_both(&runtime.resolve().unwrap().engine, &t, "s").unwrap(),
        [2, 2]
    );
    assert_eq!(call_both(&serving, &t, "s").unwrap(), [1, 1]);
    drop(serving);
    eventually("generation 1 is disposed", || {
        setup.disposed().len() == disposed_refused + 1
    });
    runtime.shutdown();
    assert_eq!(setup.disposed().len(), disposed_refused + 2);
}

#[test]
fn a_successful_reload_clears_the_engines_quarantine() {
    let setup = Setup::new(json!({ "assemble": "error" }));
    let runtime = setup.runtime();
    let t = transcript();
    let engine = runtime.resolve().unwrap().engine;
    let answer = engine
        .assemble(assemble_request(&t, "s"), Arc::new(AbortController::new()))
        .unwrap()
        .answer;
    assert_eq!(answer.answered_by, "legacy", "the failure fell back");
    assert!(runtime.quarantine().is_quarantined("faulty"));
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");

    setup.replace(1, Replace::InPlace);
    let outcome = runtime.reload_plugin("faulty").unwrap();
    assert_eq!(outcome.engines["faulty"], 2);
    assert!(
        !runtime.quarantine().is_quarantined("faulty"),
        "a reload is a re-registration (§3.1 step 6)"
    );
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "faulty");
    assert_eq!(resolved.engine.generation(), 2);
    // The new generation answers ingest itself.
    let ingested = resolved
        .engine
        .ingest(ingest_request(&t, "s"), Arc::new(AbortController::new()))
        .unwrap();
    assert_eq!(
        (
            ingested.answer.answered_by.as_str(),
            ingested.answer.generation
        ),
        ("faulty", 2)
    );
    runtime.shutdown();
}

#[test]
fn config_changes_take_effect_for_new_turns_and_a_broken_config_is_refused() {
    let setup = Setup::new(json!({}));
    let runtime = setup.runtime();
    let t = transcript();
    let source = runtime.slot_source(None);
    let turn = source.current();
    assert_eq!((turn.id(), turn.generation()), ("faulty", 1));

    // Untouched config: nothing to do.
    let same = runtime.reload_config().unwrap();
    assert!(!same.changed);

    // A changed engine config: a new generation, made with it.
    setup.write_config(json!({ "errorMessage": "reconfigured" }), json!({}));
    let outcome = runtime.reload_config().unwrap();
    assert!(outcome.changed && !outcome.slot_changed, "{outcome:?}");
    assert_eq!(
        outcome.reconfigured,
        BTreeMap::from([("faulty".to_owned(), 2)])
    );
    let next = source.current();
    assert_eq!(next.generation(), 2);
    assert_eq!(
        call_both(&turn, &t, "s").unwrap(),
        [1, 1],
        "the turn in flight keeps its generation"
    );
    drop(turn);
    eventually("generation 1 is disposed", || setup.disposed().len() == 1);

    // A config that no longer parses: refused, the one in force keeps serving.
    std::fs::write(
        setup.home.path().join("pincer.json"),
        "{ plugins: { slots: ",
    )
    .unwrap();
    let err = runtime.reload_config().unwrap_err();
    assert_eq!(err.code(), "config_refused", "{err}");
    assert!(err.to_string().contains("pincer.json"), "{err}");
    assert_eq!(source.current().generation(), 2);
    assert_eq!(runtime.config().config.selected_engine(), "faulty");

    // A config whose engine factory fails: refused too.
    setup.write_config(json!({ "factory": "panic" }), json!({}));
    let err = runtime.reload_config().unwrap_err();
    assert_eq!(err.code(), "engine_config_refused", "{err}");
    assert_eq!(call_both(&source.current(), &t, "s").unwrap(), [2, 2]);

    // The slot moved to legacy: new turns run on legacy.
    setup.write_config(json!({ "errorMessage": "reconfigured" }), json!({}));
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(setup.home.path().join("pincer.json")).unwrap(),
    )
    .unwrap();
    config["plugins"]["slots"]["contextEngine"] = json!("legacy");
    std::fs::write(setup.home.path().join("pincer.json"), config.to_string()).unwrap();
    let outcome = runtime.reload_config().unwrap();
    assert!(
        outcome.slot_changed && outcome.selected == "legacy",
        "{outcome:?}"
    );
    assert_eq!(source.current().id(), "legacy");

    // Back to faulty, with the plugin disabled: legacy answers, the slot is kept.
    config["plugins"]["slots"]["contextEngine"] = json!("faulty");
    config["plugins"]["entries"]["faulty"]["enabled"] = json!(false);
    std::fs::write(setup.home.path().join("pincer.json"), config.to_string()).unwrap();
    let outcome = runtime.reload_config().unwrap();
    assert_eq!(outcome.disabled, ["faulty"], "{outcome:?}");
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");
    drop(next);
    eventually("the disabled plugin's generation is disposed", || {
        setup.disposed().len() == 2
    });

    // Enabled again: a new generation on first use.
    config["plugins"]["entries"]["faulty"]["enabled"] = json!(true);
    std::fs::write(setup.home.path().join("pincer.json"), config.to_string()).unwrap();
    let outcome = runtime.reload_config().unwrap();
    assert_eq!(outcome.enabled, ["faulty"], "{outcome:?}");
    let engine = source.current();
    assert_eq!((engine.id(), engine.generation()), ("faulty", 3));
    assert_eq!(call_both(&engine, &t, "s").unwrap(), [3, 3]);
    drop(engine);
    runtime.shutdown();
    let disposed = setup.disposed();
    assert_eq!(disposed.len(), 3, "{disposed:?}");
}

#[test]
fn a_plugin_enabled_by_a_config_change_is_loaded_and_one_rejected_at_start_by_a_reload() {
    // Off at start: never loaded.
    let setup = Setup::new(json!({}));
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(setup.home.path().join("pincer.json")).unwrap(),
    )
    .unwrap();
    config["plugins"]["entries"]["faulty"]["enabled"] = json!(false);
    std::fs::write(setup.home.path().join("pincer.json"), config.to_string()).unwrap();
    let runtime = setup.runtime();
    assert_eq!(runtime.resolve().unwrap().resolution.resolved, "legacy");
    config["plugins"]["entries"]["faulty"]["enabled"] = json!(true);
    std::fs::write(setup.home.path().join("pincer.json"), config.to_string()).unwrap();
    let outcome = runtime.reload_config().unwrap();
    assert_eq!(
        (outcome.enabled.as_slice(), outcome.loaded.as_slice()),
        (&["faulty".to_owned()][..], &["faulty".to_owned()][..])
    );
    assert_eq!(runtime.resolve().unwrap().resolution.resolved, "faulty");
    runtime.shutdown();

    // Broken at start: rejected; a fixed build loads on reload.
    let setup = Setup::new(json!({}));
    std::fs::write(&setup.library, &setup.base[..1000]).unwrap();
    let runtime = setup.runtime();
    assert_eq!(runtime.resolve().unwrap().resolution.resolved, "legacy");
    std::fs::write(&setup.library, &setup.base).unwrap();
    let outcome = runtime.reload_plugin("faulty").unwrap();
    assert_eq!(outcome.engines["faulty"], 1);
    assert!(!runtime.quarantine().is_quarantined("faulty"));
    let resolved = runtime.resolve().unwrap();
    assert_eq!(
        (
            resolved.resolution.resolved.as_str(),
            resolved.engine.generation()
        ),
        ("faulty", 1)
    );
    runtime.shutdown();
}

#[test]
fn unknown_and_disabled_plugins_are_refused_with_what_to_do() {
    let setup = Setup::new(json!({}));
    let runtime = setup.runtime();
    let err = runtime.reload_plugin("nope").unwrap_err();
    assert_eq!(err.code(), "unknown_plugin");
    assert!(err.to_string().contains("known: faulty"), "{err}");
    runtime.shutdown();
}

/// A model that, during the first turn's model call, replaces the engine's library and
/// reloads it: the turn is then mid-way on generation 1 while generation 2 serves.
struct ReloadingModel {
    runtime: Arc<Runtime>,
    setup: Arc<Setup>,
    /// Mid-turn: (the reload's new generation, generation 1 still draining, disposes so far).
    mid_turn: Mutex<Option<(u64, usize, usize)>>,
}

impl ModelProvider for ReloadingModel {
    fn name(&self) -> &str {
        "reloading"
    }

    fn complete(&self, _: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let mut mid_turn = self.mid_turn.lock().unwrap();
        if mid_turn.is_none() {
            self.setup.replace(1, Replace::Rename);
            let outcome = self.runtime.reload_plugin("faulty").unwrap();
            *mid_turn = Some((
                outcome.engines["faulty"],
                faulty_status(&self.runtime).draining,
                self.setup.disposed().len(),
            ));
        }
        Ok(ModelReply {
            message: pincer_plugin_api::abi::latest::Message::assistant("ok"),
        })
    }
}

#[test]
fn a_harness_turn_in_flight_finishes_on_its_generation_and_the_next_turn_takes_the_new_one() {
    let setup = Arc::new(Setup::new(json!({})));
    let runtime = setup.runtime();
    let model = Arc::new(ReloadingModel {
        runtime: Arc::clone(&runtime),
        setup: Arc::clone(&setup),
        mid_turn: Mutex::new(None),
    });
    let harness = Harness::with_source(
        runtime.slot_source(None),
        JsonlStore::new(setup.home.path().join("agents")),
        model.clone(),
        Arc::new(NoTools),
        HarnessOptions::new(128_000),
    );
    let mut session = harness.open_session(&"reload".parse().unwrap()).unwrap();
    let user = pincer_plugin_api::abi::latest::Message::user;
    harness.turn(&mut session, user("first")).unwrap();
    assert_eq!(
        *model.mid_turn.lock().unwrap(),
        Some((2, 1, 0)),
        "mid-turn: generation 2 serves, generation 1 drains, nothing disposed yet"
    );
    // The rest of the first turn (afterTurn, ingest) ran on generation 1, before its dispose:
    // faulty fails any call after dispose, which would have quarantined it.
    assert!(runtime.quarantine().list().is_empty());
    assert_eq!(session.served_by().map(|s| s.generation), Some(1));
    // The turn let its engine go when it ended: generation 1 is disposed once while the
    // session sits idle (an idle session holds no generation).
    eventually("generation 1 is disposed", || setup.disposed().len() == 1);
    assert_eq!(faulty_status(&runtime).draining, 0);

    harness.turn(&mut session, user("second")).unwrap();
    assert_eq!(session.served_by().map(|s| s.generation), Some(2));
    assert_eq!(setup.disposed().len(), 1);
    assert!(runtime.quarantine().list().is_empty());
    drop(session);
    drop(harness);
    runtime.shutdown();
    assert_eq!(setup.disposed().len(), 2, "{:?}", setup.disposed());
}

/// One build, one generation: a new build (library and manifest) landing while a reload is
/// still verifying the files before it never makes the old build look changed. The library is
/// padded to 48 MiB so that hashing it takes long enough for the next build to land meanwhile.
/// (The gateway's reload test once saw three builds make four new generations under the whole
/// suite's load: the fingerprint re-read the manifest after the library had been hashed, so the
/// old library was fingerprinted with the new manifest, looked changed, and was loaded again.)
#[test]
fn a_build_landing_while_a_reload_verifies_the_last_one_never_makes_two_generations() {
    let setup = Setup::new(json!({}));
    let padded = |n: usize| {
        let mut bytes = setup.build(n);
        bytes.resize(bytes.len() + (48 << 20), 0);
        bytes.extend_from_slice(format!("\0padded-build-{n}\0").as_bytes());
        bytes
    };
    // A build: its bytes and their sha256 (computed before it is installed: installing it is
    // then quick, well within the time a reload takes to hash the previous one).
    let build = |n: usize| {
        let bytes = padded(n);
        let sha = pincer_host::testing::plugins::verify::sha256_hex(&bytes);
        (bytes, sha)
    };
    // Written beside and renamed over, then the manifest pinning its sha256.
    let install = |(bytes, sha): (Vec<u8>, String)| {
        let tmp = setup.plugin.join(".new-build.tmp");
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(&tmp, &setup.library).unwrap();
        let mut manifest = read_manifest_json(&setup.plugin);
        manifest["sha256"] = json!(sha);
        write_manifest_json(&setup.plugin, &manifest);
        sha
    };
    let first_sha = install(build(1));
    let next = build(2);
    let runtime = setup.runtime();
    assert_eq!(runtime.resolve().unwrap().engine.generation(), 1);
    // A reload of the unchanged build 1, and build 2 landing while it hashes the library.
    let reloading = {
        let runtime = Arc::clone(&runtime);
        std::thread::spawn(move || runtime.reload_plugin("faulty"))
    };
    std::thread::sleep(Duration::from_millis(30));
    let second_sha = install(next);
    match reloading.join().unwrap() {
        // Done before build 2 landed, or refused because it landed meanwhile.
        Ok(outcome) if outcome.unchanged => assert_eq!(outcome.sha256, first_sha),
        Err(ReloadError::Refused { .. }) => {}
        // Build 1 loaded again as a new generation: one build, two generations.
        Ok(outcome) => assert_eq!(
            outcome.sha256, second_sha,
            "the unchanged build reloaded as generation {:?}",
            outcome.engines
        ),
        Err(other) => panic!("{other}"),
    }
    // The reload of build 2 (if the first did not already load it): generation 2, not 3.
    let outcome = runtime.reload_plugin("faulty").unwrap();
    assert_eq!(outcome.sha256, second_sha);
    assert_eq!(
        runtime.resolve().unwrap().engine.generation(),
        2,
        "one new build, one new generation: {outcome:?}"
    );
    runtime.shutdown();
}
