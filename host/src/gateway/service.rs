//! The gateway's state and its methods, apart from any transport: the runtime, the harness and
//! the sessions it holds.
//!
//! Each session key seen gets a [`SessionRunner`] (the [`HarnessSession`] bound to its own
//! worker): every call for that session runs as work of that worker, in the order the calls arrived, so the
//! engine calls take the guard's inline path; calls for different sessions run on different
//! workers, in parallel. A call is awaited (never blocking a tokio thread). `assemble` on a
//! held session sends the engine the session's context, shared with the harness (no copy
//! while it does not change), and answers with entry-id references unless the client asks for
//! the messages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pincer_plugin_abi::latest::{
    AssembledItem, EntryId, Message, SubagentContextMode, SubagentEndReason,
};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::engines::instance::Rollback;
use crate::engines::session_worker::{WorkError, SPIN};
use crate::harness::runner::SessionRunner;
use crate::harness::{
    AfterTurnParams, AssembleParams, Assembled, EngineServed, Harness, HarnessError,
    HarnessSession, IngestMode, IngestParams, SessionError, SubagentSpawnParams, ToolCallParams,
};
use crate::report::doctor::doctor;
use crate::report::health::HealthReport;
use crate::slot::guarded::{GuardError, Guarded, GuardedEngine};
use crate::slot::reload::{ReloadError, ReloadOutcome};
use crate::slot::runtime::Runtime;
use crate::slot::source::EngineSource;

use super::protocol::{CallRequest, GatewayError, GatewayMethod, Params};
use crate::types::json_kind;
use crate::types::Method;

/// A method's answer before the envelope: who served it and the result, as JSON text.
#[derive(Debug)]
pub struct Served {
    /// The engine that served it.
    pub engine_id: String,
    /// Its generation.
    pub generation: u64,
    /// The result.
    pub result: Box<RawValue>,
}

impl Served {
    fn of(engine: &GuardedEngine, result: &impl Serialize) -> Result<Served, GatewayError> {
        Self::by(EngineServed::of(engine), result)
    }

    fn by(served: EngineServed, result: &impl Serialize) -> Result<Served, GatewayError> {
        Ok(Served {
            engine_id: served.engine_id,
            generation: served.generation,
            result: serde_json::value::to_raw_value(result).map_err(|err| {
                GatewayError::failed("internal", format!("the result did not serialize: {err}"))
            })?,
        })
    }
}

/// One held session: its runner (opened by the first call) and the subagent rollbacks
/// prepared on it.
#[derive(Default)]
struct Held {
    runner: tokio::sync::OnceCell<SessionRunner>,
    /// Rollbacks of `prepareSubagentSpawn`, by child key, until the child ends. Locked only
    /// briefly, never across an engine call (a stuck call's thread never returns).
    rollbacks: Mutex<HashMap<String, Rollback>>,
    /// The session's last call took longer than looking for its result pays for: the next
    /// one parks at once instead of spinning first.
    slow: AtomicBool,
}

/// What the gateway serves with.
pub struct GatewayParts {
    /// The runtime (config, plugins, quarantine).
    pub runtime: Arc<Runtime>,
    /// Where each call takes its engine.
    pub source: Arc<dyn EngineSource>,
    /// The harness behind `turn` (and the session store).
    pub harness: Arc<Harness>,
    /// Whether `turn` has a model (else it is refused with `no_model`).
    pub has_model: bool,
    /// How long one call may take before the client gets `timeout` (the work itself goes on,
    /// bounded by the engine deadlines).
    pub call_timeout: Duration,
}

/// The gateway: sessions held behind workers, methods dispatched to them.
pub struct Gateway {
    parts: Arc<GatewayParts>,
    sessions: Mutex<HashMap<String, Arc<Held>>>,
}

impl Gateway {
    /// A gateway over `parts`.
    pub fn new(parts: GatewayParts) -> Self {
        Gateway {
            parts: Arc::new(parts),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.parts.runtime
    }

    /// How many sessions are held.
    pub fn session_count(&self) -> usize {
        self.lock_sessions().len()
    }

    fn lock_sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Held>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held(&self, key: &str) -> Arc<Held> {
        let mut sessions = self.lock_sessions();
        Arc::clone(sessions.entry(key.to_owned()).or_default())
    }

    /// Serves one call.
    ///
    /// # Errors
    /// [`GatewayError`] with its status and code.
    pub async fn call(
        &self,
        method: GatewayMethod,
        call: CallRequest,
    ) -> Result<Served, GatewayError> {
        let parts = Arc::clone(&self.parts);
        let timeout = parts.call_timeout;
        // The engine the call takes, once it has taken one: named by its failure too.
        let involved: Arc<Involved> = Arc::default();
        let work = async {
            match method {
                GatewayMethod::Health | GatewayMethod::Doctor | GatewayMethod::Reload => {
                    let parts = Arc::clone(&parts);
                    let sessions = self.session_count();
                    tokio::task::spawn_blocking(move || {
                        serve_global(&parts, method, call, sessions)
                    })
                    .await
                    .map_err(|err| {
                        GatewayError::failed("internal", format!("{method} failed: {err}"))
                    })?
                }
                _ => {
                    let key = call.session.clone().expect("checked by parse_call");
                    // A key, never a path: the store maps it to a file in its own folders.
                    let session_key = super::protocol::session_key(&key)?;
                    let held = self.held(&key);
                    let runner = held
                        .runner
                        .get_or_try_init(|| {
                            let harness = Arc::clone(&parts.harness);
                            let key = session_key;
                            async move {
                                tokio::task::spawn_blocking(move || {
                                    SessionRunner::open(harness, &key)
                                })
                                .await
                                .map_err(|err| {
                                    GatewayError::failed(
                                        "internal",
                                        format!("opening the session failed: {err}"),
                                    )
                                })?
                                .map_err(harness_error)
                            }
                        })
                        .await?;
                    let submitted = Instant::now();
                    let spin = !held.slow.load(Ordering::Relaxed);
                    let held = Arc::clone(&held);
                    let took = Arc::clone(&involved);
                    let handle = runner.submit(move |harness, session| {
                        let served = serve_session(
                            &parts,
                            harness,
                            method,
                            session,
                            &held.rollbacks,
                            call.params.as_ref(),
                            &took,
                        );
                        // Measured here, where the result is ready (not when this call's
                        // task wakes up to take it).
                        held.slow
                            .store(submitted.elapsed() > SPIN, Ordering::Relaxed);
                        served
                    });
                    // Most calls take microseconds on the worker: look for the result a little
                    // before parking this task (a wake-up of a tokio thread costs more) — unless
                    // this session's last call took longer than that.
                    if spin {
                        handle.spin(SPIN);
                    }
                    handle.await.map_err(work_error)?
                }
            }
        };
        let result = match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(GatewayError::new(
                504,
                "timeout",
                format!(
                    "{method} did not finish within {} s; it goes on in the gateway (later calls \
                     of this session wait for it); retry later or raise --call-timeout",
                    timeout.as_secs_f64()
                ),
            )),
        };
        result.map_err(|err| {
            // A failure of the serving (not of the request) names the engine it had taken.
            match lock_involved(&involved).as_ref() {
                Some(served) if err.status >= 500 => {
                    err.served_by(&served.engine_id, served.generation)
                }
                _ => err,
            }
        })
    }

    /// Waits for every held session's queued work, makes each session durable and lets it
    /// go (the gateway's shutdown, before the runtime disposes its engines).
    pub async fn flush_sessions(&self) {
        let held: Vec<(String, Arc<Held>)> = self.lock_sessions().drain().collect();
        for (key, held) in held {
            held.rollbacks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            let Some(runner) = held.runner.get() else {
                continue;
            };
            let done = runner.submit(move |harness, session| {
                if let Err(err) = harness.commit(session) {
                    tracing::warn!(session = %key, %err, "session not flushed at shutdown");
                }
            });
            if let Err(err) = done.await {
                tracing::warn!(%err, "a session's work did not finish at shutdown");
            }
        }
    }
}

/// The engine a call has taken (set on the session's worker, read by the call's answer).
type Involved = Mutex<Option<EngineServed>>;

fn lock_involved(involved: &Involved) -> std::sync::MutexGuard<'_, Option<EngineServed>> {
    involved.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slot's engine for a call starting now, recorded as the one the call took.
fn take(parts: &GatewayParts, involved: &Involved) -> Arc<GuardedEngine> {
    let engine = parts.source.current();
    *lock_involved(involved) = Some(EngineServed::of(&engine));
    engine
}

/// A failed turn or compaction names the engine the harness pinned for it (`before`: what the
/// session said before the operation; unchanged, the operation failed before pinning one and
/// the engine [`take`]n for it stays named).
fn pinned_error(
    err: GatewayError,
    before: Option<EngineServed>,
    session: &HarnessSession,
    involved: &Involved,
) -> GatewayError {
    if let Some(served) = session.served_by().filter(|s| Some(*s) != before.as_ref()) {
        *lock_involved(involved) = Some(served.clone());
    }
    err
}

fn work_error(err: WorkError) -> GatewayError {
    match err {
        WorkError::Stuck { .. } => GatewayError::new(504, "engine_stuck", err.to_string()),
        WorkError::Unavailable(_) => GatewayError::new(503, "unavailable", err.to_string()),
    }
}

fn harness_error(err: HarnessError) -> GatewayError {
    let status = match &err {
        HarnessError::Model(_) => 502,
        // The key's file is not a session the store can use: the client's key, not the server.
        HarnessError::Unusable { .. } => 409,
        HarnessError::Session(crate::session::SessionWriteError::LineTooLong { .. }) => 413,
        _ => 500,
    };
    GatewayError::new(status, err.code(), err.to_string())
}

fn guard_error(method: GatewayMethod) -> impl FnOnce(GuardError) -> GatewayError {
    move |err| GatewayError::failed(err.code(), format!("context engine {method} failed: {err}"))
}

/// `health`, `doctor`, `reload`: about the whole gateway.
fn serve_global(
    parts: &GatewayParts,
    method: GatewayMethod,
    call: CallRequest,
    sessions: usize,
) -> Result<Served, GatewayError> {
    let engine = parts.source.current();
    match method {
        GatewayMethod::Health => Served::of(
            &engine,
            &HealthReport::live(&parts.runtime, &engine, sessions),
        ),
        GatewayMethod::Doctor => Served::of(&engine, &doctor(&parts.runtime)),
        GatewayMethod::Reload => {
            let params = Params::new(method, call.params.as_ref())?;
            // A refusal names the engine that keeps serving.
            let refused = |err| {
                let engine = parts.source.current();
                reload_error(err).served_by(engine.id(), engine.generation())
            };
            let reloaded = match params.str("pluginId")? {
                Some(id) => vec![parts.runtime.reload_plugin(id).map_err(refused)?],
                None => reload_everything(&parts.runtime).map_err(refused)?,
            };
            // The engine that serves from now on.
            let engine = parts.source.current();
            Served::of(&engine, &serde_json::json!({ "reloaded": reloaded }))
        }
        _ => unreachable!("session methods are served by their worker"),
    }
}

fn reload_error(err: ReloadError) -> GatewayError {
    let status = match err {
        ReloadError::UnknownPlugin { .. } => 404,
        _ => 409,
    };
    GatewayError::new(
        status,
        err.code(),
        format!("{err}; the engine in force keeps serving"),
    )
}

/// The config, then every plugin, reloaded (what `reload` without `pluginId` and SIGHUP do);
/// the plugins reloaded. The first refusal is the error (the others still ran).
///
/// # Errors
/// The config or a plugin reload was refused.
pub fn reload_everything(runtime: &Runtime) -> Result<Vec<ReloadOutcome>, ReloadError> {
    runtime.reload_config()?;
    // Reads and appends from now on take the reloaded `sessions.maxLineBytes`.
    crate::session::limits::set_max_line_bytes(runtime.config().config.sessions.max_line_bytes());
    let mut outcomes = Vec::new();
    let mut refused = None;
    for result in runtime.reload_all() {
        match result {
            Ok(outcome) => outcomes.push(outcome),
            Err(err) => {
                tracing::warn!(error = %err, "plugin reload refused");
                refused.get_or_insert(err);
            }
        }
    }
    match refused {
        Some(err) => Err(err),
        None => Ok(outcomes),
    }
}

/// The methods on a session, run on its worker.
fn serve_session(
    parts: &GatewayParts,
    harness: &Harness,
    method: GatewayMethod,
    session: &mut HarnessSession,
    rollbacks: &Mutex<HashMap<String, Rollback>>,
    params: Option<&Value>,
    involved: &Involved,
) -> Result<Served, GatewayError> {
    let params = Params::new(method, params)?;
    let rollbacks = || rollbacks.lock().unwrap_or_else(|e| e.into_inner());
    let engine_error = guard_error(method);
    let session_error = move |err: SessionError| match err {
        SessionError::Harness(err) => harness_error(err),
        SessionError::Engine(err) => engine_error(err),
        SessionError::Rollback(err) => {
            GatewayError::failed("engine_failed", format!("rollback failed: {err}"))
        }
    };
    match method {
        GatewayMethod::Turn => {
            let prompt = match params.required("prompt", "a string or a user message")? {
                Value::String(text) => Message::user(text.as_str()),
                value @ Value::Object(_) => {
                    let message = message_of(method, "prompt", value)?;
                    if message.role() != pincer_plugin_api::Role::User {
                        return Err(GatewayError::bad_request(
                            "invalid_message",
                            format!(
                                "params.prompt.role of turn must be \"user\", not {:?}: a turn starts with the user's message",
                                message.role_name()
                            ),
                        ));
                    }
                    message
                }
                other => {
                    return Err(GatewayError::bad_request(
                        "invalid_params",
                        format!(
                            "params.prompt of turn must be a string or a message, not {}",
                            json_kind(other)
                        ),
                    ))
                }
            };
            if !parts.has_model {
                return Err(GatewayError::new(
                    409,
                    "no_model",
                    "turn needs a model: start the gateway with --model openai:MODEL",
                ));
            }
            drop(take(parts, involved));
            let before = session.served_by().cloned();
            let report = harness
                .session(session)
                .turn(prompt)
                .map_err(|err| pinned_error(harness_error(err), before, session, involved))?;
            let served = session
                .served_by()
                .cloned()
                .unwrap_or_else(|| EngineServed::of(&parts.source.current()));
            let snapshot = harness.session(session).context().map_err(harness_error)?;
            let reply = snapshot
                .messages
                .iter()
                .rev()
                .take(report.messages_added)
                .find(|m| m.role() == pincer_plugin_api::Role::Assistant);
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct TurnResult<'a> {
                #[serde(flatten)]
                report: &'a crate::harness::TurnReport,
                reply: Option<&'a Message>,
                reply_text: Option<String>,
            }
            Served::by(
                served,
                &TurnResult {
                    report: &report,
                    reply,
                    reply_text: reply.map(Message::plain_text),
                },
            )
        }
        GatewayMethod::Engine(Method::Assemble) => {
            let engine = take(parts, involved);
            let full = params.flag("full")?;
            let assemble = AssembleParams {
                messages: match params.array("messages")? {
                    Some(list) => Some(messages_of(method, "messages", list)?),
                    None => None,
                },
                token_budget: params.u64("tokenBudget")?,
                prompt: params.str("prompt")?.map(str::to_owned),
            };
            let Assembled {
                messages,
                entry_ids,
                answer: guarded,
            } = harness
                .session(session)
                .assemble(&engine, assemble)
                .map_err(session_error)?;
            // Kept messages as runs (`{from, to, count}`) unless every item is wanted on its own.
            let each = full
                || match params.str("refs")? {
                    None | Some("runs") => false,
                    Some("each") => true,
                    Some(other) => {
                        return Err(GatewayError::bad_request(
                            "invalid_params",
                            format!(
                            "params.refs of assemble must be \"runs\" or \"each\", not {other:?}"
                        ),
                        ))
                    }
                };
            let mut items = Vec::new();
            let mut count = 0;
            for item in guarded.value.items.iter() {
                match item {
                    AssembledItem::Input { start, end } => {
                        // In range: the guard held the result to the input it was given
                        // (`check_assemble`), and `legacy` keeps exactly that input.
                        let (start, end) = (*start as usize, *end as usize);
                        if start >= end {
                            continue;
                        }
                        count += end - start;
                        let id = |i: usize| entry_ids.get(i).and_then(EntryId::as_str);
                        if each {
                            for i in start..end {
                                items.push(Item::Each {
                                    entry_id: id(i),
                                    index: entry_ids.get(i).is_none().then_some(i),
                                    message: full.then(|| &messages[i]),
                                });
                            }
                        } else if end <= entry_ids.len() {
                            match (id(start), id(end - 1)) {
                                (Some(from), Some(to)) => items.push(Item::Run {
                                    from,
                                    to,
                                    count: end - start,
                                }),
                                // An entry without an id (never in a held session's context).
                                _ => items.extend((start..end).map(|i| Item::Each {
                                    entry_id: id(i),
                                    index: None,
                                    message: None,
                                })),
                            }
                        } else {
                            items.push(Item::IndexRun {
                                from_index: start,
                                to_index: end - 1,
                                count: end - start,
                            });
                        }
                    }
                    AssembledItem::New(message) => {
                        count += 1;
                        items.push(Item::Each {
                            entry_id: None,
                            index: None,
                            message: Some(message),
                        });
                    }
                }
            }
            #[derive(Serialize)]
            #[serde(untagged)]
            enum Item<'a> {
                /// One message: by entry id, by index into passed messages, or whole.
                Each {
                    #[serde(rename = "entryId", skip_serializing_if = "Option::is_none")]
                    entry_id: Option<&'a str>,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    index: Option<usize>,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    message: Option<&'a Message>,
                },
                /// `count` consecutive messages of the session's context, entry `from` to
                /// entry `to` (both included).
                Run {
                    from: &'a str,
                    to: &'a str,
                    count: usize,
                },
                /// `count` consecutive passed messages, `fromIndex` to `toIndex` (included).
                IndexRun {
                    #[serde(rename = "fromIndex")]
                    from_index: usize,
                    #[serde(rename = "toIndex")]
                    to_index: usize,
                    count: usize,
                },
            }
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct AssembleResult<'a> {
                count: usize,
                items: Vec<Item<'a>>,
                estimated_tokens: Option<u64>,
                system_prompt_addition: Option<&'a str>,
                answered_by: &'a str,
            }
            let value = &guarded.value;
            Served::of(
                &engine,
                &AssembleResult {
                    count,
                    items,
                    estimated_tokens: value.estimated_tokens.into_option(),
                    system_prompt_addition: value
                        .system_prompt_addition
                        .as_ref()
                        .map(|s| s.as_str())
                        .into_option(),
                    answered_by: guarded.answer.answered_by.as_str(),
                },
            )
        }
        GatewayMethod::Engine(ingest) if IngestMode::of(ingest).is_some() => {
            let engine = take(parts, involved);
            let is_heartbeat = params.flag("isHeartbeat")?;
            let (messages, mode) = match IngestMode::of(ingest) {
                Some(IngestMode::Batch) => {
                    let list = params.array("messages")?.ok_or_else(|| {
                        GatewayError::bad_request(
                            "invalid_params",
                            format!("{method} needs params.messages (an array of messages)"),
                        )
                    })?;
                    (messages_of(method, "messages", list)?, IngestMode::Batch)
                }
                _ => {
                    let message =
                        message_of(method, "message", params.required("message", "a message")?)?;
                    (vec![message], IngestMode::EachMessage)
                }
            };
            let ingested = harness
                .session(session)
                .ingest(
                    &engine,
                    IngestParams {
                        messages,
                        mode,
                        is_heartbeat,
                    },
                )
                .map_err(session_error)?;
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct IngestResult<'a> {
                ingested: bool,
                ingested_count: u64,
                entry_ids: &'a [EntryId],
                answered_by: &'a str,
            }
            Served::of(
                &engine,
                &IngestResult {
                    ingested: ingested.ingested_count > 0,
                    ingested_count: ingested.ingested_count,
                    entry_ids: &ingested.entry_ids,
                    answered_by: &ingested.answered_by,
                },
            )
        }
        GatewayMethod::Engine(Method::Compact) => {
            let instructions = params.str("customInstructions")?;
            drop(take(parts, involved));
            let before = session.served_by().cloned();
            let report = harness
                .session(session)
                .compact(instructions)
                .map_err(|err| pinned_error(harness_error(err), before, session, involved))?;
            let served = session
                .served_by()
                .cloned()
                .unwrap_or_else(|| EngineServed::of(&parts.source.current()));
            Served::by(served, &report)
        }
        GatewayMethod::Engine(Method::AfterTurn) => {
            let engine = take(parts, involved);
            let after = AfterTurnParams {
                pre_prompt_message_count: params.u64("prePromptMessageCount")?,
                auto_compaction_summary: params.str("autoCompactionSummary")?.map(str::to_owned),
                is_heartbeat: params.flag("isHeartbeat")?,
                token_budget: params.u64("tokenBudget")?,
            };
            let answer = harness
                .session(session)
                .after_turn(&engine, after)
                .map_err(session_error)?;
            Served::of(&engine, &called(answer.map(|g| g.answer.answered_by)))
        }
        GatewayMethod::Engine(Method::Maintain) => {
            let engine = take(parts, involved);
            let reason = params.str("reason")?.unwrap_or("manual");
            let answer = harness
                .session(session)
                .maintain(&engine, reason)
                .map_err(session_error)?;
            Served::of(
                &engine,
                &called_with(answer, |value| {
                    serde_json::json!({
                        "changed": value.changed,
                        "bytesFreed": value.bytes_freed,
                        "rewrittenEntries": value.rewritten_entries,
                        "reason": value.reason.as_ref().map(|r| r.as_str()).into_option(),
                    })
                }),
            )
        }
        GatewayMethod::Engine(Method::CallTool) => {
            let engine = take(parts, involved);
            let arguments_json = match params.get("arguments") {
                None => "{}".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            let call = ToolCallParams {
                name: params.required_str("name")?.to_owned(),
                arguments_json,
            };
            let answer = harness
                .session(session)
                .call_tool(&engine, call)
                .map_err(session_error)?;
            Served::of(
                &engine,
                &called_with(answer, |value| {
                    serde_json::json!({
                        "content": value.content.as_str(),
                        "isError": value.is_error,
                    })
                }),
            )
        }
        GatewayMethod::Engine(Method::PrepareSubagentSpawn) => {
            let engine = take(parts, involved);
            let child = params.required_str("childSessionKey")?;
            // A child is named by a key too, never by a path.
            super::protocol::session_key(child)?;
            let mode = match params.str("contextMode")? {
                None | Some("isolated") => SubagentContextMode::Isolated,
                Some("fork") => SubagentContextMode::Fork,
                Some(other) => {
                    return Err(GatewayError::bad_request(
                        "invalid_params",
                        format!(
                            "params.contextMode must be \"isolated\" or \"fork\", not {other:?}"
                        ),
                    ))
                }
            };
            let spawn = SubagentSpawnParams {
                child_session_key: child.to_owned(),
                context_mode: mode,
                ttl_ms: params.u64("ttlMs")?,
            };
            let answer = harness
                .session(session)
                .prepare_subagent_spawn(&engine, spawn)
                .map_err(session_error)?;
            let answered_by = answer.as_ref().map(|g| g.answer.answered_by.clone());
            let rollback = answer.and_then(|g| g.value);
            let has_rollback = rollback.is_some();
            if let Some(handle) = rollback {
                rollbacks().insert(child.to_owned(), handle);
            }
            Served::of(
                &engine,
                &serde_json::json!({
                    "called": answered_by.is_some(),
                    "rollback": has_rollback,
                    "answeredBy": answered_by,
                }),
            )
        }
        GatewayMethod::Engine(Method::OnSubagentEnded) => {
            let engine = take(parts, involved);
            let child = params.required_str("childSessionKey")?;
            // A child is named by a key too, never by a path.
            super::protocol::session_key(child)?;
            let reason = match params.str("reason")?.unwrap_or("completed") {
                "deleted" => SubagentEndReason::Deleted,
                "completed" => SubagentEndReason::Completed,
                "swept" => SubagentEndReason::Swept,
                "released" => SubagentEndReason::Released,
                other => {
                    return Err(GatewayError::bad_request(
                        "invalid_params",
                        format!(
                            "params.reason must be deleted, completed, swept or released, not {other:?}"
                        ),
                    ))
                }
            };
            // A child that failed to spawn rolls its preparation back instead.
            if params.flag("spawnFailed")? {
                let handle = rollbacks().remove(child);
                harness
                    .session(session)
                    .roll_back_subagent_spawn(&engine, handle)
                    .map_err(session_error)?;
                return Served::of(&engine, &serde_json::json!({ "rolledBack": true }));
            }
            rollbacks().remove(child);
            let answer = harness
                .session(session)
                .on_subagent_ended(&engine, child, reason)
                .map_err(session_error)?;
            Served::of(&engine, &called(answer.map(|g| g.answer.answered_by)))
        }
        GatewayMethod::Health | GatewayMethod::Doctor | GatewayMethod::Reload => {
            unreachable!("served by serve_global")
        }
        GatewayMethod::Engine(other) => Err(GatewayError::bad_request(
            "unknown_method",
            format!("the gateway does not answer {other}"),
        )),
    }
}

/// `{called, answeredBy}` of a method without a result.
fn called(answered_by: Option<impl Serialize>) -> Value {
    serde_json::json!({ "called": answered_by.is_some(), "answeredBy": answered_by })
}

/// The answer of an optional method with a result: `{"called": false}` when the engine has
/// none, else the result's `fields` with `called` and `answeredBy`.
fn called_with<T>(answer: Option<Guarded<T>>, fields: impl FnOnce(&T) -> Value) -> Value {
    let Some(guarded) = answer else {
        return serde_json::json!({ "called": false });
    };
    let mut value = fields(&guarded.value);
    value["called"] = Value::Bool(true);
    value["answeredBy"] = serde_json::json!(guarded.answer.answered_by);
    value
}

/// The message `value` given as `field` of `method` (`message`, `messages[3]`, `prompt`),
/// checked against OpenClaw's message model first (`messages.rs`).
fn message_of(method: GatewayMethod, field: &str, value: &Value) -> Result<Message, GatewayError> {
    if let Err(fault) = super::messages::check_message(value) {
        let at = if fault.field.is_empty() {
            format!("params.{field}")
        } else {
            format!("params.{field}.{}", fault.field)
        };
        return Err(GatewayError::bad_request(
            "invalid_message",
            format!(
                "{at} of {method}: {} ({field} is not an OpenClaw message; nothing was stored)",
                fault.problem
            ),
        ));
    }
    Message::from_value(value.clone()).map_err(|err| {
        GatewayError::bad_request(
            "invalid_message",
            format!("params.{field} of {method} is not an OpenClaw message: {err}"),
        )
    })
}

/// Every message of the array `list` given as `field` of `method`, each checked.
fn messages_of(
    method: GatewayMethod,
    field: &str,
    list: &[Value],
) -> Result<Vec<Message>, GatewayError> {
    list.iter()
        .enumerate()
        .map(|(index, value)| message_of(method, &format!("{field}[{index}]"), value))
        .collect()
}
