//! `pincer check-engine`: calls every method of the resolved engine once, in lifecycle order,
//! over a conversation, and reports what each call did — worked, failed and fell back to
//! `legacy`, failed closed, or is not implemented. A smoke test for engine authors and
//! operators; the host's own tests use it to drive every method of a real loaded library.
//!
//! Between methods the engine's quarantine is cleared, so each method is tried against the
//! engine itself rather than its fallback.

use pincer_plugin_api::abi::v1::{
    AbortSignal, AfterTurnParams, AssembleParams, BootstrapParams, CompactParams, CompactionTarget,
    HostParams, IngestBatchParams, IngestParams, MaintainParams, SubagentContextMode,
    SubagentEndReason, SubagentEndedParams, SubagentSpawnParams,
};
use pincer_plugin_api::abi::{ROption, RSlice, RStr};
use serde::Serialize;

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
    let messages = transcript.messages();
    let abort = AbortSignal::new();
    let session = RStr::from_str("check-engine");
    let file = RStr::from_str("check-engine.jsonl");
    let host = HostParams {
        session_key: ROption::RSome(session),
        abort_signal: ROption::RSome(&abort),
        ..HostParams::default()
    };
    let id = engine.id().to_owned();
    let mut out = Vec::new();
    let mut push = |outcome: MethodOutcome| {
        out.push(outcome);
        quarantine.clear(Some(&id));
    };
    push(outcome_of(
        "bootstrap",
        engine.bootstrap(&BootstrapParams {
            session_id: session,
            session_file: file,
            host,
        }),
        quarantine,
        &id,
    ));
    if let Some(first) = messages.first() {
        push(outcome_of(
            "ingest",
            engine
                .ingest(&IngestParams {
                    session_id: session,
                    message: first,
                    is_heartbeat: false,
                    host,
                })
                .map(Some),
            quarantine,
            &id,
        ));
    }
    push(outcome_of(
        "ingestBatch",
        engine.ingest_batch(&IngestBatchParams {
            session_id: session,
            messages: RSlice::from_slice(messages),
            is_heartbeat: false,
            host,
        }),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "assemble",
        engine
            .assemble(&AssembleParams {
                session_id: session,
                messages: RSlice::from_slice(messages),
                token_budget: ROption::RNone,
                available_tools: RSlice::from_slice(&[]),
                citations_mode: ROption::RNone,
                model: ROption::RNone,
                host,
            })
            .map(Some),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "afterTurn",
        engine.after_turn(&AfterTurnParams {
            session_id: session,
            session_file: file,
            messages: RSlice::from_slice(messages),
            pre_prompt_message_count: messages.len().saturating_sub(1) as u64,
            auto_compaction_summary: ROption::RNone,
            is_heartbeat: false,
            token_budget: ROption::RNone,
            host,
        }),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "maintain",
        engine.maintain(&MaintainParams {
            session_id: session,
            session_file: file,
            reason: RStr::from_str("turn"),
            host,
        }),
        quarantine,
        &id,
    ));
    push(outcome_of(
        "compact",
        engine
            .compact(&CompactParams {
                session_id: session,
                session_file: file,
                agent_id: ROption::RNone,
                messages: RSlice::from_slice(messages),
                token_budget: ROption::RNone,
                force: true,
                force_reason: ROption::RSome(RStr::from_str("manual")),
                current_token_count: ROption::RNone,
                compaction_target: CompactionTarget::Budget,
                custom_instructions: ROption::RNone,
                host,
            })
            .map(Some),
        quarantine,
        &id,
    ));
    let spawn = engine.prepare_subagent_spawn(&SubagentSpawnParams {
        parent_session_key: session,
        child_session_key: RStr::from_str("check-engine:child"),
        context_mode: ROption::RSome(SubagentContextMode::Isolated),
        parent_session_id: ROption::RSome(session),
        parent_session_file: ROption::RNone,
        child_session_id: ROption::RNone,
        child_session_file: ROption::RNone,
        ttl_ms: ROption::RNone,
    });
    // Exercise the rollback handle too: the spawn "fails" right after preparing.
    let rollback_outcome = match &spawn {
        Ok(Some(Guarded {
            value: Some(rollback),
            ..
        })) => Some(match rollback.rollback().into_result() {
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
                error: Some(err.into()),
                quarantined: false,
            },
        }),
        _ => None,
    };
    push(outcome_of("prepareSubagentSpawn", spawn, quarantine, &id));
    if let Some(outcome) = rollback_outcome {
        push(outcome);
    }
    push(outcome_of(
        "onSubagentEnded",
        engine.on_subagent_ended(&SubagentEndedParams {
            child_session_key: RStr::from_str("check-engine:child"),
            reason: SubagentEndReason::Completed,
        }),
        quarantine,
        &id,
    ));
    let dispose = engine.primary().dispose();
    push(MethodOutcome {
        method: "dispose",
        outcome: if dispose.is_ok() { "ok" } else { "failed" },
        answered_by: Some(id.clone()),
        error: dispose.err(),
        quarantined: false,
    });
    out
}
