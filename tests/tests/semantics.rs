//! OpenClaw's context-engine slot semantics (docs/CONTRACT.md §3–§7, §9.1), ported as tests against
//! the real loaded libraries: registry rules, resolution, runtime quarantine, host-parameter
//! projection, host requirements and bounded calls.

use std::sync::Arc;
use std::time::Duration;

use pincer_host::config::PincerHome;
use pincer_host::operator::HostDescriptor;
use pincer_host::runtime::PluginState;
use pincer_host::runtime::Quarantine;
use pincer_host::session::Transcript;
use pincer_host::testing::engines::instance::CallErrorKind;
use pincer_host::testing::engines::legacy::create_legacy;
use pincer_host::testing::engines::request::{
    no_entry_ids, AssembleRequest, BootstrapRequest, CompactRequest, HostInputs,
    IngestBatchRequest, MaintainRequest, PromptCacheInput,
};
use pincer_host::testing::engines::services::{
    HostServices, NoRuntimeCompaction, RuntimeCompactor,
};
use pincer_host::testing::slot::registry::{
    EngineFactory, Lifecycle, RegisterError, RegisterOptions, Registry,
};
use pincer_host::testing::types::{Owner, LEGACY_ENGINE_ID};
use pincer_host::{ResolveError, Runtime, RuntimeOptions};
use pincer_plugin_api::abi::latest::{AbortController, ToolCallParams};
use pincer_plugin_api::abi::{ROption, RStr};
use pincer_plugin_api::HostOperation;
use pincer_tests::*;
use serde_json::{json, Value};

fn runtime_with(home: &TempDir, config: Value) -> Runtime {
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    options.extra_plugin_dirs = vec![staged_plugins_dir()];
    Runtime::open(options).unwrap()
}

fn faulty(home: &TempDir, engine_config: Value, extra: Value) -> Runtime {
    let mut config = json!({
        "plugins": {
            "slots": { "contextEngine": "faulty" },
            "entries": { "faulty": { "config": engine_config } }
        }
    });
    merge(&mut config, extra);
    runtime_with(home, config)
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// A forced manual-style compaction request for `session`.
fn compact_request(
    session: &str,
    messages: Arc<[pincer_plugin_api::Message]>,
    host: HostInputs,
) -> Arc<CompactRequest> {
    Arc::new(CompactRequest::manual(
        Arc::from(session),
        Arc::from(format!("{session}.jsonl")),
        messages,
        no_entry_ids(),
        host,
    ))
}

fn transcript() -> Transcript {
    Transcript::read(&example_conversation()).unwrap()
}

fn native_legacy_factory() -> EngineFactory {
    EngineFactory::Native(Arc::new(|input| create_legacy(input.services.clone())))
}

/// How often each method of the engine behind `resolved` was called (faulty's own count).
fn faulty_calls(resolved: &pincer_host::ResolvedEngine) -> Value {
    let result = resolved
        .engine
        .primary()
        .call_tool(&ToolCallParams {
            session_id: RStr::from_str("s"),
            tool_name: RStr::from_str("faulty_calls"),
            arguments_json: RStr::from_str("{}"),
            host: Default::default(),
        })
        .unwrap();
    serde_json::from_str(&result.content).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Registry (§3.1–3.3)
// ---------------------------------------------------------------------------------------------

#[test]
fn registry_locks_legacy_to_core_and_refuses_foreign_ids() {
    let registry = Registry::new(Arc::new(Quarantine::new(None)));
    registry
        .register_for_owner(
            LEGACY_ENGINE_ID,
            native_legacy_factory(),
            Owner::Core,
            RegisterOptions::default(),
        )
        .unwrap();
    // The legacy steal attempt, from an embedder and from a plugin.
    let err = registry
        .register_for_owner(
            LEGACY_ENGINE_ID,
            native_legacy_factory(),
            Owner::PublicSdk,
            RegisterOptions::default(),
        )
        .unwrap_err();
    assert_eq!(
        err,
        RegisterError::Refused {
            id: "legacy".into(),
            existing_owner: Owner::Core
        }
    );
    assert_eq!(
        registry
            .register_plugin_engine("thief", "legacy", native_legacy_factory())
            .unwrap_err(),
        "context engine id reserved by core: legacy"
    );
    assert_eq!(
        registry
            .register_plugin_engine("p", "  ", native_legacy_factory())
            .unwrap_err(),
        "context engine registration missing id"
    );
    // Another owner's id.
    registry
        .register_for_owner(
            "mine",
            native_legacy_factory(),
            Owner::PublicSdk,
            RegisterOptions::default(),
        )
        .unwrap();
    assert_eq!(
        registry
            .register_plugin_engine("p", "mine", native_legacy_factory())
            .unwrap_err(),
        "context engine already registered: mine (public-sdk)"
    );
    // Same owner without refresh: refused; a blank owner: refused with the contract text.
    assert!(registry
        .register_for_owner(
            "mine",
            native_legacy_factory(),
            Owner::PublicSdk,
            RegisterOptions::default()
        )
        .is_err());
    assert_eq!(
        registry
            .register_for_owner(
                "x",
                native_legacy_factory(),
                Owner::plugin(" "),
                RegisterOptions::default()
            )
            .unwrap_err()
            .to_string(),
        "registerContextEngineForOwner: owner must be a non-empty string, got \"plugin: \""
    );
    // A blank owner text is no owner at all: it cannot even be spelled as one.
    assert_eq!(Owner::parse(" "), None);
    assert_eq!(Owner::parse(""), None);
    assert_eq!(Owner::parse("plugin:"), None);
    // A read-only-discovery registration does not replace a runtime one.
    let ro = RegisterOptions {
        allow_same_owner_refresh: true,
        lifecycle: Lifecycle::ReadOnlyDiscovery,
    };
    registry
        .register_for_owner("mine", native_legacy_factory(), Owner::PublicSdk, ro)
        .unwrap();
    assert_eq!(registry.get("mine").unwrap().lifecycle, Lifecycle::Runtime);
}

#[test]
fn re_registration_and_clear_for_owner_clear_the_quarantine() {
    let quarantine = Arc::new(Quarantine::new(None));
    let registry = Registry::new(Arc::clone(&quarantine));
    registry
        .register_plugin_engine("p", "e", native_legacy_factory())
        .unwrap();
    quarantine.record("e", Some(&Owner::plugin("p")), "assemble", "boom");
    registry
        .register_plugin_engine("p", "e", native_legacy_factory())
        .unwrap();
    assert!(
        !quarantine.is_quarantined("e"),
        "runtime re-registration clears"
    );
    quarantine.record("e", Some(&Owner::plugin("p")), "assemble", "boom");
    registry.clear_for_owner(&Owner::plugin("p"));
    assert!(!quarantine.is_quarantined("e"));
    assert!(registry.get("e").is_none());
    quarantine.record("a", None, "ingest", "x");
    quarantine.record("b", None, "ingest", "y");
    quarantine.clear(Some("a"));
    assert!(!quarantine.is_quarantined("a") && quarantine.is_quarantined("b"));
    quarantine.clear(None);
    assert!(quarantine.list().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Resolution (§3.4, §11)
// ---------------------------------------------------------------------------------------------

#[test]
fn disabled_denied_or_globally_off_plugins_give_legacy_silently_with_the_slot_kept() {
    let cases = [
        json!({ "plugins": { "entries": { "faulty": { "enabled": false } } } }),
        json!({ "plugins": { "enabled": false } }),
        json!({ "plugins": { "deny": ["faulty"] } }),
        json!({ "plugins": { "allow": ["sliding-window"] } }),
    ];
    for extra in cases {
        let home = TempDir::new().unwrap();
        // A factory that would panic proves it is never called.
        let runtime = faulty(&home, json!({ "factory": "panic" }), extra.clone());
        let resolved = runtime.resolve().unwrap();
        assert_eq!(
            resolved.resolution.selected, "faulty",
            "{extra}: the slot is kept"
        );
        assert_eq!(resolved.resolution.resolved, "legacy", "{extra}");
        assert!(
            runtime.quarantine().list().is_empty(),
            "{extra}: no quarantine"
        );
        let plugins = runtime.plugins();
        let plugin = plugins.iter().find(|p| p.id == "faulty").unwrap();
        assert_eq!(
            plugin.status,
            PluginState::Disabled,
            "{extra}: not even loaded"
        );
    }
}

#[test]
fn an_unregistered_engine_is_quarantined_as_resolve_and_legacy_answers() {
    let home = TempDir::new().unwrap();
    let runtime = runtime_with(
        &home,
        json!({ "plugins": { "slots": { "contextEngine": "lossless-claw" } } }),
    );
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");
    let record = runtime.quarantine().get("lossless-claw").unwrap();
    assert_eq!(record.operation, "resolve");
    assert_eq!(
        record.reason, "not registered",
        "§3.4.4: the record's reason"
    );
    assert_eq!(
        resolved.resolution.reason.as_deref(),
        Some("Context engine \"lossless-claw\" is not registered. Available engines: faulty, legacy, lossless, sliding-window"),
        "the available engines go to the diagnostic"
    );
}

#[test]
fn slot_values_that_mean_legacy() {
    for slot in [
        json!(null),
        json!(""),
        json!("  "),
        json!("legacy"),
        json!("none"),
    ] {
        let home = TempDir::new().unwrap();
        let runtime = runtime_with(
            &home,
            json!({ "plugins": { "slots": { "contextEngine": slot } } }),
        );
        let resolved = runtime.resolve().unwrap();
        assert_eq!(resolved.resolution.resolved, "legacy", "{slot}");
        assert!(resolved.resolution.reason.is_none());
    }
}

#[test]
fn strict_policy_fails_the_operation_instead_of_falling_back() {
    let home = TempDir::new().unwrap();
    let runtime = runtime_with(
        &home,
        json!({ "plugins": { "slots": { "contextEngine": "nope" }, "contextEngineFallback": "strict" } }),
    );
    let err = runtime.resolve().err().expect("strict refuses");
    assert!(matches!(err, ResolveError::Strict { .. }));
    assert!(err.to_string().contains("is not registered"), "{err}");

    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "assemble": "panic" }),
        json!({ "plugins": { "contextEngineFallback": "strict" } }),
    );
    let resolved = runtime.resolve().unwrap();
    let err = transcript()
        .assemble(&resolved.engine, "s", None)
        .err()
        .expect("strict: the error, not legacy");
    assert_eq!(err.error.kind, CallErrorKind::Panicked);
    assert!(
        runtime.quarantine().is_quarantined("faulty"),
        "still recorded"
    );
    let err = transcript()
        .assemble(&resolved.engine, "s", None)
        .err()
        .unwrap();
    assert!(
        err.error.message.contains("strict"),
        "{}",
        err.error.message
    );
}

#[test]
fn one_instance_per_engine_the_factory_runs_once_across_operations() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(&home, json!({}), json!({}));
    let a = runtime.resolve().unwrap();
    let b = runtime.resolve().unwrap();
    assert!(Arc::ptr_eq(a.engine.primary(), b.engine.primary()));
}

// ---------------------------------------------------------------------------------------------
// Runtime quarantine (§4)
// ---------------------------------------------------------------------------------------------

#[test]
fn aborts_never_quarantine() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "assemble": "hang-until-abort", "hangMs": 30000, "hangMarker": true }),
        json!({}),
    );
    let resolved = runtime.resolve().unwrap();
    let t = transcript();
    let abort = Arc::new(AbortController::new());
    let trigger = abort_once_faulty_hangs(home.path(), "assemble", Arc::clone(&abort));
    let request = assemble_request(&t, "s");
    let err = resolved
        .engine
        .assemble(Arc::clone(&request), abort)
        .expect_err("aborted");
    trigger.join().unwrap();
    assert_eq!(err.error.kind, CallErrorKind::Aborted);
    assert!(!runtime.quarantine().is_quarantined("faulty"));
    // A signal that fired before the call: the abort error, without calling the engine.
    let fired = Arc::new(AbortController::new());
    fired.abort();
    let err = resolved.engine.assemble(request, fired).err().unwrap();
    assert_eq!(err.error.message, "Context engine operation aborted.");
    assert!(!runtime.quarantine().is_quarantined("faulty"));
}

#[test]
fn canned_results_answer_methods_legacy_lacks() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "bootstrap": "error", "maintain": "error", "ingestBatch": "error" }),
        json!({}),
    );
    let resolved = runtime.resolve().unwrap();
    let t = transcript();
    let id: Arc<str> = Arc::from("s");
    let file: Arc<str> = Arc::from("s.jsonl");
    let boot = resolved
        .engine
        .bootstrap(
            Arc::new(BootstrapRequest {
                session_id: id.clone(),
                session_file: file.clone(),
                host: HostInputs::default(),
            }),
            Arc::new(AbortController::new()),
        )
        .unwrap()
        .unwrap();
    assert!(!boot.value.bootstrapped);
    assert_eq!(
        boot.value.reason.as_ref().map(|r| r.as_str()).into_option(),
        Some("context engine downgraded to legacy")
    );
    runtime.quarantine().clear(None);
    let maintain = resolved
        .engine
        .maintain(
            Arc::new(MaintainRequest {
                session_id: id.clone(),
                session_file: file,
                reason: "turn".into(),
                host: HostInputs::default(),
            }),
            Arc::new(AbortController::new()),
        )
        .unwrap()
        .unwrap();
    assert!(
        !maintain.value.changed
            && maintain.value.bytes_freed == 0
            && maintain.value.rewritten_entries == 0
    );
    runtime.quarantine().clear(None);
    let batch = resolved
        .engine
        .ingest_batch(
            Arc::new(IngestBatchRequest {
                session_id: id,
                messages: t.shared_messages(),
                entry_ids: t.entry_ids(),
                range: 0..3,
                is_heartbeat: false,
                host: HostInputs::default(),
            }),
            Arc::new(AbortController::new()),
        )
        .unwrap()
        .unwrap();
    assert_eq!(batch.value.ingested_count, 0);
    assert_eq!(batch.answer.answered_by, "legacy");
}

#[test]
fn a_validator_shaped_failure_is_not_retried_and_quarantines_assemble() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "assemble": "error", "errorMessage": "Unrecognized key(s) in object: 'runtimeSettings'" }),
        json!({}),
    );
    let resolved = runtime.resolve().unwrap();
    let view = transcript().assemble(&resolved.engine, "s", None).unwrap();
    assert_eq!(view.answer.answered_by, "legacy");
    assert_eq!(
        runtime.quarantine().get("faulty").unwrap().operation,
        "assemble"
    );
    assert_eq!(
        faulty_calls(&resolved)["assemble"],
        1,
        "called once: no retry without the key"
    );
}

// ---------------------------------------------------------------------------------------------
// Host-parameter projection (§6.1)
// ---------------------------------------------------------------------------------------------

fn every_host_param(runtime: &Runtime, resolved: &pincer_host::ResolvedEngine) -> HostInputs {
    HostInputs {
        session_key: Some(Arc::from("key-1")),
        prompt: Some(Arc::from("book a flight")),
        runtime_settings: Some(runtime.runtime_settings(
            &resolved.resolution,
            &HostDescriptor::embedded(),
            Some(4000),
        )),
        session_target: Some(Arc::new(
            pincer_host::testing::engines::request::SessionTargetInput {
                agent_id: Some(Arc::from("main")),
                ..Default::default()
            },
        )),
        runtime_context: Some(Arc::from("{\"cwd\":\"/tmp\"}")),
        prompt_cache: Some(Arc::new(PromptCacheInput {
            retention: Some(Arc::from("short")),
            broke: Some(false),
            ..Default::default()
        })),
    }
}

/// What faulty's `assemble` reports of the host parameters it received, configured with
/// `config` and given every host parameter.
fn host_params_seen(config: serde_json::Value) -> String {
    let home = TempDir::new().unwrap();
    let runtime = faulty(&home, config, json!({}));
    let resolved = runtime.resolve().unwrap();
    let view = transcript()
        .assemble_with(
            &resolved.engine,
            "s",
            None,
            every_host_param(&runtime, &resolved),
        )
        .unwrap();
    view.result
        .system_prompt_addition
        .as_ref()
        .map(|s| s.to_string())
        .into_option()
        .unwrap()
}

#[test]
fn undeclared_engines_receive_every_host_param_declared_ones_only_theirs() {
    let t = transcript();
    // Undeclared: everything passes.
    assert_eq!(
        host_params_seen(json!({})),
        "faulty engine was here; host params: sessionKey,prompt,runtimeSettings,sessionTarget,runtimeContext,promptCache,abortSignal"
    );
    // `runtimeContext.promptCache` goes wherever `runtimeContext` goes.
    assert_eq!(
        host_params_seen(json!({ "acceptedHostParams": ["runtimeContext"] })),
        "faulty engine was here; host params: runtimeContext,promptCache"
    );
    // Declared: only the listed ones (abortSignal stripped too).
    assert_eq!(
        host_params_seen(json!({ "acceptedHostParams": ["sessionKey", "runtimeSettings"] })),
        "faulty engine was here; host params: sessionKey,runtimeSettings"
    );
    // `[]` strips every host param — except compact's abort signal, which is always passed.
    assert!(host_params_seen(json!({ "acceptedHostParams": [] })).ends_with("host params: "));
    let home = TempDir::new().unwrap();
    let runtime = faulty(&home, json!({ "acceptedHostParams": [] }), json!({}));
    let resolved = runtime.resolve().unwrap();
    let compact = resolved
        .engine
        .compact(
            compact_request(
                "s",
                t.shared_messages(),
                every_host_param(&runtime, &resolved),
            ),
            Arc::new(AbortController::new()),
        )
        .unwrap();
    assert_eq!(
        compact
            .value
            .reason
            .as_ref()
            .map(|s| s.to_string())
            .into_option()
            .unwrap(),
        "faulty does not compact; host params: abortSignal"
    );
}

// ---------------------------------------------------------------------------------------------
// Host requirements (§5)
// ---------------------------------------------------------------------------------------------

#[test]
fn host_requirements_fail_closed_with_the_contract_message() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "hostRequirements": { "agent-run": { "requiredCapabilities": ["bootstrap", "assemble-before-prompt"], "unsupportedMessage": "Switch to the embedded runner." } } }),
        json!({ "hosts": { "cliBackends": { "claude-cli": {} }, "harnesses": { "codex": { "capabilities": ["bootstrap", "assemble-before-prompt"] } } } }),
    );
    let resolved = runtime.resolve().unwrap();
    let loaded = runtime.config();
    let config = &loaded.config;
    let cli = HostDescriptor::find(config, "claude-cli").unwrap();
    let err = resolved
        .engine
        .check_host(HostOperation::AgentRun, &cli)
        .unwrap_err();
    assert_eq!(
        err.message,
        "Context engine \"faulty\" cannot run operation \"agent-run\" on CLI backend \"claude-cli\". Missing host capabilities: assemble-before-prompt. Required capabilities: bootstrap, assemble-before-prompt. Host capabilities: bootstrap, after-turn, maintain. Switch to the embedded runner."
    );
    assert!(resolved
        .engine
        .check_host(HostOperation::AgentRun, &HostDescriptor::embedded())
        .is_ok());
    assert!(resolved
        .engine
        .check_host(
            HostOperation::AgentRun,
            &HostDescriptor::find(config, "codex").unwrap()
        )
        .is_ok());
    assert!(
        resolved
            .engine
            .check_host(HostOperation::ManualCompact, &cli)
            .is_ok(),
        "no requirement: allowed"
    );
    // Quarantined, the engine reads as legacy: its requirements vanish.
    runtime.quarantine().record("faulty", None, "assemble", "x");
    assert!(resolved
        .engine
        .check_host(HostOperation::AgentRun, &cli)
        .is_ok());
}

#[test]
fn cli_refuses_to_run_on_a_host_that_lacks_a_capability_and_doctor_says_so_without_loading() {
    let home = TempDir::new().unwrap();
    let plugins = TempDir::new().unwrap();
    let dir = copy_plugin(&staged_plugin("faulty"), plugins.path(), "faulty");
    let mut manifest = read_manifest_json(&dir);
    manifest["hostRequirements"] =
        json!({ "agent-run": { "requiredCapabilities": ["assemble-before-prompt"] } });
    write_manifest_json(&dir, &manifest);
    std::fs::write(
        home.path().join("pincer.json"),
        json!({
            "plugins": { "slots": { "contextEngine": "faulty" }, "entries": { "faulty": { "config": {
                "hostRequirements": { "agent-run": { "requiredCapabilities": ["assemble-before-prompt"] } } } } } },
            "hosts": { "cliBackends": { "claude-cli": {} } }
        })
        .to_string(),
    )
    .unwrap();
    let dir_arg = plugins.path().display().to_string();
    let conversation = example_conversation().display().to_string();
    let out = run_pincer(
        home.path(),
        &[
            "assemble",
            "--plugins-dir",
            &dir_arg,
            "--host",
            "claude-cli",
            "--conversation",
            &conversation,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot run operation \"agent-run\" on CLI backend \"claude-cli\""),
        "{err}"
    );
    let out = run_pincer(
        home.path(),
        &[
            "assemble",
            "--plugins-dir",
            &dir_arg,
            "--conversation",
            &conversation,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "the embedded runner has every capability"
    );
    let out = run_pincer(
        home.path(),
        &["doctor", "--json", "--plugins-dir", &dir_arg],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let incompat = report["hostIncompatibilities"].as_array().unwrap();
    assert_eq!(incompat.len(), 1, "{incompat:?}");
    assert_eq!(incompat[0]["hostId"], "cli:claude-cli");
    assert_eq!(incompat[0]["missing"], json!(["assemble-before-prompt"]));
}

// ---------------------------------------------------------------------------------------------
// Bounded calls (§9.1 and per-call timeouts)
// ---------------------------------------------------------------------------------------------

#[test]
fn a_hung_compact_times_out_on_time_while_another_session_keeps_working() {
    let home = TempDir::new().unwrap();
    let runtime = Arc::new(faulty(
        &home,
        json!({ "compact": "hang", "hangMs": 3_600_000 }),
        json!({ "agents": { "defaults": { "compaction": { "timeoutSeconds": 1 } } } }),
    ));
    let resolved = Arc::new(runtime.resolve().unwrap());
    let t = Arc::new(transcript());
    // Session A's compaction hangs (for an hour) on another thread...
    let (a_engine, a_t) = (Arc::clone(&resolved), Arc::clone(&t));
    let session_a = std::thread::spawn(move || {
        a_engine.engine.compact(
            compact_request("session-a", a_t.shared_messages(), HostInputs::default()),
            Arc::new(AbortController::new()),
        )
    });
    // ...while session B is answered, call after call, until A's compaction returns.
    let mut answered_while_a_hung = 0;
    while !session_a.is_finished() {
        let view = t
            .assemble(&resolved.engine, "session-b", None)
            .expect("session B is answered while A's compaction hangs");
        if !session_a.is_finished() {
            answered_while_a_hung += 1;
            assert!(view.messages().len() <= t.messages().len());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A's compaction came back (the engine never does: it was its deadline) as a timeout.
    let err = session_a.join().unwrap().expect_err("times out");
    assert_eq!(err.error.message, "Compaction timed out");
    assert_eq!(err.error.kind, CallErrorKind::TimedOut);
    // As in OpenClaw, a compaction timeout is an abort: the engine is not quarantined.
    assert!(
        runtime.quarantine().get("faulty").is_none(),
        "a compaction timeout does not quarantine"
    );
    assert!(
        answered_while_a_hung >= 1,
        "session B was answered while A's compaction hung"
    );
}

#[test]
fn every_other_method_is_bounded_by_its_per_call_timeout() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "assemble": "hang", "hangMs": 3_600_000 }),
        json!({ "plugins": { "callTimeoutsMs": { "assemble": 300 } } }),
    );
    let resolved = runtime.resolve().unwrap();
    let view = transcript()
        .assemble(&resolved.engine, "s", None)
        .expect("legacy answers after the timeout");
    assert_eq!(view.answer.answered_by, "legacy");
    let failure = view.answer.failure.unwrap();
    assert_timed_out_and_quarantined(runtime.quarantine(), "faulty", &failure, "assemble");
}

#[test]
fn a_dispose_that_never_returns_does_not_block_shutdown_of_the_real_binary() {
    let home = TempDir::new().unwrap();
    let conversation = example_conversation().display().to_string();
    let plugins = staged_plugins_dir().display().to_string();
    let mut child = std::process::Command::new(pincer_bin())
        .args([
            "--home",
            &home.path().display().to_string(),
            "--log",
            "warn",
        ])
        .args([
            "assemble",
            "--plugins-dir",
            &plugins,
            "--engine",
            "faulty",
            "--config",
            r#"{"dispose":"hang","hangMs":3600000}"#,
            "--conversation",
            &conversation,
        ])
        .env("PINCER_CLEANUP_TIMEOUT_MS", "300")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The dispose hangs for an hour: the binary exits because the cleanup deadline fired
    // (the "dispose stalled" line below says so). A bounded number of polls keeps a broken
    // build from hanging the test suite; it asserts nothing about speed.
    let mut polls = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        polls += 1;
        if polls > 1_200 {
            child.kill().unwrap();
            panic!("pincer did not exit: a hung dispose blocked shutdown");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("dispose stalled"),
        "the stall is logged: {stderr}"
    );
}

#[test]
fn health_lists_quarantines_from_another_process() {
    let home = TempDir::new().unwrap();
    let conversation = example_conversation().display().to_string();
    let plugins = staged_plugins_dir().display().to_string();
    // A process that quarantines `faulty` and then stays alive (its `dispose` hangs).
    let mut running = std::process::Command::new(pincer_bin())
        .arg("--home")
        .arg(home.path())
        .args([
            "assemble",
            "--plugins-dir",
            &plugins,
            "--engine",
            "faulty",
            "--config",
            r#"{"assemble":"error","dispose":"hang"}"#,
            "--conversation",
            &conversation,
        ])
        .env("PINCER_CLEANUP_TIMEOUT_MS", "600000")
        .env_remove("PINCER_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mirror = home
        .path()
        .join("state")
        .join("context-engine-quarantine.json");
    // Wait (bounded) for the record to reach the mirror.
    for _ in 0..600 {
        if std::fs::read_to_string(&mirror).is_ok_and(|t| t.contains("faulty")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = run_pincer(home.path(), &["health", "--json"]);
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "warning");
    assert_eq!(
        health["line"],
        "Context engine: warning (1 quarantined; downgraded to legacy: faulty)"
    );
    let record = &health["contextEngines"]["quarantined"][0];
    assert_eq!(record["engineId"], "faulty");
    assert_eq!(record["owner"], "plugin:faulty");
    assert_eq!(record["operation"], "assemble");
    assert_eq!(record["reason"], "faulty: configured to fail in assemble");
    assert_eq!(record["processAlive"], true);
    assert!(record["failedAt"].as_u64().unwrap() > 0);
    let out = run_pincer(home.path(), &["health", "--clear"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "No quarantine records of exited processes to clear.\nKept 1 record of running processes, which still use legacy for them: faulty (pid {}).\n",
            running.id()
        )
    );

    // Once that process has exited, its plain failure is history, not a warning.
    running.kill().unwrap();
    running.wait().unwrap();
    let out = run_pincer(home.path(), &["health", "--json"]);
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["line"], "Context engine: ok");
    assert_eq!(health["contextEngines"]["history"][0]["engineId"], "faulty");
    assert_eq!(
        health["contextEngines"]["history"][0]["processAlive"],
        false
    );
    let text = run_pincer(home.path(), &["health"]);
    assert!(String::from_utf8_lossy(&text.stdout)
        .contains("history (recorded by processes that have exited"));
    let out = run_pincer(home.path(), &["health", "--clear", "faulty"]);
    assert!(String::from_utf8_lossy(&out.stdout)
        .starts_with("Cleared 1 quarantine record of exited processes: faulty (pid "));
    let out = run_pincer(home.path(), &["health", "--json"]);
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(health.get("contextEngines").is_none(), "{health}");

    // A crash record (the process died in the middle of a call) stays active.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    std::fs::write(
        &mirror,
        serde_json::to_string(&serde_json::json!({"records": [{
            "engineId": "faulty", "operation": "assemble", "reason": "crashed in assemble",
            "failedAt": 1, "pid": pid, "crash": true
        }]}))
        .unwrap(),
    )
    .unwrap();
    let out = run_pincer(home.path(), &["health", "--json"]);
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "warning");
    let out = run_pincer(home.path(), &["health", "--clear"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Cleared 1 quarantine record"));
    let out = run_pincer(home.path(), &["health", "--json"]);
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "ok");

    let empty = TempDir::new().unwrap();
    let out = run_pincer(empty.path(), &["health", "--json"]);
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "ok");
    assert!(
        health.get("contextEngines").is_none(),
        "present only when non-empty"
    );
    assert!(
        !empty.path().join("state").exists(),
        "reading health creates no state"
    );
}

/// A runtime compactor that records what reached it and answers with a result no engine
/// would make up.
#[derive(Default)]
struct RecordingCompactor {
    calls: std::sync::Mutex<Vec<(String, usize, bool)>>,
}

impl RuntimeCompactor for RecordingCompactor {
    fn compact(
        &self,
        params: &pincer_plugin_api::abi::v1::CompactParams<'_>,
    ) -> Result<pincer_plugin_api::abi::v1::CompactResult, pincer_plugin_api::abi::v1::EngineError>
    {
        self.calls.lock().unwrap().push((
            params.session_id.as_str().to_owned(),
            params.messages.len(),
            params.force,
        ));
        Ok(pincer_plugin_api::abi::v1::CompactResult {
            ok: true,
            compacted: true,
            reason: ROption::RSome("compacted by the runtime compactor".into()),
            result: ROption::RNone,
        })
    }
}

#[test]
fn legacy_delegates_compaction_to_the_runtime() {
    let services = HostServices::new("legacy", Arc::new(NoRuntimeCompaction), None);
    let legacy = create_legacy(services).unwrap();
    assert_eq!(legacy.descriptor().name, "Legacy Context Engine");
    assert_eq!(
        legacy
            .descriptor()
            .accepted_host_params
            .as_ref()
            .unwrap()
            .len(),
        6
    );
    assert!(!legacy.descriptor().owns_compaction);

    // `compact` through the guarded legacy engine of a runtime reaches the runtime's compactor,
    // and its result is what the caller gets.
    let home = TempDir::new().unwrap();
    let compactor = Arc::new(RecordingCompactor::default());
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    options.compactor = Some(Arc::clone(&compactor) as Arc<dyn RuntimeCompactor>);
    let runtime = Runtime::open(options).unwrap();
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.engine.id(), "legacy");
    let t = transcript();
    let compacted = resolved
        .engine
        .compact(
            Arc::new(CompactRequest::manual(
                Arc::from("s-compact"),
                Arc::from("s-compact.jsonl"),
                t.shared_messages(),
                t.entry_ids(),
                HostInputs::default(),
            )),
            Arc::new(AbortController::new()),
        )
        .expect("legacy compacts through the runtime");
    assert_eq!(
        *compactor.calls.lock().unwrap(),
        [("s-compact".to_owned(), t.messages().len(), true)],
        "the runtime compactor was reached once, with the session and its messages"
    );
    assert!(compacted.value.ok && compacted.value.compacted);
    assert_eq!(
        compacted
            .value
            .reason
            .as_ref()
            .map(|r| r.as_str())
            .into_option(),
        Some("compacted by the runtime compactor")
    );
    assert_eq!(compacted.answer.answered_by, "legacy");
    runtime.shutdown();
}

/// An engine an embedder links in, whose `info` has no name: a contract failure.
struct Nameless;

impl pincer_plugin_api::Engine for Nameless {
    const ID: &'static str = "nameless";

    fn create(
        _ctx: pincer_plugin_api::FactoryContext<'_>,
        _host: pincer_plugin_api::Host,
    ) -> Result<Self, pincer_plugin_api::EngineError> {
        Ok(Nameless)
    }

    fn info(&self) -> Result<pincer_plugin_api::EngineInfo, pincer_plugin_api::EngineError> {
        Ok(pincer_plugin_api::EngineInfo::new(" ", "0.1.0"))
    }

    fn ingest(
        &self,
        _: &pincer_plugin_api::IngestParams<'_>,
    ) -> Result<pincer_plugin_api::IngestResult, pincer_plugin_api::EngineError> {
        Ok(Default::default())
    }

    fn assemble(
        &self,
        p: &pincer_plugin_api::AssembleParams<'_>,
    ) -> Result<pincer_plugin_api::AssembleResult, pincer_plugin_api::EngineError> {
        Ok(pincer_plugin_api::AssembleResult::pass_through(
            p.messages.len(),
        ))
    }

    fn compact(
        &self,
        _: &pincer_plugin_api::CompactParams<'_>,
    ) -> Result<pincer_plugin_api::CompactResult, pincer_plugin_api::EngineError> {
        Ok(pincer_plugin_api::CompactResult::nothing_to_do("-"))
    }
}

#[test]
fn an_embedders_engine_that_breaks_the_contract_is_quarantined_as_contract_validation() {
    let home = TempDir::new().unwrap();
    let runtime = runtime_with(&home, json!({}));
    runtime
        .registry()
        .register_for_owner(
            "nameless",
            EngineFactory::Native(Arc::new(|_| {
                pincer_host::EngineInstance::new(
                    pincer_plugin_api::into_engine_box(
                        Nameless,
                        pincer_plugin_api::optional_fns!(Nameless),
                    ),
                    pincer_host::testing::engines::instance::EngineOrigin::Builtin,
                    None,
                )
            })),
            Owner::PublicSdk,
            RegisterOptions::default(),
        )
        .unwrap();
    let resolved = runtime.resolve_id("nameless").unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");
    let record = runtime.quarantine().get("nameless").unwrap();
    assert_eq!(record.operation, "contract-validation");
    assert_eq!(
        record.owner.as_ref().map(ToString::to_string).as_deref(),
        Some("public-sdk")
    );
    assert_eq!(
        record.reason,
        "Context engine \"nameless\" factory returned an invalid ContextEngine: missing info.name."
    );
}

#[test]
fn an_abort_error_without_an_aborted_signal_still_quarantines() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(&home, json!({ "assemble": "abort-error" }), json!({}));
    let resolved = runtime.resolve().unwrap();
    let view = transcript().assemble(&resolved.engine, "s", None).unwrap();
    assert_eq!(view.answer.answered_by, "legacy");
    assert_eq!(
        runtime.quarantine().get("faulty").unwrap().operation,
        "assemble"
    );
}

#[test]
fn an_engine_that_forges_an_abort_cannot_dodge_quarantine() {
    let home = TempDir::new().unwrap();
    let plugins = TempDir::new().unwrap();
    copy_plugin(&staged_plugin("faulty"), plugins.path(), "faulty");
    std::fs::write(
        home.path().join("pincer.json"),
        json!({
            "plugins": {
                "slots": { "contextEngine": "faulty" },
                "entries": { "faulty": { "config": { "assemble": "forge-abort" } } }
            }
        })
        .to_string(),
    )
    .unwrap();
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    options.extra_plugin_dirs = vec![plugins.path().to_owned()];
    let runtime = Runtime::open(options).unwrap();
    let resolved = runtime.resolve().unwrap();
    assert_eq!(
        resolved.resolution.resolved, "faulty",
        "{:?}",
        resolved.resolution.reason
    );
    let t = transcript();
    // A fresh controller the host never fires.
    let abort = Arc::new(AbortController::new());
    let answered = resolved
        .engine
        .assemble(assemble_request(&t, "s"), Arc::clone(&abort))
        .expect("legacy answers: a forged abort is a failure, not an abort");
    assert_eq!(answered.answer.answered_by, "legacy");
    let failure = answered
        .answer
        .failure
        .expect("the engine's failure is reported");
    let record = runtime
        .quarantine()
        .get("faulty")
        .expect("quarantined despite its claim");
    assert_eq!(record.operation, "assemble");
    if isolated_run() {
        // Isolated, the signal the engine sees is a word of a page its worker maps read-only:
        // the forged write is a crash of the worker, reported as one.
        assert_eq!(failure.kind, CallErrorKind::Crashed);
        assert_eq!(
            record.reason,
            "engine worker killed by SIGSEGV during assemble"
        );
        assert!(!abort.signal().is_aborted() && !abort.fired());
    } else {
        assert_eq!(
            failure.kind,
            CallErrorKind::Failed,
            "reported as what it is: a failure, not the abort the engine claimed"
        );
        assert_eq!(
            failure.message,
            "claimed an abort the host never asked for: faulty: fired the abort signal itself in assemble"
        );
        assert_eq!(
            record.reason,
            "claimed an abort the host never asked for: faulty: fired the abort signal itself in assemble"
        );
        // The engine did write the read-only signal (it reads aborted), but the host never
        // fired it: the controller's own record is the evidence the guard trusts.
        assert!(abort.signal().is_aborted(), "the engine forged the signal");
        assert!(!abort.fired(), "the host never fired it");
    }
    // Quarantined, later calls go to legacy without touching faulty.
    let again = t.assemble(&resolved.engine, "s", None).unwrap();
    assert!(again.answer.was_quarantined);
    assert_eq!(again.answer.answered_by, "legacy");
}

#[test]
fn a_caller_abort_ends_a_call_the_engine_ignores_without_quarantine() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "assemble": "hang", "hangMs": 3_600_000, "hangMarker": true }),
        json!({}),
    );
    let resolved = runtime.resolve().unwrap();
    let abort = Arc::new(AbortController::new());
    let trigger = abort_once_faulty_hangs(home.path(), "assemble", Arc::clone(&abort));
    let fired = Arc::clone(&abort);
    let err = resolved
        .engine
        .assemble(
            Arc::new(AssembleRequest {
                session_id: Arc::from("s"),
                messages: transcript().shared_messages(),
                entry_ids: no_entry_ids(),
                token_budget: None,
                host: HostInputs::default(),
            }),
            abort,
        )
        .expect_err("aborted by the caller");
    trigger.join().unwrap();
    // The engine ignores its signal and hangs for an hour: the call came back because the
    // caller's abort fired, and the guard (not the engine) ended it.
    assert!(fired.fired() && fired.signal().is_aborted());
    assert_eq!(err.error.kind, CallErrorKind::Aborted);
    assert_eq!(err.error.message, "Context engine operation aborted.");
    assert!(!runtime.quarantine().is_quarantined("faulty"));
}

#[test]
fn once_quarantined_optional_methods_get_the_canned_results() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(&home, json!({}), json!({}));
    let resolved = runtime.resolve().unwrap();
    runtime.quarantine().record(
        "faulty",
        Some(&Owner::plugin("faulty")),
        "ingest",
        "earlier failure",
    );
    let boot = resolved
        .engine
        .bootstrap(
            Arc::new(BootstrapRequest {
                session_id: Arc::from("s"),
                session_file: Arc::from("f"),
                host: HostInputs::default(),
            }),
            Arc::new(AbortController::new()),
        )
        .unwrap()
        .expect("the engine has bootstrap: the call is answered, not skipped");
    assert!(boot.answer.was_quarantined);
    assert_eq!(
        boot.value.reason.as_ref().map(|r| r.as_str()).into_option(),
        Some("context engine downgraded to legacy")
    );
}

#[test]
fn a_hung_factory_is_bounded_and_quarantined_as_factory() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(
        &home,
        json!({ "factory": "hang", "hangMs": 3_600_000 }),
        json!({ "plugins": { "callTimeoutsMs": { "factory": 300 } } }),
    );
    // The factory hangs for an hour: resolution returns because the factory's deadline fired.
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");
    let record = runtime.quarantine().get("faulty").unwrap();
    assert_eq!(record.operation, "factory");
    assert!(record.reason.contains("timed out"), "{}", record.reason);
}

#[test]
fn a_same_owner_re_registration_replaces_the_cached_instance_once_its_operations_end() {
    let home = TempDir::new().unwrap();
    let runtime = faulty(&home, json!({}), json!({}));
    let first = runtime.resolve().unwrap();
    let registration = runtime.registry().get("faulty").unwrap();
    runtime
        .registry()
        .register_plugin_engine("faulty", "faulty", registration.factory)
        .unwrap();
    let second = runtime.resolve().unwrap();
    assert!(
        !Arc::ptr_eq(first.engine.primary(), second.engine.primary()),
        "a fresh instance"
    );
    assert_eq!(
        (first.engine.generation(), second.engine.generation()),
        (1, 2)
    );
    // The old instance is retired, not disposed under the operation that still holds it …
    assert!(
        !first.engine.primary().is_disposed(),
        "not disposed while an operation holds it"
    );
    let old = Arc::downgrade(first.engine.primary());
    drop(first);
    // … and disposed (then dropped) once that operation is over.
    let start = std::time::Instant::now();
    while old.upgrade().is_some_and(|i| !i.is_disposed()) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the old instance was never disposed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn an_explicit_legacy_slot_is_reported_as_the_default_source() {
    let home = TempDir::new().unwrap();
    let runtime = runtime_with(
        &home,
        json!({ "plugins": { "slots": { "contextEngine": "legacy" } } }),
    );
    let resolved = runtime.resolve().unwrap();
    let settings =
        runtime.runtime_settings(&resolved.resolution, &HostDescriptor::embedded(), None);
    let value = serde_json::to_value(&*settings).unwrap();
    assert_eq!(
        value["contextEngineSelection"],
        json!({ "selectedId": "legacy", "source": "default" })
    );
    assert_eq!(value["executionHost"]["id"], "pincer-embedded");
}
