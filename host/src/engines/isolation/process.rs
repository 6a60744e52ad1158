//! The host side: [`ProcessBackend`], an [`EngineBackend`] whose engine runs in a worker
//! process (`pincer engine-worker`) of its own.
//!
//! **Starting.** Sockets for the control channel and each lane, and a shared page for the
//! lanes' abort words, are placed at fixed descriptors in the child; the handshake, the
//! start request and the engine's `info` follow (bounded by the start timeout). A worker that
//! dies while starting (a library constructor that calls `exit`, a factory that crashes) is
//! a failed factory with the reason.
//!
//! **A call** takes a free lane, resets its abort word, writes the call and pumps the lane
//! (non-blocking, with `poll`) until the reply: logs are forwarded to the host's `tracing`,
//! services (`llmComplete`, delegated compaction) are answered on the calling thread. The
//! call's abort (the one the guard holds, before any projection of host parameters) is
//! watched: once it fires, the lane's abort word is set — the engine sees its `AbortSignal`
//! fire — and if no reply comes within the grace period the worker is killed (`SIGKILL`).
//!
//! **Death.** A worker that exits, is killed by a signal, or breaks the protocol fails the
//! call in flight with [`CallErrorKind::Crashed`] and a reason naming what happened
//! (`engine worker killed by SIGSEGV during assemble`, `… exited with status 3 …`,
//! `… exceeded its memory limit …`, `… overflowed its stack …`, `… broke its sandbox …`),
//! read from its exit status and the tail of its stderr; every later call fails at once with
//! the same reason. The guard quarantines the engine as for any failure; a new worker is a
//! new generation (`Runtime::reload_plugin`), never this one restarted behind its back.
//!
//! **Messages by delta** (see [`super::protocol`]): per session the host remembers the entry
//! ids the worker holds and sends the messages after the common prefix.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pincer_plugin_abi::latest::{
    self as abi, AbortSignal, EngineError, EntryId, HostServicesArc, LlmCompleteRequest, Message,
    SpawnRollbackAbi, SubagentContextMode, SubagentSpawnParams,
};
use pincer_plugin_abi::{RResult, RSlice};

use super::protocol::{
    self, Call, CallFrame, CallReply, EngineCall, EngineReply, ExpectedLibrary, FrameError,
    HostFrame, ServiceReply, ServiceRequest, StartRequest, SyncedMessages, WorkerFrame, CONTROL_FD,
    FIRST_LANE_FD, LANES_ENV, LANE_STRIDE, PROTOCOL_VERSION, SHARED_FD,
};
use super::settings::{Confinement, WorkerSettings};
use super::wire::{self, SendParams, WireResult};
use crate::engines::backend::{current_call_abort, EngineBackend, Rollback};
use crate::engines::descriptor::EngineDescriptor;
use crate::engines::error::{CallErrorKind, EngineCallError};
use crate::engines::methods::for_each_engine_method;
use crate::engines::output_cap::{OutputCap, Stream, Verdict};
use crate::plugins::library::{EngineDirs, LoadedLibrary};
use crate::types::Method;

/// How many sessions' messages a worker holds at most (the least recently used go first).
const HELD_SESSIONS: usize = 64;
/// How long a call that no guard bounds (`dispose`) may take before its worker is killed: the
/// cleanup deadline's default.
const UNGUARDED_CALL_LIMIT: Duration = crate::config::DEFAULT_DISPOSE_TIMEOUT;
/// How a worker's error begins when it no longer holds what the host thinks it holds.
const LOST_COPY: &str = "engine worker: asked to keep";
/// How much of a worker's stderr is kept to explain its death.
const STDERR_TAIL_BYTES: usize = 8 << 10;

/// What the host needs to start a worker for one engine.
pub struct WorkerStart {
    /// What the worker is asked (its `max_log_level` is the host services' own, set when
    /// it is sent).
    pub request: StartRequest,
    /// How to start it.
    pub settings: WorkerSettings,
}

/// An engine in a worker process.
pub struct ProcessBackend {
    worker: Arc<Worker>,
}

struct Worker {
    engine_id: String,
    pid: u32,
    services: HostServicesArc,
    /// Shared with the output reader, which kills a worker that floods (never one reaped).
    child: Arc<Mutex<Option<Child>>>,
    /// Why the worker is gone; set once.
    death: Mutex<Option<String>>,
    dead: AtomicBool,
    lanes: Mutex<Vec<Lane>>,
    lanes_total: usize,
    lane_free: Condvar,
    shared: SharedPage,
    control: Mutex<UnixStream>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    stderr_done: Arc<(Mutex<bool>, Condvar)>,
    /// Calls started (the per-call output cap) and why the worker was killed for its output.
    output: Arc<OutputWatch>,
    synced: Mutex<SyncState>,
    /// Per session, the lock its message-carrying calls take (see `synced_call`).
    gates: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    abort_grace: Duration,
    protections: String,
    info: Mutex<Option<protocol::WireInfo>>,
}

struct Lane {
    index: usize,
    stream: UnixStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
}

/// The shared page of abort words (one per lane), mapped read-write by the host.
struct SharedPage {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the page is only accessed through atomic byte operations.
unsafe impl Send for SharedPage {}
// SAFETY: as above.
unsafe impl Sync for SharedPage {}

impl SharedPage {
    fn word(&self, lane: usize) -> &AtomicU8 {
        assert!(lane * LANE_STRIDE < self.len);
        // SAFETY: in bounds (checked), and the mapping lives as long as `self`.
        unsafe { &*(self.ptr.add(lane * LANE_STRIDE) as *const AtomicU8) }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping this page made.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// What the worker holds of each session: the entry ids of its messages.
#[derive(Default)]
struct SyncState {
    sessions: HashMap<String, HeldIds>,
    clock: u64,
    forget: Vec<String>,
}

struct HeldIds {
    ids: Vec<EntryId>,
    used: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn crashed(message: impl Into<String>) -> EngineCallError {
    EngineCallError::new(CallErrorKind::Crashed, message)
}

fn socket_pair() -> std::io::Result<(UnixStream, UnixStream)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for two descriptors.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors we own.
    Ok(unsafe {
        (
            UnixStream::from_raw_fd(fds[0]),
            UnixStream::from_raw_fd(fds[1]),
        )
    })
}

/// A close-on-exec duplicate of `fd` numbered above every descriptor the child is given, so
/// that `dup2` into place in the child never overwrites a source.
fn dup_high(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: duplicating a descriptor we own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 256) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn shared_page(lanes: usize) -> std::io::Result<(SharedPage, OwnedFd)> {
    let len = lanes * LANE_STRIDE;
    // SAFETY: a plain memfd_create with a static name.
    let fd = unsafe { libc::memfd_create(c"pincer-engine-abort".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizing our own memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: mapping our own memfd of `len` bytes.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok((
        SharedPage {
            ptr: ptr as *mut u8,
            len,
        },
        fd,
    ))
}

/// The name of a signal, as operators know it.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGSYS => "SIGSYS",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return format!("signal {signal}"),
    };
    name.to_owned()
}

/// Why a worker ended, from its exit status and the tail of its stderr; `during` names the
/// call in flight (`during assemble`, `while starting`).
pub fn death_reason(status: Option<ExitStatus>, stderr_tail: &str, during: &str) -> String {
    if let Some(line) = stderr_tail.lines().rev().find_map(|l| {
        l.split_once(super::SANDBOX_VIOLATION_PREFIX)
            .map(|(_, call)| call.trim())
    }) {
        return format!("engine worker broke its sandbox (system call {line}) {during}");
    }
    if stderr_tail.contains("memory allocation of") && stderr_tail.contains("failed") {
        let detail = stderr_tail
            .lines()
            .rev()
            .find(|l| l.contains("memory allocation of"))
            .unwrap_or_default()
            .trim();
        return format!("engine worker exceeded its memory limit ({detail}) {during}");
    }
    let signal = status.and_then(|s| s.signal());
    let code = status.and_then(|s| s.code());
    if signal == Some(libc::SIGSYS) || code == Some(super::SANDBOX_VIOLATION_STATUS) {
        // (A violation inside glibc's posix_spawn arrives as SIGSYS without the line.)
        return format!("engine worker broke its sandbox (a forbidden system call) {during}");
    }
    if stderr_tail.contains("has overflowed its stack") {
        return format!("engine worker overflowed its stack {during}");
    }
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("engine worker exited with status {code} {during}"),
            (None, Some(signal)) => {
                format!("engine worker killed by {} {during}", signal_name(signal))
            }
            _ => format!("engine worker ended ({status}) {during}"),
        },
        None => format!("engine worker stopped answering {during}"),
    }
}

fn during(method: Method) -> String {
    format!("during {method}")
}

impl ProcessBackend {
    /// Creates engine `engine_id` of an isolated `library` in a worker process of its own,
    /// confined by `confinement`, with the worker settings of the environment.
    ///
    /// # Errors
    /// The worker could not start, or the factory failed (its error, or how the worker died).
    pub fn from_library(
        library: &Arc<LoadedLibrary>,
        engine_id: &str,
        config: &serde_json::Value,
        dirs: &EngineDirs,
        host: HostServicesArc,
        confinement: Confinement,
    ) -> Result<Self, EngineCallError> {
        let start = WorkerStart {
            request: StartRequest {
                agent_dir: dirs.agent_dir.clone(),
                workspace_dir: dirs.workspace_dir.clone(),
                plugin_dir: Some(library.manifest().dir.to_string_lossy().into_owned()),
                state_dir: dirs
                    .engine_state_dir(engine_id)
                    .map(|d| d.to_string_lossy().into_owned()),
                ..StartRequest::new(
                    library.copy_path(),
                    library.facts().into(),
                    engine_id.to_owned(),
                    config.to_string(),
                    &confinement,
                )
            },
            settings: WorkerSettings::from_environment()
                .map_err(|e| EngineCallError::new(CallErrorKind::Failed, e))?,
        };
        Self::start(start, host)
    }

    /// Starts a worker and its engine; `services` answers the engine's host services.
    ///
    /// # Errors
    /// Why the worker could not start, or its engine could not be created (the factory's own
    /// error, or how the worker died).
    pub fn start(start: WorkerStart, services: HostServicesArc) -> Result<Self, EngineCallError> {
        match Self::launch(start, services)? {
            Launched::Engine(backend) => Ok(backend),
            Launched::Probed => Err(EngineCallError::new(
                CallErrorKind::Failed,
                "a start request without an engine id is a probe (probe_library)",
            )),
        }
    }

    /// Starts a worker; a request without an engine id is a probe, which ends it once it
    /// has opened and checked the library.
    fn launch(start: WorkerStart, services: HostServicesArc) -> Result<Launched, EngineCallError> {
        let lanes_n = start.settings.lanes.clamp(1, 64);
        let io = |what: &str, e: std::io::Error| {
            EngineCallError::new(
                CallErrorKind::Failed,
                format!("cannot start the engine worker ({what}): {e}"),
            )
        };
        let (page, page_fd) = shared_page(lanes_n).map_err(|e| io("shared page", e))?;
        let (control, control_child) = socket_pair().map_err(|e| io("socket", e))?;
        let mut lanes = Vec::with_capacity(lanes_n);
        let mut child_fds: Vec<(OwnedFd, RawFd)> = Vec::new();
        child_fds.push((
            dup_high(page_fd.as_raw_fd()).map_err(|e| io("dup", e))?,
            SHARED_FD,
        ));
        child_fds.push((
            dup_high(control_child.as_raw_fd()).map_err(|e| io("dup", e))?,
            CONTROL_FD,
        ));
        drop(control_child);
        for index in 0..lanes_n {
            let (host_end, child_end) = socket_pair().map_err(|e| io("socket", e))?;
            child_fds.push((
                dup_high(child_end.as_raw_fd()).map_err(|e| io("dup", e))?,
                FIRST_LANE_FD + index as RawFd,
            ));
            host_end
                .set_nonblocking(true)
                .map_err(|e| io("socket", e))?;
            lanes.push(Lane {
                index,
                stream: host_end,
                inbuf: Vec::new(),
                out: Vec::new(),
            });
        }
        drop(page_fd);
        let placements: Vec<(RawFd, RawFd)> = child_fds
            .iter()
            .map(|(fd, to)| (fd.as_raw_fd(), *to))
            .collect();
        let mut command = Command::new(&start.settings.program);
        // Nothing of the host's environment crosses (API keys, tokens, `HOME`): the worker
        // starts with the operator's grants (`sandbox.env`) and its lane count only.
        let granted_env = serde_json::from_str::<Confinement>(&start.request.confinement_json)
            .map(|c| c.env)
            .unwrap_or_default();
        command
            .arg(super::settings::WORKER_ARG)
            .env_clear()
            .envs(granted_env)
            .env(LANES_ENV, lanes_n.to_string())
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: only async-signal-safe calls (dup2) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                for &(from, to) in &placements {
                    if libc::dup2(from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| io(&format!("running {}", start.settings.program.display()), e))?;
        drop(child_fds);
        let pid = child.id();
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_done = Arc::new((Mutex::new(false), Condvar::new()));
        let output = Arc::new(OutputWatch::default());
        let streams = (child.stdout.take(), child.stderr.take());
        let child = Arc::new(Mutex::new(Some(child)));
        if let (Some(stdout), Some(stderr)) = streams {
            spawn_output_reader(
                stdout,
                stderr,
                start.request.engine_id.clone(),
                Arc::clone(&child),
                Arc::clone(&output),
                Arc::clone(&stderr_tail),
                Arc::clone(&stderr_done),
            );
        }
        let mut worker = Worker {
            engine_id: start.request.engine_id.clone(),
            pid,
            services,
            child,
            death: Mutex::new(None),
            dead: AtomicBool::new(false),
            lanes: Mutex::new(lanes),
            lanes_total: lanes_n,
            lane_free: Condvar::new(),
            shared: page,
            control: Mutex::new(control),
            stderr_tail,
            stderr_done,
            output,
            synced: Mutex::new(SyncState::default()),
            gates: Mutex::new(HashMap::new()),
            abort_grace: start.settings.abort_grace,
            protections: String::new(),
            info: Mutex::new(None),
        };
        match worker.handshake(&start) {
            Ok(Some(ready)) => {
                worker.protections = ready.protections;
                *lock(&worker.info) = Some(ready.info);
            }
            Ok(None) => {
                // A probe: it passed; the worker is ended.
                worker.shutdown();
                return Ok(Launched::Probed);
            }
            Err(error) => {
                worker.kill_and_reap();
                return Err(error);
            }
        }
        let worker = Arc::new(worker);
        Worker::spawn_control_reader(&worker);
        Ok(Launched::Engine(ProcessBackend { worker }))
    }

    #[cfg(feature = "test-support")]
    /// The protections the worker applied, one line.
    pub fn protections(&self) -> &str {
        &self.worker.protections
    }

    #[cfg(feature = "test-support")]
    /// Why the worker is gone, if it is.
    pub fn death(&self) -> Option<String> {
        lock(&self.worker.death).clone()
    }
}

/// What a started worker became.
enum Launched {
    /// An engine, serving.
    Engine(ProcessBackend),
    /// A probe that passed (the worker is ended).
    Probed,
}

/// Why a probe did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// No worker could be started (this program serves no workers, or the start failed): the
    /// library was not probed.
    #[error("no worker could be started to probe it: {0}")]
    Unavailable(String),
    /// The library crashed or failed its checks in the worker.
    #[error("{0}")]
    Failed(String),
}

impl ProbeError {
    /// A stable snake_case code for machines (`probe_unavailable`, `probe_failed`).
    pub const fn code(&self) -> &'static str {
        match self {
            ProbeError::Unavailable(_) => "probe_unavailable",
            ProbeError::Failed(_) => "probe_failed",
        }
    }
}

/// The probe the runtime installs in its loader ([`crate::plugins::library::LibraryProbe`]):
/// [`probe_library`], in a worker confined as `entries` asks for the plugin (its
/// `sandbox.readPaths` and `sandbox.env`). It fails closed: a library whose probe cannot run
/// at all is refused, never opened unprobed (the operator's opt-out is
/// `plugins.probeLibraries: false`).
pub fn library_probe(
    entries: &std::collections::BTreeMap<String, crate::config::EntryConfig>,
) -> crate::plugins::library::LibraryProbe {
    let entries = entries.clone();
    Arc::new(move |path, facts| {
        let services = crate::engines::services::HostServices::new(
            &facts.plugin_id,
            Arc::new(crate::engines::services::NoRuntimeCompaction),
            None,
        );
        let mut confinement = Confinement::of_entry(entries.get(&facts.plugin_id), Vec::new());
        // The probe only opens the library: always sandboxed, whatever the entry says.
        confinement.sandbox = true;
        let probed = probe_library(path, facts.into(), &confinement, services.into_abi());
        if let Err(err) = &probed {
            tracing::debug!(code = err.code(), library = %path.display(), "library probe: {err}");
        }
        match probed {
            Ok(()) => Ok(()),
            Err(ProbeError::Unavailable(why)) => Err(format!(
                "its probe could not run ({why}), so it was not opened; fix that, or set plugins.probeLibraries: false to open libraries unprobed (doctor shows it)"
            )),
            Err(ProbeError::Failed(reason)) => Err(reason),
        }
    })
}

/// Probes the library at `library` in a throwaway worker confined by `confinement`: its
/// constructors run there and the ABI and manifest checks run there, never in this process.
///
/// # Errors
/// [`ProbeError::Failed`] with what happened (`engine worker killed by SIGSEGV while
/// starting`, a failed check); [`ProbeError::Unavailable`] when no worker could start.
pub fn probe_library(
    library: &std::path::Path,
    expected: ExpectedLibrary,
    confinement: &Confinement,
    services: HostServicesArc,
) -> Result<(), ProbeError> {
    let settings = WorkerSettings {
        lanes: 1,
        ..WorkerSettings::from_environment().map_err(ProbeError::Unavailable)?
    };
    let start = WorkerStart {
        request: StartRequest::new(
            library,
            expected,
            String::new(),
            "{}".to_owned(),
            confinement,
        ),
        settings,
    };
    match ProcessBackend::launch(start, services) {
        Ok(Launched::Probed) => Ok(()),
        Ok(Launched::Engine(_)) => Err(ProbeError::Failed("the probe created an engine".into())),
        Err(e) if e.message.starts_with("cannot start the engine worker") => {
            Err(ProbeError::Unavailable(e.message))
        }
        Err(e) => Err(ProbeError::Failed(e.message)),
    }
}

impl Drop for ProcessBackend {
    fn drop(&mut self) {
        self.worker.shutdown();
    }
}

/// What the output reader shares with its worker: the number of calls started (so that each
/// call has its own output budget) and, once the worker kept writing beyond the caps, why it
/// was killed.
#[derive(Default)]
struct OutputWatch {
    calls: AtomicU64,
    flooded: Mutex<Option<String>>,
}

/// Forwards the worker's stdout and stderr to the log through its [`OutputCap`] (one thread,
/// `poll`ing both pipes, so that a quiet second still ends its window), keeps the tail of its
/// stderr to explain its death, and kills a worker that floods.
fn spawn_output_reader(
    stdout: std::process::ChildStdout,
    stderr: std::process::ChildStderr,
    engine_id: String,
    child: Arc<Mutex<Option<Child>>>,
    watch: Arc<OutputWatch>,
    tail: Arc<Mutex<VecDeque<u8>>>,
    done: Arc<(Mutex<bool>, Condvar)>,
) {
    let _ = std::thread::Builder::new()
        .name("engine-worker-output".into())
        .spawn(move || {
            let mut cap = OutputCap::new(
                format!("engine worker \"{engine_id}\""),
                Some(engine_id.clone()),
                Instant::now(),
            );
            let mut open = [Some(stdout.as_raw_fd()), Some(stderr.as_raw_fd())];
            let mut buf = [0u8; 8192];
            while open.iter().any(Option::is_some) {
                let mut fds: Vec<libc::pollfd> = open
                    .iter()
                    .map(|fd| libc::pollfd {
                        fd: fd.unwrap_or(-1),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                // SAFETY: a valid array of pollfd; negative descriptors are ignored.
                let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 250) };
                let now = Instant::now();
                if ready < 0 && std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                    break;
                }
                let mut verdict = cap.tick(now);
                for (index, pfd) in fds.iter().enumerate() {
                    let Some(fd) = open[index] else { continue };
                    if pfd.revents == 0 {
                        continue;
                    }
                    // SAFETY: reading into a buffer of its size from a descriptor we hold.
                    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                    if n <= 0 {
                        open[index] = None;
                        continue;
                    }
                    let bytes = &buf[..n as usize];
                    let stream = if index == 0 { Stream::Stdout } else { Stream::Stderr };
                    if stream == Stream::Stderr {
                        let mut t = lock(&tail);
                        t.extend(bytes);
                        while t.len() > STDERR_TAIL_BYTES {
                            t.pop_front();
                        }
                    }
                    let call = watch.calls.load(Ordering::Acquire);
                    verdict = cap.feed(stream, bytes, Some(call), now);
                }
                if let Verdict::Flooding(seconds) = verdict {
                    let mut flooded = lock(&watch.flooded);
                    if flooded.is_none() {
                        *flooded = Some(format!(
                            "engine worker killed: it kept writing beyond its output caps for {seconds} s in a row ({} lines or {} KiB per second, {} lines or {} KiB per call; docs/ISOLATION.md)",
                            crate::engines::output_cap::LINES_PER_SECOND,
                            crate::engines::output_cap::BYTES_PER_SECOND >> 10,
                            crate::engines::output_cap::LINES_PER_CALL,
                            crate::engines::output_cap::BYTES_PER_CALL >> 10,
                        ));
                        tracing::error!(target: "pincer::plugin", engine_id = %engine_id, "engine worker \"{engine_id}\" floods its output: killed");
                        // `Child::kill` never signals a process already reaped.
                        if let Some(child) = lock(&child).as_mut() {
                            let _ = child.kill();
                        }
                    }
                }
            }
            cap.finish();
            drop((stdout, stderr));
            let (flag, cv) = &*done;
            *lock(flag) = true;
            cv.notify_all();
        });
}

impl Worker {
    fn stderr_text(&self) -> String {
        let tail = lock(&self.stderr_tail);
        let (a, b) = tail.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn wait_stderr(&self, limit: Duration) {
        let (flag, cv) = &*self.stderr_done;
        let deadline = Instant::now() + limit;
        let mut done = lock(flag);
        while !*done {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            done = cv
                .wait_timeout(done, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits for the child (at most `limit`, then kills it) and returns its status.
    fn reap(&self, limit: Duration) -> Option<ExitStatus> {
        let mut child = lock(&self.child);
        let child_ref = child.as_mut()?;
        let deadline = Instant::now() + limit;
        loop {
            match child_ref.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(None) => {
                    let _ = child_ref.kill();
                    return child_ref.wait().ok();
                }
                Err(_) => return None,
            }
        }
    }

    fn kill_and_reap(&self) {
        if let Some(child) = lock(&self.child).as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Records the worker's death (once) and returns the reason.
    fn record_death(&self, during: &str, killed_reason: Option<String>) -> String {
        let mut death = lock(&self.death);
        if let Some(reason) = death.as_ref() {
            return reason.clone();
        }
        let reason = match killed_reason.or_else(|| lock(&self.output.flooded).clone()) {
            Some(reason) => {
                self.kill_and_reap();
                reason
            }
            None => {
                let status = self.reap(Duration::from_millis(500));
                self.wait_stderr(Duration::from_millis(200));
                death_reason(status, &self.stderr_text(), during)
            }
        };
        tracing::error!(engine_id = %self.engine_id, pid = self.pid, "{reason}");
        self.dead.store(true, Ordering::Release);
        *death = Some(reason.clone());
        reason
    }

    /// The handshake and start; `Ok(None)` when the start was a probe and it passed.
    fn handshake(
        &mut self,
        start: &WorkerStart,
    ) -> Result<Option<protocol::ReadyReport>, EngineCallError> {
        let mut control = lock(&self.control).try_clone().map_err(|e| {
            EngineCallError::new(CallErrorKind::Failed, format!("engine worker: {e}"))
        })?;
        let timeout = start.settings.start_timeout;
        let _ = control.set_read_timeout(Some(timeout));
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let fail = |worker: &Worker, err: FrameError| -> EngineCallError {
            match err {
                FrameError::Io(e)
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    crashed(worker.record_death(
                        "while starting",
                        Some(format!(
                            "engine worker did not start within {} ms (killed)",
                            timeout.as_millis()
                        )),
                    ))
                }
                FrameError::Closed | FrameError::Io(_) => {
                    crashed(worker.record_death("while starting", None))
                }
                other => crashed(worker.record_death(
                    "while starting",
                    Some(format!(
                        "engine worker broke the protocol while starting: {other}"
                    )),
                )),
            }
        };
        protocol::read_frame(&mut control, &mut buf).map_err(|e| fail(self, e))?;
        match protocol::decode::<WorkerFrame>(&buf).map_err(|e| fail(self, e))? {
            WorkerFrame::Hello { protocol: v, .. } if v == PROTOCOL_VERSION => {}
            WorkerFrame::Hello {
                protocol: v,
                pincer_version,
            } => {
                return Err(crashed(self.record_death(
                    "while starting",
                    Some(format!(
                        "engine worker speaks protocol {v} (pincer {pincer_version}), this host speaks {PROTOCOL_VERSION}: use the pincer binary of this host ({})",
                        start.settings.program.display()
                    )),
                )))
            }
            other => {
                return Err(fail(
                    self,
                    FrameError::Malformed(format!("expected Hello, got {other:?}")),
                ))
            }
        }
        let request = StartRequest {
            max_log_level: self.services.max_log_level() as u8,
            ..start.request.clone()
        };
        protocol::encode(&HostFrame::Start(Box::new(request)), &mut out)
            .and_then(|()| control.write_all(&out).map_err(FrameError::from))
            .map_err(|e| fail(self, e))?;
        loop {
            protocol::read_frame(&mut control, &mut buf).map_err(|e| fail(self, e))?;
            match protocol::decode::<WorkerFrame>(&buf).map_err(|e| fail(self, e))? {
                WorkerFrame::Ready(ready) => {
                    let _ = control.set_read_timeout(None);
                    return Ok(Some(*ready));
                }
                WorkerFrame::Probed => return Ok(None),
                WorkerFrame::StartFailed(error) => {
                    self.kill_and_reap();
                    return Err(EngineCallError::from(wire::engine_error(error)));
                }
                WorkerFrame::Log(log) => wire::with_log(&log, |r| self.services.log(r)),
                other => {
                    return Err(fail(
                        self,
                        FrameError::Malformed(format!("expected Ready, got {other:?}")),
                    ))
                }
            }
        }
    }

    fn spawn_control_reader(worker: &Arc<Worker>) {
        let Ok(mut control) = lock(&worker.control).try_clone() else {
            return;
        };
        let weak = Arc::downgrade(worker);
        let _ = std::thread::Builder::new()
            .name("engine-worker-control".into())
            .spawn(move || {
                let mut buf = Vec::new();
                loop {
                    let read = protocol::read_frame(&mut control, &mut buf);
                    let Some(worker) = weak.upgrade() else { return };
                    match read.and_then(|()| protocol::decode::<WorkerFrame>(&buf)) {
                        Ok(WorkerFrame::Log(log)) => {
                            wire::with_log(&log, |r| worker.services.log(r))
                        }
                        Ok(_) => {}
                        Err(FrameError::Closed) | Err(FrameError::Io(_)) => {
                            // A call in flight names its method in the reason: leave the
                            // record to it, unless it never comes.
                            let deadline = Instant::now() + Duration::from_secs(2);
                            while worker.lanes_busy() > 0
                                && !worker.dead.load(Ordering::Acquire)
                                && Instant::now() < deadline
                            {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            if !worker.dead.load(Ordering::Acquire) {
                                worker.record_death("between calls", None);
                            }
                            return;
                        }
                        Err(err) => {
                            worker.record_death(
                                "between calls",
                                Some(format!("engine worker broke the protocol: {err}")),
                            );
                            return;
                        }
                    }
                }
            });
    }

    /// Ends the worker: `Shutdown`, a short wait, then `SIGKILL`; always reaped.
    fn shutdown(&self) {
        {
            let mut death = lock(&self.death);
            if death.is_none() {
                *death = Some("engine worker was shut down".to_owned());
            }
        }
        if !self.dead.swap(true, Ordering::AcqRel) {
            let mut out = Vec::new();
            if protocol::encode(&HostFrame::Shutdown, &mut out).is_ok() {
                let _ = lock(&self.control).write_all(&out);
            }
        }
        let _ = self.reap(Duration::from_millis(500));
    }

    fn lanes_busy(&self) -> usize {
        self.lanes_total - lock(&self.lanes).len()
    }

    fn take_lane(&self) -> Lane {
        let mut lanes = lock(&self.lanes);
        loop {
            if let Some(lane) = lanes.pop() {
                return lane;
            }
            lanes = self
                .lane_free
                .wait(lanes)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn put_lane(&self, lane: Lane) {
        lock(&self.lanes).push(lane);
        self.lane_free.notify_one();
    }

    fn call(&self, method: Method, call: Call) -> Result<CallReply, EngineCallError> {
        if self.dead.load(Ordering::Acquire) {
            let reason = lock(&self.death)
                .clone()
                .unwrap_or_else(|| "engine worker was shut down".to_owned());
            return Err(crashed(format!("engine worker is not running: {reason}")));
        }
        let forget = std::mem::take(&mut lock(&self.synced).forget);
        self.output.calls.fetch_add(1, Ordering::AcqRel);
        let mut lane = self.take_lane();
        let result = self.exchange(&mut lane, method, CallFrame { forget, call });
        self.put_lane(lane);
        result
    }

    /// One call on `lane`: write it, then serve logs and services until the reply.
    fn exchange(
        &self,
        lane: &mut Lane,
        method: Method,
        frame: CallFrame,
    ) -> Result<CallReply, EngineCallError> {
        let abort = current_call_abort();
        let word = self.shared.word(lane.index);
        word.store(0, Ordering::Release);
        lane.inbuf.clear();
        if let Err(err) = protocol::encode(&HostFrame::Call(Box::new(frame)), &mut lane.out) {
            return Err(EngineCallError::new(
                CallErrorKind::Failed,
                format!("cannot send {method} to the engine worker: {err}"),
            ));
        }
        let mut written = 0usize;
        let started = Instant::now();
        let mut spun = false;
        let mut aborted_at: Option<Instant> = None;
        let mut chunk = [0u8; 64 << 10];
        loop {
            // Write what is pending.
            while written < lane.out.len() {
                match lane.stream.write(&lane.out[written..]) {
                    Ok(0) => return Err(self.died(method, None)),
                    Ok(n) => written += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Err(self.died(method, None)),
                }
            }
            // Read what has come, and handle each whole frame.
            loop {
                match lane.stream.read(&mut chunk) {
                    Ok(0) => return Err(self.died(method, None)),
                    Ok(n) => lane.inbuf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Err(self.died(method, None)),
                }
            }
            while lane.inbuf.len() >= 4 {
                let len = u32::from_le_bytes(lane.inbuf[..4].try_into().unwrap_or([0; 4])) as usize;
                if len > protocol::MAX_FRAME_BYTES {
                    return Err(self.broke(method, FrameError::TooLarge(len)));
                }
                if lane.inbuf.len() < 4 + len {
                    break;
                }
                let decoded = protocol::decode::<WorkerFrame>(&lane.inbuf[4..4 + len]);
                let frame = match decoded {
                    Ok(frame) => frame,
                    Err(err) => return Err(self.broke(method, err)),
                };
                lane.inbuf.drain(..4 + len);
                match frame {
                    WorkerFrame::Reply(Ok(reply)) => return Ok(*reply),
                    WorkerFrame::Reply(Err(error)) => {
                        return Err(EngineCallError::from(wire::engine_error(error)))
                    }
                    WorkerFrame::Log(log) => wire::with_log(&log, |r| self.services.log(r)),
                    WorkerFrame::Service(request) => {
                        let reply = self.serve(request, abort);
                        let mut out = Vec::new();
                        if protocol::encode(&HostFrame::ServiceReply(reply), &mut out).is_err() {
                            return Err(self.broke(
                                method,
                                FrameError::Malformed("an unanswerable service".into()),
                            ));
                        }
                        // Queue the reply behind anything still pending.
                        lane.out.drain(..written);
                        written = 0;
                        lane.out.extend_from_slice(&out);
                    }
                    other => {
                        return Err(self.broke(
                            method,
                            FrameError::Malformed(format!("{other:?} on a lane")),
                        ))
                    }
                }
            }
            // The call's abort: fire the engine's signal, then give it the grace period.
            if aborted_at.is_none() && abort.is_some_and(AbortSignal::is_aborted) {
                word.store(1, Ordering::Release);
                aborted_at = Some(Instant::now());
            }
            if let Some(at) = aborted_at {
                if at.elapsed() >= self.abort_grace {
                    let reason = format!(
                        "engine worker ignored the abort of {method} for {} ms and was killed (SIGKILL)",
                        self.abort_grace.as_millis()
                    );
                    self.record_death(&during(method), Some(reason));
                    // An abort the engine did not honour; whether it was the deadline's (a
                    // timeout, quarantined) or the caller's (not) is the guard's to say.
                    return Err(EngineCallError::new(
                        CallErrorKind::Aborted,
                        "Context engine operation aborted.",
                    ));
                }
            }
            // A call with no abort of its own (`dispose` at shutdown or after a reload) is
            // bounded by the cleanup deadline here: its worker is ended after it.
            if abort.is_none() && started.elapsed() >= UNGUARDED_CALL_LIMIT {
                let reason = format!(
                    "engine worker did not answer {method} within {} s and was killed (SIGKILL)",
                    UNGUARDED_CALL_LIMIT.as_secs()
                );
                return Err(crashed(self.record_death(&during(method), Some(reason))));
            }
            let timeout_ms = match (aborted_at, abort) {
                (Some(at), _) => {
                    (self.abort_grace.saturating_sub(at.elapsed()).as_millis() as i32).max(1)
                }
                (None, Some(_)) => 5,
                (None, None) => 100,
            };
            if written == lane.out.len() && aborted_at.is_none() && !spun {
                // The reply of a fast call comes within µs: looked for before sleeping.
                spun = true;
                super::spin_until_readable(&lane.stream, super::SPIN);
                continue;
            }
            let mut events = libc::POLLIN;
            if written < lane.out.len() {
                events |= libc::POLLOUT;
            }
            let mut fd = libc::pollfd {
                fd: lane.stream.as_raw_fd(),
                events,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut fd, 1, timeout_ms) };
            if self.dead.load(Ordering::Acquire) && fd.revents == 0 {
                return Err(self.died(method, None));
            }
        }
    }

    fn died(&self, method: Method, killed: Option<String>) -> EngineCallError {
        crashed(self.record_death(&during(method), killed))
    }

    fn broke(&self, method: Method, err: FrameError) -> EngineCallError {
        tracing::debug!(code = err.code(), %method, "engine worker broke the protocol: {err}");
        let reason = format!("engine worker broke the protocol during {method}: {err}");
        crashed(self.record_death(&during(method), Some(reason)))
    }

    /// Answers a host service the engine called.
    fn serve(&self, request: ServiceRequest, abort: Option<&AbortSignal>) -> ServiceReply {
        match request {
            ServiceRequest::LlmComplete {
                system_prompt,
                messages,
                max_tokens,
                temperature,
            } => {
                let result = wire::parse_messages(&messages.json)
                    .map_err(wire::worker_failure)
                    .and_then(|messages| {
                        let request = LlmCompleteRequest {
                            system_prompt: wire::borrow_opt(&system_prompt),
                            messages: RSlice::from_slice(&messages),
                            max_tokens: max_tokens.into(),
                            temperature: temperature.into(),
                            abort_signal: abort.into(),
                        };
                        self.services
                            .llm_complete(&request)
                            .into_result()
                            .map(|r| wire::messages_json(std::slice::from_ref(&r.message)))
                            .map(|json| json[1..json.len() - 1].to_owned())
                            .map_err(|e| wire::wire_error(&e))
                    });
                ServiceReply::LlmComplete(result)
            }
            ServiceRequest::DelegateCompaction { params, messages } => {
                let result = wire::parse_messages(&messages.json)
                    .map_err(wire::worker_failure)
                    .and_then(|parsed| {
                        let ids = wire::abi_ids(messages.ids);
                        let signal = abort.unwrap_or(AbortSignal::never());
                        wire::with_compact(&params, &parsed, &ids, signal, |p| {
                            self.services
                                .delegate_compaction_to_runtime(p)
                                .into_result()
                        })
                        .map_err(wire::worker_failure)?
                        .map(|r| wire::wire_compact_result(&r))
                        .map_err(|e| wire::wire_error(&e))
                    });
                ServiceReply::DelegateCompaction(result)
            }
        }
    }

    /// What to send of `messages` for `session`, by entry ids against what the worker holds.
    fn sync(&self, session: &str, messages: &[Message], ids: &[EntryId]) -> SyncedMessages {
        let with_ids = !ids.is_empty() && ids.len() == messages.len();
        let mut state = lock(&self.synced);
        if session.is_empty() || !with_ids {
            if !session.is_empty() && state.sessions.remove(session).is_some() {
                state.forget.push(session.to_owned());
            }
            return SyncedMessages {
                session: String::new(),
                keep: 0,
                append_json: wire::messages_json(messages),
                append_ids: wire::wire_ids(ids),
                with_ids,
            };
        }
        state.clock += 1;
        let now = state.clock;
        if !state.sessions.contains_key(session) && state.sessions.len() >= HELD_SESSIONS {
            if let Some(oldest) = state
                .sessions
                .iter()
                .min_by_key(|(_, held)| held.used)
                .map(|(k, _)| k.clone())
            {
                state.sessions.remove(&oldest);
                state.forget.push(oldest);
            }
        }
        // A pending `forget` of this session would drop what is sent now.
        state.forget.retain(|s| s != session);
        let held = state.sessions.entry(session.to_owned()).or_insert(HeldIds {
            ids: Vec::new(),
            used: now,
        });
        held.used = now;
        // The common prefix, by entry id; a message of no entry ends it.
        let keep = held
            .ids
            .iter()
            .zip(ids)
            .take_while(|(a, b)| a.as_str().is_some() && a == b)
            .count();
        held.ids.truncate(keep);
        held.ids.extend_from_slice(&ids[keep..]);
        SyncedMessages {
            session: session.to_owned(),
            keep: keep as u64,
            append_json: wire::messages_json(&messages[keep..]),
            append_ids: wire::wire_ids(&ids[keep..]),
            with_ids,
        }
    }

    /// Forgets what the worker holds of `session` (after a failed call its copy is unknown).
    fn unsync(&self, session: &str) {
        let mut state = lock(&self.synced);
        if state.sessions.remove(session).is_some() {
            state.forget.push(session.to_owned());
        }
    }

    /// A call carrying a session's messages: on failure, the worker's copy is not trusted.
    ///
    /// Calls of one session are serialized here (the worker's copy follows them in order); a
    /// worker that lost its copy meanwhile (a `forget` overtaking a re-send on another lane)
    /// says so, and the call is sent once more with every message.
    fn synced_call(
        &self,
        method: Method,
        session: &str,
        call: impl Fn(SyncedMessages) -> Call,
        messages: &[Message],
        ids: &[EntryId],
    ) -> Result<CallReply, EngineCallError> {
        let gate = self.session_gate(session);
        let _serial = lock(&gate);
        let synced = self.sync(session, messages, ids);
        let mut result = self.call(method, call(synced));
        if matches!(&result, Err(e) if e.message.starts_with(LOST_COPY)) {
            self.unsync(session);
            let synced = self.sync(session, messages, ids);
            result = self.call(method, call(synced));
        }
        if result.is_err() {
            self.unsync(session);
        }
        result
    }

    /// The lock that serializes `session`'s calls that carry messages.
    fn session_gate(&self, session: &str) -> Arc<Mutex<()>> {
        let mut gates = lock(&self.gates);
        if gates.len() > 4 * HELD_SESSIONS {
            gates.retain(|_, gate| Arc::strong_count(gate) > 1);
        }
        Arc::clone(gates.entry(session.to_owned()).or_default())
    }
}

fn unexpected(method: Method, reply: &CallReply) -> EngineCallError {
    EngineCallError::new(
        CallErrorKind::Failed,
        format!("engine worker answered {method} with {reply:?}"),
    )
}

/// The forwards of the method table's rows: the call's wire form (synced with the worker's
/// copy of the session's messages when the method passes them), and its reply back.
macro_rules! process_methods {
    ($($name:ident($params:ident) -> $result:ty { variant: $variant:ident, $($row:tt)* })*) => {
        $(
            fn $name(&self, params: &abi::$params<'_>) -> Result<$result, EngineCallError> {
                let reply = match SendParams::synced(params) {
                    Some((session, messages, ids)) => self.worker.synced_call(
                        Method::$variant,
                        session,
                        |synced| {
                            Call::Engine(Box::new(EngineCall::$variant(SendParams::to_wire(
                                params, synced,
                            ))))
                        },
                        messages,
                        ids,
                    )?,
                    None => self.worker.call(
                        Method::$variant,
                        Call::Engine(Box::new(EngineCall::$variant(SendParams::to_wire(
                            params,
                            SyncedMessages::default(),
                        )))),
                    )?,
                };
                match reply {
                    CallReply::Engine(EngineReply::$variant(result)) => {
                        <$result as WireResult>::from_wire(result).map_err(|e| {
                            EngineCallError::new(
                                CallErrorKind::Failed,
                                format!("engine worker sent a {} result with {e}", Method::$variant),
                            )
                        })
                    }
                    other => Err(unexpected(Method::$variant, &other)),
                }
            }
        )*
    };
}

impl EngineBackend for ProcessBackend {
    fn describe(
        &self,
        limits: &crate::config::ResultLimits,
    ) -> Result<EngineDescriptor, EngineCallError> {
        let info = lock(&self.worker.info).take().ok_or_else(|| {
            EngineCallError::new(CallErrorKind::Failed, "engine worker sent no info")
        })?;
        let info = wire::info(info).map_err(|e| {
            EngineCallError::new(CallErrorKind::Failed, format!("engine worker info: {e}"))
        })?;
        // Decoded frames hold only UTF-8 (the worker checked, and decoding refuses any other);
        // the caps are the host's to apply.
        crate::engines::checked::check_info_all(&info, limits)?;
        Ok(EngineDescriptor::from_abi(&info))
    }

    for_each_engine_method!(process_methods);

    fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<Rollback>, EngineCallError> {
        let call = Call::PrepareSubagentSpawn {
            parent_session_key: wire::owned(params.parent_session_key),
            child_session_key: wire::owned(params.child_session_key),
            context_mode: params.context_mode.into_option().map(|m| match m {
                SubagentContextMode::Isolated => 0,
                SubagentContextMode::Fork => 1,
            }),
            parent_session_id: wire::owned_opt(params.parent_session_id),
            parent_session_file: wire::owned_opt(params.parent_session_file),
            child_session_id: wire::owned_opt(params.child_session_id),
            child_session_file: wire::owned_opt(params.child_session_file),
            ttl_ms: params.ttl_ms.into_option(),
        };
        match self.worker.call(Method::PrepareSubagentSpawn, call)? {
            CallReply::Spawned(None) => Ok(None),
            CallReply::Spawned(Some(handle)) => Ok(Some(Rollback::new(
                crate::plugins::loading::host_spawn_rollback(WorkerRollback {
                    worker: Arc::clone(&self.worker),
                    handle,
                    used: AtomicBool::new(false),
                }),
                None,
            ))),
            other => Err(unexpected(Method::PrepareSubagentSpawn, &other)),
        }
    }

    fn dispose(&self) -> Result<(), EngineCallError> {
        let result = match self.worker.call(Method::Dispose, Call::Dispose)? {
            CallReply::Done => Ok(()),
            other => Err(unexpected(Method::Dispose, &other)),
        };
        self.worker.shutdown();
        result
    }

    fn ping(&self) -> Result<(), EngineCallError> {
        self.worker.call(Method::Info, Call::Ping).map(|_| ())
    }

    fn isolation(&self) -> Option<crate::engines::backend::WorkerInfo> {
        Some(crate::engines::backend::WorkerInfo {
            pid: self.worker.pid,
            protections: self.worker.protections.clone(),
            death: lock(&self.worker.death).clone(),
        })
    }
}

/// The rollback `prepareSubagentSpawn` returned, living in the worker.
struct WorkerRollback {
    worker: Arc<Worker>,
    handle: u64,
    used: AtomicBool,
}

impl SpawnRollbackAbi for WorkerRollback {
    fn rollback(&self) -> RResult<(), EngineError> {
        self.used.store(true, Ordering::Release);
        match self.worker.call(
            Method::Rollback,
            Call::Rollback {
                handle: self.handle,
            },
        ) {
            Ok(_) => RResult::ROk(()),
            Err(e) => RResult::RErr(EngineError::failed(e.message)),
        }
    }
}

impl Drop for WorkerRollback {
    fn drop(&mut self) {
        if !self.used.load(Ordering::Acquire) && !self.worker.dead.load(Ordering::Acquire) {
            let _ = self.worker.call(
                Method::Rollback,
                Call::DropRollback {
                    handle: self.handle,
                },
            );
        }
    }
}
