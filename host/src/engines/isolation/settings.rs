//! How an isolated engine's worker is started: the program, its lanes and the confinement it
//! applies to itself (`plugins.entries.<id>.isolation`, `.limits`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::config::Isolation;

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
    /// Whether to apply the sandbox (seccomp, landlock, no-new-privs); on unless a test or
    /// the operator turns it off (`plugins.entries.<id>.sandbox: false`).
    #[serde(default)]
    pub sandbox: bool,
}

/// How to start workers.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The program: the `pincer` binary (`pincer engine-worker`).
    pub program: PathBuf,
    /// Lanes per worker: how many calls of different sessions run at once.
    pub lanes: usize,
    /// How long a call may ignore its abort before its worker is killed.
    pub abort_grace: std::time::Duration,
    /// How long a worker may take to start (handshake, library, factory).
    pub start_timeout: std::time::Duration,
}

/// The environment variable naming the worker program (the `pincer` binary).
pub const WORKER_PROGRAM_ENV: &str = "PINCER_WORKER_PROGRAM";
/// Lanes per worker by default.
pub const DEFAULT_LANES: usize = 4;

impl WorkerSettings {
    /// The defaults, with the program found by [`find_worker_program`].
    pub fn from_environment() -> Self {
        WorkerSettings {
            program: find_worker_program(),
            lanes: DEFAULT_LANES,
            abort_grace: std::time::Duration::from_millis(50),
            start_timeout: std::time::Duration::from_secs(30),
        }
    }
}

/// The worker program: `$PINCER_WORKER_PROGRAM`; this process's executable when it is
/// `pincer`; else a `pincer` beside it or one folder up (a test binary in `target/*/deps/`).
pub fn find_worker_program() -> PathBuf {
    if let Some(program) = std::env::var_os(WORKER_PROGRAM_ENV) {
        return PathBuf::from(program);
    }
    let name = format!("pincer{}", std::env::consts::EXE_SUFFIX);
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from(&name));
    if exe.file_name().is_some_and(|n| n == name.as_str()) {
        return exe;
    }
    let mut dir = exe.parent().map(PathBuf::from);
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join(&name);
        if candidate.is_file() {
            return candidate;
        }
        dir = d.parent().map(PathBuf::from);
    }
    PathBuf::from(name)
}
