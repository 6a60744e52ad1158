//! The authoring layer: what an engine author writes against.
//!
//! Implement [`Engine`] (the required members) and any of the optional-method traits
//! ([`Bootstrap`], [`IngestBatch`], [`AfterTurn`], [`Maintain`], [`SubagentSpawn`],
//! [`SubagentEnded`], [`Tools`], [`CommitTurn`], [`Dispose`]), then call [`crate::export_engine!`]. Implementing
//! a trait *is* the declaration: the adapter records which optional methods exist so the host
//! can follow the contract's lifecycle (`afterTurn` if present, else `ingestBatch`, else
//! `ingest`) without probing.
//!
//! **Stability:** additive within 1.x (new optional traits, new helpers); no ABI here.

mod assemble;
mod error;
pub(crate) mod export;
pub(crate) mod log_forward;
mod params;
mod results;

use std::path::Path;

use crate::abi::v1 as abi;
use crate::abi::{ROption, RSlice, RStr};
use crate::{AbortSignal, CommitTurnStatus, IngestBatchResult, IngestResult, Message};

pub use assemble::{AssembleResult, ContextBuilder, ContextItem};
pub use error::{EngineError, ErrorKind};
pub use export::{into_engine_box, OptionalFns, SpawnRollback};
pub use params::{
    AfterTurnParams, AssembleParams, BootstrapParams, CommitTurnParams, CompactParams, EntryIds,
    HostParams, IngestBatchParams, IngestParams, MaintainParams, MaintainReason, ModelRef,
    PromptCache, RuntimeSettings, SessionTarget, SubagentEndedParams, SubagentSpawnParams,
    ToolCallParams, ToolNames, TranscriptAnchor,
};
pub use results::{
    BootstrapResult, CompactResult, Compaction, EngineInfo, MaintainResult, ToolCallResult,
    ToolSpec,
};

/// The required members of a context engine.
///
/// ```
/// use pincer_plugin_api::prelude::*;
///
/// /// Keeps every message: the smallest engine that honours the contract.
/// struct KeepAll {
///     host: Host,
/// }
///
/// impl Engine for KeepAll {
///     const ID: &'static str = "keep-all";
///
///     fn create(_ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
///         Ok(KeepAll { host })
///     }
///
///     fn info(&self) -> Result<EngineInfo, EngineError> {
///         Ok(EngineInfo::new("Keep all", "0.1.0"))
///     }
///
///     fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
///         Ok(IngestResult { ingested: false })
///     }
///
///     fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
///         Ok(AssembleResult::pass_through(params.messages.len()))
///     }
///
///     fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
///         // It does not own compaction: the runtime compacts.
///         self.host.delegate_compaction_to_runtime(params)
///     }
/// }
///
/// // In the plugin crate (crate-type = ["cdylib"]): export it.
/// pincer_plugin_api::export_engine!(KeepAll);
/// # fn main() {}
/// ```
pub trait Engine: Send + Sync + Sized + 'static {
    /// The engine id the host registers; normally the plugin id. The one source of the id:
    /// the library's manifest, `info()` as the host sees it, and the factory all use it.
    const ID: &'static str;

    /// Creates an engine. `ctx` carries the validated config and the directories; `host` the
    /// services the engine may keep and use (logging needs no handle: use `tracing`).
    ///
    /// # Errors
    /// An error here is reported as a factory failure: the host quarantines the engine and
    /// answers with `legacy`.
    fn create(ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError>;

    /// What the engine declares about itself. Called once per instance.
    ///
    /// # Errors
    /// An engine that cannot describe itself is not used: the host quarantines it.
    fn info(&self) -> Result<EngineInfo, EngineError>;

    /// Takes in one message.
    ///
    /// # Errors
    /// Any error quarantines the engine for the process; the call is answered by `legacy`.
    fn ingest(&self, params: &IngestParams<'_>) -> Result<IngestResult, EngineError>;

    /// Chooses what the model sees, by index into `params.messages` plus new messages.
    ///
    /// # Errors
    /// Any error quarantines the engine; the turn falls back to `legacy`'s pass-through.
    fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError>;

    /// Compacts the session's history. An engine that does not own compaction should call
    /// [`Host::delegate_compaction_to_runtime`] rather than do nothing: `/compact` and overflow
    /// recovery depend on it.
    ///
    /// # Errors
    /// Errors fail closed: the caller sees the error and the engine is quarantined.
    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError>;
}

/// Optional `bootstrap`: set up state for a session that already has a transcript.
pub trait Bootstrap: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// Logged; the run continues.
    fn bootstrap(&self, params: &BootstrapParams<'_>) -> Result<BootstrapResult, EngineError>;
}

/// Optional `ingestBatch`: take in a turn's new messages at once.
pub trait IngestBatch: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// Quarantines the engine; `legacy` answers.
    fn ingest_batch(
        &self,
        params: &IngestBatchParams<'_>,
    ) -> Result<IngestBatchResult, EngineError>;
}

/// Optional `afterTurn`: see the whole snapshot after a turn. When present, the host calls it
/// instead of `ingestBatch`/`ingest`.
pub trait AfterTurn: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// Quarantines the engine; logged.
    fn after_turn(&self, params: &AfterTurnParams<'_>) -> Result<(), EngineError>;
}

/// Optional `maintain`: housekeeping after bootstrap and after successful turns.
pub trait Maintain: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// Quarantines the engine; logged.
    fn maintain(&self, params: &MaintainParams<'_>) -> Result<MaintainResult, EngineError>;
}

/// Optional `prepareSubagentSpawn`: prepare context for a child run.
pub trait SubagentSpawn: Engine {
    /// Returns a rollback the host runs if the spawn then fails, or `None`.
    ///
    /// # Errors
    /// Fails closed: the spawn is refused and the engine quarantined.
    fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<SpawnRollback>, EngineError>;
}

/// Optional `onSubagentEnded`.
pub trait SubagentEnded: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// Quarantines the engine; logged.
    fn on_subagent_ended(&self, params: &SubagentEndedParams<'_>) -> Result<(), EngineError>;
}

/// Optional `callTool`: answer the tools declared in [`EngineInfo::tools`].
pub trait Tools: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// Returned to the model as a failed tool call.
    fn call_tool(&self, params: &ToolCallParams<'_>) -> Result<ToolCallResult, EngineError>;
}

/// Optional `commitTurn` (§8): commit one accepted durable turn, exactly once per
/// `advancement_key`. Declare [`EngineInfo::transcript_semantics`] with it.
pub trait CommitTurn: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// The turn stays queued and is offered again.
    fn commit_turn(&self, params: &CommitTurnParams<'_>) -> Result<CommitTurnStatus, EngineError>;
}

/// Optional `dispose`: called once per instance, on shutdown or reload (never per session).
///
/// On a hot reload the old instance is disposed once the last call on it has returned, while
/// the new build already serves; both builds are loaded side by side meanwhile. `dispose` must
/// release everything the instance holds and **join every thread it started**: the host
/// cannot see a library's threads, and a thread left running keeps executing the old build's
/// code after its instance is gone.
///
/// This is the contract that makes unloading possible. An operator may set
/// `plugins.entries.<id>.unloadOnReload: true`: then, after a reload, the old build's library
/// is closed (`dlclose`) as soon as its last instance has been disposed and dropped and the
/// host holds nothing else from it — so a thread of yours still running (or parked, or
/// sleeping) at that moment would execute unmapped code and crash the whole host. Join your
/// threads here, not in `Drop` alone; stop timers and background tasks; leave no callback
/// registered anywhere. (Thread-locals your code touches on the threads the host calls it on
/// are the host's concern: pincer runs such a library's code only on threads that end before
/// it closes the library. On your own threads they end with the thread — so join it.)
pub trait Dispose: Engine {
    /// See the trait.
    ///
    /// # Errors
    /// Logged.
    fn dispose(&self) -> Result<(), EngineError>;
}

/// What an engine factory is given.
#[derive(Clone, Copy, Debug)]
pub struct FactoryContext<'a> {
    params: &'a abi::FactoryParams<'a>,
}

impl<'a> FactoryContext<'a> {
    pub(crate) fn new(params: &'a abi::FactoryParams<'a>) -> Self {
        FactoryContext { params }
    }

    /// The engine id being created (a library that exports several engines creates each).
    pub fn engine_id(&self) -> &'a str {
        self.params.engine_id.as_str()
    }

    /// The entry's config as JSON text (`{}` when none).
    pub fn config_json(&self) -> &'a str {
        self.params.config_json.as_str()
    }

    /// The entry's config, deserialized. The host already validated it against the manifest's
    /// `configSchema`; this reads it into the engine's own type.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming what serde rejected.
    pub fn config<T: serde::de::DeserializeOwned>(&self) -> Result<T, EngineError> {
        let text = if self.config_json().trim().is_empty() {
            "{}"
        } else {
            self.config_json()
        };
        serde_json::from_str(text).map_err(|err| {
            EngineError::invalid_config(format!("config of engine \"{}\": {err}", self.engine_id()))
        })
    }

    /// The agent's directory.
    pub fn agent_dir(&self) -> Option<&'a Path> {
        opt_path(self.params.agent_dir)
    }

    /// The workspace directory.
    pub fn workspace_dir(&self) -> Option<&'a Path> {
        opt_path(self.params.workspace_dir)
    }

    /// The plugin's folder.
    pub fn plugin_dir(&self) -> Option<&'a Path> {
        opt_path(self.params.plugin_dir)
    }

    /// A directory of this engine's own (`$PINCER_HOME/state/engines/<id>/`), created by the
    /// host, for engines that keep a store; `None` when the host gives none.
    pub fn state_dir(&self) -> Option<&'a Path> {
        opt_path(self.params.state_dir)
    }
}

fn opt_path(value: ROption<RStr<'_>>) -> Option<&Path> {
    value.into_option().map(|s| Path::new(s.as_str()))
}

/// A completion request to the host's model (`llmComplete`).
///
/// ```
/// # use pincer_plugin_api::{LlmRequest, Message};
/// let messages = [Message::user("Summarise: …")];
/// let request = LlmRequest::new(&messages).system_prompt("You summarise.").max_tokens(512);
/// # let _ = request;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct LlmRequest<'a> {
    system_prompt: Option<&'a str>,
    messages: &'a [Message],
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    abort_signal: Option<&'a AbortSignal>,
}

impl<'a> LlmRequest<'a> {
    /// A request to complete `messages`.
    pub fn new(messages: &'a [Message]) -> Self {
        LlmRequest {
            system_prompt: None,
            messages,
            max_tokens: None,
            temperature: None,
            abort_signal: None,
        }
    }

    /// The system prompt.
    pub fn system_prompt(mut self, prompt: &'a str) -> Self {
        self.system_prompt = Some(prompt);
        self
    }

    /// The most tokens to produce.
    pub fn max_tokens(mut self, tokens: u64) -> Self {
        self.max_tokens = Some(tokens);
        self
    }

    /// Sampling temperature.
    pub fn temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Stops the model call when `signal` fires (pass the calling method's
    /// `params.host.abort_signal`).
    pub fn abort_signal(mut self, signal: &'a AbortSignal) -> Self {
        self.abort_signal = Some(signal);
        self
    }
}

/// The host's services, as an engine holds them. Cheap to clone.
pub struct Host {
    services: abi::HostServicesArc,
}

impl Clone for Host {
    fn clone(&self) -> Self {
        Host {
            services: share_host(&self.services),
        }
    }
}

/// Another handle to the same host services (a reference-count increment).
pub(crate) fn share_host(services: &abi::HostServicesArc) -> abi::HostServicesArc {
    pincer_plugin_abi::objects::share_host_services(services)
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Host { .. }")
    }
}

impl Host {
    pub(crate) fn new(services: abi::HostServicesArc) -> Self {
        Host { services }
    }

    /// Wraps a host's services object: for hosts that link an engine statically (pincer's
    /// built-in `legacy`, benchmarks) and so create it without a library's factory. Not part of
    /// the authoring API.
    #[doc(hidden)]
    pub fn from_services(services: abi::HostServicesArc) -> Self {
        Host { services }
    }

    /// Runs the host runtime's compaction: what an engine that does not own compaction
    /// answers `compact` with.
    ///
    /// # Errors
    /// Whatever the runtime's compaction reports.
    pub fn delegate_compaction_to_runtime(
        &self,
        params: &CompactParams<'_>,
    ) -> Result<CompactResult, EngineError> {
        self.services
            .delegate_compaction_to_runtime(params.raw)
            .into_result()
            .map(CompactResult::from_abi)
            .map_err(EngineError::from_abi)
    }

    /// Completes with the host's model; the answer is an assistant message.
    ///
    /// # Errors
    /// When the host has no model (capability `runtime-llm-complete` missing) or the call failed.
    pub fn llm_complete(&self, request: &LlmRequest<'_>) -> Result<Message, EngineError> {
        let raw = abi::LlmCompleteRequest {
            system_prompt: request.system_prompt.map(RStr::from_str).into(),
            messages: RSlice::from_slice(request.messages),
            max_tokens: request.max_tokens.into(),
            temperature: request.temperature.into(),
            abort_signal: request.abort_signal.into(),
        };
        self.services
            .llm_complete(&raw)
            .into_result()
            .map(|r| r.message)
            .map_err(EngineError::from_abi)
    }

    /// The host's token estimate of `messages` (§9.5).
    pub fn estimate_tokens(&self, messages: &[Message]) -> u64 {
        self.services.estimate_tokens(RSlice::from_slice(messages))
    }
}
