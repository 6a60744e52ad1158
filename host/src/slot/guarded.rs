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
//! Every call is bounded (see [`crate::engines::bounded`]): `compact` by the compaction safety timeout
//! (180 s by default, reference §9.1); `maintain` and `bootstrap` by the same window unless
//! `callTimeoutsMs` names them (a lossless-style sweep can take minutes); every other method by
//! its per-call timeout. A call that overruns returns at its deadline, even when the engine
//! ignores its abort signal and never returns. A `compact` that overruns is what OpenClaw makes
//! it — an abort: `Compaction timed out` reaches the caller and the engine is **not**
//! quarantined (§4.4a, §9.1). Any other overrun quarantines the engine.
//!
//! The default engine (`legacy`) is never quarantined: it is its own fallback.

use std::sync::Arc;

use std::time::Duration;

use pincer_plugin_api::abi::latest::{
    AbortController, AbortSignal, AssembleResult, BootstrapResult, CompactResult, HostParams,
    IngestBatchResult, IngestResult, MaintainResult, OptionalMethods, SpawnRollbackBox,
    ToolCallResult,
};
use pincer_plugin_api::abi::ROption;
use serde::Serialize;

use super::projection::project_with;
use crate::config::{CallTimeouts, FallbackPolicy};
use crate::engines::bounded::{self, Deadline, Overrun};
use crate::engines::instance::{CallErrorKind, EngineCallError, EngineDescriptor, EngineInstance};
use crate::engines::request::{
    AfterTurnRequest, AssembleRequest, BootstrapRequest, CompactRequest, IngestBatchRequest,
    IngestRequest, MaintainRequest, SubagentEndedRequest, SubagentSpawnRequest, ToolCallRequest,
};
use crate::slot::quarantine::Quarantine;
use crate::types::{HostOperation, Method, Owner};

/// The default compaction safety timeout (reference §9.1).
pub const DEFAULT_COMPACTION_TIMEOUT: Duration = Duration::from_secs(180);

/// The message of a compaction that ran past its deadline.
pub const COMPACTION_TIMED_OUT: &str = "Compaction timed out";

/// How long each kind of call may take.
#[derive(Debug, Clone, Default)]
pub struct Timeouts {
    /// Per-method deadlines of everything but `compact`.
    pub calls: CallTimeouts,
    /// The compaction safety timeout; `None`: 180 s.
    pub compact: Option<Duration>,
}

impl Timeouts {
    /// The deadline window of `method`: the compaction window for `compact`, and for
    /// `maintain` and `bootstrap` unless `callTimeoutsMs` names them; else the per-call one.
    pub fn for_method(&self, method: Method) -> Duration {
        let compaction = self.compact.unwrap_or(DEFAULT_COMPACTION_TIMEOUT);
        match method {
            Method::Compact => compaction,
            Method::Maintain | Method::Bootstrap if !self.calls.0.contains_key(method.as_str()) => {
                compaction
            }
            _ => self.calls.for_method(method),
        }
    }
}

/// The reason text of the canned results.
pub const DOWNGRADED_REASON: &str = "context engine downgraded to legacy";

/// An operation's failure as the guard reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("context engine \"{engine_id}\" {operation} failed: {error}")]
pub struct GuardError {
    /// The engine that failed.
    pub engine_id: String,
    /// The operation.
    pub operation: Method,
    /// The original error.
    pub error: EngineCallError,
}

impl GuardError {
    /// A stable snake_case code for machines: the original error's.
    pub fn code(&self) -> &'static str {
        self.error.code()
    }
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
    owner: Option<Owner>,
    primary: Arc<EngineInstance>,
    fallback: Arc<EngineInstance>,
    quarantine: Arc<Quarantine>,
    policy: FallbackPolicy,
    timeouts: Timeouts,
}

impl std::fmt::Debug for GuardedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedEngine")
            .field("id", &self.id)
            .finish()
    }
}

/// Whether `err` is an abort: an `Aborted` error, or any error whose message says
/// abort/cancel (§4.4a) — and only when *the host* fired the call's signal. The engine sees a
/// read-only signal, and even an engine that forges it (writing through a raw pointer) cannot
/// make its failure pass for an abort: the evidence is the controller's own record.
fn is_abort(err: &EngineCallError, abort: &AbortController) -> bool {
    if !abort.fired() {
        // An engine cannot opt out of quarantine by calling its failures aborts.
        return false;
    }
    let text = err.message.to_ascii_lowercase();
    err.is_abort()
        || text.contains("abort")
        || text.contains("cancelled")
        || text.contains("canceled")
}

type Call<T> = Box<dyn FnOnce(&EngineInstance, &AbortSignal) -> Result<T, EngineCallError> + Send>;

impl GuardedEngine {
    /// Guards `primary` (registered as `id` by `owner`) with `fallback`.
    pub fn new(
        id: &str,
        owner: Option<Owner>,
        primary: Arc<EngineInstance>,
        fallback: Arc<EngineInstance>,
        quarantine: Arc<Quarantine>,
        policy: FallbackPolicy,
    ) -> Self {
        GuardedEngine {
            id: id.to_owned(),
            owner,
            primary,
            fallback,
            quarantine,
            policy,
            timeouts: Timeouts::default(),
        }
    }

    /// Sets the call deadlines.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
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

    /// Checks, before an operation starts, that `host` offers what the engine requires for
    /// `operation` (reference §5). Reads `info` as the guard does: a quarantined engine is
    /// legacy, which requires nothing.
    ///
    /// # Errors
    /// The contract's refusal message.
    pub fn check_host(
        &self,
        operation: HostOperation,
        host: &crate::slot::requirements::HostDescriptor,
    ) -> Result<(), crate::slot::requirements::HostSupportError> {
        let info = self.info();
        crate::slot::requirements::check_host_support(
            &info.id,
            &info.host_requirements,
            operation,
            host,
        )
    }

    /// The configured engine instance (for dispose and diagnostics).
    pub fn primary(&self) -> &Arc<EngineInstance> {
        &self.primary
    }

    /// Runs one call of `instance` under its deadline.
    fn bounded<T: Send + 'static>(
        &self,
        operation: Method,
        instance: &Arc<EngineInstance>,
        abort: &Arc<AbortController>,
        call: Call<T>,
    ) -> Result<T, EngineCallError> {
        let engine = Arc::clone(instance);
        let controller = Arc::clone(abort);
        self.within_deadline(operation, abort, move || call(&engine, controller.signal()))
    }

    /// Runs `call` on a worker under `operation`'s deadline, mapping an overrun to an error.
    fn within_deadline<T: Send + 'static>(
        &self,
        operation: Method,
        abort: &Arc<AbortController>,
        call: impl FnOnce() -> Result<T, EngineCallError> + Send + 'static,
    ) -> Result<T, EngineCallError> {
        let window = self.timeouts.for_method(operation);
        match bounded::run(Deadline::new(window), Arc::clone(abort), call) {
            Ok(result) => result,
            Err(Overrun::Aborted) => Err(EngineCallError::new(
                CallErrorKind::Aborted,
                "Context engine operation aborted.",
            )),
            Err(Overrun::TimedOut { waited }) => Err(EngineCallError::new(
                CallErrorKind::TimedOut,
                if operation == Method::Compact {
                    COMPACTION_TIMED_OUT.to_owned()
                } else {
                    format!("{operation} timed out after {} ms", waited.as_millis())
                },
            )),
        }
    }

    /// Runs a rollback handle from `prepareSubagentSpawn`, bounded like any call.
    ///
    /// # Errors
    /// The rollback's error, or its timeout.
    pub fn rollback(&self, handle: SpawnRollbackBox) -> Result<(), EngineCallError> {
        self.within_deadline(
            Method::Rollback,
            &Arc::new(AbortController::new()),
            move || {
                handle
                    .rollback()
                    .into_result()
                    .map_err(EngineCallError::from)
            },
        )
    }

    /// Disposes the configured engine instance, bounded by the cleanup deadline (once per
    /// instance; later calls do nothing).
    ///
    /// # Errors
    /// The engine's error, or its timeout.
    pub fn dispose(&self) -> Result<(), EngineCallError> {
        let engine = Arc::clone(&self.primary);
        self.within_deadline(
            Method::Dispose,
            &Arc::new(AbortController::new()),
            move || engine.dispose(),
        )
    }

    /// The core of every guarded call.
    fn run<T: Send + 'static>(
        &self,
        operation: Method,
        abort: Arc<AbortController>,
        fail_closed: bool,
        primary: Call<T>,
        fallback: Call<T>,
    ) -> Result<Guarded<T>, GuardError> {
        let fail = |error: EngineCallError| GuardError {
            engine_id: self.id.clone(),
            operation,
            error,
        };
        let answer = |answered_by: &str, failure, was_quarantined| Answer {
            answered_by: answered_by.to_owned(),
            failure,
            was_quarantined,
        };
        if abort.fired() {
            return Err(fail(EngineCallError::new(
                CallErrorKind::Aborted,
                "Context engine operation aborted.",
            )));
        }
        if self.is_default() {
            return self
                .bounded(operation, &self.primary, &abort, primary)
                .map_err(fail)
                .map(|value| Guarded {
                    value,
                    answer: answer(&self.id, None, false),
                });
        }
        let fallback_id = self.fallback.descriptor().id.clone();
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
            return self
                .bounded(operation, &self.fallback, &abort, fallback)
                .map_err(fail)
                .map(|value| Guarded {
                    value,
                    answer: answer(&fallback_id, None, true),
                });
        }
        match self.bounded(operation, &self.primary, &abort, primary) {
            Ok(value) => Ok(Guarded {
                value,
                answer: answer(&self.id, None, false),
            }),
            Err(error) if error.kind != CallErrorKind::TimedOut && is_abort(&error, &abort) => {
                Err(fail(error))
            }
            // A compaction past its safety timeout is an abort, as in OpenClaw: the caller
            // gets `Compaction timed out`, and the engine stays in service.
            Err(error) if operation == Method::Compact && error.kind == CallErrorKind::TimedOut => {
                Err(fail(error))
            }
            Err(mut error) => {
                if error.kind == CallErrorKind::Aborted {
                    // The host never fired this call's signal: the "abort" is the engine's own
                    // claim, so it is reported as what it is, a failure.
                    error = EngineCallError::new(
                        CallErrorKind::Failed,
                        format!(
                            "claimed an abort the host never asked for: {}",
                            error.message
                        ),
                    );
                }
                self.quarantine.record(
                    &self.id,
                    self.owner.as_ref(),
                    operation.as_str(),
                    &error.message,
                );
                if fail_closed || self.policy == FallbackPolicy::Strict {
                    return Err(fail(error));
                }
                // The fallback gets a fresh signal: the primary's may have fired on timeout.
                match self.bounded(
                    operation,
                    &self.fallback,
                    &Arc::new(AbortController::new()),
                    fallback,
                ) {
                    Ok(value) => Ok(Guarded {
                        value,
                        answer: answer(&fallback_id, Some(error), false),
                    }),
                    // If the fallback fails too, the original error is what the caller sees.
                    Err(_) => Err(fail(error)),
                }
            }
        }
    }

    fn projector(
        &self,
        method: Method,
    ) -> impl Fn(HostParams<'_>) -> HostParams<'_> + Send + Clone + 'static {
        let accepted = self.primary.descriptor().accepted_host_params.clone();
        move |host| project_with(accepted.as_deref(), method, &host)
    }

    /// `assemble`, falling back to legacy's pass-through.
    ///
    /// # Errors
    /// An abort, strict policy, a timeout with strict policy, or both engines failing.
    pub fn assemble(
        &self,
        request: Arc<AssembleRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Guarded<AssembleResult>, GuardError> {
        let project = self.projector(Method::Assemble);
        let fallback_request = Arc::clone(&request);
        self.run(
            Method::Assemble,
            abort,
            false,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.assemble(p))),
            Box::new(move |legacy, abort| {
                fallback_request.with_abi(abort, |h| h, |p| legacy.assemble(p))
            }),
        )
    }

    /// `ingest`, falling back to legacy (`{ingested:false}`).
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn ingest(
        &self,
        request: Arc<IngestRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Guarded<IngestResult>, GuardError> {
        let project = self.projector(Method::Ingest);
        let fallback_request = Arc::clone(&request);
        self.run(
            Method::Ingest,
            abort,
            false,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.ingest(p))),
            Box::new(move |legacy, abort| {
                fallback_request.with_abi(abort, |h| h, |p| legacy.ingest(p))
            }),
        )
    }

    /// `compact`: bounded by the compaction safety timeout, fails closed.
    ///
    /// # Errors
    /// The engine's original error (it is also quarantined), `Compaction timed out`, or an abort.
    pub fn compact(
        &self,
        request: Arc<CompactRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Guarded<CompactResult>, GuardError> {
        let project = self.projector(Method::Compact);
        let fallback_request = Arc::clone(&request);
        self.run(
            Method::Compact,
            abort,
            true,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.compact(p))),
            Box::new(move |legacy, abort| {
                fallback_request.with_abi(abort, |h| h, |p| legacy.compact(p))
            }),
        )
    }

    /// `bootstrap`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn bootstrap(
        &self,
        request: Arc<BootstrapRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Option<Guarded<BootstrapResult>>, GuardError> {
        if !self.primary.descriptor().has(OptionalMethods::BOOTSTRAP) {
            return Ok(None);
        }
        let project = self.projector(Method::Bootstrap);
        let fallback_request = Arc::clone(&request);
        self.run(
            Method::Bootstrap,
            abort,
            false,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.bootstrap(p))),
            Box::new(move |legacy, abort| {
                if legacy.descriptor().has(OptionalMethods::BOOTSTRAP) {
                    fallback_request.with_abi(abort, |h| h, |p| legacy.bootstrap(p))
                } else {
                    Ok(BootstrapResult {
                        bootstrapped: false,
                        imported_messages: ROption::RNone,
                        reason: ROption::RSome(DOWNGRADED_REASON.into()),
                    })
                }
            }),
        )
        .map(Some)
    }

    /// `ingestBatch`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn ingest_batch(
        &self,
        request: Arc<IngestBatchRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Option<Guarded<IngestBatchResult>>, GuardError> {
        if !self.primary.descriptor().has(OptionalMethods::INGEST_BATCH) {
            return Ok(None);
        }
        let project = self.projector(Method::IngestBatch);
        let fallback_request = Arc::clone(&request);
        self.run(
            Method::IngestBatch,
            abort,
            false,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.ingest_batch(p))),
            Box::new(move |legacy, abort| {
                if legacy.descriptor().has(OptionalMethods::INGEST_BATCH) {
                    fallback_request.with_abi(abort, |h| h, |p| legacy.ingest_batch(p))
                } else {
                    Ok(IngestBatchResult { ingested_count: 0 })
                }
            }),
        )
        .map(Some)
    }

    /// `afterTurn`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn after_turn(
        &self,
        request: Arc<AfterTurnRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Option<Guarded<()>>, GuardError> {
        if !self.primary.descriptor().has(OptionalMethods::AFTER_TURN) {
            return Ok(None);
        }
        let project = self.projector(Method::AfterTurn);
        let fallback_request = Arc::clone(&request);
        self.run(
            Method::AfterTurn,
            abort,
            false,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.after_turn(p))),
            Box::new(move |legacy, abort| {
                if legacy.descriptor().has(OptionalMethods::AFTER_TURN) {
                    fallback_request.with_abi(abort, |h| h, |p| legacy.after_turn(p))
                } else {
                    Ok(())
                }
            }),
        )
        .map(Some)
    }

    /// `maintain`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn maintain(
        &self,
        request: Arc<MaintainRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Option<Guarded<MaintainResult>>, GuardError> {
        if !self.primary.descriptor().has(OptionalMethods::MAINTAIN) {
            return Ok(None);
        }
        let project = self.projector(Method::Maintain);
        let fallback_request = Arc::clone(&request);
        self.run(
            Method::Maintain,
            abort,
            false,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.maintain(p))),
            Box::new(move |legacy, abort| {
                if legacy.descriptor().has(OptionalMethods::MAINTAIN) {
                    fallback_request.with_abi(abort, |h| h, |p| legacy.maintain(p))
                } else {
                    Ok(MaintainResult {
                        changed: false,
                        bytes_freed: 0,
                        rewritten_entries: 0,
                        reason: ROption::RSome(DOWNGRADED_REASON.into()),
                    })
                }
            }),
        )
        .map(Some)
    }

    /// `callTool` of a tool the engine declared; `Ok(None)` when the engine has no `callTool`.
    /// When the engine fails (and is quarantined), the model gets an error result: `legacy`
    /// declares no tools.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn call_tool(
        &self,
        request: Arc<ToolCallRequest>,
        abort: Arc<AbortController>,
    ) -> Result<Option<Guarded<ToolCallResult>>, GuardError> {
        if !self.primary.descriptor().has(OptionalMethods::CALL_TOOL) {
            return Ok(None);
        }
        let project = self.projector(Method::CallTool);
        let tool = Arc::clone(&request.tool_name);
        self.run(
            Method::CallTool,
            abort,
            false,
            Box::new(move |e, abort| request.with_abi(abort, project, |p| e.call_tool(p))),
            Box::new(move |_, _| {
                Ok(ToolCallResult {
                    content: format!(
                        "Tool {tool} is unavailable: its context engine failed and was quarantined."
                    )
                    .into(),
                    is_error: true,
                })
            }),
        )
        .map(Some)
    }

    /// `prepareSubagentSpawn`: fails closed. `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// The engine's original error (it is also quarantined).
    pub fn prepare_subagent_spawn(
        &self,
        request: Arc<SubagentSpawnRequest>,
    ) -> Result<Option<Guarded<Option<SpawnRollbackBox>>>, GuardError> {
        if !self
            .primary
            .descriptor()
            .has(OptionalMethods::PREPARE_SUBAGENT_SPAWN)
        {
            return Ok(None);
        }
        self.run(
            Method::PrepareSubagentSpawn,
            Arc::new(AbortController::new()),
            true,
            Box::new(move |e, _| request.with_abi(|p| e.prepare_subagent_spawn(p))),
            Box::new(|_, _| Ok(None)),
        )
        .map(Some)
    }

    /// `onSubagentEnded`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn on_subagent_ended(
        &self,
        request: Arc<SubagentEndedRequest>,
    ) -> Result<Option<Guarded<()>>, GuardError> {
        if !self
            .primary
            .descriptor()
            .has(OptionalMethods::ON_SUBAGENT_ENDED)
        {
            return Ok(None);
        }
        self.run(
            Method::OnSubagentEnded,
            Arc::new(AbortController::new()),
            false,
            Box::new(move |e, _| request.with_abi(|p| e.on_subagent_ended(p))),
            Box::new(|_, _| Ok(())),
        )
        .map(Some)
    }
}

#[cfg(test)]
mod timeout_tests {
    use super::*;

    #[test]
    fn maintain_and_bootstrap_get_the_compaction_window_unless_named() {
        let mut timeouts = Timeouts::default();
        assert_eq!(
            timeouts.for_method(Method::Maintain),
            DEFAULT_COMPACTION_TIMEOUT
        );
        assert_eq!(
            timeouts.for_method(Method::Bootstrap),
            DEFAULT_COMPACTION_TIMEOUT
        );
        assert_eq!(
            timeouts.for_method(Method::Assemble),
            crate::config::DEFAULT_CALL_TIMEOUT
        );
        timeouts.compact = Some(Duration::from_secs(600));
        timeouts.calls.0.insert("maintain".into(), 5_000);
        timeouts.calls.0.insert("default".into(), 7_000);
        assert_eq!(
            timeouts.for_method(Method::Maintain),
            Duration::from_secs(5)
        );
        assert_eq!(
            timeouts.for_method(Method::Bootstrap),
            Duration::from_secs(600)
        );
        assert_eq!(
            timeouts.for_method(Method::AfterTurn),
            Duration::from_secs(7)
        );
    }
}
