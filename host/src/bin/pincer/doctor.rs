//! `pincer doctor`: lists plugins (loaded or rejected, and why), engines, and what the slot
//! resolves to; `--fix` repairs what can be repaired first.

use std::path::PathBuf;
use std::process::ExitCode;

use pincer_host::config::PincerHome;
use pincer_host::report::doctor;
use pincer_host::runtime::OpenLibraries;

use crate::common::{fail, open_with};

/// `pincer doctor`'s arguments.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
    /// Repair what can be repaired first (OpenClaw's host-compatibility repair: a selected
    /// engine no configured host can run goes back to legacy) and say what changed.
    #[arg(long)]
    fix: bool,
    /// Open every plugin's library, not only the selected engine's (opening runs the
    /// library's code: its constructors).
    #[arg(long)]
    load: bool,
}

/// Runs `pincer doctor`.
pub fn run(home: PincerHome, args: DoctorArgs) -> ExitCode {
    let DoctorArgs {
        json,
        plugins_dirs,
        fix,
        load,
    } = args;
    if fix {
        let commands = pincer_host::admin::PluginCommands::new(home.clone(), plugins_dirs.clone());
        // With --json on stderr, so that stdout stays one JSON document.
        let say = |line: String| {
            if json {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        };
        match commands.repair_host_compatibility() {
            Ok(outcome) if outcome.messages.is_empty() => {
                say("doctor --fix: nothing to repair".to_owned())
            }
            Ok(outcome) => {
                for message in outcome.messages {
                    say(format!("doctor --fix: {message}"));
                }
            }
            Err(err) => return fail(err, 1),
        }
    }
    let libraries = if load {
        OpenLibraries::All
    } else {
        OpenLibraries::Selected
    };
    let runtime = match open_with(home, plugins_dirs, None, libraries, None) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let report = doctor(&runtime);
    runtime.shutdown();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        print!("{}", report.render_text());
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
