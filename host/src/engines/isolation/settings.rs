//! How an isolated engine's worker is started: the program, its lanes and the confinement it
//! applies to itself (`plugins.entries.<id>.isolation`, `.limits`, `.sandbox`).
//!
//! **The worker program is the host itself.** A worker is this very executable, started again
//! through `/proc/self/exe` (the file the kernel mapped at start, whatever is now at its
//! path), as `<exe> engine-worker` — never a file found by name beside the binary or on `PATH`.
//! A `main` becomes able to serve workers by calling [`serve_worker_if_requested`](super::serve_worker_if_requested) first (the
//! `pincer` binary does; an embedder's binary does the same). A program that cannot call it (a
//! test harness) names an explicit worker program with [`set_worker_program`]: an absolute
//! path, checked like a plugin's files. A program that did neither has no worker program:
//! isolated engines and library probes fail with what to do ([`worker_program`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// What a worker applies to itself before it opens the library; sent in the start request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Confinement {
    /// The operator's `plugins.entries.<id>.limits` (JSON; defaults where unset).
    #[serde(default)]
    pub limits: Option<serde_json::Value>,
    /// Directories the engine may write: its state and workspace directories.
    #[serde(default)]
    pub writable_dirs: Vec<PathBuf>,
    /// Paths the engine may read besides its library, its plugin folder, its writable
    /// directories and what every worker may read: `plugins.entries.<id>.sandbox.readPaths`.
    #[serde(default)]
    pub read_paths: Vec<PathBuf>,
    /// Environment variables the worker sets before it opens the library:
    /// `plugins.entries.<id>.sandbox.env` (nothing is inherited from the host).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Whether to apply the sandbox (seccomp, landlock, no-new-privs); on unless a test or
    /// the operator turns it off (`plugins.entries.<id>.sandbox: false`).
    #[serde(default)]
    pub sandbox: bool,
    /// Start although reads cannot be confined here (`sandbox.allowWeak`).
    #[serde(default)]
    pub allow_weak: bool,
}

impl Confinement {
    /// The confinement `plugins.entries.<id>` asks for (`limits`, `sandbox`), with these
    /// writable directories.
    pub fn of_entry(
        entry: Option<&crate::config::EntryConfig>,
        writable_dirs: Vec<PathBuf>,
    ) -> Self {
        let sandbox = entry.and_then(|e| e.sandbox.clone());
        let grants = sandbox.as_ref().map(|s| s.grants()).unwrap_or_default();
        Confinement {
            limits: entry.and_then(|e| e.limits.clone()),
            writable_dirs,
            read_paths: grants.read_paths,
            env: grants.env,
            sandbox: sandbox.as_ref().is_none_or(|s| s.enabled()),
            allow_weak: grants.allow_weak,
        }
    }
}

/// How to start workers.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The program ([`worker_program`]), run as `<program> engine-worker`.
    pub program: PathBuf,
    /// Lanes per worker: how many calls of different sessions run at once.
    pub lanes: usize,
    /// How long a call may ignore its abort before its worker is killed.
    pub abort_grace: std::time::Duration,
    /// How long a worker may take to start (handshake, library, factory).
    pub start_timeout: std::time::Duration,
}

/// The argument word that makes a program a worker: `<program> engine-worker`.
pub const WORKER_ARG: &str = "engine-worker";
/// Lanes per worker by default.
pub const DEFAULT_LANES: usize = 4;
/// The program a worker-serving host starts its workers from: its own executable, as the
/// kernel holds it (a file replaced at its path since does not change what runs).
pub const SELF_EXE: &str = "/proc/self/exe";

static SERVES_WORKERS: AtomicBool = AtomicBool::new(false);
static EXPLICIT_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

impl WorkerSettings {
    /// The defaults, with the program of [`worker_program`].
    ///
    /// # Errors
    /// No worker program: this process's `main` did not call [`serve_worker_if_requested`](super::serve_worker_if_requested)
    /// and none was named with [`set_worker_program`].
    pub fn from_environment() -> Result<Self, String> {
        Ok(WorkerSettings {
            program: worker_program()?,
            lanes: DEFAULT_LANES,
            abort_grace: std::time::Duration::from_millis(50),
            start_timeout: std::time::Duration::from_secs(30),
        })
    }
}

/// Records that this program's `main` serves workers (see
/// [`serve_worker_if_requested`](super::serve_worker_if_requested)(super::serve_worker_if_requested)).
pub(super) fn record_serves_workers() {
    SERVES_WORKERS.store(true, Ordering::Release);
}

/// Names an explicit worker program, for a process whose `main` cannot call
/// [`serve_worker_if_requested`](super::serve_worker_if_requested) (a test harness): an absolute path to a regular, executable
/// file, owned by root or this user and writable by nobody else, as plugin files are checked.
/// It is run as `<program> engine-worker` and must be a build of this host (the handshake
/// checks the protocol). Once set it stays; setting the same path again is accepted.
///
/// # Errors
/// A path that is relative, not a regular executable file, or writable by others; or another
/// program already named.
pub fn set_worker_program(program: &Path) -> Result<(), String> {
    check_worker_program(program)?;
    let set = EXPLICIT_PROGRAM.get_or_init(|| program.to_owned());
    if set != program {
        return Err(format!(
            "the worker program is already {}; it cannot become {}",
            set.display(),
            program.display()
        ));
    }
    Ok(())
}

fn check_worker_program(program: &Path) -> Result<(), String> {
    if !program.is_absolute() {
        return Err(format!(
            "the worker program {} is not an absolute path: name it absolutely (a program is never looked up by name)",
            program.display()
        ));
    }
    let meta = std::fs::metadata(program)
        .map_err(|e| format!("the worker program {}: {e}", program.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "the worker program {} is not a regular file",
            program.display()
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: no arguments, no failure.
        let uid = unsafe { libc::getuid() };
        if meta.mode() & 0o111 == 0 {
            return Err(format!(
                "the worker program {} is not executable",
                program.display()
            ));
        }
        if meta.mode() & 0o022 != 0 || (meta.uid() != 0 && meta.uid() != uid) {
            return Err(format!(
                "the worker program {} can be changed by others (mode {:o}, owner {}): make it owned by you or root and writable only by its owner (chmod go-w)",
                program.display(),
                meta.mode() & 0o7777,
                meta.uid()
            ));
        }
    }
    Ok(())
}

/// The worker program: the one named with [`set_worker_program`]; else this executable
/// (`SELF_EXE`) when `main` called [`serve_worker_if_requested`](super::serve_worker_if_requested).
///
/// # Errors
/// Neither: what the embedder must do.
pub fn worker_program() -> Result<PathBuf, String> {
    if let Some(program) = EXPLICIT_PROGRAM.get() {
        return Ok(program.clone());
    }
    if SERVES_WORKERS.load(Ordering::Acquire) {
        return Ok(PathBuf::from(SELF_EXE));
    }
    Err(
        "this program cannot start engine workers: its main must call pincer_host::isolation::serve_worker_if_requested() first, or name a worker program with pincer_host::isolation::set_worker_program()"
            .to_owned(),
    )
}

/// The worker program for people (`doctor`): the path, or why there is none.
pub fn describe_worker_program() -> String {
    match worker_program() {
        Ok(p) if p == Path::new(SELF_EXE) => match std::env::current_exe() {
            Ok(exe) => format!("this executable ({}, through {SELF_EXE})", exe.display()),
            Err(_) => format!("this executable ({SELF_EXE})"),
        },
        Ok(p) => format!("{} (named explicitly)", p.display()),
        Err(e) => format!("none — {e}"),
    }
}
