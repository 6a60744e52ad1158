//! `faulty` — a TEST-ONLY context engine whose config decides, per method, whether it works,
//! returns an error, panics, or hangs. The host's tests and the demo use it to prove that
//! failures are caught at the boundary, quarantined, and answered by `legacy`.
//!
//! Config (`plugins.entries.faulty.config`): one key per method (`factory`, `info`, `ingest`,
//! `ingestBatch`, `assemble`, `compact`, `bootstrap`, `afterTurn`, `maintain`,
//! `prepareSubagentSpawn`, `onSubagentEnded`, `callTool`, `commitTurn`, `dispose`, `rollback`, and
//! `drop`: the instance's `Drop`, where only `touch-thread` does anything) with a
//! [`Behaviour`]; `hangMs` bounds a hang (default one hour). Unset methods work.
//! `backgroundMaintenance: true` declares `turnMaintenanceMode: "background"`.
//! A `factory-behaviour` file in the plugin folder (a behaviour name) overrides `factory`: a
//! "build" whose factory fails, for reload tests.
//! `compactClaim: {"tokensBefore", "tokensAfter"}`: `compact` claims that compaction (`claims.rs`).
//! `hangMarker: true`: a hang first writes `hanging-<method>` into the engine's state directory
//! (what a test waits for before it aborts the call); a `hang` logs `faulty: hang over` when it
//! ends.
//! `disposeLog: PATH` appends one line per `dispose` to PATH (the instance's own tag, unique in
//! the process), so a test can count how often each instance was disposed; with it set, any
//! call after `dispose` fails ("called after dispose").
//!
//! # Behaviours that end or escape the process
//!
//! For the process-isolation tier (an engine run in a worker process, confined by
//! `pincer_host::engines::isolation::confine`). Each works for any method (and `factory`):
//!
//! - `abort`: `std::process::abort()` (`SIGABRT`);
//! - `fork-bomb`: forks in a loop, forever, in every child too. **Only ever configure it for
//!   an engine run isolated** (`isolation: "process"`), whose sandbox refuses `fork`: in a
//!   process that may fork, it takes the machine down (as root `RLIMIT_NPROC` does not stop it);
//! - `open-socket`: binds a UDP socket on `127.0.0.1:0`; `write-home`: writes a file named
//!   `faulty-was-here` into `$HOME`; `exec-shell`: runs `/bin/sh -c true`. Each returns
//!   normally when it worked and `EngineError::Failed` with the OS error when it did not
//!   (a sandbox that traps the call ends the process instead).
//!
//! And a constructor: when `PINCER_FAULTY_CONSTRUCTOR_EXIT` is set to a number when the
//! library is loaded, the library's ELF constructor (`.init_array`, run by `dlopen` before
//! any engine code) calls `std::process::exit` with it.
//!
//! An `exit`, a null write, a stack overflow and a 64 GiB allocation are the `hostile` engine's
//! (its `assemble` modes), not this one's: one test engine per crash.
//!
//! Never run these in the test process itself: they end it. Run them through the `pincer`
//! binary in a subprocess.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod claims;

use pincer_plugin_api::prelude::*;
use pincer_plugin_api::{AbortSignal, HostParams, ToolCallResult};
use serde::Deserialize;

/// What a method does when called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// Work normally.
    #[default]
    Ok,
    /// Return `EngineError::Failed`.
    Error,
    /// Panic.
    Panic,
    /// Sleep `hangMs`, ignoring the abort signal (an engine that never returns).
    Hang,
    /// Sleep `hangMs` but return `Aborted` as soon as the call's abort signal fires.
    HangUntilAbort,
    /// Return `EngineError::Aborted` at once, though nothing was aborted.
    AbortError,
    /// Hostile: write the call's read-only abort signal through a raw pointer (as no safe
    /// code can), then fail with `EngineError::Aborted`, hoping to dodge the quarantine.
    ForgeAbort,
    /// `std::process::abort()`.
    Abort,
    /// Fork in a loop, forever. **Only ever for an engine run isolated**, whose sandbox
    /// refuses `fork`: anywhere else it takes the machine down.
    ForkBomb,
    /// Bind a UDP socket on `127.0.0.1:0`: `Ok` when it worked, `Failed` with the OS error.
    OpenSocket,
    /// Write `$HOME/faulty-was-here`: `Ok` when it worked, `Failed` with the OS error.
    WriteHome,
    /// Run `/bin/sh -c true`: `Ok` when it worked, `Failed` with the OS error.
    ExecShell,
    /// Work, after leaving thread-exit work on the calling thread as a careless engine does:
    /// a `thread_local!` holding a `String` (a C++-style thread-local destructor) and
    /// `std::thread::current()` (std's exit hook, a `pthread` key) — both run when that thread
    /// exits, in this library's code.
    TouchThread,
}

/// The variable whose number, when set at load time, the library's constructor exits with.
pub const CONSTRUCTOR_EXIT_VAR: &str = "PINCER_FAULTY_CONSTRUCTOR_EXIT";

extern "C" fn constructor() {
    if let Some(code) = std::env::var(CONSTRUCTOR_EXIT_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
    {
        std::process::exit(code);
    }
}

/// Run by the dynamic loader when the library is loaded, before any engine code.
#[used]
#[cfg_attr(target_os = "linux", link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = constructor;

/// The outcome of an escape attempt: `Ok` when it worked, `Failed` with the OS error.
fn escaped(method: &str, what: &str, result: std::io::Result<()>) -> Result<(), EngineError> {
    result.map_err(|err| EngineError::failed(format!("faulty: {what} in {method}: {err}")))
}

fn fork_bomb() -> ! {
    loop {
        #[cfg(unix)]
        // SAFETY: none is needed for the harm this does; that is the point.
        unsafe {
            libc::fork();
        }
        #[cfg(not(unix))]
        std::thread::yield_now();
    }
}

thread_local! {
    static TOUCHED: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
struct Requirement {
    required_capabilities: Vec<String>,
    #[serde(default)]
    unsupported_message: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Config {
    #[serde(default)]
    hang_ms: Option<u64>,
    /// Declared in `info.acceptedHostParams` when set.
    #[serde(default)]
    accepted_host_params: Option<Vec<String>>,
    /// Declared in `info.hostRequirements`.
    #[serde(default)]
    host_requirements: BTreeMap<String, Requirement>,
    /// Declared in `info.ownsCompaction`.
    #[serde(default)]
    owns_compaction: bool,
    /// Declared in `info.turnMaintenanceMode` (`background` defers the turn's `maintain`).
    #[serde(default)]
    background_maintenance: bool,
    /// The message of configured errors (default: "faulty: configured to fail in <method>").
    #[serde(default)]
    error_message: Option<String>,
    /// `assemble` asks the host's model this (`llmComplete`) and adds its answer to the
    /// system prompt.
    #[serde(default)]
    ask_model: Option<String>,
    /// A file `dispose` appends the instance's tag to.
    #[serde(default)]
    dispose_log: Option<String>,
    /// A hang (`hang`, `hang-until-abort`) first writes `hanging-<method>` into the engine's
    /// state directory: the signal a test waits for before it aborts the call.
    #[serde(default)]
    hang_marker: bool,
    /// `compact` claims this compaction ([`claims`]).
    #[serde(default)]
    compact_claim: Option<claims::CompactClaim>,
    #[serde(flatten)]
    methods: BTreeMap<String, Behaviour>,
}

/// The file in the plugin folder whose content (a [`Behaviour`] name) overrides `factory`.
pub const FACTORY_KNOB: &str = "factory-behaviour";

/// The tag of the next instance (one counter per loaded copy of the library: the address of
/// the counter is part of the tag, so copies loaded side by side never share one).
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// The faulty engine.
pub struct Faulty {
    methods: BTreeMap<String, Behaviour>,
    accepted_host_params: Option<Vec<String>>,
    host_requirements: BTreeMap<String, Requirement>,
    owns_compaction: bool,
    background_maintenance: bool,
    error_message: Option<String>,
    ask_model: Option<String>,
    dispose_log: Option<String>,
    compact_claim: Option<claims::CompactClaim>,
    /// Where a hang writes its marker (`hangMarker`).
    hang_marker: Option<std::path::PathBuf>,
    /// Unique in the process: which instance this is.
    tag: u64,
    /// Set by `dispose`.
    disposed: AtomicBool,
    hang: Duration,
    host: Host,
    calls: AtomicU64,
    per_method: Mutex<BTreeMap<&'static str, u64>>,
}

/// `drop` (a key of the config like the methods') runs when the instance is dropped; only
/// `touch-thread` does anything there.
impl Drop for Faulty {
    fn drop(&mut self) {
        if self.methods.get("drop") == Some(&Behaviour::TouchThread) {
            let _ = act(Behaviour::TouchThread, "drop", self.hang, None, None);
        }
    }
}

fn act(
    behaviour: Behaviour,
    method: &str,
    hang: Duration,
    host: Option<&HostParams<'_>>,
    error_message: Option<&str>,
) -> Result<(), EngineError> {
    match behaviour {
        Behaviour::Ok => Ok(()),
        Behaviour::Error => Err(EngineError::failed(
            error_message
                .map(str::to_owned)
                .unwrap_or_else(|| format!("faulty: configured to fail in {method}")),
        )),
        Behaviour::Panic => panic!("faulty: configured to panic in {method}"),
        Behaviour::Hang => {
            tracing::warn!(method, hang_ms = hang.as_millis() as u64, "faulty: hanging");
            std::thread::sleep(hang);
            tracing::warn!(method, "faulty: hang over");
            Ok(())
        }
        Behaviour::AbortError => Err(EngineError::aborted(format!(
            "faulty: claims {method} was aborted"
        ))),
        Behaviour::ForgeAbort => {
            if let Some(signal) = host.and_then(|h| h.abort_signal()) {
                forge_abort(signal);
            }
            Err(EngineError::aborted(format!(
                "faulty: fired the abort signal itself in {method}"
            )))
        }
        Behaviour::Abort => std::process::abort(),
        Behaviour::ForkBomb => fork_bomb(),
        Behaviour::OpenSocket => escaped(
            method,
            "binding 127.0.0.1:0",
            std::net::UdpSocket::bind("127.0.0.1:0").map(drop),
        ),
        Behaviour::WriteHome => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            let path = std::path::Path::new(&home).join("faulty-was-here");
            escaped(
                method,
                &format!("writing {}", path.display()),
                std::fs::write(&path, b"faulty was here\n"),
            )
        }
        Behaviour::ExecShell => escaped(
            method,
            "running /bin/sh -c true",
            std::process::Command::new("/bin/sh")
                .args(["-c", "true"])
                .status()
                .and_then(|status| {
                    if status.success() {
                        Ok(())
                    } else {
                        Err(std::io::Error::other(format!(
                            "/bin/sh ended with {status}"
                        )))
                    }
                }),
        ),
        Behaviour::TouchThread => {
            let name = std::thread::current().name().map(str::to_owned);
            TOUCHED.with(|t| *t.borrow_mut() = format!("{method} on {name:?}"));
            Ok(())
        }
        Behaviour::HangUntilAbort => {
            let start = Instant::now();
            while start.elapsed() < hang {
                if let Some(host) = host {
                    host.check_abort()?;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        }
    }
}

/// Sets the signal's flag behind the host's back. The signal's only field is an `AtomicBool`
/// (`#[repr(C)]`), so a hostile engine can do this; the host must not believe it.
fn forge_abort(signal: &AbortSignal) {
    let flag = signal as *const AbortSignal as *const std::sync::atomic::AtomicBool;
    // SAFETY: `AbortSignal` is `#[repr(C)]` with one `AtomicBool` field; writing an atomic
    // through a shared reference is allowed. This is the hostile act the test needs.
    unsafe { (*flag).store(true, Ordering::Release) };
}

impl Faulty {
    fn on(&self, method: &'static str, host: Option<&HostParams<'_>>) -> Result<(), EngineError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut counts) = self.per_method.lock() {
            *counts.entry(method).or_default() += 1;
        }
        if self.dispose_log.is_some() && self.disposed.load(Ordering::Acquire) {
            // With `disposeLog` the engine also checks the host never uses it after dispose.
            return Err(EngineError::failed(format!(
                "faulty: {method} called after dispose"
            )));
        }
        let behaviour = self.methods.get(method).copied().unwrap_or_default();
        tracing::info!(method, behaviour = ?behaviour, "faulty: called");
        if let (Behaviour::Hang | Behaviour::HangUntilAbort, Some(dir)) =
            (behaviour, &self.hang_marker)
        {
            let _ = std::fs::write(dir.join(format!("hanging-{method}")), b"");
        }
        act(
            behaviour,
            method,
            self.hang,
            host,
            self.error_message.as_deref(),
        )
    }
}

/// The names of the host parameters present in `host`.
fn received_host_params(host: &HostParams<'_>) -> Vec<&'static str> {
    let mut names = Vec::new();
    if host.session_key().is_some() {
        names.push("sessionKey");
    }
    if host.prompt().is_some() {
        names.push("prompt");
    }
    if host.runtime_settings().is_some() {
        names.push("runtimeSettings");
    }
    if host.session_target().is_some() {
        names.push("sessionTarget");
    }
    if host.runtime_context_json().is_some() {
        names.push("runtimeContext");
    }
    if host.prompt_cache().is_some() {
        names.push("promptCache");
    }
    if host.abort_signal().is_some() {
        names.push("abortSignal");
    }
    names
}

impl Engine for Faulty {
    const ID: &'static str = "faulty";

    fn create(ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
        let config: Config = ctx.config()?;
        let hang = Duration::from_millis(config.hang_ms.unwrap_or(3_600_000));
        let mut factory = config.methods.get("factory").copied().unwrap_or_default();
        // A build knob for reload tests: a `factory-behaviour` file beside the library
        // overrides the config's `factory` (a new build whose factory fails or panics).
        if let Some(knob) = ctx
            .plugin_dir()
            .and_then(|dir| std::fs::read_to_string(dir.join(FACTORY_KNOB)).ok())
        {
            factory = serde_json::from_value(serde_json::Value::String(knob.trim().to_owned()))
                .map_err(|err| EngineError::failed(format!("faulty: {FACTORY_KNOB}: {err}")))?;
        }
        tracing::info!(method = "factory", behaviour = ?factory, "faulty: called");
        act(
            factory,
            "factory",
            hang,
            None,
            config.error_message.as_deref(),
        )?;
        Ok(Faulty {
            methods: config.methods,
            accepted_host_params: config.accepted_host_params,
            host_requirements: config.host_requirements,
            owns_compaction: config.owns_compaction,
            background_maintenance: config.background_maintenance,
            error_message: config.error_message,
            ask_model: config.ask_model,
            dispose_log: config.dispose_log,
            compact_claim: config.compact_claim,
            hang_marker: config
                .hang_marker
                .then(|| ctx.state_dir().map(std::path::Path::to_path_buf))
                .flatten(),
            tag: NEXT_TAG.fetch_add(1, Ordering::Relaxed),
            disposed: AtomicBool::new(false),
            hang,
            host,
            calls: AtomicU64::new(0),
            per_method: Mutex::new(BTreeMap::new()),
        })
    }

    fn info(&self) -> Result<EngineInfo, EngineError> {
        self.on("info", None)?;
        let object = serde_json::json!({ "type": "object" });
        let mut info = EngineInfo::new("Faulty (test only)", env!("CARGO_PKG_VERSION"))
            .owns_compaction(self.owns_compaction)
            .turn_maintenance_mode(if self.background_maintenance {
                TurnMaintenanceMode::Background
            } else {
                TurnMaintenanceMode::Foreground
            })
            .tool(
                "faulty_echo",
                "Echoes its arguments (test only).",
                object.clone(),
            )
            .tool(
                "faulty_calls",
                "How often each method was called (test only).",
                object,
            );
        if let Some(params) = &self.accepted_host_params {
            let params: Vec<&str> = params.iter().map(String::as_str).collect();
            info = info.accepted_host_params(&params);
        }
        for (operation, req) in &self.host_requirements {
            if let Some(op) = HostOperation::parse(operation) {
                let caps: Vec<&str> = req
                    .required_capabilities
                    .iter()
                    .map(String::as_str)
                    .collect();
                info = info.host_requirement(op, &caps, req.unsupported_message.as_deref());
            }
        }
        Ok(info)
    }

    fn ingest(&self, params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
        self.on("ingest", Some(&params.host))?;
        Ok(IngestResult { ingested: true })
    }

    fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
        self.on("assemble", Some(&params.host))?;
        let answer = match &self.ask_model {
            Some(question) => {
                let question = [Message::user(question.as_str())];
                let answer = self.host.llm_complete(&LlmRequest::new(&question))?;
                format!("; the model says: {}", answer.plain_text())
            }
            None => String::new(),
        };
        // Report which host parameters arrived, so tests can see the host's projection.
        Ok(ContextBuilder::new()
            .keep_range(0..params.messages.len())
            .system_prompt_addition(format!(
                "faulty engine was here; host params: {}{answer}",
                received_host_params(&params.host).join(",")
            ))
            .estimated_tokens(self.host.estimate_tokens(params.messages))
            .finish())
    }

    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        self.on("compact", Some(&params.host))?;
        if let Some(claim) = self.compact_claim {
            return Ok(claim.answer());
        }
        // Report what arrived instead of compacting: tests read the projection from here.
        Ok(CompactResult::nothing_to_do(format!(
            "faulty does not compact; host params: {}",
            received_host_params(&params.host).join(",")
        )))
    }
}

impl Bootstrap for Faulty {
    fn bootstrap(&self, params: &BootstrapParams<'_>) -> Result<BootstrapResult, EngineError> {
        self.on("bootstrap", Some(&params.host))?;
        Ok(BootstrapResult {
            bootstrapped: true,
            ..Default::default()
        })
    }
}

impl IngestBatch for Faulty {
    fn ingest_batch(
        &self,
        params: &IngestBatchParams<'_>,
    ) -> Result<IngestBatchResult, EngineError> {
        self.on("ingestBatch", Some(&params.host))?;
        Ok(IngestBatchResult {
            ingested_count: params.messages.len() as u64,
        })
    }
}

impl AfterTurn for Faulty {
    fn after_turn(&self, params: &AfterTurnParams<'_>) -> Result<(), EngineError> {
        self.on("afterTurn", Some(&params.host))
    }
}

impl Maintain for Faulty {
    fn maintain(&self, params: &MaintainParams<'_>) -> Result<MaintainResult, EngineError> {
        self.on("maintain", Some(&params.host))?;
        Ok(MaintainResult::default())
    }
}

impl SubagentSpawn for Faulty {
    fn prepare_subagent_spawn(
        &self,
        _params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<SpawnRollback>, EngineError> {
        self.on("prepareSubagentSpawn", None)?;
        let rollback = self.methods.get("rollback").copied().unwrap_or_default();
        let hang = self.hang;
        Ok(Some(SpawnRollback::new(move || {
            tracing::info!("faulty: rollback");
            act(rollback, "rollback", hang, None, None)
        })))
    }
}

impl SubagentEnded for Faulty {
    fn on_subagent_ended(&self, _params: &SubagentEndedParams<'_>) -> Result<(), EngineError> {
        self.on("onSubagentEnded", None)
    }
}

impl Tools for Faulty {
    fn call_tool(&self, params: &ToolCallParams<'_>) -> Result<ToolCallResult, EngineError> {
        if params.tool_name == "faulty_calls" {
            // How often each method was called, as JSON (not counted itself).
            let counts = self
                .per_method
                .lock()
                .map(|c| c.clone())
                .unwrap_or_default();
            return Ok(ToolCallResult::ok(
                serde_json::to_string(&counts).unwrap_or_default(),
            ));
        }
        self.on("callTool", Some(&params.host))?;
        Ok(ToolCallResult::ok(params.arguments_json))
    }
}

impl CommitTurn for Faulty {
    fn commit_turn(&self, params: &CommitTurnParams<'_>) -> Result<CommitTurnStatus, EngineError> {
        self.on("commitTurn", Some(&params.host))?;
        Ok(CommitTurnStatus::Committed)
    }
}

impl Dispose for Faulty {
    fn dispose(&self) -> Result<(), EngineError> {
        self.on("dispose", None)?;
        self.disposed.store(true, Ordering::Release);
        if let Some(path) = &self.dispose_log {
            use std::io::Write;
            let line = format!("{:p}-{}\n", &NEXT_TAG, self.tag);
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut file| file.write_all(line.as_bytes()))
                .map_err(|err| EngineError::failed(format!("faulty: disposeLog {path}: {err}")))?;
        }
        tracing::info!(
            calls = self.calls.load(Ordering::Relaxed),
            "faulty: disposed"
        );
        Ok(())
    }
}

pincer_plugin_api::export_engine!(Faulty);
