//! The parameters an engine method receives: borrowed views of the ABI parameters, made by the
//! export adapter without copying anything (`&str`, `&[Message]`, `Option<u64>`, plain enums).
//!
//! The per-method views are `#[non_exhaustive]` structs (a 1.x minor may add fields); the host
//! parameters, entry ids, tool names and runtime settings are opaque views read through
//! methods. Tests drive engines through [`crate::testing`], never by building these by hand.

use crate::abi::v1 as abi;
use crate::abi::v1::message::opt_text;
use crate::abi::v1::{ReasonCode, RuntimeMode, SelectionSource};
use crate::abi::{ROption, RStr};
use crate::{AbortSignal, CompactionTarget, EngineError, EntryId, Message};

fn opt_str<'a>(value: ROption<RStr<'a>>) -> Option<&'a str> {
    match value {
        ROption::RSome(s) => Some(s.as_str()),
        ROption::RNone => None,
    }
}

/// The session entry ids of a call's messages: `get(i)` is the entry of `messages[i]`.
#[derive(Clone, Copy, Debug)]
pub struct EntryIds<'a>(&'a [EntryId]);

impl<'a> EntryIds<'a> {
    /// Wraps the host's ids; a slice whose length differs from the messages' is ignored.
    pub(crate) fn new(ids: &'a [EntryId], message_count: usize) -> Self {
        EntryIds(if ids.len() == message_count { ids } else { &[] })
    }

    /// The entry of message `index`, when the host stores it as one.
    pub fn get(&self, index: usize) -> Option<&'a str> {
        self.0.get(index).and_then(EntryId::as_str)
    }

    /// The index of the message stored as entry `id`.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.0.iter().position(|e| e.as_str() == Some(id))
    }

    /// Whether the host passed no ids (messages that live in no session).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Tool names available this turn, sorted.
#[derive(Clone, Copy, Debug)]
pub struct ToolNames<'a>(&'a [RStr<'a>]);

impl<'a> ToolNames<'a> {
    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().map(|s| s.as_str())
    }

    /// Whether tool `name` is available.
    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.as_str() == name)
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `runtimeSettings` (schema version 1, §7): what the host says about the run this call
/// serves. Read through the accessors; [`RuntimeSettings::to_json`] gives the exact JSON.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeSettings<'a>(&'a abi::RuntimeSettings);

impl<'a> RuntimeSettings<'a> {
    /// The schema version (1).
    pub fn schema_version(&self) -> u32 {
        self.0.schema_version
    }
    /// `runtime.host`: the host's id.
    pub fn host(&self) -> &'a str {
        self.0.runtime.host.as_str()
    }
    /// `runtime.mode`.
    pub fn mode(&self) -> RuntimeMode {
        self.0.runtime.mode
    }
    /// `runtime.harnessId`.
    pub fn harness_id(&self) -> Option<&'a str> {
        opt_text(&self.0.runtime.harness_id)
    }
    /// `runtime.runtimeId`.
    pub fn runtime_id(&self) -> Option<&'a str> {
        opt_text(&self.0.runtime.runtime_id)
    }
    /// `model.requested`.
    pub fn requested_model(&self) -> Option<&'a str> {
        opt_text(&self.0.model.requested)
    }
    /// `model.resolved`.
    pub fn resolved_model(&self) -> Option<&'a str> {
        opt_text(&self.0.model.resolved)
    }
    /// `model.provider`.
    pub fn model_provider(&self) -> Option<&'a str> {
        opt_text(&self.0.model.provider)
    }
    /// `model.family`.
    pub fn model_family(&self) -> Option<&'a str> {
        opt_text(&self.0.model.family)
    }
    /// `contextEngineSelection.selectedId`.
    pub fn selected_engine_id(&self) -> Option<&'a str> {
        opt_text(&self.0.context_engine_selection.selected_id)
    }
    /// `contextEngineSelection.source`.
    pub fn selection_source(&self) -> SelectionSource {
        self.0.context_engine_selection.source
    }
    /// `executionHost.id`.
    pub fn execution_host_id(&self) -> Option<&'a str> {
        opt_text(&self.0.execution_host.id)
    }
    /// `executionHost.label`.
    pub fn execution_host_label(&self) -> Option<&'a str> {
        opt_text(&self.0.execution_host.label)
    }
    /// `limits.promptTokenBudget`.
    pub fn prompt_token_budget(&self) -> Option<u64> {
        self.0.limits.prompt_token_budget.into_option()
    }
    /// `limits.maxOutputTokens`.
    pub fn max_output_tokens(&self) -> Option<u64> {
        self.0.limits.max_output_tokens.into_option()
    }
    /// `diagnostics.fallbackReason`.
    pub fn fallback_reason(&self) -> Option<ReasonCode> {
        self.0.diagnostics.fallback_reason.into_option()
    }
    /// `diagnostics.degradedReason`.
    pub fn degraded_reason(&self) -> Option<ReasonCode> {
        self.0.diagnostics.degraded_reason.into_option()
    }
    /// The settings as the contract's JSON (nullable fields present as `null`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.0).unwrap_or(serde_json::Value::Null)
    }
}

/// Where a session lives (`sessionTarget`).
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct SessionTarget<'a> {
    /// The agent.
    pub agent_id: Option<&'a str>,
    /// The session id.
    pub session_id: Option<&'a str>,
    /// The session key.
    pub session_key: Option<&'a str>,
    /// The store the session lives in.
    pub store_path: Option<&'a str>,
    /// A thread id, as text.
    pub thread_id: Option<&'a str>,
}

/// `runtimeContext.promptCache`: what the host knows of the provider's prompt cache.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct PromptCache<'a> {
    /// The cache retention the host asked for (`short`, `long`, …).
    pub retention: Option<&'a str>,
    /// The usage the provider reported for the last model call.
    pub last_call_usage: Option<crate::Usage>,
    /// Whether the last call broke the cache.
    pub broke: Option<bool>,
    /// When the cache was last touched, ms since the Unix epoch.
    pub last_cache_touch_at: Option<i64>,
    /// When the cache is expected to expire, ms since the Unix epoch.
    pub expires_at: Option<i64>,
}

/// The host parameters of a call, after the host projected them onto the engine's
/// `acceptedHostParams` (§6.1): a parameter the engine did not accept reads `None`.
///
/// A view read through its methods: a call pays for the parameters it looks at, nothing else.
#[derive(Clone, Copy, Debug)]
pub struct HostParams<'a>(&'a abi::HostParams<'a>);

impl<'a> HostParams<'a> {
    /// The view of the ABI host parameters.
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::HostParams<'a>) -> Self {
        HostParams(raw)
    }

    /// `sessionKey`.
    pub fn session_key(&self) -> Option<&'a str> {
        opt_str(self.0.session_key)
    }

    /// `prompt` (assemble only): the user's prompt of this turn.
    pub fn prompt(&self) -> Option<&'a str> {
        opt_str(self.0.prompt)
    }

    /// `runtimeSettings` (§7).
    pub fn runtime_settings(&self) -> Option<RuntimeSettings<'a>> {
        self.0.runtime_settings.into_option().map(RuntimeSettings)
    }

    /// `sessionTarget`.
    pub fn session_target(&self) -> Option<SessionTarget<'a>> {
        self.0.session_target.into_option().map(|t| SessionTarget {
            agent_id: opt_str(t.agent_id),
            session_id: opt_str(t.session_id),
            session_key: opt_str(t.session_key),
            store_path: opt_str(t.store_path),
            thread_id: opt_str(t.thread_id),
        })
    }

    /// `runtimeContext`, as a JSON object text.
    pub fn runtime_context_json(&self) -> Option<&'a str> {
        opt_str(self.0.runtime_context_json)
    }

    /// `runtimeContext.promptCache`.
    pub fn prompt_cache(&self) -> Option<PromptCache<'a>> {
        self.0.prompt_cache.into_option().map(|c| PromptCache {
            retention: opt_str(c.retention),
            last_call_usage: c.last_call_usage.into_option(),
            broke: c.broke.into_option(),
            last_cache_touch_at: c.last_cache_touch_at.into_option(),
            expires_at: c.expires_at.into_option(),
        })
    }

    /// `abortSignal`: the call's abort signal, unless the host projected it away.
    pub fn abort_signal(&self) -> Option<&'a AbortSignal> {
        self.0.abort_signal.into_option()
    }

    /// Whether the call's abort signal fired (false without a signal).
    pub fn is_aborted(&self) -> bool {
        self.abort_signal().is_some_and(AbortSignal::is_aborted)
    }

    /// `Err(EngineError::Aborted)` once the abort signal fired: `params.host.check_abort()?`
    /// in long loops.
    ///
    /// # Errors
    /// When the signal fired.
    pub fn check_abort(&self) -> Result<(), EngineError> {
        match self.abort_signal() {
            Some(signal) => signal.check().map_err(EngineError::from_abi),
            None => Ok(()),
        }
    }
}

/// `ingest` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct IngestParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The message.
    pub message: &'a Message,
    /// The session entry the message is stored as, if any.
    pub entry_id: Option<&'a str>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostParams<'a>,
}

impl<'a> IngestParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::IngestParams<'a>) -> Self {
        IngestParams {
            session_id: raw.session_id.as_str(),
            message: raw.message,
            entry_id: raw.entry_id.as_str(),
            is_heartbeat: raw.is_heartbeat,
            host: HostParams::from_abi(&raw.host),
        }
    }
}

/// `ingestBatch` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct IngestBatchParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The turn's new messages.
    pub messages: &'a [Message],
    /// Their session entries.
    pub entry_ids: EntryIds<'a>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostParams<'a>,
}

impl<'a> IngestBatchParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::IngestBatchParams<'a>) -> Self {
        IngestBatchParams {
            session_id: raw.session_id.as_str(),
            messages: raw.messages.as_slice(),
            entry_ids: EntryIds::new(raw.entry_ids.as_slice(), raw.messages.len()),
            is_heartbeat: raw.is_heartbeat,
            host: HostParams::from_abi(&raw.host),
        }
    }
}

/// A model the context is for.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ModelRef<'a> {
    /// Provider, such as `openai`.
    pub provider: Option<&'a str>,
    /// Model id.
    pub id: &'a str,
    /// Its context window in tokens.
    pub context_window: Option<u64>,
}

/// `assemble` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AssembleParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The session's messages. The result refers to them by index.
    pub messages: &'a [Message],
    /// Their session entries.
    pub entry_ids: EntryIds<'a>,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// Tool names available this turn.
    pub available_tools: ToolNames<'a>,
    /// Citations mode, if the host has one.
    pub citations_mode: Option<&'a str>,
    /// The model.
    pub model: Option<ModelRef<'a>>,
    /// Host parameters (`prompt` lives here).
    pub host: HostParams<'a>,
}

impl<'a> AssembleParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::AssembleParams<'a>) -> Self {
        AssembleParams {
            session_id: raw.session_id.as_str(),
            messages: raw.messages.as_slice(),
            entry_ids: EntryIds::new(raw.entry_ids.as_slice(), raw.messages.len()),
            token_budget: raw.token_budget.into_option(),
            available_tools: ToolNames(raw.available_tools.as_slice()),
            citations_mode: opt_str(raw.citations_mode),
            model: raw.model.into_option().map(|m| ModelRef {
                provider: opt_str(m.provider),
                id: m.id.as_str(),
                context_window: m.context_window.into_option(),
            }),
            host: HostParams::from_abi(&raw.host),
        }
    }
}

/// `compact` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CompactParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The session's transcript file.
    pub session_file: &'a str,
    /// The agent.
    pub agent_id: Option<&'a str>,
    /// The session's current context (pincer's addition: no engine has to re-read the
    /// transcript to see it).
    pub messages: &'a [Message],
    /// Their session entries: a compaction names its first kept message by entry id.
    pub entry_ids: EntryIds<'a>,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// Compact even below the threshold.
    pub force: bool,
    /// `manual` or `preflight_required` when forced.
    pub force_reason: Option<&'a str>,
    /// The observed token count that triggered this compaction.
    pub current_token_count: Option<u64>,
    /// Budget or threshold.
    pub compaction_target: CompactionTarget,
    /// Extra instructions from `/compact <text>`.
    pub custom_instructions: Option<&'a str>,
    /// Host parameters; the abort signal is always the call's own for `compact`.
    pub host: HostParams<'a>,
    pub(crate) raw: &'a abi::CompactParams<'a>,
}

impl<'a> CompactParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::CompactParams<'a>) -> Self {
        CompactParams {
            session_id: raw.session_id.as_str(),
            session_file: raw.session_file.as_str(),
            agent_id: opt_str(raw.agent_id),
            messages: raw.messages.as_slice(),
            entry_ids: EntryIds::new(raw.entry_ids.as_slice(), raw.messages.len()),
            token_budget: raw.token_budget.into_option(),
            force: raw.force,
            force_reason: opt_str(raw.force_reason),
            current_token_count: raw.current_token_count.into_option(),
            compaction_target: raw.compaction_target,
            custom_instructions: opt_str(raw.custom_instructions),
            host: HostParams::from_abi(&raw.host),
            raw,
        }
    }
}

/// `bootstrap` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct BootstrapParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The session's transcript file.
    pub session_file: &'a str,
    /// Host parameters.
    pub host: HostParams<'a>,
}

impl<'a> BootstrapParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::BootstrapParams<'a>) -> Self {
        BootstrapParams {
            session_id: raw.session_id.as_str(),
            session_file: raw.session_file.as_str(),
            host: HostParams::from_abi(&raw.host),
        }
    }
}

/// Why `maintain` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintainReason<'a> {
    /// After `bootstrap`.
    Bootstrap,
    /// After a successful turn.
    Turn,
    /// A reason a later host passes.
    Other(&'a str),
}

/// `maintain` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct MaintainParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The session's transcript file.
    pub session_file: &'a str,
    /// Why.
    pub reason: MaintainReason<'a>,
    /// Host parameters.
    pub host: HostParams<'a>,
}

impl<'a> MaintainParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::MaintainParams<'a>) -> Self {
        MaintainParams {
            session_id: raw.session_id.as_str(),
            session_file: raw.session_file.as_str(),
            reason: match raw.reason.as_str() {
                "bootstrap" => MaintainReason::Bootstrap,
                "turn" => MaintainReason::Turn,
                other => MaintainReason::Other(other),
            },
            host: HostParams::from_abi(&raw.host),
        }
    }
}

/// `afterTurn` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AfterTurnParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The session's transcript file.
    pub session_file: &'a str,
    /// The whole message snapshot after the turn.
    pub messages: &'a [Message],
    /// Their session entries.
    pub entry_ids: EntryIds<'a>,
    /// How many of `messages` existed before the prompt; the rest are new this turn.
    pub pre_prompt_message_count: usize,
    /// The summary of an auto-compaction that ran during the turn.
    pub auto_compaction_summary: Option<&'a str>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// Host parameters.
    pub host: HostParams<'a>,
}

impl<'a> AfterTurnParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::AfterTurnParams<'a>) -> Self {
        let messages = raw.messages.as_slice();
        AfterTurnParams {
            session_id: raw.session_id.as_str(),
            session_file: raw.session_file.as_str(),
            messages,
            entry_ids: EntryIds::new(raw.entry_ids.as_slice(), messages.len()),
            pre_prompt_message_count: usize::try_from(raw.pre_prompt_message_count)
                .unwrap_or(usize::MAX)
                .min(messages.len()),
            auto_compaction_summary: opt_str(raw.auto_compaction_summary),
            is_heartbeat: raw.is_heartbeat,
            token_budget: raw.token_budget.into_option(),
            host: HostParams::from_abi(&raw.host),
        }
    }

    /// The messages this turn added (`messages[pre_prompt_message_count..]`).
    pub fn new_messages(&self) -> &'a [Message] {
        &self.messages[self.pre_prompt_message_count..]
    }
}

/// Where a durable turn's entry lies in the transcript (§8).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct TranscriptAnchor<'a> {
    /// The agent.
    pub agent_id: &'a str,
    /// The session id.
    pub session_id: &'a str,
    /// The session key.
    pub session_key: &'a str,
    /// The transcript store.
    pub store_path: &'a str,
    /// The store's generation.
    pub generation: u64,
    /// The entry's id.
    pub entry_id: &'a str,
    /// The entry's raw sequence number.
    pub raw_seq: u64,
    /// The entry's effective parent.
    pub effective_parent_id: Option<&'a str>,
    /// The position of the entry's message in the active context.
    pub active_message_position: u64,
    /// The idempotency key, if any.
    pub idempotency_key: Option<&'a str>,
}

impl<'a> TranscriptAnchor<'a> {
    fn from_abi(raw: &abi::TranscriptAnchor<'a>) -> Self {
        TranscriptAnchor {
            agent_id: raw.agent_id.as_str(),
            session_id: raw.session_id.as_str(),
            session_key: raw.session_key.as_str(),
            store_path: raw.store_path.as_str(),
            generation: raw.generation,
            entry_id: raw.entry_id.as_str(),
            raw_seq: raw.raw_seq,
            effective_parent_id: opt_str(raw.effective_parent_id),
            active_message_position: raw.active_message_position,
            idempotency_key: opt_str(raw.idempotency_key),
        }
    }
}

/// `commitTurn` parameters (§8).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CommitTurnParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The idempotency key: a second commit with the same key must answer `Duplicate`.
    pub advancement_key: &'a str,
    /// The logical turn id.
    pub logical_turn_id: &'a str,
    /// The admitted user entry that opened the turn.
    pub admission: TranscriptAnchor<'a>,
    /// The turn's last entry.
    pub terminal: TranscriptAnchor<'a>,
    /// The accepted turn's messages, inclusive.
    pub messages: &'a [Message],
    /// Their session entries.
    pub entry_ids: EntryIds<'a>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostParams<'a>,
}

impl<'a> CommitTurnParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::CommitTurnParams<'a>) -> Self {
        CommitTurnParams {
            session_id: raw.session_id.as_str(),
            advancement_key: raw.advancement_key.as_str(),
            logical_turn_id: raw.logical_turn_id.as_str(),
            admission: TranscriptAnchor::from_abi(&raw.admission),
            terminal: TranscriptAnchor::from_abi(&raw.terminal),
            messages: raw.messages.as_slice(),
            entry_ids: EntryIds::new(raw.entry_ids.as_slice(), raw.messages.len()),
            is_heartbeat: raw.is_heartbeat,
            host: HostParams::from_abi(&raw.host),
        }
    }
}

/// `prepareSubagentSpawn` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SubagentSpawnParams<'a> {
    /// The parent's session key.
    pub parent_session_key: &'a str,
    /// The child's session key.
    pub child_session_key: &'a str,
    /// Isolated or fork.
    pub context_mode: Option<crate::SubagentContextMode>,
    /// The parent's session id.
    pub parent_session_id: Option<&'a str>,
    /// The parent's transcript file.
    pub parent_session_file: Option<&'a str>,
    /// The child's session id.
    pub child_session_id: Option<&'a str>,
    /// The child's transcript file.
    pub child_session_file: Option<&'a str>,
    /// How long the child may live, in milliseconds.
    pub ttl_ms: Option<u64>,
}

impl<'a> SubagentSpawnParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::SubagentSpawnParams<'a>) -> Self {
        SubagentSpawnParams {
            parent_session_key: raw.parent_session_key.as_str(),
            child_session_key: raw.child_session_key.as_str(),
            context_mode: raw.context_mode.into_option(),
            parent_session_id: opt_str(raw.parent_session_id),
            parent_session_file: opt_str(raw.parent_session_file),
            child_session_id: opt_str(raw.child_session_id),
            child_session_file: opt_str(raw.child_session_file),
            ttl_ms: raw.ttl_ms.into_option(),
        }
    }
}

/// `onSubagentEnded` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SubagentEndedParams<'a> {
    /// The child's session key.
    pub child_session_key: &'a str,
    /// Why it ended.
    pub reason: crate::SubagentEndReason,
}

impl<'a> SubagentEndedParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::SubagentEndedParams<'a>) -> Self {
        SubagentEndedParams {
            child_session_key: raw.child_session_key.as_str(),
            reason: raw.reason,
        }
    }
}

/// `callTool` parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ToolCallParams<'a> {
    /// The session id.
    pub session_id: &'a str,
    /// The tool's name, one the engine declared in its info.
    pub tool_name: &'a str,
    /// The arguments, as JSON text.
    pub arguments_json: &'a str,
    /// Host parameters.
    pub host: HostParams<'a>,
}

impl<'a> ToolCallParams<'a> {
    /// The view of the ABI parameters (what the export adapter passes; hosts that link an
    /// engine statically use it too).
    #[doc(hidden)]
    pub fn from_abi(raw: &'a abi::ToolCallParams<'a>) -> Self {
        ToolCallParams {
            session_id: raw.session_id.as_str(),
            tool_name: raw.tool_name.as_str(),
            arguments_json: raw.arguments_json.as_str(),
            host: HostParams::from_abi(&raw.host),
        }
    }

    /// The arguments, deserialized into the tool's own type.
    ///
    /// # Errors
    /// [`ErrorKind::Failed`](crate::ErrorKind::Failed) naming what serde rejected.
    pub fn arguments<T: serde::de::DeserializeOwned>(&self) -> Result<T, EngineError> {
        serde_json::from_str(self.arguments_json).map_err(|err| {
            EngineError::failed(format!("arguments of tool \"{}\": {err}", self.tool_name))
        })
    }
}
