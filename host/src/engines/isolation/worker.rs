//! The worker side: `<host executable> engine-worker`, one process per isolated engine
//! instance, entered through [`super::serve_worker_if_requested`]. Its environment is what the
//! host gave it (the lane count and the entry's `sandbox.env`), nothing inherited.
//!
//! It says hello, takes its start request, confines itself ([`super::confine`]), opens the
//! verified private copy of the library (checking that the loaded code says what its bytes
//! said), creates the engine, and then serves calls: one thread per lane, each running the
//! engine's calls of its lane in order, with the engine's `AbortSignal` living in the page the
//! host shares. The main thread reads the control socket: a `Shutdown`, or the host's end
//! closing (the host died), ends the process at once.
//!
//! Host services work as in process: logs go back as frames (on the call's lane, or on the
//! control socket from the engine's own threads), `llmComplete` and
//! `delegateCompactionToRuntime` are asked of the host on the call's lane, and the token
//! estimate is the shared one (`pincer_plugin_api::tokens`), computed here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::plugins::loading::{host_services, open_library};
use pincer_plugin_abi::latest::{
    self as abi, AbortSignal, CompactParams, CompactResult, EngineBox, EngineError, EntryId,
    ExtensionRef, FactoryParams, HostServicesAbi, LlmCompleteRequest, LlmCompleteResponse,
    LogLevel, LogRecord, Message, SpawnRollbackBox, SubagentContextMode, SubagentSpawnParams,
};
use pincer_plugin_abi::{ROption, RResult, RSlice, RStr};

use super::protocol::{
    self, Call, CallReply, EngineCall, EngineReply, FrameError, HostFrame, ServiceReply,
    ServiceRequest, StartRequest, SyncedMessages, WireError, WireErrorKind, WorkerFrame,
    CONTROL_FD, FIRST_LANE_FD, LANES_ENV, LANE_STRIDE, PROTOCOL_VERSION, SHARED_FD,
};
use super::settings::Confinement;
use super::wire::{self, ServeParams, WireResult};
use crate::engines::checked::CheckedStrings;
use crate::engines::methods::for_each_engine_method;
use crate::types::Method;

/// The worker's exit status when it cannot speak the protocol at all (descriptors missing).
pub const WORKER_SETUP_FAILED: i32 = 120;

/// Runs the worker; returns the process's exit status.
pub fn main() -> i32 {
    // Started through /proc/self/exe, the kernel would name it `exe`; `ps` shows this instead.
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"pincer-worker".as_ptr(), 0, 0, 0) };
    let lanes: usize = match std::env::var(LANES_ENV).ok().and_then(|v| v.parse().ok()) {
        Some(n) if (1..=64).contains(&n) => n,
        _ => {
            eprintln!("pincer engine-worker: started without {LANES_ENV}: this mode is for the pincer host only");
            return WORKER_SETUP_FAILED;
        }
    };
    // SAFETY: the host placed a socket at CONTROL_FD (checked by the handshake right after:
    // anything else fails to read or write).
    let control = unsafe { UnixStream::from_raw_fd(CONTROL_FD) };
    let shared = match map_shared(lanes) {
        Ok(shared) => shared,
        Err(err) => {
            eprintln!("pincer engine-worker: cannot map the shared page: {err}");
            return WORKER_SETUP_FAILED;
        }
    };
    match run(control, shared, lanes) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("pincer engine-worker: {err}");
            WORKER_SETUP_FAILED
        }
    }
}

fn map_shared(lanes: usize) -> std::io::Result<&'static [u8]> {
    let len = lanes * LANE_STRIDE;
    // SAFETY: mapping a descriptor the host passed; the mapping is never unmapped, so the
    // `'static` slice (only ever read through atomics) stays valid.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            SHARED_FD,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: see above; `len` bytes are mapped.
    Ok(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
}

fn send(stream: &mut UnixStream, frame: &WorkerFrame, out: &mut Vec<u8>) -> Result<(), FrameError> {
    protocol::encode(frame, out)?;
    stream.write_all(out)?;
    Ok(())
}

fn run(mut control: UnixStream, shared: &'static [u8], lanes: usize) -> Result<(), FrameError> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    send(
        &mut control,
        &WorkerFrame::Hello {
            protocol: PROTOCOL_VERSION,
            pincer_version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        &mut out,
    )?;
    protocol::read_frame(&mut control, &mut buf)?;
    let start = match protocol::decode::<HostFrame>(&buf)? {
        HostFrame::Start(start) => start,
        other => {
            return Err(FrameError::Malformed(format!(
                "expected Start, got {other:?}"
            )))
        }
    };
    let control_writer = Arc::new(Mutex::new(control.try_clone()?));
    let (engine, protections, stack) = match start_engine(&start, &control_writer) {
        Ok(Some(started)) => started,
        Ok(None) => {
            send(&mut control, &WorkerFrame::Probed, &mut out)?;
            return Ok(());
        }
        Err(error) => {
            send(&mut control, &WorkerFrame::StartFailed(error), &mut out)?;
            return Ok(());
        }
    };
    let info = match engine_result(Method::Info, engine.info()) {
        Ok(info) => wire::wire_info(&info),
        Err(err) => {
            send(&mut control, &WorkerFrame::StartFailed(err), &mut out)?;
            return Ok(());
        }
    };
    let state = Arc::new(WorkerState {
        engine,
        sessions: Mutex::new(HashMap::new()),
        rollbacks: Mutex::new(HashMap::new()),
        next_rollback: AtomicU64::new(1),
    });
    for lane in 0..lanes {
        // SAFETY: the host placed lane sockets at FIRST_LANE_FD.. (as many as LANES_ENV says).
        let stream = unsafe { UnixStream::from_raw_fd(FIRST_LANE_FD + lane as i32) };
        let state = Arc::clone(&state);
        let signal = lane_signal(shared, lane);
        std::thread::Builder::new()
            .name(format!("engine-lane-{lane}"))
            .stack_size(stack)
            .spawn(move || serve_lane(stream, &state, signal))?;
    }
    send(
        &mut control,
        &WorkerFrame::Ready(Box::new(protocol::ReadyReport {
            info,
            pid: std::process::id(),
            protections,
        })),
        &mut out,
    )?;
    // The control socket: a shutdown, or the host's end closing, ends the process. Nothing
    // is dropped on the way out (the engine was disposed by the host, or the host is gone).
    while protocol::read_frame(&mut control, &mut buf).is_ok() {
        if let Ok(HostFrame::Shutdown) = protocol::decode::<HostFrame>(&buf) {
            break;
        }
    }
    let _ = std::io::stderr().flush();
    // SAFETY: ends the process without running destructors (lane threads may be mid-call).
    unsafe { libc::_exit(0) }
}

fn lane_signal(shared: &'static [u8], lane: usize) -> &'static AbortSignal {
    let word = &shared[lane * LANE_STRIDE];
    // SAFETY: `AbortSignal` is `#[repr(C)]` around one `AtomicBool` (size 1, align 1); the
    // byte lives in a `'static` shared mapping the host writes with atomic stores.
    unsafe { &*(word as *const u8 as *const AbortSignal) }
}

type Started = (EngineBox, String, usize);

/// Confines the worker, opens and checks the library, and creates the engine (`None`: a
/// probe, which stops after the checks).
fn start_engine(
    start: &StartRequest,
    control: &Arc<Mutex<UnixStream>>,
) -> Result<Option<Started>, WireError> {
    let confinement: Confinement = serde_json::from_str(&start.confinement_json)
        .map_err(|e| wire::worker_failure(format!("a start request that does not parse: {e}")))?;
    // Landlock keeps `/tmp` (shared with the user's other processes) out of reach: the
    // engine's temporary files go to its own state directory.
    if let Some(dir) = &start.state_dir {
        std::env::set_var("TMPDIR", dir);
        std::env::set_var("SQLITE_TMPDIR", dir);
    }
    // What it may read besides the grants: its library's private copy and its plugin folder
    // (data an engine ships beside its library).
    let mut readable = vec![std::path::PathBuf::from(&start.library)];
    readable.extend(start.plugin_dir.as_ref().map(std::path::PathBuf::from));
    let (protections, stack) =
        super::confine_worker(&confinement, readable).map_err(wire::worker_failure)?;
    // SAFETY: the verified private copy the host made of the bytes it checked.
    let opened = unsafe { open_library(Path::new(&start.library)) }
        .map_err(|e| wire::worker_failure(format!("cannot open {}: {e}", start.library)))?;
    let loaded =
        protocol::ExpectedLibrary::from(&crate::plugins::library::LibraryFacts::of_opened(&opened));
    if loaded != start.expected {
        return Err(wire::worker_failure(format!(
            "the loaded library says it is {loaded:?} but its bytes said {:?}",
            start.expected
        )));
    }
    if start.engine_id.is_empty() {
        std::mem::forget(opened);
        return Ok(None);
    }
    let services = WorkerServices {
        control: Arc::clone(control),
        max_level: wire::log_level(start.max_log_level),
    };
    let params = FactoryParams {
        engine_id: RStr::from_str(&start.engine_id),
        config_json: RStr::from_str(&start.config_json),
        agent_dir: wire::borrow_opt(&start.agent_dir),
        workspace_dir: wire::borrow_opt(&start.workspace_dir),
        plugin_dir: wire::borrow_opt(&start.plugin_dir),
        state_dir: wire::borrow_opt(&start.state_dir),
    };
    let engine = opened
        .new_engine(&params, host_services(services))
        .map_err(|e| wire::wire_error(&e))?;
    // The library stays loaded for the life of the process.
    std::mem::forget(opened);
    Ok(Some((engine, protections, stack)))
}

/// A session's messages as this worker holds them.
#[derive(Default)]
struct Held {
    messages: Vec<Message>,
    ids: Vec<EntryId>,
    with_ids: bool,
}

struct WorkerState {
    engine: EngineBox,
    sessions: Mutex<HashMap<String, Arc<Mutex<Held>>>>,
    rollbacks: Mutex<HashMap<u64, SpawnRollbackBox>>,
    next_rollback: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The messages of a call: held for its session, or only for this call.
enum Messages {
    Session(Arc<Mutex<Held>>),
    Once(Held),
}

impl WorkerState {
    fn sync(&self, synced: SyncedMessages) -> Result<Messages, String> {
        let append = wire::parse_messages(&synced.append_json)?;
        let ids = wire::abi_ids(synced.append_ids);
        if ids.len() != append.len() && synced.with_ids {
            return Err("entry ids that do not match the messages".into());
        }
        if synced.session.is_empty() {
            return Ok(Messages::Once(Held {
                messages: append,
                ids,
                with_ids: synced.with_ids,
            }));
        }
        let held = Arc::clone(lock(&self.sessions).entry(synced.session).or_default());
        {
            let mut h = lock(&held);
            let keep = usize::try_from(synced.keep).unwrap_or(usize::MAX);
            if keep > h.messages.len() {
                return Err(format!(
                    "asked to keep {keep} messages of {} held",
                    h.messages.len()
                ));
            }
            h.messages.truncate(keep);
            h.ids.truncate(keep);
            h.messages.extend(append);
            h.ids.extend(ids);
            h.with_ids = synced.with_ids;
        }
        Ok(Messages::Session(held))
    }
}

impl wire::HeldMessages for WorkerState {
    fn with_synced<R>(
        &self,
        synced: SyncedMessages,
        f: impl FnOnce(&[Message], &[EntryId]) -> R,
    ) -> Result<R, String> {
        let messages = self.sync(synced)?;
        Ok(with_messages(&messages, f))
    }
}

fn with_messages<R>(messages: &Messages, f: impl FnOnce(&[Message], &[EntryId]) -> R) -> R {
    let run = |h: &Held| f(&h.messages, if h.with_ids { &h.ids } else { &[] });
    match messages {
        Messages::Session(held) => run(&lock(held)),
        Messages::Once(held) => run(held),
    }
}

thread_local! {
    /// The lane this thread serves, for the host services an engine calls during a call.
    static LANE: RefCell<Option<LaneIo>> = const { RefCell::new(None) };
}

struct LaneIo {
    stream: UnixStream,
    buf: Vec<u8>,
    out: Vec<u8>,
}

fn serve_lane(mut stream: UnixStream, state: &WorkerState, signal: &'static AbortSignal) {
    if let Ok(clone) = stream.try_clone() {
        LANE.with(|lane| {
            *lane.borrow_mut() = Some(LaneIo {
                stream: clone,
                buf: Vec::new(),
                out: Vec::new(),
            })
        });
    }
    let mut buf = Vec::new();
    let mut out = Vec::new();
    // Whether the last call came soon after the reply before it: then the next one is looked
    // for briefly before sleeping (a wake-up from a blocking read costs tens of µs).
    let mut busy = false;
    loop {
        let idle_since = std::time::Instant::now();
        if busy {
            super::spin_until_readable(&stream, super::SPIN);
        }
        if protocol::read_frame(&mut stream, &mut buf).is_err() {
            return;
        }
        busy = idle_since.elapsed() < super::SPIN * 2;
        let reply = match protocol::decode::<HostFrame>(&buf) {
            Ok(HostFrame::Call(frame)) => {
                if !frame.forget.is_empty() {
                    let mut sessions = lock(&state.sessions);
                    for session in &frame.forget {
                        sessions.remove(session);
                    }
                }
                let call = frame.call;
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    dispatch(state, call, signal)
                }))
                .unwrap_or_else(|_| {
                    Err(wire::worker_failure(
                        "the engine worker failed while handling the call",
                    ))
                })
            }
            Ok(other) => Err(wire::worker_failure(format!(
                "a frame out of place on a lane: {other:?}"
            ))),
            Err(err) => Err(wire::worker_failure(err.to_string())),
        };
        if send(
            &mut stream,
            &WorkerFrame::Reply(reply.map(Box::new)),
            &mut out,
        )
        .is_err()
        {
            return;
        }
    }
}

/// A `method` result as the worker sends it: an error (its text made UTF-8), or a result whose
/// every string is UTF-8 — else the refusal the host would make in process
/// ([`crate::engines::checked`]).
fn engine_result<T: CheckedStrings>(
    method: Method,
    result: RResult<T, EngineError>,
) -> Result<T, WireError> {
    let value = result.into_result().map_err(|e| wire::wire_error(&e))?;
    match value.invalid_utf8() {
        Some(field) => {
            let refusal = crate::engines::checked::not_utf8(method, &field);
            Err(WireError {
                kind: WireErrorKind::Failed,
                message: refusal.message,
            })
        }
        None => Ok(value),
    }
}

fn bad(message: String) -> WireError {
    wire::worker_failure(format!("engine worker: {message}"))
}

/// The worker's side of the method table's rows: the call's wire form served to the engine,
/// its result checked and sent back.
macro_rules! serve_engine_methods {
    ($($name:ident($params:ident) -> $result:ty { variant: $variant:ident, $($row:tt)* })*) => {
        fn serve_engine_method(
            state: &WorkerState,
            call: EngineCall,
            signal: &AbortSignal,
        ) -> Result<CallReply, WireError> {
            let engine = &state.engine;
            match call {
                $(
                    EngineCall::$variant(params) => params
                        .serve(state, signal, |params: &abi::$params<'_>| engine.$name(params))
                        .map_err(bad)
                        .and_then(|r| engine_result(Method::$variant, r))
                        .map(|r| CallReply::Engine(EngineReply::$variant(WireResult::to_wire(&r)))),
                )*
            }
        }
    };
}

for_each_engine_method!(serve_engine_methods);

fn dispatch(state: &WorkerState, call: Call, signal: &AbortSignal) -> Result<CallReply, WireError> {
    let engine = &state.engine;
    match call {
        Call::Engine(call) => serve_engine_method(state, *call, signal),
        Call::Ping => Ok(CallReply::Done),
        Call::PrepareSubagentSpawn {
            parent_session_key,
            child_session_key,
            context_mode,
            parent_session_id,
            parent_session_file,
            child_session_id,
            child_session_file,
            ttl_ms,
        } => {
            let result = engine.prepare_subagent_spawn(&SubagentSpawnParams {
                parent_session_key: RStr::from_str(&parent_session_key),
                child_session_key: RStr::from_str(&child_session_key),
                context_mode: context_mode
                    .map(|m| {
                        if m == 1 {
                            SubagentContextMode::Fork
                        } else {
                            SubagentContextMode::Isolated
                        }
                    })
                    .into(),
                parent_session_id: wire::borrow_opt(&parent_session_id),
                parent_session_file: wire::borrow_opt(&parent_session_file),
                child_session_id: wire::borrow_opt(&child_session_id),
                child_session_file: wire::borrow_opt(&child_session_file),
                ttl_ms: ttl_ms.into(),
            });
            let rollback = engine_result(Method::PrepareSubagentSpawn, result)?.into_option();
            Ok(CallReply::Spawned(rollback.map(|r| {
                let handle = state.next_rollback.fetch_add(1, Ordering::Relaxed);
                lock(&state.rollbacks).insert(handle, r);
                handle
            })))
        }
        Call::Rollback { handle } => {
            let rollback = lock(&state.rollbacks).remove(&handle);
            match rollback {
                Some(r) => engine_result(Method::Rollback, r.rollback()).map(|()| CallReply::Done),
                None => Err(bad(format!("no rollback {handle}"))),
            }
        }
        Call::DropRollback { handle } => {
            lock(&state.rollbacks).remove(&handle);
            Ok(CallReply::Done)
        }
        Call::Dispose => {
            lock(&state.rollbacks).clear();
            lock(&state.sessions).clear();
            engine_result(Method::Dispose, engine.dispose()).map(|()| CallReply::Done)
        }
    }
}

/// Host services inside the worker.
struct WorkerServices {
    control: Arc<Mutex<UnixStream>>,
    max_level: LogLevel,
}

/// Asks the host a service on this thread's lane.
fn ask_host(request: ServiceRequest) -> Result<ServiceReply, EngineError> {
    LANE.with(|lane| {
        let mut lane = lane.borrow_mut();
        let Some(io) = lane.as_mut() else {
            return Err(EngineError::failed(
                "this host service is only available on the thread of a call in an isolated engine",
            ));
        };
        let failed = |e: FrameError| EngineError::failed(format!("the host did not answer: {e}"));
        send(&mut io.stream, &WorkerFrame::Service(request), &mut io.out).map_err(failed)?;
        protocol::read_frame(&mut io.stream, &mut io.buf).map_err(failed)?;
        match protocol::decode::<HostFrame>(&io.buf).map_err(failed)? {
            HostFrame::ServiceReply(reply) => Ok(reply),
            other => Err(EngineError::failed(format!(
                "the host answered a service with {other:?}"
            ))),
        }
    })
}

impl HostServicesAbi for WorkerServices {
    fn log(&self, record: &LogRecord<'_>) {
        let frame = WorkerFrame::Log(wire::wire_log(record));
        let sent_on_lane = LANE.with(|lane| match lane.try_borrow_mut() {
            Ok(mut lane) => match lane.as_mut() {
                Some(io) => {
                    let _ = send(&mut io.stream, &frame, &mut io.out);
                    true
                }
                None => false,
            },
            Err(_) => false,
        });
        if !sent_on_lane {
            let mut out = Vec::new();
            let _ = send(&mut lock(&self.control), &frame, &mut out);
        }
    }

    fn max_log_level(&self) -> LogLevel {
        self.max_level
    }

    fn llm_complete(
        &self,
        request: &LlmCompleteRequest<'_>,
    ) -> RResult<LlmCompleteResponse, EngineError> {
        if let Err(refused) = crate::engines::checked::check_llm_request(request) {
            return RResult::RErr(refused);
        }
        let asked = ServiceRequest::LlmComplete {
            system_prompt: wire::owned_opt(request.system_prompt),
            messages: wire::whole(request.messages, RSlice::from_slice(&[])),
            max_tokens: request.max_tokens.into_option(),
            temperature: request.temperature.into_option(),
        };
        let result = match ask_host(asked) {
            Ok(ServiceReply::LlmComplete(Ok(json))) => wire::parse_message(&json)
                .map(|message| LlmCompleteResponse { message })
                .map_err(EngineError::failed),
            Ok(ServiceReply::LlmComplete(Err(err))) => Err(wire::engine_error(err)),
            Ok(other) => Err(EngineError::failed(format!(
                "the host answered llmComplete with {other:?}"
            ))),
            Err(err) => Err(err),
        };
        result.into()
    }

    fn delegate_compaction_to_runtime(
        &self,
        params: &CompactParams<'_>,
    ) -> RResult<CompactResult, EngineError> {
        if let Err(refused) = crate::engines::checked::check_delegated_compaction(params) {
            return RResult::RErr(refused);
        }
        let asked = ServiceRequest::DelegateCompaction {
            params: Box::new(wire::wire_compact(params)),
            messages: wire::whole(params.messages, params.entry_ids),
        };
        let result = match ask_host(asked) {
            Ok(ServiceReply::DelegateCompaction(Ok(r))) => Ok(wire::compact_result(r)),
            Ok(ServiceReply::DelegateCompaction(Err(err))) => Err(wire::engine_error(err)),
            Ok(other) => Err(EngineError::failed(format!(
                "the host answered delegateCompactionToRuntime with {other:?}"
            ))),
            Err(err) => Err(err),
        };
        result.into()
    }

    fn estimate_tokens(&self, messages: RSlice<'_, Message>) -> u64 {
        crate::engines::checked::estimate_passed_messages(messages.as_slice())
    }

    fn extension(&self, _name: RStr<'_>) -> ROption<ExtensionRef> {
        ROption::RNone
    }
}
