//! The guarded engine: what the host calls for one operation. It applies, in order, the
//! abort check, quarantine routing, host-parameter projection (reference §6.1) and the failure
//! rules of runtime quarantine (§4):
//!
//! - an abort never quarantines;
//! - the first failure quarantines the engine for the process (first failure wins);
//! - `compact` and `prepareSubagentSpawn` fail closed: the original error returns to the caller;
//! - every other method is answered by `legacy`'s same method, or the canned results of §4.5
//!   when legacy lacks it; if legacy fails too, the original error is returned;
//! - while quarantined, `info` reads as legacy's, so `ownsCompaction` and `hostRequirements`
//!   vanish;
//! - with `plugins.contextEngineFallback: "strict"`, the error is returned instead of falling back.
//!
//! The default engine (`legacy`) is never guarded: it is its own fallback.

use std::sync::Arc;

use pincer_plugin_api::abi::v1::{
    AbortSignal, AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CompactParams, CompactResult, HostParams, IngestBatchParams, IngestBatchResult, IngestParams,
    IngestResult, MaintainParams, MaintainResult, OptionalMethods, SpawnRollbackBox,
    SubagentEndedParams, SubagentSpawnParams,
};
use pincer_plugin_api::abi::ROption;
use serde::Serialize;

use crate::config::FallbackPolicy;
use crate::engine::{CallErrorKind, EngineCallError, EngineDescriptor, EngineInstance};
use crate::quarantine::Quarantine;

/// The reason text of the canned results.
pub const DOWNGRADED_REASON: &str = "context engine downgraded to legacy";

/// An operation's failure as the guard reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("context engine \"{engine_id}\" {operation} failed: {error}")]
pub struct GuardError {
    /// The engine that failed.
    pub engine_id: String,
    /// The operation.
    pub operation: &'static str,
    /// The original error.
    pub error: EngineCallError,
}

/// Who answered a guarded call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The engine id whose code produced the result (`legacy` on fallback).
    pub answered_by: String,
    /// When the configured engine failed on this call: its error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<EngineCallError>,
    /// Whether the engine was already quarantined before this call.
    pub was_quarantined: bool,
}

/// A guarded call's result and who produced it.
#[derive(Debug)]
pub struct Guarded<T> {
    /// The result.
    pub value: T,
    /// Who answered.
    pub answer: Answer,
}

/// The configured engine behind quarantine, with `legacy` as its fallback.
pub struct GuardedEngine {
    id: String,
    owner: Option<String>,
    primary: Arc<EngineInstance>,
    fallback: Arc<EngineInstance>,
    quarantine: Arc<Quarantine>,
    policy: FallbackPolicy,
}

impl std::fmt::Debug for GuardedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedEngine")
            .field("id", &self.id)
            .finish()
    }
}

/// Whether `err` is an abort: an `Aborted` error, or any error while the signal had fired whose
/// message says abort/cancel (§4.4a).
fn is_abort(err: &EngineCallError, signal: Option<&AbortSignal>) -> bool {
    if err.is_abort() {
        return true;
    }
    let fired = signal.is_some_and(|s| s.is_aborted());
    let text = err.message.to_ascii_lowercase();
    fired && (text.contains("abort") || text.contains("cancelled") || text.contains("canceled"))
}

fn signal<'a>(host: &HostParams<'a>) -> Option<&'a AbortSignal> {
    host.abort_signal.into_option()
}

impl GuardedEngine {
    /// Guards `primary` (registered as `id` by `owner`) with `fallback`.
    pub fn new(
        id: &str,
        owner: Option<&str>,
        primary: Arc<EngineInstance>,
        fallback: Arc<EngineInstance>,
        quarantine: Arc<Quarantine>,
        policy: FallbackPolicy,
    ) -> Self {
        GuardedEngine {
            id: id.to_owned(),
            owner: owner.map(str::to_owned),
            primary,
            fallback,
            quarantine,
            policy,
        }
    }

    /// The id the engine was selected as.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn is_default(&self) -> bool {
        Arc::ptr_eq(&self.primary, &self.fallback)
    }

    /// Whether the engine is quarantined now.
    pub fn is_quarantined(&self) -> bool {
        !self.is_default() && self.quarantine.is_quarantined(&self.id)
    }

    /// The engine's info — legacy's while quarantined.
    pub fn info(&self) -> &EngineDescriptor {
        if self.is_quarantined() {
            self.fallback.descriptor()
        } else {
            self.primary.descriptor()
        }
    }

    /// The configured engine instance (for dispose and diagnostics).
    pub fn primary(&self) -> &Arc<EngineInstance> {
        &self.primary
    }

    /// Host-parameter projection (§6.1): keep a host param when the engine declared none,
    /// listed it, or — for `compact` — it is the abort signal.
    pub fn project<'a>(&self, method: &str, host: &HostParams<'a>) -> HostParams<'a> {
        project(self.primary.descriptor(), method, host)
    }

    /// The core of every guarded call.
    fn run<T>(
        &self,
        operation: &'static str,
        abort: Option<&AbortSignal>,
        fail_closed: bool,
        primary: impl FnOnce(&EngineInstance) -> Result<T, EngineCallError>,
        fallback: impl FnOnce(&EngineInstance) -> Result<T, EngineCallError>,
    ) -> Result<Guarded<T>, GuardError> {
        let fail = |error: EngineCallError| GuardError {
            engine_id: self.id.clone(),
            operation,
            error,
        };
        if abort.is_some_and(|s| s.is_aborted()) {
            return Err(fail(EngineCallError::new(
                CallErrorKind::Aborted,
                "Context engine operation aborted.",
            )));
        }
        if self.is_default() {
            return primary(&self.primary).map_err(fail).map(|value| Guarded {
                value,
                answer: Answer {
                    answered_by: self.id.clone(),
                    failure: None,
                    was_quarantined: false,
                },
            });
        }
        if self.quarantine.is_quarantined(&self.id) {
            if self.policy == FallbackPolicy::Strict {
                let reason = self
                    .quarantine
                    .get(&self.id)
                    .map(|r| r.reason)
                    .unwrap_or_default();
                return Err(fail(EngineCallError::new(
                    CallErrorKind::Failed,
                    format!("engine is quarantined ({reason}) and plugins.contextEngineFallback is \"strict\""),
                )));
            }
            return fallback(&self.fallback).map_err(fail).map(|value| Guarded {
                value,
                answer: Answer {
                    answered_by: self.fallback.descriptor().id.clone(),
                    failure: None,
                    was_quarantined: true,
                },
            });
        }
        match primary(&self.primary) {
            Ok(value) => Ok(Guarded {
                value,
                answer: Answer {
                    answered_by: self.id.clone(),
                    failure: None,
                    was_quarantined: false,
                },
            }),
            Err(error) if is_abort(&error, abort) => Err(fail(error)),
            Err(error) => {
                self.quarantine
                    .record(&self.id, self.owner.as_deref(), operation, &error.message);
                if fail_closed || self.policy == FallbackPolicy::Strict {
                    return Err(fail(error));
                }
                match fallback(&self.fallback) {
                    Ok(value) => Ok(Guarded {
                        value,
                        answer: Answer {
                            answered_by: self.fallback.descriptor().id.clone(),
                            failure: Some(error),
                            was_quarantined: false,
                        },
                    }),
                    // If the fallback fails too, the original error is what the caller sees.
                    Err(_) => Err(fail(error)),
                }
            }
        }
    }

    /// `assemble`, falling back to legacy's pass-through.
    ///
    /// # Errors
    /// An abort, strict policy, or both engines failing.
    pub fn assemble(
        &self,
        params: &AssembleParams<'_>,
    ) -> Result<Guarded<AssembleResult>, GuardError> {
        let projected = AssembleParams {
            host: self.project("assemble", &params.host),
            ..*params
        };
        self.run(
            "assemble",
            signal(&params.host),
            false,
            |e| e.assemble(&projected),
            |legacy| legacy.assemble(params),
        )
    }

    /// `ingest`, falling back to legacy (`{ingested:false}`).
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn ingest(&self, params: &IngestParams<'_>) -> Result<Guarded<IngestResult>, GuardError> {
        let projected = IngestParams {
            host: self.project("ingest", &params.host),
            ..*params
        };
        self.run(
            "ingest",
            signal(&params.host),
            false,
            |e| e.ingest(&projected),
            |legacy| legacy.ingest(params),
        )
    }

    /// `compact`: fails closed.
    ///
    /// # Errors
    /// The engine's original error (it is also quarantined), or an abort.
    pub fn compact(
        &self,
        params: &CompactParams<'_>,
    ) -> Result<Guarded<CompactResult>, GuardError> {
        let projected = CompactParams {
            host: self.project("compact", &params.host),
            ..*params
        };
        self.run(
            "compact",
            signal(&params.host),
            true,
            |e| e.compact(&projected),
            |legacy| legacy.compact(params),
        )
    }

    /// `bootstrap`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn bootstrap(
        &self,
        params: &BootstrapParams<'_>,
    ) -> Result<Option<Guarded<BootstrapResult>>, GuardError> {
        if !self.info().has(OptionalMethods::BOOTSTRAP) {
            return Ok(None);
        }
        let projected = BootstrapParams {
            host: self.project("bootstrap", &params.host),
            ..*params
        };
        self.run(
            "bootstrap",
            signal(&params.host),
            false,
            |e| e.bootstrap(&projected),
            |legacy| {
                if legacy.descriptor().has(OptionalMethods::BOOTSTRAP) {
                    legacy.bootstrap(params)
                } else {
                    Ok(BootstrapResult {
                        bootstrapped: false,
                        imported_messages: ROption::RNone,
                        reason: ROption::RSome(DOWNGRADED_REASON.into()),
                    })
                }
            },
        )
        .map(Some)
    }

    /// `ingestBatch`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn ingest_batch(
        &self,
        params: &IngestBatchParams<'_>,
    ) -> Result<Option<Guarded<IngestBatchResult>>, GuardError> {
        if !self.info().has(OptionalMethods::INGEST_BATCH) {
            return Ok(None);
        }
        let projected = IngestBatchParams {
            host: self.project("ingestBatch", &params.host),
            ..*params
        };
        self.run(
            "ingestBatch",
            signal(&params.host),
            false,
            |e| e.ingest_batch(&projected),
            |legacy| {
                if legacy.descriptor().has(OptionalMethods::INGEST_BATCH) {
                    legacy.ingest_batch(params)
                } else {
                    Ok(IngestBatchResult { ingested_count: 0 })
                }
            },
        )
        .map(Some)
    }

    /// `afterTurn`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn after_turn(
        &self,
        params: &AfterTurnParams<'_>,
    ) -> Result<Option<Guarded<()>>, GuardError> {
        if !self.info().has(OptionalMethods::AFTER_TURN) {
            return Ok(None);
        }
        let projected = AfterTurnParams {
            host: self.project("afterTurn", &params.host),
            ..*params
        };
        self.run(
            "afterTurn",
            signal(&params.host),
            false,
            |e| e.after_turn(&projected),
            |legacy| {
                if legacy.descriptor().has(OptionalMethods::AFTER_TURN) {
                    legacy.after_turn(params)
                } else {
                    Ok(())
                }
            },
        )
        .map(Some)
    }

    /// `maintain`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn maintain(
        &self,
        params: &MaintainParams<'_>,
    ) -> Result<Option<Guarded<MaintainResult>>, GuardError> {
        if !self.info().has(OptionalMethods::MAINTAIN) {
            return Ok(None);
        }
        let projected = MaintainParams {
            host: self.project("maintain", &params.host),
            ..*params
        };
        self.run(
            "maintain",
            signal(&params.host),
            false,
            |e| e.maintain(&projected),
            |legacy| {
                if legacy.descriptor().has(OptionalMethods::MAINTAIN) {
                    legacy.maintain(params)
                } else {
                    Ok(MaintainResult {
                        changed: false,
                        bytes_freed: 0,
                        rewritten_entries: 0,
                        reason: ROption::RSome(DOWNGRADED_REASON.into()),
                    })
                }
            },
        )
        .map(Some)
    }

    /// `prepareSubagentSpawn`: fails closed. `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// The engine's original error (it is also quarantined).
    pub fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<Guarded<Option<SpawnRollbackBox>>>, GuardError> {
        if !self.info().has(OptionalMethods::PREPARE_SUBAGENT_SPAWN) {
            return Ok(None);
        }
        self.run(
            "prepareSubagentSpawn",
            None,
            true,
            |e| e.prepare_subagent_spawn(params),
            |_| Ok(None),
        )
        .map(Some)
    }

    /// `onSubagentEnded`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn on_subagent_ended(
        &self,
        params: &SubagentEndedParams<'_>,
    ) -> Result<Option<Guarded<()>>, GuardError> {
        if !self.info().has(OptionalMethods::ON_SUBAGENT_ENDED) {
            return Ok(None);
        }
        self.run(
            "onSubagentEnded",
            None,
            false,
            |e| e.on_subagent_ended(params),
            |_| Ok(()),
        )
        .map(Some)
    }
}

/// Host-parameter projection (§6.1) for an engine's `info`.
pub fn project<'a>(info: &EngineDescriptor, method: &str, host: &HostParams<'a>) -> HostParams<'a> {
    let Some(accepted) = &info.accepted_host_params else {
        return *host;
    };
    let keep = |name: &str| accepted.iter().any(|p| p == name);
    HostParams {
        session_key: if keep("sessionKey") {
            host.session_key
        } else {
            ROption::RNone
        },
        prompt: if keep("prompt") {
            host.prompt
        } else {
            ROption::RNone
        },
        runtime_settings: if keep("runtimeSettings") {
            host.runtime_settings
        } else {
            ROption::RNone
        },
        session_target: if keep("sessionTarget") {
            host.session_target
        } else {
            ROption::RNone
        },
        runtime_context_json: if keep("runtimeContext") {
            host.runtime_context_json
        } else {
            ROption::RNone
        },
        abort_signal: if keep("abortSignal") || method == "compact" {
            host.abort_signal
        } else {
            ROption::RNone
        },
    }
}
