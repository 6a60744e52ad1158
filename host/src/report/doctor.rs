//! `pincer doctor`: one report of what the runtime found — plugins loaded or rejected and why,
//! registered engines, the selected engine and what it resolves to, which configured hosts an
//! engine cannot run on, quarantines (with the health line), unknown config keys, and which
//! protections this machine gives engines run in a worker process (`isolation`). The JSON form is an **API Boundary** (scripts read it): top-level `plugins`
//! (each with `id`, `status`, `error`) and `contextEngine` (`selected`, `resolved`).

use std::fmt::Write as _;

use serde::Serialize;

use crate::engines::isolation::confine::{available_protections, Protections};
use crate::slot::quarantine::{health_line, QuarantineRecord};
use crate::slot::requirements::{incompatibilities, HostDescriptor, HostSupportError};
use crate::slot::runtime::{Fallback, PluginStatus, Resolution, ResolveError, Runtime};

/// The doctor report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    /// The home folder.
    pub home: String,
    /// The config file and its problems.
    pub config: ConfigSummary,
    /// Every discovered plugin.
    pub plugins: Vec<PluginStatus>,
    /// Plugin folders that were named (config or command line) but do not exist.
    pub missing_plugin_dirs: Vec<String>,
    /// Registered engine ids, sorted.
    pub engines: Vec<String>,
    /// The slot and its resolution.
    pub context_engine: EngineSummary,
    /// The execution hosts this configuration runs engines on.
    pub hosts: Vec<HostDescriptor>,
    /// Operations engines cannot run on configured hosts: from each plugin manifest's
    /// `hostRequirements` (known without loading) and from the selected engine's `info`.
    pub host_incompatibilities: Vec<HostSupportError>,
    /// Quarantined engines (this process, then others from the mirror).
    pub quarantine: Vec<QuarantineRecord>,
    /// The health line, when something is quarantined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// What an engine run in a worker process (`isolation: "process"`) is confined by on this
    /// machine.
    pub isolation: IsolationSummary,
    /// Session files with lines longer than `sessions.maxLineBytes`, which every read skips.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub session_long_lines: Vec<super::sessions::SessionLongLines>,
    /// Whether nothing is broken: the selected engine answers, or `legacy` answers for it
    /// because the operator disabled or denied its plugin.
    pub ok: bool,
}

/// The config part of the report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSummary {
    /// The file.
    pub path: String,
    /// Whether it exists.
    pub exists: bool,
    /// Keys pincer does not know (typos).
    pub unknown_keys: Vec<String>,
}

/// The slot part of the report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineSummary {
    /// `plugins.slots.contextEngine`, or `legacy`.
    pub selected: String,
    /// What answers, or `null` when resolution failed outright.
    pub resolved: Option<String>,
    /// Why they differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What kind of fallback it is (`disabled` is the operator's choice, not a failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
}

/// The process-isolation part of the report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IsolationSummary {
    /// Each protection a worker applies to itself, as a probe process found it here.
    pub protections: Protections,
    /// One line per protection that is missing, with what an isolated engine can then do.
    pub missing: Vec<String>,
    /// The program workers (and library probes) start from, or why there is none.
    pub worker_program: String,
    /// Whether libraries are probed in a throwaway worker before this process opens them
    /// (`plugins.probeLibraries`, default `true`).
    pub probe_libraries: bool,
    /// What each configured entry grants its worker beyond the defaults
    /// (`plugins.entries.<id>.sandbox`); entries without grants are left out.
    pub grants: Vec<SandboxGrantSummary>,
}

/// One entry's `sandbox` setting, as `doctor` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxGrantSummary {
    /// The plugin id.
    pub plugin: String,
    /// Whether the sandbox is on (`sandbox: false` turns it off).
    pub sandbox: bool,
    /// Extra readable paths (`sandbox.readPaths`).
    pub read_paths: Vec<String>,
    /// The names of the variables set in the worker's environment (`sandbox.env`; the values
    /// are not shown).
    pub env: Vec<String>,
    /// Whether the worker starts where reads cannot be confined (`sandbox.allowWeak`).
    pub allow_weak: bool,
}

impl IsolationSummary {
    /// Probes this machine (in a short-lived child process; the caller is not confined).
    pub fn probe() -> Self {
        let protections = available_protections();
        IsolationSummary {
            missing: protections.missing(),
            protections,
            worker_program: crate::engines::isolation::settings::describe_worker_program(),
            probe_libraries: true,
            grants: Vec::new(),
        }
    }

    /// [`IsolationSummary::probe`] with what `config` sets: `probeLibraries`, the grants.
    pub fn probe_with(config: &crate::config::Config) -> Self {
        let mut summary = Self::probe();
        summary.probe_libraries = config.plugins.probe_libraries != Some(false);
        for (id, entry) in &config.plugins.entries {
            let Some(sandbox) = &entry.sandbox else {
                continue;
            };
            let grants = sandbox.grants();
            summary.grants.push(SandboxGrantSummary {
                plugin: id.clone(),
                sandbox: sandbox.enabled(),
                read_paths: grants
                    .read_paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect(),
                env: grants.env.keys().cloned().collect(),
                allow_weak: grants.allow_weak,
            });
        }
        summary
    }
}

/// The refusal codes of the trust boundary: they make `ok` false whatever is selected.
const TRUST_REFUSALS: [&str; 4] = [
    "engine_id_contested",
    "engine_id_held",
    "engine_id_reserved",
    "insecure_permissions",
];

/// Builds the report. Resolving creates the selected engine (calling its factory), as a real
/// operation would; the caller disposes engines with [`Runtime::shutdown`].
pub fn doctor(runtime: &Runtime) -> DoctorReport {
    let config = runtime.config();
    let hosts = HostDescriptor::configured(&config.config);
    let mut host_incompatibilities = Vec::new();
    for plugin in runtime.plugins() {
        host_incompatibilities.extend(incompatibilities(
            &plugin.id,
            &plugin.host_requirements,
            &hosts,
        ));
    }
    let resolved_engine = runtime.resolve();
    if let Ok(resolved) = &resolved_engine {
        let info = resolved.engine.info();
        for err in incompatibilities(&info.id, &info.host_requirements, &hosts) {
            if !host_incompatibilities.contains(&err) {
                host_incompatibilities.push(err);
            }
        }
    }
    let context_engine = match resolved_engine {
        Ok(resolved) => {
            let Resolution {
                selected,
                resolved,
                reason,
                fallback,
            } = resolved.resolution;
            EngineSummary {
                selected,
                resolved: Some(resolved),
                reason,
                fallback,
            }
        }
        Err(ResolveError::Strict { message }) => EngineSummary {
            selected: config.config.selected_engine().to_owned(),
            resolved: None,
            reason: Some(message),
            fallback: None,
        },
    };
    let quarantine = runtime.quarantine().list();
    // Broken only when the selected engine cannot answer for a reason other than the
    // operator's own choice (a disabled or denied plugin is not a failure: openclaw#149319).
    // A plugin refused at the trust boundary (an engine id it may not have, files others can
    // change) is broken whichever engine is selected: someone tried, or can try, to run code.
    let trust_refusal = runtime.plugins().iter().any(|p| {
        p.error
            .as_ref()
            .is_some_and(|e| TRUST_REFUSALS.contains(&e.code.as_str()))
    });
    let ok = context_engine.resolved.is_some()
        && !context_engine.fallback.is_some_and(Fallback::is_failure)
        && !trust_refusal;
    DoctorReport {
        home: runtime.home().root().display().to_string(),
        config: ConfigSummary {
            path: config.path.display().to_string(),
            exists: config.exists,
            unknown_keys: config.unknown_keys.clone(),
        },
        plugins: runtime.plugins().to_vec(),
        missing_plugin_dirs: runtime
            .missing_plugin_dirs()
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        engines: runtime.registry().ids(),
        hosts,
        host_incompatibilities,
        health: health_line(&quarantine),
        quarantine,
        context_engine,
        isolation: IsolationSummary::probe_with(&config.config),
        session_long_lines: super::sessions::sessions_with_long_lines(runtime.home()),
        ok,
    }
}

impl DoctorReport {
    /// The report for people.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "home: {}", self.home);
        let _ = writeln!(
            out,
            "config: {}{}",
            self.config.path,
            if self.config.exists {
                ""
            } else {
                " (not found; using defaults)"
            }
        );
        for key in &self.config.unknown_keys {
            let _ = writeln!(out, "  warning: unknown config key `{key}` (typo?)");
        }
        for dir in &self.missing_plugin_dirs {
            let _ = writeln!(out, "  warning: plugin folder {dir} does not exist (check --plugins-dir or plugins.load.paths)");
        }
        let _ = writeln!(out, "plugins ({}):", self.plugins.len());
        if self.plugins.is_empty() {
            let _ = writeln!(out, "  (none found)");
        }
        for plugin in &self.plugins {
            let version = plugin.version.as_deref().unwrap_or("?");
            let _ = write!(out, "  {:<16} {:<9} {}", plugin.id, plugin.status, version);
            if !plugin.engines.is_empty() {
                let _ = write!(out, "  engines: {}", plugin.engines.join(", "));
            }
            let _ = writeln!(out);
            if let Some(error) = &plugin.error {
                let _ = writeln!(out, "      {}: {}", error.code, error.message);
            }
            for diagnostic in &plugin.diagnostics {
                let _ = writeln!(out, "      error: {diagnostic}");
            }
            for warning in &plugin.warnings {
                let _ = writeln!(out, "      warning: {warning}");
            }
        }
        if self
            .plugins
            .iter()
            .any(|p| p.status == crate::slot::runtime::PluginState::Verified)
        {
            let _ = writeln!(
                out,
                "  (\"verified\": checked without being opened, since no engine of it is selected; `pincer doctor --load` opens every library)"
            );
        }
        let _ = writeln!(out, "engines: {}", self.engines.join(", "));
        let _ = writeln!(
            out,
            "context engine: selected {} -> {}{}",
            self.context_engine.selected,
            self.context_engine
                .resolved
                .as_deref()
                .unwrap_or("(unresolved)"),
            match (&self.context_engine.reason, self.context_engine.fallback) {
                (Some(r), Some(Fallback::Disabled)) =>
                    format!(" ({r}: the operator's choice; legacy answers and nothing is broken)"),
                (Some(r), _) => format!(" ({r})"),
                (None, _) => String::new(),
            }
        );
        if !self.host_incompatibilities.is_empty() {
            let _ = writeln!(out, "host incompatibilities:");
            for err in &self.host_incompatibilities {
                let _ = writeln!(out, "  {}", err.message);
            }
        }
        let _ = writeln!(
            out,
            "process isolation (engines with isolation \"process\" confine their worker with):"
        );
        for line in self.isolation.protections.to_string().lines() {
            let _ = writeln!(out, "  {line}");
        }
        for line in &self.isolation.missing {
            let _ = writeln!(out, "  warning: {line}");
        }
        let _ = writeln!(out, "  worker program: {}", self.isolation.worker_program);
        if !self.isolation.probe_libraries {
            let _ = writeln!(
                out,
                "  warning: plugins.probeLibraries is false: libraries are opened in this process without a probe (a constructor that crashes takes the host down)"
            );
        }
        for grant in &self.isolation.grants {
            if !grant.sandbox {
                let _ = writeln!(
                    out,
                    "  warning: {}: sandbox is false (its worker applies limits only)",
                    grant.plugin
                );
                continue;
            }
            if !grant.read_paths.is_empty() {
                let _ = writeln!(
                    out,
                    "  {}: may also read {}",
                    grant.plugin,
                    grant.read_paths.join(", ")
                );
            }
            if !grant.env.is_empty() {
                let _ = writeln!(
                    out,
                    "  {}: worker environment sets {}",
                    grant.plugin,
                    grant.env.join(", ")
                );
            }
            if grant.allow_weak {
                let _ = writeln!(
                    out,
                    "  warning: {}: sandbox.allowWeak: its worker starts even where reads cannot be confined (weak)",
                    grant.plugin
                );
            }
        }
        if !self.session_long_lines.is_empty() {
            let _ = writeln!(out, "sessions with lines every read skips:");
            for session in &self.session_long_lines {
                for line in &session.lines {
                    let _ = writeln!(out, "  warning: {}: {line}", session.file.display());
                }
            }
        }
        if let Some(line) = &self.health {
            let _ = writeln!(out, "{line}");
        }
        if !self.quarantine.is_empty() {
            if self.health.is_none() {
                let _ = writeln!(
                    out,
                    "quarantine history (processes that have exited; `pincer health --clear` removes it):"
                );
            }
            for record in &self.quarantine {
                let _ = writeln!(
                    out,
                    "  {} owner={} operation={} pid={}{}: {}",
                    record.engine_id,
                    record
                        .owner
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string),
                    record.operation,
                    record.pid,
                    if record.is_active() { "" } else { " (exited)" },
                    record.reason
                );
            }
        }
        out
    }
}
