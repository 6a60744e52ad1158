//! The catalog: every plugin an installation can see, known from its manifest alone.
//!
//! `pincer plugins list|inspect|enable|disable|select|remove`, `doctor --fix` and resolution
//! need to know which plugins exist, where they came from and which engines they declare
//! (`contextEngineIds`, `hostRequirements`) — without opening any library. The catalog reads
//! the folders in search order ([`plugin_roots`]): `$PINCER_HOME/plugins` (installed),
//! `plugins.load.paths` (linked), then `--plugins-dir` folders.

use std::path::PathBuf;

use serde::Serialize;

use crate::config::{Config, PincerHome};
use crate::plugins::discovery::discover_plugin_dirs;
use crate::plugins::library::{LoadError, Loader};
use crate::plugins::manifest::{PluginKind, PluginManifest};

/// Where a plugin folder was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginSource {
    /// Copied into `$PINCER_HOME/plugins/` (`pincer plugins install`).
    Installed,
    /// Named in `plugins.load.paths` (`pincer plugins install --link`).
    Linked,
    /// Named on the command line (`--plugins-dir`).
    PluginsDir,
}

/// One folder searched for plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRoot {
    /// The folder (relative config paths resolved against the home).
    pub path: PathBuf,
    /// What kind of folder it is.
    pub source: PluginSource,
    /// For a linked root, the entry of `plugins.load.paths` exactly as the config writes it.
    pub config_entry: Option<PathBuf>,
}

/// Every folder searched for plugins, in search order.
pub fn plugin_roots(home: &PincerHome, config: &Config, extra: &[PathBuf]) -> Vec<PluginRoot> {
    let mut roots = vec![PluginRoot {
        path: home.plugins_dir(),
        source: PluginSource::Installed,
        config_entry: None,
    }];
    for path in &config.plugins.load.paths {
        roots.push(PluginRoot {
            path: if path.is_absolute() {
                path.clone()
            } else {
                home.root().join(path)
            },
            source: PluginSource::Linked,
            config_entry: Some(path.clone()),
        });
    }
    roots.extend(extra.iter().map(|path| PluginRoot {
        path: path.clone(),
        source: PluginSource::PluginsDir,
        config_entry: None,
    }));
    roots
}

/// One discovered plugin folder and what its manifest says.
#[derive(Debug)]
pub struct CatalogEntry {
    /// The plugin folder.
    pub dir: PathBuf,
    /// The root it was found under.
    pub root: PluginRoot,
    /// The checked manifest, or why it could not be read.
    pub manifest: Result<PluginManifest, LoadError>,
}

impl CatalogEntry {
    /// The manifest's id, else the folder name.
    pub fn id(&self) -> String {
        match &self.manifest {
            Ok(manifest) => manifest.id.clone(),
            Err(_) => self
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    /// The engine ids the manifest declares (none when it cannot be read).
    pub fn engine_ids(&self) -> &[String] {
        self.manifest
            .as_ref()
            .map(|m| m.context_engine_ids.as_slice())
            .unwrap_or(&[])
    }

    /// Whether the manifest says this is a context-engine plugin.
    pub fn is_context_engine(&self) -> bool {
        self.manifest
            .as_ref()
            .is_ok_and(|m| m.kind == PluginKind::ContextEngine)
    }
}

/// The plugins of an installation, read from their manifests only.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Every plugin folder, in search order.
    pub entries: Vec<CatalogEntry>,
}

impl Catalog {
    /// Reads every plugin folder under `roots` (manifests only; no library is opened).
    pub fn read(roots: &[PluginRoot]) -> Self {
        let loader = Loader::new(PathBuf::new());
        let mut entries = Vec::new();
        for root in roots {
            for dir in discover_plugin_dirs(std::slice::from_ref(&root.path)) {
                let manifest = loader.read_checked_manifest(&dir);
                entries.push(CatalogEntry {
                    dir,
                    root: root.clone(),
                    manifest,
                });
            }
        }
        Catalog { entries }
    }

    /// The first plugin with this id (the one the runtime would load).
    pub fn plugin(&self, plugin_id: &str) -> Option<&CatalogEntry> {
        self.entries.iter().find(|e| e.id() == plugin_id)
    }

    /// The first plugin whose manifest declares engine `engine_id`.
    pub fn owner_of_engine(&self, engine_id: &str) -> Option<&CatalogEntry> {
        self.entries
            .iter()
            .find(|e| e.engine_ids().iter().any(|id| id == engine_id))
    }

    /// The context-engine plugins, one per id, in search order.
    pub fn context_engine_plugins(&self) -> Vec<&CatalogEntry> {
        let mut seen: Vec<String> = Vec::new();
        self.entries
            .iter()
            .filter(|e| e.is_context_engine())
            .filter(|e| {
                let id = e.id();
                let first = !seen.contains(&id);
                seen.push(id);
                first
            })
            .collect()
    }
}
