//! The engine as a host drives it: created through the library's exported entry point and
//! called through the ABI object, with `pincer_plugin_api::testing` (no hand-made host).

mod common;

use common::{calls, result, text};
use pincer_plugin_api::testing::{Assembled, CompactOptions, Conversation, TestEngine, TestHost};
use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{EngineError, ErrorKind, IngestResult, Message, Role};
use serde_json::json;
use sliding_window::SlidingWindow;

fn engine_with(config: serde_json::Value) -> Result<(TestEngine, TestHost), EngineError> {
    let host = TestHost::new();
    TestEngine::new::<SlidingWindow>(&host, config).map(|engine| (engine, host))
}

/// The input indices an assembled context refers to, checking it made no new messages.
fn referenced(assembled: &Assembled) -> Vec<usize> {
    assembled
        .kept_indices
        .iter()
        .map(|i| i.expect("sliding-window must not copy or make messages"))
        .collect()
}

fn transcript() -> Vec<Message> {
    vec![
        text(Role::System, 40),     // 0: 10 tokens
        text(Role::User, 400),      // 1: 100
        text(Role::Assistant, 400), // 2: 100
        text(Role::User, 40),       // 3: 10
        calls(&["a", "b", "c"]),    // 4
        result("b", 40),            // 5
        result("a", 40),            // 6
        result("c", 40),            // 7
        text(Role::Assistant, 40),  // 8: 10
        text(Role::User, 40),       // 9: 10
    ]
}

fn conversation(messages: &[Message]) -> Conversation {
    Conversation::from_messages(messages.iter().cloned())
}

#[test]
fn info_declares_the_contract() {
    let (engine, _) = engine_with(json!({})).unwrap();
    assert_eq!(engine.id(), "sliding-window");
    let info = engine.info();
    assert_eq!(info.name, "Sliding window");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert!(!info.owns_compaction);
    assert_eq!(
        info.accepted_host_params.as_deref(),
        Some(&["sessionKey".to_owned(), "abortSignal".to_owned()][..])
    );
    assert_eq!(engine.optional_methods(), ["dispose"]);
    assert!(info.tools.is_empty());
}

#[test]
fn assemble_keeps_system_and_the_newest_whole_tool_group() {
    let messages = transcript();
    let (engine, host) = engine_with(json!({})).unwrap();
    // Everything after index 2 plus the system prompt: 10 + 10 + group + 10 + 10.
    let tail: u64 = messages[3..].iter().map(estimate_message_tokens).sum();
    let assembled = engine
        .assemble(&conversation(&messages), Some(10 + tail))
        .unwrap();
    assert_eq!(referenced(&assembled), [0, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(assembled.estimated_tokens, Some(10 + tail));
    // One token less and the group cannot stay whole: it goes, with the assistant after it,
    // so that the window starts on the last user turn.
    let assembled = engine
        .assemble(&conversation(&messages), Some(9 + tail))
        .unwrap();
    assert_eq!(referenced(&assembled), [0, 9]);
    assert_eq!(assembled.estimated_tokens, Some(20));
    // Its debug event reached the host, through the library's log forwarding.
    let event = host
        .log_events()
        .into_iter()
        .rfind(|e| e.message == "sliding window assembled")
        .expect("the assemble event is forwarded");
    assert!(
        event.fields.contains(&("kept".to_owned(), "2".to_owned())),
        "{event:?}"
    );
}

#[test]
fn the_smaller_of_the_two_budgets_wins() {
    let messages = transcript();
    let (engine, _) = engine_with(json!({"tokenBudget": 20})).unwrap();
    let kept = |budget| referenced(&engine.assemble(&conversation(&messages), budget).unwrap());
    assert_eq!(kept(None), [0, 9]);
    assert_eq!(kept(Some(1_000_000)), [0, 9]);
    let (engine, _) = engine_with(json!({})).unwrap();
    let all: Vec<usize> = (0..messages.len()).collect();
    assert_eq!(
        referenced(&engine.assemble(&conversation(&messages), None).unwrap()),
        all
    );
}

#[test]
fn min_messages_and_keep_system_from_config() {
    let messages = transcript();
    let (engine, _) = engine_with(json!({"minMessages": 3, "keepSystem": false})).unwrap();
    let assembled = engine.assemble(&conversation(&messages), Some(5)).unwrap();
    // Over budget, but three non-system messages — whole groups — are kept.
    assert_eq!(referenced(&assembled), [4, 5, 6, 7, 8, 9]);
    let honest: u64 = messages[4..].iter().map(estimate_message_tokens).sum();
    assert_eq!(assembled.estimated_tokens, Some(honest));
}

#[test]
fn compact_delegates_to_the_runtime() {
    let (engine, host) = engine_with(json!({})).unwrap();
    let result = engine
        .compact_with(
            &conversation(&transcript()),
            CompactOptions {
                token_budget: Some(1000),
                ..CompactOptions::default()
            },
        )
        .unwrap();
    assert_eq!(host.delegated_compactions(), 1);
    assert!(result.is_ok() && !result.is_compacted());
    assert_eq!(
        result.reason(),
        Some("the test host's runtime compacts nothing")
    );
}

#[test]
fn ingest_stores_nothing_and_dispose_is_seen() {
    let (engine, _) = engine_with(json!({})).unwrap();
    assert_eq!(
        engine.ingest(&text(Role::User, 10), Some("e1")).unwrap(),
        IngestResult { ingested: false }
    );
    assert!(engine.dispose().is_ok());
    // Methods it does not implement are reported as such.
    assert!(matches!(
        engine.after_turn(&Conversation::new(), 0),
        Err(e) if e.kind() == ErrorKind::NotImplemented
    ));
}

#[test]
fn an_aborted_assemble_returns_aborted() {
    let (engine, _) = engine_with(json!({})).unwrap();
    engine.abort_calls(true);
    assert!(matches!(
        engine.assemble(&conversation(&transcript()), Some(100)),
        Err(e) if e.kind() == ErrorKind::Aborted
    ));
}

#[test]
fn empty_and_system_only_inputs() {
    let (engine, _) = engine_with(json!({})).unwrap();
    let assembled = engine.assemble(&Conversation::new(), Some(100)).unwrap();
    assert!(assembled.messages.is_empty());
    assert_eq!(assembled.estimated_tokens, Some(0));
    let system = [text(Role::System, 40), text(Role::System, 40)];
    let assembled = engine.assemble(&conversation(&system), Some(5)).unwrap();
    assert_eq!(referenced(&assembled), [0, 1]);
    assert_eq!(assembled.estimated_tokens, Some(20));
}

#[test]
fn bad_config_is_refused_with_a_clear_message() {
    let err = engine_with(json!({"tokenBudget": 0})).unwrap_err();
    assert!(err.kind() == ErrorKind::InvalidConfig);
    assert!(
        err.message().contains("tokenBudget must be at least 1"),
        "{err}"
    );
    let err = engine_with(json!({"tokenbudget": 100})).unwrap_err();
    assert!(err.kind() == ErrorKind::InvalidConfig);
    assert!(
        err.message().contains("unknown field `tokenbudget`"),
        "{err}"
    );
    let err = engine_with(json!({"minMessages": -1})).unwrap_err();
    assert!(err.kind() == ErrorKind::InvalidConfig);
    assert!(engine_with(serde_json::Value::Null).is_ok());
    assert!(engine_with(json!({"tokenBudget": null})).is_ok());
}
