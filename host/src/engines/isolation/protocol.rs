//! The worker protocol: what crosses the socket between the host and an engine worker.
//!
//! **Transport.** The host starts the worker with a shared-memory page and `1 + lanes` Unix
//! stream sockets at fixed descriptors ([`SHARED_FD`], [`CONTROL_FD`], [`FIRST_LANE_FD`]…).
//! The control socket carries the handshake, the start, logs from threads outside a call and
//! the shutdown; each *lane* carries one call at a time, so calls of different sessions run in
//! parallel without a demultiplexing thread on either side.
//!
//! **Frames.** A frame is a little-endian `u32` length and that many bytes of
//! [`postcard`](https://docs.rs/postcard), at most [`MAX_FRAME_BYTES`]. Messages travel inside
//! frames as OpenClaw JSON (the session's own format), so a message crosses exactly as it is
//! stored; everything else is postcard.
//!
//! **Handshake.** The worker speaks first: [`WorkerFrame::Hello`] with [`PROTOCOL_VERSION`] and
//! its pincer version. The host refuses any other version, then sends
//! [`HostFrame::Start`]; the worker confines itself, opens the library, creates the engine and
//! answers [`WorkerFrame::Ready`] (with the engine's `info`) or [`WorkerFrame::StartFailed`].
//!
//! **A call on a lane.** The host resets the lane's abort word in shared memory and writes
//! [`HostFrame::Call`]. Until the reply, the worker may send [`WorkerFrame::Log`] and
//! [`WorkerFrame::Service`] (`llmComplete`, `delegateCompactionToRuntime`), each service
//! answered by one [`HostFrame::ServiceReply`]; the call ends with [`WorkerFrame::Reply`]. The
//! host fires the call's abort by storing into the lane's abort word (the engine's
//! `AbortSignal` *is* that word), so an abort needs no frame and no reader thread.
//!
//! **Messages by delta.** The worker keeps each session's messages (with their entry ids) and
//! the host sends only what changed: [`SyncedMessages`] says how many of the worker's messages
//! to keep and which to append. The host decides by entry ids (an entry id names one message
//! of a session for good), so an `assemble` of a 10k-message session sends one new message,
//! not ten thousand.
//!
//! **Trust.** The worker runs a stranger's code and may write anything on its sockets: every
//! frame is length-checked before it is read and decoded with errors, never trusted; a
//! protocol violation ends the worker like a crash.

use pincer_plugin_abi::latest as abi;
use serde::{Deserialize, Serialize};

use crate::engines::methods::for_each_engine_method;

/// The protocol version both sides must speak.
pub const PROTOCOL_VERSION: u32 = 2;
/// The descriptor of the shared page in the worker.
pub const SHARED_FD: i32 = 3;
/// The descriptor of the control socket in the worker.
pub const CONTROL_FD: i32 = 4;
/// The descriptor of lane 0 in the worker; lane `i` is at `FIRST_LANE_FD + i`.
pub const FIRST_LANE_FD: i32 = 5;
/// The environment variable that tells the worker how many lanes it has.
pub const LANES_ENV: &str = "PINCER_WORKER_LANES";
/// Bytes of shared memory per lane (one cache line: the abort word, then padding).
pub const LANE_STRIDE: usize = 64;
/// The largest frame either side accepts (a whole 100k-message session fits).
pub const MAX_FRAME_BYTES: usize = 512 << 20;

/// Frames the host sends.
#[derive(Debug, Serialize, Deserialize)]
pub enum HostFrame {
    /// Start the engine (control socket, once, after `Hello`).
    Start(Box<StartRequest>),
    /// One call (a lane).
    Call(Box<CallFrame>),
    /// The answer to a [`WorkerFrame::Service`] (the lane it came on).
    ServiceReply(ServiceReply),
    /// Exit now (control socket): sent after `dispose`.
    Shutdown,
}

/// Frames the worker sends.
#[derive(Debug, Serialize, Deserialize)]
pub enum WorkerFrame {
    /// The first frame (control socket).
    Hello {
        /// [`PROTOCOL_VERSION`] of the worker.
        protocol: u32,
        /// The worker's pincer version.
        pincer_version: String,
    },
    /// The engine is created (control socket).
    Ready(Box<ReadyReport>),
    /// The engine could not be created (control socket); the worker exits after it.
    StartFailed(WireError),
    /// A probe's answer (a start request with no engine id): the library opened in the
    /// confined worker, its constructors ran, and the loaded code says what its bytes said.
    Probed,
    /// A log event of the engine.
    Log(WireLog),
    /// A host service the engine called during the call on this lane.
    Service(ServiceRequest),
    /// The call's result.
    Reply(Result<Box<CallReply>, WireError>),
}

/// What the worker needs to create the engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartRequest {
    /// The verified private copy of the library.
    pub library: String,
    /// What the library's bytes said it is (checked again against what the loaded code says).
    pub expected: ExpectedLibrary,
    /// The engine to create; empty for a probe (open the library, check it, answer
    /// [`WorkerFrame::Probed`]).
    pub engine_id: String,
    /// Its config, JSON.
    pub config_json: String,
    /// `agentDir`.
    pub agent_dir: Option<String>,
    /// `workspaceDir`.
    pub workspace_dir: Option<String>,
    /// `pluginDir`.
    pub plugin_dir: Option<String>,
    /// The engine's own state directory.
    pub state_dir: Option<String>,
    /// The most verbose log level the host wants (`LogLevel as u8`).
    pub max_log_level: u8,
    /// Confinement the worker applies before it opens the library, JSON of
    /// [`super::settings::Confinement`].
    pub confinement_json: String,
}

/// The library's own manifest as its bytes said it (`LibraryFacts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedLibrary {
    /// Plugin id.
    pub plugin_id: String,
    /// Plugin version.
    pub plugin_version: String,
    /// API version.
    pub api_version: String,
    /// Engine ids.
    pub engine_ids: Vec<String>,
    /// Built with `panic = "unwind"`.
    pub panic_unwind: bool,
}

impl StartRequest {
    /// A request for engine `engine_id` (empty: a probe) of the library at `library`, with no
    /// directories and the host's log level left to the sender.
    pub fn new(
        library: &std::path::Path,
        expected: ExpectedLibrary,
        engine_id: String,
        config_json: String,
        confinement: &super::settings::Confinement,
    ) -> Self {
        StartRequest {
            library: library.display().to_string(),
            expected,
            engine_id,
            config_json,
            agent_dir: None,
            workspace_dir: None,
            plugin_dir: None,
            state_dir: None,
            max_log_level: 0,
            confinement_json: serde_json::to_string(confinement).unwrap_or_default(),
        }
    }
}

impl From<&crate::plugins::library::LibraryFacts> for ExpectedLibrary {
    fn from(facts: &crate::plugins::library::LibraryFacts) -> Self {
        ExpectedLibrary {
            plugin_id: facts.plugin_id.clone(),
            plugin_version: facts.plugin_version.clone(),
            api_version: facts.api_version.clone(),
            engine_ids: facts.engine_ids.clone(),
            panic_unwind: facts.panic_unwind,
        }
    }
}

/// The worker is ready.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReadyReport {
    /// The engine's `info`.
    pub info: WireInfo,
    /// The worker's process id.
    pub pid: u32,
    /// The protections in force, one line for the operator.
    pub protections: String,
}

/// An engine error across the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// The kind.
    pub kind: WireErrorKind,
    /// Its message.
    pub message: String,
}

/// The kind of a [`WireError`]: the ABI's `EngineError` variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireErrorKind {
    /// `Failed`.
    Failed,
    /// `Panicked`.
    Panicked,
    /// `Aborted`.
    Aborted,
    /// `NotImplemented`.
    NotImplemented,
    /// `InvalidConfig`.
    InvalidConfig,
}

/// One log event.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireLog {
    /// `LogLevel as u8`.
    pub level: u8,
    /// The plugin's target.
    pub target: String,
    /// The message.
    pub message: String,
    /// Its fields.
    pub fields: Vec<(String, String)>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
}

/// The engine's `info`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireInfo {
    /// `id`.
    pub id: String,
    /// `name`.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `ownsCompaction`.
    pub owns_compaction: bool,
    /// `turnMaintenanceMode` is background.
    pub background_maintenance: bool,
    /// `hostRequirements`: operation (its contract name), capabilities, message.
    pub host_requirements: Vec<(String, Vec<String>, Option<String>)>,
    /// `acceptedHostParams`.
    pub accepted_host_params: Option<Vec<String>>,
    /// `tools`: name, description, parameters schema JSON.
    pub tools: Vec<(String, String, String)>,
    /// The optional-methods bit set.
    pub optional_methods: u32,
    /// `transcriptSemantics.currentTurnFence`.
    pub current_turn_fence: Option<String>,
    /// `transcriptSemantics.turnAdvancementIdempotency`.
    pub turn_advancement_idempotency: Option<String>,
}

/// A session's messages as the worker should hold them for this call.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SyncedMessages {
    /// The session (its id); empty: messages of no session, not kept.
    pub session: String,
    /// How many of the worker's held messages of this session stay.
    pub keep: u64,
    /// The messages to append after them: a JSON array.
    pub append_json: String,
    /// Their entry ids (`None`: a message of no entry).
    pub append_ids: Vec<Option<String>>,
    /// Whether the call passes entry ids at all.
    pub with_ids: bool,
}

/// Messages sent whole (a call that passes a few, a service's request).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct WholeMessages {
    /// A JSON array.
    pub json: String,
    /// Entry ids (empty: none passed).
    pub ids: Vec<Option<String>>,
}

/// `sessionTarget`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireSessionTarget {
    /// `agentId`.
    pub agent_id: Option<String>,
    /// `sessionId`.
    pub session_id: Option<String>,
    /// `sessionKey`.
    pub session_key: Option<String>,
    /// `storePath`.
    pub store_path: Option<String>,
    /// `threadId`.
    pub thread_id: Option<String>,
}

/// `runtimeContext.promptCache`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WirePromptCache {
    /// `retention`.
    pub retention: Option<String>,
    /// `lastCallUsage`: input, output, cache read, cache write, total.
    pub last_call_usage: Option<String>,
    /// `broke`.
    pub broke: Option<bool>,
    /// `lastCacheTouchAt`.
    pub last_cache_touch_at: Option<i64>,
    /// `expiresAt`.
    pub expires_at: Option<i64>,
}

/// The host parameters of a call.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct WireHost {
    /// `sessionKey`.
    pub session_key: Option<String>,
    /// `prompt`.
    pub prompt: Option<String>,
    /// `runtimeSettings`, JSON.
    pub runtime_settings_json: Option<String>,
    /// `sessionTarget`.
    pub session_target: Option<WireSessionTarget>,
    /// `runtimeContext`, JSON.
    pub runtime_context_json: Option<String>,
    /// Whether the call has an abort signal (the lane's).
    pub abortable: bool,
    /// `promptCache`.
    pub prompt_cache: Option<WirePromptCache>,
}

/// `model`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireModel {
    /// `provider`.
    pub provider: Option<String>,
    /// `id`.
    pub id: String,
    /// `contextWindow`.
    pub context_window: Option<u64>,
}

/// `compact`'s parameters (also `delegateCompactionToRuntime`'s).
#[derive(Debug, Serialize, Deserialize)]
pub struct WireCompact {
    /// `sessionId`.
    pub session_id: String,
    /// `sessionFile`.
    pub session_file: String,
    /// `agentId`.
    pub agent_id: Option<String>,
    /// `tokenBudget`.
    pub token_budget: Option<u64>,
    /// `force`.
    pub force: bool,
    /// `forceReason`.
    pub force_reason: Option<String>,
    /// `currentTokenCount`.
    pub current_token_count: Option<u64>,
    /// `compactionTarget` is threshold.
    pub threshold_target: bool,
    /// `customInstructions`.
    pub custom_instructions: Option<String>,
    /// Host parameters.
    pub host: WireHost,
}

/// One call.
#[derive(Debug, Serialize, Deserialize)]
pub struct CallFrame {
    /// Sessions whose held messages the worker may drop.
    pub forget: Vec<String>,
    /// The call.
    pub call: Call,
}

/// An engine method's params or result type as it crosses the socket: its wire form
/// (`super::wire` has the forms and their conversions).
pub trait WireForm {
    /// What the frame carries.
    type Wire: std::fmt::Debug + Serialize + serde::de::DeserializeOwned;
}

/// `EngineCall` and `EngineReply`: one variant per row of the method table, carrying its
/// params' or result's [`WireForm`].
macro_rules! wire_calls {
    ($($name:ident($params:ident) -> $result:ty { variant: $variant:ident, $($row:tt)* })*) => {
        /// A call of the method table's common shape.
        #[derive(Debug, Serialize, Deserialize)]
        pub enum EngineCall {
            $(
                #[doc = concat!("[`Method::", stringify!($variant), "`](crate::types::Method).")]
                $variant(<abi::$params<'static> as WireForm>::Wire),
            )*
        }

        /// What an [`EngineCall`] returned.
        #[derive(Debug, Serialize, Deserialize)]
        pub enum EngineReply {
            $(
                #[doc = concat!("[`Method::", stringify!($variant), "`](crate::types::Method).")]
                $variant(<$result as WireForm>::Wire),
            )*
        }
    };
}

for_each_engine_method!(wire_calls);

/// The calls of the contract (and the rollback handles `prepareSubagentSpawn` returns).
#[derive(Debug, Serialize, Deserialize)]
pub enum Call {
    /// A call of the method table's common shape (boxed: its largest forms are several times
    /// the size of the other calls).
    Engine(Box<EngineCall>),
    /// `prepareSubagentSpawn`.
    PrepareSubagentSpawn {
        /// `parentSessionKey`.
        parent_session_key: String,
        /// `childSessionKey`.
        child_session_key: String,
        /// `contextMode`: 0 isolated, 1 fork.
        context_mode: Option<u8>,
        /// `parentSessionId`.
        parent_session_id: Option<String>,
        /// `parentSessionFile`.
        parent_session_file: Option<String>,
        /// `childSessionId`.
        child_session_id: Option<String>,
        /// `childSessionFile`.
        child_session_file: Option<String>,
        /// `ttlMs`.
        ttl_ms: Option<u64>,
    },
    /// Run the rollback `prepareSubagentSpawn` returned.
    Rollback {
        /// Its handle.
        handle: u64,
    },
    /// Drop a rollback without running it.
    DropRollback {
        /// Its handle.
        handle: u64,
    },
    /// `dispose`.
    Dispose,
    /// Nothing: the round trip of an empty call (benchmarks, health).
    Ping,
}

/// What a call returned.
#[derive(Debug, Serialize, Deserialize)]
pub enum CallReply {
    /// An [`EngineCall`]'s result.
    Engine(EngineReply),
    /// A rollback, `dispose`, a ping.
    Done,
    /// `prepareSubagentSpawn`: the rollback's handle, if any.
    Spawned(Option<u64>),
}

/// One assembled item.
#[derive(Debug, Serialize, Deserialize)]
pub enum WireItem {
    /// Input messages `start..end`.
    Input(u64, u64),
    /// A message the engine made, JSON.
    New(String),
}

/// `assemble`'s result.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireAssembled {
    /// The items.
    pub items: Vec<WireItem>,
    /// `estimatedTokens`.
    pub estimated_tokens: Option<u64>,
    /// `systemPromptAddition`.
    pub system_prompt_addition: Option<String>,
    /// `promptAuthority` is `preassembly_may_overflow`.
    pub may_overflow: bool,
}

/// `compact`'s result.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireCompactResult {
    /// `ok`.
    pub ok: bool,
    /// `compacted`.
    pub compacted: bool,
    /// `reason`.
    pub reason: Option<String>,
    /// `result`.
    pub details: Option<WireCompaction>,
}

/// `compact`'s `result`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireCompaction {
    /// `summary`.
    pub summary: Option<String>,
    /// `firstKeptEntryId`.
    pub first_kept_entry_id: Option<String>,
    /// `tokensBefore`.
    pub tokens_before: u64,
    /// `tokensAfter`.
    pub tokens_after: Option<u64>,
    /// `details`, JSON.
    pub details_json: Option<String>,
    /// `sessionId`.
    pub session_id: Option<String>,
    /// `sessionFile`.
    pub session_file: Option<String>,
}

/// A host service the engine called.
#[derive(Debug, Serialize, Deserialize)]
pub enum ServiceRequest {
    /// `llmComplete`.
    LlmComplete {
        /// `systemPrompt`.
        system_prompt: Option<String>,
        /// The messages.
        messages: WholeMessages,
        /// `maxTokens`.
        max_tokens: Option<u64>,
        /// `temperature`.
        temperature: Option<f64>,
    },
    /// `delegateCompactionToRuntime`.
    DelegateCompaction {
        /// The parameters.
        params: Box<WireCompact>,
        /// The messages.
        messages: WholeMessages,
    },
}

/// The host's answer to a [`ServiceRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub enum ServiceReply {
    /// `llmComplete`: the model's message, JSON.
    LlmComplete(Result<String, WireError>),
    /// `delegateCompactionToRuntime`.
    DelegateCompaction(Result<WireCompactResult, WireError>),
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The other side closed its end.
    #[error("the other side closed the connection")]
    Closed,
    /// The length prefix is over [`MAX_FRAME_BYTES`].
    #[error("a frame of {0} bytes is over the limit of {MAX_FRAME_BYTES}")]
    TooLarge(usize),
    /// The bytes are not a frame of this protocol.
    #[error("a frame that is not of this protocol: {0}")]
    Malformed(String),
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// A stable snake_case code for machines (`frame_closed`, `frame_too_large`,
    /// `frame_malformed`, `frame_io`).
    pub const fn code(&self) -> &'static str {
        match self {
            FrameError::Closed => "frame_closed",
            FrameError::TooLarge(_) => "frame_too_large",
            FrameError::Malformed(_) => "frame_malformed",
            FrameError::Io(_) => "frame_io",
        }
    }
}

/// Encodes `frame` (length prefix included) into `out`, which is cleared first.
///
/// # Errors
/// When the frame does not encode or is too large.
pub fn encode<T: Serialize>(frame: &T, out: &mut Vec<u8>) -> Result<(), FrameError> {
    out.clear();
    out.extend_from_slice(&[0; 4]);
    let mut out_taken = std::mem::take(out);
    out_taken =
        postcard::to_extend(frame, out_taken).map_err(|e| FrameError::Malformed(e.to_string()))?;
    *out = out_taken;
    let len = out.len() - 4;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    out[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Decodes one frame body.
///
/// # Errors
/// When the bytes are not a `T`.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, FrameError> {
    postcard::from_bytes(body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Reads one whole frame body from a blocking reader into `buf`.
///
/// # Errors
/// [`FrameError::Closed`] at end of stream; the reader's errors.
pub fn read_frame(reader: &mut impl std::io::Read, buf: &mut Vec<u8>) -> Result<(), FrameError> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    buf.clear();
    buf.resize(len, 0);
    match reader.read_exact(buf) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(FrameError::Closed),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_oversized_lengths_are_refused_before_reading() {
        let mut out = Vec::new();
        encode(
            &HostFrame::Call(Box::new(CallFrame {
                forget: vec!["s".into()],
                call: Call::Ping,
            })),
            &mut out,
        )
        .unwrap();
        let mut buf = Vec::new();
        read_frame(&mut &out[..], &mut buf).unwrap();
        let back: HostFrame = decode(&buf).unwrap();
        assert!(
            matches!(back, HostFrame::Call(c) if matches!(c.call, Call::Ping) && c.forget == ["s"])
        );

        let huge = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..], &mut buf),
            Err(FrameError::TooLarge(_))
        ));
        assert!(matches!(
            read_frame(&mut &out[..2], &mut buf),
            Err(FrameError::Closed)
        ));
        assert!(matches!(
            decode::<HostFrame>(&[0xff, 0xff]),
            Err(FrameError::Malformed(_))
        ));
    }
}
