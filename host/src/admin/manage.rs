//! The operator's commands on plugins and the slot — `pincer plugins install|enable|disable|
//! select|remove` — with OpenClaw's slot rules (docs/CONTRACT.md §11):
//!
//! - installing a context-engine plugin that declares one engine binds
//!   `plugins.slots.contextEngine` to it; a plugin with several engines is installed without
//!   binding, and the operator is told to run `pincer plugins select ENGINE_ID`;
//! - installing or selecting applies the *exclusive slot selection*: it sets the slot, says
//!   `Exclusive slot "contextEngine" switched from "<prev>" to "<new>".`, and disables every
//!   other context-engine plugin (`Disabled other "contextEngine" slot plugins: a, b.`);
//! - removing the plugin whose engine the slot names resets the slot to `legacy`;
//! - disabling keeps the slot (legacy answers); enabling again restores the engine.
//!
//! Each command is one locked read-modify-write of `pincer.json` ([`ConfigEditor`]): the
//! edits are checked before any plugin file is copied or removed, then written. Engines are
//! known from the manifests' `contextEngineIds` ([`Catalog`]); no library is opened.

use std::path::{Path, PathBuf};

use crate::config::edit::{ConfigEditor, Edit, EditError};
use crate::config::{Config, ConfigError, DisabledBy, PincerHome};
use crate::plugins::catalog::{plugin_roots, Catalog, CatalogEntry, PluginSource};
use crate::plugins::install::{self, InstallError};
use crate::plugins::manifest::{PluginKind, PluginManifest};
use crate::slot::requirements::{check_host_support, HostDescriptor};
use crate::slot::suggest::Suggestion;
use crate::types::{HostOperation, LEGACY_ENGINE_ID};

/// The slot's key, as OpenClaw's messages name it.
pub const SLOT_KEY: &str = "contextEngine";

const SLOT_PATH: [&str; 3] = ["plugins", "slots", SLOT_KEY];

/// Why a command changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// The config could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The config could not be edited.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The plugin could not be installed.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// No plugin has this id.
    #[error(
        "no plugin \"{id}\" is installed or linked (known: {}); `pincer plugins list` shows them{}",
        list_or_none(known),
        Suggestion::nearest(id, known)
    )]
    UnknownPlugin {
        /// The id asked for.
        id: String,
        /// The plugin ids there are.
        known: Vec<String>,
    },
    /// No plugin declares this engine.
    #[error("no plugin declares a context engine \"{id}\" (engines: {}); install its plugin with `pincer plugins install PATH`{}", list_or_none(known), Suggestion::nearest(id, known))]
    UnknownEngine {
        /// The engine asked for.
        id: String,
        /// The engines there are, `legacy` first.
        known: Vec<String>,
    },
    /// The command cannot be carried out as asked; the message says what to do.
    #[error("{0}")]
    Refused(String),
}

impl ManageError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            ManageError::Config(err) => err.code(),
            ManageError::Edit(err) => err.code(),
            ManageError::Install(err) => err.code(),
            ManageError::UnknownPlugin { .. } => "unknown_plugin",
            ManageError::UnknownEngine { .. } => "unknown_engine",
            ManageError::Refused(_) => "refused",
        }
    }
}

fn list_or_none(ids: &[String]) -> String {
    if ids.is_empty() {
        "(none)".to_owned()
    } else {
        ids.join(", ")
    }
}

/// What a command did, in the order it happened, one sentence a line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The messages for the operator.
    pub messages: Vec<String>,
}

/// A slot change: the config edits and what to say about them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SlotChange {
    /// The edits, in order.
    pub edits: Vec<Edit>,
    /// The messages, in order.
    pub messages: Vec<String>,
}

impl SlotChange {
    fn extend(&mut self, other: SlotChange) {
        self.edits.extend(other.edits);
        self.messages.extend(other.messages);
    }
}

/// The slot as the config writes it (trimmed), else `legacy`.
fn slot_value(config: &Config) -> &str {
    config
        .plugins
        .slots
        .context_engine
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(LEGACY_ENGINE_ID)
}

/// OpenClaw's `applyExclusiveSlotSelection` for the context-engine slot: select `engine_id`
/// (owned by plugin `owner`, `None` for `legacy`) and disable every other context-engine
/// plugin that is not disabled already.
pub fn exclusive_selection(
    config: &Config,
    catalog: &Catalog,
    engine_id: &str,
    owner: Option<&str>,
) -> SlotChange {
    let mut change = SlotChange::default();
    let previous = slot_value(config);
    if config.plugins.slots.context_engine.as_deref() != Some(engine_id) {
        change.edits.push(Edit::set(&SLOT_PATH, engine_id));
    }
    if previous != engine_id {
        change.messages.push(format!(
            "Exclusive slot \"{SLOT_KEY}\" switched from \"{previous}\" to \"{engine_id}\"."
        ));
    }
    let Some(owner) = owner else {
        return change;
    };
    let mut disabled: Vec<String> = catalog
        .context_engine_plugins()
        .into_iter()
        .map(CatalogEntry::id)
        .filter(|id| id != owner)
        .filter(|id| config.plugins.entries.get(id).and_then(|e| e.enabled) != Some(false))
        .collect();
    disabled.sort();
    disabled.dedup();
    for id in &disabled {
        change
            .edits
            .push(Edit::set(&["plugins", "entries", id, "enabled"], false));
    }
    if !disabled.is_empty() {
        change.messages.push(format!(
            "Disabled other \"{SLOT_KEY}\" slot plugins: {}.",
            disabled.join(", ")
        ));
    }
    change
}

/// The edits that let plugin `id` be used, or why the operator must decide: an entry that
/// disables it is turned on, an allow list gets it; `plugins.enabled: false` and
/// `plugins.deny` are the operator's and are not overridden.
fn enable_edits(config: &Config, id: &str) -> Result<SlotChange, String> {
    let mut change = SlotChange::default();
    match config.plugin_disabled_by(id) {
        None => {}
        Some(DisabledBy::PluginsOff) => {
            return Err(format!(
                "plugins are disabled (plugins.enabled is false), so plugin \"{id}\" cannot be used: set plugins.enabled to true first"
            ))
        }
        Some(DisabledBy::Denied) => {
            return Err(format!(
                "plugin \"{id}\" is denied by plugins.deny: remove it from that list first"
            ))
        }
        Some(DisabledBy::NotAllowed | DisabledBy::Entry) => {
            if config.plugins.allow.is_some() {
                change
                    .edits
                    .push(Edit::add_to_list(&["plugins", "allow"], id));
            }
            if config.plugins.entries.get(id).and_then(|e| e.enabled) == Some(false) {
                change
                    .edits
                    .push(Edit::set(&["plugins", "entries", id, "enabled"], true));
            }
            change.messages.push(format!("Enabled plugin \"{id}\"."));
        }
    }
    Ok(change)
}

/// The operator's plugin commands on one home.
#[derive(Debug, Clone)]
pub struct PluginCommands {
    home: PincerHome,
    extra_dirs: Vec<PathBuf>,
}

/// How `install` places a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallMode {
    /// Copy it into `$PINCER_HOME/plugins/<id>/`; `replace` allows replacing one of the same id.
    Copy {
        /// Replace an installed plugin of the same id.
        replace: bool,
    },
    /// Register its folder in `plugins.load.paths` without copying.
    Link,
}

impl PluginCommands {
    /// Commands on `home`, also seeing plugins in `extra_dirs` (`--plugins-dir`).
    pub fn new(home: PincerHome, extra_dirs: Vec<PathBuf>) -> Self {
        PluginCommands { home, extra_dirs }
    }

    fn open(&self) -> Result<(ConfigEditor, Config, Catalog), ManageError> {
        let editor = ConfigEditor::open(&self.home.config_path())?;
        let config = editor.config()?.config;
        let catalog = Catalog::read(&plugin_roots(&self.home, &config, &self.extra_dirs));
        Ok((editor, config, catalog))
    }

    fn find<'c>(&self, catalog: &'c Catalog, id: &str) -> Result<&'c CatalogEntry, ManageError> {
        catalog
            .plugin(id)
            .ok_or_else(|| ManageError::UnknownPlugin {
                id: id.to_owned(),
                known: catalog.entries.iter().map(CatalogEntry::id).collect(),
            })
    }

    /// `pincer plugins install PATH` (or `--link DIR`).
    ///
    /// # Errors
    /// See [`ManageError`]; nothing changes on error.
    pub fn install(&self, source: &Path, mode: InstallMode) -> Result<Outcome, ManageError> {
        let (mut editor, config, catalog) = self.open()?;
        // Everything is checked — the plugin, then the config edits — before any file is
        // copied or the config written.
        match mode {
            InstallMode::Link => {
                let dir = std::fs::canonicalize(source).map_err(|_| InstallError::NotFound {
                    path: source.to_owned(),
                })?;
                if !dir.is_dir() {
                    return Err(ManageError::Refused(format!(
                        "--link takes a plugin folder; {} is a file (install an archive without --link)",
                        source.display()
                    )));
                }
                let manifest = install::verify_folder(&dir)?.manifest;
                if let Some(other) = catalog.plugin(&manifest.id) {
                    return Err(ManageError::Refused(format!(
                        "plugin \"{}\" is already present in {}: remove it first (`pincer plugins remove {}`)",
                        manifest.id,
                        other.dir.display(),
                        manifest.id
                    )));
                }
                let mut change = SlotChange::default();
                change.edits.push(Edit::add_to_list(
                    &["plugins", "load", "paths"],
                    dir.to_string_lossy().into_owned(),
                ));
                change.messages.push(format!(
                    "Linked plugin \"{}\" {} from {} (plugins.load.paths).",
                    manifest.id,
                    manifest.version,
                    dir.display()
                ));
                change.extend(self.binding(&manifest, &config, &catalog));
                editor.apply(&change.edits)?;
                Ok(Outcome {
                    messages: change.messages,
                })
            }
            InstallMode::Copy { replace } => {
                let prepared = install::prepare(source)?;
                self.refuse_shadowed(&catalog, prepared.manifest(), replace)?;
                // Its constructors and checks run first in a throwaway worker process: a
                // library that crashes there is not installed for in-process use.
                if config.plugins.probe_libraries != Some(false) {
                    let loader = crate::plugins::library::Loader::new(std::path::PathBuf::new())
                        .with_probe(crate::engines::isolation::process::library_probe(
                            &config.plugins.entries,
                        ));
                    prepared.probe(&loader)?;
                }
                let mut change = self.binding(prepared.manifest(), &config, &catalog);
                change.edits.push(pin_library(
                    &prepared.manifest().id,
                    prepared.library_sha256(),
                ));
                editor.check(&change.edits)?;
                let installed = prepared.commit(&self.home.plugins_dir(), replace)?;
                let mut messages = vec![format!(
                    "{} plugin \"{}\" {} in {}.",
                    if installed.replaced {
                        "Replaced"
                    } else {
                        "Installed"
                    },
                    installed.manifest.id,
                    installed.manifest.version,
                    installed.dir.display()
                )];
                if let Err(err) = editor.apply(&change.edits) {
                    // The edits were checked; only a write can fail here. A fresh install is
                    // taken back so the home stays as it was.
                    if !installed.replaced {
                        let _ = install::uninstall(&installed.dir, &self.home.plugins_dir());
                    }
                    return Err(err.into());
                }
                messages.extend(change.messages);
                Ok(Outcome { messages })
            }
        }
    }

    /// A plugin of the same id found elsewhere (linked, or `--plugins-dir`) would be shadowed
    /// or shadow the copy: refuse, unless it is the installed copy being replaced.
    fn refuse_shadowed(
        &self,
        catalog: &Catalog,
        manifest: &PluginManifest,
        replace: bool,
    ) -> Result<(), ManageError> {
        match catalog.plugin(&manifest.id) {
            Some(other) if other.root.source == PluginSource::Installed => {
                if replace {
                    Ok(())
                } else {
                    Err(InstallError::AlreadyInstalled {
                        id: manifest.id.clone(),
                        dir: other.dir.clone(),
                    }
                    .into())
                }
            }
            Some(other) => Err(ManageError::Refused(format!(
                "plugin \"{}\" is already present in {} ({}): remove it first",
                manifest.id,
                other.dir.display(),
                match other.root.source {
                    PluginSource::Linked => "linked in plugins.load.paths",
                    _ => "a --plugins-dir folder",
                }
            ))),
            None => Ok(()),
        }
    }

    /// What installing `manifest` does to the slot (§11.3): a one-engine context-engine
    /// plugin is enabled and selected; a several-engine one is left for `select`.
    fn binding(&self, manifest: &PluginManifest, config: &Config, catalog: &Catalog) -> SlotChange {
        let mut change = SlotChange::default();
        if manifest.kind != PluginKind::ContextEngine {
            return change;
        }
        match enable_edits(config, &manifest.id) {
            Ok(enable) => change.extend(enable),
            Err(why) => {
                change
                    .messages
                    .push(format!("The slot is unchanged: {why}."));
                return change;
            }
        }
        match manifest.context_engine_ids.as_slice() {
            [engine] => change.extend(exclusive_selection(
                config,
                catalog,
                engine,
                Some(&manifest.id),
            )),
            engines => change.messages.push(format!(
                "Plugin \"{}\" provides several context engines ({}): the \"{SLOT_KEY}\" slot is unchanged; run `pincer plugins select ENGINE_ID` to use one.",
                manifest.id,
                engines.join(", ")
            )),
        }
        change
    }

    /// `pincer plugins select ENGINE_ID` (a plugin id with one engine is accepted too).
    ///
    /// # Errors
    /// Unknown engine, or a plugin the operator denied.
    pub fn select(&self, engine_id: &str) -> Result<Outcome, ManageError> {
        let (mut editor, config, catalog) = self.open()?;
        let change = if engine_id == LEGACY_ENGINE_ID {
            exclusive_selection(&config, &catalog, LEGACY_ENGINE_ID, None)
        } else {
            let (owner, engine) = match catalog.owner_of_engine(engine_id) {
                Some(owner) => (owner, engine_id.to_owned()),
                None => match catalog.plugin(engine_id).map(|p| (p, p.engine_ids())) {
                    Some((owner, [only])) => (owner, only.clone()),
                    _ => {
                        let mut known = vec![LEGACY_ENGINE_ID.to_owned()];
                        for entry in &catalog.entries {
                            known.extend(entry.engine_ids().iter().cloned());
                        }
                        return Err(ManageError::UnknownEngine {
                            id: engine_id.to_owned(),
                            known,
                        });
                    }
                },
            };
            let id = owner.id();
            let mut change = enable_edits(&config, &id).map_err(ManageError::Refused)?;
            change.extend(exclusive_selection(&config, &catalog, &engine, Some(&id)));
            change
        };
        editor.apply(&change.edits)?;
        let mut messages = change.messages;
        if messages.is_empty() {
            messages.push(format!(
                "The \"{SLOT_KEY}\" slot already selects \"{engine_id}\"."
            ));
        }
        Ok(Outcome { messages })
    }

    /// `pincer plugins enable ID`.
    ///
    /// # Errors
    /// Unknown plugin, or a plugin the operator denied.
    pub fn enable(&self, id: &str) -> Result<Outcome, ManageError> {
        let (mut editor, config, catalog) = self.open()?;
        let plugin = self.find(&catalog, id)?;
        let change = enable_edits(&config, id).map_err(ManageError::Refused)?;
        editor.apply(&change.edits)?;
        let mut messages = change.messages;
        let was_enabled = messages.is_empty();
        if was_enabled {
            messages.push(format!("Plugin \"{id}\" is already enabled."));
        }
        let slot = config.selected_engine();
        if plugin.engine_ids().iter().any(|e| e == slot) {
            messages.push(if was_enabled {
                format!("The \"{SLOT_KEY}\" slot selects \"{slot}\": that engine answers.")
            } else {
                format!("The \"{SLOT_KEY}\" slot selects \"{slot}\": that engine answers again.")
            });
        }
        Ok(Outcome { messages })
    }

    /// `pincer plugins disable ID`: the slot is kept (legacy answers meanwhile).
    ///
    /// # Errors
    /// Unknown plugin.
    pub fn disable(&self, id: &str) -> Result<Outcome, ManageError> {
        let (mut editor, config, catalog) = self.open()?;
        let plugin = self.find(&catalog, id)?;
        let changed = editor.apply(&[Edit::set(&["plugins", "entries", id, "enabled"], false)])?;
        let mut messages = vec![if changed {
            format!("Disabled plugin \"{id}\".")
        } else {
            format!("Plugin \"{id}\" is already disabled.")
        }];
        let slot = config.selected_engine();
        if plugin.engine_ids().iter().any(|e| e == slot) {
            messages.push(format!(
                "The \"{SLOT_KEY}\" slot still selects \"{slot}\": legacy answers until `pincer plugins enable {id}`."
            ));
        }
        Ok(Outcome { messages })
    }

    /// `pincer plugins remove ID`: deletes an installed copy or unlinks a linked folder,
    /// drops its config entry, and resets the slot to `legacy` when it named its engine.
    ///
    /// # Errors
    /// Unknown plugin, or one that only a `--plugins-dir` shows.
    pub fn remove(&self, id: &str) -> Result<Outcome, ManageError> {
        let (mut editor, config, catalog) = self.open()?;
        let plugin = self.find(&catalog, id)?;
        let mut change = SlotChange::default();
        match plugin.root.source {
            PluginSource::Installed => {}
            PluginSource::Linked => {
                if let Some(entry) = &plugin.root.config_entry {
                    change.edits.push(Edit::remove_from_list(
                        &["plugins", "load", "paths"],
                        entry.to_string_lossy().into_owned(),
                    ));
                }
            }
            PluginSource::PluginsDir => {
                return Err(ManageError::Refused(format!(
                    "plugin \"{id}\" comes from --plugins-dir {}, not from this home: there is nothing to remove",
                    plugin.root.path.display()
                )))
            }
        }
        if config.plugins.entries.contains_key(id) {
            change.edits.push(Edit::remove(&["plugins", "entries", id]));
        }
        if config
            .plugins
            .allow
            .as_ref()
            .is_some_and(|a| a.iter().any(|x| x == id))
        {
            change
                .edits
                .push(Edit::remove_from_list(&["plugins", "allow"], id));
        }
        let slot = slot_value(&config).to_owned();
        if plugin.engine_ids().contains(&slot) {
            change.extend(exclusive_selection(
                &config,
                &catalog,
                LEGACY_ENGINE_ID,
                None,
            ));
        }
        editor.check(&change.edits)?;
        let mut messages = Vec::new();
        match plugin.root.source {
            PluginSource::Installed => {
                install::uninstall(&plugin.dir, &self.home.plugins_dir())?;
                messages.push(format!(
                    "Removed plugin \"{id}\" ({}).",
                    plugin.dir.display()
                ));
            }
            _ => messages.push(format!(
                "Unlinked plugin \"{id}\" ({}); its files were left where they are.",
                plugin.dir.display()
            )),
        }
        editor.apply(&change.edits)?;
        messages.extend(change.messages);
        Ok(Outcome { messages })
    }
}

impl PluginCommands {
    /// `pincer doctor --fix`: OpenClaw's host-compatibility repair (docs/CONTRACT.md §5.6). When the
    /// selected engine cannot run `agent-run` on **any** configured host (from its manifest's
    /// `hostRequirements`; no library is opened), the slot goes back to `legacy`; with a mixed
    /// fleet it only warns. Returns what it changed or found.
    ///
    /// # Errors
    /// The config cannot be read or edited.
    pub fn repair_host_compatibility(&self) -> Result<Outcome, ManageError> {
        let (mut editor, config, catalog) = self.open()?;
        let selected = config.selected_engine().to_owned();
        let mut messages = Vec::new();
        let requirements = catalog
            .owner_of_engine(&selected)
            .and_then(|p| p.manifest.as_ref().ok())
            .map(|m| m.host_requirements.clone());
        if let Some(requirements) = requirements.filter(|_| selected != LEGACY_ENGINE_ID) {
            let hosts = HostDescriptor::configured(&config);
            let refusing: Vec<_> = hosts
                .iter()
                .filter_map(|host| {
                    check_host_support(&selected, &requirements, HostOperation::AgentRun, host)
                        .err()
                })
                .collect();
            let labels = |ids: &mut dyn Iterator<Item = &HostDescriptor>| {
                ids.map(|h| h.label.clone()).collect::<Vec<_>>().join(", ")
            };
            if !refusing.is_empty() && refusing.len() == hosts.len() {
                let change = exclusive_selection(&config, &catalog, LEGACY_ENGINE_ID, None);
                editor.apply(&change.edits)?;
                messages.push(format!(
                    "Context engine \"{selected}\" cannot run operation \"agent-run\" on any configured host ({}): {}",
                    labels(&mut hosts.iter()),
                    refusing[0].message
                ));
                messages.extend(change.messages);
            } else if !refusing.is_empty() {
                let refused: Vec<&str> = refusing.iter().map(|e| e.host_id.as_str()).collect();
                messages.push(format!(
                    "Context engine \"{selected}\" cannot run operation \"agent-run\" on {} but can on {}: the slot is kept (a mixed fleet); runs on those hosts are refused before they start.",
                    labels(&mut hosts.iter().filter(|h| refused.contains(&h.id.as_str()))),
                    labels(&mut hosts.iter().filter(|h| !refused.contains(&h.id.as_str())))
                ));
            }
        }
        Ok(Outcome { messages })
    }
}

/// The config edit that records the sha256 `install` verified: the runtime refuses, before
/// opening it, a library that no longer has it (`plugins.entries.<id>.sha256`).
fn pin_library(plugin_id: &str, sha256: &str) -> Edit {
    Edit::set(
        &["plugins", "entries", plugin_id, "sha256"],
        sha256.to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        json5::from_str(text).unwrap()
    }

    #[test]
    fn selecting_legacy_disables_nothing_and_says_the_switch() {
        let change = exclusive_selection(
            &config("{ plugins: { slots: { contextEngine: 'a' } } }"),
            &Catalog::default(),
            LEGACY_ENGINE_ID,
            None,
        );
        assert_eq!(
            change.messages,
            ["Exclusive slot \"contextEngine\" switched from \"a\" to \"legacy\"."]
        );
        let none = exclusive_selection(&config("{}"), &Catalog::default(), "legacy", None);
        assert!(none.messages.is_empty(), "{none:?}");
    }
}
