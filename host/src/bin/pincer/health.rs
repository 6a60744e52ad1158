//! `pincer health`: the quarantine records and the health line, offline or from a running
//! gateway (`--socket`), and `--clear` of the records of exited processes.

use std::path::PathBuf;
use std::process::ExitCode;

use pincer_host::config::PincerHome;
use pincer_host::operator::{clear_exited, harvest_crashes, QuarantineRecord};
use pincer_host::report::HealthReport;

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
    let report = HealthReport::offline(home);
    if json {
        print_pretty(&report.to_json());
    } else {
        print!("{}", report.render_text());
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
