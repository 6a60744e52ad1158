//! `pincer plugins list` and `pincer plugins inspect`: what is installed, linked or named on
//! the command line, from the manifests alone — no library is opened.
//!
//! The JSON of `inspect` is shaped like OpenClaw's `plugins inspect --json`:
//! `{plugin: {id, name, status, contextEngineIds, …}}`; `list --json` gives
//! `{plugins: [...], contextEngine: {selected}}`. Both are an **API Boundary** (scripts read
//! them). `status` is `enabled`, `disabled` (by the operator's config, with `disabledBy`) or
//! `error` (the manifest cannot be used, with `error`).

use serde::Serialize;

use crate::config::{Config, DisabledBy, PincerHome};
use crate::plugins::catalog::{Catalog, CatalogEntry, PluginSource};
use crate::plugins::verify::sha256_hex;
use crate::slot::quarantine::{Quarantine, QuarantineRecord};
use crate::slot::requirements::{check_host_support, HostDescriptor};
use crate::types::{HostOperation, HostRequirements};

/// A plugin's status, from its manifest and the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ListedStatus {
    /// May be used.
    Enabled,
    /// Off by the operator's configuration.
    Disabled,
    /// Its manifest cannot be used.
    Error,
}

/// A problem, for people and machines.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// A stable snake_case code.
    pub code: String,
    /// One line that says what to do.
    pub message: String,
}

/// One row of `pincer plugins list`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginSummary {
    /// The plugin id (the folder name when the manifest cannot be read).
    pub id: String,
    /// Display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Enabled, disabled or error.
    pub status: ListedStatus,
    /// Why it is disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_by: Option<DisabledBy>,
    /// Installed, linked or plugins-dir.
    pub source: PluginSource,
    /// The plugin folder.
    pub dir: String,
    /// The engines its manifest declares.
    pub context_engine_ids: Vec<String>,
    /// Whether the slot selects one of its engines.
    pub selected: bool,
    /// Why the manifest cannot be used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

fn summary(entry: &CatalogEntry, config: &Config) -> PluginSummary {
    let id = entry.id();
    let disabled_by = config.plugin_disabled_by(&id);
    let (name, version, error) = match &entry.manifest {
        Ok(m) => (Some(m.name.clone()), Some(m.version.to_string()), None),
        Err(err) => (
            None,
            None,
            Some(Problem {
                code: err.code().to_owned(),
                message: err.to_string(),
            }),
        ),
    };
    let status = match (&error, disabled_by) {
        (Some(_), _) => ListedStatus::Error,
        (None, Some(_)) => ListedStatus::Disabled,
        (None, None) => ListedStatus::Enabled,
    };
    let selected_engine = config.selected_engine();
    PluginSummary {
        selected: entry.engine_ids().iter().any(|e| e == selected_engine),
        context_engine_ids: entry.engine_ids().to_vec(),
        id,
        name,
        version,
        status,
        disabled_by,
        source: entry.root.source,
        dir: entry.dir.display().to_string(),
        error,
    }
}

/// `pincer plugins list`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginList {
    /// Every plugin, in search order.
    pub plugins: Vec<PluginSummary>,
    /// The slot.
    pub context_engine: SlotSummary,
}

/// The slot, as configured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotSummary {
    /// The selected engine (`legacy` when unset or `"none"`).
    pub selected: String,
}

/// Lists the catalog's plugins.
pub fn list(catalog: &Catalog, config: &Config) -> PluginList {
    PluginList {
        plugins: catalog.entries.iter().map(|e| summary(e, config)).collect(),
        context_engine: SlotSummary {
            selected: config.selected_engine().to_owned(),
        },
    }
}

impl PluginList {
    /// The list for people.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        if self.plugins.is_empty() {
            out.push_str("no plugins: install one with `pincer plugins install PATH`\n");
        }
        for p in &self.plugins {
            out.push_str(&format!(
                "{} {:<20} {:<9} {:<8} {:<11} engines: {}\n",
                if p.selected { "*" } else { " " },
                p.id,
                p.version.as_deref().unwrap_or("?"),
                match p.status {
                    ListedStatus::Enabled => "enabled",
                    ListedStatus::Disabled => "disabled",
                    ListedStatus::Error => "error",
                },
                match p.source {
                    PluginSource::Installed => "installed",
                    PluginSource::Linked => "linked",
                    PluginSource::PluginsDir => "plugins-dir",
                },
                if p.context_engine_ids.is_empty() {
                    "-".to_owned()
                } else {
                    p.context_engine_ids.join(", ")
                }
            ));
            if let Some(why) = p.disabled_by {
                out.push_str(&format!("      {}\n", why.for_plugin(&p.id)));
            }
            if let Some(error) = &p.error {
                out.push_str(&format!("      {}: {}\n", error.code, error.message));
            }
        }
        out.push_str(&format!(
            "context engine slot: {}\n",
            self.context_engine.selected
        ));
        out
    }
}

/// One (operation, host) check of an engine's manifest requirements.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostCompatibility {
    /// The host's id.
    pub host: String,
    /// The operation.
    pub operation: &'static str,
    /// Whether the host offers every required capability.
    pub ok: bool,
    /// What it lacks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// The §5 message when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Every configured host against every operation the manifest has requirements for.
pub fn host_compatibility(
    engine_id: &str,
    requirements: &HostRequirements,
    hosts: &[HostDescriptor],
) -> Vec<HostCompatibility> {
    let mut out = Vec::new();
    for host in hosts {
        for operation in [
            HostOperation::AgentRun,
            HostOperation::ManualCompact,
            HostOperation::SubagentSpawn,
        ] {
            if !requirements.contains_key(&operation) {
                continue;
            }
            let checked = check_host_support(engine_id, requirements, operation, host);
            out.push(HostCompatibility {
                host: host.id.clone(),
                operation: operation.as_str(),
                ok: checked.is_ok(),
                missing: checked
                    .as_ref()
                    .err()
                    .map(|e| e.missing.clone())
                    .unwrap_or_default(),
                message: checked.err().map(|e| e.message),
            });
        }
    }
    out
}

/// `pincer plugins inspect ID --json`: `{plugin: {...}}`.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// The plugin.
    pub plugin: PluginDetails,
}

/// Everything known of one plugin without opening its library.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginDetails {
    /// The list row (id, name, status, contextEngineIds, …), flattened.
    #[serde(flatten)]
    pub summary: PluginSummary,
    /// The manifest's description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The `pincer-plugin-api` requirement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The library file, relative to the folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// The library's sha256 as it is on disk now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The manifest's sha256 pin, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256_pin: Option<String>,
    /// The manifest's `configSchema`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<serde_json::Value>,
    /// `plugins.entries.<id>.config`.
    pub config: serde_json::Value,
    /// The manifest's `hostRequirements`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_requirements: Option<HostRequirements>,
    /// Each configured host against each operation with requirements, per engine.
    pub host_compatibility: Vec<HostCompatibility>,
    /// Quarantine records of its engines (this and other processes).
    pub quarantine: Vec<QuarantineRecord>,
}

/// Inspects the plugin `entry`.
pub fn inspect(entry: &CatalogEntry, config: &Config, home: &PincerHome) -> Inspection {
    let summary = summary(entry, config);
    let hosts = HostDescriptor::configured(config);
    let quarantine: Vec<QuarantineRecord> = Quarantine::new(Some(&home.state_dir()))
        .list()
        .into_iter()
        .filter(|r| summary.context_engine_ids.contains(&r.engine_id))
        .collect();
    let manifest = entry.manifest.as_ref().ok();
    let sha256 = manifest.and_then(|m| {
        crate::plugins::verify::resolve_library_path(&entry.dir, &m.library)
            .ok()
            .and_then(|path| std::fs::read(path).ok())
            .map(|bytes| sha256_hex(&bytes))
    });
    let host_compatibility = manifest
        .map(|m| {
            m.context_engine_ids
                .iter()
                .flat_map(|engine| host_compatibility(engine, &m.host_requirements, &hosts))
                .collect()
        })
        .unwrap_or_default();
    Inspection {
        plugin: PluginDetails {
            config: config.entry_config(&summary.id),
            summary,
            description: manifest.and_then(|m| m.description.clone()),
            kind: manifest.map(|m| m.kind.to_string()),
            api_version: manifest.map(|m| m.api_version.to_string()),
            library: manifest.map(|m| m.library.clone()),
            sha256,
            sha256_pin: manifest.and_then(|m| m.sha256.clone()),
            config_schema: manifest.map(|m| m.config_schema.clone()),
            host_requirements: manifest.map(|m| m.host_requirements.clone()),
            host_compatibility,
            quarantine,
        },
    }
}

impl Inspection {
    /// The inspection for people.
    pub fn render_text(&self) -> String {
        let p = &self.plugin;
        let s = &p.summary;
        let mut out = String::new();
        let mut line = |k: &str, v: String| out.push_str(&format!("{k:<18} {v}\n"));
        line("id", s.id.clone());
        if let Some(name) = &s.name {
            line("name", name.clone());
        }
        if let Some(v) = &s.version {
            line("version", v.clone());
        }
        line(
            "status",
            match (s.status, s.disabled_by) {
                (_, Some(why)) => format!("disabled ({})", why.for_plugin(&s.id)),
                (ListedStatus::Error, _) => "error".to_owned(),
                _ => "enabled".to_owned(),
            },
        );
        // The kind in lower case, the folder exactly as it is on disk.
        line(
            "source",
            format!("{} {}", format!("{:?}", s.source).to_lowercase(), s.dir),
        );
        line("engines", s.context_engine_ids.join(", "));
        line("selected", s.selected.to_string());
        if let Some(d) = &p.description {
            line("description", d.clone());
        }
        if let Some(api) = &p.api_version {
            line("apiVersion", api.clone());
        }
        if let Some(lib) = &p.library {
            line("library", lib.clone());
        }
        if let Some(sha) = &p.sha256 {
            line("sha256", sha.clone());
        }
        if let Some(pin) = &p.sha256_pin {
            line("sha256 pin", pin.clone());
        }
        if let Some(schema) = &p.config_schema {
            line("configSchema", schema.to_string());
        }
        line("config", p.config.to_string());
        for c in &p.host_compatibility {
            line(
                "host",
                format!(
                    "{} {}: {}",
                    c.host,
                    c.operation,
                    c.message.clone().unwrap_or_else(|| "ok".to_owned())
                ),
            );
        }
        for r in &p.quarantine {
            line(
                "quarantined",
                format!(
                    "{} during {} (pid {}): {}",
                    r.engine_id, r.operation, r.pid, r.reason
                ),
            );
        }
        if let Some(error) = &s.error {
            line("error", format!("{}: {}", error.code, error.message));
        }
        out
    }
}
