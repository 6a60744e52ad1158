//! The health report: one typed [`HealthReport`] for `pincer health` (offline: the quarantine
//! records of the installation, and per engine what a process starting now would serve), its
//! `--json`, and the gateway's `health` answer (per engine its generations, workers and
//! restarts, and the sessions held).

use serde::Serialize;

use crate::config::{LoadedConfig, PincerHome};
use crate::engines::backend::WorkerInfo;
use crate::plugins::catalog::{plugin_roots, Catalog};
use crate::slot::guarded::GuardedEngine;
use crate::slot::quarantine::{
    harvest_crashes, health_line, process_alive, split_active, Quarantine, QuarantineRecord,
};
use crate::slot::restart::RestartStatus;
use crate::slot::runtime::Runtime;

/// What `pincer health` and the gateway's `health` answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    /// `ok`, or `warning` when an engine is quarantined (offline only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<HealthStatus>,
    /// The health line (offline only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// The quarantine records, active and history, when there are any (offline only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_engines: Option<QuarantineRecords>,
    /// The engine the slot selects (offline: none when the config cannot be read) or
    /// resolves to (the gateway).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Per engine: its generation and the old generations kept.
    pub engines: Vec<EngineHealth>,
    /// Sessions held (the gateway only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<usize>,
    /// No gateway was asked: every engine as a fresh process would serve it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub offline: bool,
}

/// The health report's status word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// No engine is quarantined.
    Ok,
    /// An engine is quarantined.
    Warning,
}

/// The quarantine records of the offline report.
#[derive(Debug, Serialize)]
pub struct QuarantineRecords {
    /// Those that still downgrade their engine.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<RecordHealth>,
    /// Those of processes that have exited.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RecordHealth>,
}

/// One quarantine record, and whether its process still runs.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordHealth {
    /// The record.
    #[serde(flatten)]
    pub record: QuarantineRecord,
    /// Whether the process that recorded it runs (`None`: this platform cannot tell).
    pub process_alive: Option<bool>,
}

/// One engine in the health report.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineHealth {
    /// The engine id.
    pub engine_id: String,
    /// Its current generation.
    pub generation: u64,
    /// Replaced instances that calls still hold (disposed when the last call ends).
    pub draining: usize,
    /// Old generations whose libraries are kept mapped.
    pub kept_generations: usize,
    /// Their size in bytes.
    pub kept_bytes: u64,
    /// Old generations closed and unmapped (`plugins.entries.<id>.unloadOnReload`; the
    /// gateway only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unloaded_generations: Option<usize>,
    /// Of the kept ones, `unloadOnReload` builds that something still holds (the gateway
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unloading: Option<usize>,
    /// Of the kept ones, `unloadOnReload` builds closed but kept mapped by the dynamic loader
    /// (the gateway only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned: Option<usize>,
    /// Whether it is quarantined now.
    pub quarantined: bool,
    /// The worker process of an isolated engine: its pid, protections, and why it died.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerInfo>,
    /// Restarts of an isolated engine's dead workers, when it had any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarts: Option<RestartStatus>,
}

impl HealthReport {
    /// The report of a running runtime (the gateway's `health`): `engine` serves the slot,
    /// `sessions` are held.
    pub fn live(runtime: &Runtime, engine: &GuardedEngine, sessions: usize) -> HealthReport {
        let restarts = runtime.worker_restarts();
        HealthReport {
            status: None,
            line: None,
            context_engines: None,
            slot: Some(engine.id().to_owned()),
            engines: runtime
                .generations()
                .into_iter()
                .map(|g| EngineHealth {
                    quarantined: runtime.quarantine().is_quarantined(&g.engine_id),
                    restarts: restarts
                        .iter()
                        .find(|r| r.engine_id == g.engine_id)
                        .cloned(),
                    worker: g.worker,
                    engine_id: g.engine_id,
                    generation: g.generation,
                    draining: g.draining,
                    kept_generations: g.kept_generations,
                    kept_bytes: g.kept_bytes,
                    unloaded_generations: Some(g.unloaded_generations),
                    unloading: Some(g.unloading),
                    pinned: Some(g.pinned),
                })
                .collect(),
            sessions: Some(sessions),
            offline: false,
        }
    }

    /// The report of the installation at `home` without a gateway: the quarantine records
    /// (crashes not yet seen by any process harvested first), and per engine what a process
    /// starting now would serve — generation 1, no old generation kept, nothing draining;
    /// quarantined as the records say. The engines are `legacy` and every engine a plugin
    /// manifest declares (no library is opened); none when the config cannot be read.
    pub fn offline(home: &PincerHome) -> HealthReport {
        harvest_crashes(&home.state_dir());
        let quarantine = Quarantine::new(Some(&home.state_dir()));
        let (active, history) = split_active(quarantine.list());
        let line = health_line(&active).unwrap_or_else(|| "Context engine: ok".to_owned());
        let (slot, engines) = offline_generations(home, &active);
        let with_alive = |records: Vec<QuarantineRecord>| -> Vec<RecordHealth> {
            records
                .into_iter()
                .map(|record| RecordHealth {
                    process_alive: process_alive(record.pid),
                    record,
                })
                .collect()
        };
        let status = if active.is_empty() {
            HealthStatus::Ok
        } else {
            HealthStatus::Warning
        };
        let context_engines =
            (!active.is_empty() || !history.is_empty()).then(|| QuarantineRecords {
                quarantined: with_alive(active),
                history: with_alive(history),
            });
        HealthReport {
            status: Some(status),
            line: Some(line),
            context_engines,
            slot,
            engines,
            sessions: None,
            offline: true,
        }
    }

    /// The report as JSON, its keys in order (as `pincer health --json` prints it).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("the health report serializes")
    }

    /// The offline report as `pincer health` prints it.
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        if let Some(line) = &self.line {
            let _ = writeln!(out, "{line}");
        }
        if !self.engines.is_empty() {
            let _ = writeln!(
                out,
                "engines (offline: no gateway asked; `--socket PATH` shows a running one's):"
            );
            for engine in &self.engines {
                let _ = writeln!(
                    out,
                    "  {}{}: generation 1, no old generations kept{}",
                    engine.engine_id,
                    if self.slot.as_deref() == Some(engine.engine_id.as_str()) {
                        " (slot)"
                    } else {
                        ""
                    },
                    if engine.quarantined {
                        ", quarantined"
                    } else {
                        ""
                    }
                );
            }
        }
        let row = |r: &QuarantineRecord| {
            format!(
                "{} owner={} operation={} failedAt={} pid={}{}: {}",
                r.engine_id,
                r.owner
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), ToString::to_string),
                r.operation,
                r.failed_at,
                r.pid,
                if r.crash { " (crashed)" } else { "" },
                r.reason
            )
        };
        if let Some(records) = &self.context_engines {
            for r in &records.quarantined {
                let _ = writeln!(out, "  {}", row(&r.record));
            }
            if !records.history.is_empty() {
                let _ = writeln!(out, "history (recorded by processes that have exited; `pincer health --clear` removes them):");
                for r in &records.history {
                    let _ = writeln!(out, "  {}", row(&r.record));
                }
            }
        }
        out
    }
}

/// The offline engines of `home` (see [`HealthReport::offline`]) and the slot's engine.
fn offline_generations(
    home: &PincerHome,
    active: &[QuarantineRecord],
) -> (Option<String>, Vec<EngineHealth>) {
    let Ok(config) = LoadedConfig::load(&home.config_path()) else {
        return (None, Vec::new());
    };
    let catalog = Catalog::read(&plugin_roots(home, &config.config, &[]));
    let mut ids: std::collections::BTreeSet<String> = catalog
        .entries
        .iter()
        .flat_map(|entry| entry.engine_ids().iter().cloned())
        .collect();
    ids.insert("legacy".to_owned());
    let engines = ids
        .into_iter()
        .map(|id| EngineHealth {
            quarantined: active.iter().any(|r| r.engine_id == id),
            engine_id: id,
            generation: 1,
            draining: 0,
            kept_generations: 0,
            kept_bytes: 0,
            unloaded_generations: None,
            unloading: None,
            pinned: None,
            worker: None,
            restarts: None,
        })
        .collect();
    (Some(config.config.selected_engine().to_owned()), engines)
}
