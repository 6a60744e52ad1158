//! `pincer check-engine`: calls every method of the resolved engine once, in lifecycle order,
//! over a conversation, and reports what each call did — worked, failed and fell back to
//! `legacy`, failed closed, or is not implemented. A smoke test for engine authors and
//! operators; the host's own tests use it to drive every method of a real loaded library.
//!
//! Between methods the engine's quarantine is cleared, so each method is tried against the
//! engine itself rather than its fallback.

use std::sync::Arc;

use pincer_plugin_api::abi::v1::{
    AbortSignal, CompactionTarget, SpawnRollbackBox, SubagentContextMode, SubagentEndReason,
};
use serde::Serialize;

use crate::request::{
    AfterTurnRequest, AssembleRequest, BootstrapRequest, CompactRequest, HostInputs,
    IngestBatchRequest, IngestRequest, MaintainRequest, SubagentEndedRequest, SubagentSpawnRequest,
};

use crate::engine::EngineCallError;
use crate::guarded::{Answer, GuardError, Guarded, GuardedEngine};
use crate::quarantine::Quarantine;
use crate::session::Transcript;

/// What one method call did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodOutcome {
    /// The contract name of the method.
    pub method: &'static str,
    /// `ok`, `fallback` (failed; legacy answered), `failed` (the error reached the caller),
    /// or `not-implemented`.
    pub outcome: &'static str,
    /// Who answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// The engine's error, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<EngineCallError>,
    /// Whether the call quarantined the engine.
    pub quarantined: bool,
}

fn outcome_of<T>(
    method: &'static str,
    result: Result<Option<Guarded<T>>, GuardError>,
    quarantine: &Quarantine,
    engine_id: &str,
) -> MethodOutcome {
    let quarantined = quarantine.is_quarantined(engine_id);
    match result {
        Ok(None) => MethodOutcome {
            method,
            outcome: "not-implemented",
            answered_by: None,
            error: None,
            quarantined,
        },
        Ok(Some(Guarded {
            answer:
                Answer {
                    answered_by,
                    failure,
                    ..
                },
            ..
        })) => MethodOutcome {
            method,
            outcome: if failure.is_some() { "fallback" } else { "ok" },
            answered_by: Some(answered_by),
            error: failure,
            quarantined,
        },
        Err(err) => MethodOutcome {
            method,
            outcome: "failed",
            answered_by: None,
            error: Some(err.error),
            quarantined,
        },
    }
}

/// Calls every method of `engine` once over `transcript`; see the module docs.
pub fn exercise_engine(
    engine: &GuardedEngine,
    quarantine: &Quarantine,
    transcript: &Transcript,
) -> Vec<MethodOutcome> {
    let messages = transcript.shared_messages();
    let session: Arc<str> = Arc::from("check-engine");
    let file: Arc<str> = Arc::from("check-engine.jsonl");
    let host = HostInputs {
        session_key: Some(Arc::clone(&session)),
        ..HostInputs::default()
    };
    let abort = || Arc::new(AbortSignal::new());
    let id = engine.id().to_owned();
    let mut out = Vec::new();
    let mut push = |outcome: MethodOutcome| {
        out.push(outcome);
        quarantine.clear(Some(&id));
    };
    push(outcome_of(
        "bootstrap",
        engine.bootstrap(
            Arc::new(BootstrapRequest {
                session_id: Arc::clone(&session),
                session_file: Arc::clone(&file),
                host: host.clone(),
            }),
            abort(),
        ),
        quarantine,
        &id,
    ));
    if !messages.is_empty() {
        push(outcome_of(
            "ingest",
            engine
                .ingest(
                    Arc::new(IngestRequest {
                        session_id: Arc::clone(&session),
                        messages: Arc::clone(&messages),
                        index: 0,
                        is_heartbeat: false,
                        host: host.clone(),
                    }),
                    abort(),
                )
                .map(Some),
            quarantine,
            &id,
        ));
    }
    push(outcome_of(
        "ingestBatch",
        engine.ingest_batch(
            Arc::new(IngestBatchRequest {
                session_id: Arc::clone(&session),
                messages: Arc::clone(&messages),
                range: 0..messages.len(),
                is_heartbeat: false,
                host: host.clone(),
            }),
            abort(),
        ),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "assemble",
        engine
            .assemble(
                Arc::new(AssembleRequest {
                    session_id: Arc::clone(&session),
                    messages: Arc::clone(&messages),
                    token_budget: None,
                    host: host.clone(),
                }),
                abort(),
            )
            .map(Some),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "afterTurn",
        engine.after_turn(
            Arc::new(AfterTurnRequest {
                session_id: Arc::clone(&session),
                session_file: Arc::clone(&file),
                messages: Arc::clone(&messages),
                pre_prompt_message_count: messages.len().saturating_sub(1) as u64,
                auto_compaction_summary: None,
                is_heartbeat: false,
                token_budget: None,
                host: host.clone(),
            }),
            abort(),
        ),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "maintain",
        engine.maintain(
            Arc::new(MaintainRequest {
                session_id: Arc::clone(&session),
                session_file: Arc::clone(&file),
                reason: Arc::from("turn"),
                host: host.clone(),
            }),
            abort(),
        ),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "compact",
        engine
            .compact(
                Arc::new(CompactRequest {
                    session_id: Arc::clone(&session),
                    session_file: Arc::clone(&file),
                    agent_id: None,
                    messages: Arc::clone(&messages),
                    token_budget: None,
                    force: true,
                    force_reason: Some(Arc::from("manual")),
                    current_token_count: None,
                    compaction_target: CompactionTarget::Budget,
                    custom_instructions: None,
                    host: host.clone(),
                }),
                abort(),
            )
            .map(Some),
        quarantine,
        &id,
    ));
    let spawn = engine.prepare_subagent_spawn(Arc::new(SubagentSpawnRequest {
        parent_session_key: Arc::clone(&session),
        child_session_key: Arc::from("check-engine:child"),
        context_mode: Some(SubagentContextMode::Isolated),
        parent_session_id: Some(Arc::clone(&session)),
        parent_session_file: None,
        child_session_id: None,
        child_session_file: None,
        ttl_ms: None,
    }));
    // Exercise the rollback handle too: the spawn "fails" right after preparing.
    let (spawn, rollback) = match spawn {
        Ok(Some(Guarded {
            value: Some(rollback),
            answer,
        })) => (
            Ok(Some(Guarded {
                value: None::<SpawnRollbackBox>,
                answer,
            })),
            Some(rollback),
        ),
        other => (other, None),
    };
    let rollback_outcome = rollback.map(|rollback| match engine.rollback(rollback) {
        Ok(()) => MethodOutcome {
            method: "rollback",
            outcome: "ok",
            answered_by: Some(id.clone()),
            error: None,
            quarantined: false,
        },
        Err(err) => MethodOutcome {
            method: "rollback",
            outcome: "failed",
            answered_by: None,
            error: Some(err),
            quarantined: false,
        },
    });
    push(outcome_of("prepareSubagentSpawn", spawn, quarantine, &id));
    if let Some(outcome) = rollback_outcome {
        push(outcome);
    }
    push(outcome_of(
        "onSubagentEnded",
        engine.on_subagent_ended(Arc::new(SubagentEndedRequest {
            child_session_key: Arc::from("check-engine:child"),
            reason: SubagentEndReason::Completed,
        })),
        quarantine,
        &id,
    ));
    let dispose = engine.dispose();
    push(MethodOutcome {
        method: "dispose",
        outcome: if dispose.is_ok() { "ok" } else { "failed" },
        answered_by: Some(id.clone()),
        error: dispose.err(),
        quarantined: false,
    });
    out
}
