//! # pincer-host
//!
//! The host side of pincer: it loads context-engine plugins (native `cdylib`s built against
//! `pincer-plugin-api`) through a verified pipeline, registers them next to the built-in
//! `legacy` engine, resolves the configured engine for each operation, and guards every call:
//! a failing engine is quarantined and `legacy` answers, exactly as OpenClaw's context-engine
//! slot behaves — with panics caught at the boundary and libraries checked before `dlopen`.
//!
//! ```no_run
//! use pincer_host::{config::PincerHome, runtime::{Runtime, RuntimeOptions}};
//! use pincer_host::session::Transcript;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Open the runtime: reads $PINCER_HOME/pincer.json, loads every plugin it finds.
//! let runtime = Runtime::open(RuntimeOptions::new(PincerHome::resolve(None)))?;
//! for plugin in runtime.plugins() {
//!     println!("{} {}", plugin.id, plugin.status);
//! }
//! // Resolve the engine of plugins.slots.contextEngine (legacy by default) and assemble.
//! let resolved = runtime.resolve()?;
//! let transcript = Transcript::read(std::path::Path::new("conversation.json"))?;
//! let assembled = transcript.assemble(&resolved.engine, "session-1", Some(4000))?;
//! println!("kept {} messages, answered by {}", assembled.messages().len(), assembled.answer.answered_by);
//! runtime.shutdown();
//! # Ok(()) }
//! ```
//!
//! ## Core concepts
//!
//! - [`runtime::Runtime`]: config, registry, quarantine and the loaded plugins; resolves engines.
//! - [`loader::Loader`]: the verified loading pipeline (manifest → path confinement → size,
//!   sha256 and segment bounds → private copy → ABI checks → library manifest).
//! - [`engine::EngineInstance`]: one live engine and the library that keeps it valid.
//! - [`guarded::GuardedEngine`]: quarantine, fallback and host-parameter projection around it.
//! - [`quarantine::Quarantine`]: the process's failed engines, mirrored to disk for `health`.

#![warn(missing_docs)]

pub mod bounded;
pub mod config;
pub mod doctor;
pub mod engine;
pub mod engines;
pub mod exercise;
pub mod guarded;
pub mod loader;
pub mod manifest;
pub mod quarantine;
pub mod registry;
pub mod request;
pub mod requirements;
pub mod runtime;
pub mod runtime_settings;
pub mod services;
pub mod session;
