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
//! - [`confine`]: what a worker does to itself before it opens the library: resource limits,
//!   `no_new_privs`, a seccomp filter (no network, no exec, no new processes), Landlock (writes
//!   only to the engine's own directories).
//!
//! **Trust model.** The worker runs a stranger's code. The host trusts nothing it sends:
//! frames are length-checked and decoded with errors, results are checked by the same
//! contract checks as in-process results, and a worker that breaks the protocol is ended
//! like one that crashed.

pub mod confine;
pub mod process;
pub mod protocol;
pub mod settings;
pub mod wire;
pub mod worker;

pub use confine::{SANDBOX_VIOLATION_PREFIX, SANDBOX_VIOLATION_STATUS};
pub use settings::{set_worker_program, worker_program};

/// How long either side looks for the other's next frame before it sleeps in the kernel: a
/// wake-up from a blocking read or `poll` costs tens of µs on an idle machine, more than a
/// whole call of a fast engine.
pub(crate) const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Returns once `stream` has something to read, or after `limit` (then the caller blocks).
pub(crate) fn spin_until_readable(stream: &impl std::os::fd::AsRawFd, limit: std::time::Duration) {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        let mut fd = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        if unsafe { libc::poll(&mut fd, 1, 0) } != 0 {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Applies `confinement` in the worker, before the library is opened and before any thread
/// that runs engine calls starts: the limits always, the sandbox unless turned off, with
/// `readable` (the library, the plugin folder) readable besides the operator's grants. Returns
/// a line naming the protections in force, and the stack size of the threads that run calls.
///
/// # Errors
/// Limits that do not parse or cannot be applied, a writable directory that is missing, or a
/// sandbox that cannot confine reads or drop capabilities here when the operator did not
/// accept a weaker one (`sandbox.allowWeak`).
pub fn confine_worker(
    confinement: &settings::Confinement,
    readable: Vec<std::path::PathBuf>,
) -> Result<(String, usize), String> {
    let limits: confine::WorkerLimits = match &confinement.limits {
        Some(value) => serde_json::from_value(value.clone())
            .map_err(|e| format!("plugins.entries.<id>.limits: {e}"))?,
        None => confine::WorkerLimits::default(),
    };
    let stack = limits.engine_thread_stack_bytes();
    if !confinement.sandbox {
        confine::apply_limits(&limits).map_err(|e| e.to_string())?;
        return Ok((
            "limits only (plugins.entries.<id>.sandbox is false)".to_owned(),
            stack,
        ));
    }
    let mut readable_paths = readable;
    readable_paths.extend(confinement.read_paths.iter().cloned());
    let protections = confine::apply_sandbox(&confine::SandboxPolicy {
        writable_dirs: confinement.writable_dirs.clone(),
        readable_paths,
        limits,
        allow_connect: false,
    })
    .map_err(|e| e.to_string())?;
    Ok((refuse_weak(&protections, confinement.allow_weak)?, stack))
}

/// The protections line of a worker, or why it refuses to start: a sandbox that cannot confine
/// reads (Landlock) or drop capabilities here is refused unless the operator accepted a weaker
/// one (`sandbox.allowWeak`), and then the line says so.
fn refuse_weak(protections: &confine::Protections, allow_weak: bool) -> Result<String, String> {
    let weak: Vec<String> = [
        ("landlock", &protections.landlock),
        ("capabilities", &protections.capabilities),
    ]
    .iter()
    .filter(|(_, p)| !p.is_active())
    .map(|(name, p)| format!("{name}: {p}"))
    .collect();
    if !weak.is_empty() && !allow_weak {
        return Err(format!(
            "the sandbox cannot confine this engine here ({}): the worker refuses to start; run the engine in process, or accept the weaker sandbox with plugins.entries.<id>.sandbox.allowWeak: true (doctor shows it)",
            weak.join("; ")
        ));
    }
    let mut line = protections.to_string();
    if !weak.is_empty() {
        line.push_str("\nweak: accepted by sandbox.allowWeak");
    }
    Ok(line)
}

/// Makes this program a worker when it was started as one, else records that it can start
/// workers from itself and returns. Call it first in `main`, before anything else runs (no
/// threads, no logging): a worker's process is the engine's, confined before the library
/// opens.
///
/// ```no_run
/// // The first statement of the embedder's `main`:
/// pincer_host::isolation::serve_worker_if_requested();
/// ```
///
/// When `argv[1]` is `engine-worker`, this never returns: the worker serves its host and the
/// process exits with the worker's status.
pub fn serve_worker_if_requested() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == settings::WORKER_ARG)
    {
        let status = worker::main();
        std::process::exit(status);
    }
    settings::record_serves_workers();
}

#[cfg(test)]
mod tests {
    use super::confine::{Protection, Protections};
    use super::refuse_weak;

    #[test]
    fn a_sandbox_that_cannot_confine_reads_is_refused_unless_accepted() {
        let active = Protection::Active {
            detail: String::new(),
        };
        let mut p = Protections {
            no_new_privs: active.clone(),
            seccomp: active.clone(),
            landlock: active.clone(),
            landlock_abi: Some(7),
            capabilities: active.clone(),
            limits: active,
        };
        assert!(refuse_weak(&p, false).is_ok());
        p.landlock = Protection::Unavailable {
            reason: "kernel lacks it".into(),
        };
        let refused = refuse_weak(&p, false).unwrap_err();
        assert!(
            refused.starts_with("the sandbox cannot confine this engine here (landlock: unavailable — kernel lacks it): the worker refuses to start"),
            "{refused}"
        );
        assert!(refused.contains("sandbox.allowWeak: true"), "{refused}");
        let accepted = refuse_weak(&p, true).unwrap();
        assert!(
            accepted.ends_with("weak: accepted by sandbox.allowWeak"),
            "{accepted}"
        );
    }
}
