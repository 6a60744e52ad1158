//! Conversions between the ABI's borrowed parameters and results and the owned values of the
//! [worker protocol](super::protocol), for both sides.
//!
//! The host turns a call's parameters into a frame and a reply back into ABI results in its
//! own memory; the worker turns a frame into parameters borrowing from it and a result into a
//! reply. Anything the worker sends is parsed with errors (`Err(String)`): the worker runs a
//! stranger's code.
//!
//! The engine methods of the method table (`engines::methods`) cross as the wire forms here:
//! each method's params type has a [`WireForm`] (the payload of its `Call` variant), sent by
//! [`SendParams`] and served by [`ServeParams`]; each result type has one too ([`WireResult`],
//! the payload of its `CallReply` variant). This is the one file of the isolation layer that
//! knows the methods one by one.

use pincer_plugin_abi::latest::{
    AbortSignal, AfterTurnParams, AssembleParams, AssembleResult, AssembledItem, BootstrapParams,
    BootstrapResult, CompactParams, CompactResult, CompactionDetails, CompactionTarget,
    EngineError, EngineInfo, EntryId, FieldPair, HostOperation, HostParams, HostRequirement,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, LogLevel, LogRecord,
    MaintainParams, MaintainResult, Message, ModelRef, OptionalMethods, PromptAuthority,
    PromptCache, RuntimeSettings, SessionTarget, SubagentEndReason, SubagentEndedParams,
    ToolCallParams, ToolCallResult, ToolSpec, TranscriptSemantics, TurnMaintenanceMode, Usage,
};
use pincer_plugin_abi::{RBox, ROption, RSlice, RStr, RString, RVec};

use serde::{Deserialize, Serialize};

use super::protocol::{
    SyncedMessages, WholeMessages, WireAssembled, WireCompact, WireCompactResult, WireCompaction,
    WireError, WireErrorKind, WireForm, WireHost, WireInfo, WireItem, WireLog, WireModel,
    WirePromptCache, WireSessionTarget,
};

pub(crate) fn owned(value: RStr<'_>) -> String {
    value.as_str().to_owned()
}

pub(crate) fn owned_opt(value: ROption<RStr<'_>>) -> Option<String> {
    value.into_option().map(owned)
}

pub(crate) fn borrow_opt(value: &Option<String>) -> ROption<RStr<'_>> {
    match value {
        Some(s) => ROption::RSome(RStr::from_str(s)),
        None => ROption::RNone,
    }
}

fn rstring_opt(value: Option<String>) -> ROption<RString> {
    value.map(RString::from).into()
}

fn string_opt(value: &ROption<RString>) -> Option<String> {
    value.as_ref().into_option().map(|s| s.to_string())
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// A JSON array of `messages`.
pub(crate) fn messages_json(messages: &[Message]) -> String {
    serde_json::to_string(messages).unwrap_or_else(|_| "[]".to_owned())
}

/// Parses a JSON array of messages.
pub(crate) fn parse_messages(json: &str) -> Result<Vec<Message>, String> {
    serde_json::from_str(json).map_err(|e| format!("messages that do not parse: {e}"))
}

/// Parses one message.
pub(crate) fn parse_message(json: &str) -> Result<Message, String> {
    serde_json::from_str(json).map_err(|e| format!("a message that does not parse: {e}"))
}

/// Entry ids as the wire carries them.
pub(crate) fn wire_ids(ids: &[EntryId]) -> Vec<Option<String>> {
    ids.iter()
        .map(|id| id.as_str().map(str::to_owned))
        .collect()
}

/// Entry ids from the wire.
pub(crate) fn abi_ids(ids: Vec<Option<String>>) -> Vec<EntryId> {
    ids.into_iter().map(EntryId::from).collect()
}

/// Messages (and their ids) sent whole.
pub(crate) fn whole(messages: RSlice<'_, Message>, ids: RSlice<'_, EntryId>) -> WholeMessages {
    WholeMessages {
        json: messages_json(messages.as_slice()),
        ids: wire_ids(ids.as_slice()),
    }
}

// ---------------------------------------------------------------------------------------------
// Host parameters
// ---------------------------------------------------------------------------------------------

/// The host parameters of a call, owned.
pub(crate) fn wire_host(host: &HostParams<'_>) -> WireHost {
    WireHost {
        session_key: owned_opt(host.session_key),
        prompt: owned_opt(host.prompt),
        runtime_settings_json: host
            .runtime_settings
            .into_option()
            .and_then(|s| serde_json::to_string(s).ok()),
        session_target: host
            .session_target
            .into_option()
            .map(|t| WireSessionTarget {
                agent_id: owned_opt(t.agent_id),
                session_id: owned_opt(t.session_id),
                session_key: owned_opt(t.session_key),
                store_path: owned_opt(t.store_path),
                thread_id: owned_opt(t.thread_id),
            }),
        runtime_context_json: owned_opt(host.runtime_context_json),
        abortable: host.abort_signal.is_some(),
        prompt_cache: host.prompt_cache.into_option().map(|c| WirePromptCache {
            retention: owned_opt(c.retention),
            last_call_usage: c
                .last_call_usage
                .into_option()
                .and_then(|u| serde_json::to_string(&u).ok()),
            broke: c.broke.into_option(),
            last_cache_touch_at: c.last_cache_touch_at.into_option(),
            expires_at: c.expires_at.into_option(),
        }),
    }
}

/// Runs `f` with ABI host parameters borrowed from `wire`; `signal` is the lane's abort signal.
pub(crate) fn with_host<R>(
    wire: &WireHost,
    signal: &AbortSignal,
    f: impl FnOnce(HostParams<'_>) -> R,
) -> Result<R, String> {
    let settings: Option<RuntimeSettings> = match &wire.runtime_settings_json {
        Some(json) => {
            Some(serde_json::from_str(json).map_err(|e| format!("runtimeSettings: {e}"))?)
        }
        None => None,
    };
    let target = wire.session_target.as_ref().map(|t| SessionTarget {
        agent_id: borrow_opt(&t.agent_id),
        session_id: borrow_opt(&t.session_id),
        session_key: borrow_opt(&t.session_key),
        store_path: borrow_opt(&t.store_path),
        thread_id: borrow_opt(&t.thread_id),
    });
    let usage: Option<Usage> = match wire
        .prompt_cache
        .as_ref()
        .and_then(|c| c.last_call_usage.as_ref())
    {
        Some(json) => Some(serde_json::from_str(json).map_err(|e| format!("usage: {e}"))?),
        None => None,
    };
    let cache = wire.prompt_cache.as_ref().map(|c| PromptCache {
        retention: borrow_opt(&c.retention),
        last_call_usage: usage.into(),
        broke: c.broke.into(),
        last_cache_touch_at: c.last_cache_touch_at.into(),
        expires_at: c.expires_at.into(),
    });
    Ok(f(HostParams {
        session_key: borrow_opt(&wire.session_key),
        prompt: borrow_opt(&wire.prompt),
        runtime_settings: settings.as_ref().into(),
        session_target: target.as_ref().into(),
        runtime_context_json: borrow_opt(&wire.runtime_context_json),
        abort_signal: if wire.abortable {
            ROption::RSome(signal)
        } else {
            ROption::RNone
        },
        prompt_cache: cache.as_ref().into(),
    }))
}

// ---------------------------------------------------------------------------------------------
// compact
// ---------------------------------------------------------------------------------------------

/// `compact`'s parameters but the messages, owned.
pub(crate) fn wire_compact(params: &CompactParams<'_>) -> WireCompact {
    WireCompact {
        session_id: owned(params.session_id),
        session_file: owned(params.session_file),
        agent_id: owned_opt(params.agent_id),
        token_budget: params.token_budget.into_option(),
        force: params.force,
        force_reason: owned_opt(params.force_reason),
        current_token_count: params.current_token_count.into_option(),
        threshold_target: params.compaction_target == CompactionTarget::Threshold,
        custom_instructions: owned_opt(params.custom_instructions),
        host: wire_host(&params.host),
    }
}

/// Runs `f` with `compact`'s parameters borrowed from `wire` and the messages.
pub(crate) fn with_compact<R>(
    wire: &WireCompact,
    messages: &[Message],
    ids: &[EntryId],
    signal: &AbortSignal,
    f: impl FnOnce(&CompactParams<'_>) -> R,
) -> Result<R, String> {
    with_host(&wire.host, signal, |host| {
        f(&CompactParams {
            session_id: RStr::from_str(&wire.session_id),
            session_file: RStr::from_str(&wire.session_file),
            agent_id: borrow_opt(&wire.agent_id),
            messages: RSlice::from_slice(messages),
            entry_ids: RSlice::from_slice(ids),
            token_budget: wire.token_budget.into(),
            force: wire.force,
            force_reason: borrow_opt(&wire.force_reason),
            current_token_count: wire.current_token_count.into(),
            compaction_target: if wire.threshold_target {
                CompactionTarget::Threshold
            } else {
                CompactionTarget::Budget
            },
            custom_instructions: borrow_opt(&wire.custom_instructions),
            host,
        })
    })
}

/// `compact`'s result, owned.
pub(crate) fn wire_compact_result(result: &CompactResult) -> WireCompactResult {
    WireCompactResult {
        ok: result.ok,
        compacted: result.compacted,
        reason: string_opt(&result.reason),
        details: result
            .result
            .as_ref()
            .into_option()
            .map(|d| WireCompaction {
                summary: string_opt(&d.summary),
                first_kept_entry_id: string_opt(&d.first_kept_entry_id),
                tokens_before: d.tokens_before,
                tokens_after: d.tokens_after.into_option(),
                details_json: string_opt(&d.details_json),
                session_id: string_opt(&d.session_id),
                session_file: string_opt(&d.session_file),
            }),
    }
}

/// `compact`'s result in host memory.
pub(crate) fn compact_result(wire: WireCompactResult) -> CompactResult {
    CompactResult {
        ok: wire.ok,
        compacted: wire.compacted,
        reason: rstring_opt(wire.reason),
        result: wire
            .details
            .map(|d| CompactionDetails {
                summary: rstring_opt(d.summary),
                first_kept_entry_id: rstring_opt(d.first_kept_entry_id),
                tokens_before: d.tokens_before,
                tokens_after: d.tokens_after.into(),
                details_json: rstring_opt(d.details_json),
                session_id: rstring_opt(d.session_id),
                session_file: rstring_opt(d.session_file),
            })
            .into(),
    }
}

// ---------------------------------------------------------------------------------------------
// assemble
// ---------------------------------------------------------------------------------------------

/// `assemble`'s result, owned.
pub(crate) fn wire_assembled(result: &AssembleResult) -> WireAssembled {
    WireAssembled {
        items: result
            .items
            .iter()
            .map(|item| match item {
                AssembledItem::Input { start, end } => WireItem::Input(*start, *end),
                AssembledItem::New(message) => WireItem::New(
                    serde_json::to_string(&**message).unwrap_or_else(|_| "null".to_owned()),
                ),
            })
            .collect(),
        estimated_tokens: result.estimated_tokens.into_option(),
        system_prompt_addition: string_opt(&result.system_prompt_addition),
        may_overflow: result.prompt_authority == PromptAuthority::PreassemblyMayOverflow,
    }
}

/// `assemble`'s result in host memory (the instance checks its indices next).
pub(crate) fn assembled(wire: WireAssembled) -> Result<AssembleResult, String> {
    let mut items = RVec::with_capacity(wire.items.len());
    for item in wire.items {
        items.push(match item {
            WireItem::Input(start, end) => AssembledItem::Input { start, end },
            WireItem::New(json) => AssembledItem::New(RBox::new(parse_message(&json)?)),
        });
    }
    Ok(AssembleResult {
        items,
        estimated_tokens: wire.estimated_tokens.into(),
        system_prompt_addition: rstring_opt(wire.system_prompt_addition),
        prompt_authority: if wire.may_overflow {
            PromptAuthority::PreassemblyMayOverflow
        } else {
            PromptAuthority::Assembled
        },
    })
}

// ---------------------------------------------------------------------------------------------
// info, errors, logs
// ---------------------------------------------------------------------------------------------

/// The engine's `info`, owned.
pub(crate) fn wire_info(info: &EngineInfo) -> WireInfo {
    WireInfo {
        id: info.id.to_string(),
        name: info.name.to_string(),
        version: info.version.to_string(),
        owns_compaction: info.owns_compaction,
        background_maintenance: info.turn_maintenance_mode == TurnMaintenanceMode::Background,
        host_requirements: info
            .host_requirements
            .iter()
            .map(|r| {
                (
                    r.operation.as_str().to_owned(),
                    r.required_capabilities
                        .iter()
                        .map(|c| c.to_string())
                        .collect(),
                    string_opt(&r.unsupported_message),
                )
            })
            .collect(),
        accepted_host_params: info
            .accepted_host_params
            .as_ref()
            .into_option()
            .map(|v| v.iter().map(|s| s.to_string()).collect()),
        tools: info
            .tools
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    t.description.to_string(),
                    t.parameters_schema_json.to_string(),
                )
            })
            .collect(),
        optional_methods: info.optional_methods.0,
        current_turn_fence: string_opt(&info.transcript_semantics.current_turn_fence),
        turn_advancement_idempotency: string_opt(
            &info.transcript_semantics.turn_advancement_idempotency,
        ),
    }
}

/// The engine's `info` in host memory.
pub(crate) fn info(wire: WireInfo) -> Result<EngineInfo, String> {
    let mut host_requirements = RVec::new();
    for (operation, capabilities, message) in wire.host_requirements {
        host_requirements.push(HostRequirement {
            operation: HostOperation::parse(&operation)
                .ok_or_else(|| format!("an unknown host operation \"{operation}\""))?,
            required_capabilities: capabilities.into_iter().map(RString::from).collect(),
            unsupported_message: rstring_opt(message),
        });
    }
    Ok(EngineInfo {
        id: wire.id.into(),
        name: wire.name.into(),
        version: wire.version.into(),
        owns_compaction: wire.owns_compaction,
        turn_maintenance_mode: if wire.background_maintenance {
            TurnMaintenanceMode::Background
        } else {
            TurnMaintenanceMode::Foreground
        },
        host_requirements,
        accepted_host_params: wire
            .accepted_host_params
            .map(|v| v.into_iter().map(RString::from).collect())
            .into(),
        tools: wire
            .tools
            .into_iter()
            .map(|(name, description, schema)| ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters_schema_json: schema.into(),
            })
            .collect(),
        optional_methods: OptionalMethods(wire.optional_methods),
        transcript_semantics: TranscriptSemantics {
            current_turn_fence: rstring_opt(wire.current_turn_fence),
            turn_advancement_idempotency: rstring_opt(wire.turn_advancement_idempotency),
        },
    })
}

/// An engine error, owned.
pub(crate) fn wire_error(error: &EngineError) -> WireError {
    let kind = match error {
        EngineError::Failed(_) => WireErrorKind::Failed,
        EngineError::Panicked(_) => WireErrorKind::Panicked,
        EngineError::Aborted(_) => WireErrorKind::Aborted,
        EngineError::NotImplemented(_) => WireErrorKind::NotImplemented,
        EngineError::InvalidConfig(_) => WireErrorKind::InvalidConfig,
    };
    WireError {
        kind,
        // Its bytes, made UTF-8: a frame carries only UTF-8 text.
        message: crate::engines::checked::error_text(error).into_owned(),
    }
}

/// An engine error in host memory.
pub(crate) fn engine_error(wire: WireError) -> EngineError {
    let message = RString::from(wire.message);
    match wire.kind {
        WireErrorKind::Failed => EngineError::Failed(message),
        WireErrorKind::Panicked => EngineError::Panicked(message),
        WireErrorKind::Aborted => EngineError::Aborted(message),
        WireErrorKind::NotImplemented => EngineError::NotImplemented(message),
        WireErrorKind::InvalidConfig => EngineError::InvalidConfig(message),
    }
}

/// A failure of the worker itself, as the engine error an engine would see.
pub(crate) fn worker_failure(message: impl Into<String>) -> WireError {
    WireError {
        kind: WireErrorKind::Failed,
        message: message.into(),
    }
}

/// A log event, owned.
pub(crate) fn wire_log(record: &LogRecord<'_>) -> WireLog {
    // The engine's bytes, made UTF-8: a frame carries only UTF-8 text.
    let text = |s: RStr<'_>| crate::engines::checked::lossy(s.as_str().as_bytes()).into_owned();
    WireLog {
        level: record.level as u8,
        target: text(record.target),
        message: text(record.message),
        fields: record
            .fields
            .iter()
            .map(|f| (text(f.name), text(f.value)))
            .collect(),
        file: record.file.into_option().map(text),
        line: record.line.into_option(),
    }
}

/// A log level from its number (an unknown one is `Trace`, the least loud).
pub(crate) fn log_level(level: u8) -> LogLevel {
    match level {
        1 => LogLevel::Error,
        2 => LogLevel::Warn,
        3 => LogLevel::Info,
        4 => LogLevel::Debug,
        _ => LogLevel::Trace,
    }
}

/// Runs `f` with a log record borrowed from `wire`.
pub(crate) fn with_log<R>(wire: &WireLog, f: impl FnOnce(&LogRecord<'_>) -> R) -> R {
    let fields: Vec<FieldPair<'_>> = wire
        .fields
        .iter()
        .map(|(name, value)| FieldPair {
            name: RStr::from_str(name),
            value: RStr::from_str(value),
        })
        .collect();
    f(&LogRecord {
        level: log_level(wire.level),
        target: RStr::from_str(&wire.target),
        message: RStr::from_str(&wire.message),
        fields: RSlice::from_slice(&fields),
        file: borrow_opt(&wire.file),
        line: wire.line.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_parameters_and_results_survive_the_wire() {
        let signal = AbortSignal::never();
        let usage = Usage {
            input: 3,
            output: 4,
            ..Usage::default()
        };
        let cache = PromptCache {
            retention: ROption::RSome(RStr::from_str("long")),
            last_call_usage: ROption::RSome(usage),
            broke: ROption::RSome(true),
            last_cache_touch_at: ROption::RSome(5),
            expires_at: ROption::RNone,
        };
        let host = HostParams {
            session_key: ROption::RSome(RStr::from_str("agent:main")),
            prompt: ROption::RSome(RStr::from_str("hi")),
            abort_signal: ROption::RSome(signal),
            prompt_cache: ROption::RSome(&cache),
            ..HostParams::default()
        };
        let wire = wire_host(&host);
        with_host(&wire, signal, |back| {
            assert_eq!(back.session_key.unwrap().as_str(), "agent:main");
            assert_eq!(back.prompt.unwrap().as_str(), "hi");
            assert!(back.abort_signal.is_some());
            let cache = back.prompt_cache.unwrap();
            assert_eq!(cache.last_call_usage.unwrap(), usage);
            assert_eq!(cache.broke.into_option(), Some(true));
        })
        .unwrap();

        let result = AssembleResult {
            items: vec![
                AssembledItem::Input { start: 0, end: 2 },
                AssembledItem::New(RBox::new(Message::user("summary"))),
            ]
            .into(),
            estimated_tokens: ROption::RSome(7),
            system_prompt_addition: ROption::RSome("add".into()),
            prompt_authority: PromptAuthority::PreassemblyMayOverflow,
        };
        assert_eq!(assembled(wire_assembled(&result)).unwrap(), result);
        let bad = WireAssembled {
            items: vec![WireItem::New("{not json".into())],
            estimated_tokens: None,
            system_prompt_addition: None,
            may_overflow: false,
        };
        assert!(assembled(bad).unwrap_err().contains("does not parse"));
    }
}

// ---------------------------------------------------------------------------------------------
// Engine calls: the per-method wire forms the method table's `Call` / `CallReply` variants
// carry (`protocol::WireForm`), and their conversions on both sides
// ---------------------------------------------------------------------------------------------

/// Where the worker keeps a session's messages between calls.
pub(crate) trait HeldMessages {
    /// Runs `f` with the messages (and ids) `synced` leaves held.
    ///
    /// # Errors
    /// When `synced` does not apply to what is held.
    fn with_synced<R>(
        &self,
        synced: SyncedMessages,
        f: impl FnOnce(&[Message], &[EntryId]) -> R,
    ) -> Result<R, String>;
}

/// An engine method's ABI parameters as the host sends them.
pub(crate) trait SendParams: WireForm {
    /// The session, messages and ids the call syncs with the worker's copy (`None`: the call
    /// carries all it passes).
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])>;
    /// The wire form; `messages` are the synced messages when [`SendParams::synced`] named
    /// some (else the default, unused).
    fn to_wire(&self, messages: SyncedMessages) -> Self::Wire;
}

/// An engine method's wire parameters as the worker serves them.
pub(crate) trait ServeParams: Sized {
    /// The ABI parameters.
    type Abi<'a>;
    /// Runs `f` with the ABI parameters borrowed from `self` (and the held messages);
    /// `signal` is the lane's abort signal.
    ///
    /// # Errors
    /// When the wire form does not decode.
    fn serve<R>(
        self,
        held: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&Self::Abi<'_>) -> R,
    ) -> Result<R, String>;
}

/// An engine method's result, both ways.
pub(crate) trait WireResult: WireForm + Sized {
    /// The worker's reply.
    fn to_wire(&self) -> Self::Wire;
    /// The result in host memory.
    ///
    /// # Errors
    /// When the worker's reply does not decode.
    fn from_wire(wire: Self::Wire) -> Result<Self, String>;
}

/// Messages sent whole, parsed.
pub(crate) fn whole_messages(
    messages: WholeMessages,
) -> Result<(Vec<Message>, Vec<EntryId>), String> {
    let parsed = parse_messages(&messages.json)?;
    let ids = abi_ids(messages.ids);
    if !ids.is_empty() && ids.len() != parsed.len() {
        return Err("entry ids that do not match the messages".into());
    }
    Ok((parsed, ids))
}

/// `ingest`'s parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireIngest {
    /// `sessionId`.
    pub session_id: String,
    /// The message, JSON.
    pub message_json: String,
    /// Its entry id.
    pub entry_id: Option<String>,
    /// `isHeartbeat`.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: WireHost,
}

impl WireForm for IngestParams<'_> {
    type Wire = WireIngest;
}

impl SendParams for IngestParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        None
    }
    fn to_wire(&self, _: SyncedMessages) -> WireIngest {
        WireIngest {
            session_id: owned(self.session_id),
            message_json: serde_json::to_string(self.message).unwrap_or_default(),
            entry_id: self.entry_id.as_str().map(str::to_owned),
            is_heartbeat: self.is_heartbeat,
            host: wire_host(&self.host),
        }
    }
}

impl ServeParams for WireIngest {
    type Abi<'a> = IngestParams<'a>;
    fn serve<R>(
        self,
        _: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&IngestParams<'_>) -> R,
    ) -> Result<R, String> {
        let message = parse_message(&self.message_json)?;
        let entry_id = EntryId::from(self.entry_id);
        with_host(&self.host, signal, |host| {
            f(&IngestParams {
                session_id: RStr::from_str(&self.session_id),
                message: &message,
                entry_id: &entry_id,
                is_heartbeat: self.is_heartbeat,
                host,
            })
        })
    }
}

impl WireForm for IngestResult {
    type Wire = bool;
}

impl WireResult for IngestResult {
    fn to_wire(&self) -> bool {
        self.ingested
    }
    fn from_wire(ingested: bool) -> Result<Self, String> {
        Ok(IngestResult { ingested })
    }
}

/// `ingestBatch`'s parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireIngestBatch {
    /// `sessionId`.
    pub session_id: String,
    /// The messages.
    pub messages: WholeMessages,
    /// `isHeartbeat`.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: WireHost,
}

impl WireForm for IngestBatchParams<'_> {
    type Wire = WireIngestBatch;
}

impl SendParams for IngestBatchParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        None
    }
    fn to_wire(&self, _: SyncedMessages) -> WireIngestBatch {
        WireIngestBatch {
            session_id: owned(self.session_id),
            messages: whole(self.messages, self.entry_ids),
            is_heartbeat: self.is_heartbeat,
            host: wire_host(&self.host),
        }
    }
}

impl ServeParams for WireIngestBatch {
    type Abi<'a> = IngestBatchParams<'a>;
    fn serve<R>(
        self,
        _: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&IngestBatchParams<'_>) -> R,
    ) -> Result<R, String> {
        let (messages, ids) = whole_messages(self.messages)?;
        with_host(&self.host, signal, |host| {
            f(&IngestBatchParams {
                session_id: RStr::from_str(&self.session_id),
                messages: RSlice::from_slice(&messages),
                entry_ids: RSlice::from_slice(&ids),
                is_heartbeat: self.is_heartbeat,
                host,
            })
        })
    }
}

impl WireForm for IngestBatchResult {
    type Wire = u64;
}

impl WireResult for IngestBatchResult {
    fn to_wire(&self) -> u64 {
        self.ingested_count
    }
    fn from_wire(ingested_count: u64) -> Result<Self, String> {
        Ok(IngestBatchResult { ingested_count })
    }
}

/// `assemble`'s parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireAssemble {
    /// `sessionId`.
    pub session_id: String,
    /// The messages.
    pub messages: SyncedMessages,
    /// `tokenBudget`.
    pub token_budget: Option<u64>,
    /// `availableTools`.
    pub available_tools: Vec<String>,
    /// `citationsMode`.
    pub citations_mode: Option<String>,
    /// `model`.
    pub model: Option<WireModel>,
    /// Host parameters.
    pub host: WireHost,
}

impl WireForm for AssembleParams<'_> {
    type Wire = WireAssemble;
}

impl SendParams for AssembleParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        Some((
            self.session_id.as_str(),
            self.messages.as_slice(),
            self.entry_ids.as_slice(),
        ))
    }
    fn to_wire(&self, messages: SyncedMessages) -> WireAssemble {
        WireAssemble {
            session_id: owned(self.session_id),
            messages,
            token_budget: self.token_budget.into_option(),
            available_tools: self
                .available_tools
                .iter()
                .map(|t| t.as_str().to_owned())
                .collect(),
            citations_mode: owned_opt(self.citations_mode),
            model: self.model.into_option().map(|m| WireModel {
                provider: owned_opt(m.provider),
                id: owned(m.id),
                context_window: m.context_window.into_option(),
            }),
            host: wire_host(&self.host),
        }
    }
}

impl ServeParams for WireAssemble {
    type Abi<'a> = AssembleParams<'a>;
    fn serve<R>(
        self,
        held: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&AssembleParams<'_>) -> R,
    ) -> Result<R, String> {
        let tools: Vec<RStr<'_>> = self
            .available_tools
            .iter()
            .map(|t| RStr::from_str(t))
            .collect();
        let model = self.model.as_ref().map(|m| ModelRef {
            provider: borrow_opt(&m.provider),
            id: RStr::from_str(&m.id),
            context_window: m.context_window.into(),
        });
        held.with_synced(self.messages, |messages, ids| {
            with_host(&self.host, signal, |host| {
                f(&AssembleParams {
                    session_id: RStr::from_str(&self.session_id),
                    messages: RSlice::from_slice(messages),
                    entry_ids: RSlice::from_slice(ids),
                    token_budget: self.token_budget.into(),
                    available_tools: RSlice::from_slice(&tools),
                    citations_mode: borrow_opt(&self.citations_mode),
                    model: model.into(),
                    host,
                })
            })
        })?
    }
}

impl WireForm for AssembleResult {
    type Wire = WireAssembled;
}

impl WireResult for AssembleResult {
    fn to_wire(&self) -> WireAssembled {
        wire_assembled(self)
    }
    fn from_wire(wire: WireAssembled) -> Result<Self, String> {
        assembled(wire)
    }
}

/// `compact`'s parameters and messages.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireCompactCall {
    /// The parameters.
    pub params: Box<WireCompact>,
    /// The messages.
    pub messages: SyncedMessages,
}

impl WireForm for CompactParams<'_> {
    type Wire = WireCompactCall;
}

impl SendParams for CompactParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        Some((
            self.session_id.as_str(),
            self.messages.as_slice(),
            self.entry_ids.as_slice(),
        ))
    }
    fn to_wire(&self, messages: SyncedMessages) -> WireCompactCall {
        WireCompactCall {
            params: Box::new(wire_compact(self)),
            messages,
        }
    }
}

impl ServeParams for WireCompactCall {
    type Abi<'a> = CompactParams<'a>;
    fn serve<R>(
        self,
        held: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&CompactParams<'_>) -> R,
    ) -> Result<R, String> {
        held.with_synced(self.messages, |messages, ids| {
            with_compact(&self.params, messages, ids, signal, f)
        })?
    }
}

impl WireForm for CompactResult {
    type Wire = WireCompactResult;
}

impl WireResult for CompactResult {
    fn to_wire(&self) -> WireCompactResult {
        wire_compact_result(self)
    }
    fn from_wire(wire: WireCompactResult) -> Result<Self, String> {
        Ok(compact_result(wire))
    }
}

/// `bootstrap`'s parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireBootstrap {
    /// `sessionId`.
    pub session_id: String,
    /// `sessionFile`.
    pub session_file: String,
    /// Host parameters.
    pub host: WireHost,
}

impl WireForm for BootstrapParams<'_> {
    type Wire = WireBootstrap;
}

impl SendParams for BootstrapParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        None
    }
    fn to_wire(&self, _: SyncedMessages) -> WireBootstrap {
        WireBootstrap {
            session_id: owned(self.session_id),
            session_file: owned(self.session_file),
            host: wire_host(&self.host),
        }
    }
}

impl ServeParams for WireBootstrap {
    type Abi<'a> = BootstrapParams<'a>;
    fn serve<R>(
        self,
        _: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&BootstrapParams<'_>) -> R,
    ) -> Result<R, String> {
        with_host(&self.host, signal, |host| {
            f(&BootstrapParams {
                session_id: RStr::from_str(&self.session_id),
                session_file: RStr::from_str(&self.session_file),
                host,
            })
        })
    }
}

impl WireForm for BootstrapResult {
    /// `bootstrapped`, `importedMessages`, `reason`.
    type Wire = (bool, Option<u64>, Option<String>);
}

impl WireResult for BootstrapResult {
    fn to_wire(&self) -> (bool, Option<u64>, Option<String>) {
        (
            self.bootstrapped,
            self.imported_messages.into_option(),
            string_opt(&self.reason),
        )
    }
    fn from_wire((bootstrapped, imported, reason): Self::Wire) -> Result<Self, String> {
        Ok(BootstrapResult {
            bootstrapped,
            imported_messages: imported.into(),
            reason: rstring_opt(reason),
        })
    }
}

/// `afterTurn`'s parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireAfterTurn {
    /// `sessionId`.
    pub session_id: String,
    /// `sessionFile`.
    pub session_file: String,
    /// The messages.
    pub messages: SyncedMessages,
    /// `prePromptMessageCount`.
    pub pre_prompt_message_count: u64,
    /// `autoCompactionSummary`.
    pub auto_compaction_summary: Option<String>,
    /// `isHeartbeat`.
    pub is_heartbeat: bool,
    /// `tokenBudget`.
    pub token_budget: Option<u64>,
    /// Host parameters.
    pub host: WireHost,
}

impl WireForm for AfterTurnParams<'_> {
    type Wire = WireAfterTurn;
}

impl SendParams for AfterTurnParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        Some((
            self.session_id.as_str(),
            self.messages.as_slice(),
            self.entry_ids.as_slice(),
        ))
    }
    fn to_wire(&self, messages: SyncedMessages) -> WireAfterTurn {
        WireAfterTurn {
            session_id: owned(self.session_id),
            session_file: owned(self.session_file),
            messages,
            pre_prompt_message_count: self.pre_prompt_message_count,
            auto_compaction_summary: owned_opt(self.auto_compaction_summary),
            is_heartbeat: self.is_heartbeat,
            token_budget: self.token_budget.into_option(),
            host: wire_host(&self.host),
        }
    }
}

impl ServeParams for WireAfterTurn {
    type Abi<'a> = AfterTurnParams<'a>;
    fn serve<R>(
        self,
        held: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&AfterTurnParams<'_>) -> R,
    ) -> Result<R, String> {
        held.with_synced(self.messages, |messages, ids| {
            with_host(&self.host, signal, |host| {
                f(&AfterTurnParams {
                    session_id: RStr::from_str(&self.session_id),
                    session_file: RStr::from_str(&self.session_file),
                    messages: RSlice::from_slice(messages),
                    entry_ids: RSlice::from_slice(ids),
                    pre_prompt_message_count: self.pre_prompt_message_count,
                    auto_compaction_summary: borrow_opt(&self.auto_compaction_summary),
                    is_heartbeat: self.is_heartbeat,
                    token_budget: self.token_budget.into(),
                    host,
                })
            })
        })?
    }
}

impl WireForm for () {
    type Wire = ();
}

impl WireResult for () {
    fn to_wire(&self) {}
    fn from_wire((): ()) -> Result<Self, String> {
        Ok(())
    }
}

/// `maintain`'s parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireMaintain {
    /// `sessionId`.
    pub session_id: String,
    /// `sessionFile`.
    pub session_file: String,
    /// `reason`.
    pub reason: String,
    /// Host parameters.
    pub host: WireHost,
}

impl WireForm for MaintainParams<'_> {
    type Wire = WireMaintain;
}

impl SendParams for MaintainParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        None
    }
    fn to_wire(&self, _: SyncedMessages) -> WireMaintain {
        WireMaintain {
            session_id: owned(self.session_id),
            session_file: owned(self.session_file),
            reason: owned(self.reason),
            host: wire_host(&self.host),
        }
    }
}

impl ServeParams for WireMaintain {
    type Abi<'a> = MaintainParams<'a>;
    fn serve<R>(
        self,
        _: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&MaintainParams<'_>) -> R,
    ) -> Result<R, String> {
        with_host(&self.host, signal, |host| {
            f(&MaintainParams {
                session_id: RStr::from_str(&self.session_id),
                session_file: RStr::from_str(&self.session_file),
                reason: RStr::from_str(&self.reason),
                host,
            })
        })
    }
}

impl WireForm for MaintainResult {
    /// `changed`, `bytesFreed`, `rewrittenEntries`, `reason`.
    type Wire = (bool, u64, u64, Option<String>);
}

impl WireResult for MaintainResult {
    fn to_wire(&self) -> (bool, u64, u64, Option<String>) {
        (
            self.changed,
            self.bytes_freed,
            self.rewritten_entries,
            string_opt(&self.reason),
        )
    }
    fn from_wire(
        (changed, bytes_freed, rewritten_entries, reason): Self::Wire,
    ) -> Result<Self, String> {
        Ok(MaintainResult {
            changed,
            bytes_freed,
            rewritten_entries,
            reason: rstring_opt(reason),
        })
    }
}

/// The tool call's parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireToolCall {
    /// `sessionId`.
    pub session_id: String,
    /// The tool.
    pub tool_name: String,
    /// Its arguments, JSON.
    pub arguments_json: String,
    /// Host parameters.
    pub host: WireHost,
}

impl WireForm for ToolCallParams<'_> {
    type Wire = WireToolCall;
}

impl SendParams for ToolCallParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        None
    }
    fn to_wire(&self, _: SyncedMessages) -> WireToolCall {
        WireToolCall {
            session_id: owned(self.session_id),
            tool_name: owned(self.tool_name),
            arguments_json: owned(self.arguments_json),
            host: wire_host(&self.host),
        }
    }
}

impl ServeParams for WireToolCall {
    type Abi<'a> = ToolCallParams<'a>;
    fn serve<R>(
        self,
        _: &impl HeldMessages,
        signal: &AbortSignal,
        f: impl FnOnce(&ToolCallParams<'_>) -> R,
    ) -> Result<R, String> {
        with_host(&self.host, signal, |host| {
            f(&ToolCallParams {
                session_id: RStr::from_str(&self.session_id),
                tool_name: RStr::from_str(&self.tool_name),
                arguments_json: RStr::from_str(&self.arguments_json),
                host,
            })
        })
    }
}

impl WireForm for ToolCallResult {
    /// `content`, `isError`.
    type Wire = (String, bool);
}

impl WireResult for ToolCallResult {
    fn to_wire(&self) -> (String, bool) {
        (self.content.to_string(), self.is_error)
    }
    fn from_wire((content, is_error): (String, bool)) -> Result<Self, String> {
        Ok(ToolCallResult {
            content: content.into(),
            is_error,
        })
    }
}

/// The ended subagent's parameters.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireSubagentEnded {
    /// `childSessionKey`.
    pub child_session_key: String,
    /// `SubagentEndReason as u8`.
    pub reason: u8,
}

impl WireForm for SubagentEndedParams<'_> {
    type Wire = WireSubagentEnded;
}

impl SendParams for SubagentEndedParams<'_> {
    fn synced(&self) -> Option<(&str, &[Message], &[EntryId])> {
        None
    }
    fn to_wire(&self, _: SyncedMessages) -> WireSubagentEnded {
        WireSubagentEnded {
            child_session_key: owned(self.child_session_key),
            reason: self.reason as u8,
        }
    }
}

impl ServeParams for WireSubagentEnded {
    type Abi<'a> = SubagentEndedParams<'a>;
    fn serve<R>(
        self,
        _: &impl HeldMessages,
        _: &AbortSignal,
        f: impl FnOnce(&SubagentEndedParams<'_>) -> R,
    ) -> Result<R, String> {
        let reason = match self.reason {
            0 => SubagentEndReason::Deleted,
            1 => SubagentEndReason::Completed,
            2 => SubagentEndReason::Swept,
            _ => SubagentEndReason::Released,
        };
        Ok(f(&SubagentEndedParams {
            child_session_key: RStr::from_str(&self.child_session_key),
            reason,
        }))
    }
}
