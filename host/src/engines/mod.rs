//! Engines as the host runs them: the method table every engine layer is expanded from
//! ([`methods`]), one live [`EngineInstance`] behind the [`EngineBackend`] seam (in process,
//! or in a worker process: [`isolation`]; built by `make`), the leaf types every layer shares
//! (call errors: [`error`], the host's copy of `info`: [`descriptor`], deadlines: [`deadline`]),
//! owned requests a bounded call can borrow from, bounded calls themselves (handed off to a
//! pooled worker, or inline on a session worker under one watchdog), the host services
//! engines see, the engines built into the host (`legacy`), the checks of everything an engine
//! returns before the host reads it (`checked`: UTF-8, `info` caps), and the crash journal (with
//! its fatal-signal handler) that remembers an engine that took the process down, in a call or
//! outside one.
//!
//! Depends on [`crate::plugins`] (a library backend keeps its library mapped), never on the
//! slot: quarantine, fallback and projection live in [`crate::slot`].

pub mod backend;
pub mod bounded;
pub mod checked;
pub mod crash_journal;
pub mod deadline;
pub mod descriptor;
pub mod error;
pub mod fatal_signal;
pub mod instance;
pub mod isolation;
pub mod legacy;
mod make;
pub mod methods;
pub mod output_cap;
pub mod request;
pub mod services;
pub mod session_worker;
pub mod stdio;

pub use instance::{EngineCallError, EngineInstance};
