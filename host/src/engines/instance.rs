//! One live engine instance as the host holds it: its backend (see [`super::backend`]), a
//! host-owned copy of its info, and where it came from. The backend is built by whoever makes
//! the instance (the runtime: [`InProcess`](super::backend::InProcess) or
//! [`ProcessBackend`](super::isolation::process::ProcessBackend)); this file names neither.
//!
//! Everything that comes back from a call is turned into host-owned data (errors, info, and
//! the results of a library closed after reload) or is a value of the library kept mapped,
//! or holds the library (a [`Rollback`]), so nothing from a plugin outlives its code. The
//! per-method forwards are generated from the method table ([`super::methods`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::backend::EngineBackend;
pub use super::backend::Rollback;
pub use super::descriptor::{EngineDescriptor, EngineOrigin};
pub use super::error::{CallErrorKind, EngineCallError};
use super::methods::for_each_engine_method;
use crate::config::ResultLimits;
use crate::plugins::library::LoadedLibrary;
use pincer_plugin_abi::latest as abi;
use pincer_plugin_abi::latest::{AssembleResult, Message};

/// `EngineInstance`'s forward of each engine method to its backend.
macro_rules! instance_forwards {
    ($($name:ident($params:ident) -> $result:ty { $($row:tt)* })*) => {
        $(
            #[doc = concat!("`", stringify!($name), "` (the engine backend's method of that name).")]
            ///
            /// # Errors
            /// The engine's error; `NotImplemented` when it lacks an optional method.
            pub fn $name(
                &self,
                params: &pincer_plugin_abi::latest::$params<'_>,
            ) -> Result<$result, EngineCallError> {
                self.backend.$name(params)
            }
        )*
    };
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
    /// (`plugins.resultLimits`, checked before the host reads it).
    ///
    /// # Errors
    /// When `info` fails or panics, holds text that is not UTF-8, or breaks a cap.
    pub fn with_backend_limited(
        backend: Box<dyn EngineBackend>,
        origin: EngineOrigin,
        limits: &ResultLimits,
    ) -> Result<Self, EngineCallError> {
        let descriptor = backend.describe(limits)?;
        let closable = backend.closable_library().cloned();
        Ok(EngineInstance {
            backend,
            descriptor,
            origin,
            disposed: AtomicBool::new(false),
            closable,
        })
    }

    /// The library the instance came from when that library is closed once nothing from it
    /// is alive (`plugins.entries.<id>.unloadOnReload`); `None` when it stays mapped.
    pub fn closable_library(&self) -> Option<&Arc<LoadedLibrary>> {
        self.closable.as_ref()
    }

    /// The round trip of an empty call (the backend's `ping`).
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

    for_each_engine_method!(instance_forwards);

    /// `prepareSubagentSpawn`.
    ///
    /// # Errors
    /// The engine's error; `NotImplemented` when it has none.
    pub fn prepare_subagent_spawn(
        &self,
        params: &abi::SubagentSpawnParams<'_>,
    ) -> Result<Option<Rollback>, EngineCallError> {
        self.backend.prepare_subagent_spawn(params)
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
