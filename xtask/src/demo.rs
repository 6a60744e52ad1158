//! `cargo xtask demo`: a guided tour of the real `pincer` binary against freshly staged plugins.
//!
//! Each step prints a heading and the command line, then streams the binary's own output. The
//! tour ends with OpenClaw's quick start in pincer's words: install, list, assemble, remove.
//! The steps are data ([`STEPS`]): to extend the demo, add a row.
//! A step that exits non-zero is reported and the tour goes on; the demo fails at the end if any step failed.
//! The demo home (`<target>/demo-home`) is recreated empty on every run, so the tour always starts the same;
//! so is `<target>/demo-home-isolated`, where the crashing engine runs in a worker process.

use std::ffi::OsString;
use std::fs;
use std::io::Write as _;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context as _, Result};

use crate::build_plugins;
use crate::workspace::{describe_status, shell_line, Workspace};

/// One step of the tour.
struct Step {
    /// Printed as the step's heading.
    title: &'static str,
    /// The arguments given to `pincer`.
    ///
    /// `{home}`, `{plugins}`, `{variants}` and `{repo}` stand for the demo home, the staged plugins,
    /// the staged variants and the repository root.
    args: &'static [&'static str],
    /// What the step shows.
    expect: Expect,
}

/// The outcome a step is meant to show.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Exit status 0.
    Success,
    /// A refusal: exit status 1.
    Refusal,
    /// The process killed by a signal (an engine that crashes the host, once).
    Crash,
}

/// The demo home's `pincer.json`: a CLI backend to refuse engines on, and a short compaction
/// safety timeout so a hung compaction is visibly cut off.
const DEMO_CONFIG: &str = r#"{
  // written by `cargo xtask demo`
  hosts: { cliBackends: { "claude-cli": {} } },
  agents: { defaults: { compaction: { timeoutSeconds: 2 } } },
}
"#;

const CONVERSATION: &str = "{repo}/examples/airline-conversation.json";

/// `assemble` through an engine that writes through a null pointer: shown twice, the second
/// run remembering the first one's crash.
const SEGFAULTING_ASSEMBLE: &[&str] = &[
    "--home",
    "{home}",
    "assemble",
    "--plugins-dir",
    "{variants}/hostile",
    "--engine",
    "hostile",
    "--config",
    r#"{"assemble":"segv"}"#,
    "--conversation",
    CONVERSATION,
];

/// The same `assemble`, in a home where `hostile` runs isolated (`isolation: "process"`).
const ISOLATED_SEGFAULTING_ASSEMBLE: &[&str] = &[
    "--home",
    "{isolated-home}",
    "assemble",
    "--plugins-dir",
    "{variants}/hostile",
    "--engine",
    "hostile",
    "--config",
    r#"{"assemble":"segv"}"#,
    "--conversation",
    CONVERSATION,
];

/// The isolated demo home's `pincer.json`.
const ISOLATED_CONFIG: &str = r#"{
  // written by `cargo xtask demo`: hostile runs in a worker process of its own
  plugins: { entries: { hostile: { isolation: "process" } } },
}
"#;

const STEPS: &[Step] = &[
    Step {
        title: "doctor: every plugin verified from its files, none opened (no engine of theirs is selected: their code does not run)",
        args: &["--home", "{home}", "doctor", "--plugins-dir", "{plugins}"],
        expect: Expect::Success,
    },
    Step {
        title: "a conversation run turn by turn through sliding-window in a 1024-token window: the replayed model answers, the built-in compaction keeps it inside the window",
        args: &[
            "--home", "{home}", "run", "--plugins-dir", "{plugins}", "--engine", "sliding-window",
            "--context-window", "1024", "--session", "demo:airline", "--import", CONVERSATION,
        ],
        expect: Expect::Success,
    },
    Step {
        title: "the session afterwards: every message kept, the compaction entries appended",
        args: &["--home", "{home}", "sessions", "tree", "demo:airline"],
        expect: Expect::Success,
    },
    Step {
        title: "the same conversation on lossless in a 512-token window: every message kept in SQLite, older spans summarised into a DAG",
        args: &[
            "--home", "{home}", "run", "--plugins-dir", "{plugins}", "--engine", "lossless",
            "--context-window", "512", "--session", "demo:lossless", "--import", CONVERSATION,
        ],
        expect: Expect::Success,
    },
    Step {
        title: "lossless's doctor view of its store (pincer tool … lcm_stats)",
        args: &[
            "--home", "{home}", "tool", "--plugins-dir", "{plugins}", "--engine", "lossless",
            "--session", "demo:lossless", "lcm_stats",
        ],
        expect: Expect::Success,
    },
    Step {
        title: "the first summary node: what it covers, its parents and children (lcm_describe)",
        args: &[
            "--home", "{home}", "tool", "--plugins-dir", "{plugins}", "--engine", "lossless",
            "--session", "demo:lossless", "lcm_describe", "--args", r#"{"id":"s1"}"#,
        ],
        expect: Expect::Success,
    },
    Step {
        title: "the summary expanded back to its original messages (lcm_expand)",
        args: &[
            "--home", "{home}", "tool", "--plugins-dir", "{plugins}", "--engine", "lossless",
            "--session", "demo:lossless", "lcm_expand", "--args", r#"{"id":"s1"}"#,
        ],
        expect: Expect::Success,
    },
    Step {
        title: "assemble with sliding-window under a 400-token budget",
        args: &[
            "--home", "{home}", "assemble", "--plugins-dir", "{plugins}", "--engine",
            "sliding-window", "--config", r#"{"tokenBudget":400}"#, "--conversation", CONVERSATION,
        ],
        expect: Expect::Success,
    },
    Step {
        title: "a panicking engine: the panic is caught, the engine quarantined, legacy answers",
        args: &[
            "--home", "{home}", "assemble", "--plugins-dir", "{plugins}", "--engine", "faulty",
            "--config", r#"{"assemble":"panic"}"#, "--conversation", CONVERSATION,
        ],
        expect: Expect::Success,
    },
    Step {
        title: "health, from another process: the quarantine mirror; a record of a process that has exited is history, not a warning",
        args: &["--home", "{home}", "health"],
        expect: Expect::Success,
    },
    Step {
        title: "host requirements: an engine that needs assemble-before-prompt is refused on a CLI backend",
        args: &[
            "--home", "{home}", "assemble", "--plugins-dir", "{plugins}", "--engine", "faulty",
            "--config",
            r#"{"hostRequirements":{"agent-run":{"requiredCapabilities":["assemble-before-prompt"],"unsupportedMessage":"Run it on the embedded runner."}}}"#,
            "--host", "claude-cli", "--conversation", CONVERSATION,
        ],
        expect: Expect::Refusal,
    },
    Step {
        title: "check-engine: every method once; compact hangs and is cut off at its 2 s safety timeout",
        args: &[
            "--home", "{home}", "check-engine", "--plugins-dir", "{plugins}", "--engine", "faulty",
            "--config", r#"{"compact":"hang","ingest":"error","hangMs":3600000}"#,
            "--conversation", CONVERSATION,
        ],
        expect: Expect::Refusal,
    },
    Step {
        title: "doctor --load: libraries that must never run (panic = abort, API 2.0, another ABI layout) are refused before any call",
        args: &["--home", "{home}", "doctor", "--load", "--plugins-dir", "{variants}"],
        expect: Expect::Success,
    },
    Step {
        title: "an impostor: a plugin whose library also exports sliding-window's engine id; the id is refused for both plugins, loudly",
        args: &[
            "--home", "{home}", "doctor", "--plugins-dir", "{plugins}", "--plugins-dir",
            "{variants}/impostor",
        ],
        expect: Expect::Refusal,
    },
    Step {
        title: "an engine that writes through a null pointer in assemble: the process dies (once), its crash journal keeps the mark of the call in flight",
        args: SEGFAULTING_ASSEMBLE,
        expect: Expect::Crash,
    },
    Step {
        title: "the same command again: the crash is remembered, the engine stays quarantined, legacy answers",
        args: SEGFAULTING_ASSEMBLE,
        expect: Expect::Success,
    },
    Step {
        title: "health: the crash record stays active until `pincer health --clear` or until the library changes",
        args: &["--home", "{home}", "health"],
        expect: Expect::Success,
    },
    Step {
        title: "the same engine isolated (plugins.entries.hostile.isolation: \"process\"): its worker dies of the null write, the host lives, the reason is named, legacy answers",
        args: ISOLATED_SEGFAULTING_ASSEMBLE,
        expect: Expect::Success,
    },
    Step {
        title: "doctor: which protections this machine gives an isolated engine's worker",
        args: &["--home", "{isolated-home}", "doctor", "--plugins-dir", "{variants}/hostile"],
        expect: Expect::Success,
    },
    Step {
        title: "plugins install: verified before anything is copied, copied into the home, the slot bound (pincer.json edited in place)",
        args: &["--home", "{home}", "plugins", "install", "{plugins}/sliding-window"],
        expect: Expect::Success,
    },
    Step {
        title: "plugins list: from the manifests, without loading",
        args: &["--home", "{home}", "plugins", "list"],
        expect: Expect::Success,
    },
    Step {
        title: "assemble on the installed, selected engine",
        args: &["--home", "{home}", "assemble", "--conversation", CONVERSATION],
        expect: Expect::Success,
    },
    Step {
        title: "plugins remove: the slot goes back to legacy",
        args: &["--home", "{home}", "plugins", "remove", "sliding-window"],
        expect: Expect::Success,
    },
];

pub(crate) fn run(ws: &Workspace) -> Result<ExitCode> {
    let staged = build_plugins::run(ws, build_plugins::Config { release: false })?;

    let pincer = ws.build_pincer()?;

    let home = ws.target_dir.join("demo-home");
    if home.exists() {
        fs::remove_dir_all(&home).with_context(|| format!("cannot remove {}", home.display()))?;
    }
    fs::create_dir_all(&home).with_context(|| format!("cannot create {}", home.display()))?;
    fs::write(home.join("pincer.json"), DEMO_CONFIG)
        .with_context(|| format!("cannot write {}", home.join("pincer.json").display()))?;

    let isolated_home = ws.target_dir.join("demo-home-isolated");
    if isolated_home.exists() {
        fs::remove_dir_all(&isolated_home)
            .with_context(|| format!("cannot remove {}", isolated_home.display()))?;
    }
    fs::create_dir_all(&isolated_home)
        .with_context(|| format!("cannot create {}", isolated_home.display()))?;
    fs::write(isolated_home.join("pincer.json"), ISOLATED_CONFIG).with_context(|| {
        format!(
            "cannot write {}",
            isolated_home.join("pincer.json").display()
        )
    })?;

    let placeholders = [
        ("{home}", home.to_string_lossy().into_owned()),
        (
            "{isolated-home}",
            isolated_home.to_string_lossy().into_owned(),
        ),
        (
            "{plugins}",
            staged.plugins_dir.to_string_lossy().into_owned(),
        ),
        (
            "{variants}",
            staged.variants_dir.to_string_lossy().into_owned(),
        ),
        ("{repo}", ws.root.to_string_lossy().into_owned()),
    ];

    let mut outcomes = Vec::new();
    for (index, step) in STEPS.iter().enumerate() {
        let number = index + 1;
        let args: Vec<OsString> = step
            .args
            .iter()
            .map(|arg| OsString::from(expand(arg, &placeholders)))
            .collect();
        println!("\n== {number}. {} ==", step.title);
        println!("$ {}", shell_line("pincer", &args));
        std::io::stdout().flush()?;
        let status = Command::new(&pincer)
            .args(&args)
            .current_dir(&ws.root)
            .status()
            .with_context(|| format!("cannot run {}", pincer.display()))?;
        let expected = match step.expect {
            Expect::Success => status.success(),
            Expect::Refusal => status.success() || status.code() == Some(1),
            Expect::Crash => status.code().is_none(),
        };
        let outcome = if expected {
            None
        } else {
            let failure = describe_status(status);
            println!("step {number} {failure}");
            Some(failure)
        };
        outcomes.push((number, step.title, outcome));
    }

    let number = outcomes.len() + 1;
    let title = "the gateway: pincer serve under traffic while faulty is rebuilt and hot-reloaded twice, then a broken build refused";
    println!("\n== {number}. {title} ==");
    let outcome = crate::demo_gateway::run(&pincer, &staged.plugins_dir, &ws.target_dir)
        .err()
        .map(|err| {
            println!("step {number} failed: {err:#}");
            format!("failed: {err:#}")
        });
    outcomes.push((number, title, outcome));

    println!("\n== summary ==");
    for (number, title, outcome) in &outcomes {
        println!("{number}. {title}: {}", outcome.as_deref().unwrap_or("ok"));
    }
    let failed = outcomes
        .iter()
        .filter(|(_, _, outcome)| outcome.is_some())
        .count();
    if failed > 0 {
        bail!("{failed} of {} demo steps failed", outcomes.len());
    }
    Ok(ExitCode::SUCCESS)
}

fn expand(arg: &str, placeholders: &[(&str, String)]) -> String {
    placeholders
        .iter()
        .fold(arg.to_owned(), |arg, (name, value)| {
            arg.replace(name, value)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_and_json_is_left_alone() {
        let placeholders = [("{repo}", "/r".to_owned()), ("{home}", "/h".to_owned())];
        assert_eq!(
            expand("{repo}/examples/x.json", &placeholders),
            "/r/examples/x.json"
        );
        assert_eq!(
            expand(r#"{"tokenBudget":400}"#, &placeholders),
            r#"{"tokenBudget":400}"#
        );
    }

    #[test]
    fn steps_use_only_known_placeholders() {
        for step in STEPS {
            for arg in step.args {
                let rest = expand(
                    arg,
                    &[
                        ("{home}", String::new()),
                        ("{isolated-home}", String::new()),
                        ("{plugins}", String::new()),
                        ("{variants}", String::new()),
                        ("{repo}", String::new()),
                    ],
                );
                assert!(
                    !rest.contains("{h")
                        && !rest.contains("{i")
                        && !rest.contains("{p")
                        && !rest.contains("{v")
                        && !rest.contains("{r"),
                    "{arg}"
                );
            }
        }
    }
}
