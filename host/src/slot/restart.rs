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
//! back: no supervisor thread, and nothing restarts an engine no one uses. This file holds the
//! policy and the count; the runtime (`Runtime::resolve`) starts the new worker.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::EntryConfig;

/// Restarts per engine by default.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;
/// The first restart's backoff by default.
pub const DEFAULT_RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// How often, and how soon, an engine's dead worker is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestartPolicy {
    /// The most restarts it gets (`maxRestarts`).
    pub(crate) max: u32,
    /// The first restart's backoff (`restartBackoffMs`); the n-th waits `backoff · 2ⁿ⁻¹`.
    pub(crate) backoff: Duration,
}

impl RestartPolicy {
    /// The policy of the engine whose plugin has `entry` (the defaults without one).
    pub(crate) fn of_entry(entry: Option<&EntryConfig>) -> Self {
        RestartPolicy {
            max: entry
                .and_then(|e| e.max_restarts)
                .unwrap_or(DEFAULT_MAX_RESTARTS),
            backoff: entry
                .and_then(|e| e.restart_backoff_ms)
                .map_or(DEFAULT_RESTART_BACKOFF, Duration::from_millis),
        }
    }
}

/// What the runtime remembers of an engine's dead workers.
#[derive(Debug, Clone)]
struct RestartRecord {
    /// Restarts so far.
    attempts: u32,
    /// When the current dead worker was first seen dead.
    noticed: Option<Instant>,
}

/// The restarts of every engine whose worker died, by engine id.
#[derive(Debug, Default)]
pub(crate) struct Restarts {
    records: BTreeMap<String, RestartRecord>,
}

impl Restarts {
    /// Whether `engine_id`, whose worker is dead, is due a restart under `policy` (its
    /// backoff passed, restarts left): counts it as one when it is. The first call for a
    /// dead worker starts its backoff.
    pub(crate) fn due(&mut self, engine_id: &str, policy: RestartPolicy) -> bool {
        let record = self
            .records
            .entry(engine_id.to_owned())
            .or_insert(RestartRecord {
                attempts: 0,
                noticed: None,
            });
        let noticed = *record.noticed.get_or_insert_with(Instant::now);
        if record.attempts >= policy.max {
            return false;
        }
        let wait = policy.backoff.saturating_mul(1 << record.attempts.min(16));
        if noticed.elapsed() < wait {
            return false;
        }
        record.attempts += 1;
        record.noticed = None;
        true
    }

    /// Forgets the restarts of `engine_id` (the operator reloaded it).
    pub(crate) fn forget(&mut self, engine_id: &str) {
        self.records.remove(engine_id);
    }

    /// Each engine's restarts, as `health` shows them, under its policy.
    pub(crate) fn statuses(&self, policy_of: impl Fn(&str) -> RestartPolicy) -> Vec<RestartStatus> {
        self.records
            .iter()
            .map(|(id, record)| {
                let max = policy_of(id).max;
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
