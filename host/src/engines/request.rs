//! Owned requests for guarded engine calls.
//!
//! A bounded call runs on a worker thread that may be abandoned if the engine never returns,
//! so everything the call borrows must be owned by the call itself: messages travel as
//! `Arc<[Message]>` (shared with the session, never copied) and strings as `Arc<str>`. The ABI
//! parameters (`AssembleParams<'_>` …) are built from a request on the worker, borrowing from
//! it, with the engine's host-parameter projection applied.

use std::ops::Range;
use std::sync::Arc;

use pincer_plugin_abi::latest::{
    AbortSignal, AfterTurnParams, AssembleParams, BootstrapParams, CompactParams, CompactionTarget,
    EntryId, HostParams, IngestBatchParams, IngestParams, MaintainParams, Message, PromptCache,
    RuntimeSettings, SessionTarget, SubagentContextMode, SubagentEndReason, SubagentEndedParams,
    SubagentSpawnParams, ToolCallParams, Usage,
};
use pincer_plugin_abi::{ROption, RSlice, RStr};

use crate::types::Method;

fn rstr(value: &Option<Arc<str>>) -> ROption<RStr<'_>> {
    match value {
        Some(s) => ROption::RSome(RStr::from_str(s)),
        None => ROption::RNone,
    }
}

fn ropt<T: Copy>(value: Option<T>) -> ROption<T> {
    value.map_or(ROption::RNone, ROption::RSome)
}

/// The entry ids to pass beside `messages[range]`: none when the ids do not cover the messages
/// (a caller that has no session passes an empty list).
fn entry_ids<'a>(
    ids: &'a [EntryId],
    message_count: usize,
    range: Range<usize>,
) -> RSlice<'a, EntryId> {
    if ids.len() == message_count {
        RSlice::from_slice(&ids[range])
    } else {
        RSlice::from_slice(&[])
    }
}

/// No entry ids: messages that live in no session.
pub fn no_entry_ids() -> Arc<[EntryId]> {
    Arc::from(Vec::new())
}

/// `runtimeContext.promptCache`, owned.
#[derive(Debug, Clone, Default)]
pub struct PromptCacheInput {
    /// The cache retention asked for.
    pub retention: Option<Arc<str>>,
    /// The last model call's usage.
    pub last_call_usage: Option<Usage>,
    /// Whether the last call broke the cache.
    pub broke: Option<bool>,
    /// When the cache was last touched, ms since the Unix epoch.
    pub last_cache_touch_at: Option<i64>,
    /// When it is expected to expire, ms since the Unix epoch.
    pub expires_at: Option<i64>,
}

/// `sessionTarget`, owned.
#[derive(Debug, Clone, Default)]
pub struct SessionTargetInput {
    /// The agent.
    pub agent_id: Option<Arc<str>>,
    /// The session id.
    pub session_id: Option<Arc<str>>,
    /// The session key.
    pub session_key: Option<Arc<str>>,
    /// The store path.
    pub store_path: Option<Arc<str>>,
    /// The thread id.
    pub thread_id: Option<Arc<str>>,
}

/// The host parameters of a call (docs/CONTRACT.md §6.1), owned.
#[derive(Debug, Clone, Default)]
pub struct HostInputs {
    /// `sessionKey`.
    pub session_key: Option<Arc<str>>,
    /// `prompt`.
    pub prompt: Option<Arc<str>>,
    /// `runtimeSettings`.
    pub runtime_settings: Option<Arc<RuntimeSettings>>,
    /// `sessionTarget`.
    pub session_target: Option<Arc<SessionTargetInput>>,
    /// `runtimeContext`, a JSON object text.
    pub runtime_context: Option<Arc<str>>,
    /// `runtimeContext.promptCache`.
    pub prompt_cache: Option<Arc<PromptCacheInput>>,
}

impl HostInputs {
    /// Builds the ABI host params, borrowing from `self`, with `abort` as the signal.
    pub fn with_abi<R>(&self, abort: &AbortSignal, f: impl FnOnce(HostParams<'_>) -> R) -> R {
        let target = self.session_target.as_ref().map(|t| SessionTarget {
            agent_id: rstr(&t.agent_id),
            session_id: rstr(&t.session_id),
            session_key: rstr(&t.session_key),
            store_path: rstr(&t.store_path),
            thread_id: rstr(&t.thread_id),
        });
        let prompt_cache = self.prompt_cache.as_ref().map(|c| PromptCache {
            retention: rstr(&c.retention),
            last_call_usage: ropt(c.last_call_usage),
            broke: ropt(c.broke),
            last_cache_touch_at: ropt(c.last_cache_touch_at),
            expires_at: ropt(c.expires_at),
        });
        f(HostParams {
            prompt_cache: prompt_cache.as_ref().map_or(ROption::RNone, ROption::RSome),
            session_key: rstr(&self.session_key),
            prompt: rstr(&self.prompt),
            runtime_settings: self
                .runtime_settings
                .as_deref()
                .map_or(ROption::RNone, ROption::RSome),
            session_target: target.as_ref().map_or(ROption::RNone, ROption::RSome),
            runtime_context_json: rstr(&self.runtime_context),
            abort_signal: ROption::RSome(abort),
        })
    }
}

/// `assemble`.
#[derive(Debug, Clone)]
pub struct AssembleRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The session's messages.
    pub messages: Arc<[Message]>,
    /// The session entry of each message (empty: none).
    pub entry_ids: Arc<[EntryId]>,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// Host parameters.
    pub host: HostInputs,
}

impl AssembleRequest {
    /// The ABI params for this request.
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&AssembleParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&AssembleParams {
                session_id: RStr::from_str(&self.session_id),
                messages: RSlice::from_slice(&self.messages),
                entry_ids: entry_ids(&self.entry_ids, self.messages.len(), 0..self.messages.len()),
                token_budget: ropt(self.token_budget),
                available_tools: RSlice::from_slice(&[]),
                citations_mode: ROption::RNone,
                model: ROption::RNone,
                host: project(host),
            })
        })
    }
}

/// `ingest` of `messages[index]`.
#[derive(Debug, Clone)]
pub struct IngestRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The messages holding the one to ingest.
    pub messages: Arc<[Message]>,
    /// The session entry of each message (empty: none).
    pub entry_ids: Arc<[EntryId]>,
    /// Which one.
    pub index: usize,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostInputs,
}

impl IngestRequest {
    /// The ABI params for this request.
    ///
    /// # Panics
    /// When `index` is out of range (a caller bug).
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&IngestParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&IngestParams {
                session_id: RStr::from_str(&self.session_id),
                message: &self.messages[self.index],
                entry_id: self
                    .entry_ids
                    .get(self.index)
                    .filter(|_| self.entry_ids.len() == self.messages.len())
                    .unwrap_or(&EntryId::NONE),
                is_heartbeat: self.is_heartbeat,
                host: project(host),
            })
        })
    }
}

/// `ingestBatch` of `messages[range]`.
#[derive(Debug, Clone)]
pub struct IngestBatchRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The messages.
    pub messages: Arc<[Message]>,
    /// The session entry of each message (empty: none).
    pub entry_ids: Arc<[EntryId]>,
    /// Which ones.
    pub range: Range<usize>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostInputs,
}

impl IngestBatchRequest {
    /// The ABI params for this request.
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&IngestBatchParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&IngestBatchParams {
                session_id: RStr::from_str(&self.session_id),
                messages: RSlice::from_slice(&self.messages[self.range.clone()]),
                entry_ids: entry_ids(&self.entry_ids, self.messages.len(), self.range.clone()),
                is_heartbeat: self.is_heartbeat,
                host: project(host),
            })
        })
    }
}

/// How messages are handed to the engine after they are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestMode {
    /// `ingest`, once per message.
    EachMessage,
    /// `ingestBatch`, else (an engine without it) `ingest` per message.
    Batch,
}

impl IngestMode {
    /// The mode a call of `method` hands messages over in, when it is an ingestion.
    pub const fn of(method: Method) -> Option<IngestMode> {
        match method {
            Method::Ingest => Some(IngestMode::EachMessage),
            Method::IngestBatch => Some(IngestMode::Batch),
            _ => None,
        }
    }
}

/// Stored messages `messages[range]` to hand to the engine, as [`IngestMode`] says: the
/// requests of the `ingestBatch` → `ingest` fallback (docs/CONTRACT.md), which
/// `slot::guarded::GuardedEngine::hand_over` runs.
#[derive(Debug, Clone)]
pub struct HandOverRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The session's messages, holding the new ones.
    pub messages: Arc<[Message]>,
    /// The session entry of each message (empty: none).
    pub entry_ids: Arc<[EntryId]>,
    /// The new messages' positions.
    pub range: Range<usize>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostInputs,
    /// One batch, or one message at a time.
    pub mode: IngestMode,
}

impl HandOverRequest {
    /// The one batch call to try first (with [`IngestMode::Batch`]).
    pub fn batch(&self) -> Option<Arc<IngestBatchRequest>> {
        (self.mode == IngestMode::Batch).then(|| {
            Arc::new(IngestBatchRequest {
                session_id: Arc::clone(&self.session_id),
                messages: Arc::clone(&self.messages),
                entry_ids: Arc::clone(&self.entry_ids),
                range: self.range.clone(),
                is_heartbeat: self.is_heartbeat,
                host: self.host.clone(),
            })
        })
    }

    /// The per-message calls, in order (without a batch, or when the engine has none).
    pub fn each(&self) -> impl Iterator<Item = Arc<IngestRequest>> + '_ {
        self.range.clone().map(|index| {
            Arc::new(IngestRequest {
                session_id: Arc::clone(&self.session_id),
                messages: Arc::clone(&self.messages),
                entry_ids: Arc::clone(&self.entry_ids),
                index,
                is_heartbeat: self.is_heartbeat,
                host: self.host.clone(),
            })
        })
    }
}

/// `bootstrap`.
#[derive(Debug, Clone)]
pub struct BootstrapRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The transcript file.
    pub session_file: Arc<str>,
    /// Host parameters.
    pub host: HostInputs,
}

impl BootstrapRequest {
    /// The ABI params for this request.
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&BootstrapParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&BootstrapParams {
                session_id: RStr::from_str(&self.session_id),
                session_file: RStr::from_str(&self.session_file),
                host: project(host),
            })
        })
    }
}

/// Why the host calls `maintain`: the contract's reasons, or the one a gateway caller gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaintainReason {
    /// After `bootstrap` imported a transcript.
    Bootstrap,
    /// After a turn.
    Turn,
    /// After a compaction (in the contract; the host does not produce it yet:
    /// [`MaintainReason::is_produced`]).
    Compaction,
    /// Asked for by an operator (the gateway's default).
    Manual,
    /// A reason a gateway caller named, passed on as given.
    Other(Arc<str>),
}

impl MaintainReason {
    /// The reason as the engine reads it.
    pub fn as_str(&self) -> &str {
        match self {
            MaintainReason::Bootstrap => "bootstrap",
            MaintainReason::Turn => "turn",
            MaintainReason::Compaction => "compaction",
            MaintainReason::Manual => "manual",
            MaintainReason::Other(reason) => reason,
        }
    }

    /// Whether the host itself calls `maintain` with this reason (`compaction`: not yet).
    pub const fn is_produced(&self) -> bool {
        matches!(self, MaintainReason::Bootstrap | MaintainReason::Turn)
    }
}

impl From<&str> for MaintainReason {
    fn from(reason: &str) -> Self {
        match reason {
            "bootstrap" => MaintainReason::Bootstrap,
            "turn" => MaintainReason::Turn,
            "compaction" => MaintainReason::Compaction,
            "manual" => MaintainReason::Manual,
            other => MaintainReason::Other(Arc::from(other)),
        }
    }
}

impl std::fmt::Display for MaintainReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `maintain`.
#[derive(Debug, Clone)]
pub struct MaintainRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The transcript file.
    pub session_file: Arc<str>,
    /// Why the host asks.
    pub reason: MaintainReason,
    /// Host parameters.
    pub host: HostInputs,
}

impl MaintainRequest {
    /// The ABI params for this request.
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&MaintainParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&MaintainParams {
                session_id: RStr::from_str(&self.session_id),
                session_file: RStr::from_str(&self.session_file),
                reason: RStr::from_str(self.reason.as_str()),
                host: project(host),
            })
        })
    }
}

/// `afterTurn`.
#[derive(Debug, Clone)]
pub struct AfterTurnRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The transcript file.
    pub session_file: Arc<str>,
    /// The whole snapshot after the turn.
    pub messages: Arc<[Message]>,
    /// The session entry of each message (empty: none).
    pub entry_ids: Arc<[EntryId]>,
    /// How many messages existed before the prompt.
    pub pre_prompt_message_count: u64,
    /// An auto-compaction summary produced during the turn.
    pub auto_compaction_summary: Option<Arc<str>>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// Host parameters.
    pub host: HostInputs,
}

impl AfterTurnRequest {
    /// The ABI params for this request.
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&AfterTurnParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&AfterTurnParams {
                session_id: RStr::from_str(&self.session_id),
                session_file: RStr::from_str(&self.session_file),
                messages: RSlice::from_slice(&self.messages),
                entry_ids: entry_ids(&self.entry_ids, self.messages.len(), 0..self.messages.len()),
                pre_prompt_message_count: self.pre_prompt_message_count,
                auto_compaction_summary: rstr(&self.auto_compaction_summary),
                is_heartbeat: self.is_heartbeat,
                token_budget: ropt(self.token_budget),
                host: project(host),
            })
        })
    }
}

/// `compact`.
#[derive(Debug, Clone)]
pub struct CompactRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The transcript file.
    pub session_file: Arc<str>,
    /// The agent.
    pub agent_id: Option<Arc<str>>,
    /// The session's current context.
    pub messages: Arc<[Message]>,
    /// The session entry of each message (empty: none).
    pub entry_ids: Arc<[EntryId]>,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// Compact even below the threshold.
    pub force: bool,
    /// `manual` or `preflight_required`.
    pub force_reason: Option<Arc<str>>,
    /// The observed token count.
    pub current_token_count: Option<u64>,
    /// Budget or threshold.
    pub compaction_target: CompactionTarget,
    /// `/compact <text>` instructions.
    pub custom_instructions: Option<Arc<str>>,
    /// Host parameters.
    pub host: HostInputs,
}

impl CompactRequest {
    /// A forced compaction as `/compact` asks for it: `force`, reason `manual`, target budget,
    /// no budget, count or instructions.
    pub fn manual(
        session_id: Arc<str>,
        session_file: Arc<str>,
        messages: Arc<[Message]>,
        entry_ids: Arc<[EntryId]>,
        host: HostInputs,
    ) -> Self {
        CompactRequest {
            session_id,
            session_file,
            agent_id: None,
            messages,
            entry_ids,
            token_budget: None,
            force: true,
            force_reason: Some(Arc::from("manual")),
            current_token_count: None,
            compaction_target: CompactionTarget::Budget,
            custom_instructions: None,
            host,
        }
    }

    /// The ABI params for this request.
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&CompactParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&CompactParams {
                session_id: RStr::from_str(&self.session_id),
                session_file: RStr::from_str(&self.session_file),
                agent_id: rstr(&self.agent_id),
                messages: RSlice::from_slice(&self.messages),
                entry_ids: entry_ids(&self.entry_ids, self.messages.len(), 0..self.messages.len()),
                token_budget: ropt(self.token_budget),
                force: self.force,
                force_reason: rstr(&self.force_reason),
                current_token_count: ropt(self.current_token_count),
                compaction_target: self.compaction_target,
                custom_instructions: rstr(&self.custom_instructions),
                host: project(host),
            })
        })
    }
}

/// `prepareSubagentSpawn`.
#[derive(Debug, Clone)]
pub struct SubagentSpawnRequest {
    /// The parent's session key.
    pub parent_session_key: Arc<str>,
    /// The child's session key.
    pub child_session_key: Arc<str>,
    /// Isolated or fork.
    pub context_mode: Option<SubagentContextMode>,
    /// The parent's session id.
    pub parent_session_id: Option<Arc<str>>,
    /// The parent's transcript file.
    pub parent_session_file: Option<Arc<str>>,
    /// The child's session id.
    pub child_session_id: Option<Arc<str>>,
    /// The child's transcript file.
    pub child_session_file: Option<Arc<str>>,
    /// The child's time to live.
    pub ttl_ms: Option<u64>,
}

impl SubagentSpawnRequest {
    /// The ABI params for this request.
    pub fn with_abi<R>(&self, f: impl FnOnce(&SubagentSpawnParams<'_>) -> R) -> R {
        f(&SubagentSpawnParams {
            parent_session_key: RStr::from_str(&self.parent_session_key),
            child_session_key: RStr::from_str(&self.child_session_key),
            context_mode: ropt(self.context_mode),
            parent_session_id: rstr(&self.parent_session_id),
            parent_session_file: rstr(&self.parent_session_file),
            child_session_id: rstr(&self.child_session_id),
            child_session_file: rstr(&self.child_session_file),
            ttl_ms: ropt(self.ttl_ms),
        })
    }
}

/// `onSubagentEnded`.
#[derive(Debug, Clone)]
pub struct SubagentEndedRequest {
    /// The child's session key.
    pub child_session_key: Arc<str>,
    /// Why it ended.
    pub reason: SubagentEndReason,
}

impl SubagentEndedRequest {
    /// The ABI params for this request, in the common shape of the table's requests: the
    /// method takes no host parameters, so `abort` and `project` are unused.
    pub fn with_abi<R>(
        &self,
        _abort: &AbortSignal,
        _project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&SubagentEndedParams<'_>) -> R,
    ) -> R {
        f(&SubagentEndedParams {
            child_session_key: RStr::from_str(&self.child_session_key),
            reason: self.reason,
        })
    }
}

/// `callTool`: a tool the engine declared, called by the model.
#[derive(Debug, Clone)]
pub struct ToolCallRequest {
    /// The session id.
    pub session_id: Arc<str>,
    /// The tool's name.
    pub tool_name: Arc<str>,
    /// Its arguments, as JSON text.
    pub arguments_json: Arc<str>,
    /// Host parameters.
    pub host: HostInputs,
}

impl ToolCallRequest {
    /// The ABI params for this request.
    pub fn with_abi<R>(
        &self,
        abort: &AbortSignal,
        project: impl FnOnce(HostParams<'_>) -> HostParams<'_>,
        f: impl FnOnce(&ToolCallParams<'_>) -> R,
    ) -> R {
        self.host.with_abi(abort, |host| {
            f(&ToolCallParams {
                session_id: RStr::from_str(&self.session_id),
                tool_name: RStr::from_str(&self.tool_name),
                arguments_json: RStr::from_str(&self.arguments_json),
                host: project(host),
            })
        })
    }
}

/// The conversation `check-engine` (`report::exercise`) calls every method over: messages of
/// a session that has no entries.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The session id.
    pub session_id: Arc<str>,
    /// The transcript file named to the engine.
    pub session_file: Arc<str>,
    /// The messages.
    pub messages: Arc<[Message]>,
    /// Their entry ids (none).
    pub entry_ids: Arc<[EntryId]>,
    /// Host parameters.
    pub host: HostInputs,
}

/// A request `check-engine` makes of a [`Conversation`], for each method of the table
/// (`engines::methods::for_each_engine_method`).
pub trait Exemplar: Sized {
    /// The request over `conversation`; `None` when it needs what a conversation does not
    /// give (a tool call) or has nothing to pass.
    fn exemplar(conversation: &Conversation) -> Option<Self>;
}

impl Exemplar for BootstrapRequest {
    fn exemplar(c: &Conversation) -> Option<Self> {
        Some(BootstrapRequest {
            session_id: Arc::clone(&c.session_id),
            session_file: Arc::clone(&c.session_file),
            host: c.host.clone(),
        })
    }
}

impl Exemplar for IngestRequest {
    fn exemplar(c: &Conversation) -> Option<Self> {
        (!c.messages.is_empty()).then(|| IngestRequest {
            session_id: Arc::clone(&c.session_id),
            messages: Arc::clone(&c.messages),
            entry_ids: Arc::clone(&c.entry_ids),
            index: 0,
            is_heartbeat: false,
            host: c.host.clone(),
        })
    }
}

impl Exemplar for IngestBatchRequest {
    fn exemplar(c: &Conversation) -> Option<Self> {
        Some(IngestBatchRequest {
            session_id: Arc::clone(&c.session_id),
            messages: Arc::clone(&c.messages),
            entry_ids: Arc::clone(&c.entry_ids),
            range: 0..c.messages.len(),
            is_heartbeat: false,
            host: c.host.clone(),
        })
    }
}

impl Exemplar for AssembleRequest {
    fn exemplar(c: &Conversation) -> Option<Self> {
        Some(AssembleRequest {
            session_id: Arc::clone(&c.session_id),
            messages: Arc::clone(&c.messages),
            entry_ids: Arc::clone(&c.entry_ids),
            token_budget: None,
            host: c.host.clone(),
        })
    }
}

impl Exemplar for AfterTurnRequest {
    fn exemplar(c: &Conversation) -> Option<Self> {
        Some(AfterTurnRequest {
            session_id: Arc::clone(&c.session_id),
            session_file: Arc::clone(&c.session_file),
            messages: Arc::clone(&c.messages),
            entry_ids: Arc::clone(&c.entry_ids),
            pre_prompt_message_count: c.messages.len().saturating_sub(1) as u64,
            auto_compaction_summary: None,
            is_heartbeat: false,
            token_budget: None,
            host: c.host.clone(),
        })
    }
}

impl Exemplar for MaintainRequest {
    fn exemplar(c: &Conversation) -> Option<Self> {
        Some(MaintainRequest {
            session_id: Arc::clone(&c.session_id),
            session_file: Arc::clone(&c.session_file),
            reason: MaintainReason::Turn,
            host: c.host.clone(),
        })
    }
}

impl Exemplar for CompactRequest {
    fn exemplar(c: &Conversation) -> Option<Self> {
        Some(CompactRequest::manual(
            Arc::clone(&c.session_id),
            Arc::clone(&c.session_file),
            Arc::clone(&c.messages),
            Arc::clone(&c.entry_ids),
            c.host.clone(),
        ))
    }
}

impl Exemplar for SubagentEndedRequest {
    fn exemplar(_: &Conversation) -> Option<Self> {
        Some(SubagentEndedRequest {
            child_session_key: Arc::from(EXEMPLAR_CHILD),
            reason: SubagentEndReason::Completed,
        })
    }
}

impl Exemplar for ToolCallRequest {
    fn exemplar(_: &Conversation) -> Option<Self> {
        None
    }
}

/// The child session key of `check-engine`'s subagent calls.
pub const EXEMPLAR_CHILD: &str = "check-engine:child";
