//! The process-isolation tier: an engine's verified library run in a worker process of its
//! own (`plugins.entries.<id>.isolation: "process"`), so that a segfault, an `exit`, a stack
//! overflow or a runaway allocation costs one call, not the host.
//!
//! - [`protocol`]: the framed, versioned protocol between host and worker (postcard frames,
//!   a handshake first, one call at a time per lane, messages kept in step by deltas).
//! - [`wire`]: ABI values to and from the protocol's owned values.
//! - [`process`]: the host side, [`process::ProcessBackend`], an
//!   [`EngineBackend`](super::backend::EngineBackend) like the in-process one.
//! - [`worker`]: the worker side, `pincer engine-worker`.
//! - [`settings`]: how workers are started and confined (`isolation`, `limits`, `sandbox`).
//!
//! **Trust model.** The worker runs a stranger's code. The host trusts nothing it sends:
//! frames are length-checked and decoded with errors, results are checked by the same
//! contract checks as in-process results, and a worker that breaks the protocol is ended
//! like one that crashed.

pub mod process;
pub mod protocol;
pub mod settings;
pub mod wire;
pub mod worker;

/// What a worker's stderr line starts with when its sandbox refused a system call.
pub const SANDBOX_VIOLATION_PREFIX: &str = "pincer-sandbox: refused system call ";

/// Applies `confinement` in the worker, before the library is opened; returns a line naming
/// the protections in force and the stack size for the threads that run calls.
///
/// # Errors
/// A limit or protection that could not be applied.
pub fn confine_worker(confinement: &settings::Confinement) -> Result<(String, usize), String> {
    let stack = confinement
        .limits
        .as_ref()
        .and_then(|l| l.get("stackBytes"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(8 << 20) as usize;
    Ok(("none".to_owned(), stack))
}
