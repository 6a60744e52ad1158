//! `pincer check-engine`: calls every method of the resolved engine once, in lifecycle order,
//! over a conversation, and reports what each call did — worked, failed and fell back to
//! `legacy`, failed closed, or is not implemented. A smoke test for engine authors and
//! operators; the host's own tests use it to drive every method of a real loaded library.
//!
//! Between methods the engine's quarantine is cleared, so each method is tried against the
//! engine itself rather than its fallback.

use std::sync::Arc;

use pincer_plugin_abi::latest::{AbortController, SubagentContextMode, SubagentEndReason};
use serde::Serialize;

use crate::engines::request::{
    AfterTurnRequest, AssembleRequest, BootstrapRequest, CompactRequest, HostInputs,
    IngestBatchRequest, IngestRequest, MaintainReason, MaintainRequest, SubagentEndedRequest,
    SubagentSpawnRequest,
};

use crate::engines::instance::EngineCallError;
use crate::session::Transcript;
use crate::slot::guarded::{Answer, GuardError, Guarded, GuardedEngine};
use crate::slot::quarantine::Quarantine;
use crate::types::Method;

/// What one method call did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodOutcome {
    /// The method (serialized as its contract name).
    pub method: Method,
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
    method: Method,
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
            answered_by: Some(answered_by.to_string()),
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

/// Collects the outcomes, clearing the engine's quarantine after each method so the next one
/// is tried against the engine itself.
struct Recorder<'a> {
    quarantine: &'a Quarantine,
    id: String,
    out: Vec<MethodOutcome>,
}

impl Recorder<'_> {
    /// A guarded call's outcome.
    fn guarded<T>(&mut self, method: Method, result: Result<Option<Guarded<T>>, GuardError>) {
        let outcome = outcome_of(method, result, self.quarantine, &self.id);
        self.push(outcome);
    }

    /// The outcome of a call the guard does not route (a rollback handle, `dispose`).
    fn direct(&mut self, method: Method, result: Result<(), EngineCallError>) {
        let outcome = MethodOutcome {
            method,
            outcome: if result.is_ok() { "ok" } else { "failed" },
            answered_by: result.is_ok().then(|| self.id.clone()),
            error: result.err(),
            quarantined: false,
        };
        self.push(outcome);
    }

    fn push(&mut self, outcome: MethodOutcome) {
        self.out.push(outcome);
        self.quarantine.clear(Some(&self.id));
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
    let abort = || Arc::new(AbortController::new());
    // A conversation file has no session entries: nothing to pass beside the messages.
    let entry_ids = crate::engines::request::no_entry_ids();
    let mut record = Recorder {
        quarantine,
        id: engine.id().to_owned(),
        out: Vec::new(),
    };

    let bootstrap = BootstrapRequest {
        session_id: Arc::clone(&session),
        session_file: Arc::clone(&file),
        host: host.clone(),
    };
    record.guarded(
        Method::Bootstrap,
        engine.bootstrap(Arc::new(bootstrap), abort()),
    );
    if !messages.is_empty() {
        let ingest = IngestRequest {
            session_id: Arc::clone(&session),
            messages: Arc::clone(&messages),
            entry_ids: Arc::clone(&entry_ids),
            index: 0,
            is_heartbeat: false,
            host: host.clone(),
        };
        record.guarded(
            Method::Ingest,
            engine.ingest(Arc::new(ingest), abort()).map(Some),
        );
    }
    let batch = IngestBatchRequest {
        session_id: Arc::clone(&session),
        messages: Arc::clone(&messages),
        entry_ids: Arc::clone(&entry_ids),
        range: 0..messages.len(),
        is_heartbeat: false,
        host: host.clone(),
    };
    record.guarded(
        Method::IngestBatch,
        engine.ingest_batch(Arc::new(batch), abort()),
    );
    let assemble = AssembleRequest {
        session_id: Arc::clone(&session),
        messages: Arc::clone(&messages),
        entry_ids: Arc::clone(&entry_ids),
        token_budget: None,
        host: host.clone(),
    };
    record.guarded(
        Method::Assemble,
        engine.assemble(Arc::new(assemble), abort()).map(Some),
    );
    let after_turn = AfterTurnRequest {
        session_id: Arc::clone(&session),
        session_file: Arc::clone(&file),
        messages: Arc::clone(&messages),
        entry_ids: Arc::clone(&entry_ids),
        pre_prompt_message_count: messages.len().saturating_sub(1) as u64,
        auto_compaction_summary: None,
        is_heartbeat: false,
        token_budget: None,
        host: host.clone(),
    };
    record.guarded(
        Method::AfterTurn,
        engine.after_turn(Arc::new(after_turn), abort()),
    );
    let maintain = MaintainRequest {
        session_id: Arc::clone(&session),
        session_file: Arc::clone(&file),
        reason: MaintainReason::Turn,
        host: host.clone(),
    };
    record.guarded(
        Method::Maintain,
        engine.maintain(Arc::new(maintain), abort()),
    );
    let compact = CompactRequest::manual(
        Arc::clone(&session),
        file,
        Arc::clone(&messages),
        entry_ids,
        host,
    );
    record.guarded(
        Method::Compact,
        engine.compact(Arc::new(compact), abort()).map(Some),
    );

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
                value: None::<crate::engines::instance::Rollback>,
                answer,
            })),
            Some(rollback),
        ),
        other => (other, None),
    };
    let rollback = rollback.map(|handle| engine.rollback(handle));
    record.guarded(Method::PrepareSubagentSpawn, spawn);
    if let Some(result) = rollback {
        record.direct(Method::Rollback, result);
    }
    let ended = SubagentEndedRequest {
        child_session_key: Arc::from("check-engine:child"),
        reason: SubagentEndReason::Completed,
    };
    record.guarded(
        Method::OnSubagentEnded,
        engine.on_subagent_ended(Arc::new(ended)),
    );
    // `dispose` is optional: an engine without one has nothing to call.
    if engine
        .primary()
        .descriptor()
        .has(pincer_plugin_abi::latest::OptionalMethods::DISPOSE)
    {
        record.direct(Method::Dispose, engine.dispose());
    } else {
        record.push(MethodOutcome {
            method: Method::Dispose,
            outcome: "not-implemented",
            answered_by: None,
            error: None,
            quarantined: false,
        });
    }
    record.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FallbackPolicy;
    use crate::engines::legacy::shared_legacy;
    use crate::engines::methods::{Exercise, METHODS};
    use crate::engines::services::{HostServices, NoRuntimeCompaction};
    use pincer_plugin_abi::latest::Message;

    #[test]
    fn check_engine_calls_what_the_method_table_says_it_exercises() {
        let services = HostServices::new("legacy", Arc::new(NoRuntimeCompaction), None);
        let legacy = shared_legacy(services).unwrap();
        let quarantine = Arc::new(Quarantine::new(None));
        let engine = GuardedEngine::new(
            "legacy",
            None,
            Arc::clone(&legacy),
            legacy,
            Arc::clone(&quarantine),
            FallbackPolicy::Legacy,
        );
        let transcript = Transcript::new(vec![Message::user("hello")]);
        let mut called: Vec<Method> = exercise_engine(&engine, &quarantine, &transcript)
            .into_iter()
            .map(|outcome| outcome.method)
            .collect();
        called.sort();
        // `legacy` has no `prepareSubagentSpawn`, so no rollback handle to run.
        let table: Vec<Method> = METHODS
            .iter()
            .filter(|row| row.exercise != Exercise::No && row.method != Method::Rollback)
            .map(|row| row.method)
            .collect();
        assert_eq!(called, table);
    }
}
