//! The context-engine slot: the registry of engines and their owners, resolution of the
//! configured engine (docs/CONTRACT.md §3), the runtime that loads plugins into the registry, the
//! quarantine and its disk mirror (§4), the guard every call goes through (routing, fallback,
//! deadlines) and the contract checks on what engines return (`contract`), host-parameter
//! projection (§6.1), host requirements (§5) and the `runtimeSettings` of an operation (§7),
//! where long-running work takes its engine from (`EngineSource`), hot reload of plugins and of
//! the config with generations drained before they are disposed (`reload`) and the file watcher
//! that triggers them (`watch`), the instances served and their generations (`generations`), and
//! restarts of isolated engines whose worker died (`restart`), and the nearest known id for an
//! unknown one (`suggest`). The operator's commands on
//! plugins and the slot are plugin administration (`crate::admin`).

pub mod contract;
mod generations;
pub mod guarded;
pub mod projection;
pub mod quarantine;
pub mod registry;
pub mod reload;
pub mod requirements;
pub mod restart;
pub mod runtime;
pub mod runtime_settings;
pub mod source;
pub(crate) mod suggest;
pub mod watch;

pub use guarded::{Answer, GuardError, Guarded, GuardedEngine};
pub use reload::{ConfigReloadOutcome, GenerationStatus, ReloadError, ReloadOutcome};
pub use runtime::{ResolveError, ResolvedEngine, Runtime, RuntimeOptions};
pub use source::{EngineSource, FixedEngine};
