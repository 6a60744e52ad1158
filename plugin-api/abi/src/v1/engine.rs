//! The engine contract, version 1: what an engine declares ([`EngineInfo`]), the parameters
//! and results of every method (docs/CONTRACT.md §1), the error type, the abort signal, and the two
//! FFI-safe trait objects that cross the boundary: the engine ([`EngineAbi`]) and the host
//! services handed to it ([`HostServicesAbi`]).
//!
//! Parameters borrow from the host (`RStr<'a>`, `RSlice<'a, Message>`): nothing is copied to
//! call an engine. Results are allocated by the engine and freed through their own vtables.
//!
//! **Stability:** frozen for API 1.x. Both trait objects end in an `extension` method marked
//! `#[sabi(last_prefix_field)]`; new capabilities arrive through it (see the crate docs,
//! "Evolution"), never as new methods or fields here.

use std::sync::atomic::{AtomicBool, Ordering};

use abi_stable::{
    sabi_trait,
    std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

use super::{
    message::{EntryId, Message, Usage},
    module::ExtensionRef,
    runtime_settings::RuntimeSettings,
};

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why an engine call did not produce a result.
///
/// Each variant carries a human-readable message. The host copies the message into its own
/// memory as soon as the call returns, so an error never outlives the library it came from.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// The engine could not do what was asked.
    Failed(RString),
    /// The engine panicked; the message is the panic payload. Produced by the export adapter,
    /// never by engine code.
    Panicked(RString),
    /// The engine stopped because the call's abort signal fired. Aborts never quarantine.
    Aborted(RString),
    /// The engine does not implement an optional method (or extension) the host called.
    NotImplemented(RString),
    /// The engine's configuration is not usable; the message says which setting and why.
    InvalidConfig(RString),
}

impl EngineError {
    /// A [`EngineError::Failed`] with the given message.
    pub fn failed(message: impl Into<String>) -> Self {
        EngineError::Failed(RString::from(message.into()))
    }

    /// An [`EngineError::Aborted`] with the given message.
    pub fn aborted(message: impl Into<String>) -> Self {
        EngineError::Aborted(RString::from(message.into()))
    }

    /// An [`EngineError::InvalidConfig`] with the given message.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        EngineError::InvalidConfig(RString::from(message.into()))
    }

    /// An [`EngineError::NotImplemented`] naming the method.
    pub fn not_implemented(method: &str) -> Self {
        EngineError::NotImplemented(RString::from(format!("{method} is not implemented")))
    }

    /// The message, whatever the kind.
    pub fn message(&self) -> &str {
        match self {
            EngineError::Failed(m)
            | EngineError::Panicked(m)
            | EngineError::Aborted(m)
            | EngineError::NotImplemented(m)
            | EngineError::InvalidConfig(m) => m,
        }
    }

    /// A stable snake_case name of the kind: `failed`, `panicked`, `aborted`, …
    pub fn kind_name(&self) -> &'static str {
        match self {
            EngineError::Failed(_) => "failed",
            EngineError::Panicked(_) => "panicked",
            EngineError::Aborted(_) => "aborted",
            EngineError::NotImplemented(_) => "not_implemented",
            EngineError::InvalidConfig(_) => "invalid_config",
        }
    }
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Panicked(m) => f.write_str(m),
            EngineError::Aborted(m) => write!(f, "aborted: {m}"),
            EngineError::InvalidConfig(m) => write!(f, "invalid engine config: {m}"),
            EngineError::Failed(m) | EngineError::NotImplemented(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for EngineError {}

// ---------------------------------------------------------------------------------------------
// Abort signal
// ---------------------------------------------------------------------------------------------

/// The abort signal of one call, as the engine sees it: read-only. The host fires it (on
/// timeout or when its caller gives up) through the [`AbortController`] that owns it; a
/// cooperative engine checks it in long loops and returns [`EngineError::Aborted`].
///
/// It lives in host memory and is borrowed by the call; reading it is one atomic load. An
/// engine cannot fire it, and the host never trusts it to tell what happened: whether a call
/// was aborted is decided from the controller's own record of having fired
/// ([`AbortController::fired`]), so an engine that claims `Aborted` without the host having
/// fired is treated as failed (and quarantined).
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct AbortSignal {
    aborted: AtomicBool,
}

impl AbortSignal {
    /// A signal that never fires (for calls the host gives no deadline, and tests).
    pub fn never() -> &'static AbortSignal {
        static NEVER: AbortSignal = AbortSignal {
            aborted: AtomicBool::new(false),
        };
        &NEVER
    }

    /// Whether the call should stop.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// `Err(EngineError::Aborted)` once the signal fired, in the ABI's error. Hidden from the
    /// documentation: engines use `pincer_plugin_api`'s `params.host.check_abort()?`, which
    /// returns the authoring API's error.
    #[doc(hidden)]
    pub fn check(&self) -> Result<(), EngineError> {
        if self.is_aborted() {
            Err(EngineError::aborted("Context engine operation aborted."))
        } else {
            Ok(())
        }
    }
}

/// The host side of an [`AbortSignal`]: fires it and remembers that it did.
///
/// ```
/// use pincer_plugin_abi::latest::AbortController;
/// let controller = AbortController::new();
/// assert!(!controller.signal().is_aborted());
/// controller.abort();
/// assert!(controller.signal().is_aborted() && controller.fired());
/// ```
#[derive(Debug, Default)]
pub struct AbortController {
    signal: AbortSignal,
    /// The host's own record, never lent to an engine.
    fired: AtomicBool,
}

impl AbortController {
    /// A controller whose signal has not fired.
    pub const fn new() -> Self {
        AbortController {
            signal: AbortSignal {
                aborted: AtomicBool::new(false),
            },
            fired: AtomicBool::new(false),
        }
    }

    /// The read-only signal to lend to a call.
    pub fn signal(&self) -> &AbortSignal {
        &self.signal
    }

    /// Fires the signal.
    pub fn abort(&self) {
        self.fired.store(true, Ordering::Release);
        self.signal.aborted.store(true, Ordering::Release);
    }

    /// Whether *this controller* fired: the only evidence of an abort the host accepts.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

impl Default for AbortSignal {
    fn default() -> Self {
        AbortSignal {
            aborted: AtomicBool::new(false),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Info
// ---------------------------------------------------------------------------------------------

/// How `maintain` after a turn is scheduled.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TurnMaintenanceMode {
    /// Inline, before the turn completes (the default).
    #[default]
    Foreground,
    /// Deferred by the host.
    Background,
}

/// The operations a host requirement can be declared for.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostOperation {
    /// A normal agent run (`agent-run`).
    AgentRun,
    /// A manual `/compact` (`manual-compact`).
    ManualCompact,
    /// Spawning a subagent (`subagent-spawn`).
    SubagentSpawn,
}

impl HostOperation {
    /// The contract's name: `agent-run`, `manual-compact`, `subagent-spawn`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostOperation::AgentRun => "agent-run",
            HostOperation::ManualCompact => "manual-compact",
            HostOperation::SubagentSpawn => "subagent-spawn",
        }
    }

    /// Parses a contract name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "agent-run" => Some(HostOperation::AgentRun),
            "manual-compact" => Some(HostOperation::ManualCompact),
            "subagent-spawn" => Some(HostOperation::SubagentSpawn),
            _ => None,
        }
    }
}

/// What an engine needs from the host to run one operation.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct HostRequirement {
    /// The operation.
    pub operation: HostOperation,
    /// Capability names, such as `assemble-before-prompt` (strings, so new capabilities need
    /// no new API).
    pub required_capabilities: RVec<RString>,
    /// Appended to the host's refusal message.
    pub unsupported_message: ROption<RString>,
}

/// A tool the engine offers to the model, answered by `callTool`.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: RString,
    /// What it does, for the model.
    pub description: RString,
    /// The JSON Schema of its arguments, as JSON text.
    pub parameters_schema_json: RString,
}

/// Bit set of the optional methods an engine implements. Filled in by the export adapter
/// from the traits the engine type implements; engine code never sets it.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionalMethods(pub u32);

impl OptionalMethods {
    /// `bootstrap`.
    pub const BOOTSTRAP: u32 = 1 << 0;
    /// `ingestBatch`.
    pub const INGEST_BATCH: u32 = 1 << 1;
    /// `afterTurn`.
    pub const AFTER_TURN: u32 = 1 << 2;
    /// `maintain`.
    pub const MAINTAIN: u32 = 1 << 3;
    /// `prepareSubagentSpawn`.
    pub const PREPARE_SUBAGENT_SPAWN: u32 = 1 << 4;
    /// `onSubagentEnded`.
    pub const ON_SUBAGENT_ENDED: u32 = 1 << 5;
    /// `dispose`.
    pub const DISPOSE: u32 = 1 << 6;
    /// `callTool`.
    pub const CALL_TOOL: u32 = 1 << 7;
    /// `commitTurn` (§8).
    pub const COMMIT_TURN: u32 = 1 << 8;

    /// Every optional method with its contract name.
    pub const ALL: [(u32, &'static str); 9] = [
        (Self::BOOTSTRAP, "bootstrap"),
        (Self::INGEST_BATCH, "ingestBatch"),
        (Self::AFTER_TURN, "afterTurn"),
        (Self::MAINTAIN, "maintain"),
        (Self::PREPARE_SUBAGENT_SPAWN, "prepareSubagentSpawn"),
        (Self::ON_SUBAGENT_ENDED, "onSubagentEnded"),
        (Self::DISPOSE, "dispose"),
        (Self::CALL_TOOL, "callTool"),
        (Self::COMMIT_TURN, "commitTurn"),
    ];

    /// Whether `method` (one of the constants) is in the set.
    pub fn has(self, method: u32) -> bool {
        self.0 & method != 0
    }

    /// The contract names of the methods in the set.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::ALL
            .into_iter()
            .filter(move |(bit, _)| self.has(*bit))
            .map(|(_, name)| name)
    }
}

/// What an engine says about itself (`info`).
///
/// Engines build it with the authoring `pincer_plugin_api::EngineInfo`; the adapter adds the id
/// and the optional methods.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct EngineInfo {
    /// The engine id; normally equal to the plugin id.
    pub id: RString,
    /// A display name.
    pub name: RString,
    /// The engine's semver version.
    pub version: RString,
    /// Whether the engine owns compaction (turns off the host's auto-compaction and precheck).
    pub owns_compaction: bool,
    /// How post-turn maintenance is scheduled.
    pub turn_maintenance_mode: TurnMaintenanceMode,
    /// Requirements per operation.
    pub host_requirements: RVec<HostRequirement>,
    /// Host parameters the engine accepts (`sessionKey`, `prompt`, `runtimeSettings`,
    /// `sessionTarget`, `runtimeContext`, `abortSignal`); `RNone` accepts every one.
    pub accepted_host_params: ROption<RVec<RString>>,
    /// Tools the engine offers to the model.
    pub tools: RVec<ToolSpec>,
    /// The optional methods implemented. Set by the export adapter.
    pub optional_methods: OptionalMethods,
    /// `transcriptSemantics` (§8): what the engine declares about durable turns.
    pub transcript_semantics: TranscriptSemantics,
}

/// `info.transcriptSemantics` (§8). Values are the contract's strings, so a later contract
/// value needs no new API.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Default)]
pub struct TranscriptSemantics {
    /// `currentTurnFence`, such as `before-current-turn-entry-v1`.
    pub current_turn_fence: ROption<RString>,
    /// `turnAdvancementIdempotency`, such as `atomic-idempotent-v1`.
    pub turn_advancement_idempotency: ROption<RString>,
}

// ---------------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------------

/// Where a session lives (`sessionTarget`). Every field is optional.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default)]
pub struct SessionTarget<'a> {
    /// The agent.
    pub agent_id: ROption<RStr<'a>>,
    /// The session id.
    pub session_id: ROption<RStr<'a>>,
    /// The session key.
    pub session_key: ROption<RStr<'a>>,
    /// The store the session lives in.
    pub store_path: ROption<RStr<'a>>,
    /// A thread id, as text.
    pub thread_id: ROption<RStr<'a>>,
}

/// The host parameters that [`EngineInfo::accepted_host_params`] filters (docs/CONTRACT.md §6.1).
/// Fields that are `RNone` were either not known or projected away.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default)]
pub struct HostParams<'a> {
    /// `sessionKey`.
    pub session_key: ROption<RStr<'a>>,
    /// `prompt` (assemble only): the user's prompt of this turn.
    pub prompt: ROption<RStr<'a>>,
    /// `runtimeSettings`.
    pub runtime_settings: ROption<&'a RuntimeSettings>,
    /// `sessionTarget`.
    pub session_target: ROption<&'a SessionTarget<'a>>,
    /// `runtimeContext`, as a JSON object text.
    pub runtime_context_json: ROption<RStr<'a>>,
    /// `abortSignal`. Always present for `compact`.
    pub abort_signal: ROption<&'a AbortSignal>,
    /// `runtimeContext.promptCache`: what the host knows of the provider's prompt cache.
    pub prompt_cache: ROption<&'a PromptCache<'a>>,
}

/// `runtimeContext.promptCache` (§1): the last model call's usage and what the host knows of
/// the provider's cache, so an engine can keep a prefix stable while it still hits.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default)]
pub struct PromptCache<'a> {
    /// The cache retention the host asked for (`short`, `long`, …).
    pub retention: ROption<RStr<'a>>,
    /// The usage the provider reported for the last model call.
    pub last_call_usage: ROption<Usage>,
    /// Whether the last call broke the cache (`observation.broke`).
    pub broke: ROption<bool>,
    /// When the cache was last written or read, ms since the Unix epoch.
    pub last_cache_touch_at: ROption<i64>,
    /// When the cache is expected to expire, ms since the Unix epoch.
    pub expires_at: ROption<i64>,
}

impl<'a> HostParams<'a> {
    /// The session key, if passed.
    pub fn session_key(&self) -> Option<&'a str> {
        self.session_key.map(|s| s.as_str()).into()
    }

    /// The runtime settings, if passed.
    pub fn runtime_settings(&self) -> Option<&'a RuntimeSettings> {
        self.runtime_settings.into()
    }

    /// Whether the call's abort signal fired (false when no signal was passed).
    pub fn is_aborted(&self) -> bool {
        self.abort_signal.map(|s| s.is_aborted()).unwrap_or(false)
    }

    /// `Err(Aborted)` once the abort signal fired.
    pub fn check_abort(&self) -> Result<(), EngineError> {
        match self.abort_signal {
            ROption::RSome(signal) => signal.check(),
            ROption::RNone => Ok(()),
        }
    }
}

/// `bootstrap` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct BootstrapParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The session's transcript file.
    pub session_file: RStr<'a>,
    /// Host parameters.
    pub host: HostParams<'a>,
}

/// `maintain` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct MaintainParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The session's transcript file.
    pub session_file: RStr<'a>,
    /// Why: `bootstrap` or `turn`.
    pub reason: RStr<'a>,
    /// Host parameters.
    pub host: HostParams<'a>,
}

/// `ingest` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct IngestParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The message, borrowed.
    pub message: &'a Message,
    /// The session entry the message is stored as.
    pub entry_id: &'a EntryId,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostParams<'a>,
}

/// `ingestBatch` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct IngestBatchParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The messages, borrowed.
    pub messages: RSlice<'a, Message>,
    /// `entry_ids[i]` is the session entry of `messages[i]`; empty when the host has none.
    pub entry_ids: RSlice<'a, EntryId>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostParams<'a>,
}

/// `afterTurn` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct AfterTurnParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The session's transcript file.
    pub session_file: RStr<'a>,
    /// The whole message snapshot after the turn, borrowed.
    pub messages: RSlice<'a, Message>,
    /// `entry_ids[i]` is the session entry of `messages[i]`; empty when the host has none.
    pub entry_ids: RSlice<'a, EntryId>,
    /// How many of `messages` existed before the prompt; the rest are new this turn.
    pub pre_prompt_message_count: u64,
    /// The summary of an auto-compaction that ran during the turn.
    pub auto_compaction_summary: ROption<RStr<'a>>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// The prompt's token budget.
    pub token_budget: ROption<u64>,
    /// Host parameters.
    pub host: HostParams<'a>,
}

/// A model's capabilities the engine may tailor the context to.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct ModelRef<'a> {
    /// Provider, such as `openai`.
    pub provider: ROption<RStr<'a>>,
    /// Model id.
    pub id: RStr<'a>,
    /// Its context window in tokens.
    pub context_window: ROption<u64>,
}

/// `assemble` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct AssembleParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The session's messages, borrowed. Results refer to them by index.
    pub messages: RSlice<'a, Message>,
    /// `entry_ids[i]` is the session entry of `messages[i]`; empty when the host has none.
    pub entry_ids: RSlice<'a, EntryId>,
    /// The prompt's token budget.
    pub token_budget: ROption<u64>,
    /// Tool names available this turn, sorted.
    pub available_tools: RSlice<'a, RStr<'a>>,
    /// Citations mode, if the host has one.
    pub citations_mode: ROption<RStr<'a>>,
    /// The model.
    pub model: ROption<ModelRef<'a>>,
    /// Host parameters (`prompt` lives here).
    pub host: HostParams<'a>,
}

/// What `compact` aims for.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompactionTarget {
    /// Fit the token budget (the default).
    #[default]
    Budget,
    /// Get below the compaction threshold.
    Threshold,
}

/// `compact` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct CompactParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The session's transcript file.
    pub session_file: RStr<'a>,
    /// The agent.
    pub agent_id: ROption<RStr<'a>>,
    /// The session's current context, borrowed (pincer's addition: no engine has to re-read
    /// the transcript to see it).
    pub messages: RSlice<'a, Message>,
    /// `entry_ids[i]` is the session entry of `messages[i]`; empty when the host has none.
    pub entry_ids: RSlice<'a, EntryId>,
    /// The prompt's token budget.
    pub token_budget: ROption<u64>,
    /// Compact even below the threshold.
    pub force: bool,
    /// `manual` or `preflight_required` when forced.
    pub force_reason: ROption<RStr<'a>>,
    /// The observed token count that triggered this compaction.
    pub current_token_count: ROption<u64>,
    /// Budget or threshold.
    pub compaction_target: CompactionTarget,
    /// Extra instructions from `/compact <text>`.
    pub custom_instructions: ROption<RStr<'a>>,
    /// Host parameters; the abort signal is always passed to `compact`.
    pub host: HostParams<'a>,
}

/// `subagent-spawn` context mode.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubagentContextMode {
    /// The child starts with its own context.
    Isolated,
    /// The child starts from a fork of the parent's.
    Fork,
}

/// `prepareSubagentSpawn` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct SubagentSpawnParams<'a> {
    /// The parent's session key.
    pub parent_session_key: RStr<'a>,
    /// The child's session key.
    pub child_session_key: RStr<'a>,
    /// Isolated or fork.
    pub context_mode: ROption<SubagentContextMode>,
    /// The parent's session id.
    pub parent_session_id: ROption<RStr<'a>>,
    /// The parent's transcript file.
    pub parent_session_file: ROption<RStr<'a>>,
    /// The child's session id.
    pub child_session_id: ROption<RStr<'a>>,
    /// The child's transcript file.
    pub child_session_file: ROption<RStr<'a>>,
    /// How long the child may live, in milliseconds.
    pub ttl_ms: ROption<u64>,
}

/// Why a subagent ended.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubagentEndReason {
    /// Its session was deleted.
    Deleted,
    /// It finished.
    Completed,
    /// It was swept after its time ran out.
    Swept,
    /// It was released by its parent.
    Released,
}

/// `onSubagentEnded` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct SubagentEndedParams<'a> {
    /// The child's session key.
    pub child_session_key: RStr<'a>,
    /// Why it ended.
    pub reason: SubagentEndReason,
}

/// `callTool` parameters.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct ToolCallParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The tool's name, one of [`EngineInfo::tools`].
    pub tool_name: RStr<'a>,
    /// The arguments, as JSON text.
    pub arguments_json: RStr<'a>,
    /// Host parameters.
    pub host: HostParams<'a>,
}

/// The parameters of the engine factory.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct FactoryParams<'a> {
    /// The engine id to create.
    pub engine_id: RStr<'a>,
    /// `plugins.entries.<id>.config`, already validated against the manifest's
    /// `configSchema`, as JSON text (`{}` when none).
    pub config_json: RStr<'a>,
    /// The agent's directory.
    pub agent_dir: ROption<RStr<'a>>,
    /// The workspace directory.
    pub workspace_dir: ROption<RStr<'a>>,
    /// The plugin's own folder (where its manifest is).
    pub plugin_dir: ROption<RStr<'a>>,
    /// A directory that belongs to this engine alone (`$PINCER_HOME/state/engines/<id>/`),
    /// created by the host, for engines that keep their own store.
    pub state_dir: ROption<RStr<'a>>,
}

/// Where a durable turn's entry lies in the transcript (`TranscriptEntryAnchor`, §8).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct TranscriptAnchor<'a> {
    /// The agent.
    pub agent_id: RStr<'a>,
    /// The session id.
    pub session_id: RStr<'a>,
    /// The session key.
    pub session_key: RStr<'a>,
    /// The transcript store.
    pub store_path: RStr<'a>,
    /// The store's generation.
    pub generation: u64,
    /// The entry's id.
    pub entry_id: RStr<'a>,
    /// The entry's raw sequence number in the store.
    pub raw_seq: u64,
    /// The entry's effective parent (`RNone` for a root).
    pub effective_parent_id: ROption<RStr<'a>>,
    /// The position of the entry's message in the active context.
    pub active_message_position: u64,
    /// The idempotency key, if the host has one.
    pub idempotency_key: ROption<RStr<'a>>,
}

/// `commitTurn` parameters (§8): one accepted turn, committed exactly once per
/// `advancement_key`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct CommitTurnParams<'a> {
    /// The session id.
    pub session_id: RStr<'a>,
    /// The idempotency key of the advancement (the logical turn id).
    pub advancement_key: RStr<'a>,
    /// The logical turn id of the admission.
    pub logical_turn_id: RStr<'a>,
    /// The admitted user entry that opened the turn.
    pub admission: TranscriptAnchor<'a>,
    /// The turn's last entry.
    pub terminal: TranscriptAnchor<'a>,
    /// The accepted turn's messages, inclusive, borrowed.
    pub messages: RSlice<'a, Message>,
    /// `entry_ids[i]` is the session entry of `messages[i]`; empty when the host has none.
    pub entry_ids: RSlice<'a, EntryId>,
    /// Whether the turn is a heartbeat.
    pub is_heartbeat: bool,
    /// Host parameters.
    pub host: HostParams<'a>,
}

/// What `commitTurn` did.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitTurnStatus {
    /// The turn was committed now.
    Committed,
    /// The turn had been committed before (same advancement key): nothing done.
    Duplicate,
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// `bootstrap` result.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Default)]
pub struct BootstrapResult {
    /// Whether anything was set up.
    pub bootstrapped: bool,
    /// How many messages were imported.
    pub imported_messages: ROption<u64>,
    /// Why not, or what happened.
    pub reason: ROption<RString>,
}

/// `maintain` result.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Default)]
pub struct MaintainResult {
    /// Whether anything changed.
    pub changed: bool,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Transcript entries rewritten.
    pub rewritten_entries: u64,
    /// Why, or why not.
    pub reason: ROption<RString>,
}

/// `ingest` result.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IngestResult {
    /// `false` when the message was a duplicate or the engine keeps nothing.
    pub ingested: bool,
}

/// `ingestBatch` result.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IngestBatchResult {
    /// How many messages were taken in.
    pub ingested_count: u64,
}

/// One item of an assembled context.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub enum AssembledItem {
    /// Input messages `start..end` (indices into [`AssembleParams::messages`]), unchanged and
    /// uncopied.
    Input {
        /// First index.
        start: u64,
        /// One past the last index.
        end: u64,
    },
    /// A message the engine made (a summary, a note). Boxed so that the far more common
    /// `Input` items stay small.
    New(RBox<Message>),
}

/// Whether the host may trust the assembled prompt's size.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PromptAuthority {
    /// The engine vouches for the assembled context (default).
    #[default]
    Assembled,
    /// The host should still run its overflow precheck.
    PreassemblyMayOverflow,
}

/// `assemble` result.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct AssembleResult {
    /// The context, in prompt order.
    pub items: RVec<AssembledItem>,
    /// The engine's token estimate of the context; `RNone`: the caller estimates.
    pub estimated_tokens: ROption<u64>,
    /// Prepended to the run's system prompt.
    pub system_prompt_addition: ROption<RString>,
    /// See [`PromptAuthority`].
    pub prompt_authority: PromptAuthority,
}

/// Details of a compaction that happened.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Default)]
pub struct CompactionDetails {
    /// The summary that replaces the compacted history.
    pub summary: ROption<RString>,
    /// The first entry kept verbatim after the summary.
    pub first_kept_entry_id: ROption<RString>,
    /// Tokens before.
    pub tokens_before: u64,
    /// Tokens after.
    pub tokens_after: ROption<u64>,
    /// Engine-specific details, as JSON text.
    pub details_json: ROption<RString>,
    /// A successor session id, if compaction moved the session.
    pub session_id: ROption<RString>,
    /// A successor session file.
    pub session_file: ROption<RString>,
}

/// `compact` result.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Default)]
pub struct CompactResult {
    /// Whether the call succeeded (a no-op can succeed).
    pub ok: bool,
    /// Whether anything was compacted.
    pub compacted: bool,
    /// Why, or why not.
    pub reason: ROption<RString>,
    /// What happened, when something was compacted.
    pub result: ROption<CompactionDetails>,
}

/// `callTool` result.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct ToolCallResult {
    /// The tool's output, for the model.
    pub content: RString,
    /// Whether the call failed.
    pub is_error: bool,
}

// ---------------------------------------------------------------------------------------------
// Trait objects
// ---------------------------------------------------------------------------------------------

/// The rollback handle `prepareSubagentSpawn` returns; the host calls it once if the spawn
/// then fails, and drops it otherwise.
#[sabi_trait]
pub trait SpawnRollbackAbi: Send + Sync {
    /// Undo what `prepareSubagentSpawn` set up.
    #[sabi(last_prefix_field)]
    fn rollback(&self) -> RResult<(), EngineError>;
}

/// An owned rollback handle.
pub type SpawnRollbackBox = SpawnRollbackAbi_TO<'static, RBox<()>>;

/// The engine object as it crosses the boundary. Engine authors never implement this: they
/// implement `pincer_plugin_api::Engine` and let `pincer_plugin_api::export_engine!` adapt it,
/// catching every panic.
///
/// Every method takes `&self`: the host may call one engine from several threads (one per
/// session) at once.
#[sabi_trait]
pub trait EngineAbi: Send + Sync {
    /// The engine's info. The host calls it once per instance and caches the answer.
    fn info(&self) -> RResult<EngineInfo, EngineError>;
    /// `ingest` (required).
    fn ingest(&self, params: &IngestParams<'_>) -> RResult<IngestResult, EngineError>;
    /// `assemble` (required).
    fn assemble(&self, params: &AssembleParams<'_>) -> RResult<AssembleResult, EngineError>;
    /// `compact` (required).
    fn compact(&self, params: &CompactParams<'_>) -> RResult<CompactResult, EngineError>;
    /// `bootstrap` (optional).
    fn bootstrap(&self, params: &BootstrapParams<'_>) -> RResult<BootstrapResult, EngineError>;
    /// `ingestBatch` (optional).
    fn ingest_batch(
        &self,
        params: &IngestBatchParams<'_>,
    ) -> RResult<IngestBatchResult, EngineError>;
    /// `afterTurn` (optional).
    fn after_turn(&self, params: &AfterTurnParams<'_>) -> RResult<(), EngineError>;
    /// `maintain` (optional).
    fn maintain(&self, params: &MaintainParams<'_>) -> RResult<MaintainResult, EngineError>;
    /// `prepareSubagentSpawn` (optional). `RNone`: nothing to roll back.
    fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> RResult<ROption<SpawnRollbackBox>, EngineError>;
    /// `onSubagentEnded` (optional).
    fn on_subagent_ended(&self, params: &SubagentEndedParams<'_>) -> RResult<(), EngineError>;
    /// `callTool` (optional).
    fn call_tool(&self, params: &ToolCallParams<'_>) -> RResult<ToolCallResult, EngineError>;
    /// `dispose` (optional): once per instance, on shutdown or reload.
    fn dispose(&self) -> RResult<(), EngineError>;
    /// `commitTurn` (optional, §8).
    fn commit_turn(&self, params: &CommitTurnParams<'_>) -> RResult<CommitTurnStatus, EngineError>;
    /// The extension point: capabilities added after 1.0 are looked up here by name and
    /// checked by layout before use. `RNone` when the engine has no such extension.
    #[sabi(last_prefix_field)]
    fn extension(&self, name: RStr<'_>) -> ROption<ExtensionRef>;
}

/// An owned engine object.
pub type EngineBox = EngineAbi_TO<'static, RBox<()>>;

/// Log levels, most severe first.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Errors.
    Error = 1,
    /// Warnings.
    Warn = 2,
    /// Information.
    Info = 3,
    /// Debugging.
    Debug = 4,
    /// Tracing.
    Trace = 5,
}

/// One log event from an engine.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct LogRecord<'a> {
    /// Its level.
    pub level: LogLevel,
    /// The `tracing` target (module path by default).
    pub target: RStr<'a>,
    /// The formatted message.
    pub message: RStr<'a>,
    /// Structured fields, as `(name, value)` text pairs.
    pub fields: RSlice<'a, FieldPair<'a>>,
    /// Source file, if known.
    pub file: ROption<RStr<'a>>,
    /// Source line, if known.
    pub line: ROption<u32>,
}

/// One structured log field.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct FieldPair<'a> {
    /// The field's name.
    pub name: RStr<'a>,
    /// Its value, formatted.
    pub value: RStr<'a>,
}

/// A completion request to the host's model (`llmComplete`).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct LlmCompleteRequest<'a> {
    /// The system prompt.
    pub system_prompt: ROption<RStr<'a>>,
    /// The conversation to complete.
    pub messages: RSlice<'a, Message>,
    /// The most tokens to produce.
    pub max_tokens: ROption<u64>,
    /// Sampling temperature.
    pub temperature: ROption<f64>,
    /// The call's abort signal.
    pub abort_signal: ROption<&'a AbortSignal>,
}

/// The host model's answer.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct LlmCompleteResponse {
    /// The assistant message.
    pub message: Message,
}

/// Services the host hands to every engine it creates. Owned by the host; the engine holds a
/// shared handle ([`HostServicesArc`]).
#[sabi_trait]
pub trait HostServicesAbi: Send + Sync {
    /// Emits one log event in the host's `tracing` subscriber.
    fn log(&self, record: &LogRecord<'_>);
    /// The most verbose level the host wants, so engines skip formatting the rest.
    fn max_log_level(&self) -> LogLevel;
    /// Completes with the host's model (capability `runtime-llm-complete`).
    fn llm_complete(
        &self,
        request: &LlmCompleteRequest<'_>,
    ) -> RResult<LlmCompleteResponse, EngineError>;
    /// Runs the host runtime's own compaction for the session in `params`.
    fn delegate_compaction_to_runtime(
        &self,
        params: &CompactParams<'_>,
    ) -> RResult<CompactResult, EngineError>;
    /// The host's token estimate of the messages (docs/CONTRACT.md §9.5).
    fn estimate_tokens(&self, messages: RSlice<'_, Message>) -> u64;
    /// The extension point for host services added after 1.0.
    #[sabi(last_prefix_field)]
    fn extension(&self, name: RStr<'_>) -> ROption<ExtensionRef>;
}

/// A shared host-services handle.
pub type HostServicesArc = HostServicesAbi_TO<'static, RArc<()>>;

impl AssembleResult {
    /// The messages this result stands for, in prompt order: references into `input` for kept
    /// messages (ranges clamped to it), references into the result for new ones. No copies.
    pub fn resolve<'a>(&'a self, input: &'a [Message]) -> Vec<&'a Message> {
        let mut out = Vec::new();
        for item in self.items.iter() {
            match item {
                AssembledItem::Input { start, end } => {
                    let end = usize::try_from(*end).unwrap_or(usize::MAX).min(input.len());
                    let start = usize::try_from(*start).unwrap_or(usize::MAX).min(end);
                    out.extend(input[start..end].iter());
                }
                AssembledItem::New(message) => out.push(&**message),
            }
        }
        out
    }
}
