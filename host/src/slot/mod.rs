//! The context-engine slot: the registry of engines and their owners, resolution of the
//! configured engine (reference §3), the runtime that loads plugins into the registry, the
//! quarantine and its disk mirror (§4), the guard every call goes through (routing, fallback,
//! deadlines) and the contract checks on what engines return, host-parameter projection (§6.1), host requirements (§5) and the
//! `runtimeSettings` of an operation (§7), and the operator's commands on plugins and the slot
//! with OpenClaw's slot rules (§11).

pub mod contract;
pub mod guarded;
pub mod manage;
pub mod projection;
pub mod quarantine;
pub mod registry;
pub mod requirements;
pub mod runtime;
pub mod runtime_settings;

pub use guarded::{Answer, GuardError, Guarded, GuardedEngine};
pub use quarantine::{Quarantine, QuarantineRecord};
pub use runtime::{ResolveError, ResolvedEngine, Runtime, RuntimeOptions};
