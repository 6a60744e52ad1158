//! The adapter from the authoring traits to the ABI, and the `export_engine!` machinery.
//!
//! Every call into engine code goes through [`guard`], which runs it under `catch_unwind`
//! *inside the plugin* (the only place a catch works: abi_stable turns an unwind that reaches
//! its FFI shims into `exit(1)`), so a panic comes back as [`ErrorKind::Panicked`](crate::ErrorKind::Panicked).
//!
//! Which optional methods an engine has is found at compile time, in the plugin, by autoref
//! specialisation on the concrete engine type (the `Probe` traits below): implementing
//! `AfterTurn` is all an author does to get `afterTurn` called.

// The optional-method tables spell out their higher-ranked fn types on purpose: they are the
// contract between the probes and the adapter.
#![allow(clippy::type_complexity)]

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, Once};

use pincer_plugin_abi::abi_stable::sabi_trait::TD_Opaque;
use pincer_plugin_abi::abi_stable::std_types::{RErr, ROk, ROption, RResult, RStr};

use super::{
    AfterTurn, AfterTurnParams, AssembleParams, Bootstrap, BootstrapParams, BootstrapResult,
    CommitTurn, CommitTurnParams, CompactParams, Dispose, Engine, FactoryContext, Host,
    IngestBatch, IngestBatchParams, IngestParams, Maintain, MaintainParams, MaintainResult,
    SubagentEnded, SubagentEndedParams, SubagentSpawn, SubagentSpawnParams, ToolCallParams,
    ToolCallResult, Tools,
};
use crate::abi::v1 as abi;
use crate::abi::v1::EngineError as AbiError;
use crate::abi::v1::{
    CommitTurnStatus, EngineAbi, EngineAbi_TO, EngineBox, ExtensionRef, FactoryParams,
    HostServicesArc, IngestBatchResult, IngestResult, OptionalMethods, SpawnRollbackAbi,
    SpawnRollbackAbi_TO, SpawnRollbackBox,
};
use crate::EngineError;

/// Runs `f`, turning a panic into [`ErrorKind::Panicked`](crate::ErrorKind::Panicked) that names `method`.
pub fn guard<T, E: Into<AbiError>>(
    method: &str,
    f: impl FnOnce() -> Result<T, E>,
) -> RResult<T, AbiError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => ROk(value),
        Ok(Err(err)) => RErr(err.into()),
        Err(payload) => RErr(AbiError::Panicked(
            format!("panicked in {method}: {}", contain_panic(payload)).into(),
        )),
    }
}

/// A caught panic's message, and the payload dropped *inside* a catch: a payload is engine
/// data, and its destructor may panic too — past this point nothing would catch it, and an
/// unwind reaching abi_stable's shims ends the host. A payload that panics when dropped has
/// its own panic's payload leaked, not dropped (it could panic again).
fn contain_panic(payload: Box<dyn Any + Send>) -> String {
    let message = panic_message(payload.as_ref());
    if let Err(second) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(second);
        return format!("{message} (and its panic payload panicked when dropped)");
    }
    message
}

thread_local! {
    /// Where the last panic on this thread happened: a `Box<String>` given up as a raw
    /// pointer (null: none). The library's thread-locals have no destructor on purpose: one
    /// with a destructor, first touched on a host thread, registers it with the C runtime,
    /// which then keeps the library mapped until that thread exits — even after the host closed
    /// it (`unloadOnReload`). A location recorded and never taken (an uncaught panic in an
    /// engine's own thread) is a few bytes leaked.
    static LAST_PANIC_LOCATION: Cell<*mut String> = const { Cell::new(std::ptr::null_mut()) };
    /// Set while an engine or a rollback handle is dropped: the thread is the host's, and
    /// may outlive the library (a host may drop objects wherever its last owner lets go).
    static IN_HOST_CALL: Cell<bool> = const { Cell::new(false) };
}

fn take_panic_location() -> Option<String> {
    let location = LAST_PANIC_LOCATION.with(|l| l.replace(std::ptr::null_mut()));
    // SAFETY: a non-null pointer came from `Box::into_raw` in `record_panic_location` and was
    // swapped out of the cell, so it is owned here and freed once.
    (!location.is_null()).then(|| *unsafe { Box::from_raw(location) })
}

fn record_panic_location(location: Option<String>) {
    let new = location.map_or(std::ptr::null_mut(), |l| Box::into_raw(Box::new(l)));
    let old = LAST_PANIC_LOCATION.with(|l| l.replace(new));
    if !old.is_null() {
        // SAFETY: as in `take_panic_location`.
        drop(unsafe { Box::from_raw(old) });
    }
}

/// Whether this thread is dropping an engine or a rollback handle for the host.
fn in_host_call() -> bool {
    IN_HOST_CALL.with(Cell::get)
}

/// Marks the thread as the host's while an engine or a rollback handle is dropped (not on
/// the call path: in a `cdylib` each thread-local access is a `__tls_get_addr` call).
struct HostCall {
    cell: *const Cell<bool>,
    previous: bool,
}

impl HostCall {
    #[inline]
    fn enter() -> Self {
        let cell = IN_HOST_CALL.with(|c| c as *const Cell<bool>);
        // SAFETY: the thread-local outlives this value, which never leaves its thread (it
        // holds a raw pointer, so it is neither `Send` nor `Sync`).
        let previous = unsafe { (*cell).replace(true) };
        HostCall { cell, previous }
    }
}

impl Drop for HostCall {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in `enter`.
        unsafe { (*self.cell).set(self.previous) }
    }
}

/// A panic payload's text.
fn payload_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

/// A caught panic's text with the location the hook recorded for it.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload_text(payload);
    match take_panic_location() {
        Some(location) => format!("{text} (at {location})"),
        None => text,
    }
}

/// Installs, once per library, a panic hook that records where a panic happened instead of
/// printing to the host's stderr. Only the exported entry point calls this: a loaded library
/// has its own copy of std, so the hook sees only the library's own panics and never touches
/// the host's. In a test binary ([`crate::testing`]) library and test share one std, so the
/// previous hook still runs and a failing test prints its panic as usual. (No thread-local is
/// touched on the call path: in a `cdylib` each access is a `__tls_get_addr` call.) The hook
/// creates no thread-local with a destructor, and while an engine or a rollback handle is
/// dropped (on whatever host thread lets go of it last) it does not call
/// `std::thread::current()`: on a thread this library's `std` did not start, that registers
/// `std`'s thread-exit hook (a `pthread` key). Either would run this library's code when a
/// host thread exits — after a host that closes libraries (`unloadOnReload`) closed it.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            if LABEL_ALL_CALLS.load(std::sync::atomic::Ordering::Relaxed) {
                previous(info);
            } else {
                // Not lost, whatever thread it happened on (an engine's own thread has no
                // `guard` to report it): the host's log gets it, with its location.
                let message = payload_text(info.payload());
                if in_host_call() {
                    // A host thread that may outlive the library: no `thread::current()`.
                    tracing::error!(
                        target: "pincer::plugin::panic",
                        location = location.as_deref().unwrap_or("unknown"),
                        "panic in plugin code (while the host dropped it): {message}"
                    );
                } else {
                    let thread = std::thread::current();
                    let thread = thread.name().unwrap_or("unnamed");
                    tracing::error!(
                        target: "pincer::plugin::panic",
                        location = location.as_deref().unwrap_or("unknown"),
                        thread,
                        "panic in plugin code (thread \"{thread}\"): {message}"
                    );
                }
            }
            record_panic_location(location);
        }));
    });
}

/// A rollback handle for [`SubagentSpawn::prepare_subagent_spawn`]: runs at most once.
pub struct SpawnRollback {
    action: Mutex<Option<Box<dyn FnOnce() -> Result<(), EngineError> + Send>>>,
}

impl SpawnRollback {
    /// Wraps the undo action.
    pub fn new(action: impl FnOnce() -> Result<(), EngineError> + Send + 'static) -> Self {
        SpawnRollback {
            action: Mutex::new(Some(Box::new(action))),
        }
    }
}

/// A rollback that is dropped unused (the spawn succeeded) drops the engine's closure: under
/// `catch_unwind`, as every other piece of engine code.
impl Drop for SpawnRollback {
    fn drop(&mut self) {
        let _host = HostCall::enter();
        let action = self.action.get_mut().map(Option::take).unwrap_or(None);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(action))) {
            tracing::error!(
                panic = %contain_panic(payload),
                "a subagent-spawn rollback panicked while it was dropped; the panic was contained"
            );
        }
    }
}

impl SpawnRollbackAbi for SpawnRollback {
    fn rollback(&self) -> RResult<(), AbiError> {
        let action = self.action.lock().map(|mut a| a.take()).unwrap_or(None);
        match action {
            Some(action) => guard("rollback", action),
            None => ROk(()),
        }
    }
}

/// The optional methods of engine type `E`, as found by [`crate::optional_fns!`].
pub struct OptionalFns<E> {
    #[doc(hidden)]
    pub bootstrap: Option<
        for<'a, 'b, 'c> fn(&'a E, &'b BootstrapParams<'c>) -> Result<BootstrapResult, EngineError>,
    >,
    #[doc(hidden)]
    pub ingest_batch: Option<
        for<'a, 'b, 'c> fn(
            &'a E,
            &'b IngestBatchParams<'c>,
        ) -> Result<IngestBatchResult, EngineError>,
    >,
    #[doc(hidden)]
    pub after_turn:
        Option<for<'a, 'b, 'c> fn(&'a E, &'b AfterTurnParams<'c>) -> Result<(), EngineError>>,
    #[doc(hidden)]
    pub maintain: Option<
        for<'a, 'b, 'c> fn(&'a E, &'b MaintainParams<'c>) -> Result<MaintainResult, EngineError>,
    >,
    #[doc(hidden)]
    pub prepare_subagent_spawn: Option<
        for<'a, 'b, 'c> fn(
            &'a E,
            &'b SubagentSpawnParams<'c>,
        ) -> Result<Option<SpawnRollback>, EngineError>,
    >,
    #[doc(hidden)]
    pub on_subagent_ended:
        Option<for<'a, 'b, 'c> fn(&'a E, &'b SubagentEndedParams<'c>) -> Result<(), EngineError>>,
    #[doc(hidden)]
    pub call_tool: Option<
        for<'a, 'b, 'c> fn(&'a E, &'b ToolCallParams<'c>) -> Result<ToolCallResult, EngineError>,
    >,
    #[doc(hidden)]
    pub commit_turn: Option<
        for<'a, 'b, 'c> fn(
            &'a E,
            &'b CommitTurnParams<'c>,
        ) -> Result<CommitTurnStatus, EngineError>,
    >,
    #[doc(hidden)]
    pub dispose: Option<fn(&E) -> Result<(), EngineError>>,
}

impl<E> OptionalFns<E> {
    /// The bit set the host sees in the engine's info (`optional_methods`).
    pub fn methods(&self) -> OptionalMethods {
        let mut bits = 0;
        let mut set = |present: bool, bit: u32| {
            if present {
                bits |= bit;
            }
        };
        set(self.bootstrap.is_some(), OptionalMethods::BOOTSTRAP);
        set(self.ingest_batch.is_some(), OptionalMethods::INGEST_BATCH);
        set(self.after_turn.is_some(), OptionalMethods::AFTER_TURN);
        set(self.maintain.is_some(), OptionalMethods::MAINTAIN);
        set(
            self.prepare_subagent_spawn.is_some(),
            OptionalMethods::PREPARE_SUBAGENT_SPAWN,
        );
        set(
            self.on_subagent_ended.is_some(),
            OptionalMethods::ON_SUBAGENT_ENDED,
        );
        set(self.call_tool.is_some(), OptionalMethods::CALL_TOOL);
        set(self.commit_turn.is_some(), OptionalMethods::COMMIT_TURN);
        set(self.dispose.is_some(), OptionalMethods::DISPOSE);
        OptionalMethods(bits)
    }
}

/// The autoref-specialisation probe: `(&&Probe::<E>::new()).bootstrap_fn()` is `Some` exactly
/// when `E: Bootstrap`. Works only on a concrete type, hence the macro.
#[doc(hidden)]
pub struct Probe<E>(PhantomData<E>);

impl<E> Probe<E> {
    #[doc(hidden)]
    pub const fn new() -> Self {
        Probe(PhantomData)
    }
}

impl<E> Default for Probe<E> {
    fn default() -> Self {
        Self::new()
    }
}

macro_rules! probe {
    ($has:ident, $lacks:ident, $trait_:ident, $method:ident, $fn_name:ident, $ty:ty) => {
        #[doc(hidden)]
        pub trait $has<E> {
            fn $fn_name(&self) -> Option<$ty>;
        }
        impl<E: $trait_> $has<E> for &Probe<E> {
            fn $fn_name(&self) -> Option<$ty> {
                Some(<E as $trait_>::$method)
            }
        }
        #[doc(hidden)]
        pub trait $lacks<E> {
            fn $fn_name(&self) -> Option<$ty> {
                None
            }
        }
        impl<E> $lacks<E> for Probe<E> {}
    };
}

probe!(
    HasBootstrap,
    LacksBootstrap,
    Bootstrap,
    bootstrap,
    bootstrap_fn,
    for<'a, 'b, 'c> fn(&'a E, &'b BootstrapParams<'c>) -> Result<BootstrapResult, EngineError>
);
probe!(
    HasIngestBatch,
    LacksIngestBatch,
    IngestBatch,
    ingest_batch,
    ingest_batch_fn,
    for<'a, 'b, 'c> fn(&'a E, &'b IngestBatchParams<'c>) -> Result<IngestBatchResult, EngineError>
);
probe!(
    HasAfterTurn,
    LacksAfterTurn,
    AfterTurn,
    after_turn,
    after_turn_fn,
    for<'a, 'b, 'c> fn(&'a E, &'b AfterTurnParams<'c>) -> Result<(), EngineError>
);
probe!(
    HasMaintain,
    LacksMaintain,
    Maintain,
    maintain,
    maintain_fn,
    for<'a, 'b, 'c> fn(&'a E, &'b MaintainParams<'c>) -> Result<MaintainResult, EngineError>
);
probe!(
    HasSubagentSpawn,
    LacksSubagentSpawn,
    SubagentSpawn,
    prepare_subagent_spawn,
    prepare_subagent_spawn_fn,
    for<'a, 'b, 'c> fn(
        &'a E,
        &'b SubagentSpawnParams<'c>,
    ) -> Result<Option<SpawnRollback>, EngineError>
);
probe!(
    HasSubagentEnded,
    LacksSubagentEnded,
    SubagentEnded,
    on_subagent_ended,
    on_subagent_ended_fn,
    for<'a, 'b, 'c> fn(&'a E, &'b SubagentEndedParams<'c>) -> Result<(), EngineError>
);
probe!(
    HasTools,
    LacksTools,
    Tools,
    call_tool,
    call_tool_fn,
    for<'a, 'b, 'c> fn(&'a E, &'b ToolCallParams<'c>) -> Result<ToolCallResult, EngineError>
);
probe!(
    HasCommitTurn,
    LacksCommitTurn,
    CommitTurn,
    commit_turn,
    commit_turn_fn,
    for<'a, 'b, 'c> fn(&'a E, &'b CommitTurnParams<'c>) -> Result<CommitTurnStatus, EngineError>
);
probe!(
    HasDispose,
    LacksDispose,
    Dispose,
    dispose,
    dispose_fn,
    fn(&E) -> Result<(), EngineError>
);

/// The optional methods of a concrete engine type, found at compile time.
///
/// ```
/// # use pincer_plugin_api::prelude::*;
/// # struct E(Host);
/// # impl Engine for E {
/// #     const ID: &'static str = "e";
/// #     fn create(_: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> { Ok(E(host)) }
/// #     fn info(&self) -> Result<EngineInfo, EngineError> { Ok(EngineInfo::new("E", "0.1.0")) }
/// #     fn ingest(&self, _: &IngestParams<'_>) -> Result<IngestResult, EngineError> { Ok(IngestResult::default()) }
/// #     fn assemble(&self, p: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> { Ok(AssembleResult::pass_through(p.messages.len())) }
/// #     fn compact(&self, p: &CompactParams<'_>) -> Result<CompactResult, EngineError> { self.0.delegate_compaction_to_runtime(p) }
/// # }
/// impl Dispose for E {
///     fn dispose(&self) -> Result<(), EngineError> { Ok(()) }
/// }
/// let fns = pincer_plugin_api::optional_fns!(E);
/// assert_eq!(fns.methods().names().collect::<Vec<_>>(), ["dispose"]);
/// ```
#[macro_export]
macro_rules! optional_fns {
    ($engine:ty) => {{
        #[allow(unused_imports)]
        use $crate::__private::probes::*;
        $crate::OptionalFns::<$engine> {
            bootstrap: (&&$crate::__private::probes::Probe::<$engine>::new()).bootstrap_fn(),
            ingest_batch: (&&$crate::__private::probes::Probe::<$engine>::new()).ingest_batch_fn(),
            after_turn: (&&$crate::__private::probes::Probe::<$engine>::new()).after_turn_fn(),
            maintain: (&&$crate::__private::probes::Probe::<$engine>::new()).maintain_fn(),
            prepare_subagent_spawn: (&&$crate::__private::probes::Probe::<$engine>::new())
                .prepare_subagent_spawn_fn(),
            on_subagent_ended: (&&$crate::__private::probes::Probe::<$engine>::new())
                .on_subagent_ended_fn(),
            call_tool: (&&$crate::__private::probes::Probe::<$engine>::new()).call_tool_fn(),
            commit_turn: (&&$crate::__private::probes::Probe::<$engine>::new()).commit_turn_fn(),
            dispose: (&&$crate::__private::probes::Probe::<$engine>::new()).dispose_fn(),
        }
    }};
}

/// The ABI adapter around an engine.
struct Adapter<E> {
    /// Dropped by hand, under `catch_unwind` (see the `Drop` impl).
    engine: std::mem::ManuallyDrop<E>,
    fns: OptionalFns<E>,
    /// The host this engine was created with, kept only when its library exports several
    /// engines: events logged during its calls are then labelled with this engine. (With one
    /// engine per library every instance has the same label, and a thread-local access in a
    /// `cdylib` costs a `__tls_get_addr` call that the common case should not pay.)
    host: Option<HostServicesArc>,
}

/// An engine's destructor is engine code too: abi_stable's destructor shim would turn a panic in
/// it into an abort of the host, so the engine is dropped under `catch_unwind`, and a panic in
/// its `Drop` is logged and swallowed.
impl<E> Drop for Adapter<E> {
    fn drop(&mut self) {
        let _scope = self.scope();
        let _host = HostCall::enter();
        let engine = &mut self.engine;
        // SAFETY: `engine` is dropped exactly once, here, and never used again.
        let dropped = catch_unwind(AssertUnwindSafe(|| unsafe {
            std::mem::ManuallyDrop::drop(engine)
        }));
        if let Err(payload) = dropped {
            tracing::error!(
                panic = %contain_panic(payload),
                "the engine panicked while it was dropped; the panic was contained"
            );
        }
    }
}

impl<E> Adapter<E> {
    fn scope(&self) -> Option<super::log_forward::CallScope> {
        self.host.as_ref().map(super::log_forward::CallScope::enter)
    }
}

/// Calls optional method `f` (if the engine has it) through `call`, under [`guard`].
fn optional<F, R, A>(
    name: &str,
    f: Option<F>,
    call: impl FnOnce(F) -> Result<R, EngineError>,
    into_abi: impl FnOnce(R) -> A,
) -> RResult<A, AbiError> {
    match f {
        Some(f) => guard(name, || call(f).map(into_abi)),
        None => RErr(AbiError::not_implemented(name)),
    }
}

impl<E: Engine> EngineAbi for Adapter<E> {
    fn info(&self) -> RResult<abi::EngineInfo, AbiError> {
        let _scope = self.scope();
        guard("info", || {
            Ok::<_, EngineError>(self.engine.info()?.into_abi(E::ID, self.fns.methods()))
        })
    }

    fn ingest(&self, params: &abi::IngestParams<'_>) -> RResult<IngestResult, AbiError> {
        let _scope = self.scope();
        guard("ingest", || {
            self.engine.ingest(&IngestParams::from_abi(params))
        })
    }

    fn assemble(&self, params: &abi::AssembleParams<'_>) -> RResult<abi::AssembleResult, AbiError> {
        let _scope = self.scope();
        guard("assemble", || {
            self.engine
                .assemble(&AssembleParams::from_abi(params))
                .map(|r| r.0)
        })
    }

    fn compact(&self, params: &abi::CompactParams<'_>) -> RResult<abi::CompactResult, AbiError> {
        let _scope = self.scope();
        guard("compact", || {
            self.engine
                .compact(&CompactParams::from_abi(params))
                .map(|r| r.0)
        })
    }

    fn bootstrap(
        &self,
        params: &abi::BootstrapParams<'_>,
    ) -> RResult<abi::BootstrapResult, AbiError> {
        let _scope = self.scope();
        optional(
            "bootstrap",
            self.fns.bootstrap,
            |f| f(&self.engine, &BootstrapParams::from_abi(params)),
            BootstrapResult::into_abi,
        )
    }

    fn ingest_batch(
        &self,
        params: &abi::IngestBatchParams<'_>,
    ) -> RResult<IngestBatchResult, AbiError> {
        let _scope = self.scope();
        optional(
            "ingestBatch",
            self.fns.ingest_batch,
            |f| f(&self.engine, &IngestBatchParams::from_abi(params)),
            |r| r,
        )
    }

    fn after_turn(&self, params: &abi::AfterTurnParams<'_>) -> RResult<(), AbiError> {
        let _scope = self.scope();
        optional(
            "afterTurn",
            self.fns.after_turn,
            |f| f(&self.engine, &AfterTurnParams::from_abi(params)),
            |r| r,
        )
    }

    fn maintain(&self, params: &abi::MaintainParams<'_>) -> RResult<abi::MaintainResult, AbiError> {
        let _scope = self.scope();
        optional(
            "maintain",
            self.fns.maintain,
            |f| f(&self.engine, &MaintainParams::from_abi(params)),
            MaintainResult::into_abi,
        )
    }

    fn prepare_subagent_spawn(
        &self,
        params: &abi::SubagentSpawnParams<'_>,
    ) -> RResult<ROption<SpawnRollbackBox>, AbiError> {
        let _scope = self.scope();
        optional(
            "prepareSubagentSpawn",
            self.fns.prepare_subagent_spawn,
            |f| f(&self.engine, &SubagentSpawnParams::from_abi(params)),
            |rollback| match rollback {
                Some(r) => ROption::RSome(SpawnRollbackAbi_TO::from_value(r, TD_Opaque)),
                None => ROption::RNone,
            },
        )
    }

    fn on_subagent_ended(&self, params: &abi::SubagentEndedParams<'_>) -> RResult<(), AbiError> {
        let _scope = self.scope();
        optional(
            "onSubagentEnded",
            self.fns.on_subagent_ended,
            |f| f(&self.engine, &SubagentEndedParams::from_abi(params)),
            |r| r,
        )
    }

    fn call_tool(
        &self,
        params: &abi::ToolCallParams<'_>,
    ) -> RResult<abi::ToolCallResult, AbiError> {
        let _scope = self.scope();
        optional(
            "callTool",
            self.fns.call_tool,
            |f| f(&self.engine, &ToolCallParams::from_abi(params)),
            ToolCallResult::into_abi,
        )
    }

    fn dispose(&self) -> RResult<(), AbiError> {
        let _scope = self.scope();
        match self.fns.dispose {
            Some(f) => guard("dispose", || f(&self.engine)),
            // Nothing to release: disposing is a successful no-op.
            None => ROk(()),
        }
    }

    fn commit_turn(
        &self,
        params: &abi::CommitTurnParams<'_>,
    ) -> RResult<CommitTurnStatus, AbiError> {
        let _scope = self.scope();
        optional(
            "commitTurn",
            self.fns.commit_turn,
            |f| f(&self.engine, &CommitTurnParams::from_abi(params)),
            |r| r,
        )
    }

    fn extension(&self, _name: RStr<'_>) -> ROption<ExtensionRef> {
        ROption::RNone
    }
}

/// Wraps an engine value in the ABI object, with its optional methods from
/// [`crate::optional_fns!`]. This is how a host links an engine statically (the built-in
/// `legacy`, benchmarks, tests) and gets exactly the object a plugin library would return.
pub fn into_engine_box<E: Engine>(engine: E, fns: OptionalFns<E>) -> EngineBox {
    EngineAbi_TO::from_value(
        Adapter {
            engine: std::mem::ManuallyDrop::new(engine),
            fns,
            host: None,
        },
        TD_Opaque,
    )
}

/// Creates engine `E` and wraps it. Used by the export macro for each engine type.
#[doc(hidden)]
pub fn make_engine<E: Engine>(
    params: &FactoryParams<'_>,
    host: HostServicesArc,
    fns: OptionalFns<E>,
    label_calls: bool,
) -> Result<EngineBox, AbiError> {
    let engine = {
        // Events logged while the engine is created go to the host creating it.
        let _scope = super::log_forward::CallScope::enter(&host);
        E::create(
            FactoryContext::new(params),
            Host::new(super::share_host(&host)),
        )
        .map_err(EngineError::into_abi)?
    };
    let label_calls = label_calls || LABEL_ALL_CALLS.load(std::sync::atomic::Ordering::Relaxed);
    Ok(EngineAbi_TO::from_value(
        Adapter {
            engine: std::mem::ManuallyDrop::new(engine),
            fns,
            host: label_calls.then_some(host),
        },
        TD_Opaque,
    ))
}

/// Set by [`crate::testing`]: label every call's log events with its own engine's host, since
/// a test binary creates engines for many hosts at once; and let the test binary's own panic
/// hook print panics too.
pub(crate) static LABEL_ALL_CALLS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The exported entry points of an engine type, implemented by [`crate::export_engine!`] for
/// every engine it exports, so that [`crate::testing`] drives exactly what a host loads.
#[doc(hidden)]
pub trait Exported: Engine {
    /// The library's engine factory (the root module's `new_engine`).
    const NEW_ENGINE: abi::NewEngineFn;
    /// The library's manifest record, as embedded in the file.
    fn manifest_record() -> &'static [u8];
}

/// One engine a library exports: its id and how to make it.
#[doc(hidden)]
pub type EngineMaker = fn(&FactoryParams<'_>, HostServicesArc, bool) -> Result<EngineBox, AbiError>;

/// The exported factory's body: install the panic hook and log forwarder, find the engine by
/// id, create it under [`guard`].
#[doc(hidden)]
pub fn new_engine_entry(
    params: &FactoryParams<'_>,
    host: HostServicesArc,
    engines: &[(&'static str, EngineMaker)],
) -> RResult<EngineBox, AbiError> {
    install_panic_hook();
    super::log_forward::install(super::share_host(&host));
    let wanted = params.engine_id.as_str();
    match engines.iter().find(|(id, _)| *id == wanted) {
        Some((_, make)) => guard("factory", || make(params, host, engines.len() > 1)),
        None => RErr(AbiError::failed(format!(
            "this library has no engine \"{wanted}\"; it exports: {}",
            engines
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Embeds the manifest record made of `parts` (the magic, then JSON) as the exported static
/// `PINCER_LIBRARY_MANIFEST` in the section the host reads before `dlopen`. Used by
/// [`export_engine!`]; test fixtures that build a root module by hand use it too.
#[doc(hidden)]
#[macro_export]
macro_rules! __embed_manifest_record {
    ($parts:expr) => {
        const __PINCER_MANIFEST_LEN: usize = $crate::__private::record_len($parts);

        #[used]
        #[no_mangle]
        #[cfg_attr(
            not(any(target_vendor = "apple", target_os = "windows")),
            link_section = ".pincer_manifest"
        )]
        #[cfg_attr(target_vendor = "apple", link_section = "__DATA,__pincer_manif")]
        #[cfg_attr(target_os = "windows", link_section = ".pincer")]
        pub static PINCER_LIBRARY_MANIFEST: [u8; __PINCER_MANIFEST_LEN] =
            $crate::__private::record::<__PINCER_MANIFEST_LEN>($parts);
    };
}

/// Exports one or more engine types from a `cdylib` plugin crate.
///
/// Generates the library's single exported symbol (abi_stable's root-module header), its
/// [`LibraryManifest`](crate::abi::v1::LibraryManifest) (plugin id = the first engine's id, plugin version = the crate's
/// version, the api version compiled against, and whether it was built with
/// `panic = "unwind"`), and an engine factory that catches every panic.
///
/// ```ignore
/// pincer_plugin_api::export_engine!(MyEngine);
/// pincer_plugin_api::export_engine!(MyEngine, MyOtherEngine);
/// ```
#[macro_export]
macro_rules! export_engine {
    ($first:ty $(, $rest:ty)* $(,)?) => {
        const _: () = {
            use $crate::__private as __p;

            extern "C" fn __pincer_manifest() -> $crate::__private::abi::v1::LibraryManifest {
                __p::library_manifest(
                    <$first as $crate::Engine>::ID,
                    env!("CARGO_PKG_VERSION"),
                    &[<$first as $crate::Engine>::ID $(, <$rest as $crate::Engine>::ID)*],
                    cfg!(panic = "unwind"),
                )
            }

            extern "C" fn __pincer_new_engine(
                params: &$crate::__private::abi::v1::FactoryParams<'_>,
                host: $crate::__private::abi::v1::HostServicesArc,
            ) -> $crate::__private::abi::RResult<$crate::__private::abi::v1::EngineBox, $crate::__private::abi::v1::EngineError> {
                __p::new_engine_entry(params, host, &[
                    (<$first as $crate::Engine>::ID, |p, h, label| {
                        __p::make_engine::<$first>(p, h, $crate::optional_fns!($first), label)
                    }),
                    $((<$rest as $crate::Engine>::ID, |p, h, label| {
                        __p::make_engine::<$rest>(p, h, $crate::optional_fns!($rest), label)
                    }),)*
                ])
            }

            // The library's manifest as data in its own section, readable from the file's
            // bytes without running any of its code (the host's loader reads it).
            const __PINCER_MANIFEST_PARTS: &[&str] = &[
                __p::MANIFEST_MAGIC,
                "{\"pluginId\":\"",
                <$first as $crate::Engine>::ID,
                "\",\"pluginVersion\":\"",
                env!("CARGO_PKG_VERSION"),
                "\",\"apiVersion\":\"",
                $crate::API_VERSION,
                "\",\"engineIds\":[\"",
                <$first as $crate::Engine>::ID,
                "\""
                $(, ",\"", <$rest as $crate::Engine>::ID, "\"")*,
                "],\"panicUnwind\":",
                if cfg!(panic = "unwind") { "true" } else { "false" },
                ",\"abiStableVersion\":\"",
                $crate::ABI_STABLE_VERSION,
                "\"}",
            ];
            const _: () = assert!(
                __p::is_plain_id(<$first as $crate::Engine>::ID) $(&& __p::is_plain_id(<$rest as $crate::Engine>::ID))*,
                "an engine ID may use only a-z, A-Z, 0-9, '-', '_' and '.', and must not be empty",
            );
            const _: () = assert!(
                __p::all_distinct(&[<$first as $crate::Engine>::ID $(, <$rest as $crate::Engine>::ID)*]),
                "two exported engines have the same ID",
            );
            const _: () = assert!(
                __p::is_plain_version(env!("CARGO_PKG_VERSION")),
                "the crate version must be plain semver",
            );
            $crate::__embed_manifest_record!(__PINCER_MANIFEST_PARTS);

            impl __p::Exported for $first {
                const NEW_ENGINE: $crate::__private::abi::v1::NewEngineFn = __pincer_new_engine;
                fn manifest_record() -> &'static [u8] {
                    &PINCER_LIBRARY_MANIFEST
                }
            }
            $(impl __p::Exported for $rest {
                const NEW_ENGINE: $crate::__private::abi::v1::NewEngineFn = __pincer_new_engine;
                fn manifest_record() -> &'static [u8] {
                    &PINCER_LIBRARY_MANIFEST
                }
            })*

            extern "C" fn __pincer_extension(
                _name: $crate::__private::abi::RStr<'_>,
            ) -> $crate::__private::abi::ROption<$crate::__private::abi::v1::ExtensionRef> {
                $crate::__private::abi::ROption::RNone
            }

            fn __pincer_root_module() -> $crate::__private::abi::v1::PluginModuleRef {
                __p::root_module(__pincer_manifest, __pincer_new_engine, __pincer_extension)
            }

            extern "C" fn __pincer_root_module_ctor() -> __p::RootModuleResult {
                __p::call_root_module_loader(__pincer_root_module)
            }

            // The one symbol abi_stable's loader looks for (`ROOT_MODULE_LOADER_NAME`).
            #[no_mangle]
            pub static _1as_0lib_1header_0root_bmodule_bloader: __p::LibHeader =
                __p::lib_header::<$crate::__private::abi::v1::PluginModuleRef>(__pincer_root_module_ctor);
        };
    };
}
