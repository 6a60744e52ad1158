//! `pincer health`: the quarantine records and the health line, offline or from a running
//! gateway (`--socket`), and `--clear` of the records of exited processes.

use std::path::PathBuf;
use std::process::ExitCode;

use pincer_host::config::{LoadedConfig, PincerHome};
use pincer_host::slot::quarantine::{
    clear_exited, harvest_crashes, health_line, process_alive, split_active, Quarantine,
    QuarantineRecord,
};

use crate::common::{fail, print_pretty};

/// `pincer health`'s arguments.
#[derive(clap::Args, Debug)]
pub struct HealthArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Remove the records of exited processes (of engine ID, or of every engine).
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    clear: Option<String>,
    /// Ask the gateway on this socket instead: per engine its generation, the old
    /// generations it keeps mapped, and (`unloadOnReload`) those it unloaded.
    #[arg(long, value_name = "PATH", conflicts_with = "clear")]
    socket: Option<PathBuf>,
}

/// Runs `pincer health`.
pub fn run(home: &PincerHome, args: HealthArgs) -> ExitCode {
    match (args.clear, args.socket) {
        (_, Some(socket)) => crate::serve::call_and_print(&socket, "health", None, None, args.json),
        (Some(id), None) => health_clear(home, Some(id.as_str()).filter(|id| !id.is_empty())),
        (None, None) => health(home, args.json),
    }
}

/// `pincer health` without a gateway: the quarantine records of this installation.
fn health(home: &PincerHome, json: bool) -> ExitCode {
    harvest_crashes(&home.state_dir());
    let quarantine = Quarantine::new(Some(&home.state_dir()));
    let (active, history) = split_active(quarantine.list());
    let line = health_line(&active).unwrap_or_else(|| "Context engine: ok".to_owned());
    let (slot, engines) = offline_generations(home, &active);
    let with_alive = |records: &[QuarantineRecord]| -> Vec<serde_json::Value> {
        records
            .iter()
            .map(|r| {
                let mut value = serde_json::to_value(r).expect("serializes");
                value["processAlive"] = serde_json::json!(process_alive(r.pid));
                value
            })
            .collect()
    };
    if json {
        let mut out = serde_json::json!({
            "status": if active.is_empty() { "ok" } else { "warning" },
            "line": line,
        });
        if !active.is_empty() || !history.is_empty() {
            let mut engines = serde_json::json!({});
            if !active.is_empty() {
                engines["quarantined"] = serde_json::json!(with_alive(&active));
            }
            if !history.is_empty() {
                engines["history"] = serde_json::json!(with_alive(&history));
            }
            out["contextEngines"] = engines;
        }
        // The generations view of `health --socket`, offline: every engine as a fresh
        // process would serve it.
        if let Some(slot) = slot {
            out["slot"] = serde_json::json!(slot);
        }
        out["engines"] = serde_json::json!(engines);
        out["offline"] = serde_json::json!(true);
        print_pretty(&out);
    } else {
        println!("{line}");
        if !engines.is_empty() {
            println!("engines (offline: no gateway asked; `--socket PATH` shows a running one's):");
            for engine in &engines {
                println!(
                    "  {}{}: generation 1, no old generations kept{}",
                    engine["engineId"].as_str().unwrap_or("?"),
                    if slot.as_deref() == engine["engineId"].as_str() {
                        " (slot)"
                    } else {
                        ""
                    },
                    if engine["quarantined"] == true {
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
        for r in &active {
            println!("  {}", row(r));
        }
        if !history.is_empty() {
            println!("history (recorded by processes that have exited; `pincer health --clear` removes them):");
            for r in &history {
                println!("  {}", row(r));
            }
        }
    }
    ExitCode::SUCCESS
}

/// `pincer health --clear [ID]`.
fn health_clear(home: &PincerHome, engine_id: Option<&str>) -> ExitCode {
    // A crash not yet seen by any process is a record to clear like the others.
    harvest_crashes(&home.state_dir());
    let (removed, kept) = match clear_exited(&home.state_dir(), engine_id) {
        Ok(it) => it,
        Err(err) => {
            return fail(
                format!(
                    "cannot clear the quarantine mirror in {}: {err}",
                    home.state_dir().display()
                ),
                1,
            )
        }
    };
    let ids = |records: &[QuarantineRecord]| {
        records
            .iter()
            .map(|r| format!("{} (pid {})", r.engine_id, r.pid))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if removed.is_empty() {
        println!("No quarantine records of exited processes to clear.");
    } else {
        println!(
            "Cleared {} quarantine record{} of exited processes: {}.",
            removed.len(),
            if removed.len() == 1 { "" } else { "s" },
            ids(&removed)
        );
    }
    if !kept.is_empty() {
        println!(
            "Kept {} record{} of running processes, which still use legacy for them: {}.",
            kept.len(),
            if kept.len() == 1 { "" } else { "s" },
            ids(&kept)
        );
    }
    ExitCode::SUCCESS
}

/// Per engine of the installation, what a process starting now would serve (no gateway is
/// asked): generation 1, no old generation kept, nothing draining; quarantined as the records
/// say. `legacy` and every engine a plugin manifest declares (no library is opened); the slot's
/// engine. Empty when the config cannot be read.
fn offline_generations(
    home: &PincerHome,
    active: &[QuarantineRecord],
) -> (Option<String>, Vec<serde_json::Value>) {
    use pincer_host::plugins::catalog::{plugin_roots, Catalog};
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
        .map(|id| {
            serde_json::json!({
                "quarantined": active.iter().any(|r| r.engine_id == id),
                "engineId": id,
                "generation": 1,
                "draining": 0,
                "keptGenerations": 0,
                "keptBytes": 0,
            })
        })
        .collect();
    (Some(config.config.selected_engine().to_owned()), engines)
}
