//! What the commands share: failing with an exit code, the runtime a command opens (with the
//! `--engine` and `--config` overrides), what a session argument names, reading a session file
//! with progress, and printing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use pincer_host::compaction::with_configured_services;
use pincer_host::config::{EntryConfig, LoadedConfig, PincerHome};
use pincer_host::runtime::{OpenLibraries, Resolution, Runtime, RuntimeOptions};
use pincer_host::session::{
    AgentId, JsonlStore, SessionFile, SessionKey, SessionStore, SessionSummary, SessionTree,
    Transcript,
};

/// What the commands that run an engine over a conversation take.
#[derive(clap::Args, Debug)]
pub struct EngineRun {
    /// The conversation (JSON array of messages, {"messages": [...]}, or OpenAI chat format).
    #[arg(long, value_name = "FILE")]
    pub conversation: PathBuf,
    /// Use this engine instead of plugins.slots.contextEngine.
    #[arg(long, value_name = "ID")]
    pub engine: Option<String>,
    /// The engine's config as JSON (replaces plugins.entries.<id>.config).
    #[arg(long, value_name = "JSON")]
    pub config: Option<String>,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    pub plugins_dirs: Vec<PathBuf>,
}

/// Says `message` on stderr as `pincer: …` and exits with `code`.
pub fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("pincer: {message}");
    ExitCode::from(code)
}

/// What the commands that run an engine over a conversation share: the `--config` JSON, the
/// conversation file, and a runtime with the `--engine` and `--config` overrides applied.
pub fn prepare(home: PincerHome, run: EngineRun) -> Result<(Runtime, Transcript), ExitCode> {
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

pub type Overrides = (Option<String>, Option<serde_json::Value>);

/// The runtime of a command: only the selected engine's library is opened.
pub fn open(
    home: PincerHome,
    plugins_dirs: Vec<PathBuf>,
    overrides: Option<Overrides>,
) -> Result<Runtime, ExitCode> {
    open_with(home, plugins_dirs, overrides, OpenLibraries::Selected, None)
}

/// As [`open`], opening `libraries`, with `llm` as the model engines' `llmComplete` reaches
/// (else the config's `model.llmComplete`, else none).
pub fn open_with(
    home: PincerHome,
    plugins_dirs: Vec<PathBuf>,
    overrides: Option<Overrides>,
    libraries: OpenLibraries,
    llm: Option<Arc<dyn pincer_host::model::ModelProvider>>,
) -> Result<Runtime, ExitCode> {
    // Before any library opens: what in-process engines print goes, capped, to the log.
    if let Err(err) = pincer_host::operator::stdio::keep_host_output_apart() {
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
pub fn print_resolution(r: &Resolution) {
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

/// The session store of `home`.
pub fn store(home: &PincerHome) -> JsonlStore {
    JsonlStore::new(home.root().join("agents"))
}

/// A session argument's file (see [`session_arg`]).
pub fn resolve_session(
    home: &PincerHome,
    agent: &AgentId,
    reference: &str,
) -> Result<PathBuf, ExitCode> {
    session_arg(home, agent, reference).map(|s| s.session_file)
}

/// A session argument: the path of a session file (checked: its first record is a session
/// header; any other file is refused, exit 2, and left as it is), else a session key, else a
/// session id of `agent`.
pub fn session_arg(
    home: &PincerHome,
    agent: &AgentId,
    reference: &str,
) -> Result<SessionSummary, ExitCode> {
    session_ref(home, agent, reference).map_err(|message| fail(message, 2))
}

/// [`session_arg`], failing with what was wrong.
pub fn session_ref(
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

/// Reads the session file `path`, shown as work on a terminal when it takes more than a second
/// (not with `--json`).
pub fn read_session(
    path: &Path,
    json: bool,
) -> Result<SessionTree, pincer_host::session::SessionReadError> {
    let _working = crate::progress::Working::start(
        format!("reading session {}{}", path.display(), file_size_note(path)),
        crate::progress::drawable(json),
    );
    SessionTree::read(path)
}

/// ` (1.0 GiB)`: the size of `path`, when known.
pub fn file_size_note(path: &Path) -> String {
    std::fs::metadata(path)
        .map(|m| format!(" ({})", pincer_host::session::human_bytes(m.len())))
        .unwrap_or_default()
}

/// Says on stderr which lines of `path` were skipped as longer than `sessions.maxLineBytes`.
pub fn warn_long_lines(path: &Path, tree: &SessionTree) {
    for long in &tree.long_lines {
        eprintln!("pincer: warning: {}: {long}", path.display());
    }
}

/// Prints `value` as pretty JSON.
pub fn print_pretty(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("report serializes")
    );
}

/// The session store of `runtime`'s home.
pub fn store_of(runtime: &Runtime) -> JsonlStore {
    store(runtime.home())
}
