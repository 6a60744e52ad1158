//! Engine calls inline on session workers, bounded by the watchdog, through the real `faulty`
//! library: a call that ignores its abort still answers the work's submitter with the timeout
//! (quarantined, except a compaction), while the stuck worker is abandoned and the session's
//! next work gets a fresh one; a call that honours its abort times out as with the hand-off;
//! other sessions keep being served; panics are still caught and quarantined; and the work can
//! be awaited from async code without holding a runtime thread; a `SessionRunner`'s turns make
//! their engine calls inline, and its session survives a stuck call.
//!
//! The waits here are bounded so that a broken build cannot hang the suite; nothing asserts
//! how fast anything is.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pincer_host::config::PincerHome;
use pincer_host::harness::{Harness, HarnessError, HarnessOptions, SessionRunner};
use pincer_host::model::{ModelError, ModelProvider, ModelReply, ModelRequest, NoTools};
use pincer_host::session::JsonlStore;
use pincer_host::session::Transcript;
use pincer_host::testing::engines::instance::{CallErrorKind, EngineCallError};
use pincer_host::testing::engines::request::{
    no_entry_ids, AssembleRequest, CompactRequest, HostInputs,
};
use pincer_host::testing::types::Method;
use pincer_host::{GuardError, Guarded};
use pincer_host::{ResolvedEngine, Runtime, RuntimeOptions};
use pincer_host::{SessionWorker, WorkError};
use pincer_plugin_api::abi::latest::{AbortController, AssembleResult, Message};
use pincer_tests::*;
use serde_json::{json, Value};

fn faulty(home: &TempDir, engine_config: Value, extra: Value) -> (Runtime, Arc<ResolvedEngine>) {
    let mut config = json!({
        "plugins": {
            "slots": { "contextEngine": "faulty" },
            "entries": { "faulty": { "config": engine_config } }
        }
    });
    if let (Value::Object(config), Value::Object(extra)) = (&mut config, extra) {
        for (key, value) in extra {
            match (config.get_mut(&key), value) {
                (Some(Value::Object(into)), Value::Object(from)) => into.extend(from),
                (_, value) => {
                    config.insert(key, value);
                }
            }
        }
    }
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    options.extra_plugin_dirs = vec![staged_plugins_dir()];
    let runtime = Runtime::open(options).unwrap();
    let resolved = Arc::new(runtime.resolve().unwrap());
    assert_eq!(resolved.resolution.resolved, "faulty");
    (runtime, resolved)
}

fn transcript_request() -> Arc<AssembleRequest> {
    assemble_request(&Transcript::read(&example_conversation()).unwrap(), "s")
}

/// Work that assembles once on the worker, returning the guard's answer and the worker thread.
type Assembled = (
    Result<Guarded<AssembleResult>, GuardError>,
    std::thread::ThreadId,
);

fn assemble_on(
    worker: &SessionWorker,
    engine: &Arc<ResolvedEngine>,
    abort: Arc<AbortController>,
) -> Result<Assembled, WorkError> {
    let engine = Arc::clone(engine);
    worker.run(move || {
        (
            engine.engine.assemble(transcript_request(), abort),
            std::thread::current().id(),
        )
    })
}

/// The error of work whose engine call got stuck in `operation` (of `faulty`).
fn stuck_in<T: std::fmt::Debug>(
    result: Result<T, WorkError>,
    operation: Method,
) -> EngineCallError {
    match result {
        Err(WorkError::Stuck {
            engine_id,
            operation: stuck,
            error,
        }) if engine_id == "faulty" && stuck == operation => error,
        other => panic!("expected work stuck in {operation}: {other:?}"),
    }
}

#[test]
fn an_assemble_that_ignores_its_abort_answers_the_submitter_with_the_timeout_and_quarantines() {
    let home = TempDir::new().unwrap();
    let (runtime, engine) = faulty(
        &home,
        json!({ "assemble": "hang", "hangMs": 3_600_000 }),
        json!({ "plugins": { "callTimeoutsMs": { "assemble": 300 } } }),
    );
    let worker = SessionWorker::new("ignores");
    let (tx, rx) = std::sync::mpsc::channel();
    let stuck_engine = Arc::clone(&engine);
    let stuck = worker.submit(move || {
        tx.send(std::thread::current().id()).unwrap();
        stuck_engine
            .engine
            .assemble(transcript_request(), Arc::new(AbortController::new()))
    });
    let stuck_thread = rx.recv().unwrap();
    // The engine hangs for an hour and ignores its signal: the work never finishes, yet its
    // submitter gets the operation's timeout (a hand-off would have let legacy answer instead:
    // this error proves the call ran inline on the worker).
    let error = stuck_in(stuck.wait(), Method::Assemble);
    assert_timed_out_and_quarantined(runtime.quarantine(), "faulty", &error, "assemble");
    // The session's next work gets a fresh worker; the engine is quarantined, so legacy answers.
    let (answer, thread) = assemble_on(&worker, &engine, Arc::new(AbortController::new()))
        .expect("a fresh worker serves the session");
    assert_ne!(thread, stuck_thread, "the stuck worker was abandoned");
    let answer = answer.expect("legacy answers");
    assert_eq!(answer.answer.answered_by, "legacy");
    assert!(answer.answer.was_quarantined);
}

#[test]
fn a_hung_compact_on_a_worker_times_out_without_quarantine_while_another_session_is_served() {
    let home = TempDir::new().unwrap();
    let (runtime, engine) = faulty(
        &home,
        json!({ "compact": "hang", "hangMs": 3_600_000 }),
        json!({ "agents": { "defaults": { "compaction": { "timeoutSeconds": 1 } } } }),
    );
    let session_a = SessionWorker::new("a");
    let session_b = SessionWorker::new("b");
    let a_engine = Arc::clone(&engine);
    let compaction = session_a.submit(move || {
        let t = Transcript::read(&example_conversation()).unwrap();
        a_engine.engine.compact(
            Arc::new(CompactRequest::manual(
                Arc::from("session-a"),
                Arc::from("session-a.jsonl"),
                t.shared_messages(),
                no_entry_ids(),
                HostInputs::default(),
            )),
            Arc::new(AbortController::new()),
        )
    });
    // Session B is answered, work after work, on its own worker while A's compaction hangs.
    let mut answered_while_a_hung = 0;
    let mut polls = 0;
    while !compaction.is_finished() {
        let (answer, _) = assemble_on(&session_b, &engine, Arc::new(AbortController::new()))
            .expect("session B's worker is not stuck");
        assert_eq!(answer.expect("faulty answers").answer.answered_by, "faulty");
        if !compaction.is_finished() {
            answered_while_a_hung += 1;
        }
        polls += 1;
        assert!(polls < 3_000, "session A's compaction never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let error = stuck_in(compaction.wait(), Method::Compact);
    assert_eq!(error.kind, CallErrorKind::TimedOut);
    assert_eq!(error.message, "Compaction timed out");
    assert!(
        runtime.quarantine().get("faulty").is_none(),
        "a compaction timeout does not quarantine"
    );
    assert!(answered_while_a_hung >= 1);
}

#[test]
fn an_assemble_that_honours_its_abort_times_out_as_with_the_hand_off() {
    let home = TempDir::new().unwrap();
    let (runtime, engine) = faulty(
        &home,
        json!({ "assemble": "hang-until-abort", "hangMs": 3_600_000 }),
        json!({ "plugins": { "callTimeoutsMs": { "assemble": 300 } } }),
    );
    let worker = SessionWorker::new("honours");
    let (answer, _) = assemble_on(&worker, &engine, Arc::new(AbortController::new()))
        .expect("the engine returned when its signal fired: the worker is not stuck");
    let answer = answer.expect("legacy answers after the timeout");
    assert_eq!(answer.answer.answered_by, "legacy");
    let failure = answer.answer.failure.expect("the timeout is reported");
    assert_timed_out_and_quarantined(runtime.quarantine(), "faulty", &failure, "assemble");
}

#[test]
fn a_caller_abort_the_engine_ignores_ends_the_work_without_quarantine() {
    let home = TempDir::new().unwrap();
    let (runtime, engine) = faulty(
        &home,
        json!({ "assemble": "hang", "hangMs": 3_600_000, "hangMarker": true }),
        json!({}),
    );
    let worker = SessionWorker::new("caller-abort");
    let abort = Arc::new(AbortController::new());
    let trigger = abort_once_faulty_hangs(home.path(), "assemble", Arc::clone(&abort));
    let error = stuck_in(assemble_on(&worker, &engine, abort), Method::Assemble);
    trigger.join().unwrap();
    assert_eq!(error.kind, CallErrorKind::Aborted);
    assert_eq!(error.message, "Context engine operation aborted.");
    assert!(!runtime.quarantine().is_quarantined("faulty"));
}

#[test]
fn a_panic_in_the_engine_on_a_worker_is_caught_and_quarantined() {
    let home = TempDir::new().unwrap();
    let (runtime, engine) = faulty(&home, json!({ "assemble": "panic" }), json!({}));
    let worker = SessionWorker::new("panics");
    let (answer, first) = assemble_on(&worker, &engine, Arc::new(AbortController::new()))
        .expect("a caught panic does not stick the worker");
    let answer = answer.expect("legacy answers");
    assert_eq!(answer.answer.answered_by, "legacy");
    let failure = answer.answer.failure.unwrap();
    assert_eq!(failure.kind, CallErrorKind::Panicked);
    assert!(failure.message.contains("configured to panic in assemble"));
    assert_eq!(
        runtime.quarantine().get("faulty").unwrap().operation,
        "assemble"
    );
    let (_, second) = assemble_on(&worker, &engine, Arc::new(AbortController::new())).unwrap();
    assert_eq!(first, second, "the same worker serves the session");
}

#[test]
fn async_code_awaits_work_without_holding_its_runtime_thread() {
    let home = TempDir::new().unwrap();
    let (runtime, engine) = faulty(
        &home,
        json!({ "assemble": "hang", "hangMs": 3_600_000 }),
        json!({ "plugins": { "callTimeoutsMs": { "assemble": 300 } } }),
    );
    let worker = SessionWorker::new("async");
    // One runtime thread: if awaiting blocked it, the ticker below could not run meanwhile.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ticks = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let result = rt.block_on(async {
        let (ticks, stop_ticker) = (Arc::clone(&ticks), Arc::clone(&stop));
        let ticker = tokio::spawn(async move {
            while !stop_ticker.load(Ordering::Acquire) {
                ticks.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
                tokio::task::yield_now().await;
            }
        });
        let stuck_engine = Arc::clone(&engine);
        let result = worker
            .submit(move || {
                stuck_engine
                    .engine
                    .assemble(transcript_request(), Arc::new(AbortController::new()))
            })
            .await;
        stop.store(true, Ordering::Release);
        ticker.await.unwrap();
        result
    });
    stuck_in(result, Method::Assemble);
    assert!(
        ticks.load(Ordering::Relaxed) >= 10,
        "the runtime thread kept running other tasks while the work was awaited"
    );
    assert!(runtime.quarantine().is_quarantined("faulty"));
}

/// A model that answers every request with "ok".
struct Ok;

impl ModelProvider for Ok {
    fn name(&self) -> &str {
        "ok"
    }

    fn complete(&self, _: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        Result::Ok(ModelReply {
            message: Message::assistant("ok"),
        })
    }
}

#[test]
fn a_session_runner_makes_engine_calls_inline_and_recovers_its_session_after_a_stuck_call() {
    let home = TempDir::new().unwrap();
    let (runtime, _) = faulty(
        &home,
        json!({ "assemble": "hang", "hangMs": 3_600_000 }),
        json!({ "plugins": { "callTimeoutsMs": { "assemble": 300 } } }),
    );
    let engine = Arc::new(runtime.resolve().unwrap().engine);
    let harness = Arc::new(Harness::new(
        engine,
        JsonlStore::new(home.path().join("agents")),
        Arc::new(Ok),
        Arc::new(NoTools),
        HarnessOptions::new(128_000),
    ));
    // On the caller's thread the hung assemble is handed off: legacy answers after the timeout.
    let mut session = harness.open_session(&"direct".parse().unwrap()).unwrap();
    let report = harness.turn(&mut session, Message::user("hi")).unwrap();
    assert_eq!(report.assembled.answered_by, "legacy");
    runtime.quarantine().clear(None);

    // On the session's runner the assemble runs inline: the engine ignores its abort, so the
    // turn's caller gets the timeout (a hand-off would have let legacy answer) and the engine
    // is quarantined.
    let runner = SessionRunner::open(Arc::clone(&harness), &"s".parse().unwrap()).unwrap();
    let work = match runner.run_turn(Message::user("lost")) {
        Err(HarnessError::Work(work)) => Err::<(), _>(work),
        other => panic!("expected the turn to be stuck in assemble: {other:?}"),
    };
    let error = stuck_in(work, Method::Assemble);
    assert_timed_out_and_quarantined(runtime.quarantine(), "faulty", &error, "assemble");

    // The same runner goes on with the same session (its writer, and the lock on its file,
    // are not lost with the stuck thread): legacy answers now, and the turn count is read
    // again from the file, where the stuck turn left nothing (it was stuck before its prompt).
    let second = runner.run_turn(Message::user("second")).unwrap();
    assert_eq!(second.assembled.answered_by, "legacy");
    assert_eq!(second.turn, 1);
    let third = runner.run_turn(Message::user("third")).unwrap();
    assert_eq!((third.turn, third.assembled.count), (2, 2));
    let file = third.session_file.clone();
    drop(runner);
    let texts: Vec<String> = Transcript::read(&file)
        .unwrap()
        .messages()
        .iter()
        .map(|m| m.plain_text())
        .collect();
    assert_eq!(texts, ["second", "ok", "third", "ok"]);
}
