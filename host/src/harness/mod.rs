//! The turn harness (docs/CONTRACT.md §2): one agent turn through the slot's engine, as an embedding
//! host or the CLI runs it.
//!
//! [`Harness::turn`] does, in order: the host-requirement check (`agent-run`); `bootstrap` and
//! `maintain("bootstrap")` once per session when its file existed before; `assemble` over the
//! session's history (its `systemPromptAddition` prepended to the system prompt), with tool
//! pairs repaired (`tool_pairs`); the precheck (`precheck`, skipped when the engine owns
//! compaction and vouches for its assembly) and the compaction it asks for, and the truncation
//! of oversized tool results in the model's view (the session keeps them whole); the model call,
//! with overflow recovery — at most three compactions (`force`, `compactionTarget: "budget"`)
//! and a retry after each; tool calls answered by the [`ToolExecutor`]; finalize with
//! `afterTurn`, else the turn's messages handed over as `session` hands them (one batch call,
//! else one call per message); `maintain("turn")` after a clean turn; the threshold compaction.
//! Every message of the turn is appended to the session as it is produced; compactions append `compaction` entries (history is never rewritten), and the
//! index `sessions.json` gets the usage and compaction counters.
//!
//! A prompt that is a slash command runs it instead of a turn: `/compact [instructions]`
//! compacts now; `/new` and `/reset` append a `reset` entry with that reason (docs/CONTRACT.md §10a),
//! so the next turn starts from a fresh context in the same file.
//!
//! Subagents: [`Harness::spawn_subagent`] runs `prepareSubagentSpawn` before a child run
//! (skipped for light isolated children) and its rollback when the spawn fails;
//! [`Harness::end_subagent`] calls `onSubagentEnded` with the reason. The engine is disposed
//! once per instance when the runtime shuts down.
//!
//! The session's writer is released while the engine compacts: the runtime compaction (behind
//! `delegateCompactionToRuntime` and `legacy.compact`) opens the file itself.
//!
//! [`Harness::turn`] runs on its caller's thread, so its engine calls take the guard's hand-off
//! to a pooled worker. A [`SessionRunner`] binds a session to a
//! [`SessionWorker`](crate::SessionWorker) of its own: its turns run
//! there, their engine calls inline (tens of nanoseconds of guard instead of a thread hand-off),
//! and a session whose engine call got stuck is recovered for its next work (see `runner`).
//! `pincer run` runs its turns that way.
//!
//! The fronts (the gateway, the CLI) run every other operation on a held session through its
//! handle, [`Session`] ([`Harness::session`]), with the harness's own parameter types; the
//! harness keeps its sessions behind the [`SessionStore`] trait.

pub(crate) mod assemble;
pub(crate) mod precheck;
pub(crate) mod runner;
pub(crate) mod session;
pub(crate) mod tool_pairs;

pub use assemble::AssembledView;
pub use runner::SessionRunner;
pub use session::{
    AfterTurnParams, AssembleParams, Assembled, IngestMode, IngestParams, Ingested,
    ManualCompactParams, ManualCompaction, Session, SessionError, SubagentSpawnParams,
    ToolCallParams,
};

use std::sync::Arc;

use pincer_plugin_abi::latest::{
    AbortController, AssembledItem, CompactionTarget, EntryId, HostOperation, Message,
    PromptAuthority, Role, SubagentContextMode, SubagentEndReason, ToolCallRef,
};
use serde::Serialize;

use crate::engines::request::{
    AfterTurnRequest, AssembleRequest, BootstrapRequest, CompactRequest, HostInputs,
    MaintainRequest, PromptCacheInput, SubagentEndedRequest, SubagentSpawnRequest, ToolCallRequest,
};
use crate::engines::session_worker::WorkError;
use crate::model::{ModelError, ModelProvider, ModelRequest, ToolExecutor, ToolSpec};
use crate::session::context::build_session_context;
use crate::session::key::{AgentId, SessionFile, SessionKey};
use crate::session::store::{
    CounterUpdate, OnExisting, Presence, SessionStore, SessionSummary, StoreError,
};
use crate::session::{SessionTree, SessionWriteError, SessionWriter};
use crate::slot::guarded::{GuardError, GuardedEngine};
use crate::slot::requirements::{HostDescriptor, HostSupportError};
use crate::slot::source::{EngineSource, FixedEngine};
use crate::types::{Durability, Method};

use self::precheck::{Precheck, Route};

/// At most this many overflow compactions per model call (OpenClaw's recovery limit).
pub const MAX_OVERFLOW_COMPACTIONS: usize = 3;
/// At most this many model calls per turn (a model that keeps calling tools is stopped).
pub const MAX_MODEL_CALLS_PER_TURN: usize = 32;
/// OpenClaw's default reserve (`reserveTokens`), before the floor.
pub const DEFAULT_RESERVE_TOKENS: u64 = 16_384;
/// OpenClaw's reserve floor (`reserveTokensFloor`).
pub const RESERVE_TOKENS_FLOOR: u64 = 20_000;

/// How the harness runs turns.
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    /// The model's context window, in tokens.
    pub context_window: u64,
    /// The system prompt (the engine's addition is prepended to it).
    pub system_prompt: String,
    /// How appends reach the disk.
    pub durability: Durability,
    /// Tokens kept free for the answer: OpenClaw's 16384 raised to the 20000 floor, at most a
    /// quarter of a small window (so a 4096-token window still compacts).
    pub reserve_tokens: u64,
    /// The host the turn runs in (for the `agent-run` requirement check).
    pub host: HostDescriptor,
}

impl HarnessOptions {
    /// Defaults for a window of `context_window` tokens.
    pub fn new(context_window: u64) -> Self {
        HarnessOptions {
            context_window,
            system_prompt: String::new(),
            durability: Durability::Entry,
            reserve_tokens: reserve_for_window(context_window),
            host: HostDescriptor::embedded(),
        }
    }
}

/// Why an engine's answer `compacted` is not taken as one: its tokens did not go down
/// (`compaction::compact::not_smaller`). `legacy`'s answer is the built-in
/// compaction's, which applies the rule itself to like-for-like estimates (its `tokensBefore`
/// may be a provider's count) and appends nothing when it fails.
pub fn engine_not_smaller(
    answered_by: &str,
    tokens_before: u64,
    tokens_after: Option<u64>,
) -> Option<String> {
    if answered_by == crate::types::LEGACY_ENGINE_ID {
        return None;
    }
    crate::compaction::compact::not_smaller(tokens_before, tokens_after).map(|_| {
        format!(
            "the engine answered compacted, but its tokens did not go down ({tokens_before} -> {}): reported as not compacted",
            tokens_after.unwrap_or_default()
        )
    })
}

/// OpenClaw's reserve (16384, raised to the 20000 floor), scaled down to at most a quarter of
/// a window too small for it.
pub fn reserve_for_window(context_window: u64) -> u64 {
    DEFAULT_RESERVE_TOKENS
        .max(RESERVE_TOKENS_FLOOR)
        .min(context_window / 4)
}

/// Why a turn failed.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The session could not be read or written.
    #[error(transparent)]
    Session(#[from] SessionWriteError),
    /// The session store failed.
    #[error(transparent)]
    Store(#[from] crate::session::StoreError),
    /// The engine cannot run in this host (§5, fail closed).
    #[error(transparent)]
    HostSupport(#[from] HostSupportError),
    /// The guard refused (strict policy, abort, both engines failing).
    #[error("context engine {method} failed: {source}")]
    Engine {
        /// The method.
        method: &'static str,
        /// The guard's error.
        source: GuardError,
    },
    /// The model call failed (after recovery, for overflows).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A turn on a harness built without a model ([`Harness::without_model`]).
    #[error("this harness has no model: it runs every operation of a session but turns")]
    NoModel,
    /// The model kept calling tools past the limit.
    #[error("the model made {MAX_MODEL_CALLS_PER_TURN} calls in one turn without answering; the turn was stopped")]
    TooManyModelCalls,
    /// The session's work did not finish on its worker: an engine call overran and ignored its
    /// abort (the engine is quarantined as the guard's rules say), or no worker could start.
    #[error(transparent)]
    Work(#[from] WorkError),
    /// The key's session file cannot be used (a directory, a link, a file outside the store):
    /// nothing was changed, and the key is not pointed at a new file.
    #[error(
        "session key \"{key}\" names {}, which {why}: nothing was changed. Fix or remove it, use a \
         new key, or replace the key's session (`pincer run --force`; the old file is kept)",
        file.display()
    )]
    Unusable {
        /// The key.
        key: String,
        /// The file the index names.
        file: std::path::PathBuf,
        /// What is wrong with it, to finish "which …".
        why: &'static str,
    },
    /// A session file named on the command line has no key to run it under.
    #[error(
        "session file {} is not in the store's index and its name is no session key ({source}): \
         name the session by a key",
        file.display()
    )]
    Unkeyed {
        /// The file.
        file: std::path::PathBuf,
        /// Why its stem is not a key.
        source: crate::session::key::SessionKeyError,
    },
}

impl HarnessError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            HarnessError::Session(e) => e.code(),
            HarnessError::Store(e) => e.code(),
            HarnessError::HostSupport(_) => "host_unsupported",
            HarnessError::Engine { .. } => "engine_failed",
            HarnessError::Model(e) => e.code(),
            HarnessError::NoModel => "no_model",
            HarnessError::TooManyModelCalls => "too_many_model_calls",
            HarnessError::Work(WorkError::Stuck { .. }) => "engine_call_stuck",
            HarnessError::Work(WorkError::Unavailable(_)) => "session_worker_unavailable",
            HarnessError::Unusable { .. } => "session_unusable",
            HarnessError::Unkeyed { .. } => "session_unkeyed",
        }
    }
}

/// A session the harness runs turns on.
#[derive(Debug)]
pub struct HarnessSession {
    /// Where it is.
    pub summary: SessionSummary,
    /// Its key (`sessions.json`), which names its agent.
    pub key: SessionKey,
    writer: Option<SessionWriter>,
    /// The store the session is kept in (what reopens its writer).
    store: StoreRef,
    existed: bool,
    bootstrapped: bool,
    /// The turns the session holds (its user messages), once counted; `None`: count them from
    /// the file when next needed.
    turns: Option<u64>,
    last_usage: Option<pincer_plugin_abi::latest::Usage>,
    /// When the last model call answered, ms since the Unix epoch.
    last_call_at: Option<i64>,
    /// Maintenance running in the background (`turnMaintenanceMode: "background"`), joined
    /// before the session's next engine call.
    background: Option<std::thread::JoinHandle<()>>,
    /// The active context, parsed once and extended as the harness appends (so a turn does
    /// not re-read the session); dropped when a compaction or reset changes it.
    context: Option<CachedContext>,
    /// The engine of the turn in progress (taken from the harness's source when it starts,
    /// let go when it ends, so a replaced generation is not held by an idle session).
    engine: Option<Arc<GuardedEngine>>,
    /// Which engine (and generation) the last turn, command or compaction ran on.
    served_by: Option<EngineServed>,
}

/// An engine as it served an operation: its id and the generation of its instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineServed {
    /// The engine id (the selected one; `legacy` may have answered for it).
    pub engine_id: String,
    /// The generation of its instance.
    pub generation: u64,
}

impl EngineServed {
    /// How `engine` serves.
    pub fn of(engine: &GuardedEngine) -> Self {
        EngineServed {
            engine_id: engine.id().to_owned(),
            generation: engine.generation(),
        }
    }
}

/// The messages of a session's active context with their entries.
#[derive(Debug, Clone, Default)]
struct CachedContext {
    messages: Vec<Message>,
    entry_ids: Vec<EntryId>,
    /// The same context shared for engine requests, made on first demand and dropped when
    /// the context grows (so repeated `assemble`s of a held session copy nothing).
    shared: Option<ContextSnapshot>,
}

/// A session's active context as engine requests take it: its messages and, beside them, the
/// session entries they are.
#[derive(Debug, Clone)]
pub struct ContextSnapshot {
    /// The messages, oldest first.
    pub messages: Arc<[Message]>,
    /// The entry id of each message.
    pub entry_ids: Arc<[EntryId]>,
}

impl HarnessSession {
    /// A session of `store` opened under `key`: new (with its `writer`) or existing.
    fn new(
        store: &StoreRef,
        summary: SessionSummary,
        key: SessionKey,
        writer: Option<SessionWriter>,
    ) -> Self {
        let existed = writer.is_none();
        HarnessSession {
            summary,
            key,
            writer,
            store: store.clone(),
            existed,
            bootstrapped: false,
            turns: (!existed).then_some(0),
            last_usage: None,
            last_call_at: None,
            background: None,
            context: None,
            engine: None,
            served_by: None,
        }
    }

    /// Whether the session file existed before this process opened it.
    pub fn existed(&self) -> bool {
        self.existed
    }

    /// The engine the last turn, command or compaction of this session ran on.
    pub fn served_by(&self) -> Option<&EngineServed> {
        self.served_by.as_ref()
    }

    /// Takes `engine` for the operation starting now.
    fn pin(&mut self, engine: &Arc<GuardedEngine>) {
        self.served_by = Some(EngineServed::of(engine));
        self.engine = Some(Arc::clone(engine));
    }

    /// Lets the operation's engine go (background maintenance keeps its own handle).
    fn unpin(&mut self) {
        self.engine = None;
    }

    /// After work on this session that never finished (an engine call stuck past its abort, or a
    /// panic): what the harness cached is dropped, to be read again from the file; the writer
    /// (and its lock) carries on. See [`runner`].
    fn recover_after_unfinished_work(&mut self) {
        tracing::warn!(
            session_key = %self.key,
            "the session's previous work did not finish; its context is read again from the file"
        );
        self.context = None;
        self.engine = None;
        self.turns = None;
    }

    /// The turns the session holds: its user messages on the active path (counted from the
    /// file once, then kept).
    fn turns_so_far(&mut self, durability: Durability) -> Result<u64, HarnessError> {
        if let Some(turns) = self.turns {
            return Ok(turns);
        }
        let tree: &SessionTree = self.writer(durability)?.tree();
        let turns = tree
            .path(None)
            .iter()
            .filter(|entry| entry.role() == Some(Role::User))
            .count() as u64;
        self.turns = Some(turns);
        Ok(turns)
    }

    /// The engine of the turn in progress.
    fn engine(&self) -> Arc<GuardedEngine> {
        Arc::clone(
            self.engine
                .as_ref()
                .expect("the harness takes the turn's engine before any engine call"),
        )
    }

    fn writer(&mut self, durability: Durability) -> Result<&mut SessionWriter, HarnessError> {
        match &mut self.writer {
            None => {
                let opened = self.store.0.open(&self.summary, durability);
                // A write error is the session's, as when the harness writes it.
                self.writer = Some(opened.map_err(|err| match err {
                    StoreError::Write(err) => HarnessError::Session(err),
                    other => HarnessError::Store(other),
                })?);
            }
            // An earlier write or sync failed so that the file's content is unknown (that
            // operation reported it): cut back to what is durable and read again.
            Some(writer) if writer.is_poisoned().is_some() => {
                self.context = None;
                self.turns = None;
                writer.recover()?;
            }
            Some(_) => {}
        }
        Ok(self.writer.as_mut().expect("just opened"))
    }

    /// The active context (read from the session once, then kept up to date).
    fn context(&mut self, durability: Durability) -> Result<&CachedContext, HarnessError> {
        if self.context.is_none() {
            let tree: &SessionTree = self.writer(durability)?.tree();
            let context = build_session_context(tree, None);
            self.context = Some(CachedContext {
                messages: context.messages,
                entry_ids: context.entry_ids,
                shared: None,
            });
        }
        Ok(self.context.as_ref().expect("just built"))
    }

    /// Appends `message` to the file and to the cached context; its entry id.
    fn append_message(
        &mut self,
        durability: Durability,
        message: &Message,
    ) -> Result<String, HarnessError> {
        let id = self.writer(durability)?.append_message(message)?;
        if let Some(context) = &mut self.context {
            // As the reader gives it back: string content of assistant and toolResult
            // messages as one text block; excluded messages not in the context.
            if !message.is_excluded_from_context() {
                let mut message = message.clone();
                if matches!(message.role(), Role::Assistant | Role::ToolResult) {
                    message.normalize_string_content();
                }
                context.messages.push(message);
                context.entry_ids.push(EntryId::new(id.as_str()));
                context.shared = None;
            }
        }
        Ok(id)
    }
}

impl Drop for HarnessSession {
    fn drop(&mut self) {
        // Background maintenance finishes before the session (and the engine) goes away.
        if let Some(handle) = self.background.take() {
            let _ = handle.join();
        }
    }
}

/// How `assemble` answered.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembledReport {
    /// Messages the model saw from the engine's assembly (after tool-pair repair).
    pub count: usize,
    /// The engine's estimate (`None`: it left the estimate to the host).
    pub estimated_tokens: Option<u64>,
    /// Who answered (`legacy` after a fallback).
    pub answered_by: String,
    /// The session entries of the assembled messages (`null` for new ones).
    pub entry_ids: Vec<EntryId>,
    /// What tool-pair repair changed.
    pub repairs: tool_pairs::Repairs,
}

/// One `assemble` answer, resolved against the session.
struct Assembly {
    /// The messages the model sees, each with the session entry it came from.
    messages: Vec<(Message, EntryId)>,
    /// The engine's `systemPromptAddition`.
    system_addition: Option<String>,
    /// The engine's `promptAuthority`.
    authority: PromptAuthority,
    report: AssembledReport,
}

/// One compaction during a turn.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionReport {
    /// Tokens before, as the compaction measured them.
    pub tokens_before: u64,
    /// Tokens after, when known.
    pub tokens_after: Option<u64>,
    /// Why it ran: `precheck`, `overflow` or `threshold`.
    pub reason: &'static str,
    /// Whether anything was compacted (else the engine's reason).
    pub compacted: bool,
    /// The engine's reason, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// What one turn did (the CLI prints it as one JSON line).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnReport {
    /// The turn's number in this session (from 1).
    pub turn: u64,
    /// The session key.
    pub session_key: String,
    /// The session file.
    pub session_file: std::path::PathBuf,
    /// The last assembly the model saw.
    pub assembled: AssembledReport,
    /// The precheck's route.
    pub precheck: Precheck,
    /// Compactions run in the turn.
    pub compactions: Vec<CompactionReport>,
    /// Model calls made.
    pub model_calls: usize,
    /// Messages the turn added (prompt, answers, tool results).
    pub messages_added: usize,
    /// The entry ids of what the turn added, in order (`messagesAdded` of them): a client
    /// keeps them to resolve `assemble`'s runs.
    pub entry_ids: Vec<EntryId>,
    /// The last call's usage: `[input, output, cacheRead]`.
    pub usage: [u64; 3],
}

/// The session store a harness keeps its sessions in, shared with the sessions it opened.
#[derive(Clone)]
struct StoreRef(Arc<dyn SessionStore + Send + Sync>);

impl std::fmt::Debug for StoreRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionStore")
    }
}

/// Runs turns of one engine with one model (see the module docs).
pub struct Harness {
    source: Arc<dyn EngineSource>,
    store: StoreRef,
    /// `None`: a harness for the operations of a session other than turns
    /// ([`Harness::without_model`]).
    model: Option<Arc<dyn ModelProvider>>,
    tools: Arc<dyn ToolExecutor>,
    options: HarnessOptions,
}

impl Harness {
    /// A harness running `engine` with `model`, its sessions in `store`.
    pub fn new(
        engine: Arc<GuardedEngine>,
        store: impl SessionStore + Send + Sync + 'static,
        model: Arc<dyn ModelProvider>,
        tools: Arc<dyn ToolExecutor>,
        options: HarnessOptions,
    ) -> Self {
        Self::with_source(Arc::new(FixedEngine(engine)), store, model, tools, options)
    }

    /// A harness that takes its engine from `source` at the start of every turn, command and
    /// subagent operation (a reloaded engine serves the next turn; a turn in flight finishes on
    /// the engine it started with).
    pub fn with_source(
        source: Arc<dyn EngineSource>,
        store: impl SessionStore + Send + Sync + 'static,
        model: Arc<dyn ModelProvider>,
        tools: Arc<dyn ToolExecutor>,
        options: HarnessOptions,
    ) -> Self {
        Harness {
            source,
            store: StoreRef(Arc::new(store)),
            model: Some(model),
            tools,
            options,
        }
    }

    /// The options.
    pub fn options(&self) -> &HarnessOptions {
        &self.options
    }

    /// Updates the index's counters of `session` — under the key the index holds it by (a
    /// session opened by its file's path is found by that file); a file the index does not
    /// name has no counters to update.
    fn record_counters(&self, session: &HarnessSession, update: CounterUpdate) {
        if session.summary.session_key.is_none() {
            return;
        }
        if let Err(err) = self.store.0.record(&session.key, update) {
            tracing::warn!(%err, "session counters not updated");
        }
    }

    /// The session store.
    pub fn store(&self) -> &dyn SessionStore {
        &*self.store.0
    }

    /// Opens the session `key` names (its index entry, else the session of that id), creating
    /// it when new. A key whose file is there but unusable — a directory, a link, a file outside
    /// the agent's sessions folder — is refused ([`HarnessError::Unusable`]), never pointed at a
    /// new file; a key whose file has gone is given a new session (logged), as OpenClaw does.
    ///
    /// # Errors
    /// Store or file errors, [`HarnessError::Unusable`].
    pub fn open_session(&self, key: &SessionKey) -> Result<HarnessSession, HarnessError> {
        let Some(summary) = self.store.0.find(key)? else {
            return Ok(self.create_session(key, OnExisting::Refuse)?.0);
        };
        let unusable = |why: &'static str| HarnessError::Unusable {
            key: key.to_string(),
            file: summary.session_file.clone(),
            why,
        };
        if !self.store.0.holds(key.agent(), &summary) {
            return Err(unusable(
                "lies outside the agent's sessions folder (only a command-line path may name such a file)",
            ));
        }
        match self.store.0.presence(&summary)? {
            Presence::Present => Ok(HarnessSession::new(&self.store, summary, key.clone(), None)),
            Presence::Unusable(why) => Err(unusable(why)),
            Presence::Gone => {
                tracing::warn!(
                    session_key = %key,
                    file = %summary.session_file.display(),
                    "the session's file is gone: the key gets a new session"
                );
                Ok(self.create_session(key, OnExisting::Replace)?.0)
            }
        }
    }

    /// Creates a new session under `key`; with [`OnExisting::Replace`] a key the index holds is
    /// pointed at it, and the session it named (whose file stays) is returned beside.
    ///
    /// # Errors
    /// Store or file errors; [`StoreError::KeyExists`] for a held key with
    /// [`OnExisting::Refuse`].
    pub fn create_session(
        &self,
        key: &SessionKey,
        existing: OnExisting,
    ) -> Result<(HarnessSession, Option<SessionSummary>), HarnessError> {
        let cwd = std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        let created = self
            .store
            .0
            .create(key, &cwd, self.options.durability, existing)?;
        Ok((
            HarnessSession::new(
                &self.store,
                created.summary,
                key.clone(),
                Some(created.writer),
            ),
            created.replaced,
        ))
    }

    /// Opens a session file named on the command line (checked to be one), under its key in
    /// the index of agent `main`, else under its id as key.
    ///
    /// # Errors
    /// [`HarnessError::Unkeyed`] for an unindexed file whose name is no key.
    pub fn open_session_file(&self, file: &SessionFile) -> Result<HarnessSession, HarnessError> {
        let summary = self.store.0.for_file(&AgentId::main(), file);
        let named = summary
            .session_key
            .clone()
            .unwrap_or_else(|| summary.session_id.clone());
        let key = SessionKey::parse(&named).map_err(|source| HarnessError::Unkeyed {
            file: file.path().to_owned(),
            source,
        })?;
        Ok(HarnessSession::new(&self.store, summary, key, None))
    }

    /// Keeps `system_prompt` in the session (a `custom` entry, as import keeps it), when the
    /// session does not hold one yet.
    ///
    /// # Errors
    /// Write errors.
    pub fn keep_system_prompt(
        &self,
        session: &mut HarnessSession,
        system_prompt: &str,
    ) -> Result<(), HarnessError> {
        let writer = session.writer(self.options.durability)?;
        if crate::session::openai::system_prompt_of(writer.tree()).is_none() {
            writer.append_custom(
                crate::session::openai::SYSTEM_PROMPT_TYPE,
                Some(serde_json::json!({ "content": system_prompt })),
            )?;
        }
        Ok(())
    }

    /// Appends `message` to the session outside any turn (a transcript's greeting before its
    /// first user message); its entry id.
    ///
    /// # Errors
    /// Write errors.
    pub fn append(
        &self,
        session: &mut HarnessSession,
        message: &Message,
    ) -> Result<String, HarnessError> {
        session.append_message(self.options.durability, message)
    }

    /// The session's active context as engine requests take it (shared until the context
    /// changes: asking again copies nothing).
    ///
    /// # Errors
    /// The session file could not be read.
    pub fn context_snapshot(
        &self,
        session: &mut HarnessSession,
    ) -> Result<ContextSnapshot, HarnessError> {
        self.settle(session);
        session.context(self.options.durability)?;
        let context = session.context.as_mut().expect("just built");
        Ok(context
            .shared
            .get_or_insert_with(|| ContextSnapshot {
                messages: context.messages.as_slice().into(),
                entry_ids: context.entry_ids.as_slice().into(),
            })
            .clone())
    }

    /// Compacts the session now through the source's current engine (`force`,
    /// `compactionTarget: "budget"`, `manual-compact` requirements checked), as `/compact`
    /// does, outside a turn.
    ///
    /// # Errors
    /// The engine cannot compact here, the guard refused, or the session could not be written.
    pub fn compact_now(
        &self,
        session: &mut HarnessSession,
        instructions: Option<&str>,
    ) -> Result<CompactionReport, HarnessError> {
        self.settle(session);
        let engine = self.source.current();
        session.pin(&engine);
        let report = engine
            .check_host(HostOperation::ManualCompact, &self.options.host)
            .map_err(HarnessError::from)
            .and_then(|()| self.compact_with(session, "manual", None, instructions));
        session.unpin();
        let report = report?;
        self.commit(session)?;
        Ok(report)
    }

    /// Makes everything appended to the session durable (the writer's pending lines and the
    /// index), as the end of a turn does.
    ///
    /// # Errors
    /// Write errors.
    pub fn commit(&self, session: &mut HarnessSession) -> Result<(), HarnessError> {
        if let Some(writer) = session.writer.as_mut() {
            writer.commit()?;
        }
        Ok(())
    }

    /// The host parameters of a call: the session key, the prompt, and `promptCache` with the
    /// last model call's usage (so an engine can tell a warm prompt cache from a cold one).
    fn host_inputs(&self, session: &HarnessSession, prompt: Option<&str>) -> HostInputs {
        let prompt_cache = session.last_usage.map(|usage| {
            Arc::new(PromptCacheInput {
                last_call_usage: Some(usage),
                last_cache_touch_at: session.last_call_at,
                ..PromptCacheInput::default()
            })
        });
        HostInputs {
            session_key: Some(Arc::from(session.key.as_str())),
            prompt: prompt.map(Arc::from),
            prompt_cache,
            ..HostInputs::default()
        }
    }

    fn session_id(session: &HarnessSession) -> Arc<str> {
        Arc::from(session.summary.session_id.as_str())
    }

    fn session_file(session: &HarnessSession) -> Arc<str> {
        Arc::from(session.summary.session_file.to_string_lossy().as_ref())
    }

    /// Runs one turn with the user message `prompt`.
    ///
    /// # Errors
    /// [`HarnessError`]: the engine cannot run here, the guard refused, the model failed after
    /// recovery, or the session could not be written. Messages appended before the failure
    /// stay in the session.
    pub fn turn(
        &self,
        session: &mut HarnessSession,
        prompt: Message,
    ) -> Result<TurnReport, HarnessError> {
        self.settle(session);
        let engine = self.source.current();
        session.pin(&engine);
        let report = self.turn_on(session, engine, prompt);
        session.unpin();
        report
    }

    /// [`Harness::turn`] on `engine`, pinned to the session for the turn.
    fn turn_on(
        &self,
        session: &mut HarnessSession,
        engine: Arc<GuardedEngine>,
        prompt: Message,
    ) -> Result<TurnReport, HarnessError> {
        if let Some(command) = SlashCommand::parse(&prompt.plain_text()) {
            return self.command(session, command);
        }
        let Some(model) = self.model.as_deref() else {
            return Err(HarnessError::NoModel);
        };
        engine.check_host(HostOperation::AgentRun, &self.options.host)?;
        let turn = session.turns_so_far(self.options.durability)? + 1;
        session.turns = Some(turn);
        if session.existed && !session.bootstrapped {
            self.bootstrap(session);
        }
        session.bootstrapped = true;
        let durability = self.options.durability;
        let prompt_text = prompt.plain_text();
        let mut compactions = Vec::new();

        // History before the prompt, assembled by the engine.
        let mut assembly = self.assemble(session, &prompt_text, None)?;
        let owns = engine.info().owns_compaction;
        let mut check = precheck::precheck(
            &messages_of(&assembly.messages),
            &self.system_prompt(assembly.system_addition.as_deref()),
            &prompt_text,
            self.options.context_window,
            self.options.reserve_tokens,
        );
        if owns && assembly.authority != PromptAuthority::PreassemblyMayOverflow {
            check.route = Route::Skipped;
        }
        if check.route.compacts() {
            compactions.push(self.compact(
                session,
                "precheck",
                Some(check.estimated_prompt_tokens),
            )?);
            assembly = self.assemble(session, &prompt_text, None)?;
        }

        // The prompt joins the session, then the model answers (calling tools as it goes).
        let prompt_id = session.append_message(durability, &prompt)?;
        let mut produced: Vec<(Message, EntryId)> =
            vec![(prompt, EntryId::new(prompt_id.as_str()))];
        // Every entry the turn appends, in order (`produced` follows the context instead).
        let mut appended = vec![EntryId::new(prompt_id.as_str())];
        let mut added = 1;
        let mut model_calls = 0;
        let mut overflow_compactions = 0;
        // The engine's declared tools (answered by its `callTool`), then the host's.
        let engine_tools: Vec<ToolSpec> = engine
            .info()
            .tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            })
            .collect();
        let mut tool_specs = engine_tools.clone();
        tool_specs.extend(
            self.tools
                .tools()
                .into_iter()
                .filter(|t| !engine_tools.iter().any(|e| e.name == t.name)),
        );
        loop {
            if model_calls >= MAX_MODEL_CALLS_PER_TURN {
                return Err(HarnessError::TooManyModelCalls);
            }
            let mut context: Vec<(Message, EntryId)> = assembly.messages.clone();
            context.extend(produced.iter().cloned());
            assembly.report.repairs = tool_pairs::repair_tool_pairs(&mut context);
            let (mut messages, _): (Vec<Message>, Vec<EntryId>) = context.into_iter().unzip();
            if matches!(
                check.route,
                Route::TruncateToolResultsOnly | Route::CompactThenTruncate
            ) {
                precheck::truncate_tool_results(&mut messages, self.options.context_window);
            }
            let system = self.system_prompt(assembly.system_addition.as_deref());
            model_calls += 1;
            let reply = match model.complete(&ModelRequest {
                system_prompt: &system,
                messages: &messages,
                tools: &tool_specs,
                max_output_tokens: None,
            }) {
                Ok(reply) => reply,
                Err(ModelError::ContextOverflow {
                    observed_tokens,
                    message,
                }) if overflow_compactions < MAX_OVERFLOW_COMPACTIONS => {
                    overflow_compactions += 1;
                    tracing::warn!(%message, attempt = overflow_compactions,
                        "context overflow: compacting and retrying");
                    compactions.push(self.compact(session, "overflow", observed_tokens)?);
                    // The turn's messages are in the session: the compaction may have
                    // summarised part of them (a split turn). The engine assembles everything
                    // before the first of them still in the context; the rest of the turn
                    // follows as the context now has it.
                    let context = session.context(durability)?;
                    let turn_ids: std::collections::HashSet<&str> =
                        produced.iter().filter_map(|(_, id)| id.as_str()).collect();
                    let first = context
                        .entry_ids
                        .iter()
                        .position(|id| id.as_str().is_some_and(|id| turn_ids.contains(id)))
                        .unwrap_or(context.entry_ids.len());
                    let kept: Vec<(Message, EntryId)> = context.messages[first..]
                        .iter()
                        .cloned()
                        .zip(context.entry_ids[first..].iter().cloned())
                        .collect();
                    let before = kept.first().map(|(_, id)| id.clone());
                    produced = kept;
                    let before = before.as_ref().and_then(EntryId::as_str);
                    assembly = self.assemble(session, &prompt_text, before)?;
                    continue;
                }
                // A replayed transcript that stops after tool results ends its turn there.
                Err(ModelError::ReplayExhausted) if model_calls > 1 => break,
                Err(err) => return Err(err.into()),
            };
            session.last_usage = Some(reply.usage());
            session.last_call_at = Some(crate::session::time::now_ms());
            let message = reply.message;
            let calls: Vec<(String, String, String)> = message
                .tool_calls()
                .map(|c| {
                    (
                        c.id.to_owned(),
                        c.name.to_owned(),
                        c.arguments_json.to_owned(),
                    )
                })
                .collect();
            let id = session.append_message(durability, &message)?;
            appended.push(EntryId::new(id.as_str()));
            produced.push((message, EntryId::new(id)));
            added += 1;
            if calls.is_empty() {
                break;
            }
            for (call_id, name, arguments) in &calls {
                let call = ToolCallRef {
                    id: call_id,
                    name,
                    arguments_json: arguments,
                };
                let result = if engine_tools.iter().any(|t| &t.name == name) {
                    self.call_engine_tool(session, &call)?
                } else {
                    self.tools.execute(&call)
                };
                let id = session.append_message(durability, &result)?;
                appended.push(EntryId::new(id.as_str()));
                produced.push((result, EntryId::new(id)));
                added += 1;
            }
        }

        // Finalize: afterTurn, else the messages handed over (one batch, else one by one).
        let clean = self.finalize(session, &prompt_id)?;
        if clean {
            if engine.info().turn_maintenance_mode
                == pincer_plugin_abi::latest::TurnMaintenanceMode::Background
            {
                // Deferred: the turn returns now; the next engine call on this session waits.
                let engine = Arc::clone(&engine);
                let request = self.maintain_request(session, "turn");
                session.background = Some(std::thread::spawn(move || {
                    Self::run_maintain(&engine, request, "turn");
                }));
            } else {
                self.maintain(session, "turn");
            }
        }
        let usage = session.last_usage.unwrap_or_default();
        self.record_counters(
            session,
            CounterUpdate::Usage {
                input: usage.input,
                output: usage.output,
                total: usage.context_tokens(),
                context: usage.input + usage.cache_read + usage.cache_write,
            },
        );
        // Threshold compaction after a clean turn.
        let window = self.options.context_window;
        if !owns && usage.context_tokens() > window.saturating_sub(self.options.reserve_tokens) {
            compactions.push(self.compact(session, "threshold", Some(usage.context_tokens()))?);
        }
        if let Some(writer) = session.writer.as_mut() {
            writer.commit()?;
        }
        Ok(TurnReport {
            turn,
            session_key: session.key.to_string(),
            session_file: session.summary.session_file.clone(),
            assembled: assembly.report,
            precheck: check,
            compactions,
            model_calls,
            messages_added: added,
            entry_ids: appended,
            usage: [usage.input, usage.output, usage.cache_read],
        })
    }

    /// The tokens the engine may fill with history: the window less the reserve, the system
    /// prompt and the prompt (at least an eighth of the window).
    pub fn message_budget(&self, prompt: &str) -> u64 {
        let tokens =
            |text: &str| pincer_plugin_api::tokens::estimate_string_chars(text).div_ceil(4);
        let window = self.options.context_window;
        window
            .saturating_sub(self.options.reserve_tokens)
            .saturating_sub(tokens(&self.options.system_prompt))
            .saturating_sub(tokens(prompt))
            .max(window / 8)
    }

    /// Runs a slash command: `/compact [instructions]` compacts now (OpenClaw's manual
    /// compaction, `manual-compact` requirements checked); `/new` and `/reset` append a `reset`
    /// entry with that reason, so the next turn starts a fresh context in the same file.
    fn command(
        &self,
        session: &mut HarnessSession,
        command: SlashCommand,
    ) -> Result<TurnReport, HarnessError> {
        let mut compactions = Vec::new();
        let mut added = Vec::new();
        let engine = session.engine();
        match &command {
            SlashCommand::Compact(instructions) => {
                engine.check_host(HostOperation::ManualCompact, &self.options.host)?;
                compactions.push(self.compact_with(
                    session,
                    "manual",
                    None,
                    instructions.as_deref(),
                )?);
            }
            SlashCommand::Reset(reason) => {
                added.push(EntryId::new(
                    session
                        .writer(self.options.durability)?
                        .append_reset(reason, None)?,
                ));
                session.context = None;
            }
        }
        if let Some(writer) = session.writer.as_mut() {
            writer.commit()?;
        }
        let empty = Vec::new();
        Ok(TurnReport {
            turn: session.turns_so_far(self.options.durability)?,
            session_key: session.key.to_string(),
            session_file: session.summary.session_file.clone(),
            assembled: AssembledReport {
                count: 0,
                estimated_tokens: None,
                answered_by: engine.id().to_owned(),
                entry_ids: empty,
                repairs: tool_pairs::Repairs::default(),
            },
            precheck: Precheck {
                route: Route::Skipped,
                estimated_prompt_tokens: 0,
                prompt_budget_before_reserve: 0,
                overflow_tokens: 0,
                tool_result_reducible_chars: 0,
            },
            compactions,
            model_calls: 0,
            messages_added: added.len(),
            entry_ids: added,
            usage: [0; 3],
        })
    }

    /// Prepares the engine for a child run of `parent` under `child_key` (`prepareSubagentSpawn`,
    /// fail closed), then runs `spawn`; when the spawn fails, the engine's rollback runs. Light
    /// isolated children (`light` with [`SubagentContextMode::Isolated`]) skip the preparation,
    /// as OpenClaw skips it.
    ///
    /// # Errors
    /// The preparation's error (the child is not spawned), or the spawn's.
    pub fn spawn_subagent<T>(
        &self,
        parent: &HarnessSession,
        child_key: &str,
        mode: SubagentContextMode,
        light: bool,
        spawn: impl FnOnce() -> Result<T, HarnessError>,
    ) -> Result<T, HarnessError> {
        let engine = self.source.current();
        let rollback = if light && mode == SubagentContextMode::Isolated {
            None
        } else {
            let request = Arc::new(SubagentSpawnRequest {
                parent_session_key: Arc::from(parent.key.as_str()),
                child_session_key: Arc::from(child_key),
                context_mode: Some(mode),
                parent_session_id: Some(Self::session_id(parent)),
                parent_session_file: Some(Self::session_file(parent)),
                child_session_id: None,
                child_session_file: None,
                ttl_ms: None,
            });
            engine
                .prepare_subagent_spawn(request)
                .map_err(engine_error(Method::PrepareSubagentSpawn))?
                .and_then(|guarded| guarded.value)
        };
        match spawn() {
            Ok(value) => Ok(value),
            Err(err) => {
                if let Some(handle) = rollback {
                    if let Err(rollback_err) = engine.rollback(handle) {
                        tracing::warn!("context engine subagent rollback failed: {rollback_err}");
                    }
                }
                Err(err)
            }
        }
    }

    /// Tells the engine a child run ended (`onSubagentEnded`); a failure is logged.
    pub fn end_subagent(&self, child_key: &str, reason: SubagentEndReason) {
        let request = Arc::new(SubagentEndedRequest {
            child_session_key: Arc::from(child_key),
            reason,
        });
        if let Err(err) = self.source.current().on_subagent_ended(request) {
            tracing::warn!("context engine onSubagentEnded failed: {err}");
        }
    }

    /// `callTool` of the engine for `call`; its result as a `toolResult` message.
    fn call_engine_tool(
        &self,
        session: &HarnessSession,
        call: &ToolCallRef<'_>,
    ) -> Result<Message, HarnessError> {
        let request = Arc::new(ToolCallRequest {
            session_id: Self::session_id(session),
            tool_name: Arc::from(call.name),
            arguments_json: Arc::from(call.arguments_json),
            host: self.host_inputs(session, None),
        });
        let answer = session
            .engine()
            .call_tool(request, Arc::new(AbortController::new()))
            .map_err(engine_error(Method::CallTool))?;
        Ok(match answer {
            Some(guarded) => Message::tool_result(
                call.id,
                call.name,
                guarded.value.content.to_string(),
                guarded.value.is_error,
            ),
            None => Message::tool_result(
                call.id,
                call.name,
                format!(
                    "The context engine declared {} but has no callTool.",
                    call.name
                ),
                true,
            ),
        })
    }

    fn system_prompt(&self, addition: Option<&str>) -> String {
        match addition.filter(|a| !a.is_empty()) {
            Some(addition) if self.options.system_prompt.is_empty() => addition.to_owned(),
            Some(addition) => format!("{addition}\n\n{}", self.options.system_prompt),
            None => self.options.system_prompt.clone(),
        }
    }

    fn bootstrap(&self, session: &mut HarnessSession) {
        let request = Arc::new(BootstrapRequest {
            session_id: Self::session_id(session),
            session_file: Self::session_file(session),
            host: self.host_inputs(session, None),
        });
        if let Err(err) = session
            .engine()
            .bootstrap(request, Arc::new(AbortController::new()))
        {
            tracing::warn!("context engine bootstrap failed: {err}");
        }
        self.maintain(session, "bootstrap");
    }

    fn maintain(&self, session: &HarnessSession, reason: &str) {
        Self::run_maintain(
            &session.engine(),
            self.maintain_request(session, reason),
            reason,
        );
    }

    fn maintain_request(&self, session: &HarnessSession, reason: &str) -> Arc<MaintainRequest> {
        Arc::new(MaintainRequest {
            session_id: Self::session_id(session),
            session_file: Self::session_file(session),
            reason: crate::engines::request::MaintainReason::from(reason),
            host: self.host_inputs(session, None),
        })
    }

    fn run_maintain(engine: &GuardedEngine, request: Arc<MaintainRequest>, reason: &str) {
        if let Err(err) = engine.maintain(request, Arc::new(AbortController::new())) {
            tracing::warn!("context engine maintain failed ({reason}): {err}");
        }
    }

    /// Waits for the session's background maintenance, so engine calls on one session stay in
    /// order.
    pub fn settle(&self, session: &mut HarnessSession) {
        if let Some(handle) = session.background.take() {
            let _ = handle.join();
        }
    }

    /// `assemble` over the session's history — up to `before` when given (the entry the turn
    /// started with, once it is in the session).
    fn assemble(
        &self,
        session: &mut HarnessSession,
        prompt: &str,
        before: Option<&str>,
    ) -> Result<Assembly, HarnessError> {
        let durability = self.options.durability;
        let context = session.context(durability)?;
        let cut = before
            .and_then(|id| {
                context
                    .entry_ids
                    .iter()
                    .position(|e| e.as_str() == Some(id))
            })
            .unwrap_or(context.messages.len());
        let messages: Arc<[Message]> = context.messages[..cut].to_vec().into();
        let entry_ids: Arc<[EntryId]> = context.entry_ids[..cut].into();
        let request = Arc::new(AssembleRequest {
            session_id: Self::session_id(session),
            messages: Arc::clone(&messages),
            entry_ids: Arc::clone(&entry_ids),
            token_budget: Some(self.message_budget(prompt)),
            host: self.host_inputs(session, Some(prompt)),
        });
        let guarded = session
            .engine()
            .assemble(request, Arc::new(AbortController::new()))
            .map_err(engine_error(Method::Assemble))?;
        let result = &guarded.value;
        let mut out: Vec<(Message, EntryId)> = Vec::new();
        for item in result.items.iter() {
            match item {
                AssembledItem::Input { start, end } => {
                    for i in *start as usize..*end as usize {
                        out.push((messages[i].clone(), entry_ids[i].clone()));
                    }
                }
                AssembledItem::New(message) => out.push(((**message).clone(), EntryId::NONE)),
            }
        }
        let report = AssembledReport {
            count: out.len(),
            estimated_tokens: result.estimated_tokens.into_option(),
            answered_by: guarded.answer.answered_by.to_string(),
            entry_ids: out.iter().map(|(_, e)| e.clone()).collect(),
            repairs: tool_pairs::Repairs::default(),
        };
        Ok(Assembly {
            messages: out,
            system_addition: result
                .system_prompt_addition
                .as_ref()
                .map(|s| s.as_str().to_owned())
                .into_option(),
            authority: result.prompt_authority,
            report,
        })
    }

    /// Compacts through the engine (`force`, `compactionTarget: "budget"`), with the session's
    /// writer released (the runtime compaction opens the file).
    fn compact(
        &self,
        session: &mut HarnessSession,
        reason: &'static str,
        current_tokens: Option<u64>,
    ) -> Result<CompactionReport, HarnessError> {
        self.compact_with(session, reason, current_tokens, None)
    }

    fn compact_with(
        &self,
        session: &mut HarnessSession,
        reason: &'static str,
        current_tokens: Option<u64>,
        custom_instructions: Option<&str>,
    ) -> Result<CompactionReport, HarnessError> {
        // Engine calls on one session stay in order: background maintenance first.
        self.settle(session);
        let durability = self.options.durability;
        let context = session.context(durability)?.clone();
        if let Some(mut writer) = session.writer.take() {
            writer.commit()?;
        }
        let request = Arc::new(CompactRequest {
            session_id: Self::session_id(session),
            session_file: Self::session_file(session),
            agent_id: Some(Arc::from(session.key.agent().as_str())),
            entry_ids: context.entry_ids.into(),
            messages: context.messages.into(),
            token_budget: Some(self.options.context_window),
            force: true,
            force_reason: None,
            current_token_count: current_tokens,
            compaction_target: CompactionTarget::Budget,
            custom_instructions: custom_instructions.map(Arc::from),
            host: self.host_inputs(session, None),
        });
        let guarded = session
            .engine()
            .compact(request, Arc::new(AbortController::new()))
            .map_err(engine_error(Method::Compact))?;
        let result = guarded.value;
        let details = result.result.into_option();
        // A compaction whose tokens did not go down is reported as none, and not counted.
        let not_smaller = details.as_ref().filter(|_| result.compacted).and_then(|d| {
            engine_not_smaller(
                guarded.answer.answered_by.as_str(),
                d.tokens_before,
                d.tokens_after.into_option(),
            )
        });
        let compacted = result.compacted && not_smaller.is_none();
        if compacted {
            self.record_counters(session, CounterUpdate::Compaction);
        }
        // Reopen: the compaction may have appended to the file, changing the context.
        session.context = None;
        session.writer(durability)?;
        Ok(CompactionReport {
            tokens_before: details.as_ref().map_or(0, |d| d.tokens_before),
            tokens_after: details.as_ref().and_then(|d| d.tokens_after.into_option()),
            reason,
            compacted,
            detail: not_smaller.or_else(|| result.reason.map(|r| r.to_string()).into_option()),
        })
    }

    /// `afterTurn` with the session's whole snapshot, else the batch call, else one call per
    /// message of the turn; whether it went cleanly.
    fn finalize(
        &self,
        session: &mut HarnessSession,
        prompt_id: &str,
    ) -> Result<bool, HarnessError> {
        let context = session.context(self.options.durability)?;
        // Where the turn starts in the snapshot (the prompt may have been compacted away).
        let pre_prompt = context
            .entry_ids
            .iter()
            .position(|e| e.as_str() == Some(prompt_id))
            .unwrap_or(context.messages.len());
        let messages: Arc<[Message]> = context.messages.as_slice().into();
        let entry_ids: Arc<[EntryId]> = context.entry_ids.as_slice().into();
        let abort = || Arc::new(AbortController::new());
        let after = Arc::new(AfterTurnRequest {
            session_id: Self::session_id(session),
            session_file: Self::session_file(session),
            messages: Arc::clone(&messages),
            entry_ids: Arc::clone(&entry_ids),
            pre_prompt_message_count: pre_prompt as u64,
            auto_compaction_summary: None,
            is_heartbeat: false,
            token_budget: Some(self.options.context_window),
            host: self.host_inputs(session, None),
        });
        match session.engine().after_turn(after, abort()) {
            Ok(Some(_)) => return Ok(true),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!("context engine afterTurn failed: {err}");
                return Ok(false);
            }
        }
        let handed = session::hand_over(
            &session.engine(),
            &session::HandOver {
                session_id: Self::session_id(session),
                snapshot: &ContextSnapshot {
                    messages: Arc::clone(&messages),
                    entry_ids,
                },
                range: pre_prompt..messages.len(),
                is_heartbeat: false,
                host: self.host_inputs(session, None),
            },
            session::IngestMode::Batch,
        );
        if let Err(err) = handed {
            tracing::warn!("context engine ingest failed: {err}");
            return Ok(false);
        }
        Ok(true)
    }
}

/// The turn's error when the guard refuses `method` (strict policy, abort, both engines failing).
fn engine_error(method: Method) -> impl FnOnce(GuardError) -> HarnessError {
    move |source| HarnessError::Engine {
        method: method.as_str(),
        source,
    }
}

/// A slash command a prompt may be.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SlashCommand {
    /// `/compact [instructions]`.
    Compact(Option<String>),
    /// `/new` or `/reset`: the reason the `reset` entry carries.
    Reset(&'static str),
}

impl SlashCommand {
    fn parse(text: &str) -> Option<SlashCommand> {
        let text = text.trim();
        let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        match word {
            "/compact" => Some(SlashCommand::Compact(
                Some(rest.trim().to_owned()).filter(|r| !r.is_empty()),
            )),
            "/new" if rest.trim().is_empty() => Some(SlashCommand::Reset("new")),
            "/reset" if rest.trim().is_empty() => Some(SlashCommand::Reset("reset")),
            _ => None,
        }
    }
}

fn messages_of(messages: &[(Message, EntryId)]) -> Vec<Message> {
    messages.iter().map(|(m, _)| m.clone()).collect()
}
