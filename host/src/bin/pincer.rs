//! The `pincer` command-line interface: a thin front over `pincer_host`.
//!
//! Exit codes: 0 success; 1 the operation failed (e.g. the selected engine does not resolve);
//! 2 bad usage or unreadable input.

#![allow(rustdoc::invalid_html_tags)] // clap help text names `plugins.entries.<id>`

// The host's own output goes through descriptors in-process engines do not hold
// (`pincer_host::operator::stdio`): these shadow the standard macros in this binary and its
// modules, declared below.
macro_rules! print {
    ($($arg:tt)*) => { pincer_host::operator::stdio::print(format_args!($($arg)*)) };
}
macro_rules! println {
    () => { print!("\n") };
    ($($arg:tt)*) => { pincer_host::operator::stdio::print(format_args!("{}\n", format_args!($($arg)*))) };
}
#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => { pincer_host::operator::stdio::eprint(format_args!($($arg)*)) };
}
macro_rules! eprintln {
    () => { eprint!("\n") };
    ($($arg:tt)*) => { pincer_host::operator::stdio::eprint(format_args!("{}\n", format_args!($($arg)*))) };
}

#[path = "pincer/assemble.rs"]
mod assemble;
#[path = "pincer/check_engine.rs"]
mod check_engine;
#[path = "pincer/common.rs"]
mod common;
#[path = "pincer/compact.rs"]
mod compact;
#[path = "pincer/doctor.rs"]
mod doctor;
#[path = "pincer/estimate.rs"]
mod estimate;
#[path = "pincer/health.rs"]
mod health;
#[path = "pincer/plugins.rs"]
mod plugins;
#[path = "pincer/progress.rs"]
mod progress;
#[path = "pincer/run.rs"]
mod run;
#[cfg(unix)]
#[path = "pincer/sandbox_try.rs"]
mod sandbox_try;
#[path = "pincer/serve.rs"]
mod serve;
#[path = "pincer/sessions.rs"]
mod sessions;
#[path = "pincer/tool.rs"]
mod tool;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pincer_host::config::{LoadedConfig, PincerHome};

/// Native context-engine plugins for agent hosts.
#[derive(Parser, Debug)]
#[command(name = "pincer", version, about)]
struct Cli {
    /// pincer's home folder (default: $PINCER_HOME, else ~/.pincer).
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Log level for pincer and plugin events (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL")]
    log: LogLevel,
    #[command(subcommand)]
    command: Command,
}

/// `--log`: the level of pincer's and plugins' events (`PINCER_LOG`, a filter, overrides it).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// What happens, in outline.
    Info,
    /// What happens, in detail.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The level as a tracing filter directive.
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
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
    Doctor(doctor::DoctorArgs),
    /// Runs the selected engine's `assemble` over a conversation file and shows what it kept.
    Assemble(assemble::AssembleArgs),
    /// Shows quarantined engines (of this and other processes) and the health line; records
    /// of processes that have exited are history, not a warning (unless they record a crash).
    Health(health::HealthArgs),
    /// Calls every method of an engine once over a conversation and reports each outcome.
    CheckEngine(check_engine::CheckEngineArgs),
    /// OpenClaw's token estimate of a conversation: per message, the sum, and
    /// `estimateContextTokens` (the last provider usage plus the estimate after it).
    Estimate(estimate::EstimateArgs),
    /// Compacts a session now: runs the selected engine's `compact` with `force` (for
    /// `legacy`, the built-in compaction: the older part is summarised and a `compaction`
    /// entry appended; nothing already written changes) and prints the result.
    Compact(compact::CompactArgs),
    /// Installs, lists, inspects, enables, disables, selects and removes plugins
    /// (OpenClaw's slot rules: installing or selecting an engine disables the other
    /// context-engine plugins; removing the selected one resets the slot to legacy).
    Plugins {
        #[command(subcommand)]
        command: plugins::PluginsCommand,
    },
    /// Reads OpenClaw session files (JSONL, versions 1–4) as OpenClaw reads them.
    Sessions {
        #[command(subcommand)]
        command: sessions::SessionsCommand,
    },
}

fn init_logging(level: LogLevel) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PINCER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.directive()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(pincer_host::operator::stdio::host_stderr)
        .with_target(false)
        .with_ansi(pincer_host::operator::stdio::host_stderr().is_terminal())
        .try_init();
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
    let _finishing = pincer_host::operator::install_exit_watch();
    let cli = Cli::parse();
    init_logging(cli.log);
    // Ctrl-C or `kill` during an engine call is the operator's stop, not the engine's crash:
    // the crash journal is told, so the next run does not quarantine the engine. (The gateway
    // handles these signals itself and shuts down gracefully.)
    if !matches!(cli.command, Command::Serve(_)) {
        pincer_host::operator::install_stop_handlers();
    }
    let home = PincerHome::resolve(cli.home.as_deref());
    // `sessions.maxLineBytes` bounds every session read and append of this process (a config
    // that does not load is reported by the command that needs it). The file is parsed for it
    // only when it names the key: a large JSON5 config costs a parse, and most set no bound.
    let names_the_bound = pincer_host::config::read_config_text(&home.config_path())
        .is_ok_and(|text| text.is_some_and(|t| t.contains("maxLineBytes")));
    if names_the_bound {
        if let Ok(config) = LoadedConfig::load(&home.config_path()) {
            pincer_host::session::set_max_line_bytes(config.config.sessions.max_line_bytes());
        }
    }
    match cli.command {
        Command::Doctor(args) => doctor::run(home, args),
        Command::Health(args) => health::run(&home, args),
        Command::Serve(args) => serve::run_serve(home, args),
        Command::Client(args) => serve::run_client(args),
        Command::Run(args) => run::run(home, args),
        Command::Tool(args) => tool::run(home, args),
        #[cfg(unix)]
        Command::SandboxTry(args) => sandbox_try::run(args),
        Command::Assemble(args) => assemble::run(home, args),
        Command::Estimate(args) => estimate::run(args),
        Command::Compact(args) => compact::run(home, args),
        Command::Plugins { command } => plugins::run(home, command),
        Command::Sessions { command } => sessions::run(&home, command),
        Command::CheckEngine(args) => check_engine::run(home, args),
    }
}
