//! Test support for engine authors, after nushell's `nu-plugin-test-support`: drive an engine
//! exactly as a host will — created through the library's real exported entry point (panic
//! hook, log forwarding, factory under `catch_unwind`), called through the ABI object — with
//! owned builders instead of FFI types.
//!
//! ```
//! use pincer_plugin_api::prelude::*;
//! use pincer_plugin_api::testing::{Conversation, TestEngine, TestHost};
//!
//! struct LastTwo {
//!     host: Host,
//! }
//!
//! impl Engine for LastTwo {
//!     const ID: &'static str = "last-two";
//!     fn create(_: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
//!         tracing::info!("last-two created");
//!         Ok(LastTwo { host })
//!     }
//!     fn info(&self) -> Result<EngineInfo, EngineError> {
//!         Ok(EngineInfo::new("Last two", "0.1.0"))
//!     }
//!     fn ingest(&self, _: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
//!         Ok(IngestResult { ingested: false })
//!     }
//!     fn assemble(&self, p: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
//!         let n = p.messages.len();
//!         Ok(ContextBuilder::new().keep_range(n.saturating_sub(2)..n).finish())
//!     }
//!     fn compact(&self, p: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
//!         // It does not own compaction: the runtime compacts.
//!         self.host.delegate_compaction_to_runtime(p)
//!     }
//! }
//!
//! pincer_plugin_api::export_engine!(LastTwo);
//!
//! let host = TestHost::new();
//! let engine = TestEngine::new::<LastTwo>(&host, serde_json::json!({})).unwrap();
//! let conversation = Conversation::new().user("one").assistant("two").user("three");
//! let assembled = engine.assemble(&conversation, None).unwrap();
//! assert_eq!(assembled.texts(), ["two", "three"]);
//! assert_eq!(assembled.kept_indices, [Some(1), Some(2)]);
//! assert_eq!(host.logs(), ["last-two created"]);
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pincer_plugin_abi::abi_stable::std_types::{ROption, RResult, RSlice, RStr};

use crate::abi::v1 as abi;
use crate::abi::v1::{
    AbortController, EngineBox, EngineError as AbiError, EntryId, ExtensionRef, HostServicesAbi,
    HostServicesArc, LogLevel, LogRecord, Message,
};
use crate::author::export::Exported;
use crate::{
    BootstrapResult, CommitTurnStatus, CompactResult, CompactionTarget, ContentBlock, EngineError,
    EngineInfo, IngestBatchResult, IngestResult, MaintainResult, SubagentEndReason,
};

/// One log event an engine emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEvent {
    /// Its level.
    pub level: LogLevel,
    /// The `tracing` target.
    pub target: String,
    /// The message.
    pub message: String,
    /// Structured fields, `(name, value)`.
    pub fields: Vec<(String, String)>,
}

#[derive(Default)]
struct State {
    logs: Mutex<Vec<LogEvent>>,
    delegated_compactions: AtomicUsize,
    model_replies: Mutex<VecDeque<Result<Message, String>>>,
    model_requests: Mutex<Vec<Vec<Message>>>,
}

/// A host for tests: records log events, delegated compactions and model requests; its model
/// answers with the replies queued by [`TestHost::reply_with`].
#[derive(Clone, Default)]
pub struct TestHost {
    state: Arc<State>,
}

impl std::fmt::Debug for TestHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHost")
            .field("logs", &self.logs().len())
            .field("delegated_compactions", &self.delegated_compactions())
            .finish()
    }
}

struct Services(Arc<State>);

impl HostServicesAbi for Services {
    fn log(&self, record: &LogRecord<'_>) {
        if let Ok(mut logs) = self.0.logs.lock() {
            logs.push(LogEvent {
                level: record.level,
                target: record.target.as_str().to_owned(),
                message: record.message.as_str().to_owned(),
                fields: record
                    .fields
                    .iter()
                    .map(|f| (f.name.as_str().to_owned(), f.value.as_str().to_owned()))
                    .collect(),
            });
        }
    }

    fn max_log_level(&self) -> LogLevel {
        LogLevel::Trace
    }

    fn llm_complete(
        &self,
        request: &abi::LlmCompleteRequest<'_>,
    ) -> RResult<abi::LlmCompleteResponse, AbiError> {
        if let Ok(mut requests) = self.0.model_requests.lock() {
            requests.push(request.messages.to_vec());
        }
        let reply = self
            .0
            .model_replies
            .lock()
            .ok()
            .and_then(|mut r| r.pop_front());
        match reply {
            Some(Ok(message)) => RResult::ROk(abi::LlmCompleteResponse { message }),
            Some(Err(error)) => RResult::RErr(AbiError::failed(error)),
            None => RResult::RErr(AbiError::NotImplemented(
                "the test host's model has no reply queued (TestHost::reply_with)".into(),
            )),
        }
    }

    fn delegate_compaction_to_runtime(
        &self,
        _params: &abi::CompactParams<'_>,
    ) -> RResult<abi::CompactResult, AbiError> {
        self.0.delegated_compactions.fetch_add(1, Ordering::SeqCst);
        RResult::ROk(
            CompactResult::nothing_to_do("the test host's runtime compacts nothing").into_abi(),
        )
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

    fn services(&self) -> HostServicesArc {
        pincer_plugin_abi::objects::host_services(Services(Arc::clone(&self.state)))
    }

    /// Queues the model's next answer: an assistant message with `text`.
    pub fn reply_with(&self, text: &str) -> &Self {
        if let Ok(mut replies) = self.state.model_replies.lock() {
            replies.push_back(Ok(Message::assistant(text)));
        }
        self
    }

    /// Queues a failure of the model's next call.
    pub fn fail_next_model_call(&self, error: &str) -> &Self {
        if let Ok(mut replies) = self.state.model_replies.lock() {
            replies.push_back(Err(error.to_owned()));
        }
        self
    }

    /// The conversations the engines sent to the model, in order.
    pub fn model_requests(&self) -> Vec<Vec<Message>> {
        self.state
            .model_requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// How often engines delegated compaction to the runtime.
    pub fn delegated_compactions(&self) -> usize {
        self.state.delegated_compactions.load(Ordering::SeqCst)
    }

    /// The messages of the log events the engines emitted through `tracing`, in order.
    pub fn logs(&self) -> Vec<String> {
        self.log_events().into_iter().map(|e| e.message).collect()
    }

    /// The log events, with level, target and fields.
    pub fn log_events(&self) -> Vec<LogEvent> {
        self.state
            .logs
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }
}

/// A conversation to drive an engine with: messages plus the session entry ids the host would
/// pass beside them (`e1`, `e2`, … unless given).
///
/// ```
/// use pincer_plugin_api::testing::Conversation;
/// let c = Conversation::new()
///     .user("Cancel my booking")
///     .tool_call("call_1", "get_reservation", serde_json::json!({"id": "ZFA04Y"}))
///     .tool_result("call_1", "get_reservation", "{\"status\":\"confirmed\"}")
///     .assistant("Done.");
/// assert_eq!(c.len(), 4);
/// assert_eq!(c.entry_id(3), Some("e4"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Conversation {
    messages: Vec<Message>,
    entry_ids: Vec<EntryId>,
}

impl Conversation {
    /// An empty conversation.
    pub fn new() -> Self {
        Conversation::default()
    }

    /// `messages`, with entry ids `e1`, `e2`, ….
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> Self {
        messages
            .into_iter()
            .fold(Conversation::new(), Conversation::message)
    }

    /// Appends `message` with the next entry id.
    pub fn message(mut self, message: Message) -> Self {
        let id = format!("e{}", self.messages.len() + 1);
        self.messages.push(message);
        self.entry_ids.push(EntryId::new(id));
        self
    }

    /// Appends `message` stored as entry `entry_id` (or as no entry).
    pub fn message_with_entry(mut self, message: Message, entry_id: Option<&str>) -> Self {
        self.messages.push(message);
        self.entry_ids
            .push(entry_id.map_or(EntryId::NONE, EntryId::new));
        self
    }

    /// Appends a user message.
    pub fn user(self, text: &str) -> Self {
        self.message(Message::user(text))
    }

    /// Appends an assistant text message.
    pub fn assistant(self, text: &str) -> Self {
        self.message(Message::assistant(text))
    }

    /// Appends a system message.
    pub fn system(self, text: &str) -> Self {
        self.message(Message::system(text))
    }

    /// Appends an assistant message that calls tool `name`.
    pub fn tool_call(self, id: &str, name: &str, arguments: serde_json::Value) -> Self {
        self.message(Message::assistant_blocks(vec![ContentBlock::tool_call(
            id, name, &arguments,
        )]))
    }

    /// Appends the result of call `id`.
    pub fn tool_result(self, id: &str, name: &str, text: &str) -> Self {
        self.message(Message::tool_result(id, name, text, false))
    }

    /// The messages.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The entry id of message `index`.
    pub fn entry_id(&self, index: usize) -> Option<&str> {
        self.entry_ids.get(index).and_then(EntryId::as_str)
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

/// What an engine assembled, resolved against the conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct Assembled {
    /// The context, in prompt order.
    pub messages: Vec<Message>,
    /// For each message, its index in the conversation, `None` for a message the engine made.
    pub kept_indices: Vec<Option<usize>>,
    /// The engine's token estimate, if it gave one.
    pub estimated_tokens: Option<u64>,
    /// The text to prepend to the system prompt.
    pub system_prompt_addition: Option<String>,
    /// Whether the engine asked the host to keep its overflow precheck on.
    pub may_overflow: bool,
}

impl Assembled {
    /// Each message's [`Message::plain_text`].
    pub fn texts(&self) -> Vec<String> {
        self.messages.iter().map(Message::plain_text).collect()
    }
}

/// How [`TestEngine::compact_with`] calls `compact`.
#[derive(Clone, Debug)]
pub struct CompactOptions {
    /// Compact even below the threshold (default true, as `/compact`).
    pub force: bool,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// The observed token count.
    pub current_token_count: Option<u64>,
    /// Budget or threshold.
    pub target: CompactionTarget,
    /// `/compact <instructions>`.
    pub custom_instructions: Option<String>,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            force: true,
            token_budget: None,
            current_token_count: None,
            target: CompactionTarget::Budget,
            custom_instructions: None,
        }
    }
}

/// An engine created through its library's exported entry point, called through the ABI
/// object a host holds.
pub struct TestEngine {
    engine: EngineBox,
    id: String,
    info: EngineInfo,
    optional_methods: Vec<&'static str>,
    session_id: String,
    abort_calls: AtomicBool,
}

impl std::fmt::Debug for TestEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEngine")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn opt<'a>(value: Option<&'a str>) -> ROption<RStr<'a>> {
    value.map(RStr::from_str).into()
}

impl TestEngine {
    /// `E` must be exported by [`crate::export_engine!`] in its crate (that is what implements
    /// the hidden `Exported` bound).
    ///
    /// Creates engine `E` with `config` (`null`: no config), through the factory its library exports
    /// ([`crate::export_engine!`] in the same crate), and reads its info.
    ///
    /// # Errors
    /// What the factory or `info` returns (a panic comes back as [`ErrorKind::Panicked`](crate::ErrorKind::Panicked)).
    pub fn new<E: Exported>(
        host: &TestHost,
        config: serde_json::Value,
    ) -> Result<Self, EngineError> {
        crate::author::export::LABEL_ALL_CALLS.store(true, Ordering::Relaxed);
        // `null` stands for an entry without config, which the host passes as empty text.
        let config_json = if config.is_null() {
            String::new()
        } else {
            config.to_string()
        };
        let params = abi::FactoryParams {
            engine_id: RStr::from_str(E::ID),
            config_json: RStr::from_str(&config_json),
            agent_dir: ROption::RNone,
            workspace_dir: ROption::RNone,
            plugin_dir: ROption::RNone,
            state_dir: ROption::RNone,
        };
        let engine = (E::NEW_ENGINE)(&params, host.services()).into_result()?;
        let info = engine.info().into_result()?;
        Ok(TestEngine {
            engine,
            id: info.id.to_string(),
            info: EngineInfo::from_abi(&info),
            optional_methods: info.optional_methods.names().collect(),
            session_id: "test-session".to_owned(),
            abort_calls: AtomicBool::new(false),
        })
    }

    /// The engine id the host registers ([`crate::Engine::ID`]).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The engine's info, as the host read it through the ABI.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// The contract names of the optional methods the engine implements (what the adapter
    /// found and the host sees).
    pub fn optional_methods(&self) -> &[&'static str] {
        &self.optional_methods
    }

    /// From now on, every call's abort signal has fired (or not).
    pub fn abort_calls(&self, aborted: bool) {
        self.abort_calls.store(aborted, Ordering::Relaxed);
    }

    fn controller(&self) -> AbortController {
        let controller = AbortController::new();
        if self.abort_calls.load(Ordering::Relaxed) {
            controller.abort();
        }
        controller
    }

    fn host_params<'a>(&'a self, abort: &'a AbortController) -> abi::HostParams<'a> {
        abi::HostParams {
            session_key: ROption::RSome(RStr::from_str(&self.session_id)),
            abort_signal: ROption::RSome(abort.signal()),
            ..abi::HostParams::default()
        }
    }

    /// `assemble` over `conversation` with `token_budget`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn assemble(
        &self,
        conversation: &Conversation,
        token_budget: Option<u64>,
    ) -> Result<Assembled, EngineError> {
        let abort = self.controller();
        let params = abi::AssembleParams {
            session_id: RStr::from_str(&self.session_id),
            messages: RSlice::from_slice(&conversation.messages),
            entry_ids: RSlice::from_slice(&conversation.entry_ids),
            token_budget: token_budget.into(),
            available_tools: RSlice::from_slice(&[]),
            citations_mode: ROption::RNone,
            model: ROption::RNone,
            host: self.host_params(&abort),
        };
        let result = crate::AssembleResult(self.engine.assemble(&params).into_result()?);
        let mut messages = Vec::new();
        let mut kept_indices = Vec::new();
        for item in result.items() {
            match item {
                crate::ContextItem::Kept(range) => {
                    let end = range.end.min(conversation.len());
                    for index in range.start.min(end)..end {
                        messages.push(conversation.messages[index].clone());
                        kept_indices.push(Some(index));
                    }
                }
                crate::ContextItem::New(message) => {
                    messages.push(message.clone());
                    kept_indices.push(None);
                }
            }
        }
        Ok(Assembled {
            messages,
            kept_indices,
            estimated_tokens: result.estimated_tokens(),
            system_prompt_addition: result.system_prompt_addition().map(str::to_owned),
            may_overflow: result.0.prompt_authority == abi::PromptAuthority::PreassemblyMayOverflow,
        })
    }

    /// `compact` as `/compact` calls it (forced, budget target).
    ///
    /// # Errors
    /// The engine's error.
    pub fn compact(&self, conversation: &Conversation) -> Result<CompactResult, EngineError> {
        self.compact_with(conversation, CompactOptions::default())
    }

    /// `compact` with `options`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn compact_with(
        &self,
        conversation: &Conversation,
        options: CompactOptions,
    ) -> Result<CompactResult, EngineError> {
        let abort = self.controller();
        let params = abi::CompactParams {
            session_id: RStr::from_str(&self.session_id),
            session_file: RStr::from_str("test-session.jsonl"),
            agent_id: ROption::RNone,
            messages: RSlice::from_slice(&conversation.messages),
            entry_ids: RSlice::from_slice(&conversation.entry_ids),
            token_budget: options.token_budget.into(),
            force: options.force,
            force_reason: if options.force {
                ROption::RSome(RStr::from_str("manual"))
            } else {
                ROption::RNone
            },
            current_token_count: options.current_token_count.into(),
            compaction_target: options.target,
            custom_instructions: opt(options.custom_instructions.as_deref()),
            host: self.host_params(&abort),
        };
        self.engine
            .compact(&params)
            .into_result()
            .map_err(EngineError::from_abi)
            .map(CompactResult::from_abi)
    }

    /// `ingest` of one message (entry id `entry_id`).
    ///
    /// # Errors
    /// The engine's error.
    pub fn ingest(
        &self,
        message: &Message,
        entry_id: Option<&str>,
    ) -> Result<IngestResult, EngineError> {
        let abort = self.controller();
        let entry_id = entry_id.map_or(EntryId::NONE, EntryId::new);
        let params = abi::IngestParams {
            session_id: RStr::from_str(&self.session_id),
            message,
            entry_id: &entry_id,
            is_heartbeat: false,
            host: self.host_params(&abort),
        };
        self.engine
            .ingest(&params)
            .into_result()
            .map_err(EngineError::from_abi)
    }

    /// `ingestBatch` of `conversation`.
    ///
    /// # Errors
    /// The engine's error ([`ErrorKind::NotImplemented`](crate::ErrorKind::NotImplemented) without the method).
    pub fn ingest_batch(
        &self,
        conversation: &Conversation,
    ) -> Result<IngestBatchResult, EngineError> {
        let abort = self.controller();
        let params = abi::IngestBatchParams {
            session_id: RStr::from_str(&self.session_id),
            messages: RSlice::from_slice(&conversation.messages),
            entry_ids: RSlice::from_slice(&conversation.entry_ids),
            is_heartbeat: false,
            host: self.host_params(&abort),
        };
        self.engine
            .ingest_batch(&params)
            .into_result()
            .map_err(EngineError::from_abi)
    }

    /// `afterTurn` with `conversation` as the snapshot, of which the first
    /// `pre_prompt_message_count` existed before the turn.
    ///
    /// # Errors
    /// The engine's error ([`ErrorKind::NotImplemented`](crate::ErrorKind::NotImplemented) without the method).
    pub fn after_turn(
        &self,
        conversation: &Conversation,
        pre_prompt_message_count: usize,
    ) -> Result<(), EngineError> {
        let abort = self.controller();
        let params = abi::AfterTurnParams {
            session_id: RStr::from_str(&self.session_id),
            session_file: RStr::from_str("test-session.jsonl"),
            messages: RSlice::from_slice(&conversation.messages),
            entry_ids: RSlice::from_slice(&conversation.entry_ids),
            pre_prompt_message_count: pre_prompt_message_count as u64,
            auto_compaction_summary: ROption::RNone,
            is_heartbeat: false,
            token_budget: ROption::RNone,
            host: self.host_params(&abort),
        };
        self.engine
            .after_turn(&params)
            .into_result()
            .map_err(EngineError::from_abi)
    }

    /// `bootstrap`.
    ///
    /// # Errors
    /// The engine's error ([`ErrorKind::NotImplemented`](crate::ErrorKind::NotImplemented) without the method).
    pub fn bootstrap(&self) -> Result<BootstrapResult, EngineError> {
        let abort = self.controller();
        let params = abi::BootstrapParams {
            session_id: RStr::from_str(&self.session_id),
            session_file: RStr::from_str("test-session.jsonl"),
            host: self.host_params(&abort),
        };
        self.engine
            .bootstrap(&params)
            .into_result()
            .map_err(EngineError::from_abi)
            .map(BootstrapResult::from_abi)
    }

    /// `maintain` for `reason` (`bootstrap` or `turn`).
    ///
    /// # Errors
    /// The engine's error ([`ErrorKind::NotImplemented`](crate::ErrorKind::NotImplemented) without the method).
    pub fn maintain(&self, reason: &str) -> Result<MaintainResult, EngineError> {
        let abort = self.controller();
        let params = abi::MaintainParams {
            session_id: RStr::from_str(&self.session_id),
            session_file: RStr::from_str("test-session.jsonl"),
            reason: RStr::from_str(reason),
            host: self.host_params(&abort),
        };
        self.engine
            .maintain(&params)
            .into_result()
            .map_err(EngineError::from_abi)
            .map(MaintainResult::from_abi)
    }

    /// `callTool`: `(content, is_error)`.
    ///
    /// # Errors
    /// The engine's error ([`ErrorKind::NotImplemented`](crate::ErrorKind::NotImplemented) without the method).
    pub fn call_tool(
        &self,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<(String, bool), EngineError> {
        let abort = self.controller();
        let arguments = arguments.to_string();
        let params = abi::ToolCallParams {
            session_id: RStr::from_str(&self.session_id),
            tool_name: RStr::from_str(name),
            arguments_json: RStr::from_str(&arguments),
            host: self.host_params(&abort),
        };
        self.engine
            .call_tool(&params)
            .into_result()
            .map_err(EngineError::from_abi)
            .map(|r| (r.content.into_string(), r.is_error))
    }

    /// `onSubagentEnded`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn on_subagent_ended(
        &self,
        child_session_key: &str,
        reason: SubagentEndReason,
    ) -> Result<(), EngineError> {
        let params = abi::SubagentEndedParams {
            child_session_key: RStr::from_str(child_session_key),
            reason,
        };
        self.engine
            .on_subagent_ended(&params)
            .into_result()
            .map_err(EngineError::from_abi)
    }

    /// `commitTurn` of `conversation` as one accepted turn with `advancement_key`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn commit_turn(
        &self,
        conversation: &Conversation,
        advancement_key: &str,
    ) -> Result<CommitTurnStatus, EngineError> {
        let abort = self.controller();
        let anchor = |index: usize| abi::TranscriptAnchor {
            agent_id: RStr::from_str("test-agent"),
            session_id: RStr::from_str(&self.session_id),
            session_key: RStr::from_str(&self.session_id),
            store_path: RStr::from_str("test-session.jsonl"),
            generation: 1,
            entry_id: RStr::from_str(conversation.entry_id(index).unwrap_or("")),
            raw_seq: index as u64,
            effective_parent_id: opt(index.checked_sub(1).and_then(|i| conversation.entry_id(i))),
            active_message_position: index as u64,
            idempotency_key: ROption::RNone,
        };
        let params = abi::CommitTurnParams {
            session_id: RStr::from_str(&self.session_id),
            advancement_key: RStr::from_str(advancement_key),
            logical_turn_id: RStr::from_str(advancement_key),
            admission: anchor(0),
            terminal: anchor(conversation.len().saturating_sub(1)),
            messages: RSlice::from_slice(&conversation.messages),
            entry_ids: RSlice::from_slice(&conversation.entry_ids),
            is_heartbeat: false,
            host: self.host_params(&abort),
        };
        self.engine
            .commit_turn(&params)
            .into_result()
            .map_err(EngineError::from_abi)
    }

    /// `dispose`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn dispose(&self) -> Result<(), EngineError> {
        self.engine
            .dispose()
            .into_result()
            .map_err(EngineError::from_abi)
    }
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
        fn create(_: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
            tracing::info!(answer = 42, "created");
            Ok(Delegating { host })
        }
        fn info(&self) -> Result<EngineInfo, EngineError> {
            Ok(EngineInfo::new("Delegating", "0.1.0"))
        }
        fn ingest(&self, _: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
            panic!("ingest is broken")
        }
        fn assemble(&self, p: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
            p.host.check_abort()?;
            tracing::warn!(
                first_entry = p.entry_ids.get(0).unwrap_or("-"),
                "assembling"
            );
            Ok(AssembleResult::pass_through(p.messages.len()))
        }
        fn compact(&self, p: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
            self.host.delegate_compaction_to_runtime(p)
        }
    }

    crate::export_engine!(Delegating);

    /// The library's log forwarder is process-wide: a test that logs from an engine it does not
    /// create through a `TestHost` must not run while another test reads its host's logs.
    static LOGS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_exported_entry_point_forwards_logs_catches_panics_and_delegates() {
        let _logs = LOGS.lock().unwrap_or_else(|e| e.into_inner());
        let host = TestHost::new();
        let engine = TestEngine::new::<Delegating>(&host, serde_json::json!({})).unwrap();
        assert_eq!(engine.id(), "delegating", "the id comes from Engine::ID");
        assert_eq!(engine.info().name, "Delegating");
        let conversation = Conversation::new().user("hi");
        assert!(engine.compact(&conversation).unwrap().is_ok());
        assert_eq!(host.delegated_compactions(), 1);
        let err = engine
            .ingest(&conversation.messages()[0], None)
            .unwrap_err();
        assert!(
            err.kind() == ErrorKind::Panicked
                && err.message().contains("ingest is broken")
                && err.message().contains("testing.rs"),
            "{err}"
        );
        engine.assemble(&conversation, None).unwrap();
        let events = host.log_events();
        assert_eq!(host.logs(), ["created", "assembling"]);
        assert_eq!(events[0].fields, [("answer".to_owned(), "42".to_owned())]);
        assert_eq!(
            events[1].fields,
            [("first_entry".to_owned(), "e1".to_owned())]
        );
        engine.abort_calls(true);
        assert!(matches!(
            engine.assemble(&conversation, None),
            Err(err) if err.kind() == ErrorKind::Aborted
        ));
    }

    mod panicky_drop {
        use crate::prelude::*;

        /// An engine whose destructor panics.
        pub struct PanickyDrop;

        impl Drop for PanickyDrop {
            fn drop(&mut self) {
                panic!("drop is broken");
            }
        }

        impl Engine for PanickyDrop {
            const ID: &'static str = "panicky-drop";
            fn create(_: FactoryContext<'_>, _: Host) -> Result<Self, EngineError> {
                Ok(PanickyDrop)
            }
            fn info(&self) -> Result<EngineInfo, EngineError> {
                Ok(EngineInfo::new("Panicky drop", "0.1.0"))
            }
            fn ingest(&self, _: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
                Ok(IngestResult::default())
            }
            fn assemble(&self, p: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
                Ok(AssembleResult::pass_through(p.messages.len()))
            }
            fn compact(&self, _: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
                Ok(CompactResult::nothing_to_do(""))
            }
        }
    }

    #[test]
    fn a_panicking_destructor_is_contained() {
        let _logs = LOGS.lock().unwrap_or_else(|e| e.into_inner());
        let host = TestHost::new();
        let engine = crate::into_engine_box(
            panicky_drop::PanickyDrop,
            crate::optional_fns!(panicky_drop::PanickyDrop),
        );
        // Dropping the ABI object runs abi_stable's destructor shim, which would abort the
        // process on an unwinding panic: the adapter must catch it first.
        drop(engine);
        let _ = host;
    }

    #[test]
    fn the_manifest_record_is_plain_json_behind_the_magic() {
        let record = <Delegating as Exported>::manifest_record();
        let magic = crate::__private::MANIFEST_MAGIC.as_bytes();
        assert!(record.starts_with(magic));
        assert_eq!(record.last(), Some(&0));
        let json: serde_json::Value =
            serde_json::from_slice(&record[magic.len()..record.len() - 1]).unwrap();
        assert_eq!(json["pluginId"], "delegating");
        assert_eq!(json["engineIds"], serde_json::json!(["delegating"]));
        assert_eq!(json["apiVersion"], crate::API_VERSION);
        assert_eq!(json["panicUnwind"], true);
    }
}
