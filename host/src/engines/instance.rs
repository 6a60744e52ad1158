//! One live engine instance as the host holds it: its backend (see [`super::backend`]), a
//! host-owned copy of its info, and where it came from.
//!
//! Everything that comes back from a call is turned into host-owned data (errors, info, and
//! the results of a library closed after reload) or is a value of the library kept mapped,
//! or holds the library (a [`Rollback`]), so nothing from a plugin outlives its code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pincer_plugin_api::abi::latest::HostServicesArc;
use pincer_plugin_api::abi::latest::{
    AfterTurnParams, AssembleParams, AssembleResult, AssembledItem, BootstrapParams,
    BootstrapResult, CompactParams, CompactResult, EngineBox, EngineError, IngestBatchParams,
    IngestBatchResult, IngestParams, IngestResult, MaintainParams, MaintainResult, Message,
    OptionalMethods, SubagentEndedParams, SubagentSpawnParams, ToolCallParams, ToolCallResult,
    TurnMaintenanceMode,
};
use serde::Serialize;

pub use super::backend::Rollback;
use super::backend::{EngineBackend, InProcess};
use crate::config::ResultLimits;
use crate::plugins::library::{EngineDirs, LoadedLibrary};
use crate::types::{HostRequirement, HostRequirements, Method};

/// The kind of an engine call's failure; serialized as [`CallErrorKind::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallErrorKind {
    /// The engine returned an error.
    Failed,
    /// The engine panicked (caught inside the plugin).
    Panicked,
    /// The call was aborted.
    Aborted,
    /// The engine lacks the optional method.
    NotImplemented,
    /// The engine rejected its configuration.
    InvalidConfig,
    /// The call ran past its deadline.
    TimedOut,
    /// The engine's worker process died (a signal, an exit, a broken protocol): isolated
    /// engines only.
    Crashed,
}

impl CallErrorKind {
    /// A stable snake_case code (`failed`, `panicked`, `aborted`, `not_implemented`,
    /// `invalid_config`, `timed_out`, `crashed`): the serialized form.
    pub const fn code(self) -> &'static str {
        match self {
            CallErrorKind::Failed => "failed",
            CallErrorKind::Panicked => "panicked",
            CallErrorKind::Aborted => "aborted",
            CallErrorKind::NotImplemented => "not_implemented",
            CallErrorKind::InvalidConfig => "invalid_config",
            CallErrorKind::TimedOut => "timed_out",
            CallErrorKind::Crashed => "crashed",
        }
    }
}

/// Why an engine call failed, in host memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct EngineCallError {
    /// What kind of failure.
    pub kind: CallErrorKind,
    /// The message, as the engine (or host) gave it.
    pub message: String,
}

impl EngineCallError {
    /// A host-made error.
    pub fn new(kind: CallErrorKind, message: impl Into<String>) -> Self {
        EngineCallError {
            kind,
            message: message.into(),
        }
    }

    /// A stable snake_case code for machines: its kind's.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// Whether this is an abort (aborts never quarantine: docs/CONTRACT.md §4.4a).
    pub fn is_abort(&self) -> bool {
        self.kind == CallErrorKind::Aborted
    }
}

impl From<EngineError> for EngineCallError {
    fn from(err: EngineError) -> Self {
        let kind = match &err {
            EngineError::Failed(_) => CallErrorKind::Failed,
            EngineError::Panicked(_) => CallErrorKind::Panicked,
            EngineError::Aborted(_) => CallErrorKind::Aborted,
            EngineError::NotImplemented(_) => CallErrorKind::NotImplemented,
            EngineError::InvalidConfig(_) => CallErrorKind::InvalidConfig,
        };
        EngineCallError {
            kind,
            // A stranger's words: cut and cleaned before the host keeps, logs or prints them.
            // Its bytes, made UTF-8 first: an ABI-level stranger can hand over any.
            message: crate::types::sanitize_text(
                &super::checked::error_text(&err),
                crate::types::MAX_ENGINE_TEXT_LEN,
            ),
        }
    }
}

/// A tool an engine offers, host-owned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: serde_json::Value,
}

/// An engine's `info`, copied into host memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineDescriptor {
    /// Engine id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Whether it owns compaction.
    pub owns_compaction: bool,
    /// `foreground` or `background`.
    pub turn_maintenance_mode: &'static str,
    /// Requirements by operation (`agent-run`, …).
    pub host_requirements: HostRequirements,
    /// Accepted host params; `None` accepts all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_host_params: Option<Vec<String>>,
    /// Offered tools, sorted by name.
    pub tools: Vec<EngineTool>,
    /// Optional methods implemented, in the ABI's order (serialized as contract names).
    pub optional_methods: Vec<Method>,
    #[serde(skip)]
    methods: OptionalMethods,
}

/// The ABI's optional-method bits and the methods they stand for, in the ABI's order
/// ([`OptionalMethods::ALL`]).
const OPTIONAL_METHODS: [(u32, Method); 9] = [
    (OptionalMethods::BOOTSTRAP, Method::Bootstrap),
    (OptionalMethods::INGEST_BATCH, Method::IngestBatch),
    (OptionalMethods::AFTER_TURN, Method::AfterTurn),
    (OptionalMethods::MAINTAIN, Method::Maintain),
    (
        OptionalMethods::PREPARE_SUBAGENT_SPAWN,
        Method::PrepareSubagentSpawn,
    ),
    (OptionalMethods::ON_SUBAGENT_ENDED, Method::OnSubagentEnded),
    (OptionalMethods::DISPOSE, Method::Dispose),
    (OptionalMethods::CALL_TOOL, Method::CallTool),
    (OptionalMethods::COMMIT_TURN, Method::CommitTurn),
];

impl EngineDescriptor {
    pub(super) fn from_abi(info: &pincer_plugin_api::abi::latest::EngineInfo) -> Self {
        let host_requirements = info
            .host_requirements
            .iter()
            .map(|req| {
                (
                    req.operation,
                    HostRequirement {
                        required_capabilities: req
                            .required_capabilities
                            .iter()
                            .map(|c| c.to_string())
                            .collect(),
                        unsupported_message: req
                            .unsupported_message
                            .as_ref()
                            .map(|m| m.to_string())
                            .into_option(),
                    },
                )
            })
            .collect();
        let mut tools: Vec<EngineTool> = info
            .tools
            .iter()
            .map(|t| EngineTool {
                name: t.name.to_string(),
                description: t.description.to_string(),
                parameters: serde_json::from_str(&t.parameters_schema_json)
                    .unwrap_or(serde_json::Value::Null),
            })
            .collect();
        // Deterministic order: whatever reaches a prompt is sorted.
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        EngineDescriptor {
            id: info.id.to_string(),
            name: info.name.to_string(),
            version: info.version.to_string(),
            owns_compaction: info.owns_compaction,
            turn_maintenance_mode: match info.turn_maintenance_mode {
                TurnMaintenanceMode::Foreground => "foreground",
                TurnMaintenanceMode::Background => "background",
            },
            host_requirements,
            accepted_host_params: info
                .accepted_host_params
                .as_ref()
                .map(|v| v.iter().map(|p| p.to_string()).collect())
                .into_option(),
            tools,
            optional_methods: OPTIONAL_METHODS
                .into_iter()
                .filter(|(bit, _)| info.optional_methods.has(*bit))
                .map(|(_, method)| method)
                .collect(),
            methods: info.optional_methods,
        }
    }

    /// Whether the engine implements an optional method (an [`OptionalMethods`] constant).
    pub fn has(&self, method: u32) -> bool {
        self.methods.has(method)
    }
}

/// Where an engine instance came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum EngineOrigin {
    /// Linked into the host (`legacy`).
    Builtin,
    /// Loaded from a plugin library.
    Plugin {
        /// The plugin id.
        plugin_id: String,
        /// The private copy it was loaded from.
        library: String,
    },
}

/// A live engine: its backend plus the host-owned copy of its info.
pub struct EngineInstance {
    backend: Box<dyn EngineBackend>,
    descriptor: EngineDescriptor,
    origin: EngineOrigin,
    disposed: AtomicBool,
    /// The library, when it is closed once nothing from it is alive (`unloadOnReload`):
    /// the reaper holds it while the instance is disposed and dropped (after the backend).
    closable: Option<Arc<LoadedLibrary>>,
}

impl std::fmt::Debug for EngineInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineInstance")
            .field("id", &self.descriptor.id)
            .field("origin", &self.origin)
            .finish()
    }
}

impl EngineInstance {
    /// Wraps a created in-process engine object, reading its info once. `library` is the
    /// library the object came from (`None` when linked into the host).
    ///
    /// # Errors
    /// When `info` fails or panics (a contract failure).
    pub fn new(
        object: EngineBox,
        origin: EngineOrigin,
        library: Option<Arc<LoadedLibrary>>,
    ) -> Result<Self, EngineCallError> {
        Self::with_backend(Box::new(InProcess::new(object, library)), origin)
    }

    /// Wraps any backend, reading its info once, held to the default `info` caps.
    ///
    /// # Errors
    /// When `info` fails or panics, or breaks a cap (a contract failure).
    pub fn with_backend(
        backend: Box<dyn EngineBackend>,
        origin: EngineOrigin,
    ) -> Result<Self, EngineCallError> {
        Self::with_backend_limited(backend, origin, &ResultLimits::default())
    }

    /// Wraps any backend, reading its info once, held to the `info` caps of `limits`
    /// (`plugins.resultLimits`, see [`super::checked`]).
    ///
    /// # Errors
    /// When `info` fails or panics, holds text that is not UTF-8, or breaks a cap.
    pub fn with_backend_limited(
        backend: Box<dyn EngineBackend>,
        origin: EngineOrigin,
        limits: &ResultLimits,
    ) -> Result<Self, EngineCallError> {
        let descriptor = backend.describe(limits)?;
        Ok(EngineInstance {
            backend,
            descriptor,
            origin,
            disposed: AtomicBool::new(false),
            closable: None,
        })
    }

    /// Creates engine `engine_id` of a verified `library` with `config` (already validated
    /// against the manifest's schema by the caller) and the host's services; its `info` is held
    /// to `limits`.
    ///
    /// # Errors
    /// The factory's error or panic, or a failing `info`.
    pub fn from_library(
        library: &Arc<LoadedLibrary>,
        engine_id: &str,
        config: &serde_json::Value,
        dirs: &EngineDirs,
        host: HostServicesArc,
        limits: &ResultLimits,
    ) -> Result<Self, EngineCallError> {
        let object = library.new_engine_object(engine_id, config, dirs, host)?;
        let mut instance = Self::with_backend_limited(
            Box::new(InProcess::new(object, Some(Arc::clone(library)))),
            EngineOrigin::Plugin {
                plugin_id: library.manifest().id.clone(),
                library: library.copy_path().display().to_string(),
            },
            limits,
        )?;
        if library.unloads() {
            instance.closable = Some(Arc::clone(library));
        }
        Ok(instance)
    }

    /// The library the instance came from when that library is closed once nothing from it
    /// is alive (`plugins.entries.<id>.unloadOnReload`); `None` when it stays mapped.
    pub fn closable_library(&self) -> Option<&Arc<LoadedLibrary>> {
        self.closable.as_ref()
    }

    /// Creates engine `engine_id` of an isolated `library` in a worker process of its own
    /// (see [`super::isolation`]).
    ///
    /// # Errors
    /// The worker could not start, or the factory failed (its error, or how the worker died).
    pub fn from_isolated_library(
        library: &Arc<LoadedLibrary>,
        engine_id: &str,
        config: &serde_json::Value,
        dirs: &EngineDirs,
        host: HostServicesArc,
        confinement: super::isolation::settings::Confinement,
        limits: &ResultLimits,
    ) -> Result<Self, EngineCallError> {
        let start = super::isolation::process::WorkerStart {
            request: super::isolation::protocol::StartRequest {
                agent_dir: dirs.agent_dir.clone(),
                workspace_dir: dirs.workspace_dir.clone(),
                plugin_dir: Some(library.manifest().dir.to_string_lossy().into_owned()),
                state_dir: dirs
                    .engine_state_dir(engine_id)
                    .map(|d| d.to_string_lossy().into_owned()),
                ..super::isolation::protocol::StartRequest::new(
                    library.copy_path(),
                    library.facts().into(),
                    engine_id.to_owned(),
                    config.to_string(),
                    &confinement,
                )
            },
            settings: super::isolation::settings::WorkerSettings::from_environment()
                .map_err(|e| EngineCallError::new(CallErrorKind::Failed, e))?,
        };
        let backend = super::isolation::process::ProcessBackend::start(start, host)?;
        Self::with_backend_limited(
            Box::new(backend),
            EngineOrigin::Plugin {
                plugin_id: library.manifest().id.clone(),
                library: library.copy_path().display().to_string(),
            },
            limits,
        )
    }

    /// The round trip of an empty call (see [`EngineBackend::ping`]).
    ///
    /// # Errors
    /// A worker that is gone.
    pub fn ping(&self) -> Result<(), EngineCallError> {
        self.backend.ping()
    }

    /// The worker process of an isolated engine; `None` in process.
    pub fn worker(&self) -> Option<super::backend::WorkerInfo> {
        self.backend.isolation()
    }

    /// The engine's info.
    pub fn descriptor(&self) -> &EngineDescriptor {
        &self.descriptor
    }

    /// Where it came from.
    pub fn origin(&self) -> &EngineOrigin {
        &self.origin
    }

    /// `ingest`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn ingest(&self, params: &IngestParams<'_>) -> Result<IngestResult, EngineCallError> {
        self.backend.ingest(params)
    }

    /// `assemble`. The result refers to `params.messages` by index; see [`resolve_assembled`].
    ///
    /// # Errors
    /// The engine's error, or a contract failure when an index is out of range.
    pub fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineCallError> {
        let result = self.backend.assemble(params)?;
        let len = params.messages.len() as u64;
        for item in result.items.iter() {
            if let AssembledItem::Input { start, end } = item {
                if start > end || *end > len {
                    return Err(EngineCallError::new(
                        CallErrorKind::Failed,
                        format!(
                            "assemble returned messages {start}..{end}, but only {len} were given"
                        ),
                    ));
                }
            }
        }
        Ok(result)
    }

    /// `compact`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineCallError> {
        self.backend.compact(params)
    }

    /// `bootstrap`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn bootstrap(
        &self,
        params: &BootstrapParams<'_>,
    ) -> Result<BootstrapResult, EngineCallError> {
        self.backend.bootstrap(params)
    }

    /// `ingestBatch`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn ingest_batch(
        &self,
        params: &IngestBatchParams<'_>,
    ) -> Result<IngestBatchResult, EngineCallError> {
        self.backend.ingest_batch(params)
    }

    /// `afterTurn`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn after_turn(&self, params: &AfterTurnParams<'_>) -> Result<(), EngineCallError> {
        self.backend.after_turn(params)
    }

    /// `maintain`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn maintain(&self, params: &MaintainParams<'_>) -> Result<MaintainResult, EngineCallError> {
        self.backend.maintain(params)
    }

    /// `prepareSubagentSpawn`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<Rollback>, EngineCallError> {
        self.backend.prepare_subagent_spawn(params)
    }

    /// `onSubagentEnded`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn on_subagent_ended(
        &self,
        params: &SubagentEndedParams<'_>,
    ) -> Result<(), EngineCallError> {
        self.backend.on_subagent_ended(params)
    }

    /// `callTool`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn call_tool(
        &self,
        params: &ToolCallParams<'_>,
    ) -> Result<ToolCallResult, EngineCallError> {
        self.backend.call_tool(params)
    }

    /// `dispose`, at most once per instance; later calls are no-ops returning `Ok`.
    ///
    /// # Errors
    /// The engine's error.
    pub fn dispose(&self) -> Result<(), EngineCallError> {
        if self.disposed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.backend.dispose()
    }

    /// Whether `dispose` was called.
    pub fn is_disposed(&self) -> bool {
        self.disposed.load(Ordering::Acquire)
    }
}

/// The messages an assemble result stands for, in order: references into `input` for kept
/// messages, references into the result for new ones. Nothing is copied.
pub fn resolve_assembled<'a>(result: &'a AssembleResult, input: &'a [Message]) -> Vec<&'a Message> {
    result.resolve(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_method_bits_name_the_abis_methods_in_its_order() {
        let ours: Vec<(u32, &str)> = OPTIONAL_METHODS
            .iter()
            .map(|(bit, method)| (*bit, method.as_str()))
            .collect();
        assert_eq!(ours, OptionalMethods::ALL.to_vec());
    }
}
