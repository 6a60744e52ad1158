//! `$PINCER_HOME/pincer.json`: where pincer lives on disk and what the operator configured.
//!
//! The file is JSON5 (comments, trailing commas). A missing file means defaults. A malformed
//! one is reported with file, line and column; keys pincer does not know are collected by
//! name (`plugins.slots.contextEngin`) so a typo never passes silently — `doctor` shows them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::types::Method;

pub mod edit;

/// Where pincer keeps its files: config, installed plugins, the library cache, state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PincerHome {
    root: PathBuf,
}

impl PincerHome {
    /// The home at `root`.
    pub fn new(root: PathBuf) -> Self {
        PincerHome { root }
    }

    /// `--home`, else `$PINCER_HOME`, else `~/.pincer`.
    pub fn resolve(explicit: Option<&Path>) -> Self {
        if let Some(path) = explicit {
            return PincerHome::new(path.to_owned());
        }
        if let Some(env) = std::env::var_os("PINCER_HOME").filter(|v| !v.is_empty()) {
            return PincerHome::new(PathBuf::from(env));
        }
        let base = std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        PincerHome::new(base.join(".pincer"))
    }

    /// The home folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `pincer.json`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("pincer.json")
    }

    /// Installed plugins.
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// Private content-addressed library copies.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache").join("libs")
    }

    /// Process state (the quarantine mirror).
    pub fn state_dir(&self) -> PathBuf {
        self.root.join("state")
    }
}

/// What to do when the configured engine cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FallbackPolicy {
    /// Quarantine it and answer with `legacy` (OpenClaw's behaviour).
    #[default]
    Legacy,
    /// Fail the operation instead.
    Strict,
}

/// Why the operator's configuration keeps a plugin from being used. Each is a choice, not a
/// failure: an engine of such a plugin resolves to `legacy` silently (docs/CONTRACT.md §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DisabledBy {
    /// `plugins.enabled` is `false`.
    PluginsOff,
    /// The id is in `plugins.deny`.
    Denied,
    /// `plugins.allow` is set and does not name it.
    NotAllowed,
    /// `plugins.entries.<id>.enabled` is `false`.
    Entry,
}

impl DisabledBy {
    /// Why plugin `plugin_id` is off, naming its own key (`plugins.entries.faulty.enabled`).
    pub fn for_plugin(self, plugin_id: &str) -> String {
        match self {
            DisabledBy::Entry => {
                format!("disabled by plugins.entries.{plugin_id}.enabled (it is false)")
            }
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for DisabledBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DisabledBy::PluginsOff => "plugins are disabled (plugins.enabled is false)",
            DisabledBy::Denied => "denied by plugins.deny",
            DisabledBy::NotAllowed => "not in plugins.allow",
            DisabledBy::Entry => "disabled by plugins.entries.<id>.enabled",
        })
    }
}

/// The slot value that names no plugin: the slot resolves to `legacy`.
pub const SLOT_NONE: &str = "none";

/// `plugins.slots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Slots {
    /// The selected context engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_engine: Option<String>,
}

/// `plugins.entries.<id>`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryConfig {
    /// `false` disables the plugin (its engine resolves to `legacy`, the slot is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The engine's config, validated against the manifest's `configSchema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// Load the plugin although its files are writable by group or others, or owned by
    /// another user (the operator accepts the risk; `doctor` shows the override).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_insecure_permissions: bool,
    /// Close an old build of the plugin's library after a hot reload, once nothing from it is
    /// alive (engine instances, rollback handles), instead of keeping it mapped for the life
    /// of the process (the default). For development: the engine must join every thread it
    /// started in `dispose`. Applies to libraries loaded while it is set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unload_on_reload: bool,
    /// The library's sha256 as `pincer plugins install` verified it: a library changed on disk
    /// afterwards (manifest and all) is refused before it is opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Where the plugin's engines run: `"in-process"` (the default) or `"process"`, a worker
    /// process of their own, so that a crash costs one call, not the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Limits of an isolated engine's worker (`memoryBytes`, `openFiles`, `stackBytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<serde_json::Value>,
    /// An isolated engine's sandbox (default on): `false` turns it off, an object keeps it on
    /// with the operator's grants (`readPaths`, `env`, `allowWeak`); see [`SandboxConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxConfig>,
    /// How often an isolated engine whose worker died is restarted (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// The backoff before its first restart, doubled for each next one (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_backoff_ms: Option<u64>,
}

/// `plugins.entries.<id>.sandbox`: `true` / `false`, or the sandbox with the operator's grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum SandboxConfig {
    /// `true` (the default) or `false` (no seccomp, no Landlock, no `no_new_privs`: limits only).
    Switch(bool),
    /// On, with grants.
    Grants(SandboxGrants),
}

/// What the operator grants an isolated engine beyond what every worker may read
/// (`docs/ISOLATION.md`, "Confinement").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxGrants {
    /// Absolute paths the engine may also read (a folder: everything beneath it). Read only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_paths: Vec<PathBuf>,
    /// Environment variables the worker starts with, beside the host's own few (a worker
    /// inherits nothing from the host's environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Start the worker although this kernel cannot confine its reads (no Landlock): a weaker
    /// sandbox, which `doctor` shows. Default `false`: such a worker refuses to start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_weak: bool,
}

impl<'de> Deserialize<'de> for SandboxConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // Not `untagged`: a misspelled grant must be named, not "no variant matched".
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::Bool(on) => Ok(SandboxConfig::Switch(on)),
            value @ serde_json::Value::Object(_) => serde_json::from_value(value)
                .map(SandboxConfig::Grants)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "sandbox must be true, false or an object of grants (readPaths, env, allowWeak), found {other}"
            ))),
        }
    }
}

impl SandboxConfig {
    /// Whether the sandbox is on.
    pub fn enabled(&self) -> bool {
        !matches!(self, SandboxConfig::Switch(false))
    }

    /// The grants (none for `true` / `false`).
    pub fn grants(&self) -> SandboxGrants {
        match self {
            SandboxConfig::Switch(_) => SandboxGrants::default(),
            SandboxConfig::Grants(g) => g.clone(),
        }
    }
}

/// Where a plugin's engines run (`plugins.entries.<id>.isolation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// In the host's process (the default): the fastest calls, but a crash of the engine is a
    /// crash of the host.
    #[default]
    InProcess,
    /// In a worker process of its own: a crash, an `exit`, a stack overflow or a runaway
    /// allocation costs the call in flight, not the host.
    Process,
}

/// The environment variable that sets the isolation of every plugin whose entry does not
/// name one (`process` runs a whole test suite isolated).
pub const ISOLATION_ENV: &str = "PINCER_ISOLATION";

impl Isolation {
    /// The config's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Isolation::InProcess => "in-process",
            Isolation::Process => "process",
        }
    }

    /// The default for plugins whose entry names none: `$PINCER_ISOLATION`, else in-process.
    pub fn default_from_env() -> Self {
        match std::env::var(ISOLATION_ENV).as_deref() {
            Ok("process") => Isolation::Process,
            _ => Isolation::InProcess,
        }
    }
}

/// `plugins.load`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadConfig {
    /// Extra folders to discover plugins in.
    #[serde(default)]
    pub paths: Vec<PathBuf>,
}

/// `plugins.callTimeoutsMs`: per-call deadlines of engine methods other than `compact`
/// (pincer's addition). Keys are contract method names; `default` covers the rest except
/// `dispose`.
///
/// `default` does not cover `dispose` on purpose: `dispose` runs at shutdown and reload, not
/// on a turn, and is bounded like OpenClaw's agent cleanup (10 s, or
/// `PINCER_CLEANUP_TIMEOUT_MS`); a `default` raised for slow `assemble` calls would otherwise
/// make every shutdown wait that long for a stuck engine. Set `callTimeoutsMs.dispose` to
/// change it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallTimeouts(pub BTreeMap<String, u64>);

/// The default deadline of an engine call other than `compact` and `dispose`.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The default cleanup deadline of `dispose` (OpenClaw's agent cleanup timeout).
pub const DEFAULT_DISPOSE_TIMEOUT: Duration = Duration::from_secs(10);

impl CallTimeouts {
    /// The deadline for `method`: its own entry, else `default`, else 60 s (10 s for
    /// `dispose`, which `PINCER_CLEANUP_TIMEOUT_MS` may also set).
    pub fn for_method(&self, method: Method) -> Duration {
        if let Some(ms) = self.0.get(method.as_str()) {
            return Duration::from_millis(*ms);
        }
        if method == Method::Dispose {
            return std::env::var("PINCER_CLEANUP_TIMEOUT_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_DISPOSE_TIMEOUT);
        }
        self.0
            .get("default")
            .map(|ms| Duration::from_millis(*ms))
            .unwrap_or(DEFAULT_CALL_TIMEOUT)
    }
}

impl CompactionConfig {
    /// The compaction safety timeout: `timeoutSeconds` floored, when positive.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_seconds
            .filter(|s| s.is_finite() && *s >= 1.0)
            .map(|s| Duration::from_secs(s.floor() as u64))
    }
}

/// `plugins`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginsConfig {
    /// `false` turns every plugin off (the slot resolves to `legacy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// When set, only these plugin ids may be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// These plugin ids may not be used.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Slot selection.
    #[serde(default)]
    pub slots: Slots,
    /// Per-plugin entries.
    #[serde(default)]
    pub entries: BTreeMap<String, EntryConfig>,
    /// Discovery paths.
    #[serde(default)]
    pub load: LoadConfig,
    /// `legacy` (default) or `strict`.
    #[serde(default)]
    pub context_engine_fallback: FallbackPolicy,
    /// Per-call deadlines in milliseconds.
    #[serde(default)]
    pub call_timeouts_ms: CallTimeouts,
    /// Caps on what an engine may return (pincer's addition).
    #[serde(default)]
    pub result_limits: ResultLimits,
    /// Probe each library not seen before in a throwaway worker process before this process
    /// opens it (default `true`): its constructors and checks run there, and a library whose
    /// probe crashes is refused for in-process use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_libraries: Option<bool>,
}

/// `plugins.resultLimits`: what an engine's `info`, `assemble` and `callTool` results may hold
/// before the host refuses it as a contract violation (a result: the engine is quarantined; an
/// `info`: the engine is not created). Engines are written by strangers: without caps, one
/// result can grow the host by gigabytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResultLimits {
    /// Most new messages (summaries, notes) one result may add. Default 1024.
    pub max_new_messages: u64,
    /// Most characters all new messages of one result may hold, counted as the token
    /// estimate counts them (text, arguments, images). Default 8 Mi.
    pub max_new_message_chars: u64,
    /// Longest `systemPromptAddition`, in bytes. Default 256 KiB.
    pub max_system_prompt_addition_bytes: u64,
    /// Longest `callTool` result content, in bytes. Default 8 MiB.
    pub max_tool_result_bytes: u64,
    /// Most tools one engine's `info` may offer. Default 128.
    pub max_tools: u64,
    /// Longest JSON Schema of one tool's arguments, in bytes. Default 64 KiB.
    pub max_tool_schema_bytes: u64,
    /// Longest tool name, in bytes. Default 64 (OpenAI's limit for function names).
    pub max_tool_name_bytes: u64,
    /// Longest tool description (and host-requirement `unsupportedMessage`), in bytes.
    /// Default 4 KiB.
    pub max_tool_description_bytes: u64,
    /// Longest engine `info.id`, `info.name` and every other short string of `info`
    /// (capabilities, host parameters), in bytes. Default 256.
    pub max_engine_name_bytes: u64,
    /// Longest `info.version`, in bytes. Default 64.
    pub max_engine_version_bytes: u64,
}

impl Default for ResultLimits {
    fn default() -> Self {
        ResultLimits {
            max_new_messages: 1024,
            max_new_message_chars: 8 << 20,
            max_system_prompt_addition_bytes: 256 << 10,
            max_tool_result_bytes: 8 << 20,
            max_tools: 128,
            max_tool_schema_bytes: 64 << 10,
            max_tool_name_bytes: 64,
            max_tool_description_bytes: 4 << 10,
            max_engine_name_bytes: 256,
            max_engine_version_bytes: 64,
        }
    }
}

/// `agents.defaults.compaction`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionConfig {
    /// Compaction safety timeout in seconds (default 180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    /// Floor of the reserve kept free for the answer (default 20000; 0 disables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_tokens_floor: Option<u64>,
    /// Recent tokens kept verbatim by compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_recent_tokens: Option<u64>,
    /// Who writes compaction summaries: `"extractive"` (the default: offline, deterministic)
    /// or `"openai:NAME"` (model NAME on the OpenAI-compatible server of `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `agents.defaults`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentDefaults {
    /// Compaction settings.
    #[serde(default)]
    pub compaction: CompactionConfig,
}

/// `agents`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentsConfig {
    /// Defaults for every agent.
    #[serde(default)]
    pub defaults: AgentDefaults,
}

/// A harness declared in config, with its own capability list.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HarnessConfig {
    /// Capabilities the harness offers engines.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// A CLI backend declared in config.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CliBackendConfig {
    /// Capabilities; default `bootstrap`, `after-turn`, `maintain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
}

/// `hosts`: the execution hosts this installation runs engines on, besides the embedded runner.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostsConfig {
    /// CLI backends by id.
    #[serde(default)]
    pub cli_backends: BTreeMap<String, CliBackendConfig>,
    /// Agent harnesses by id.
    #[serde(default)]
    pub harnesses: BTreeMap<String, HarnessConfig>,
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// `plugins`.
    #[serde(default)]
    pub plugins: PluginsConfig,
    /// `agents`.
    #[serde(default)]
    pub agents: AgentsConfig,
    /// `hosts`.
    #[serde(default)]
    pub hosts: HostsConfig,
    /// `sessions`.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// `model`: the OpenAI-compatible server `--model openai:NAME` talks to.
    #[serde(default)]
    pub model: ModelConfig,
    /// `gateway`: the limits of `pincer serve`'s connections.
    #[serde(default)]
    pub gateway: GatewayConfig,
}

/// `gateway`: how long `pincer serve` waits for a client and how many it holds at once
/// (docs/GATEWAY.md, "Limits").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayConfig {
    /// Seconds a client has to send a request's headers once its first byte arrived.
    #[serde(default = "GatewayConfig::default_header_timeout")]
    pub header_timeout_seconds: f64,
    /// Seconds a client has to send a request's body once its headers arrived.
    #[serde(default = "GatewayConfig::default_body_timeout")]
    pub body_timeout_seconds: f64,
    /// Seconds a connection may stay open with no request on it (before the first, or between
    /// kept-alive requests).
    #[serde(default = "GatewayConfig::default_idle_timeout")]
    pub idle_timeout_seconds: f64,
    /// Connections served at once, over the socket and HTTP together; one more is answered
    /// `503 too_many_connections` and closed.
    #[serde(default = "GatewayConfig::default_max_connections")]
    pub max_connections: u64,
}

impl GatewayConfig {
    fn default_header_timeout() -> f64 {
        30.0
    }

    fn default_body_timeout() -> f64 {
        60.0
    }

    fn default_idle_timeout() -> f64 {
        60.0
    }

    fn default_max_connections() -> u64 {
        512
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            header_timeout_seconds: Self::default_header_timeout(),
            body_timeout_seconds: Self::default_body_timeout(),
            idle_timeout_seconds: Self::default_idle_timeout(),
            max_connections: Self::default_max_connections(),
        }
    }
}

/// `model`: where the OpenAI-compatible chat-completions server is.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelConfig {
    /// The API root (`https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable holding the API key (none: no key is sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The model engines' `llmComplete` reaches (`runtime-llm-complete`), as `openai:NAME`;
    /// unset: engines are told no model is there (`pincer run --model openai:NAME` serves its
    /// own model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_complete: Option<String>,
}

/// `sessions`: how session files are written.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionsConfig {
    /// `entry` (default: fsync each append), `turn` (fsync at the end of a turn) or `none`.
    #[serde(default)]
    pub durability: crate::types::Durability,
    /// The longest session line read or appended, in bytes (default
    /// [`DEFAULT_MAX_LINE_BYTES`]): a longer line in a file is skipped and reported, a longer
    /// append refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_line_bytes: Option<u64>,
}

/// `sessions.maxLineBytes` when unset: 64 MiB.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 64 << 20;

/// The smallest `sessions.maxLineBytes` accepted (a header line alone takes a few hundred bytes).
pub const MIN_MAX_LINE_BYTES: u64 = 1024;

impl SessionsConfig {
    /// `sessions.maxLineBytes`, or its default.
    pub fn max_line_bytes(&self) -> u64 {
        self.max_line_bytes.unwrap_or(DEFAULT_MAX_LINE_BYTES)
    }
}

/// The largest `pincer.json` read: 1 MiB. A larger file is refused before it is parsed.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

impl Config {
    /// The selected context engine: `plugins.slots.contextEngine` trimmed, else `legacy`.
    /// `"none"` (OpenClaw's "no plugin in this slot") is `legacy` too (docs/CONTRACT.md §13).
    pub fn selected_engine(&self) -> &str {
        self.plugins
            .slots
            .context_engine
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != SLOT_NONE)
            .unwrap_or(crate::types::LEGACY_ENGINE_ID)
    }

    /// Whether the slot was set explicitly to an engine (not empty, not `"none"`).
    pub fn engine_is_configured(&self) -> bool {
        self.plugins
            .slots
            .context_engine
            .as_deref()
            .map(str::trim)
            .is_some_and(|s| !s.is_empty() && s != SLOT_NONE)
    }

    /// Where plugin `plugin_id`'s engines run: its entry's `isolation`, else
    /// [`Isolation::default_from_env`].
    pub fn isolation_of(&self, plugin_id: &str) -> Isolation {
        self.plugins
            .entries
            .get(plugin_id)
            .and_then(|e| e.isolation)
            .unwrap_or_else(Isolation::default_from_env)
    }

    /// Why plugin `plugin_id` is off by configuration, or `None` when it may be used.
    pub fn plugin_disabled_by(&self, plugin_id: &str) -> Option<DisabledBy> {
        let plugins = &self.plugins;
        if plugins.enabled == Some(false) {
            return Some(DisabledBy::PluginsOff);
        }
        if plugins.deny.iter().any(|d| d == plugin_id) {
            return Some(DisabledBy::Denied);
        }
        if let Some(allow) = &plugins.allow {
            if !allow.iter().any(|a| a == plugin_id) {
                return Some(DisabledBy::NotAllowed);
            }
        }
        if plugins.entries.get(plugin_id).and_then(|e| e.enabled) == Some(false) {
            return Some(DisabledBy::Entry);
        }
        None
    }

    /// The config of plugin `id` (`{}` when none).
    pub fn entry_config(&self, id: &str) -> serde_json::Value {
        self.plugins
            .entries
            .get(id)
            .and_then(|e| e.config.clone())
            .unwrap_or_else(|| serde_json::json!({}))
    }
}

/// A configuration read from disk.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The configuration.
    pub config: Config,
    /// Keys that pincer does not know, as dotted paths, sorted.
    pub unknown_keys: Vec<String>,
    /// The file it came from (which may not exist).
    pub path: PathBuf,
    /// Whether the file existed.
    pub exists: bool,
}

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value is well-formed but unusable.
    #[error("{}: `{key}` {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The dotted key.
        key: String,
        /// What is wrong with its value.
        message: String,
    },
    /// The file could not be read.
    #[error("cannot read {}: {source} (check the file's permissions)", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CONFIG_BYTES`]: not read.
    #[error(
        "{} is {bytes} bytes, larger than the {MAX_CONFIG_BYTES} bytes (1 MiB) a pincer.json may \
         be: it was not read (a config is a few KiB; move the file aside, or remove what does not \
         belong in it)",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (at least; a file that grows while read may be larger).
        bytes: u64,
    },
    /// The file is not valid JSON5 or has a wrong type somewhere.
    #[error("{}{}: {message} (fix the file, or move it aside to use the defaults)", path.display(), location.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Line and column, when known.
        location: Option<(usize, usize)>,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::Invalid { .. } => "config_invalid",
            ConfigError::Unreadable { .. } => "config_unreadable",
            ConfigError::Malformed { .. } => "config_malformed",
            ConfigError::TooLarge { .. } => "config_too_large",
        }
    }
}

impl LoadedConfig {
    /// Reads `path`; a missing file gives the defaults.
    ///
    /// # Errors
    /// [`ConfigError`] with file, line and column.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        match read_config_text(path)? {
            Some(text) => Self::from_text(path, &text),
            None => Ok(LoadedConfig {
                config: Config::default(),
                unknown_keys: Vec::new(),
                path: path.to_owned(),
                exists: false,
            }),
        }
    }

    /// Parses `text` as the contents of `path` (which is named in errors only).
    ///
    /// # Errors
    /// [`ConfigError::Malformed`] or [`ConfigError::Invalid`].
    pub fn from_text(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let (config, unknown_keys) =
            parse(text).map_err(|(location, message)| ConfigError::Malformed {
                path: path.to_owned(),
                location,
                message,
            })?;
        validate(&config).map_err(|(key, message)| ConfigError::Invalid {
            path: path.to_owned(),
            key,
            message,
        })?;
        Ok(LoadedConfig {
            config,
            unknown_keys,
            path: path.to_owned(),
            exists: true,
        })
    }
}

/// The error for `path` holding bytes that are not UTF-8, with where the first one is.
fn not_utf8(path: &Path, bytes: &[u8]) -> ConfigError {
    let valid = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(err) => err.valid_up_to(),
    };
    let before = String::from_utf8_lossy(&bytes[..valid]);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    ConfigError::Malformed {
        path: path.to_owned(),
        location: Some((line, column)),
        message: format!(
            "the file is not UTF-8 text (byte {valid} is not UTF-8); save it as UTF-8"
        ),
    }
}

/// The text of the config file `path` (`None` when it does not exist), refused unread when it
/// is larger than [`MAX_CONFIG_BYTES`]; at most one byte more than the bound is ever read (a
/// file that grows, or a device, cannot make the read unbounded).
///
/// # Errors
/// [`ConfigError::TooLarge`], [`ConfigError::Unreadable`], or [`ConfigError::Malformed`] for
/// a file that is not UTF-8 (naming the line and column of its first bad byte).
pub fn read_config_text(path: &Path) -> Result<Option<String>, ConfigError> {
    use std::io::Read as _;
    let unreadable = |source| ConfigError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(unreadable(source)),
    };
    let too_large = |bytes| ConfigError::TooLarge {
        path: path.to_owned(),
        bytes,
    };
    let size = file.metadata().map_err(unreadable)?.len();
    if size > MAX_CONFIG_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(text)),
        // Read, but not text: the fix is the file's encoding, not its permissions.
        Err(err) => Err(not_utf8(path, err.as_bytes())),
    }
}

type ParseFailure = (Option<(usize, usize)>, String);

/// Checks the values serde cannot: deadlines must be usable.
fn validate(config: &Config) -> Result<(), (String, String)> {
    for (method, ms) in &config.plugins.call_timeouts_ms.0 {
        if *ms == 0 {
            return Err((
                format!("plugins.callTimeoutsMs.{method}"),
                "must be at least 1 (milliseconds); a zero deadline would time out and quarantine every engine".to_owned(),
            ));
        }
    }
    for (id, entry) in &config.plugins.entries {
        let grants = entry
            .sandbox
            .as_ref()
            .map(SandboxConfig::grants)
            .unwrap_or_default();
        if let Some(path) = grants.read_paths.iter().find(|p| !p.is_absolute()) {
            return Err((
                format!("plugins.entries.{id}.sandbox.readPaths"),
                format!(
                    "{} is not an absolute path: name what the engine may read from the root (/…)",
                    path.display()
                ),
            ));
        }
        if let Some(name) = grants.env.keys().find(|k| {
            k.is_empty() || k.contains(['=', '\0']) || k.as_str() == "PINCER_WORKER_LANES"
        }) {
            return Err((
                format!("plugins.entries.{id}.sandbox.env"),
                format!("{name:?} is not a variable the worker can be given (empty, containing = or NUL, or the host's own PINCER_WORKER_LANES)"),
            ));
        }
        if let Some((name, _)) = grants.env.iter().find(|(_, v)| v.contains('\0')) {
            return Err((
                format!("plugins.entries.{id}.sandbox.env.{name}"),
                "contains a NUL character, which no environment variable can hold".to_owned(),
            ));
        }
    }
    let gateway = &config.gateway;
    for (key, seconds) in [
        ("headerTimeoutSeconds", gateway.header_timeout_seconds),
        ("bodyTimeoutSeconds", gateway.body_timeout_seconds),
        ("idleTimeoutSeconds", gateway.idle_timeout_seconds),
    ] {
        if !seconds.is_finite() || seconds <= 0.0 || seconds > 86_400.0 {
            return Err((
                format!("gateway.{key}"),
                format!("must be a number of seconds above 0 and at most 86400 (found {seconds})"),
            ));
        }
    }
    if gateway.max_connections == 0 {
        return Err((
            "gateway.maxConnections".to_owned(),
            "must be at least 1: a gateway that takes no connection serves nobody".to_owned(),
        ));
    }
    if let Some(bytes) = config.sessions.max_line_bytes {
        if bytes < MIN_MAX_LINE_BYTES {
            return Err((
                "sessions.maxLineBytes".to_owned(),
                format!("must be at least {MIN_MAX_LINE_BYTES} bytes (found {bytes}); the default is {DEFAULT_MAX_LINE_BYTES} (64 MiB)"),
            ));
        }
    }
    if let Some(seconds) = config.agents.defaults.compaction.timeout_seconds {
        if !seconds.is_finite() || seconds < 1.0 {
            return Err((
                "agents.defaults.compaction.timeoutSeconds".to_owned(),
                format!("must be a number of seconds, at least 1 (found {seconds})"),
            ));
        }
    }
    Ok(())
}

/// Parses JSON5 text, collecting unknown keys.
fn parse(text: &str) -> Result<(Config, Vec<String>), ParseFailure> {
    let to_failure = |err: json5::Error| match err {
        json5::Error::Message { msg, location } => (location.map(|l| (l.line, l.column)), msg),
    };
    if text.trim().is_empty() {
        return Ok((Config::default(), Vec::new()));
    }
    let mut unknown = Vec::new();
    // Most files are plain JSON, which is JSON5 too: `serde_json` reads them two orders of
    // magnitude faster than the JSON5 grammar (a 600 KB config took seconds). Anything it
    // refuses (comments, unquoted keys, trailing commas — or a real error) is read as JSON5,
    // whose errors are the ones reported.
    let mut json = serde_json::Deserializer::from_str(text);
    if let Ok(config) = serde_ignored::deserialize(&mut json, |path| {
        unknown.push(path.to_string());
    }) {
        if json.end().is_ok() {
            unknown.sort();
            unknown.dedup();
            return Ok((config, unknown));
        }
    }
    unknown.clear();
    let mut deserializer = json5::Deserializer::from_str(text).map_err(to_failure)?;
    let config: Config = serde_ignored::deserialize(&mut deserializer, |path| {
        unknown.push(path.to_string());
    })
    .map_err(to_failure)?;
    unknown.sort();
    unknown.dedup();
    Ok((config, unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json5_with_comments_and_typos() {
        let (config, unknown) = parse(
            r#"{
            // the engine
            plugins: { slots: { contextEngine: " sliding-window " }, entries: { "sliding-window": { config: { tokenBudget: 4000 } } },
                       deny: [], contextEngineFallbak: "strict", },
            agents: { defaults: { compaction: { timeoutSecond: 5 } } },
        }"#,
        )
        .unwrap();
        assert_eq!(config.selected_engine(), "sliding-window");
        assert_eq!(config.entry_config("sliding-window")["tokenBudget"], 4000);
        assert_eq!(
            unknown,
            [
                "agents.defaults.compaction.timeoutSecond",
                "plugins.contextEngineFallbak"
            ]
        );
    }

    #[test]
    fn unload_on_reload_is_a_per_entry_bool() {
        let (config, unknown) =
            parse(r#"{ plugins: { entries: { faulty: { unloadOnReload: true }, other: {} } } }"#)
                .unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert!(config.plugins.entries["faulty"].unload_on_reload);
        assert!(
            !config.plugins.entries["other"].unload_on_reload,
            "off by default"
        );
        let (_, unknown) =
            parse(r#"{ plugins: { entries: { faulty: { unloadOnReloads: true } } } }"#).unwrap();
        assert_eq!(unknown, ["plugins.entries.faulty.unloadOnReloads"]);
        let (_, message) =
            parse(r#"{ plugins: { entries: { faulty: { unloadOnReload: "yes" } } } }"#)
                .unwrap_err();
        assert!(message.contains("invalid type"), "{message}");
    }

    #[test]
    fn malformed_reports_line_and_column() {
        let (location, message) = parse("{\n  plugins: {\n    slots: [,\n}").unwrap_err();
        assert_eq!(location.map(|l| l.0), Some(3), "{message}");
    }

    #[test]
    fn the_gateway_s_limits_are_read_and_unusable_ones_refused_by_key() {
        let (config, _) =
            parse("{ gateway: { idleTimeoutSeconds: 2.5, maxConnections: 9 } }").unwrap();
        assert_eq!(validate(&config), Ok(()));
        assert_eq!(config.gateway.idle_timeout_seconds, 2.5);
        assert_eq!(config.gateway.max_connections, 9);
        assert_eq!(config.gateway.header_timeout_seconds, 30.0);
        for (text, key) in [
            (
                "{ gateway: { headerTimeoutSeconds: 0 } }",
                "gateway.headerTimeoutSeconds",
            ),
            (
                "{ gateway: { bodyTimeoutSeconds: -1 } }",
                "gateway.bodyTimeoutSeconds",
            ),
            (
                "{ gateway: { idleTimeoutSeconds: 1e9 } }",
                "gateway.idleTimeoutSeconds",
            ),
            (
                "{ gateway: { maxConnections: 0 } }",
                "gateway.maxConnections",
            ),
        ] {
            let (config, _) = parse(text).unwrap();
            assert_eq!(validate(&config).unwrap_err().0, key, "{text}");
        }
    }

    #[test]
    fn unusable_deadlines_are_refused_by_key() {
        let (config, _) = parse("{ plugins: { callTimeoutsMs: { assemble: 0 } } }").unwrap();
        assert_eq!(
            validate(&config).unwrap_err().0,
            "plugins.callTimeoutsMs.assemble"
        );
        let (config, _) =
            parse("{ agents: { defaults: { compaction: { timeoutSeconds: 0.5 } } } }").unwrap();
        assert_eq!(
            validate(&config).unwrap_err().0,
            "agents.defaults.compaction.timeoutSeconds"
        );
        let (config, _) =
            parse("{ agents: { defaults: { compaction: { timeoutSeconds: 1e300 } } } }").unwrap();
        assert!(
            validate(&config).is_ok(),
            "huge is capped by the deadline, not refused"
        );
    }

    #[test]
    fn defaults_select_legacy() {
        let (config, _) = parse("{}").unwrap();
        assert_eq!(config.selected_engine(), "legacy");
        assert!(!config.engine_is_configured());
        let (config, _) = parse("{ plugins: { slots: { contextEngine: 'none' } } }").unwrap();
        assert_eq!(
            config.selected_engine(),
            "legacy",
            "\"none\" is legacy (§13)"
        );
        assert!(!config.engine_is_configured());
    }

    #[test]
    fn sandbox_is_a_switch_or_grants_and_bad_grants_are_named() {
        let load = |sandbox: &str| {
            LoadedConfig::from_text(
                Path::new("pincer.json"),
                &format!(r#"{{ plugins: {{ entries: {{ e: {{ sandbox: {sandbox} }} }} }} }}"#),
            )
        };
        let sandbox = |sandbox: &str| {
            load(sandbox).unwrap().config.plugins.entries["e"]
                .sandbox
                .clone()
        };
        assert_eq!(sandbox("false"), Some(SandboxConfig::Switch(false)));
        assert!(!sandbox("false").unwrap().enabled());
        let grants = sandbox(r#"{ readPaths: ["/srv/data"], env: { LANG: "C" } }"#).unwrap();
        assert!(grants.enabled());
        assert_eq!(grants.grants().read_paths, vec![PathBuf::from("/srv/data")]);
        assert_eq!(grants.grants().env["LANG"], "C");
        let typo = load(r#"{ readPath: ["/srv"] }"#).unwrap_err().to_string();
        assert!(typo.contains("unknown field `readPath`"), "{typo}");
        let relative = load(r#"{ readPaths: ["data"] }"#).unwrap_err().to_string();
        assert!(
            relative.contains("plugins.entries.e.sandbox.readPaths")
                && relative.contains("data is not an absolute path"),
            "{relative}"
        );
        let lanes = load(r#"{ env: { PINCER_WORKER_LANES: "64" } }"#)
            .unwrap_err()
            .to_string();
        assert!(lanes.contains("PINCER_WORKER_LANES"), "{lanes}");
        let other = load("3").unwrap_err().to_string();
        assert!(
            other.contains("sandbox must be true, false or an object of grants"),
            "{other}"
        );
    }
}
