//! # pincer-host
//!
//! The host side of pincer: it loads context-engine plugins (native `cdylib`s built against
//! `pincer-plugin-api`) through a verified pipeline, registers them next to the built-in
//! `legacy` engine, resolves the configured engine for each operation, and guards every call:
//! a failing engine is quarantined and `legacy` answers, exactly as OpenClaw's context-engine
//! slot behaves — with panics caught at the boundary and libraries checked before `dlopen`.
//!
//! ```no_run
//! use pincer_host::{PincerHome, Runtime, RuntimeOptions, Transcript};
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
//! ## The public API
//!
//! What an embedder (the `pincer` binary is one) may use, and nothing else:
//!
//! - **The runtime** — [`Runtime`] (open, [`Runtime::resolve`], reload), [`RuntimeOptions`],
//!   [`ResolvedEngine`], [`GuardedEngine`] and its [`Answer`], the reload outcomes
//!   ([`ReloadOutcome`], [`ConfigReloadOutcome`], [`GenerationStatus`]), the errors
//!   ([`ResolveError`], [`ReloadError`], [`GuardError`], [`LoadError`], [`EngineCallError`],
//!   [`ConfigError`]); [`runtime`]: resolutions, the quarantine, the plugin watcher;
//!   [`compaction::open_runtime`]: a runtime with the built-in compaction and the model.
//! - **The harness and its session handle** — [`harness::Harness`], [`harness::Session`]
//!   and its parameter types, [`harness::SessionRunner`], [`SessionWorker`]; [`model`]: the
//!   models a turn calls.
//! - **The store** — [`session`]: the [`session::SessionStore`] trait, the JSONL store
//!   ([`session::JsonlStore`]), keys ([`session::SessionKey`], [`session::AgentId`]), the
//!   session tree, transcripts and their import/export.
//! - **The gateway** — [`gateway::serve`], [`gateway::bind`], [`gateway::client`].
//! - **Operator tools** — [`config`] (`$PINCER_HOME`, `pincer.json`, the comment-keeping
//!   [`config::edit`]or), [`admin`] (install, enable, disable, select, remove), [`report`]
//!   (`doctor`, `health`, `check-engine`, plugin listings), [`compaction`], [`isolation`]
//!   ([`isolation::serve_worker_if_requested`]) and [`operator`] (output streams, crash and
//!   stop handlers, plugin packing, quarantine maintenance).
//!
//! Two `#[doc(hidden)]` modules are not part of it and may change in any release: `testing`
//! (feature `test-support`, the internals pincer's own black-box tests reach) and `fuzzing`
//! (feature `fuzzing`: one `fn(&[u8])` entry per parser at a trust boundary — the plugin
//! manifest JSON, the embedded-manifest reader, the ELF/PE/Mach-O verifier, `pincer.json`
//! and its editor, the session line parser and tree builder, the OpenAI transcript import,
//! gateway call bodies, the isolated worker's frames).
//!
//! ## Layout
//!
//! Modules depend one way, each only on those above it in this list (enforced by
//! `xtask`'s `tidy` test); the crate-private ones are in plain text:
//!
//! 1. `disk` — the one I/O seam of every durable write, and failure injection for tests.
//! 2. `types` — core values: the `legacy` id, the plugin-id validator, method names,
//!    registry owners, host requirements.
//! 3. [`config`] — `$PINCER_HOME` and `pincer.json`.
//! 4. `plugins` — plugins on disk: manifest, discovery, verification, cache, library.
//! 5. `engines` — a live engine behind its backend, requests, bounded calls, services,
//!    the built-in `legacy`.
//! 6. `slot` — registry, resolution, runtime, quarantine, the guard, projection,
//!    requirements, `runtimeSettings`.
//! 7. [`admin`] — the operator's plugin commands.
//! 8. [`session`] — conversations and running an engine over one.
//! 9. [`model`] — what answers a turn: the replay model and OpenAI-compatible servers.
//! 10. [`compaction`] — the built-in compaction: cut point, summaries, `compaction` entries;
//!     the runtime's compactor behind `legacy.compact`.
//! 11. [`harness`] — the turn: assemble, precheck, model, tools, finalize, compaction.
//! 12. [`report`] — `doctor`, `health` and `check-engine` reports.
//! 13. [`gateway`] — `pincer serve`: sessions and engines served over a socket and HTTP.
//! 14. `fuzzing` — the fuzzing seam, over all of them.
//!
//! The `pincer` binary sits on top of all of them.
//!
//! ## Core concepts
//!
//! - [`Runtime`]: config, registry, quarantine and the loaded plugins; resolves engines.
//!   Open it with [`compaction::open_runtime`] to give `legacy.compact` (and engines that
//!   delegate compaction) the built-in compaction and engines' `llmComplete` the configured
//!   model, as the `pincer` binary does; a bare [`Runtime::open`] has neither.
//! - [`harness::Harness`]: runs turns (assemble, model, tools, finalize, compaction) on
//!   sessions; [`harness::SessionRunner`] runs one session's work on a worker of its own,
//!   where engine calls run inline; [`model`] holds the models it calls.
//! - The verified loading pipeline (manifest → path confinement → size, sha256 and segment
//!   bounds → private copy → ABI checks → library manifest) runs inside [`Runtime::open`].
//! - [`EngineInstance`]: one live engine behind its backend.
//! - [`GuardedEngine`]: quarantine, fallback and host-parameter projection around it.
//! - [`runtime::Quarantine`]: the process's failed engines, mirrored to disk for `health`.

#![warn(missing_docs)]

pub mod admin;
pub mod compaction;
pub mod config;
pub(crate) mod disk;
pub(crate) mod engines;
pub mod gateway;
pub mod harness;
pub mod model;
pub(crate) mod plugins;
pub mod report;
pub mod session;
pub(crate) mod slot;
pub(crate) mod types;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

pub use config::{ConfigError, PincerHome};
pub use engines::session_worker::{SessionWorker, WorkError, WorkHandle};
pub use engines::{EngineCallError, EngineInstance};
pub use harness::AssembledView;
pub use plugins::LoadError;
pub use report::{doctor, DoctorReport};
pub use session::{Transcript, TranscriptError};
pub use slot::{
    Answer, ConfigReloadOutcome, EngineSource, FixedEngine, GenerationStatus, GuardError, Guarded,
    GuardedEngine, ReloadError, ReloadOutcome, ResolveError, ResolvedEngine, Runtime,
    RuntimeOptions,
};

pub mod isolation {
    //! The process-isolation tier: an embedder's `main` calls [`serve_worker_if_requested`]
    //! first, so that the same executable can serve as an isolated engine's worker.
    pub use crate::engines::isolation::{
        serve_worker_if_requested, set_worker_program, worker_program, SANDBOX_VIOLATION_PREFIX,
        SANDBOX_VIOLATION_STATUS,
    };
}

pub mod runtime {
    //! The runtime's companions: what [`Runtime::open`](crate::Runtime::open) loads, how a
    //! resolution answers, the quarantine it keeps, and the plugin-directory watcher.
    pub use crate::slot::quarantine::{Quarantine, QuarantineRecord};
    pub use crate::slot::runtime::{
        OpenLibraries, PluginState, Resolution, Runtime, RuntimeOptions,
    };
    pub use crate::slot::watch::{OnReload, PluginWatcher, WatchError, WatchEvent, WatchOptions};
}

pub mod operator {
    //! What an operator tool built on the library needs beyond the embedder's API — the
    //! `pincer` binary is such a tool: the host's own output streams, crash and stop handlers,
    //! the quarantine's maintenance, plugin packing and installing, the host's descriptor,
    //! and the durable file operations of the disk seam.
    pub use crate::disk::{remove_dir, remove_file, rename};
    pub use crate::engines::crash_journal::{install_exit_watch, install_stop_handlers};
    pub use crate::engines::isolation::confine::{apply_sandbox, SandboxPolicy, WorkerLimits};
    pub use crate::engines::stdio;
    pub use crate::plugins::catalog::{plugin_roots, Catalog};
    pub use crate::plugins::install::{prepare, required_config_keys, InstallError, RequiredKey};
    pub use crate::plugins::pack::{pack, PackError, PackSource};
    pub use crate::slot::quarantine::{
        clear_exited, harvest_crashes, health_line, QuarantineRecord,
    };
    pub use crate::slot::requirements::HostDescriptor;
    pub use pincer_plugin_abi::latest::HostOperation;
}

#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod testing {
    //! Unstable: the host's internals that pincer's own black-box tests and benchmarks reach
    //! (fault injection, raw requests, the registry, the verifier, the crash journal). Enabled
    //! by the `test-support` feature, which only `pincer-tests` turns on; not part of the
    //! public API and free to change in any release.
    #![allow(missing_docs)]
    pub mod disk {
        pub use crate::disk::*;
    }
    pub mod engines {
        pub use crate::engines::*;
    }
    pub mod plugins {
        pub use crate::plugins::*;
    }
    pub mod slot {
        pub use crate::slot::*;
    }
    pub mod types {
        pub use crate::types::*;
    }
    pub mod gateway {
        pub use crate::gateway::protocol::parse_call;
        pub use crate::gateway::server::bind_socket;
    }
    pub mod harness {
        pub use crate::harness::tool_pairs::tool_pairs_are_sound;
    }
}
