//! The engine registry (docs/CONTRACT.md §3): which engine ids exist, who owns each, and how an id
//! becomes a live, guarded engine for one operation.
//!
//! Owners are `core` (the built-in `legacy`, which no one else may take), `public-sdk` (an
//! embedding host registering its own engines) and `plugin:<id>` (engines from plugin
//! libraries). Registration refuses another owner's id and same-owner re-registration unless
//! refresh is allowed; a runtime registration clears the id's quarantine.
//!
//! Plugins claim engine ids in their manifests (`contextEngineIds`, which the library's
//! embedded record must repeat): [`EngineClaims`] refuses, before any library is opened, an id
//! two plugins claim — for both of them, so that neither answers for the other — unless exactly
//! one of them is pinned (installed by the operator, its library's sha256 recorded in
//! `plugins.entries.<id>.sha256`): that one keeps the id and the newcomer alone is refused. The
//! id `legacy` is refused as a plugin id or an engine id.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use crate::config::Config;
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

impl EngineFactory {
    /// The config entry engine `id`'s factory gets from `config`: keyed by plugin id; an
    /// engine's own id is accepted for engines of multi-engine libraries; native engines by
    /// their id.
    pub(crate) fn entry_config(&self, config: &Config, id: &str) -> serde_json::Value {
        match self {
            EngineFactory::Native(_) => config.entry_config(id),
            EngineFactory::Plugin { library, .. } => {
                let plugin_id = &library.manifest().id;
                let entries = &config.plugins.entries;
                if entries.contains_key(plugin_id) || !entries.contains_key(id) {
                    config.entry_config(plugin_id)
                } else {
                    config.entry_config(id)
                }
            }
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

    /// The sha256 of the library engine `id` comes from (`None`: not a plugin engine).
    pub fn library_sha256(&self, id: &str) -> Option<String> {
        match self.get(id)?.factory {
            EngineFactory::Plugin { library, .. } => Some(library.sha256().to_owned()),
            EngineFactory::Native(_) => None,
        }
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

/// The engine ids every enabled plugin claims in its manifest, known before any library is
/// opened. An id claimed by two plugins belongs to neither — first come is not first served,
/// since which folder sorts first is up to whoever names it — unless exactly one of them is
/// pinned (the operator installed it: its sha256 is in `plugins.entries.<id>.sha256`); then
/// the pinned plugin keeps it, since dropping a folder in a discovered path must not switch off
/// an engine the operator installed.
#[derive(Debug, Default)]
pub struct EngineClaims {
    by_engine: BTreeMap<String, Vec<String>>,
    pinned: BTreeSet<String>,
}

/// Whether a claiming plugin was installed by the operator, its library's sha256 recorded in
/// `plugins.entries.<id>.sha256`: a pinned claimant keeps the ids it claims against
/// unpinned newcomers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinning {
    /// Installed, its sha256 recorded.
    Pinned,
    /// Found in a plugin folder, nothing recorded.
    Unpinned,
}

/// Why a plugin's claims are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRefusal {
    /// `engine_id_reserved`, `engine_id_contested` or `engine_id_held`.
    pub code: &'static str,
    /// One line that says what is wrong and what to do.
    pub message: String,
}

impl EngineClaims {
    /// Records that plugin `plugin_id` declares `engine_ids`, [`Pinning::Pinned`] when the
    /// operator installed it (its library's sha256 is recorded in the config).
    pub fn claim(&mut self, plugin_id: &str, engine_ids: &[String], pinning: Pinning) {
        if pinning == Pinning::Pinned {
            self.pinned.insert(plugin_id.to_owned());
        }
        for id in engine_ids {
            let claimants = self.by_engine.entry(id.trim().to_owned()).or_default();
            if !claimants.iter().any(|c| c == plugin_id) {
                claimants.push(plugin_id.to_owned());
                claimants.sort();
            }
        }
    }

    /// The plugins that claim engine `engine_id`.
    pub fn claimants(&self, engine_id: &str) -> &[String] {
        self.by_engine.get(engine_id).map_or(&[], Vec::as_slice)
    }

    /// The one pinned claimant of `engine_id`, when exactly one of its claimants is pinned.
    fn holder(&self, engine_id: &str) -> Option<&str> {
        let mut pinned = self
            .claimants(engine_id)
            .iter()
            .filter(|c| self.pinned.contains(c.as_str()));
        match (pinned.next(), pinned.next()) {
            (Some(holder), None) => Some(holder),
            _ => None,
        }
    }

    /// Whether plugin `plugin_id`, declaring `engine_ids`, may register them: not when its id
    /// or one of its engine ids is `legacy`, nor when another plugin claims one of them —
    /// except that the one pinned claimant of an id keeps it (the others are refused alone).
    ///
    /// # Errors
    /// The refusal: every id a pinned plugin holds, naming the holder (`engine_id_held`), or
    /// else every contested id and its claimants (`engine_id_contested`).
    pub fn check(&self, plugin_id: &str, engine_ids: &[String]) -> Result<(), ClaimRefusal> {
        if plugin_id == LEGACY_ENGINE_ID || engine_ids.iter().any(|e| e.trim() == LEGACY_ENGINE_ID)
        {
            return Err(ClaimRefusal {
                code: "engine_id_reserved",
                message: format!(
                    "plugin \"{plugin_id}\" claims the id \"{LEGACY_ENGINE_ID}\", which belongs to the host's built-in engine: it is refused; rename the plugin or the engine"
                ),
            });
        }
        let mut held = Vec::new();
        let mut contested = Vec::new();
        for id in engine_ids.iter().map(|id| id.trim()) {
            let claimants = self.claimants(id);
            if claimants.len() < 2 {
                continue;
            }
            match self.holder(id) {
                Some(holder) if holder == plugin_id => {}
                Some(holder) => held.push(format!(
                    "\"{id}\" belongs to plugin \"{holder}\", installed and pinned by the operator (plugins.entries.{holder}.sha256)"
                )),
                None => contested.push(format!(
                    "\"{id}\" (claimed by {})",
                    claimants
                        .iter()
                        .map(|c| format!("\"{c}\""))
                        .collect::<Vec<_>>()
                        .join(" and ")
                )),
            }
        }
        if !held.is_empty() {
            return Err(ClaimRefusal {
                code: "engine_id_held",
                message: format!(
                    "plugin \"{plugin_id}\" is refused: engine id {}; the installed plugin keeps it. Remove or disable plugin \"{plugin_id}\" (plugins.entries.{plugin_id}.enabled: false), or rename its engine",
                    held.join(", ")
                ),
            });
        }
        if contested.is_empty() {
            return Ok(());
        }
        Err(ClaimRefusal {
            code: "engine_id_contested",
            message: format!(
                "engine id {} is claimed by more than one plugin, so it is refused for all of them (no plugin may answer for another's engine): remove or disable the plugin that should not have it (plugins.entries.<id>.enabled: false), then run pincer doctor",
                contested.join(", ")
            ),
        })
    }
}

/// Contract validation of a created engine (§3.3): `info.id` and `info.name` must be
/// non-empty. (`ingest`, `assemble` and `compact` always exist in the ABI's vtable.)
///
/// pincer is stricter than OpenClaw's §3.3 in two ways, because its engines are native
/// libraries from strangers: `info.id` must be the id the engine was registered under (an
/// engine must not present itself as another), and `info.version` must be semver.
pub fn validate_contract(registered_id: &str, engine: &EngineInstance) -> Result<(), String> {
    let info = engine.descriptor();
    let mut issues = Vec::new();
    let shown = |value: &str| crate::slot::quarantine::sanitize_for_log(value);
    if info.id.trim().is_empty() {
        issues.push("missing info.id".to_owned());
    } else if info.id != registered_id {
        issues.push(format!(
            "info.id \"{}\" is not the id it was registered under",
            shown(&info.id)
        ));
    }
    if info.name.trim().is_empty() {
        issues.push("missing info.name".to_owned());
    }
    if let Err(err) = semver::Version::parse(&info.version) {
        issues.push(format!(
            "info.version \"{}\" is not semver ({err})",
            shown(&info.version)
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_pinned_claimant_keeps_its_id_and_only_the_newcomer_is_refused() {
        let mut claims = EngineClaims::default();
        claims.claim("recent-summary", &ids(&["recent-summary"]), Pinning::Pinned);
        claims.claim(
            "squatter",
            &ids(&["squatter", "recent-summary"]),
            Pinning::Unpinned,
        );
        assert!(claims
            .check("recent-summary", &ids(&["recent-summary"]))
            .is_ok());
        let refused = claims
            .check("squatter", &ids(&["squatter", "recent-summary"]))
            .unwrap_err();
        assert_eq!(refused.code, "engine_id_held");
        assert!(
            refused.message.contains(
                r#"engine id "recent-summary" belongs to plugin "recent-summary", installed and pinned"#
            ),
            "{}",
            refused.message
        );

        // Unpinned (or both pinned): refused for both, as before.
        for pinning in [Pinning::Unpinned, Pinning::Pinned] {
            let mut claims = EngineClaims::default();
            claims.claim("a", &ids(&["x"]), pinning);
            claims.claim("b", &ids(&["x"]), pinning);
            for id in ["a", "b"] {
                assert_eq!(
                    claims.check(id, &ids(&["x"])).unwrap_err().code,
                    "engine_id_contested"
                );
            }
        }
    }
}
