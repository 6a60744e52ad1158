//! Engine failures through the real boundary: the `faulty` library is configured to panic or
//! fail in each method in turn; every failure comes back as an error, the engine is
//! quarantined with the contract's operation and reason, `legacy` answers where the contract
//! says so (`compact` and `prepareSubagentSpawn` fail closed), and the host goes on.

use pincer_host::config::{LoadedConfig, PincerHome};
use pincer_host::report::exercise_engine;
use pincer_host::session::Transcript;
use pincer_host::testing::engines::instance::CallErrorKind;
use pincer_host::{Runtime, RuntimeOptions};
use pincer_plugin_api::abi::ROption;
use pincer_tests::*;
use serde_json::json;

/// A runtime with the staged plugins, slot = `engine`, and `config` for it.
fn runtime(home: &TempDir, engine: &str, config: serde_json::Value) -> Runtime {
    let text = json!({
        "plugins": {
            "slots": { "contextEngine": engine },
            "entries": { (engine): { "config": config } },
        }
    });
    std::fs::write(home.path().join("pincer.json"), text.to_string()).unwrap();
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    options.extra_plugin_dirs = vec![staged_plugins_dir()];
    Runtime::open(options).expect("config reads")
}

fn transcript() -> Transcript {
    Transcript::read(&example_conversation()).unwrap()
}

const METHODS: [&str; 9] = [
    "bootstrap",
    "ingest",
    "ingestBatch",
    "assemble",
    "afterTurn",
    "maintain",
    "compact",
    "prepareSubagentSpawn",
    "onSubagentEnded",
];

#[test]
fn every_method_panicking_or_failing_is_caught_quarantined_and_answered_per_contract() {
    for behaviour in ["panic", "error"] {
        for method in METHODS {
            let home = TempDir::new().unwrap();
            let runtime = runtime(&home, "faulty", json!({ (method): behaviour }));
            let resolved = runtime.resolve().unwrap();
            assert_eq!(resolved.resolution.resolved, "faulty");
            let outcomes = exercise_engine(&resolved.engine, runtime.quarantine(), &transcript());
            let o = outcomes
                .iter()
                .find(|o| o.method.as_str() == method)
                .unwrap();
            let error = o
                .error
                .as_ref()
                .unwrap_or_else(|| panic!("{method}/{behaviour}: no error: {o:?}"));
            match behaviour {
                "panic" => {
                    assert_eq!(error.kind, CallErrorKind::Panicked, "{method}");
                    assert!(
                        error
                            .message
                            .contains(&format!("configured to panic in {method}")),
                        "{}",
                        error.message
                    );
                }
                _ => assert_eq!(error.kind, CallErrorKind::Failed, "{method}"),
            }
            assert!(o.quarantined, "{method}/{behaviour}: quarantined");
            let fail_closed = matches!(method, "compact" | "prepareSubagentSpawn");
            if fail_closed {
                assert_eq!(o.outcome, "failed", "{method} fails closed");
            } else {
                assert_eq!(o.outcome, "fallback", "{method} falls back");
                assert_eq!(o.answered_by.as_deref(), Some("legacy"));
            }
            // Every other method still reached the engine (quarantine cleared between calls).
            for other in outcomes
                .iter()
                .filter(|x| x.method.as_str() != method && x.method.as_str() != "rollback")
            {
                assert_eq!(other.outcome, "ok", "{method}/{behaviour}: {other:?}");
            }
            runtime.shutdown();
        }
    }
}

#[test]
fn quarantine_record_names_the_first_failure_and_info_reads_as_legacy() {
    let home = TempDir::new().unwrap();
    let runtime = runtime(
        &home,
        "faulty",
        json!({ "assemble": "panic", "ingest": "error" }),
    );
    let resolved = runtime.resolve().unwrap();
    let t = transcript();
    assert_eq!(resolved.engine.info().id, "faulty");
    let view = t
        .assemble(&resolved.engine, "s1", None)
        .expect("legacy answers");
    assert_eq!(view.answer.answered_by, "legacy");
    assert_eq!(
        view.messages().len(),
        t.messages().len(),
        "legacy passes everything through"
    );
    let record = runtime.quarantine().get("faulty").expect("quarantined");
    assert_eq!(record.operation, "assemble");
    assert_eq!(
        record.owner.as_ref().map(ToString::to_string).as_deref(),
        Some("plugin:faulty")
    );
    assert!(record.reason.contains("configured to panic in assemble"));
    // While quarantined: info is legacy's, and later calls go to legacy without touching faulty.
    assert_eq!(resolved.engine.info().id, "legacy");
    let again = t.assemble(&resolved.engine, "s1", None).unwrap();
    assert!(again.answer.was_quarantined);
    // The mirror on disk lets another process see it.
    let mirror =
        std::fs::read_to_string(home.path().join("state/context-engine-quarantine.json")).unwrap();
    assert!(mirror.contains("\"engineId\": \"faulty\""));
    // A new resolution in the same process is legacy, silently.
    let next = runtime.resolve().unwrap();
    assert_eq!(next.resolution.resolved, "legacy");
}

#[test]
fn factory_error_and_factory_panic_quarantine_with_operation_factory() {
    for behaviour in ["error", "panic"] {
        let home = TempDir::new().unwrap();
        let runtime = runtime(&home, "faulty", json!({ "factory": behaviour }));
        let resolved = runtime.resolve().unwrap();
        assert_eq!(resolved.resolution.resolved, "legacy", "{behaviour}");
        let record = runtime.quarantine().get("faulty").unwrap();
        assert_eq!(record.operation, "factory");
        assert!(record.reason.contains("factory"), "{}", record.reason);
    }
}

#[test]
fn config_violating_the_schema_is_refused_before_the_factory_runs() {
    let home = TempDir::new().unwrap();
    let runtime = runtime(&home, "sliding-window", json!({ "tokenBudget": "lots" }));
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");
    let reason = resolved.resolution.reason.unwrap();
    assert!(
        reason.contains("tokenBudget") && reason.contains("plugins.entries"),
        "{reason}"
    );
    assert_eq!(
        runtime
            .quarantine()
            .get("sliding-window")
            .unwrap()
            .operation,
        "factory"
    );
}

#[test]
fn plugin_tracing_events_reach_the_host_subscriber() {
    // Engine calls run on worker threads, so the subscriber must be the global one.
    static LOGS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
    struct Sink;
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            LOGS.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(|| Sink)
        .with_ansi(false)
        .try_init();
    let home = TempDir::new().unwrap();
    let runtime = runtime(&home, "faulty", json!({}));
    let resolved = runtime.resolve().unwrap();
    transcript().assemble(&resolved.engine, "s1", None).unwrap();
    runtime.shutdown();
    let logs = String::from_utf8(LOGS.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("faulty: called"),
        "plugin event forwarded: {logs}"
    );
    assert!(
        logs.contains("engine_id=\"faulty\"") || logs.contains("engine_id=faulty"),
        "{logs}"
    );
    assert!(
        logs.contains("faulty: disposed"),
        "dispose ran once at shutdown: {logs}"
    );
}

#[test]
fn the_default_engine_is_legacy_and_passes_messages_through_uncopied() {
    let home = TempDir::new().unwrap();
    let options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    let runtime = Runtime::with_config(
        options,
        LoadedConfig::load(&home.path().join("pincer.json")).unwrap(),
    );
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");
    let t = transcript();
    let view = t.assemble(&resolved.engine, "s1", None).unwrap();
    // Legacy gives no estimate: the caller estimates.
    assert_eq!(view.result.estimated_tokens, ROption::RNone);
    let kept = view.messages();
    // Every input message is kept, in order, and as the same object, not a copy: each kept
    // message is the input message at the same address.
    assert!(!t.messages().is_empty());
    assert_eq!(kept.len(), t.messages().len(), "legacy keeps every message");
    for (index, (kept, input)) in kept.iter().zip(t.messages()).enumerate() {
        assert!(std::ptr::eq(*kept, input), "message {index} was copied");
    }
}
