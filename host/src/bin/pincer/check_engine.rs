//! `pincer check-engine`: calls every method of an engine once over a conversation and
//! reports each outcome.

use std::process::ExitCode;

use pincer_host::config::PincerHome;
use pincer_host::report::exercise_engine;
use pincer_host::runtime::Runtime;
use pincer_host::session::Transcript;

use crate::common::{fail, prepare, print_resolution, EngineRun};

/// `pincer check-engine`'s arguments.
#[derive(clap::Args, Debug)]
pub struct CheckEngineArgs {
    #[command(flatten)]
    run: EngineRun,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `pincer check-engine`.
pub fn run(home: PincerHome, args: CheckEngineArgs) -> ExitCode {
    match prepare(home, args.run) {
        Ok((runtime, transcript)) => {
            let code = check_engine(&runtime, &transcript, args.json);
            runtime.shutdown();
            code
        }
        Err(code) => code,
    }
}

fn check_engine(runtime: &Runtime, transcript: &Transcript, json: bool) -> ExitCode {
    let resolved = match runtime.resolve() {
        Ok(r) => r,
        Err(err) => return fail(err, 1),
    };
    let outcomes = exercise_engine(&resolved.engine, runtime.quarantine(), transcript);
    let all_ok = resolved.resolution.resolved == resolved.resolution.selected
        && outcomes
            .iter()
            .all(|o| matches!(o.outcome, "ok" | "not-implemented"));
    if json {
        let out = serde_json::json!({
            "contextEngine": resolved.resolution,
            "methods": outcomes,
            "ok": all_ok,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializes")
        );
    } else {
        print_resolution(&resolved.resolution);
        for o in &outcomes {
            let detail = match (&o.error, &o.answered_by) {
                (Some(e), Some(by)) => format!("{} -> answered by {by}", e.message),
                (Some(e), None) => e.message.clone(),
                (None, Some(by)) => format!("answered by {by}"),
                (None, None) => String::new(),
            };
            println!("  {:<22} {:<16} {}", o.method, o.outcome, detail);
        }
        println!(
            "{}",
            if all_ok {
                "all methods answered by the engine"
            } else {
                "some methods failed (see above); the process kept running"
            }
        );
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
