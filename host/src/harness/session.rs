//! The session handle: every operation a front (the gateway, the CLI) runs on one held session
//! — `assemble`, `ingest` one message at a time or as a batch (the engine layer falls back),
//! `afterTurn`, `maintain`, tool calls, subagent preparation and end, turns and compaction —
//! as methods of [`Session`], taking the harness's own parameter types. A front parses its
//! input into those types, calls the handle, and prints what it returns: it builds no engine
//! request and repeats no fallback.
//!
//! The handle borrows the [`Harness`] and the session's state ([`HarnessSession`], which a
//! [`SessionRunner`](super::SessionRunner) holds on the session's worker); every engine call
//! first joins the session's background maintenance.

use std::ops::Range;
use std::sync::Arc;

use pincer_plugin_abi::latest::{
    AbortController, AssembleResult, CompactResult, EntryId, HostOperation, MaintainResult,
    Message, RuntimeSettings, SubagentContextMode, SubagentEndReason, ToolCallResult,
};

use crate::engines::error::EngineCallError;
use crate::engines::instance::Rollback;
use crate::engines::request::{
    no_entry_ids, AfterTurnRequest, AssembleRequest, CompactRequest, HandOverRequest, HostInputs,
    MaintainRequest, SessionTargetInput, SubagentEndedRequest, SubagentSpawnRequest,
    ToolCallRequest,
};
use crate::model::NoTools;
use crate::session::context::build_session_context;
use crate::session::key::{AgentId, SessionKey};
use crate::session::store::CounterUpdate;
use crate::session::store::{SessionStore, SessionSummary};
use crate::session::SessionTree;
use crate::slot::guarded::{GuardError, Guarded, GuardedEngine};
use crate::slot::source::EngineSource;

use super::{
    CompactionReport, ContextSnapshot, Harness, HarnessError, HarnessOptions, HarnessSession,
    StoreRef, TurnReport,
};

/// Why an operation on a session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The session could not be read or written, or the turn failed.
    #[error(transparent)]
    Harness(#[from] HarnessError),
    /// The guard refused the engine call (strict policy, abort, both engines failing).
    #[error(transparent)]
    Engine(#[from] GuardError),
    /// The rollback of a subagent's preparation failed or overran its deadline.
    #[error("rollback failed: {0}")]
    Rollback(EngineCallError),
}

impl SessionError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SessionError::Harness(err) => err.code(),
            SessionError::Engine(err) => err.code(),
            SessionError::Rollback(err) => err.code(),
        }
    }
}

/// What `assemble` runs over.
#[derive(Debug, Clone, Default)]
pub struct AssembleParams {
    /// These messages instead of the session's context (they have no entry ids).
    pub messages: Option<Vec<Message>>,
    /// The prompt's token budget.
    pub token_budget: Option<u64>,
    /// The prompt of the turn being assembled for.
    pub prompt: Option<String>,
}

/// What `assemble` answered, beside what it ran over.
#[derive(Debug)]
pub struct Assembled {
    /// The messages the engine was given.
    pub messages: Arc<[Message]>,
    /// Their entry ids (none for passed messages).
    pub entry_ids: Arc<[EntryId]>,
    /// The engine's result and who answered.
    pub answer: Guarded<AssembleResult>,
}

pub use crate::engines::request::IngestMode;

/// What an ingestion stores and hands to the engine.
#[derive(Debug, Clone)]
pub struct IngestParams {
    /// The messages, appended to the session in order.
    pub messages: Vec<Message>,
    /// Batch or one at a time.
    pub mode: IngestMode,
    /// The messages belong to a heartbeat run.
    pub is_heartbeat: bool,
}

/// What an ingestion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ingested {
    /// The session entries the messages became.
    pub entry_ids: Vec<EntryId>,
    /// How many the engine says it ingested.
    pub ingested_count: u64,
    /// Who answered the last engine call (the engine taken, when none was made).
    pub answered_by: String,
}

/// What `afterTurn` is told.
#[derive(Debug, Clone, Default)]
pub struct AfterTurnParams {
    /// How many of the context's messages were there before the turn's prompt (default: all).
    pub pre_prompt_message_count: Option<u64>,
    /// The summary of a compaction the turn ran, if any.
    pub auto_compaction_summary: Option<String>,
    /// The turn was a heartbeat.
    pub is_heartbeat: bool,
    /// The turn's token budget.
    pub token_budget: Option<u64>,
}

/// A tool call an engine declared.
#[derive(Debug, Clone)]
pub struct ToolCallParams {
    /// The tool's name.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments_json: String,
}

/// `prepareSubagentSpawn` of a child of this session.
#[derive(Debug, Clone)]
pub struct SubagentSpawnParams {
    /// The child's session key.
    pub child_session_key: String,
    /// Whether the child forks this session's context or starts isolated.
    pub context_mode: SubagentContextMode,
    /// How long the preparation may be kept, in milliseconds.
    pub ttl_ms: Option<u64>,
}

/// What a manual compaction of a session (`pincer compact`) is asked.
#[derive(Debug, Clone, Default)]
pub struct ManualCompactParams {
    /// The budget the engine compacts towards (the model's context window).
    pub token_budget: Option<u64>,
    /// What the summary should focus on (`/compact <text>`).
    pub instructions: Option<String>,
    /// The runtime settings of the host the compaction runs in.
    pub runtime_settings: Option<Arc<RuntimeSettings>>,
}

/// What a manual compaction answered.
#[derive(Debug)]
pub struct ManualCompaction {
    /// The engine's result and who answered.
    pub answer: Guarded<CompactResult>,
    /// Whether it compacted: the engine said so and its tokens went down.
    pub compacted: bool,
    /// Why it did not ([`super::engine_not_smaller`]'s reason, else the engine's).
    pub reason: Option<String>,
}

/// A handle on one held session: see the module docs.
pub struct Session<'a> {
    harness: &'a Harness,
    state: &'a mut HarnessSession,
}

impl Harness {
    /// A harness without a model, for a front that runs a session's operations but no turn
    /// (the CLI's `tool`, `compact`): [`Harness::turn`] refuses with
    /// [`HarnessError::NoModel`]; a slash command and every method of [`Session`] but
    /// [`Session::turn`] run as on any harness.
    pub fn without_model(
        source: Arc<dyn EngineSource>,
        store: impl SessionStore + Send + Sync + 'static,
        options: HarnessOptions,
    ) -> Self {
        Harness {
            source,
            store: StoreRef(Arc::new(store)),
            model: None,
            tools: Arc::new(NoTools),
            options,
        }
    }

    /// Holds the existing session `summary` (found in this harness's store) under its key, else
    /// under its id as key of `agent`.
    ///
    /// # Errors
    /// [`HarnessError::Unkeyed`]: the session has no key and its id is no key.
    pub fn hold(
        &self,
        summary: SessionSummary,
        agent: &AgentId,
    ) -> Result<HarnessSession, HarnessError> {
        let named = summary
            .session_key
            .as_deref()
            .unwrap_or(&summary.session_id);
        let key = SessionKey::parse_for(named, agent).map_err(|source| HarnessError::Unkeyed {
            file: summary.session_file.clone(),
            source,
        })?;
        Ok(HarnessSession::new(&self.store, summary, key, None))
    }

    /// The handle on `state`, a session this harness opened.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::sync::Arc;
    ///
    /// use pincer_host::harness::{AssembleParams, Harness, HarnessOptions};
    /// use pincer_host::model::replay::ReplayModel;
    /// use pincer_host::model::NoTools;
    /// use pincer_host::session::{JsonlStore, SessionKey};
    /// use pincer_host::{PincerHome, Runtime, RuntimeOptions};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let home = PincerHome::resolve(None);
    /// let runtime = Runtime::open(RuntimeOptions::new(home.clone()))?;
    /// let engine = Arc::new(runtime.resolve()?.engine);
    /// let harness = Harness::new(
    ///     Arc::clone(&engine),
    ///     JsonlStore::new(home.root().join("agents")),
    ///     Arc::new(ReplayModel::new(&[])),
    ///     Arc::new(NoTools),
    ///     HarnessOptions::new(128_000),
    /// );
    /// let mut state = harness.open_session(&SessionKey::parse("agent:main:demo")?)?;
    /// let assembled = harness
    ///     .session(&mut state)
    ///     .assemble(&engine, AssembleParams::default())?;
    /// println!("{} messages", assembled.messages.len());
    /// # Ok(()) }
    /// ```
    pub fn session<'a>(&'a self, state: &'a mut HarnessSession) -> Session<'a> {
        Session {
            harness: self,
            state,
        }
    }
}

impl Session<'_> {
    /// The session's state.
    pub fn state(&self) -> &HarnessSession {
        self.state
    }

    /// The host parameters of a front's call: the session key and the prompt.
    fn host(&self, prompt: Option<&str>) -> HostInputs {
        HostInputs {
            session_key: Some(Arc::from(self.state.key.as_str())),
            prompt: prompt.map(Arc::from),
            ..HostInputs::default()
        }
    }

    fn session_id(&self) -> Arc<str> {
        Harness::session_id(self.state)
    }

    fn session_file(&self) -> Arc<str> {
        Harness::session_file(self.state)
    }

    /// The session's active context (its background maintenance joined first).
    ///
    /// # Errors
    /// The session file could not be read.
    pub fn context(&mut self) -> Result<ContextSnapshot, HarnessError> {
        self.harness.context_snapshot(self.state)
    }

    /// Runs one turn with the user message `prompt` (see [`Harness::turn`]).
    ///
    /// # Errors
    /// As [`Harness::turn`].
    pub fn turn(&mut self, prompt: Message) -> Result<TurnReport, HarnessError> {
        self.harness.turn(self.state, prompt)
    }

    /// Compacts the session now (see [`Harness::compact_now`]).
    ///
    /// # Errors
    /// As [`Harness::compact_now`].
    pub fn compact(
        &mut self,
        instructions: Option<&str>,
    ) -> Result<CompactionReport, HarnessError> {
        self.harness.compact_now(self.state, instructions)
    }

    /// Compacts the session now with `engine`'s guarded `compact`, forced (`manual`), after
    /// the `manual-compact` requirements of the harness's host are checked: over `tree`, the
    /// session as the front read it (once, to report what it skipped). A compaction is counted
    /// in the index; one whose tokens did not go down is reported as none.
    ///
    /// # Errors
    /// The engine cannot compact in this host; the guard refused.
    pub fn compact_manually(
        &mut self,
        engine: &GuardedEngine,
        tree: &SessionTree,
        params: ManualCompactParams,
    ) -> Result<ManualCompaction, SessionError> {
        self.harness.settle(self.state);
        engine
            .check_host(HostOperation::ManualCompact, &self.harness.options.host)
            .map_err(HarnessError::from)?;
        let context = build_session_context(tree, None);
        let summary = &self.state.summary;
        let session_key = summary.session_key.as_deref().map(Arc::from);
        let host = HostInputs {
            session_key: session_key.clone(),
            session_target: Some(Arc::new(SessionTargetInput {
                agent_id: Some(Arc::from(self.state.key.agent().as_str())),
                session_id: Some(self.session_id()),
                session_key,
                ..SessionTargetInput::default()
            })),
            runtime_settings: params.runtime_settings,
            ..HostInputs::default()
        };
        let mut request = CompactRequest::manual(
            self.session_id(),
            self.session_file(),
            Arc::from(context.messages),
            Arc::from(context.entry_ids),
            host,
        );
        request.agent_id = Some(Arc::from(self.state.key.agent().as_str()));
        request.token_budget = params.token_budget;
        request.custom_instructions = params.instructions.map(Arc::from);
        let answer = engine.compact(Arc::new(request), abort())?;
        let result = &answer.value;
        let details = result.result.as_ref().into_option();
        let not_smaller = details.filter(|_| result.compacted).and_then(|d| {
            super::engine_not_smaller(
                answer.answer.answered_by.as_str(),
                d.tokens_before,
                d.tokens_after.into_option(),
            )
        });
        let compacted = result.compacted && not_smaller.is_none();
        if compacted {
            self.harness
                .record_counters(self.state, CounterUpdate::Compaction);
        }
        let reason =
            not_smaller.or_else(|| result.reason.as_ref().map(|r| r.to_string()).into_option());
        Ok(ManualCompaction {
            answer,
            compacted,
            reason,
        })
    }

    /// Makes everything appended durable.
    ///
    /// # Errors
    /// Write errors.
    pub fn commit(&mut self) -> Result<(), HarnessError> {
        self.harness.commit(self.state)
    }

    /// `assemble` of `engine` over the session's context, or over the messages passed.
    ///
    /// # Errors
    /// The session could not be read; the guard refused.
    pub fn assemble(
        &mut self,
        engine: &GuardedEngine,
        params: AssembleParams,
    ) -> Result<Assembled, SessionError> {
        self.harness.settle(self.state);
        let (messages, entry_ids) = match params.messages {
            Some(list) => (Arc::from(list), no_entry_ids()),
            None => {
                let snapshot = self.context()?;
                (snapshot.messages, snapshot.entry_ids)
            }
        };
        let request = Arc::new(AssembleRequest {
            session_id: self.session_id(),
            messages: Arc::clone(&messages),
            entry_ids: Arc::clone(&entry_ids),
            token_budget: params.token_budget,
            host: self.host(params.prompt.as_deref()),
        });
        let answer = engine.assemble(request, abort())?;
        Ok(Assembled {
            messages,
            entry_ids,
            answer,
        })
    }

    /// Appends the messages to the session, makes them durable, and hands them to `engine`
    /// as [`IngestParams::mode`] says.
    ///
    /// # Errors
    /// The session could not be written or read; the guard refused.
    pub fn ingest(
        &mut self,
        engine: &GuardedEngine,
        params: IngestParams,
    ) -> Result<Ingested, SessionError> {
        self.harness.settle(self.state);
        let mut ids = Vec::with_capacity(params.messages.len());
        for message in &params.messages {
            ids.push(EntryId::new(self.harness.append(self.state, message)?));
        }
        self.commit()?;
        let snapshot = self.context()?;
        // Where the new messages start in the context (excluded ones are not in it).
        let first = ids
            .iter()
            .find_map(|id| snapshot.entry_ids.iter().position(|e| e == id))
            .unwrap_or(snapshot.messages.len());
        let handed = hand_over(
            engine,
            &HandOver {
                session_id: self.session_id(),
                snapshot: &snapshot,
                range: first..snapshot.messages.len(),
                is_heartbeat: params.is_heartbeat,
                host: self.host(None),
            },
            params.mode,
        )?;
        Ok(Ingested {
            entry_ids: ids,
            ingested_count: handed.ingested,
            answered_by: handed.answered_by.unwrap_or_else(|| engine.id().to_owned()),
        })
    }

    /// `afterTurn` of `engine` over the session's context; `None` when the engine has none.
    ///
    /// # Errors
    /// The session could not be read; the guard refused.
    pub fn after_turn(
        &mut self,
        engine: &GuardedEngine,
        params: AfterTurnParams,
    ) -> Result<Option<Guarded<()>>, SessionError> {
        self.harness.settle(self.state);
        let snapshot = self.context()?;
        let request = Arc::new(AfterTurnRequest {
            session_id: self.session_id(),
            session_file: self.session_file(),
            pre_prompt_message_count: params
                .pre_prompt_message_count
                .unwrap_or(snapshot.messages.len() as u64),
            messages: snapshot.messages,
            entry_ids: snapshot.entry_ids,
            auto_compaction_summary: params.auto_compaction_summary.map(Arc::from),
            is_heartbeat: params.is_heartbeat,
            token_budget: params.token_budget,
            host: self.host(None),
        });
        Ok(engine.after_turn(request, abort())?)
    }

    /// `maintain` of `engine` with `reason`; `None` when the engine has none.
    ///
    /// # Errors
    /// The guard refused.
    pub fn maintain(
        &mut self,
        engine: &GuardedEngine,
        reason: &str,
    ) -> Result<Option<Guarded<MaintainResult>>, SessionError> {
        self.harness.settle(self.state);
        let request = Arc::new(MaintainRequest {
            session_id: self.session_id(),
            session_file: self.session_file(),
            reason: crate::engines::request::MaintainReason::from(reason),
            host: self.host(None),
        });
        Ok(engine.maintain(request, abort())?)
    }

    /// A tool `engine` declared, called on this session; `None` when the engine has no tools.
    ///
    /// # Errors
    /// The guard refused.
    pub fn call_tool(
        &mut self,
        engine: &GuardedEngine,
        params: ToolCallParams,
    ) -> Result<Option<Guarded<ToolCallResult>>, SessionError> {
        self.harness.settle(self.state);
        let request = Arc::new(ToolCallRequest {
            session_id: self.session_id(),
            tool_name: Arc::from(params.name),
            arguments_json: Arc::from(params.arguments_json),
            host: self.host(None),
        });
        Ok(engine.call_tool(request, abort())?)
    }

    /// `prepareSubagentSpawn` of `engine` for a child of this session: the rollback handle
    /// the engine gave, if any; `None` when the engine has no such method.
    ///
    /// # Errors
    /// The guard refused.
    pub fn prepare_subagent_spawn(
        &mut self,
        engine: &GuardedEngine,
        params: SubagentSpawnParams,
    ) -> Result<Option<Guarded<Option<Rollback>>>, SessionError> {
        self.harness.settle(self.state);
        let request = Arc::new(SubagentSpawnRequest {
            parent_session_key: Arc::from(self.state.key.as_str()),
            child_session_key: Arc::from(params.child_session_key),
            context_mode: Some(params.context_mode),
            parent_session_id: Some(self.session_id()),
            parent_session_file: Some(self.session_file()),
            child_session_id: None,
            child_session_file: None,
            ttl_ms: params.ttl_ms,
        });
        Ok(engine.prepare_subagent_spawn(request)?)
    }

    /// The rollback of a child of this session that failed to spawn: the handle its
    /// `prepareSubagentSpawn` gave, if it gave one, run bounded like any engine call.
    ///
    /// # Errors
    /// The rollback failed or overran its deadline.
    pub fn roll_back_subagent_spawn(
        &mut self,
        engine: &GuardedEngine,
        handle: Option<Rollback>,
    ) -> Result<(), SessionError> {
        self.harness.settle(self.state);
        match handle {
            Some(handle) => engine.rollback(handle).map_err(SessionError::Rollback),
            None => Ok(()),
        }
    }

    /// `onSubagentEnded` of `engine` for the child `child_session_key`; `None` when the engine
    /// has no such method.
    ///
    /// # Errors
    /// The guard refused.
    pub fn on_subagent_ended(
        &mut self,
        engine: &GuardedEngine,
        child_session_key: &str,
        reason: SubagentEndReason,
    ) -> Result<Option<Guarded<()>>, SessionError> {
        self.harness.settle(self.state);
        Ok(engine.on_subagent_ended(Arc::new(SubagentEndedRequest {
            child_session_key: Arc::from(child_session_key),
            reason,
        }))?)
    }
}

fn abort() -> Arc<AbortController> {
    Arc::new(AbortController::new())
}

/// Messages of a context handed to an engine after they were stored.
pub(super) struct HandOver<'a> {
    pub(super) session_id: Arc<str>,
    pub(super) snapshot: &'a ContextSnapshot,
    /// The new messages' positions in the snapshot.
    pub(super) range: Range<usize>,
    pub(super) is_heartbeat: bool,
    pub(super) host: HostInputs,
}

/// What a hand-over did.
pub(super) struct HandedOver {
    /// How many messages the engine says it ingested.
    pub(super) ingested: u64,
    /// Who answered the last call made; `None` when none was made.
    pub(super) answered_by: Option<String>,
}

/// Hands `what` to `engine` as `mode` says ([`GuardedEngine::hand_over`], which runs the
/// batch → per-message fallback), for the fronts and the turn's finalize.
pub(super) fn hand_over(
    engine: &GuardedEngine,
    what: &HandOver<'_>,
    mode: IngestMode,
) -> Result<HandedOver, GuardError> {
    let (ingested, answered_by) = engine.hand_over(&HandOverRequest {
        session_id: Arc::clone(&what.session_id),
        messages: Arc::clone(&what.snapshot.messages),
        entry_ids: Arc::clone(&what.snapshot.entry_ids),
        range: what.range.clone(),
        is_heartbeat: what.is_heartbeat,
        host: what.host.clone(),
        mode,
    })?;
    Ok(HandedOver {
        ingested,
        answered_by: answered_by.map(|name| name.to_string()),
    })
}
