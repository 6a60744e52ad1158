//! The guarded engine: what the host calls for one operation. It applies, in order, the
//! abort check, quarantine routing, host-parameter projection (docs/CONTRACT.md §6.1) and the failure
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
//! (180 s by default, docs/CONTRACT.md §9.1); `maintain` and `bootstrap` by the same window unless
//! `callTimeoutsMs` names them (a lossless-style sweep can take minutes); every other method by
//! its per-call timeout. A call that overruns returns at its deadline, even when the engine
//! ignores its abort signal and never returns (inline on a session worker: its work's
//! submitter gets the timeout at the deadline plus a grace). A `compact` that overruns is what
//! OpenClaw makes it — an abort: `Compaction timed out` reaches the caller and the engine is
//! **not** quarantined (§4.4a, §9.1). Any other overrun quarantines the engine.
//!
//! The default engine (`legacy`) is never quarantined: it is its own fallback.
//!
//! **Where a call runs.** On a [`SessionWorker`](crate::engines::session_worker::SessionWorker)
//! thread a call runs inline, bounded by the watchdog: a call that returns in time costs the
//! guard a quarantine check, the projection (a precomputed bit mask) and two atomic stores plus
//! a compare-and-swap; a call that ignores its abort makes the work's submitter get the
//! timeout (with the quarantine rules above applied by the watchdog) while the stuck worker is
//! abandoned. Anywhere else a call hands off to a pooled worker ([`bounded::run`]), as before.
//!
//! **One mechanism.** Every guarded method is a request type implementing [`GuardedMethod`]
//! (its contract method, the engine's call and legacy's fallback or canned result, its result's
//! contract check); [`GuardedEngine::call`] is the one path they all take, and the named
//! methods (`assemble`, `ingest`, …) are one-line wrappers around it. The impls and the named
//! methods are expanded from the method table ([`crate::engines::methods`]), which also gives
//! each method's fail mode, optional bit, deadline window and whether an overrun counts; only
//! the guard's own fallbacks ([`CustomFallback`]: a tool call's error result) and the
//! methods of another shape (`prepareSubagentSpawn`, the rollback, `dispose`) are written
//! here. Nothing is cloned per call: the request and the controller are borrowed inline (the
//! hand-off clones their `Arc`s), who answered is a shared [`EngineName`], and the deadline
//! windows and the projection mask are worked out when the guard is built.

use std::sync::Arc;

use std::time::Duration;

use pincer_plugin_abi::latest as abi;
use pincer_plugin_abi::latest::{AbortController, AbortSignal, ToolCallResult};
use pincer_plugin_abi::ROption;
use serde::Serialize;

use super::projection::HostParamMask;
use crate::config::{CallTimeouts, FallbackPolicy, ResultLimits};
use crate::engines::backend::CallAbortScope;
use crate::engines::bounded::{self, Deadline, Overrun};
use crate::engines::crash_journal::JournalTag;
use crate::engines::instance::{
    CallErrorKind, EngineCallError, EngineDescriptor, EngineInstance, Rollback,
};
use crate::engines::methods::{for_each_engine_method, spec, FailMode, TimeoutKey};
use crate::engines::request::{
    HandOverRequest, SubagentEndedRequest, SubagentSpawnRequest, ToolCallRequest,
};
use crate::engines::session_worker::{self, OnStuck, WorkError};
use crate::plugins::library::LoadedLibrary;
use crate::slot::contract::{
    check_assemble, check_bootstrap, check_compact, check_maintain, check_tool_result, CallTrust,
    ContractViolation,
};
use crate::slot::quarantine::Quarantine;
use crate::types::{HostOperation, Method, Owner};

/// The default compaction safety timeout (docs/CONTRACT.md §9.1).
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
        match spec(method).guard.timeout {
            TimeoutKey::Compaction => compaction,
            TimeoutKey::PerCallElseCompaction if !self.calls.0.contains_key(method.as_str()) => {
                compaction
            }
            TimeoutKey::PerCallElseCompaction | TimeoutKey::PerCall => {
                self.calls.for_method(method)
            }
        }
    }

    /// The window of every method, indexed by `Method as usize`.
    fn table(&self) -> [Duration; Method::ALL.len()] {
        Method::ALL.map(|method| self.for_method(method))
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

/// An engine id shared by every answer that names it (cloning it is a reference count).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct EngineName(Arc<str>);

impl EngineName {
    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for EngineName {
    fn from(id: &str) -> Self {
        EngineName(Arc::from(id))
    }
}

impl std::ops::Deref for EngineName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EngineName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for EngineName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for EngineName {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for EngineName {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl Serialize for EngineName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Who answered a guarded call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The engine id whose code produced the result (`legacy` on fallback).
    pub answered_by: EngineName,
    /// When the configured engine failed on this call: its error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<EngineCallError>,
    /// Whether the engine was already quarantined before this call.
    pub was_quarantined: bool,
    /// The generation of the engine that answered: the configured engine's (see
    /// [`GuardedEngine::generation`]) or, when `legacy` answered, legacy's (always 1: the
    /// built-in engine is never reloaded).
    pub generation: u64,
}

/// The generation of an engine's first instance, and of `legacy`'s only one.
pub const FIRST_GENERATION: u64 = 1;

/// A guarded call's result and who produced it.
#[derive(Debug)]
pub struct Guarded<T> {
    /// The result.
    pub value: T,
    /// Who answered.
    pub answer: Answer,
}

/// One guarded method, as its owned request type: the table row [`GuardedEngine::call`] runs.
pub trait GuardedMethod: Send + Sync + 'static {
    /// The method's result.
    type Output: Send + 'static;
    /// The contract method.
    const METHOD: Method;
    /// Whether a failure returns the original error instead of falling back (`compact`,
    /// `prepareSubagentSpawn`): the method table's.
    const FAIL_CLOSED: bool = matches!(spec(Self::METHOD).guard.fail, FailMode::Closed);
    /// The `OptionalMethods` bit of an optional method: skipped (`Ok(None)`) when the engine
    /// lacks it (the method table's).
    const OPTIONAL: Option<u32> = spec(Self::METHOD).optional;

    /// Calls the configured engine, with its host parameters projected through `mask`.
    ///
    /// # Errors
    /// The engine's error.
    fn call(
        &self,
        engine: &EngineInstance,
        abort: &AbortSignal,
        mask: HostParamMask,
    ) -> Result<Self::Output, EngineCallError>;

    /// Calls `legacy`'s same method, or gives the canned result of §4.5 when it lacks it.
    ///
    /// # Errors
    /// Legacy's error.
    fn fallback(
        &self,
        legacy: &EngineInstance,
        abort: &AbortSignal,
    ) -> Result<Self::Output, EngineCallError>;

    /// The contract check of the configured engine's result before the host uses it (see
    /// [`crate::slot::contract`]); a violation fails the call like an error.
    ///
    /// # Errors
    /// What broke the contract.
    fn check_result(
        &self,
        _output: &mut Self::Output,
        _limits: &ResultLimits,
    ) -> Result<(), ContractViolation> {
        Ok(())
    }
}

/// The configured engine's call: marked in the crash journal while its code runs, and its
/// result held to the contract.
#[inline]
fn trusted_call<R: GuardedMethod>(
    request: &R,
    engine: &EngineInstance,
    abort: &AbortSignal,
    mask: HostParamMask,
    trust: &CallTrust,
) -> Result<R::Output, EngineCallError> {
    let in_call = trust.enter(R::METHOD);
    let scope = CallAbortScope::enter(abort);
    let mut output = request.call(engine, abort, mask)?;
    drop(scope);
    drop(in_call);
    request
        .check_result(&mut output, &trust.limits)
        .map_err(|reason| {
            EngineCallError::new(
                CallErrorKind::Failed,
                format!("broke the contract: {reason}"),
            )
        })?;
    Ok(output)
}

/// Implements [`GuardedMethod`] for each method of the table: the engine's call through the
/// host-parameter mask, the row's contract check, and its fallback — `legacy`'s same method
/// (its canned result when legacy lacks an optional one), or the guard's own
/// ([`CustomFallback`]).
macro_rules! guarded_methods {
    ($($name:ident($params:ident) -> $output:ty {
        variant: $method:ident, request: $request:ident, optional: $optional:ident,
        canned: [$($canned:expr)?], check: [$($check:path)?], fallback: $fallback:ident,
        strings: $strings:ident,
    })*) => {
        $(guarded_methods!(@one $fallback $name $output, $method, $request,
            [$($canned)?], [$($check)?]);)*
    };
    (@fallback custom $name:ident $output:ty, [$($canned:expr)?]) => {
        fn fallback(
            &self,
            _: &EngineInstance,
            _: &AbortSignal,
        ) -> Result<$output, EngineCallError> {
            Ok(CustomFallback::fallback_result(self))
        }
    };
    (@fallback legacy $name:ident $output:ty, [$($canned:expr)?]) => {
        fn fallback(
            &self,
            legacy: &EngineInstance,
            abort: &AbortSignal,
        ) -> Result<$output, EngineCallError> {
            $(if Self::OPTIONAL.is_some_and(|bit| !legacy.descriptor().has(bit)) {
                return Ok($canned);
            })?
            self.with_abi(abort, |host| host, |p| legacy.$name(p))
        }
    };
    (@one $fallback:ident $name:ident $output:ty, $method:ident, $request:ident,
        [$($canned:expr)?], [$($check:path)?]) => {
        impl GuardedMethod for crate::engines::request::$request {
            type Output = $output;
            const METHOD: Method = Method::$method;

            fn call(
                &self,
                engine: &EngineInstance,
                abort: &AbortSignal,
                mask: HostParamMask,
            ) -> Result<$output, EngineCallError> {
                self.with_abi(abort, |host| mask.apply(Method::$method, &host), |p| {
                    engine.$name(p)
                })
            }

            guarded_methods!(@fallback $fallback $name $output, [$($canned)?]);

            $(fn check_result(
                &self,
                output: &mut $output,
                limits: &ResultLimits,
            ) -> Result<(), ContractViolation> {
                $check(self, output, limits)
            })?
        }
    };
}

/// The guard's own answer when a method of the table with `fallback: custom` fails: what the
/// caller gets instead of `legacy`'s.
trait CustomFallback: GuardedMethod {
    /// The stand-in result.
    fn fallback_result(&self) -> Self::Output;
}

/// A tool call: `legacy` declares no tools, so the model gets an error result.
impl CustomFallback for ToolCallRequest {
    fn fallback_result(&self) -> ToolCallResult {
        ToolCallResult {
            content: format!(
                "Tool {} is unavailable: its context engine failed and was quarantined.",
                self.tool_name
            )
            .into(),
            is_error: true,
        }
    }
}

/// A subagent's end: nothing to tell `legacy`.
impl CustomFallback for SubagentEndedRequest {
    fn fallback_result(&self) {}
}

for_each_engine_method!(guarded_methods);

/// [`GuardedEngine`]'s named call of each method of the table that takes an abort signal:
/// a required method answers (`run`), an optional one is skipped when the engine lacks it
/// (`call`).
macro_rules! guarded_calls {
    ($($name:ident($params:ident) -> $output:ty {
        variant: $method:ident, request: $request:ident, optional: $optional:ident,
        canned: [$($canned:expr)?], check: [$($check:path)?], fallback: $fallback:ident,
        strings: $strings:ident,
    })*) => {
        $(guarded_calls!(@one $name $optional $output, $method, $request);)*
    };
    (@one on_subagent_ended $($rest:tt)*) => {};
    (@one $name:ident no $output:ty, $method:ident, $request:ident) => {
        #[doc = concat!("`", stringify!($method), "`, guarded (see [`GuardedEngine::call`]).")]
        ///
        /// # Errors
        /// An abort, strict policy, a fail-closed failure, or both engines failing.
        pub fn $name(
            &self,
            request: Arc<crate::engines::request::$request>,
            abort: Arc<AbortController>,
        ) -> Result<Guarded<$output>, GuardError> {
            self.run(&request, &abort)
        }
    };
    (@one $name:ident yes $output:ty, $method:ident, $request:ident) => {
        #[doc = concat!("`", stringify!($method), "`, guarded; `Ok(None)` when the engine has none.")]
        ///
        /// # Errors
        /// An abort, strict policy, or both engines failing.
        pub fn $name(
            &self,
            request: Arc<crate::engines::request::$request>,
            abort: Arc<AbortController>,
        ) -> Result<Option<Guarded<$output>>, GuardError> {
            self.call(&request, &abort)
        }
    };
}

/// `prepareSubagentSpawn`: fails closed; no host parameters.
impl GuardedMethod for SubagentSpawnRequest {
    type Output = Option<Rollback>;
    const METHOD: Method = Method::PrepareSubagentSpawn;

    fn call(
        &self,
        engine: &EngineInstance,
        _: &AbortSignal,
        _: HostParamMask,
    ) -> Result<Self::Output, EngineCallError> {
        self.with_abi(|p| engine.prepare_subagent_spawn(p))
    }

    fn fallback(
        &self,
        _: &EngineInstance,
        _: &AbortSignal,
    ) -> Result<Self::Output, EngineCallError> {
        Ok(None)
    }
}

/// Which engine of a guard a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Callee {
    /// The configured engine (its result held to the contract, its failures quarantined).
    Primary,
    /// `legacy`, answering for it.
    Fallback,
}

/// The configured engine behind quarantine, with `legacy` as its fallback.
pub struct GuardedEngine {
    id: EngineName,
    fallback_id: EngineName,
    owner: Option<Owner>,
    primary: Arc<EngineInstance>,
    fallback: Arc<EngineInstance>,
    quarantine: Arc<Quarantine>,
    policy: FallbackPolicy,
    /// The deadline window of each method (`Method as usize`).
    windows: [Duration; Method::ALL.len()],
    /// The primary's `acceptedHostParams`.
    mask: HostParamMask,
    /// The primary's generation (see [`GuardedEngine::generation`]).
    generation: u64,
    /// Result caps and the crash-journal tag of the primary.
    trust: Arc<CallTrust>,
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
    // A dead worker is a crash, even when its death came after an abort ("SIGABRT").
    if !abort.fired() || err.kind == CallErrorKind::Crashed {
        // An engine cannot opt out of quarantine by calling its failures aborts.
        return false;
    }
    let text = err.message.to_ascii_lowercase();
    err.is_abort()
        || text.contains("abort")
        || text.contains("cancelled")
        || text.contains("canceled")
}

/// The error of a call that did not finish: an abort, `Compaction timed out`, or
/// `<method> timed out after N ms`.
fn overrun_error(operation: Method, overrun: &Overrun) -> EngineCallError {
    match overrun {
        Overrun::Aborted => {
            EngineCallError::new(CallErrorKind::Aborted, "Context engine operation aborted.")
        }
        Overrun::TimedOut { waited } => EngineCallError::new(
            CallErrorKind::TimedOut,
            if operation == Method::Compact {
                COMPACTION_TIMED_OUT.to_owned()
            } else {
                format!("{operation} timed out after {} ms", waited.as_millis())
            },
        ),
    }
}

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
            id: EngineName::from(id),
            fallback_id: EngineName::from(fallback.descriptor().id.as_str()),
            owner,
            mask: HostParamMask::of_engine(primary.descriptor()),
            primary,
            fallback,
            quarantine,
            policy,
            windows: Timeouts::default().table(),
            generation: FIRST_GENERATION,
            trust: Arc::new(CallTrust::default()),
        }
    }

    /// Sets the generation of the primary instance (the runtime's count of instances of this
    /// engine id: 1 for the first, one more for each reload that replaced it).
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }

    /// The generation of the configured engine's instance this guard calls. A guard holds
    /// one instance for its whole life: a reload makes a new guard (through
    /// [`EngineSource`](crate::slot::EngineSource)), never changes this one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Sets the caps on the primary's results and, for a plugin engine, the sha256 of its
    /// library (the primary's calls are then marked in the crash journal).
    pub fn with_trust(mut self, limits: ResultLimits, library_sha256: Option<&str>) -> Self {
        self.trust = Arc::new(CallTrust {
            limits,
            tag: library_sha256.map(|sha| JournalTag::new(&self.id, Some(sha))),
        });
        self
    }

    /// Sets the call deadlines.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.windows = timeouts.table();
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
    /// `operation` (docs/CONTRACT.md §5). Reads `info` as the guard does: a quarantined engine is
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

    fn window(&self, method: Method) -> Duration {
        self.windows[method as usize]
    }

    /// Runs `request` against the primary (or the fallback) under its method's deadline:
    /// inline on a session worker, else handed off to a pooled worker.
    fn bounded<R: GuardedMethod>(
        &self,
        callee: Callee,
        request: &Arc<R>,
        abort: &Arc<AbortController>,
    ) -> Result<R::Output, EngineCallError> {
        let primary = callee == Callee::Primary;
        let window = self.window(R::METHOD);
        let mask = self.mask;
        let engine = if primary {
            &self.primary
        } else {
            &self.fallback
        };
        let quarantinable = primary && !self.is_default();
        // A primary whose library is closed after a reload (`unloadOnReload`) is called on a
        // thread of its own that ends with the call, never inline on a session worker nor on
        // a pooled worker (see [`bounded::run_on_own_thread`]).
        let closable = self.primary.closable_library().filter(|_| primary);
        let inline = if closable.is_some() {
            Err(())
        } else {
            session_worker::run_inline(R::METHOD, quarantinable, window, abort, self, || {
                if primary {
                    trusted_call(&**request, engine, abort.signal(), mask, &self.trust)
                } else {
                    request.fallback(engine, abort.signal())
                }
            })
            .map_err(drop)
        };
        let outcome = match inline {
            Ok(outcome) => outcome,
            Err(()) => {
                let engine = Arc::clone(engine);
                let request = Arc::clone(request);
                let controller = Arc::clone(abort);
                let trust = Arc::clone(&self.trust);
                let call = move || {
                    if primary {
                        trusted_call(&*request, &engine, controller.signal(), mask, &trust)
                    } else {
                        request.fallback(&engine, controller.signal())
                    }
                };
                let deadline = Deadline::new(window);
                match closable {
                    Some(library) => bounded::run_on_own_thread(
                        deadline,
                        Arc::clone(abort),
                        Arc::clone(library),
                        call,
                    ),
                    _ => bounded::run(deadline, Arc::clone(abort), call),
                }
            }
        };
        outcome
            .map_err(|overrun| overrun_error(R::METHOD, &overrun))
            .and_then(|result| result)
    }

    /// Runs `call` on a worker under `operation`'s deadline, mapping an overrun to an error.
    /// A closable `library` (`unloadOnReload`) runs it on a thread of its own.
    fn within_deadline<T: Send + 'static>(
        &self,
        operation: Method,
        library: Option<&Arc<LoadedLibrary>>,
        call: impl FnOnce() -> Result<T, EngineCallError> + Send + 'static,
    ) -> Result<T, EngineCallError> {
        let deadline = Deadline::new(self.window(operation));
        let abort = Arc::new(AbortController::new());
        let outcome = match library.filter(|l| l.unloads()) {
            Some(library) => bounded::run_on_own_thread(deadline, abort, Arc::clone(library), call),
            None => bounded::run(deadline, abort, call),
        };
        match outcome {
            Ok(result) => result,
            Err(overrun) => Err(overrun_error(operation, &overrun)),
        }
    }

    /// Runs a rollback handle from `prepareSubagentSpawn`, bounded like any call.
    ///
    /// # Errors
    /// The rollback's error, or its timeout.
    pub fn rollback(&self, handle: Rollback) -> Result<(), EngineCallError> {
        let library = handle.library().cloned();
        self.within_deadline(Method::Rollback, library.as_ref(), move || handle.run())
    }

    /// Disposes the configured engine instance, bounded by the cleanup deadline (once per
    /// instance; later calls do nothing).
    ///
    /// # Errors
    /// The engine's error, or its timeout.
    pub fn dispose(&self) -> Result<(), EngineCallError> {
        let engine = Arc::clone(&self.primary);
        let library = self.primary.closable_library().cloned();
        self.within_deadline(Method::Dispose, library.as_ref(), move || engine.dispose())
    }

    /// The one path of every guarded method: `Ok(None)` when the engine lacks an optional
    /// method; else the abort check, quarantine routing, the bounded call, and the failure
    /// rules (see the module docs). The request and the controller are borrowed: inline on a
    /// session worker nothing is cloned; a hand-off clones the two `Arc`s for its worker.
    ///
    /// # Errors
    /// An abort, strict policy, a fail-closed failure, or both engines failing.
    pub fn call<R: GuardedMethod>(
        &self,
        request: &Arc<R>,
        abort: &Arc<AbortController>,
    ) -> Result<Option<Guarded<R::Output>>, GuardError> {
        if let Some(bit) = R::OPTIONAL {
            if !self.primary.descriptor().has(bit) {
                return Ok(None);
            }
        }
        self.run(request, abort).map(Some)
    }

    /// The core of every guarded call.
    fn run<R: GuardedMethod>(
        &self,
        request: &Arc<R>,
        abort: &Arc<AbortController>,
    ) -> Result<Guarded<R::Output>, GuardError> {
        let operation = R::METHOD;
        let fail = |error: EngineCallError| GuardError {
            engine_id: self.id.to_string(),
            operation,
            error,
        };
        let answer = |answered_by: &EngineName, failure, was_quarantined| Answer {
            generation: if *answered_by == self.id {
                self.generation
            } else {
                FIRST_GENERATION
            },
            answered_by: answered_by.clone(),
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
                .bounded(Callee::Primary, request, abort)
                .map_err(fail)
                .map(|value| Guarded {
                    value,
                    answer: answer(&self.id, None, false),
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
            return self
                .bounded(Callee::Fallback, request, abort)
                .map_err(fail)
                .map(|value| Guarded {
                    value,
                    answer: answer(&self.fallback_id, None, true),
                });
        }
        match self.bounded(Callee::Primary, request, abort) {
            Ok(value) => Ok(Guarded {
                value,
                answer: answer(&self.id, None, false),
            }),
            Err(error) if error.kind != CallErrorKind::TimedOut && is_abort(&error, abort) => {
                Err(fail(error))
            }
            // A compaction past its safety timeout is an abort, as in OpenClaw: the caller
            // gets `Compaction timed out`, and the engine stays in service.
            Err(error)
                if !spec(operation).guard.overrun_counts
                    && error.kind == CallErrorKind::TimedOut =>
            {
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
                if spec(operation).guard.quarantines {
                    self.quarantine.record(
                        &self.id,
                        self.owner.as_ref(),
                        operation.as_str(),
                        &error.message,
                    );
                }
                if R::FAIL_CLOSED || self.policy == FallbackPolicy::Strict {
                    return Err(fail(error));
                }
                // The fallback gets a fresh signal: the primary's may have fired on timeout.
                match self.bounded(Callee::Fallback, request, &Arc::new(AbortController::new())) {
                    Ok(value) => Ok(Guarded {
                        value,
                        answer: answer(&self.fallback_id, Some(error), false),
                    }),
                    // If the fallback fails too, the original error is what the caller sees.
                    Err(_) => Err(fail(error)),
                }
            }
        }
    }

    for_each_engine_method!(guarded_calls);

    /// Hands stored messages to the engine: one batch call when `what` asks for one and the
    /// engine has it, else one call per message — the contract's batch → per-message
    /// fallback, in one place for every front. Returns how many the engine says it ingested
    /// and who answered the last call (`None`: no call was made).
    ///
    /// # Errors
    /// As [`GuardedEngine::call`], for the first call that fails.
    pub fn hand_over(
        &self,
        what: &HandOverRequest,
    ) -> Result<(u64, Option<EngineName>), GuardError> {
        if let Some(batch) = what.batch() {
            if let Some(guarded) = self.call(&batch, &Arc::new(AbortController::new()))? {
                return Ok((
                    guarded.value.ingested_count,
                    Some(guarded.answer.answered_by),
                ));
            }
        }
        let mut ingested = 0;
        let mut answered_by = None;
        for one in what.each() {
            let guarded = self.run(&one, &Arc::new(AbortController::new()))?;
            ingested += u64::from(guarded.value.ingested);
            answered_by = Some(guarded.answer.answered_by);
        }
        Ok((ingested, answered_by))
    }

    /// `prepareSubagentSpawn`: fails closed. `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// The engine's original error (it is also quarantined).
    pub fn prepare_subagent_spawn(
        &self,
        request: Arc<SubagentSpawnRequest>,
    ) -> Result<Option<Guarded<Option<Rollback>>>, GuardError> {
        self.call(&request, &Arc::new(AbortController::new()))
    }

    /// `onSubagentEnded`; `Ok(None)` when the engine has none.
    ///
    /// # Errors
    /// As [`GuardedEngine::assemble`].
    pub fn on_subagent_ended(
        &self,
        request: Arc<SubagentEndedRequest>,
    ) -> Result<Option<Guarded<()>>, GuardError> {
        self.call(&request, &Arc::new(AbortController::new()))
    }
}

/// The watchdog's question when an inline call of this engine is stuck: the error the work's
/// submitter gets, with the quarantine rules of a timeout applied (a `compact` timeout and any
/// abort do not quarantine; a fallback's timeout neither: legacy is its own fallback).
impl OnStuck for GuardedEngine {
    fn on_stuck(&self, method: Method, primary: bool, overrun: &Overrun) -> WorkError {
        let error = overrun_error(method, overrun);
        if primary && spec(method).guard.overrun_counts && error.kind == CallErrorKind::TimedOut {
            self.quarantine.record(
                &self.id,
                self.owner.as_ref(),
                method.as_str(),
                &error.message,
            );
        }
        WorkError::Stuck {
            engine_id: self.id.to_string(),
            operation: method,
            error,
        }
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
