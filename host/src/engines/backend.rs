//! The backend seam: how an [`EngineInstance`](super::EngineInstance) reaches the engine's
//! code. Everything above this trait (the instance, the guard, the slot) calls through it and
//! never names a library or an FFI object.
//!
//! Two implementations: [`InProcess`], an engine object living in this process (a verified
//! plugin library's, or one linked into the host like `legacy`), and
//! [`ProcessBackend`](super::isolation::process::ProcessBackend), the same library's engine in
//! a worker process of its own (the isolation tier). Hot reload does not
//! swap a backend: it makes a new instance (a new generation) beside the old one and retires
//! the old one whole (`slot::reload`).
//!
//! The seam costs one dynamic call per engine call (the instance holds a
//! `Box<dyn EngineBackend>`), the same as the `#[sabi_trait]` call behind it.
//!
//! **What outlives a call.** Errors and `info` come back as host memory. Results are the
//! engine's `abi_stable` values (strings and vectors allocated by the library, freed through
//! the library's code) — except from a library that is closed after a reload
//! (`plugins.entries.<id>.unloadOnReload`): [`InProcess`] copies those results into host
//! memory before it returns them, so a result held past a reload never reaches into a closed
//! library. A rollback handle is the engine's code and cannot be copied: [`Rollback`] holds
//! the library it came from.
//!
//! **Checked at the seam.** Every answer from an in-process engine goes through
//! [`super::checked`] here, before anything above reads it: a result with a string that is not
//! UTF-8 is refused, an error's text made UTF-8, `info` held to `plugins.resultLimits`.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use pincer_plugin_abi::latest as abi;
use pincer_plugin_abi::latest::{
    AbortSignal, EngineBox, EngineError, EngineInfo, HostServicesArc, SpawnRollbackBox,
    SubagentSpawnParams,
};
use pincer_plugin_abi::RResult;

use super::checked::{check_info_all, checked};
use super::descriptor::EngineDescriptor;
use super::error::EngineCallError;
use super::methods::for_each_engine_method;
use crate::config::ResultLimits;
use crate::plugins::library::{EngineDirs, LoadedLibrary};
use crate::types::Method;

/// The [`EngineBackend`] declaration of each engine method of the table.
macro_rules! backend_methods {
    ($($name:ident($params:ident) -> $result:ty { variant: $variant:ident, $($row:tt)* })*) => {
        $(
            #[doc = concat!("`", stringify!($variant), "` (see [`Method::", stringify!($variant), "`]).")]
            ///
            /// # Errors
            /// The engine's error; `NotImplemented` when it lacks an optional method.
            fn $name(
                &self,
                params: &pincer_plugin_abi::latest::$params<'_>,
            ) -> Result<$result, EngineCallError>;
        )*
    };
}

/// [`InProcess`]'s call of each engine method of the table: checked, and copied into host
/// memory from a closable library.
macro_rules! in_process_methods {
    ($($name:ident($params:ident) -> $result:ty { variant: $variant:ident, $($row:tt)* })*) => {
        $(
            fn $name(
                &self,
                params: &pincer_plugin_abi::latest::$params<'_>,
            ) -> Result<$result, EngineCallError> {
                checked(Method::$variant, self.object.$name(params)).map(|r| self.owned(r))
            }
        )*
    };
}

/// Where an engine's code runs, as the host calls it. Results are host-owned or owned
/// next to whatever keeps the engine's code valid; errors are host memory.
pub trait EngineBackend: Send + Sync + 'static {
    /// The engine's `info`, checked ([`super::checked`]: UTF-8, the `info` caps of `limits`)
    /// and copied into host memory (read once, when the instance is made).
    ///
    /// # Errors
    /// When `info` fails or panics, or breaks the checks (a contract failure).
    fn describe(&self, limits: &ResultLimits) -> Result<EngineDescriptor, EngineCallError>;
    for_each_engine_method!(backend_methods);
    /// `prepareSubagentSpawn`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<Rollback>, EngineCallError>;
    /// `dispose` (the instance makes sure it runs at most once).
    ///
    /// # Errors
    /// The engine's error.
    fn dispose(&self) -> Result<(), EngineCallError>;
    /// The library of an in-process engine when it is closed once nothing from it is alive
    /// (`plugins.entries.<id>.unloadOnReload`); `None` when it stays mapped, or out of process.
    fn closable_library(&self) -> Option<&Arc<LoadedLibrary>> {
        None
    }
    /// The worker process, for an isolated engine; `None` in process.
    fn isolation(&self) -> Option<WorkerInfo> {
        None
    }
    /// The round trip of an empty call: nothing in process, one frame each way for a worker
    /// (benchmarks, health).
    ///
    /// # Errors
    /// A worker that is gone.
    fn ping(&self) -> Result<(), EngineCallError> {
        Ok(())
    }
}

/// An isolated engine's worker, as `health` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerInfo {
    /// Its process id.
    pub pid: u32,
    /// The protections it applied to itself.
    pub protections: String,
    /// Why it is gone, if it is.
    pub death: Option<String>,
}

thread_local! {
    /// The abort signal of the guarded call running on this thread (see [`CallAbortScope`]).
    static CALL_ABORT: std::cell::Cell<*const AbortSignal> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Makes a guarded call's abort signal known to the backend for the scope of the call, as the
/// host holds it (before host parameters are projected for the engine): a worker backend
/// watches it to abort, then end, a call whose engine ignores it.
pub struct CallAbortScope {
    previous: *const AbortSignal,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl CallAbortScope {
    /// Sets `signal` as this thread's call abort until the scope drops.
    #[inline]
    pub fn enter(signal: &AbortSignal) -> Self {
        let previous = CALL_ABORT.with(|c| c.replace(signal as *const AbortSignal));
        CallAbortScope {
            previous,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for CallAbortScope {
    #[inline]
    fn drop(&mut self) {
        CALL_ABORT.with(|c| c.set(self.previous));
    }
}

/// The abort signal of the guarded call running on this thread, if any.
pub fn current_call_abort<'a>() -> Option<&'a AbortSignal> {
    let ptr = CALL_ABORT.with(|c| c.get());
    // SAFETY: set only by a live `CallAbortScope`, whose borrow of the signal outlives the
    // call that reads it on this thread (the scope restores the previous value on drop).
    unsafe { ptr.as_ref() }
}

fn host_result<T>(result: RResult<T, EngineError>) -> Result<T, EngineCallError> {
    result.into_result().map_err(EngineCallError::from)
}

/// A rollback handle of `prepareSubagentSpawn`: the engine's object, whose code lives in the
/// engine's library, and the `Arc` of that library, so a handle kept past a reload (the
/// gateway keeps one per child until the child ends) keeps the code it calls.
pub struct Rollback {
    // Dropped by hand, before the library (see `Drop`).
    handle: ManuallyDrop<SpawnRollbackBox>,
    library: Option<Arc<LoadedLibrary>>,
}

impl Drop for Rollback {
    fn drop(&mut self) {
        // SAFETY: `handle` is not used after this.
        let handle = unsafe { ManuallyDrop::take(&mut self.handle) };
        drop_for(handle, self.library.as_ref());
    }
}

/// Drops `value`, an object of `library`'s: where it is — unless the library is closed after
/// a reload (`unloadOnReload`); then on a thread of its own, joined, so that whatever its drop
/// code leaves for thread exit (thread-local destructors, `std`'s exit hook) runs while the
/// library is mapped, not later on whichever host thread let go of it.
fn drop_for<T: Send + 'static>(value: T, library: Option<&Arc<LoadedLibrary>>) {
    if !library.is_some_and(|l| l.unloads()) {
        drop(value);
        return;
    }
    let cell = Arc::new(std::sync::Mutex::new(Some(value)));
    let on_thread = Arc::clone(&cell);
    let spawned = std::thread::Builder::new()
        .name("pincer-engine-drop".to_owned())
        .spawn(move || drop(on_thread.lock().map(|mut v| v.take())));
    match spawned {
        // `join` returns once the thread has exited, its exit work done.
        Ok(handle) => {
            let _ = handle.join();
        }
        Err(_) => drop(cell.lock().map(|mut v| v.take())),
    }
}

impl std::fmt::Debug for Rollback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollback").finish_non_exhaustive()
    }
}

impl Rollback {
    /// Wraps `handle`; `library` is the library it came from (`None` when linked in).
    pub fn new(handle: SpawnRollbackBox, library: Option<Arc<LoadedLibrary>>) -> Self {
        Rollback {
            handle: ManuallyDrop::new(handle),
            library,
        }
    }

    /// The library it came from (`None` when linked in).
    pub fn library(&self) -> Option<&Arc<LoadedLibrary>> {
        self.library.as_ref()
    }

    /// Runs the rollback (unbounded: `GuardedEngine::rollback` bounds it).
    ///
    /// # Errors
    /// The rollback's error, in host memory.
    pub fn run(&self) -> Result<(), EngineCallError> {
        checked(Method::Rollback, self.handle.rollback())
    }
}

/// An engine object in this process: from a verified plugin library (kept valid by the
/// `Arc` held here), or linked into the host (`legacy`, statically linked engines).
///
/// **Architecture Invariant:** the object (and its vtable) is dropped before the library
/// handle (`Drop`). A library is kept mapped unless it was opened closable
/// (`unloadOnReload`); then this backend copies every result into host memory, drops the
/// object on a thread of its own (joined), and the library closes when its last `Arc`
/// (instances, rollback handles) is dropped.
pub struct InProcess {
    // Dropped by hand, before the library (see `Drop`).
    object: ManuallyDrop<EngineBox>,
    library: Option<Arc<LoadedLibrary>>,
    /// The library is closable: results are copied into host memory.
    copy_results: bool,
}

impl InProcess {
    /// Wraps `object`; `library` is the library it came from (`None` when linked in).
    pub fn new(object: EngineBox, library: Option<Arc<LoadedLibrary>>) -> Self {
        InProcess {
            object: ManuallyDrop::new(object),
            copy_results: library.as_ref().is_some_and(|l| l.unloads()),
            library,
        }
    }

    /// Creates engine `engine_id` of a verified `library` with `config` (already validated
    /// against the manifest's schema by the caller) and the host's services.
    ///
    /// # Errors
    /// The factory's error or panic.
    pub fn from_library(
        library: &Arc<LoadedLibrary>,
        engine_id: &str,
        config: &serde_json::Value,
        dirs: &EngineDirs,
        host: HostServicesArc,
    ) -> Result<Self, EngineCallError> {
        let object = library.new_engine_object(engine_id, config, dirs, host)?;
        Ok(InProcess::new(object, Some(Arc::clone(library))))
    }

    /// `result`, or — from a closable library — its copy in host memory (`Clone` of the
    /// `abi_stable` types allocates with the host's allocator and vtables; the library's
    /// value is freed here, while the library is certainly open).
    #[inline]
    fn owned<T: Clone>(&self, result: T) -> T {
        if self.copy_results {
            result.clone()
        } else {
            result
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        // SAFETY: `object` is not used after this.
        let object = unsafe { ManuallyDrop::take(&mut self.object) };
        drop_for(object, self.library.as_ref());
    }
}

impl EngineBackend for InProcess {
    fn describe(&self, limits: &ResultLimits) -> Result<EngineDescriptor, EngineCallError> {
        let info: EngineInfo = host_result(self.object.info())?;
        check_info_all(&info, limits)?;
        Ok(EngineDescriptor::from_abi(&info))
    }

    for_each_engine_method!(in_process_methods);

    fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<Rollback>, EngineCallError> {
        checked(
            Method::PrepareSubagentSpawn,
            self.object.prepare_subagent_spawn(params),
        )
        .map(|r| {
            r.into_option()
                .map(|h| Rollback::new(h, self.library.clone()))
        })
    }

    fn dispose(&self) -> Result<(), EngineCallError> {
        checked(Method::Dispose, self.object.dispose())
    }

    fn closable_library(&self) -> Option<&Arc<LoadedLibrary>> {
        self.library.as_ref().filter(|_| self.copy_results)
    }
}
