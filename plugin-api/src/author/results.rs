//! What engine methods return, in plain Rust: [`EngineInfo`], [`CompactResult`] and
//! [`Compaction`], [`BootstrapResult`], [`MaintainResult`], [`ToolCallResult`]. The adapter turns
//! them into the ABI types; the engine id comes from [`crate::Engine::ID`] alone.

use crate::abi::v1 as abi;
use crate::abi::v1::message::opt_text;
use crate::abi::{ROption, RString, RVec};
use crate::{HostOperation, TurnMaintenanceMode};

fn ropt(value: Option<String>) -> ROption<RString> {
    value.map_or(ROption::RNone, |s| ROption::RSome(RString::from(s)))
}

/// A tool the engine offers to the model, answered by `callTool`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: serde_json::Value,
}

/// What an engine declares about itself (`info`). The id is [`crate::Engine::ID`]; the optional
/// methods are found by the adapter.
///
/// ```
/// use pincer_plugin_api::{EngineInfo, HostOperation};
/// let info = EngineInfo::new("Lossless", "0.3.0")
///     .owns_compaction(true)
///     .host_requirement(HostOperation::AgentRun, &["assemble-before-prompt"], None)
///     .accepted_host_params(&["sessionKey", "abortSignal"]);
/// assert!(info.owns_compaction);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct EngineInfo {
    /// A display name.
    pub name: String,
    /// The engine's semver version.
    pub version: String,
    /// Whether the engine owns compaction (turns off the host's auto-compaction and precheck).
    pub owns_compaction: bool,
    /// How post-turn maintenance is scheduled.
    pub turn_maintenance_mode: TurnMaintenanceMode,
    /// `(operation, capabilities, unsupported message)` per operation.
    pub host_requirements: Vec<(HostOperation, Vec<String>, Option<String>)>,
    /// Host parameters the engine accepts; `None` accepts every one.
    pub accepted_host_params: Option<Vec<String>>,
    /// Tools the engine offers to the model.
    pub tools: Vec<ToolSpec>,
    /// `transcriptSemantics.currentTurnFence` (§8).
    pub current_turn_fence: Option<String>,
    /// `transcriptSemantics.turnAdvancementIdempotency` (§8).
    pub turn_advancement_idempotency: Option<String>,
}

impl EngineInfo {
    /// Info with a display name and version, every other field at its default.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        EngineInfo {
            name: name.into(),
            version: version.into(),
            owns_compaction: false,
            turn_maintenance_mode: TurnMaintenanceMode::Foreground,
            host_requirements: Vec::new(),
            accepted_host_params: None,
            tools: Vec::new(),
            current_turn_fence: None,
            turn_advancement_idempotency: None,
        }
    }

    /// Declares whether the engine owns compaction.
    pub fn owns_compaction(mut self, owns: bool) -> Self {
        self.owns_compaction = owns;
        self
    }

    /// Sets the turn maintenance mode.
    pub fn turn_maintenance_mode(mut self, mode: TurnMaintenanceMode) -> Self {
        self.turn_maintenance_mode = mode;
        self
    }

    /// Requires `capabilities` (such as `assemble-before-prompt`) from hosts that run
    /// `operation`; `unsupported_message` is appended to the host's refusal.
    pub fn host_requirement(
        mut self,
        operation: HostOperation,
        capabilities: &[&str],
        unsupported_message: Option<&str>,
    ) -> Self {
        self.host_requirements.push((
            operation,
            capabilities.iter().map(|c| (*c).to_owned()).collect(),
            unsupported_message.map(str::to_owned),
        ));
        self
    }

    /// Declares the host parameters the engine accepts (`sessionKey`, `prompt`,
    /// `runtimeSettings`, `sessionTarget`, `runtimeContext`, `abortSignal`).
    pub fn accepted_host_params(mut self, params: &[&str]) -> Self {
        self.accepted_host_params = Some(params.iter().map(|p| (*p).to_owned()).collect());
        self
    }

    /// Offers a tool to the model.
    pub fn tool(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> Self {
        self.tools.push(ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        });
        self
    }

    /// Declares durable-turn semantics (§8): `currentTurnFence` and
    /// `turnAdvancementIdempotency`.
    pub fn transcript_semantics(mut self, fence: &str, idempotency: &str) -> Self {
        self.current_turn_fence = Some(fence.to_owned());
        self.turn_advancement_idempotency = Some(idempotency.to_owned());
        self
    }

    /// The author-side info of what the host read (the id and optional methods are not part
    /// of it: see [`crate::testing::TestEngine`]).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn from_abi(info: &abi::EngineInfo) -> Self {
        let text = |s: &ROption<RString>| opt_text(s).map(str::to_owned);
        EngineInfo {
            name: info.name.to_string(),
            version: info.version.to_string(),
            owns_compaction: info.owns_compaction,
            turn_maintenance_mode: info.turn_maintenance_mode,
            host_requirements: info
                .host_requirements
                .iter()
                .map(|r| {
                    (
                        r.operation,
                        r.required_capabilities
                            .iter()
                            .map(|c| c.to_string())
                            .collect(),
                        text(&r.unsupported_message),
                    )
                })
                .collect(),
            accepted_host_params: info
                .accepted_host_params
                .as_ref()
                .map(|p| p.iter().map(|p| p.to_string()).collect())
                .into_option(),
            tools: info
                .tools
                .iter()
                .map(|t| ToolSpec {
                    name: t.name.to_string(),
                    description: t.description.to_string(),
                    parameters: serde_json::from_str(&t.parameters_schema_json)
                        .unwrap_or(serde_json::Value::Null),
                })
                .collect(),
            current_turn_fence: text(&info.transcript_semantics.current_turn_fence),
            turn_advancement_idempotency: text(
                &info.transcript_semantics.turn_advancement_idempotency,
            ),
        }
    }

    pub(crate) fn into_abi(
        self,
        id: &str,
        optional_methods: abi::OptionalMethods,
    ) -> abi::EngineInfo {
        abi::EngineInfo {
            id: id.into(),
            name: self.name.into(),
            version: self.version.into(),
            owns_compaction: self.owns_compaction,
            turn_maintenance_mode: self.turn_maintenance_mode,
            host_requirements: self
                .host_requirements
                .into_iter()
                .map(|(operation, caps, message)| abi::HostRequirement {
                    operation,
                    required_capabilities: caps.into_iter().map(RString::from).collect(),
                    unsupported_message: ropt(message),
                })
                .collect(),
            accepted_host_params: match self.accepted_host_params {
                Some(params) => ROption::RSome(params.into_iter().map(RString::from).collect()),
                None => ROption::RNone,
            },
            tools: self
                .tools
                .into_iter()
                .map(|tool| abi::ToolSpec {
                    name: tool.name.into(),
                    description: tool.description.into(),
                    parameters_schema_json: tool.parameters.to_string().into(),
                })
                .collect::<RVec<_>>(),
            optional_methods,
            transcript_semantics: abi::TranscriptSemantics {
                current_turn_fence: ropt(self.current_turn_fence),
                turn_advancement_idempotency: ropt(self.turn_advancement_idempotency),
            },
        }
    }
}

/// What a compaction did, when it compacted.
///
/// ```
/// use pincer_plugin_api::{Compaction, CompactResult};
/// let result = CompactResult::compacted(
///     Compaction::new(12_000).summary("The user booked SEA→JFK.").first_kept_entry_id("e41").tokens_after(900),
/// );
/// assert!(result.is_ok() && result.is_compacted());
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compaction {
    summary: Option<String>,
    first_kept_entry_id: Option<String>,
    tokens_before: u64,
    tokens_after: Option<u64>,
    details: Option<serde_json::Value>,
    session_id: Option<String>,
    session_file: Option<String>,
}

impl Compaction {
    /// A compaction of a context that held `tokens_before` tokens.
    pub fn new(tokens_before: u64) -> Self {
        Compaction {
            tokens_before,
            ..Compaction::default()
        }
    }

    /// The summary that replaces the compacted history.
    pub fn summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = Some(summary.into());
        self
    }

    /// The first session entry kept verbatim after the summary.
    pub fn first_kept_entry_id(mut self, id: impl Into<String>) -> Self {
        self.first_kept_entry_id = Some(id.into());
        self
    }

    /// Tokens after compaction.
    pub fn tokens_after(mut self, tokens: u64) -> Self {
        self.tokens_after = Some(tokens);
        self
    }

    /// Engine-specific details, stored with the compaction entry.
    pub fn details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// A successor session, when compaction moved the session.
    pub fn successor(
        mut self,
        session_id: impl Into<String>,
        session_file: Option<String>,
    ) -> Self {
        self.session_id = Some(session_id.into());
        self.session_file = session_file;
        self
    }
}

/// The answer of `compact`.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactResult(pub(crate) abi::CompactResult);

impl CompactResult {
    /// `ok: true, compacted: true` with what happened.
    pub fn compacted(compaction: Compaction) -> Self {
        CompactResult(abi::CompactResult {
            ok: true,
            compacted: true,
            reason: ROption::RNone,
            result: ROption::RSome(abi::CompactionDetails {
                summary: ropt(compaction.summary),
                first_kept_entry_id: ropt(compaction.first_kept_entry_id),
                tokens_before: compaction.tokens_before,
                tokens_after: compaction.tokens_after.into(),
                details_json: ropt(compaction.details.map(|d| d.to_string())),
                session_id: ropt(compaction.session_id),
                session_file: ropt(compaction.session_file),
            }),
        })
    }

    /// `ok: true, compacted: false`: nothing needed compacting. Only for an engine that owns
    /// compaction (its [`EngineInfo::owns_compaction`]) and found nothing to compact; an engine
    /// that does not own it answers with [`crate::Host::delegate_compaction_to_runtime`].
    pub fn nothing_to_do(reason: impl Into<String>) -> Self {
        CompactResult(abi::CompactResult {
            ok: true,
            compacted: false,
            reason: ROption::RSome(reason.into().into()),
            result: ROption::RNone,
        })
    }

    /// `ok: false`: the compaction could not be done (without being an error of the engine).
    pub fn failed(reason: impl Into<String>) -> Self {
        CompactResult(abi::CompactResult {
            ok: false,
            compacted: false,
            reason: ROption::RSome(reason.into().into()),
            result: ROption::RNone,
        })
    }

    /// Whether the call succeeded.
    pub fn is_ok(&self) -> bool {
        self.0.ok
    }

    /// Whether anything was compacted.
    pub fn is_compacted(&self) -> bool {
        self.0.compacted
    }

    /// Why, or why not.
    pub fn reason(&self) -> Option<&str> {
        opt_text(&self.0.reason)
    }

    /// The summary, when one was made.
    pub fn summary(&self) -> Option<&str> {
        match &self.0.result {
            ROption::RSome(d) => opt_text(&d.summary),
            ROption::RNone => None,
        }
    }

    /// The first entry kept verbatim.
    pub fn first_kept_entry_id(&self) -> Option<&str> {
        match &self.0.result {
            ROption::RSome(d) => d
                .first_kept_entry_id
                .as_ref()
                .map(|s| s.as_str())
                .into_option(),
            ROption::RNone => None,
        }
    }

    /// `(tokens_before, tokens_after)`, when something was compacted.
    pub fn tokens(&self) -> Option<(u64, Option<u64>)> {
        match &self.0.result {
            ROption::RSome(d) => Some((d.tokens_before, d.tokens_after.into_option())),
            ROption::RNone => None,
        }
    }

    /// The ABI value.
    #[doc(hidden)]
    pub fn into_abi(self) -> abi::CompactResult {
        self.0
    }

    /// Wraps an ABI value (what the host's runtime compaction answers).
    #[doc(hidden)]
    pub fn from_abi(result: abi::CompactResult) -> Self {
        CompactResult(result)
    }
}

/// The answer of `bootstrap`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BootstrapResult {
    /// Whether anything was set up.
    pub bootstrapped: bool,
    /// How many messages were imported, if the engine counts them.
    pub imported_messages: Option<u64>,
    /// Why not, or what happened.
    pub reason: Option<String>,
}

impl BootstrapResult {
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn from_abi(result: abi::BootstrapResult) -> Self {
        BootstrapResult {
            bootstrapped: result.bootstrapped,
            imported_messages: result.imported_messages.into_option(),
            reason: result.reason.into_option().map(RString::into_string),
        }
    }

    pub(crate) fn into_abi(self) -> abi::BootstrapResult {
        abi::BootstrapResult {
            bootstrapped: self.bootstrapped,
            imported_messages: self.imported_messages.into(),
            reason: ropt(self.reason),
        }
    }
}

/// The answer of `maintain`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintainResult {
    /// Whether anything changed.
    pub changed: bool,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Transcript entries rewritten.
    pub rewritten_entries: u64,
    /// Why, or why not.
    pub reason: Option<String>,
}

impl MaintainResult {
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn from_abi(result: abi::MaintainResult) -> Self {
        MaintainResult {
            changed: result.changed,
            bytes_freed: result.bytes_freed,
            rewritten_entries: result.rewritten_entries,
            reason: result.reason.into_option().map(RString::into_string),
        }
    }

    pub(crate) fn into_abi(self) -> abi::MaintainResult {
        abi::MaintainResult {
            changed: self.changed,
            bytes_freed: self.bytes_freed,
            rewritten_entries: self.rewritten_entries,
            reason: ropt(self.reason),
        }
    }
}

/// The answer of `callTool`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallResult {
    /// The tool's output, for the model.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

impl ToolCallResult {
    /// A successful call's output.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolCallResult {
            content: content.into(),
            is_error: false,
        }
    }

    /// A failed call's message, for the model.
    pub fn error(message: impl Into<String>) -> Self {
        ToolCallResult {
            content: message.into(),
            is_error: true,
        }
    }

    pub(crate) fn into_abi(self) -> abi::ToolCallResult {
        abi::ToolCallResult {
            content: self.content.into(),
            is_error: self.is_error,
        }
    }
}
