//! Test support for engine authors: drive an engine exactly as the host will — created through
//! the export adapter (panics caught, optional methods detected), called through the ABI
//! object — without writing a host.
//!
//! ```
//! use pincer_plugin_api::prelude::*;
//! use pincer_plugin_api::testing::{assemble_params, kept, TestHost};
//!
//! struct LastTwo;
//!
//! impl Engine for LastTwo {
//!     const ID: &'static str = "last-two";
//!     fn create(_: FactoryContext<'_>, _: Host) -> Result<Self, EngineError> { Ok(LastTwo) }
//!     fn info(&self) -> EngineInfo { EngineInfo::new(Self::ID, "Last two", "0.1.0") }
//!     fn ingest(&self, _: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
//!         Ok(IngestResult { ingested: false })
//!     }
//!     fn assemble(&self, p: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
//!         let n = p.messages.len();
//!         let mut c = ContextBuilder::new();
//!         c.keep_range(n.saturating_sub(2)..n);
//!         Ok(c.finish(0))
//!     }
//!     fn compact(&self, _: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
//!         Ok(CompactResult::nothing_to_do("nothing stored"))
//!     }
//! }
//!
//! let host = TestHost::new();
//! let engine = pincer_plugin_api::test_engine!(LastTwo, serde_json::json!({}), &host).unwrap();
//! let messages = vec![
//!     Message::text(Role::User, "one"),
//!     Message::text(Role::Assistant, "two"),
//!     Message::text(Role::User, "three"),
//! ];
//! let abort = pincer_plugin_api::AbortSignal::new();
//! let result = engine.assemble(&assemble_params(&messages, None, &abort)).into_result().unwrap();
//! let texts: Vec<String> = kept(&result, &messages).iter().map(|m| m.plain_text()).collect();
//! assert_eq!(texts, ["two", "three"]);
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use abi_stable::std_types::{ROption, RResult, RSlice, RStr};

use crate::abi::v1::{
    AbortSignal, AssembleParams, AssembleResult, CompactParams, CompactResult, EngineBox,
    EngineError, ExtensionRef, FactoryParams, HostParams, HostServicesAbi, HostServicesArc,
    LlmCompleteRequest, LlmCompleteResponse, LogLevel, LogRecord, Message,
};
use crate::{Engine, OptionalFns};

#[derive(Default)]
struct State {
    logs: Mutex<Vec<String>>,
    delegated_compactions: AtomicUsize,
}

/// A host for tests: records log events and delegated compactions; has no model.
#[derive(Clone, Default)]
pub struct TestHost {
    state: Arc<State>,
}

struct Services(Arc<State>);

impl HostServicesAbi for Services {
    fn log(&self, record: &LogRecord<'_>) {
        if let Ok(mut logs) = self.0.logs.lock() {
            logs.push(record.message.as_str().to_owned());
        }
    }

    fn max_log_level(&self) -> LogLevel {
        LogLevel::Trace
    }

    fn llm_complete(
        &self,
        _request: &LlmCompleteRequest<'_>,
    ) -> RResult<LlmCompleteResponse, EngineError> {
        RResult::RErr(EngineError::NotImplemented(
            "the test host has no model".into(),
        ))
    }

    fn delegate_compaction_to_runtime(
        &self,
        _params: &CompactParams<'_>,
    ) -> RResult<CompactResult, EngineError> {
        self.0.delegated_compactions.fetch_add(1, Ordering::SeqCst);
        RResult::ROk(CompactResult::nothing_to_do(
            "the test host's runtime compacts nothing",
        ))
    }

    fn estimate_tokens(&self, messages: RSlice<'_, Message>) -> u64 {
        crate::tokens::estimate_tokens(messages.as_slice())
    }

    fn extension(&self, _name: RStr<'_>) -> ROption<ExtensionRef> {
        ROption::RNone
    }
}

impl TestHost {
    /// A fresh test host.
    pub fn new() -> Self {
        TestHost::default()
    }

    /// The host services object an engine receives.
    pub fn services(&self) -> HostServicesArc {
        crate::loading::host_services(Services(Arc::clone(&self.state)))
    }

    /// How often engines delegated compaction to the runtime.
    pub fn delegated_compactions(&self) -> usize {
        self.state.delegated_compactions.load(Ordering::SeqCst)
    }

    /// Messages of the log events received through the host services.
    pub fn logs(&self) -> Vec<String> {
        self.state
            .logs
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }
}

/// Creates engine `E` with `config` through the same factory path a loaded library uses (a
/// panic in `create` comes back as [`EngineError::Panicked`]). Prefer [`crate::test_engine!`],
/// which finds the optional methods for you.
///
/// # Errors
/// What the factory returns.
pub fn create_engine<E: Engine>(
    config: serde_json::Value,
    host: &TestHost,
    fns: OptionalFns<E>,
) -> Result<EngineBox, EngineError> {
    let config_json = config.to_string();
    let params = FactoryParams {
        engine_id: RStr::from_str(E::ID),
        config_json: RStr::from_str(&config_json),
        agent_dir: ROption::RNone,
        workspace_dir: ROption::RNone,
        plugin_dir: ROption::RNone,
    };
    crate::author::export::guard("factory", || {
        crate::author::export::make_engine::<E>(&params, host.services(), fns, false)
    })
    .into_result()
}

/// Creates an engine for a test: `test_engine!(MyEngine, json!({...}), &host)`.
#[macro_export]
macro_rules! test_engine {
    ($engine:ty, $config:expr, $host:expr) => {
        $crate::testing::create_engine::<$engine>($config, $host, $crate::optional_fns!($engine))
    };
}

/// `assemble` parameters over `messages`, with a session key and `abort` as the signal.
pub fn assemble_params<'a>(
    messages: &'a [Message],
    token_budget: Option<u64>,
    abort: &'a AbortSignal,
) -> AssembleParams<'a> {
    AssembleParams {
        session_id: RStr::from_str("test-session"),
        messages: RSlice::from_slice(messages),
        token_budget: token_budget.map_or(ROption::RNone, ROption::RSome),
        available_tools: RSlice::from_slice(&[]),
        citations_mode: ROption::RNone,
        model: ROption::RNone,
        host: HostParams {
            session_key: ROption::RSome(RStr::from_str("test-session")),
            abort_signal: ROption::RSome(abort),
            ..HostParams::default()
        },
    }
}

/// The messages an assemble result stands for, in order ([`AssembleResult::resolve`]).
pub fn kept<'a>(result: &'a AssembleResult, input: &'a [Message]) -> Vec<&'a Message> {
    result.resolve(input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    struct Delegating {
        host: Host,
    }

    impl Engine for Delegating {
        const ID: &'static str = "delegating";
        fn create(_: crate::FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
            tracing::info!("created");
            Ok(Delegating { host })
        }
        fn info(&self) -> crate::EngineInfo {
            crate::EngineInfo::new(Self::ID, "Delegating", "0.1.0")
        }
        fn ingest(&self, _: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
            panic!("ingest is broken")
        }
        fn assemble(&self, p: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
            Ok(AssembleResult::pass_through(p.messages.len()))
        }
        fn compact(&self, p: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
            self.host.delegate_compaction_to_runtime(p)
        }
    }

    #[test]
    fn compaction_reaches_the_test_host_and_panics_come_back_as_errors() {
        let host = TestHost::new();
        let engine = crate::test_engine!(Delegating, serde_json::json!({}), &host).unwrap();
        let messages = vec![Message::text(Role::User, "hi")];
        let abort = AbortSignal::new();
        let params = CompactParams {
            session_id: RStr::from_str("s"),
            session_file: RStr::from_str("s.jsonl"),
            agent_id: ROption::RNone,
            messages: RSlice::from_slice(&messages),
            token_budget: ROption::RNone,
            force: true,
            force_reason: ROption::RNone,
            current_token_count: ROption::RNone,
            compaction_target: crate::CompactionTarget::Budget,
            custom_instructions: ROption::RNone,
            host: HostParams::default(),
        };
        assert!(engine.compact(&params).into_result().unwrap().ok);
        assert_eq!(host.delegated_compactions(), 1);
        let ingest = crate::IngestParams {
            session_id: RStr::from_str("s"),
            message: &messages[0],
            is_heartbeat: false,
            host: HostParams {
                abort_signal: ROption::RSome(&abort),
                ..HostParams::default()
            },
        };
        let err = engine.ingest(&ingest).into_result().unwrap_err();
        assert!(
            matches!(&err, EngineError::Panicked(m) if m.contains("ingest is broken")),
            "{err}"
        );
    }
}
