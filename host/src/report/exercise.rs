//! `pincer check-engine`: calls every method of the resolved engine once, in lifecycle order,
//! over a conversation, and reports what each call did — worked, failed and fell back to
//! `legacy`, failed closed, or is not implemented. A smoke test for engine authors and
//! operators; the host's own tests use it to drive every method of a real loaded library.
//!
//! Between methods the engine's quarantine is cleared, so each method is tried against the
//! engine itself rather than its fallback.

use std::sync::Arc;

use pincer_plugin_abi::latest::{AbortController, SubagentContextMode};
use serde::Serialize;

use crate::engines::methods::{for_each_engine_method, EXERCISE_ORDER};
use crate::engines::request::{
    Conversation, Exemplar, HostInputs, SubagentSpawnRequest, EXEMPLAR_CHILD,
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

/// A call of each row of the method table over a conversation, by its method.
macro_rules! exercise_rows {
    ($($name:ident($params:ident) -> $result:ty {
        variant: $variant:ident, request: $request:ident, $($row:tt)*
    })*) => {
        /// Calls `method` (a row of the table's common shape) over `conversation` through the
        /// guard; `false` when it is not such a row.
        fn exercise_row(
            engine: &GuardedEngine,
            method: Method,
            conversation: &Conversation,
            record: &mut Recorder<'_>,
        ) -> bool {
            match method {
                $(Method::$variant => {
                    if let Some(request) =
                        <crate::engines::request::$request as Exemplar>::exemplar(conversation)
                    {
                        let abort = Arc::new(AbortController::new());
                        record.guarded(method, engine.call(&Arc::new(request), &abort));
                    }
                    true
                })*
                _ => false,
            }
        }
    };
}

for_each_engine_method!(exercise_rows);

/// Calls every method of `engine` once over `transcript`, in the table's lifecycle order
/// (the method table's `EXERCISE_ORDER`); see the module docs.
pub fn exercise_engine(
    engine: &GuardedEngine,
    quarantine: &Quarantine,
    transcript: &Transcript,
) -> Vec<MethodOutcome> {
    let session: Arc<str> = Arc::from("check-engine");
    let conversation = Conversation {
        session_id: Arc::clone(&session),
        session_file: Arc::from("check-engine.jsonl"),
        messages: transcript.shared_messages(),
        // A conversation file has no session entries: nothing to pass beside the messages.
        entry_ids: crate::engines::request::no_entry_ids(),
        host: HostInputs {
            session_key: Some(Arc::clone(&session)),
            ..HostInputs::default()
        },
    };
    let mut record = Recorder {
        quarantine,
        id: engine.id().to_owned(),
        out: Vec::new(),
    };
    for method in EXERCISE_ORDER {
        match method {
            Method::PrepareSubagentSpawn => spawn_and_roll_back(engine, &session, &mut record),
            // Run right after `prepareSubagentSpawn` gave its handle.
            Method::Rollback => {}
            // `dispose` is optional: an engine without one has nothing to call.
            Method::Dispose => {
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
            }
            other => {
                exercise_row(engine, other, &conversation, &mut record);
            }
        }
    }
    record.out
}

/// `prepareSubagentSpawn`, and the rollback handle it gives: the spawn "fails" right after
/// preparing.
fn spawn_and_roll_back(engine: &GuardedEngine, session: &Arc<str>, record: &mut Recorder<'_>) {
    let spawn = engine.prepare_subagent_spawn(Arc::new(SubagentSpawnRequest {
        parent_session_key: Arc::clone(session),
        child_session_key: Arc::from(EXEMPLAR_CHILD),
        context_mode: Some(SubagentContextMode::Isolated),
        parent_session_id: Some(Arc::clone(session)),
        parent_session_file: None,
        child_session_id: None,
        child_session_file: None,
        ttl_ms: None,
    }));
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
