//! Restarting an isolated engine whose worker died.
//!
//! A dead worker fails its call and every later one, and the guard quarantines the engine as
//! for any failure. When the engine is next resolved and its backoff has passed, a new worker
//! is started as a **new generation** of the engine — a re-registration, which clears its
//! quarantine (docs/CONTRACT.md §3.1 step 6) — and the dead generation is retired like any replaced
//! one. At most `plugins.entries.<id>.maxRestarts` restarts (default 3), the n-th after
//! `restartBackoffMs · 2ⁿ⁻¹` (default 1 s); after that the engine stays quarantined until the
//! operator reloads its plugin (`pincer plugins reload ID`), which starts a worker at once
//! and forgets the count.
//!
//! Restarts happen on resolution, on the thread that wants the engine, never behind its
//! back: no supervisor thread, and nothing restarts an engine no one uses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::runtime::Runtime;

/// Restarts per engine by default.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;
/// The first restart's backoff by default.
pub const DEFAULT_RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// What the runtime remembers of an engine's dead workers.
#[derive(Debug, Clone)]
pub(crate) struct RestartRecord {
    /// Restarts so far.
    attempts: u32,
    /// When the current dead worker was first seen dead.
    noticed: Option<Instant>,
}

/// An isolated engine's restarts, as `health` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartStatus {
    /// The engine.
    pub engine_id: String,
    /// Restarts so far.
    pub restarts: u32,
    /// The most it gets.
    pub max_restarts: u32,
    /// Whether it is out of restarts (quarantined until the operator reloads it).
    pub exhausted: bool,
}

impl Runtime {
    fn restart_policy(&self, engine_id: &str) -> (u32, Duration) {
        let config = self.config();
        let plugin = self
            .registry
            .get(engine_id)
            .and_then(|r| r.owner.plugin_id().map(str::to_owned));
        let entry = plugin.and_then(|p| config.config.plugins.entries.get(&p).cloned());
        (
            entry
                .as_ref()
                .and_then(|e| e.max_restarts)
                .unwrap_or(DEFAULT_MAX_RESTARTS),
            entry
                .as_ref()
                .and_then(|e| e.restart_backoff_ms)
                .map_or(DEFAULT_RESTART_BACKOFF, Duration::from_millis),
        )
    }

    /// When the current instance of `engine_id` is an isolated engine whose worker died and
    /// its backoff has passed, starts a new worker as a new generation and clears the
    /// quarantine; returns whether it did.
    pub(super) fn restart_dead_worker(&self, engine_id: &str) -> bool {
        let dead = {
            let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            instances
                .get(engine_id)
                .and_then(|c| c.instance.worker())
                .and_then(|w| w.death)
        };
        let Some(death) = dead else { return false };
        let (max, backoff) = self.restart_policy(engine_id);
        {
            let mut restarts = self.restarts.lock().unwrap_or_else(|e| e.into_inner());
            let record = restarts
                .entry(engine_id.to_owned())
                .or_insert(RestartRecord {
                    attempts: 0,
                    noticed: None,
                });
            let noticed = *record.noticed.get_or_insert_with(Instant::now);
            if record.attempts >= max {
                return false;
            }
            let wait = backoff.saturating_mul(1 << record.attempts.min(16));
            if noticed.elapsed() < wait {
                return false;
            }
            record.attempts += 1;
            record.noticed = None;
        }
        let Some(registration) = self.registry.get(engine_id) else {
            return false;
        };
        let config = self.config();
        match self.create_instance(engine_id, &registration.factory, &config.config) {
            Ok(instance) => {
                let instance = Arc::new(instance);
                let generation = {
                    let mut instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
                    self.install(
                        &mut instances,
                        engine_id,
                        registration.generation,
                        &instance,
                    )
                };
                self.quarantine().clear(Some(engine_id));
                self.reload.bump();
                tracing::warn!(
                    engine_id,
                    generation,
                    previous = %death,
                    "restarted the engine worker as a new generation"
                );
                true
            }
            Err((step, reason)) => {
                tracing::error!(engine_id, step, %reason, "the engine worker could not be restarted");
                false
            }
        }
    }

    /// Whether the current instance of `engine_id` is an isolated engine whose worker died.
    pub(super) fn worker_dead(&self, engine_id: &str) -> bool {
        let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        instances
            .get(engine_id)
            .and_then(|c| c.instance.worker())
            .is_some_and(|w| w.death.is_some())
    }

    /// Forgets the restarts of `engine_id` (the operator reloaded it).
    pub(super) fn forget_restarts(&self, engine_id: &str) {
        self.restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(engine_id);
    }

    /// The restarts of every isolated engine that had one, or is out of them.
    pub fn worker_restarts(&self) -> Vec<RestartStatus> {
        let restarts = self.restarts.lock().unwrap_or_else(|e| e.into_inner());
        restarts
            .iter()
            .map(|(id, record)| {
                let (max, _) = self.restart_policy(id);
                RestartStatus {
                    engine_id: id.clone(),
                    restarts: record.attempts,
                    max_restarts: max,
                    exhausted: record.attempts >= max,
                }
            })
            .collect()
    }
}
