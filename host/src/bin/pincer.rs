//! The `pincer` command-line interface: a thin front over `pincer_host`.
//!
//! Exit codes: 0 success; 1 the operation failed (e.g. the selected engine does not resolve);
//! 2 bad usage or unreadable input.

#![allow(rustdoc::invalid_html_tags)] // clap help text names `plugins.entries.<id>`

// The host's own output goes through descriptors in-process engines do not hold
// (`pincer_host::engines::stdio`): these shadow the standard macros in this binary and its
// modules, declared below.
macro_rules! print {
    ($($arg:tt)*) => { pincer_host::engines::stdio::print(format_args!($($arg)*)) };
}
macro_rules! println {
    () => { print!("\n") };
    ($($arg:tt)*) => { pincer_host::engines::stdio::print(format_args!("{}\n", format_args!($($arg)*))) };
}
#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => { pincer_host::engines::stdio::eprint(format_args!($($arg)*)) };
}
macro_rules! eprintln {
    () => { eprint!("\n") };
    ($($arg:tt)*) => { pincer_host::engines::stdio::eprint(format_args!("{}\n", format_args!($($arg)*))) };
}

#[path = "pincer/progress.rs"]
mod progress;
#[path = "pincer/run.rs"]
mod run;
#[cfg(unix)]
#[path = "pincer/sandbox_try.rs"]
mod sandbox_try;
#[path = "pincer/serve.rs"]
mod serve;
#[path = "pincer/tool.rs"]
mod tool;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use pincer_host::compaction::with_configured_services;
use pincer_host::config::{EntryConfig, LoadedConfig, PincerHome};
use pincer_host::engines::request::{CompactRequest, HostInputs, SessionTargetInput};
use pincer_host::harness::engine_not_smaller;
use pincer_host::report::doctor::doctor;
use pincer_host::report::exercise::exercise_engine;
use pincer_host::session::{
    build_session_context, convert_to_llm, AgentId, CounterUpdate, JsonlStore, OnExisting,
    SessionFile, SessionKey, SessionStore, SessionSummary, SessionTree, Transcript,
};
use pincer_host::slot::quarantine::{
    clear_exited, harvest_crashes, health_line, process_alive, split_active, Quarantine,
    QuarantineRecord,
};
use pincer_host::slot::requirements::HostDescriptor;
use pincer_host::slot::runtime::{OpenLibraries, Resolution, Runtime, RuntimeOptions};
use pincer_host::types::HostOperation;
use pincer_plugin_api::abi::latest::{AbortController, EntryId};
use pincer_plugin_api::{BlockKind, Content, Message};

/// Native context-engine plugins for agent hosts.
#[derive(Parser, Debug)]
#[command(name = "pincer", version, about)]
struct Cli {
    /// pincer's home folder (default: $PINCER_HOME, else ~/.pincer).
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Log level for pincer and plugin events (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a conversation: one turn (`--prompt`) or a whole transcript (`--import`) through
    /// the selected engine and a model, compacting as it goes, into a session.
    Run(run::RunArgs),
    /// Calls a tool an engine declared (`callTool`) on a session and prints its JSON result.
    Tool(tool::ToolArgs),
    /// Confines this process as an isolated engine's worker does, then tries what the
    /// sandbox must refuse or allow (for the confinement tests).
    #[cfg(unix)]
    #[command(hide = true)]
    SandboxTry(sandbox_try::SandboxTryArgs),
    /// The gateway: holds the engines and sessions and serves every lifecycle operation per
    /// session over a Unix socket (and optionally loopback HTTP with a bearer token), until
    /// SIGTERM or SIGINT. Protocol: docs/GATEWAY.md.
    Serve(serve::ServeArgs),
    /// Calls a running gateway once and prints its JSON answer.
    Client(serve::ClientArgs),
    /// Lists plugins (loaded or rejected, and why), engines, and what the slot resolves to.
    Doctor {
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
    },
    /// Runs the selected engine's `assemble` over a conversation file and shows what it kept.
    Assemble {
        #[command(flatten)]
        run: EngineRun,
        /// The prompt's token budget.
        #[arg(long, value_name = "TOKENS")]
        token_budget: Option<u64>,
        /// The execution host to check the engine's requirements against
        /// (`pincer-embedded`, or a CLI backend or harness id from pincer.json).
        #[arg(long, value_name = "HOST", default_value = "pincer-embedded")]
        host: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows quarantined engines (of this and other processes) and the health line; records
    /// of processes that have exited are history, not a warning (unless they record a crash).
    Health {
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
    },
    /// Calls every method of an engine once over a conversation and reports each outcome.
    CheckEngine {
        #[command(flatten)]
        run: EngineRun,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// OpenClaw's token estimate of a conversation: per message, the sum, and
    /// `estimateContextTokens` (the last provider usage plus the estimate after it).
    Estimate {
        /// A JSON array of messages, `{"messages": [...]}`, an OpenClaw session file (the
        /// context of its active leaf), or an OpenAI chat transcript.
        file: PathBuf,
        /// Print JSON (the only output form; accepted for symmetry).
        #[arg(long)]
        json: bool,
    },
    /// Compacts a session now: runs the selected engine's `compact` with `force` (for
    /// `legacy`, the built-in compaction: the older part is summarised and a `compaction`
    /// entry appended; nothing already written changes) and prints the result.
    Compact {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// Use this engine instead of plugins.slots.contextEngine.
        #[arg(long, value_name = "ID")]
        engine: Option<String>,
        /// The model's context window in tokens, the budget the engine compacts towards (the
        /// keep-recent budget and reserve scale down to a quarter of a small window each);
        /// 128,000 by default, as `pincer run` and `pincer serve`.
        #[arg(long, value_name = "TOKENS", default_value_t = 128_000)]
        context_window: u64,
        /// What the summary should focus on (`/compact <text>`).
        #[arg(long, value_name = "TEXT")]
        instructions: Option<String>,
        /// Another folder to discover plugins in (repeatable).
        #[arg(long = "plugins-dir", value_name = "DIR")]
        plugins_dirs: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Installs, lists, inspects, enables, disables, selects and removes plugins
    /// (OpenClaw's slot rules: installing or selecting an engine disables the other
    /// context-engine plugins; removing the selected one resets the slot to legacy).
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Reads OpenClaw session files (JSONL, versions 1–4) as OpenClaw reads them.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
}

/// Plugin folders to see besides `$PINCER_HOME/plugins` and `plugins.load.paths`.
#[derive(clap::Args, Debug)]
struct PluginsDirs {
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum PluginsCommand {
    /// Reloads plugin ID in the gateway on --socket: its new build is loaded beside the old
    /// one and serves new calls; calls in flight finish on the old one.
    Reload {
        /// The plugin id.
        id: String,
        /// The gateway's socket.
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
    },
    /// Verifies a plugin folder or a .tar.gz of one (nothing is copied unless every check
    /// passes), copies it into $PINCER_HOME/plugins/<id>/, and selects its engine.
    Install {
        /// The plugin folder or .tar.gz archive.
        path: PathBuf,
        /// Register the folder in plugins.load.paths instead of copying it.
        #[arg(long, short = 'l')]
        link: bool,
        /// Replace an installed plugin of the same id.
        #[arg(long)]
        force: bool,
    },
    /// Lists the plugins (installed, linked, --plugins-dir), from their manifests.
    List {
        #[command(flatten)]
        dirs: PluginsDirs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows one plugin: manifest, status, engines, host compatibility, sha256, quarantine.
    Inspect {
        /// The plugin id.
        id: String,
        #[command(flatten)]
        dirs: PluginsDirs,
        /// Print JSON (`{plugin: {id, name, status, contextEngineIds, ...}}`).
        #[arg(long)]
        json: bool,
    },
    /// Enables a plugin (plugins.entries.<id>.enabled).
    Enable {
        /// The plugin id.
        id: String,
        #[command(flatten)]
        dirs: PluginsDirs,
    },
    /// Disables a plugin; the slot keeps naming its engine and legacy answers meanwhile.
    Disable {
        /// The plugin id.
        id: String,
        #[command(flatten)]
        dirs: PluginsDirs,
    },
    /// Selects a context engine for the slot and disables the other context-engine plugins.
    Select {
        /// The engine id (or `legacy`).
        engine: String,
        #[command(flatten)]
        dirs: PluginsDirs,
    },
    /// Removes an installed plugin (or unlinks a linked one); the slot goes back to legacy
    /// if it selected its engine.
    Remove {
        /// The plugin id.
        id: String,
    },
    /// Builds an engine crate (plain `cargo build --lib`), or takes a built library, and
    /// writes a plugin folder ready for `pincer plugins install`: the library and a
    /// pincer.plugin.json with id, version, apiVersion and contextEngineIds from the
    /// library, library and sha256 filled in, other fields from the crate's own manifest.
    Pack {
        /// The engine's crate folder (default: the current folder).
        #[arg(default_value = ".", conflicts_with = "library")]
        crate_dir: PathBuf,
        /// Pack this built library instead of building a crate.
        #[arg(long, value_name = "FILE")]
        library: Option<PathBuf>,
        /// The manifest to start from (default: pincer.plugin.json beside Cargo.toml or the
        /// library).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// Where to write the plugin folder (default: <crate>/target/pincer-plugins/<id>,
        /// or ./<id> for --library).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Build with --release.
        #[arg(long)]
        release: bool,
    },
}

#[derive(Subcommand, Debug)]
enum SessionsCommand {
    /// Lists an agent's sessions (`sessionKey`, `sessionId`, `sessionFile`).
    List {
        /// The agent.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows a session: its header, entry count, active leaf and damaged lines.
    Show {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
    },
    /// Prints a session's tree: every entry under its parent, the active path marked `*`.
    Tree {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// Print the entries as a JSON array in tree order (id, parentId, type, depth,
        /// active, leaf).
        #[arg(long)]
        json: bool,
    },
    /// Prints the context a leaf of a session sees: OpenClaw's `{messages, thinkingLevel,
    /// model}` (`--format openclaw`), or the array `convertToLlm` gives (`--format llm`).
    Context {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// The leaf entry (default: the session's active leaf).
        #[arg(long, value_name = "ENTRY")]
        leaf: Option<String>,
        /// `openclaw` or `llm`.
        #[arg(long, value_name = "FORMAT", default_value = "openclaw")]
        format: ContextFormat,
        /// Print JSON (the only output form of this command; accepted for symmetry).
        #[arg(long)]
        json: bool,
    },
    /// Imports an OpenAI chat transcript (a JSON array of messages, or an object with
    /// `messages` or `traj`, as a τ-bench task) as a new session file, and prints its path.
    Import {
        /// The transcript.
        file: PathBuf,
        /// The format of the transcript (only `openai`).
        #[arg(long, value_name = "FORMAT", default_value = "openai")]
        format: String,
        /// Where to write the session (default: `$PINCER_HOME/agents/main/sessions/<id>.jsonl`,
        /// recorded in the index).
        #[arg(long, value_name = "PATH")]
        out: Option<PathBuf>,
        /// The session key to record it under (default: `import:<file name>`); a key that
        /// names a session already is refused unless `--force`.
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
        /// Point a key that names a session already at the imported one (the old file stays;
        /// what was replaced is printed).
        #[arg(long)]
        force: bool,
    },
    /// Prints a session's active path as an OpenAI chat transcript, or the file as it is.
    Export {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// `openai` or `jsonl`.
        #[arg(long, value_name = "FORMAT", default_value = "openai")]
        format: ExportFormat,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ExportFormat {
    /// OpenAI chat messages (a JSON array), the system prompt first.
    Openai,
    /// The session file itself, as JSON lines.
    Jsonl,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ContextFormat {
    /// `{messages, thinkingLevel, model}`.
    Openclaw,
    /// The LLM projection.
    Llm,
}

/// What the commands that run an engine over a conversation take.
#[derive(clap::Args, Debug)]
struct EngineRun {
    /// The conversation (JSON array of messages, {"messages": [...]}, or OpenAI chat format).
    #[arg(long, value_name = "FILE")]
    conversation: PathBuf,
    /// Use this engine instead of plugins.slots.contextEngine.
    #[arg(long, value_name = "ID")]
    engine: Option<String>,
    /// The engine's config as JSON (replaces plugins.entries.<id>.config).
    #[arg(long, value_name = "JSON")]
    config: Option<String>,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PINCER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(pincer_host::engines::stdio::host_stderr)
        .with_target(false)
        .with_ansi(pincer_host::engines::stdio::host_stderr().is_terminal())
        .try_init();
}

fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("pincer: {message}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    // `pincer engine-worker`: the worker process of an isolated engine, started by a host from
    // its own executable with its sockets in place (not for people: no help, no config, no
    // logging of its own). Otherwise this process can now start workers from itself.
    pincer_host::isolation::serve_worker_if_requested();
    // A closed pipe (`pincer … | head`) ends the process quietly, as it ends `cat`, instead of
    // a panic on the next print.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // How the process exits is watched from here on, before any library opens: a library's
    // `exit()` outside any call, or a crash in its exit code, is remembered (the crash
    // journal); the guard says "finishing" when `main` returns.
    let _finishing = pincer_host::engines::crash_journal::install_exit_watch();
    let cli = Cli::parse();
    init_logging(&cli.log);
    // Ctrl-C or `kill` during an engine call is the operator's stop, not the engine's crash:
    // the crash journal is told, so the next run does not quarantine the engine. (The gateway
    // handles these signals itself and shuts down gracefully.)
    if !matches!(cli.command, Command::Serve(_)) {
        pincer_host::engines::crash_journal::install_stop_handlers();
    }
    let home = PincerHome::resolve(cli.home.as_deref());
    // `sessions.maxLineBytes` bounds every session read and append of this process (a config
    // that does not load is reported by the command that needs it). The file is parsed for it
    // only when it names the key: a large JSON5 config costs a parse, and most set no bound.
    let names_the_bound = pincer_host::config::read_config_text(&home.config_path())
        .is_ok_and(|text| text.is_some_and(|t| t.contains("maxLineBytes")));
    if names_the_bound {
        if let Ok(config) = LoadedConfig::load(&home.config_path()) {
            pincer_host::session::limits::set_max_line_bytes(
                config.config.sessions.max_line_bytes(),
            );
        }
    }
    match cli.command {
        Command::Doctor {
            json,
            plugins_dirs,
            fix,
            load,
        } => {
            if fix {
                let commands = pincer_host::admin::manage::PluginCommands::new(
                    home.clone(),
                    plugins_dirs.clone(),
                );
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
        Command::Health {
            json,
            clear,
            socket,
        } => match (clear, socket) {
            (_, Some(socket)) => serve::call_and_print(&socket, "health", None, None, json),
            (Some(id), None) => health_clear(&home, Some(id.as_str()).filter(|id| !id.is_empty())),
            (None, None) => health(&home, json),
        },
        Command::Serve(args) => serve::run_serve(home, args),
        Command::Client(args) => serve::run_client(args),
        Command::Run(args) => run::run(home, args),
        Command::Tool(args) => tool::run(home, args),
        #[cfg(unix)]
        Command::SandboxTry(args) => sandbox_try::run(args),
        Command::Assemble {
            run,
            token_budget,
            host,
            json,
        } => match prepare(home, run) {
            Ok((runtime, transcript)) => {
                let code = assemble(&runtime, &transcript, token_budget, &host, json);
                runtime.shutdown();
                code
            }
            Err(code) => code,
        },
        Command::Estimate { file, json: _ } => estimate(&file),
        Command::Compact {
            session,
            agent,
            engine,
            context_window,
            instructions,
            plugins_dirs,
            json,
        } => {
            let resolved = match session_arg(&home, &agent, &session) {
                Ok(summary) => summary,
                Err(code) => return code,
            };
            let runtime = match open(home, plugins_dirs, Some((engine, None))) {
                Ok(runtime) => runtime,
                Err(code) => return code,
            };
            let request = CompactCommand {
                agent: &agent,
                session: &resolved,
                context_window: Some(context_window),
                instructions: instructions.as_deref(),
                json,
            };
            let code = compact_command(&runtime, &request);
            runtime.shutdown();
            code
        }
        Command::Plugins { command } => plugins(home, command),
        Command::Sessions {
            command:
                SessionsCommand::Context {
                    session,
                    agent,
                    leaf,
                    format,
                    json,
                },
        } => match resolve_session(&home, &agent, &session) {
            Ok(path) => session_context(&path, leaf.as_deref(), format, json),
            Err(code) => code,
        },
        Command::Sessions {
            command:
                SessionsCommand::Import {
                    file,
                    format,
                    out,
                    key,
                    force,
                },
        } => session_import(&home, &file, &format, out, key, force),
        Command::Sessions {
            command:
                SessionsCommand::Export {
                    session,
                    agent,
                    format,
                },
        } => match resolve_session(&home, &agent, &session) {
            Ok(path) => session_export(&path, format),
            Err(code) => code,
        },
        Command::Sessions {
            command: SessionsCommand::List { agent, json },
        } => session_list(&home, &agent, json),
        Command::Sessions {
            command: SessionsCommand::Show { session, agent },
        } => match resolve_session(&home, &agent, &session) {
            Ok(path) => session_show(&path),
            Err(code) => code,
        },
        Command::Sessions {
            command:
                SessionsCommand::Tree {
                    session,
                    agent,
                    json,
                },
        } => match resolve_session(&home, &agent, &session) {
            Ok(path) => session_tree(&path, json),
            Err(code) => code,
        },
        Command::CheckEngine { run, json } => match prepare(home, run) {
            Ok((runtime, transcript)) => {
                let code = check_engine(&runtime, &transcript, json);
                runtime.shutdown();
                code
            }
            Err(code) => code,
        },
    }
}

/// What the commands that run an engine over a conversation share: the `--config` JSON, the
/// conversation file, and a runtime with the `--engine` and `--config` overrides applied.
fn prepare(home: PincerHome, run: EngineRun) -> Result<(Runtime, Transcript), ExitCode> {
    let EngineRun {
        conversation,
        engine,
        config,
        plugins_dirs,
    } = run;
    let overrides = match config
        .as_deref()
        .map(serde_json::from_str::<serde_json::Value>)
    {
        Some(Ok(value)) => Some(value),
        Some(Err(err)) => return Err(fail(format!("--config is not valid JSON: {err}"), 2)),
        None => None,
    };
    let transcript = Transcript::read(&conversation).map_err(|err| fail(err, 2))?;
    let runtime = open(home, plugins_dirs, Some((engine, overrides)))?;
    Ok((runtime, transcript))
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

type Overrides = (Option<String>, Option<serde_json::Value>);

/// The runtime of a command: only the selected engine's library is opened.
fn open(
    home: PincerHome,
    plugins_dirs: Vec<PathBuf>,
    overrides: Option<Overrides>,
) -> Result<Runtime, ExitCode> {
    open_with(home, plugins_dirs, overrides, OpenLibraries::Selected, None)
}

/// As [`open`], opening `libraries`, with `llm` as the model engines' `llmComplete` reaches
/// (else the config's `model.llmComplete`, else none).
fn open_with(
    home: PincerHome,
    plugins_dirs: Vec<PathBuf>,
    overrides: Option<Overrides>,
    libraries: OpenLibraries,
    llm: Option<Arc<dyn pincer_host::model::ModelProvider>>,
) -> Result<Runtime, ExitCode> {
    // Before any library opens: what in-process engines print goes, capped, to the log.
    if let Err(err) = pincer_host::engines::stdio::keep_host_output_apart() {
        tracing::warn!("engine output is not kept apart from the host's: {err}");
    }
    let mut config = match LoadedConfig::load(&home.config_path()) {
        Ok(config) => config,
        Err(err) => return Err(fail(err, 2)),
    };
    if let Some((engine, entry_config)) = overrides {
        if let Some(engine) = engine {
            config.config.plugins.slots.context_engine = Some(engine);
        }
        if let Some(value) = entry_config {
            let id = config.config.selected_engine().to_owned();
            let entry = config
                .config
                .plugins
                .entries
                .entry(id)
                .or_insert_with(EntryConfig::default);
            entry.config = Some(value);
        }
    }
    let mut options = RuntimeOptions::new(home);
    options.extra_plugin_dirs = plugins_dirs;
    options.open_libraries = libraries;
    // The runtime's compaction (what `legacy.compact` and delegating engines reach): the
    // built-in one, over the session files, with the summariser the config names (offline by
    // default); and the model behind engines' `llmComplete`.
    let options = match with_configured_services(options, &config.config, llm) {
        Ok(options) => options,
        Err(err) => return Err(fail(err, 2)),
    };
    Ok(Runtime::with_config(options, config))
}

/// One line: which engine was selected and which answers, and why they differ.
fn print_resolution(r: &Resolution) {
    let reason = r
        .reason
        .as_deref()
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    println!(
        "context engine: selected {} -> {}{reason}",
        r.selected, r.resolved
    );
}

fn preview(message: &Message) -> String {
    let mut parts = Vec::new();
    if let Some(id) = message.tool_result_id() {
        parts.push(format!("[toolResult id={id}]"));
    }
    if let Some(summary) = message.summary() {
        parts.push(summary.to_owned());
    }
    match message.content() {
        Content::None => {}
        Content::Text(text) => parts.push(text.to_owned()),
        Content::Blocks(blocks) => {
            for block in blocks {
                parts.push(match block.kind() {
                    BlockKind::Text => block.as_text().unwrap_or_default().to_owned(),
                    BlockKind::Thinking => "[thinking]".to_owned(),
                    BlockKind::ToolCall => block
                        .as_tool_call()
                        .map(|call| format!("[toolCall {} id={}]", call.name, call.id))
                        .unwrap_or_default(),
                    BlockKind::Image => "[image]".to_owned(),
                    BlockKind::Other => format!("[{}]", block.type_name()),
                });
            }
        }
    }
    let text = parts.join(" ").replace('\n', " ");
    if text.chars().count() > 90 {
        format!("{}…", text.chars().take(89).collect::<String>())
    } else {
        text
    }
}

fn estimate(path: &Path) -> ExitCode {
    let transcript = match Transcript::read(path) {
        Ok(t) => t,
        Err(err) => return fail(err, 2),
    };
    let messages = transcript.messages();
    let per_message: Vec<u64> = messages
        .iter()
        .map(pincer_plugin_api::tokens::estimate_message_tokens)
        .collect();
    let context = pincer_plugin_api::tokens::estimate_context_tokens(messages);
    let out = serde_json::json!({
        "perMessage": per_message,
        "sum": per_message.iter().sum::<u64>(),
        "estimateContextTokens": {
            "tokens": context.tokens,
            "usageTokens": context.usage_tokens,
            "trailingTokens": context.trailing_tokens,
            "lastUsageIndex": context.last_usage_index,
        },
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serializes")
    );
    ExitCode::SUCCESS
}

fn store(home: &PincerHome) -> JsonlStore {
    JsonlStore::new(home.root().join("agents"))
}

/// A session argument's file (see [`session_arg`]).
fn resolve_session(
    home: &PincerHome,
    agent: &AgentId,
    reference: &str,
) -> Result<PathBuf, ExitCode> {
    session_arg(home, agent, reference).map(|s| s.session_file)
}

/// A session argument: the path of a session file (checked: its first record is a session
/// header; any other file is refused, exit 2, and left as it is), else a session key, else a
/// session id of `agent`.
fn session_arg(
    home: &PincerHome,
    agent: &AgentId,
    reference: &str,
) -> Result<SessionSummary, ExitCode> {
    session_ref(home, agent, reference).map_err(|message| fail(message, 2))
}

/// [`session_arg`], failing with what was wrong.
fn session_ref(
    home: &PincerHome,
    agent: &AgentId,
    reference: &str,
) -> Result<SessionSummary, String> {
    let path = Path::new(reference);
    if path.is_dir() {
        return Err(format!(
            "{reference} is a directory: name a session file (.jsonl), key or id"
        ));
    }
    let key = SessionKey::parse_for(reference, agent);
    if path.is_file() {
        return match SessionFile::check(path) {
            Ok(file) => Ok(store(home).for_file(agent, &file)),
            Err(err) => {
                // A file of the working folder may share its name with a key the store holds.
                match key.as_ref().map(|key| store(home).find(key)) {
                    Ok(Ok(Some(summary))) => Ok(summary),
                    _ => Err(err.to_string()),
                }
            }
        };
    }
    let key =
        key.map_err(|err| format!("no session {reference:?}: there is no such file, and {err}"))?;
    store(home).resolve(&key).map_err(|err| err.to_string())
}

fn session_list(home: &PincerHome, agent: &AgentId, json: bool) -> ExitCode {
    let sessions = match store(home).list(agent) {
        Ok(s) => s,
        Err(err) => return fail(err, 1),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&sessions).expect("serializes")
        );
    } else if sessions.is_empty() {
        println!(
            "no sessions for agent \"{agent}\" in {}",
            store(home).sessions_dir(agent).display()
        );
    } else {
        for s in &sessions {
            println!(
                "{:<28} {}  {}",
                s.session_key.as_deref().unwrap_or("-"),
                s.session_id,
                s.session_file.display()
            );
        }
    }
    ExitCode::SUCCESS
}

/// Reads the session file `path`, shown as work on a terminal when it takes more than a second
/// (not with `--json`).
fn read_session(
    path: &Path,
    json: bool,
) -> Result<SessionTree, pincer_host::session::SessionReadError> {
    let _working = progress::Working::start(
        format!("reading session {}{}", path.display(), file_size_note(path)),
        progress::drawable(json),
    );
    SessionTree::read(path)
}

/// ` (1.0 GiB)`: the size of `path`, when known.
fn file_size_note(path: &Path) -> String {
    std::fs::metadata(path)
        .map(|m| format!(" ({})", pincer_host::session::limits::human_bytes(m.len())))
        .unwrap_or_default()
}

/// Says on stderr which lines of `path` were skipped as longer than `sessions.maxLineBytes`.
fn warn_long_lines(path: &Path, tree: &SessionTree) {
    for long in &tree.long_lines {
        eprintln!("pincer: warning: {}: {long}", path.display());
    }
}

fn session_show(path: &Path) -> ExitCode {
    let tree = match read_session(path, false) {
        Ok(t) => t,
        Err(err) => return fail(err, 2),
    };
    warn_long_lines(path, &tree);
    let out = serde_json::json!({
        "sessionFile": path,
        "header": tree.header,
        "entries": tree.entries.len(),
        "opaqueRecords": tree.opaque.len(),
        "skippedLines": tree.skipped_lines,
        "longLinesSkipped": tree.long_lines,
        "leafId": tree.leaf,
        "contextMessages": build_session_context(&tree, None).messages.len(),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serializes")
    );
    ExitCode::SUCCESS
}

fn session_tree(path: &Path, json: bool) -> ExitCode {
    let tree = match read_session(path, json) {
        Ok(t) => t,
        Err(err) => return fail(err, 2),
    };
    warn_long_lines(path, &tree);
    let active: std::collections::HashSet<&str> = tree.path(None).iter().map(|e| e.id()).collect();
    // Children by the parent each entry resolves to (the last of equal ids), in file order.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); tree.entries.len()];
    let mut roots = Vec::new();
    for at in 0..tree.entries.len() {
        match tree.parent_position(at) {
            Some(parent) => children[parent].push(at),
            None => roots.push(at),
        }
    }
    // Depth first from the roots; entries only a cycle reaches start walks of their own. Each
    // entry is listed once. The text is indented only where the history branches, as
    // `git log --graph` draws it: an entry's first child continues its column, each later
    // child (a branch) starts one column further in.
    let mut seen = vec![false; tree.entries.len()];
    let mut rows = Vec::with_capacity(tree.entries.len());
    for start in roots.into_iter().chain(0..tree.entries.len()) {
        let mut stack = vec![(start, 0usize, 0usize)];
        while let Some((at, depth, indent)) = stack.pop() {
            if std::mem::replace(&mut seen[at], true) {
                continue;
            }
            rows.push((at, depth, indent));
            stack.extend(
                children[at]
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(nth, &kid)| (kid, depth + 1, indent + usize::from(nth > 0))),
            );
        }
    }
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|&(at, depth, _)| {
                let entry = &tree.entries[at];
                serde_json::json!({
                    "id": entry.id(),
                    "parentId": entry.parent_id(),
                    "type": entry.entry_type.as_str(),
                    "depth": depth,
                    "active": active.contains(entry.id()),
                    "leaf": tree.leaf.as_deref() == Some(entry.id()),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializes")
        );
        return ExitCode::SUCCESS;
    }
    for (at, _, indent) in rows {
        let entry = &tree.entries[at];
        let mark = if active.contains(entry.id()) {
            "*"
        } else {
            " "
        };
        println!(
            "{mark} {}{} {}",
            "  ".repeat(indent),
            entry.id(),
            entry.entry_type.as_str()
        );
    }
    ExitCode::SUCCESS
}

/// What a transcript file must hold, to finish "expected …".
const TRANSCRIPT_SHAPE: &str = "a JSON array of chat messages (OpenAI chat `{\"role\", \"content\"}` or OpenClaw messages), or an object holding one under \"messages\" or \"traj\" (one τ-bench task)";

/// The messages of a transcript file: a JSON array of chat messages, or an object holding one
/// under `messages` or `traj` (a τ-bench task). Anything else — a list of things that are not
/// messages (a τ-bench task list), no message but a system prompt — is refused with what was
/// expected.
fn read_chat_list(file: &Path) -> Result<Vec<serde_json::Value>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|err| format!("cannot read {}: {err}", file.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|err| format!("{} is not JSON: {err}", file.display()))?;
    let not_a_transcript = |what: String| {
        format!(
            "{} is not a transcript: {what}; expected {TRANSCRIPT_SHAPE}",
            file.display()
        )
    };
    let list = match value {
        serde_json::Value::Array(list) => list,
        serde_json::Value::Object(mut map) => {
            match map.remove("messages").or_else(|| map.remove("traj")) {
                Some(serde_json::Value::Array(list)) => list,
                _ => {
                    return Err(not_a_transcript(
                        "an object without a \"messages\" or \"traj\" array".into(),
                    ))
                }
            }
        }
        other => return Err(not_a_transcript(format!("it holds {}", json_kind(&other)))),
    };
    for (index, item) in list.iter().enumerate() {
        match item.get("role") {
            Some(serde_json::Value::String(_)) => {}
            _ => {
                let what = match item {
                    serde_json::Value::Object(map) if map.contains_key("traj") => format!(
                        "item {index} is a τ-bench task, not a message (import one task: an object with \"traj\")"
                    ),
                    serde_json::Value::Object(map) => format!(
                        "item {index} is not a message: it has no string \"role\" (its keys: {})",
                        map.keys().take(6).map(String::as_str).collect::<Vec<_>>().join(", ")
                    ),
                    other => format!("item {index} is {}, not a message object", json_kind(other)),
                };
                return Err(not_a_transcript(what));
            }
        }
    }
    if !list.iter().any(|m| m["role"] != "system") {
        return Err(not_a_transcript(
            "it holds no message but a system prompt (nothing to import)".into(),
        ));
    }
    Ok(list)
}

/// A JSON value's kind, in words.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The key an import is recorded under by default: `import:<file stem>`, with every character
/// a key cannot hold made `-`.
fn default_import_key(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-+@=#!~".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("import:{stem}")
}

fn session_import(
    home: &PincerHome,
    file: &Path,
    format: &str,
    out: Option<PathBuf>,
    key: Option<String>,
    force: bool,
) -> ExitCode {
    if format != "openai" {
        return fail(
            format!("unknown --format {format:?}: only \"openai\" can be imported"),
            2,
        );
    }
    let transcript = match read_chat_list(file) {
        Ok(list) => list,
        Err(message) => return fail(message, 2),
    };
    let key = key.unwrap_or_else(|| default_import_key(file));
    let key = match SessionKey::parse(&key) {
        Ok(key) => key,
        Err(err) => return fail(err, 2),
    };
    let durability = match LoadedConfig::load(&home.config_path()) {
        Ok(config) => config.config.sessions.durability,
        Err(err) => return fail(err, 2),
    };
    // A key that names a session is not pointed at a new one without `--force`: refused
    // before anything is written.
    let existing = if force {
        OnExisting::Replace
    } else {
        OnExisting::Refuse
    };
    match store(home).find(&key) {
        Ok(Some(old)) if !force => {
            return fail(
                pincer_host::session::StoreError::KeyExists {
                    agent: key.agent().to_string(),
                    key: key.to_string(),
                    session_id: old.session_id,
                    file: old.session_file,
                },
                2,
            )
        }
        Ok(_) => {}
        Err(err) => return fail(err, 1),
    }
    let session_id = pincer_host::session::writer::new_session_id();
    let path = out.unwrap_or_else(|| {
        store(home)
            .sessions_dir(key.agent())
            .join(format!("{session_id}.jsonl"))
    });
    if path.exists() {
        return fail(
            format!(
                "{} exists: an import writes a new session file; choose another --out",
                path.display()
            ),
            2,
        );
    }
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    // Written in a folder of its own beside the target, then renamed into place: a failed
    // import leaves no partial session file behind.
    let Some(name) = path.file_name() else {
        return fail(format!("--out {} names no file", path.display()), 2);
    };
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staging = parent.join(format!(".import-{session_id}"));
    let staged = staging.join(name);
    let discard = || {
        let _ = pincer_host::disk::remove_file(&staged);
        let _ = pincer_host::disk::remove_dir(&staging);
    };
    let working = progress::Working::start(
        format!(
            "importing {} ({} messages)",
            file.display(),
            transcript.len()
        ),
        progress::drawable(false),
    );
    let imported =
        pincer_host::session::openai::import_openai(&transcript, &staged, &cwd, durability);
    drop(working);
    match imported {
        Ok(writer) => drop(writer),
        Err(err) => {
            discard();
            // A message the mapping cannot take is bad input (exit 2); a write that failed is 1.
            let code = match err {
                pincer_host::session::openai::ImportError::Message { .. } => 2,
                _ => 1,
            };
            return fail(err, code);
        }
    }
    if let Err(err) = pincer_host::disk::rename(&staged, &path) {
        discard();
        return fail(
            format!(
                "cannot move the imported session to {}: {err}",
                path.display()
            ),
            1,
        );
    }
    discard();
    let id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or(session_id);
    match store(home).register(&key, &id, &path, existing) {
        Ok(created) => {
            if let Some(old) = created.replaced {
                eprintln!(
                    "replaced: key \"{key}\" named session {} ({}), which is kept",
                    old.session_id,
                    old.session_file.display()
                );
            }
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = pincer_host::disk::remove_file(&path);
            fail(err, 1)
        }
    }
}

fn session_export(path: &Path, format: ExportFormat) -> ExitCode {
    match format {
        // Copied as it is, through a buffer: however long its lines, the file is never held.
        ExportFormat::Jsonl => match std::fs::File::open(path)
            .and_then(|mut file| std::io::copy(&mut file, &mut std::io::stdout().lock()))
        {
            Ok(_) => ExitCode::SUCCESS,
            Err(err) => fail(format!("cannot read {}: {err}", path.display()), 2),
        },
        ExportFormat::Openai => match read_session(path, false) {
            Ok(tree) => {
                let out = pincer_host::session::openai::export_openai(&tree);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out).expect("serializes")
                );
                ExitCode::SUCCESS
            }
            Err(err) => fail(err, 2),
        },
    }
}

fn session_context(path: &Path, leaf: Option<&str>, format: ContextFormat, json: bool) -> ExitCode {
    let tree = match read_session(path, json) {
        Ok(tree) => tree,
        Err(err) => return fail(err, 2),
    };
    warn_long_lines(path, &tree);
    if let Some(leaf) = leaf {
        if tree.get(leaf).is_none() {
            return fail(
                format!(
                    "{} has no entry \"{leaf}\": give the id of one of its entries, or no --leaf for the active leaf",
                    path.display()
                ),
                2,
            );
        }
    }
    let context = build_session_context(&tree, leaf);
    let out = match format {
        ContextFormat::Openclaw => serde_json::to_value(&context).expect("serializes"),
        ContextFormat::Llm => serde_json::Value::Array(convert_to_llm(&context.messages)),
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serializes")
    );
    ExitCode::SUCCESS
}

fn print_pretty(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("report serializes")
    );
}

fn plugins(home: PincerHome, command: PluginsCommand) -> ExitCode {
    use pincer_host::admin::manage::{InstallMode, ManageError, PluginCommands};
    use pincer_host::plugins::catalog::{plugin_roots, Catalog};
    use pincer_host::report::plugins::{inspect, list};
    let read = |extra: &[PathBuf]| -> Result<(LoadedConfig, Catalog), ExitCode> {
        let config = LoadedConfig::load(&home.config_path()).map_err(|err| fail(err, 2))?;
        let catalog = Catalog::read(&plugin_roots(&home, &config.config, extra));
        Ok((config, catalog))
    };
    let outcome = match command {
        PluginsCommand::Reload { id, socket } => {
            return serve::call_and_print(
                &socket,
                "reload",
                None,
                Some(serde_json::json!({ "pluginId": id })),
                true,
            )
        }
        PluginsCommand::List { dirs, json } => {
            let (config, catalog) = match read(&dirs.plugins_dirs) {
                Ok(it) => it,
                Err(code) => return code,
            };
            let report = list(&catalog, &config.config);
            if json {
                print_pretty(&report);
            } else {
                print!("{}", report.render_text());
            }
            return ExitCode::SUCCESS;
        }
        PluginsCommand::Inspect { id, dirs, json } => {
            let (config, catalog) = match read(&dirs.plugins_dirs) {
                Ok(it) => it,
                Err(code) => return code,
            };
            let Some(entry) = catalog.plugin(&id) else {
                let known: Vec<String> = catalog.entries.iter().map(|e| e.id()).collect();
                return fail(ManageError::UnknownPlugin { id, known }, 2);
            };
            let report = inspect(entry, &config.config, &home);
            if json {
                print_pretty(&report);
            } else {
                print!("{}", report.render_text());
            }
            return ExitCode::SUCCESS;
        }
        PluginsCommand::Install { path, link, force } => {
            let mode = if link {
                InstallMode::Link
            } else {
                InstallMode::Copy { replace: force }
            };
            PluginCommands::new(home, Vec::new()).install(&path, mode)
        }
        PluginsCommand::Enable { id, dirs } => {
            PluginCommands::new(home, dirs.plugins_dirs).enable(&id)
        }
        PluginsCommand::Disable { id, dirs } => {
            PluginCommands::new(home, dirs.plugins_dirs).disable(&id)
        }
        PluginsCommand::Select { engine, dirs } => {
            PluginCommands::new(home, dirs.plugins_dirs).select(&engine)
        }
        PluginsCommand::Remove { id } => PluginCommands::new(home, Vec::new()).remove(&id),
        PluginsCommand::Pack {
            crate_dir,
            library,
            manifest,
            out,
            release,
        } => {
            use pincer_host::plugins::pack::{pack, PackSource};
            let source = match library {
                Some(path) => PackSource::Library(path),
                None => PackSource::Crate {
                    dir: crate_dir,
                    release,
                },
            };
            return match pack(&source, manifest.as_deref(), out.as_deref()) {
                Ok(packed) => {
                    println!(
                        "Packed plugin \"{}\" {} (engines: {}) into {}.",
                        packed.manifest.id,
                        packed.manifest.version,
                        packed.manifest.context_engine_ids.join(", "),
                        packed.dir.display()
                    );
                    println!(
                        "Install it with: pincer plugins install {}",
                        packed.dir.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(err) => fail(err, 1),
            };
        }
    };
    match outcome {
        Ok(outcome) => {
            for message in outcome.messages {
                println!("{message}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            let code = match &err {
                ManageError::Config(_)
                | ManageError::UnknownPlugin { .. }
                | ManageError::UnknownEngine { .. } => 2,
                _ => 1,
            };
            fail(err, code)
        }
    }
}

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

fn assemble(
    runtime: &Runtime,
    transcript: &Transcript,
    token_budget: Option<u64>,
    host: &str,
    json: bool,
) -> ExitCode {
    let resolved = match runtime.resolve() {
        Ok(r) => r,
        Err(err) => return fail(err, 1),
    };
    let Some(host) = HostDescriptor::find(&runtime.config().config, host) else {
        return fail(
            format!(
                "unknown host \"{host}\": use pincer-embedded or a CLI backend or harness declared under hosts in pincer.json"
            ),
            2,
        );
    };
    // Host requirements are checked before the run starts, and fail closed.
    if let Err(err) = resolved.engine.check_host(HostOperation::AgentRun, &host) {
        return fail(err, 1);
    }
    let inputs = HostInputs {
        runtime_settings: Some(runtime.runtime_settings(&resolved.resolution, &host, token_budget)),
        ..HostInputs::default()
    };
    let view = match transcript.assemble_with(&resolved.engine, "cli-session", token_budget, inputs)
    {
        Ok(v) => v,
        Err(err) => return fail(err, 1),
    };
    let messages = view.messages();
    let origins = view.origins();
    let quarantine = runtime.quarantine().list();
    if json {
        let kept: Vec<serde_json::Value> = messages
            .iter()
            .zip(&origins)
            .map(|(m, origin)| serde_json::json!({"index": origin, "message": m}))
            .collect();
        let out = serde_json::json!({
            "contextEngine": resolved.resolution,
            "answeredBy": view.answer.answered_by,
            "failure": view.answer.failure,
            "inputMessages": transcript.messages().len(),
            "keptMessages": kept,
            "estimatedTokens": view.result.estimated_tokens.unwrap_or(0),
            "systemPromptAddition": view.result.system_prompt_addition.as_ref().map(|s| s.to_string()).into_option(),
            "quarantine": quarantine,
            "health": health_line(&quarantine),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializes")
        );
        return ExitCode::SUCCESS;
    }
    let r = &resolved.resolution;
    print_resolution(r);
    if let Some(failure) = &view.answer.failure {
        println!("engine \"{}\" failed: {}", r.selected, failure.message);
        println!("-> quarantined; answered by {}", view.answer.answered_by);
    } else {
        println!("answered by: {}", view.answer.answered_by);
    }
    println!(
        "kept {} of {} messages, estimated {} tokens{}",
        messages.len(),
        transcript.messages().len(),
        view.result.estimated_tokens.unwrap_or(0),
        if view.result.estimated_tokens.unwrap_or(0) == 0 {
            " (0: the engine leaves estimation to the caller)"
        } else {
            ""
        }
    );
    for (message, origin) in messages.iter().zip(&origins) {
        let index = origin
            .map(|i| format!("#{i:<3}"))
            .unwrap_or_else(|| "new ".to_owned());
        println!("  {index} {:<10} {}", message.role_name(), preview(message));
    }
    if let Some(line) = health_line(&quarantine) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

/// What `pincer compact` was asked.
struct CompactCommand<'a> {
    agent: &'a AgentId,
    session: &'a SessionSummary,
    context_window: Option<u64>,
    instructions: Option<&'a str>,
    json: bool,
}

/// `pincer compact`: the selected engine's guarded `compact`, forced, over a session.
fn compact_command(runtime: &Runtime, command: &CompactCommand<'_>) -> ExitCode {
    let session = command.session;
    let path = &session.session_file;
    let working = progress::Working::start(
        format!(
            "compacting session {}{}",
            path.display(),
            file_size_note(path)
        ),
        progress::drawable(command.json),
    );
    let tree = match SessionTree::read(path) {
        Ok(tree) => tree,
        Err(err) => return fail(err, 2),
    };
    working.suspend(|| warn_long_lines(path, &tree));
    let context = build_session_context(&tree, None);
    let resolved = match runtime.resolve() {
        Ok(r) => r,
        Err(err) => return fail(err, 1),
    };
    let Some(host) = HostDescriptor::find(&runtime.config().config, "pincer-embedded") else {
        return fail("the embedded host descriptor is missing", 1);
    };
    // A manual compaction: checked against the engine's `manual-compact` requirements first.
    if let Err(err) = resolved
        .engine
        .check_host(HostOperation::ManualCompact, &host)
    {
        return fail(err, 1);
    }
    let entry_ids: Vec<EntryId> = context.entry_ids.iter().map(EntryId::new).collect();
    let host_inputs = HostInputs {
        session_key: session.session_key.as_deref().map(Arc::from),
        session_target: Some(Arc::new(SessionTargetInput {
            agent_id: Some(Arc::from(command.agent.as_str())),
            session_id: Some(Arc::from(session.session_id.as_str())),
            session_key: session.session_key.as_deref().map(Arc::from),
            ..SessionTargetInput::default()
        })),
        runtime_settings: Some(runtime.runtime_settings(
            &resolved.resolution,
            &host,
            command.context_window,
        )),
        ..HostInputs::default()
    };
    let mut request = CompactRequest::manual(
        Arc::from(session.session_id.as_str()),
        Arc::from(path.display().to_string()),
        Arc::from(context.messages),
        Arc::from(entry_ids),
        host_inputs,
    );
    request.agent_id = Some(Arc::from(command.agent.as_str()));
    request.token_budget = command.context_window;
    request.custom_instructions = command.instructions.map(Arc::from);
    let outcome = resolved
        .engine
        .compact(Arc::new(request), Arc::new(AbortController::new()));
    drop(working);
    let guarded = match outcome {
        Ok(guarded) => guarded,
        Err(err) => {
            if command.json {
                let out = serde_json::json!({
                    "sessionFile": path,
                    "contextEngine": resolved.resolution,
                    "ok": false,
                    "compacted": false,
                    "error": {"code": err.code(), "message": err.to_string()},
                });
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out).expect("serializes")
                );
            }
            return fail(err, 1);
        }
    };
    let result = &guarded.value;
    let details = result.result.as_ref().into_option();
    // An engine's `compacted` whose tokens did not go down is reported as no compaction.
    let not_smaller = details.filter(|_| result.compacted).and_then(|d| {
        engine_not_smaller(
            guarded.answer.answered_by.as_str(),
            d.tokens_before,
            d.tokens_after.into_option(),
        )
    });
    let compacted = result.compacted && not_smaller.is_none();
    if compacted {
        let key = session
            .session_key
            .as_deref()
            .and_then(|key| SessionKey::parse_for(key, command.agent).ok());
        if let Some(key) = key {
            if let Err(err) = store_of(runtime).record(&key, CounterUpdate::Compaction) {
                tracing::warn!(%err, "compactionCount not updated in the session index");
            }
        }
    }
    let reason =
        not_smaller.or_else(|| result.reason.as_ref().map(|r| r.to_string()).into_option());
    if command.json {
        let out = serde_json::json!({
            "sessionFile": path,
            "sessionId": session.session_id,
            "sessionKey": session.session_key,
            "contextEngine": resolved.resolution,
            "answeredBy": guarded.answer.answered_by,
            "ok": result.ok,
            "compacted": compacted,
            "reason": reason,
            "result": details.map(|d| serde_json::json!({
                "summary": d.summary.as_ref().map(|s| s.to_string()).into_option(),
                "firstKeptEntryId": d.first_kept_entry_id.as_ref().map(|s| s.to_string()).into_option(),
                "tokensBefore": d.tokens_before,
                "tokensAfter": d.tokens_after.into_option(),
                "details": d.details_json.as_ref().into_option()
                    .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok()),
            })),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializes")
        );
    } else {
        print_resolution(&resolved.resolution);
        match (compacted, details) {
            (true, Some(d)) => {
                println!(
                    "compacted {}: {} -> {} tokens, {}",
                    path.display(),
                    d.tokens_before,
                    d.tokens_after
                        .map_or_else(|| "?".to_owned(), |t| t.to_string()),
                    d.first_kept_entry_id.as_ref().into_option().map_or_else(
                        // An engine that keeps its own history (lossless) cuts no entry.
                        || "nothing cut from the session file (the engine keeps its own summaries)"
                            .to_owned(),
                        |id| format!("kept from entry {id}"),
                    ),
                );
                if let Some(summary) = d.summary.as_ref().into_option() {
                    println!("summary:\n{summary}");
                }
            }
            _ => println!(
                "not compacted: {}",
                reason.as_deref().unwrap_or("the engine gave no reason")
            ),
        }
    }
    if result.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn store_of(runtime: &Runtime) -> JsonlStore {
    store(runtime.home())
}
