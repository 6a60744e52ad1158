//! Making an engine instance from where its code lives: an engine object of this process
//! (a plugin library's or one linked into the host), a verified plugin library in process, or
//! the same library in a worker process of its own. Each builds its backend
//! ([`InProcess`] or [`ProcessBackend`]) and hands it to
//! [`EngineInstance::with_backend_limited`]; the instance itself names neither backend.

use std::sync::Arc;

use pincer_plugin_abi::latest::{EngineBox, HostServicesArc};

use super::backend::InProcess;
use super::descriptor::EngineOrigin;
use super::error::EngineCallError;
use super::instance::EngineInstance;
use super::isolation::process::ProcessBackend;
use super::isolation::settings::Confinement;
use crate::config::ResultLimits;
use crate::plugins::library::{EngineDirs, LoadedLibrary};

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
        let backend = InProcess::from_library(library, engine_id, config, dirs, host)?;
        Self::with_backend_limited(Box::new(backend), EngineOrigin::of_library(library), limits)
    }

    /// Creates engine `engine_id` of an isolated `library` in a worker process of its own
    /// (see `isolation`).
    ///
    /// # Errors
    /// The worker could not start, or the factory failed (its error, or how the worker died).
    pub fn from_isolated_library(
        library: &Arc<LoadedLibrary>,
        engine_id: &str,
        config: &serde_json::Value,
        dirs: &EngineDirs,
        host: HostServicesArc,
        confinement: Confinement,
        limits: &ResultLimits,
    ) -> Result<Self, EngineCallError> {
        let backend =
            ProcessBackend::from_library(library, engine_id, config, dirs, host, confinement)?;
        Self::with_backend_limited(Box::new(backend), EngineOrigin::of_library(library), limits)
    }
}
