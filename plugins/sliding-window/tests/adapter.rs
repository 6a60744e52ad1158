//! The engine through the ABI adapter, exactly as the host drives a loaded library:
//! `into_engine_box` with the optional methods `optional_fns!` finds, a test `HostServicesAbi`,
//! and calls on the resulting `EngineBox`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{calls, result, text};
use pincer_plugin_api::__private::abi_stable::sabi_trait::TD_Opaque;
use pincer_plugin_api::abi::v1::{
    EngineBox, ExtensionRef, FactoryParams, HostParams, HostServicesAbi, HostServicesAbi_TO,
    LlmCompleteRequest, LlmCompleteResponse, LogLevel, LogRecord, OptionalMethods,
};
use pincer_plugin_api::abi::{RArc, ROption, RResult, RSlice, RStr};
use pincer_plugin_api::prelude::*;
use pincer_plugin_api::tokens::{estimate_message_tokens, estimate_tokens};
use pincer_plugin_api::{AbortSignal, AssembledItem, CompactionTarget, EngineError};
use sliding_window::SlidingWindow;

/// Host services that record delegated compactions and answer nothing else of note.
struct TestHost {
    compactions: Arc<AtomicUsize>,
}

impl HostServicesAbi for TestHost {
    fn log(&self, _record: &LogRecord<'_>) {}

    fn max_log_level(&self) -> LogLevel {
        LogLevel::Trace
    }

    fn llm_complete(
        &self,
        _request: &LlmCompleteRequest<'_>,
    ) -> RResult<LlmCompleteResponse, EngineError> {
        RResult::RErr(EngineError::failed("no model in this test"))
    }

    fn delegate_compaction_to_runtime(
        &self,
        params: &CompactParams<'_>,
    ) -> RResult<CompactResult, EngineError> {
        self.compactions.fetch_add(1, Ordering::SeqCst);
        RResult::ROk(CompactResult {
            ok: true,
            compacted: true,
            reason: ROption::RSome(format!("runtime compacted {}", params.session_id).into()),
            result: ROption::RNone,
        })
    }

    fn estimate_tokens(&self, messages: RSlice<'_, Message>) -> u64 {
        estimate_tokens(messages.as_slice())
    }

    fn extension(&self, _name: RStr<'_>) -> ROption<ExtensionRef> {
        ROption::RNone
    }
}

/// Creates the engine from config JSON, as the factory does, and wraps it for the host.
fn engine_with(config_json: &str) -> Result<(EngineBox, Arc<AtomicUsize>), EngineError> {
    let (engine, compactions) = create(config_json)?;
    let boxed =
        pincer_plugin_api::into_engine_box(engine, pincer_plugin_api::optional_fns!(SlidingWindow));
    Ok((boxed, compactions))
}

/// Runs the factory as the exported entry point does.
fn create(config_json: &str) -> Result<(SlidingWindow, Arc<AtomicUsize>), EngineError> {
    let compactions = Arc::new(AtomicUsize::new(0));
    let services = HostServicesAbi_TO::from_ptr(
        RArc::new(TestHost {
            compactions: Arc::clone(&compactions),
        }),
        TD_Opaque,
    );
    let params = FactoryParams {
        engine_id: RStr::from_str("sliding-window"),
        config_json: RStr::from_str(config_json),
        agent_dir: ROption::RNone,
        workspace_dir: ROption::RNone,
        plugin_dir: ROption::RNone,
    };
    let engine = SlidingWindow::create(FactoryContext::new(&params), Host::new(services))?;
    Ok((engine, compactions))
}

fn assemble_params(messages: &[Message], token_budget: Option<u64>) -> AssembleParams<'_> {
    AssembleParams {
        session_id: RStr::from_str("s1"),
        messages: RSlice::from_slice(messages),
        token_budget: token_budget.into(),
        available_tools: RSlice::from_slice(&[]),
        citations_mode: ROption::RNone,
        model: ROption::RNone,
        host: HostParams::default(),
    }
}

/// The input indices an assemble result refers to, checking it made no new messages.
fn referenced(result: &AssembleResult) -> Vec<usize> {
    result
        .items
        .iter()
        .flat_map(|item| match item {
            AssembledItem::Input { start, end } => *start as usize..*end as usize,
            AssembledItem::New(_) => panic!("sliding-window must not copy or make messages"),
        })
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

#[test]
fn info_declares_the_contract() {
    let (engine, _) = engine_with("{}").unwrap();
    let info = engine.info().into_result().unwrap();
    assert_eq!(info.id.as_str(), "sliding-window");
    assert_eq!(info.name.as_str(), "Sliding window");
    assert_eq!(info.version.as_str(), env!("CARGO_PKG_VERSION"));
    assert!(!info.owns_compaction);
    let accepted: Vec<&str> = info
        .accepted_host_params
        .as_ref()
        .into_option()
        .expect("declared")
        .iter()
        .map(|p| p.as_str())
        .collect();
    assert_eq!(accepted, ["sessionKey", "abortSignal"]);
    assert_eq!(
        info.optional_methods,
        OptionalMethods(OptionalMethods::DISPOSE)
    );
    assert!(info.tools.is_empty());
}

#[test]
fn assemble_keeps_system_and_the_newest_whole_tool_group() {
    let messages = transcript();
    let (engine, _) = engine_with("{}").unwrap();
    // Everything after index 2 plus the system prompt: 10 + 10 + group + 10 + 10.
    let tail: u64 = messages[3..].iter().map(estimate_message_tokens).sum();
    let result = engine
        .assemble(&assemble_params(&messages, Some(10 + tail)))
        .into_result()
        .unwrap();
    assert_eq!(referenced(&result), [0, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(
        result.items.as_slice(),
        [
            AssembledItem::Input { start: 0, end: 1 },
            AssembledItem::Input { start: 3, end: 10 },
        ]
    );
    assert_eq!(result.estimated_tokens, 10 + tail);
    // One token less and the group cannot stay whole: it goes, with the assistant after it,
    // so that the window starts on the last user turn.
    let result = engine
        .assemble(&assemble_params(&messages, Some(9 + tail)))
        .into_result()
        .unwrap();
    assert_eq!(referenced(&result), [0, 9]);
    assert_eq!(result.estimated_tokens, 20);
}

#[test]
fn the_smaller_of_the_two_budgets_wins() {
    let messages = transcript();
    let (engine, _) = engine_with(r#"{"tokenBudget": 20}"#).unwrap();
    let kept = |budget| {
        referenced(
            &engine
                .assemble(&assemble_params(&messages, budget))
                .into_result()
                .unwrap(),
        )
    };
    assert_eq!(kept(None), [0, 9]);
    assert_eq!(kept(Some(1_000_000)), [0, 9]);
    let (engine, _) = engine_with("{}").unwrap();
    let all: Vec<usize> = (0..messages.len()).collect();
    assert_eq!(
        referenced(
            &engine
                .assemble(&assemble_params(&messages, None))
                .into_result()
                .unwrap()
        ),
        all
    );
}

#[test]
fn min_messages_and_keep_system_from_config() {
    let messages = transcript();
    let (engine, _) = engine_with(r#"{"minMessages": 3, "keepSystem": false}"#).unwrap();
    let result = engine
        .assemble(&assemble_params(&messages, Some(5)))
        .into_result()
        .unwrap();
    // Over budget, but three non-system messages — whole groups — are kept.
    assert_eq!(referenced(&result), [4, 5, 6, 7, 8, 9]);
    let honest: u64 = messages[4..].iter().map(estimate_message_tokens).sum();
    assert_eq!(result.estimated_tokens, honest);
}

#[test]
fn compact_delegates_to_the_runtime() {
    let messages = transcript();
    let (engine, compactions) = engine_with("{}").unwrap();
    let signal = AbortSignal::new();
    let params = CompactParams {
        session_id: RStr::from_str("s1"),
        session_file: RStr::from_str("/tmp/s1.jsonl"),
        agent_id: ROption::RNone,
        messages: RSlice::from_slice(&messages),
        token_budget: ROption::RSome(1000),
        force: true,
        force_reason: ROption::RSome(RStr::from_str("manual")),
        current_token_count: ROption::RNone,
        compaction_target: CompactionTarget::Budget,
        custom_instructions: ROption::RNone,
        host: HostParams {
            abort_signal: ROption::RSome(&signal),
            ..HostParams::default()
        },
    };
    let result = engine.compact(&params).into_result().unwrap();
    assert_eq!(compactions.load(Ordering::SeqCst), 1);
    assert!(result.ok && result.compacted);
    assert_eq!(
        result.reason.as_ref().into_option().map(|r| r.as_str()),
        Some("runtime compacted s1")
    );
}

#[test]
fn ingest_stores_nothing_and_dispose_is_seen() {
    let (engine, _) = engine_with("{}").unwrap();
    let message = text(Role::User, 10);
    let params = IngestParams {
        session_id: RStr::from_str("s1"),
        message: &message,
        is_heartbeat: false,
        host: HostParams::default(),
    };
    assert_eq!(
        engine.ingest(&params).into_result().unwrap(),
        IngestResult { ingested: false }
    );
    assert!(engine.dispose().into_result().is_ok());
    // Methods it does not implement are reported as such.
    let err = engine.after_turn(&AfterTurnParams {
        session_id: RStr::from_str("s1"),
        session_file: RStr::from_str("/tmp/s1.jsonl"),
        messages: RSlice::from_slice(&[]),
        pre_prompt_message_count: 0,
        auto_compaction_summary: ROption::RNone,
        is_heartbeat: false,
        token_budget: ROption::RNone,
        host: HostParams::default(),
    });
    assert!(matches!(
        err.into_result(),
        Err(EngineError::NotImplemented(_))
    ));
}

#[test]
fn an_aborted_assemble_returns_aborted() {
    let messages = transcript();
    let (engine, _) = engine_with("{}").unwrap();
    let signal = AbortSignal::new();
    signal.abort();
    let mut params = assemble_params(&messages, Some(100));
    params.host.abort_signal = ROption::RSome(&signal);
    assert!(matches!(
        engine.assemble(&params).into_result(),
        Err(EngineError::Aborted(_))
    ));
}

#[test]
fn empty_and_system_only_inputs() {
    let (engine, _) = engine_with("{}").unwrap();
    let result = engine
        .assemble(&assemble_params(&[], Some(100)))
        .into_result()
        .unwrap();
    assert!(result.items.is_empty());
    assert_eq!(result.estimated_tokens, 0);
    let system = [text(Role::System, 40), text(Role::System, 40)];
    let result = engine
        .assemble(&assemble_params(&system, Some(5)))
        .into_result()
        .unwrap();
    assert_eq!(referenced(&result), [0, 1]);
    assert_eq!(result.estimated_tokens, 20);
}

#[test]
fn bad_config_is_refused_with_a_clear_message() {
    let err = create(r#"{"tokenBudget": 0}"#).unwrap_err();
    assert!(matches!(err, EngineError::InvalidConfig(_)));
    assert!(
        err.message().contains("tokenBudget must be at least 1"),
        "{err}"
    );
    let err = create(r#"{"tokenbudget": 100}"#).unwrap_err();
    assert!(matches!(err, EngineError::InvalidConfig(_)));
    assert!(
        err.message().contains("unknown field `tokenbudget`"),
        "{err}"
    );
    let err = create(r#"{"minMessages": -1}"#).unwrap_err();
    assert!(matches!(err, EngineError::InvalidConfig(_)));
    assert!(engine_with("").is_ok());
    assert!(engine_with(r#"{"tokenBudget": null}"#).is_ok());
}
