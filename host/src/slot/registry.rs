//! The engine registry (reference §3): which engine ids exist, who owns each, and how an id
//! becomes a live, guarded engine for one operation.
//!
//! Owners are `core` (the built-in `legacy`, which no one else may take), `public-sdk` (an
//! embedding host registering its own engines) and `plugin:<id>` (engines from plugin
//! libraries). Registration refuses another owner's id and same-owner re-registration unless
//! refresh is allowed; a runtime registration clears the id's quarantine.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::engines::instance::{EngineCallError, EngineInstance};
use crate::engines::services::HostServices;
use crate::plugins::library::{EngineDirs, LoadedLibrary};
use crate::slot::quarantine::Quarantine;
use crate::types::{Owner, LEGACY_ENGINE_ID};

/// A factory linked into the host or an embedder.
pub type NativeFactory =
    Arc<dyn Fn(&FactoryInput<'_>) -> Result<EngineInstance, EngineCallError> + Send + Sync>;

/// How a registered engine is created.
#[derive(Clone)]
pub enum EngineFactory {
    /// A function linked into the host or embedder.
    Native(NativeFactory),
    /// An engine exported by a loaded plugin library.
    Plugin {
        /// The library.
        library: Arc<LoadedLibrary>,
        /// The engine id inside it.
        engine_id: String,
    },
}

impl std::fmt::Debug for EngineFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineFactory::Native(_) => f.write_str("Native"),
            EngineFactory::Plugin { engine_id, .. } => write!(f, "Plugin({engine_id})"),
        }
    }
}

/// What a factory is given.
pub struct FactoryInput<'a> {
    /// The entry's config (validated).
    pub config: &'a serde_json::Value,
    /// The directories.
    pub dirs: &'a EngineDirs,
    /// The host services for the new engine.
    pub services: HostServices,
}

/// Registered for runtime use, or only so discovery can list it (§3.1 step 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Usable.
    Runtime,
    /// Listed, never resolved.
    ReadOnlyDiscovery,
}

/// Registration options.
#[derive(Debug, Clone, Copy)]
pub struct RegisterOptions {
    /// Allow the same owner to replace its registration.
    pub allow_same_owner_refresh: bool,
    /// The lifecycle.
    pub lifecycle: Lifecycle,
}

impl Default for RegisterOptions {
    fn default() -> Self {
        RegisterOptions {
            allow_same_owner_refresh: false,
            lifecycle: Lifecycle::Runtime,
        }
    }
}

/// A registration the registry refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The owner was blank (a plugin owner with a blank id).
    #[error("registerContextEngineForOwner: owner must be a non-empty string, got {0}")]
    EmptyOwner(String),
    /// The id belongs to another owner (or may not be refreshed).
    #[error("context engine already registered: {id} ({existing_owner})")]
    Refused {
        /// The id.
        id: String,
        /// Who holds it.
        existing_owner: Owner,
    },
}

impl RegisterError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            RegisterError::EmptyOwner(_) => "empty_owner",
            RegisterError::Refused { .. } => "already_registered",
        }
    }
}

/// One registry entry.
#[derive(Debug, Clone)]
pub struct Registration {
    /// How to create it.
    pub factory: EngineFactory,
    /// Who registered it.
    pub owner: Owner,
    /// Its lifecycle.
    pub lifecycle: Lifecycle,
    /// A number unique to this registration: a re-registration gets a new one, so instances
    /// created from the old factory are recognised as stale.
    pub generation: u64,
}

static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The registry.
#[derive(Debug)]
pub struct Registry {
    entries: RwLock<BTreeMap<String, Registration>>,
    quarantine: Arc<Quarantine>,
}

impl Registry {
    /// An empty registry sharing `quarantine`.
    pub fn new(quarantine: Arc<Quarantine>) -> Self {
        Registry {
            entries: RwLock::new(BTreeMap::new()),
            quarantine,
        }
    }

    /// The quarantine this registry clears.
    pub fn quarantine(&self) -> &Arc<Quarantine> {
        &self.quarantine
    }

    /// `registerContextEngineForOwner` (§3.1).
    ///
    /// # Errors
    /// [`RegisterError`] per the rules: blank owner, `legacy` for anyone but core, another
    /// owner's id, same-owner re-registration without refresh.
    pub fn register_for_owner(
        &self,
        id: &str,
        factory: EngineFactory,
        owner: Owner,
        options: RegisterOptions,
    ) -> Result<(), RegisterError> {
        if owner.is_blank() {
            return Err(RegisterError::EmptyOwner(
                serde_json::to_string(&owner).unwrap_or_default(),
            ));
        }
        let refused = |existing_owner: &Owner| RegisterError::Refused {
            id: id.to_owned(),
            existing_owner: existing_owner.clone(),
        };
        if id == LEGACY_ENGINE_ID && owner != Owner::Core {
            return Err(refused(&Owner::Core));
        }
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = entries.get(id) {
            if existing.owner != owner {
                return Err(refused(&existing.owner));
            }
            if existing.lifecycle == Lifecycle::Runtime
                && options.lifecycle == Lifecycle::ReadOnlyDiscovery
            {
                return Ok(());
            }
            if !options.allow_same_owner_refresh {
                return Err(refused(&existing.owner));
            }
        }
        entries.insert(
            id.to_owned(),
            Registration {
                factory,
                owner,
                lifecycle: options.lifecycle,
                generation: GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            },
        );
        drop(entries);
        if options.lifecycle == Lifecycle::Runtime {
            self.quarantine.clear(Some(id));
        }
        Ok(())
    }

    /// The plugin registration path (§3.2): trims the id, reserves `legacy`, owner
    /// `plugin:<plugin_id>` with refresh. Returns the diagnostics (level error) instead of failing.
    pub fn register_plugin_engine(
        &self,
        plugin_id: &str,
        id: &str,
        factory: EngineFactory,
    ) -> Result<String, String> {
        let id = id.trim();
        if id.is_empty() {
            return Err("context engine registration missing id".to_owned());
        }
        if id == LEGACY_ENGINE_ID {
            return Err(format!(
                "context engine id reserved by core: {LEGACY_ENGINE_ID}"
            ));
        }
        self.register_for_owner(
            id,
            factory,
            Owner::plugin(plugin_id),
            RegisterOptions {
                allow_same_owner_refresh: true,
                lifecycle: Lifecycle::Runtime,
            },
        )
        .map(|()| id.to_owned())
        .map_err(|err| match err {
            RegisterError::Refused { id, existing_owner } => {
                format!("context engine already registered: {id} ({existing_owner})")
            }
            other => other.to_string(),
        })
    }

    /// Removes every id of `owner` and clears their quarantine.
    pub fn clear_for_owner(&self, owner: &Owner) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        let ids: Vec<String> = entries
            .iter()
            .filter(|(_, r)| r.owner == *owner)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            entries.remove(id);
        }
        drop(entries);
        for id in &ids {
            self.quarantine.clear(Some(id));
        }
    }

    /// Removes `id` (an engine a reloaded plugin no longer exports) and clears its quarantine.
    pub fn remove(&self, id: &str) {
        let removed = self
            .entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if removed.is_some() {
            self.quarantine.clear(Some(id));
        }
    }

    /// The registration of `id`.
    pub fn get(&self, id: &str) -> Option<Registration> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Registered ids, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}

/// Contract validation of a created engine (§3.3): `info.id` and `info.name` must be
/// non-empty. (`ingest`, `assemble` and `compact` always exist in the ABI's vtable.)
pub fn validate_contract(registered_id: &str, engine: &EngineInstance) -> Result<(), String> {
    let info = engine.descriptor();
    let mut issues = Vec::new();
    if info.id.trim().is_empty() {
        issues.push("missing info.id");
    }
    if info.name.trim().is_empty() {
        issues.push("missing info.name");
    }
    if issues.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Context engine \"{registered_id}\" factory returned an invalid ContextEngine: {}.",
            issues.join(", ")
        ))
    }
}
