//! Hot reload: a new build of a plugin, or a changed `pincer.json`, taking effect in a
//! running [`Runtime`] without failing a call.
//!
//! **Generations.** Each engine id's instances are numbered: 1 for the first, one more for
//! each that replaced it (a reload, a changed engine config). A [`GuardedEngine`] holds one
//! instance for its whole life and says which ([`GuardedEngine::generation`], and
//! `answer.generation` on every call), so a caller can tell which generation served it.
//!
//! **Reload of a plugin** ([`Runtime::reload_plugin`]): the plugin's current files go through
//! the full verified load (manifest, path confinement, size, sha256 and segment bounds, the
//! embedded manifest, a private content-addressed copy, ABI checks, the library's own
//! manifest) and every engine of the new build is created (factory and `info`, bounded, then
//! contract validation) *beside* the old generation. Any failure refuses the reload with its
//! reason and the old generation keeps serving. Unchanged files (the same content hash of
//! library and manifest) do nothing. On success the new registration and instances are
//! swapped in under the instance lock, which is a re-registration: the engine's quarantine is
//! cleared (docs/CONTRACT.md §3.1 step 6).
//!
//! **Drain, then dispose once.** A replaced instance is *retired*, not disposed: calls in
//! flight (and turns holding a guard) keep it alive through their `Arc`. A reaper thread
//! disposes each retired instance once no one but the reaper holds it, under the cleanup
//! deadline; [`Runtime::shutdown`] disposes whatever is left. `dispose` runs at most once per
//! instance (`EngineInstance::dispose`).
//!
//! **Libraries stay mapped by default.** An old generation's library is not unloaded
//! (unloading a Rust library while anything from it lives is unsound);
//! [`Runtime::generations`] counts the kept ones and their size.
//!
//! **Unload on reload** (`plugins.entries.<id>.unloadOnReload: true`, for development): the
//! plugin's libraries are opened closable, and an old one is closed (`dlclose`) when the last
//! thing from it is dropped — never before. Everything that carries its code or its memory
//! holds its `Arc<LoadedLibrary>`: engine instances (so every guard and call in flight) and
//! rollback handles; results are copied into host memory as they come back, errors and `info`
//! always are. Unload follows dispose: the reaper disposes and drops the retired instance on a
//! thread of its own, waits for that thread to exit, then lets go of the library.
//! Such a library's code never runs on a long-lived host thread: every call (factory, methods,
//! rollback, dispose) runs on a thread of its own, not inline on a session worker nor on a
//! pooled worker, and every drop of its objects too, each joined before the library handle it
//! keeps is let go — so whatever its code leaves for a thread's exit (thread-local destructors,
//! which keep a closed library mapped; `std`'s exit hook, which would call into an unmapped one)
//! has run while it is mapped. [`Runtime::generations`] tells old builds still open
//! (`unloading`), closed and gone (`unloadedGenerations`), and closed but still mapped
//! (`pinned`). What the host cannot see — threads the engine started — is the engine's to end:
//! the contract requires `dispose` to join them.
//!
//! **Config reload** ([`Runtime::reload_config`]): `pincer.json` is read again; a config that
//! does not parse is refused with its error and the old one stays in force. A changed slot or
//! timeout takes effect at the next resolution; a plugin enabled or disabled, a changed
//! engine config (a new generation, created before anything is swapped: a factory refusing
//! it refuses the whole reload) or new plugin folders take effect for new turns.
//!
//! **Where long-running work takes its engine** ([`Runtime::slot_source`]): an
//! [`EngineSource`] answering the slot's current generation, re-resolved after every reload,
//! so a harness's next turn runs on the new generation while a turn in flight finishes on
//! the one it started with.
//!
//! This file holds the reload procedures and what they answer; the bookkeeping they change —
//! the instance table and its numbering, the retired instances and the reaper, the kept
//! libraries, the content hash of each serving build, the reload epoch — is the runtime's
//! `Generations` (`slot::generations`), reached through the runtime's methods, never its fields.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, Weak};

use serde::Serialize;

pub use super::generations::GenerationStatus;
use super::generations::{fingerprint_of, read_manifest_bytes};
use super::runtime::{PluginState, Runtime, SetupFailure};
use crate::config::{Config, ConfigError, LoadedConfig};
use crate::engines::instance::EngineInstance;
use crate::plugins::discovery::discover_plugin_dirs;
use crate::plugins::MANIFEST_FILE_NAME;
use crate::slot::guarded::GuardedEngine;
use crate::slot::registry::EngineFactory;
use crate::slot::source::EngineSource;
use crate::slot::suggest::Suggestion;
use crate::types::Method;

/// What a plugin reload did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadOutcome {
    /// The plugin.
    pub plugin_id: String,
    /// `true`: the files' content hash was the loaded one's, nothing was done.
    pub unchanged: bool,
    /// Each engine of the plugin and its current generation (the new one, when reloaded).
    pub engines: BTreeMap<String, u64>,
    /// The sha256 of the library now serving.
    pub sha256: String,
}

/// What a config reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReloadOutcome {
    /// `false`: the file says what the config in force says; nothing was done.
    pub changed: bool,
    /// The slot's engine (`plugins.slots.contextEngine`, or `legacy`) now in force.
    pub selected: String,
    /// Whether the slot changed.
    pub slot_changed: bool,
    /// Plugins the new config turns on.
    pub enabled: Vec<String>,
    /// Plugins the new config turns off (their engines resolve to `legacy` from now on).
    pub disabled: Vec<String>,
    /// Engines whose config changed, with their new generation.
    pub reconfigured: BTreeMap<String, u64>,
    /// Plugins loaded for the first time (newly enabled, or in a newly listed folder).
    pub loaded: Vec<String>,
}

/// Why a reload was refused. The old generation (or config) keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// No plugin with this id was discovered.
    #[error("no plugin \"{plugin_id}\" is known to this runtime (known: {}): check the id with `pincer plugins list`{}", if known.is_empty() { "none".to_owned() } else { known.join(", ") }, Suggestion::nearest(plugin_id, known))]
    UnknownPlugin {
        /// The id asked for.
        plugin_id: String,
        /// The ids discovered.
        known: Vec<String>,
    },
    /// The config keeps the plugin off.
    #[error("plugin \"{plugin_id}\" is not reloaded: {why} (enable it first)")]
    Disabled {
        /// The plugin.
        plugin_id: String,
        /// Why it is off.
        why: String,
    },
    /// The new build failed a step of verified loading, or an engine's factory, `info` or
    /// contract validation.
    #[error(
        "reload of plugin \"{plugin_id}\" refused, {} keeps serving: {reason}", serving_text(*serving)
    )]
    Refused {
        /// The plugin.
        plugin_id: String,
        /// The failing step's stable code (a `LoadError` code, `factory`, `contract-validation`).
        step: String,
        /// What was wrong and what to do.
        reason: String,
        /// The generation still serving (0 when none was ever created).
        serving: u64,
    },
    /// `pincer.json` no longer reads.
    #[error("config reload refused, the config in force keeps serving: {0}")]
    Config(#[source] ConfigError),
    /// An engine refused the config it would get from the new `pincer.json`.
    #[error("config reload refused, the config in force keeps serving: engine \"{engine_id}\" failed with its new config ({step}): {reason}")]
    EngineConfig {
        /// The engine.
        engine_id: String,
        /// `factory` or `contract-validation`.
        step: String,
        /// Its error.
        reason: String,
    },
}

fn serving_text(generation: u64) -> String {
    if generation == 0 {
        "the loaded build".to_owned()
    } else {
        format!("generation {generation}")
    }
}

impl ReloadError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            ReloadError::UnknownPlugin { .. } => "unknown_plugin",
            ReloadError::Disabled { .. } => "plugin_disabled",
            ReloadError::Refused { .. } => "reload_refused",
            ReloadError::Config(_) => "config_refused",
            ReloadError::EngineConfig { .. } => "engine_config_refused",
        }
    }
}

/// A new instance made beside the serving one, waiting to be swapped in.
struct Prepared {
    engine_id: String,
    factory: EngineFactory,
    instance: Arc<EngineInstance>,
}

impl Runtime {
    /// Reloads plugin `plugin_id` from its folder: the full verified load of its current
    /// files as a new generation beside the serving one, every engine created, then an
    /// atomic swap (see the module docs). Files whose content hash is the serving build's do
    /// nothing (`unchanged`). A plugin rejected at startup is loaded by its first successful
    /// reload.
    ///
    /// # Errors
    /// [`ReloadError`]: an unknown or disabled plugin, or the new build refused with its
    /// reason — the serving generation is untouched.
    pub fn reload_plugin(&self, plugin_id: &str) -> Result<ReloadOutcome, ReloadError> {
        let _serial = self.gens().begin_reload();
        let status = {
            let plugins = self.plugins_read();
            match plugins.iter().find(|p| p.id == plugin_id) {
                Some(status) => status.clone(),
                None => {
                    return Err(ReloadError::UnknownPlugin {
                        plugin_id: plugin_id.to_owned(),
                        known: plugins.iter().map(|p| p.id.clone()).collect(),
                    })
                }
            }
        };
        if let Some(why) = self.config().config.plugin_disabled_by(plugin_id) {
            return Err(ReloadError::Disabled {
                plugin_id: plugin_id.to_owned(),
                why: why.for_plugin(plugin_id),
            });
        }
        let serving = |engines: &[String]| {
            engines
                .iter()
                .map(|e| self.gens().current_generation(e))
                .max()
                .unwrap_or(0)
        };
        let refused = |step: &str, reason: String| ReloadError::Refused {
            plugin_id: plugin_id.to_owned(),
            step: step.to_owned(),
            reason,
            serving: serving(&status.engines),
        };
        let loader = self.loader();
        // What load checks before any library opens, checked again: the manifest, the engine
        // ids it claims (against every plugin found now), the files' permissions.
        let manifest = loader
            .read_checked_manifest(&status.dir)
            .map_err(|err| refused(err.code(), err.to_string()))?;
        let dirs = discover_plugin_dirs(&self.plugin_roots(self.extra_plugin_dirs()));
        let claims = self.engine_claims(&loader, &dirs);
        let warnings = self
            .admit(&manifest, &claims)
            .map_err(|problem| refused(&problem.code, problem.message))?;
        // Steps 1–4 first (no code runs): an unchanged build stops here; a changed one is
        // loaded from exactly the bytes that were verified and hashed. The fingerprint must
        // describe those files: the manifest is read before and after the verification (which
        // reads it and then the library), and a manifest rewritten meanwhile — the next build
        // landing while this one's library was being hashed — refuses this reload (the write
        // that changed it triggers the next one). Else the old build would be fingerprinted
        // with the new manifest, look changed, and be loaded again as a new generation: one
        // build, two generations.
        let manifest_before = read_manifest_bytes(&status.dir);
        let verified = loader
            .verify(&status.dir)
            .map_err(|err| refused(err.code(), err.to_string()))?;
        let manifest_after = read_manifest_bytes(&status.dir);
        if manifest_before != manifest_after {
            return Err(refused(
                "files_changing",
                format!(
                    "{} changed while the plugin was being verified; reload again once its \
                     files are written (a file watcher does so by itself)",
                    status.dir.join(MANIFEST_FILE_NAME).display()
                ),
            ));
        }
        let fingerprint = fingerprint_of(&manifest_after, &verified.verified.sha256_hex);
        // An isolated engine whose worker died is started again even from unchanged files:
        // the operator's way back after its restarts ran out.
        let worker_dead = status
            .engines
            .iter()
            .any(|e| self.gens().worker_death(e).is_some());
        if status.status == PluginState::Loaded
            && !worker_dead
            && self.gens().is_serving(plugin_id, &fingerprint)
        {
            return Ok(ReloadOutcome {
                plugin_id: plugin_id.to_owned(),
                unchanged: true,
                engines: status
                    .engines
                    .iter()
                    .map(|e| (e.clone(), self.gens().current_generation(e)))
                    .collect(),
                sha256: status.sha256.clone().unwrap_or_default(),
            });
        }
        let library = self
            .open_verified(&loader, verified)
            .map_err(|problem| refused(&problem.code, problem.message))?;
        if library.manifest().id != plugin_id {
            return Err(refused(
                "manifest_mismatch",
                format!(
                    "the folder {} now holds plugin \"{}\"",
                    status.dir.display(),
                    library.manifest().id
                ),
            ));
        }
        // Every engine of the new build, created beside the serving generation.
        let config = self.config();
        let mut prepared: Vec<Prepared> = Vec::new();
        for engine_id in library.facts().engine_ids.clone() {
            let factory = EngineFactory::Plugin {
                library: Arc::clone(&library),
                engine_id: engine_id.clone(),
            };
            match self.create_instance(&engine_id, &factory, &config.config) {
                Ok(instance) => prepared.push(Prepared {
                    engine_id,
                    factory,
                    instance: Arc::new(instance),
                }),
                Err(SetupFailure { step, reason }) => {
                    for made in &prepared {
                        self.dispose_bounded(&made.instance);
                    }
                    return Err(refused(step.as_str(), reason));
                }
            }
        }
        let old_library =
            status
                .engines
                .iter()
                .find_map(|id| match self.registry().get(id).map(|r| r.factory) {
                    Some(EngineFactory::Plugin { library, .. }) => Some(library),
                    _ => None,
                });
        // The swap: registrations and instances change together under the instance lock, so
        // an operation sees the old pair or the new one.
        let mut engines = BTreeMap::new();
        let mut diagnostics = Vec::new();
        {
            let mut instances = self.gens().instances();
            for made in &prepared {
                match self.registry().register_plugin_engine(
                    plugin_id,
                    &made.engine_id,
                    made.factory.clone(),
                ) {
                    Ok(id) => {
                        let registration = self.registry().get(&id).map_or(0, |r| r.generation);
                        let generation = instances.install(&id, registration, &made.instance);
                        engines.insert(id, generation);
                    }
                    Err(diagnostic) => {
                        tracing::error!(plugin = %plugin_id, "{diagnostic}");
                        diagnostics.push(diagnostic);
                        self.gens()
                            .retire(&made.engine_id, 0, Arc::clone(&made.instance));
                    }
                }
            }
            // Engines the new build no longer exports are gone.
            for vanished in status.engines.iter().filter(|e| !engines.contains_key(*e)) {
                self.registry().remove(vanished);
                instances.retire_current(vanished);
            }
        }
        drop(prepared);
        if let Some(old) = &old_library {
            self.gens().keep(old, library.copy_path());
        }
        self.gens().set_fingerprint(plugin_id, fingerprint);
        {
            let mut plugins = self.plugins_mut();
            if let Some(entry) = plugins.iter_mut().find(|p| p.id == plugin_id) {
                entry.status = PluginState::Loaded;
                entry.error = None;
                entry.version = Some(library.manifest().version.to_string());
                entry.sha256 = Some(library.sha256().to_owned());
                entry.engines = engines.keys().cloned().collect();
                entry.declared_engines = library.manifest().context_engine_ids.clone();
                entry.host_requirements = library.manifest().host_requirements.clone();
                entry.diagnostics = diagnostics;
                entry.warnings = manifest.unknown_key_warnings();
                entry.warnings.extend(warnings);
            }
        }
        for engine_id in engines.keys() {
            self.gens().forget_restarts(engine_id);
        }
        self.gens().bump();
        tracing::info!(plugin = %plugin_id, sha256 = %library.sha256(), generations = ?engines, "plugin reloaded");
        Ok(ReloadOutcome {
            plugin_id: plugin_id.to_owned(),
            unchanged: false,
            engines,
            sha256: library.sha256().to_owned(),
        })
    }

    /// Reloads every plugin the config does not keep off (see [`Runtime::reload_plugin`]);
    /// what SIGHUP does, after [`Runtime::reload_config`].
    pub fn reload_all(&self) -> Vec<Result<ReloadOutcome, ReloadError>> {
        let ids: Vec<String> = self
            .plugins()
            .into_iter()
            .filter(|p| p.status != PluginState::Disabled)
            .map(|p| p.id)
            .collect();
        ids.iter().map(|id| self.reload_plugin(id)).collect()
    }

    /// Reads `pincer.json` again and puts it in force (see the module docs): a config that
    /// does not parse, or an engine whose factory refuses its new config, refuses the reload
    /// and the config in force keeps serving.
    ///
    /// # Errors
    /// [`ReloadError::Config`] or [`ReloadError::EngineConfig`].
    pub fn reload_config(&self) -> Result<ConfigReloadOutcome, ReloadError> {
        let _serial = self.gens().begin_reload();
        let new = LoadedConfig::load(&self.home().config_path()).map_err(ReloadError::Config)?;
        let old = self.config();
        let as_value = |config: &Config| serde_json::to_value(config).ok();
        if as_value(&old.config).is_some() && as_value(&old.config) == as_value(&new.config) {
            return Ok(ConfigReloadOutcome {
                changed: false,
                selected: old.config.selected_engine().to_owned(),
                ..Default::default()
            });
        }
        let mut outcome = ConfigReloadOutcome {
            changed: true,
            selected: new.config.selected_engine().to_owned(),
            slot_changed: old.config.selected_engine() != new.config.selected_engine(),
            ..Default::default()
        };
        let plugins = self.plugins();
        for plugin in &plugins {
            let was_on = old.config.plugin_disabled_by(&plugin.id).is_none();
            let is_on = new.config.plugin_disabled_by(&plugin.id).is_none();
            if is_on && !was_on {
                outcome.enabled.push(plugin.id.clone());
            } else if was_on && !is_on {
                outcome.disabled.push(plugin.id.clone());
            }
        }
        // Engines whose entry changed get a new generation, made before anything is swapped.
        let cached = self.gens().registrations();
        let mut prepared: Vec<(String, u64, Arc<EngineInstance>)> = Vec::new();
        for (id, registration) in cached {
            let Some(reg) = self.registry().get(&id) else {
                continue;
            };
            let off = reg
                .owner
                .plugin_id()
                .is_some_and(|p| new.config.plugin_disabled_by(p).is_some());
            if off
                || reg.factory.entry_config(&old.config, &id)
                    == reg.factory.entry_config(&new.config, &id)
            {
                continue;
            }
            match self.create_instance(&id, &reg.factory, &new.config) {
                Ok(instance) => {
                    prepared.push((id, registration.max(reg.generation), Arc::new(instance)))
                }
                Err(SetupFailure { step, reason }) => {
                    for (_, _, made) in &prepared {
                        self.dispose_bounded(made);
                    }
                    return Err(ReloadError::EngineConfig {
                        engine_id: id,
                        step: step.as_str().to_owned(),
                        reason,
                    });
                }
            }
        }
        let cleanup = new
            .config
            .plugins
            .call_timeouts_ms
            .for_method(Method::Dispose);
        self.set_config(new);
        self.gens().set_cleanup(cleanup);
        {
            let mut instances = self.gens().instances();
            for (id, registration, instance) in &prepared {
                let generation = instances.install(id, *registration, instance);
                outcome.reconfigured.insert(id.clone(), generation);
            }
            // A plugin turned off: its instances are retired (its engines resolve to legacy).
            let off: BTreeSet<&str> = outcome.disabled.iter().map(String::as_str).collect();
            let ids: Vec<String> = instances
                .ids()
                .into_iter()
                .filter(|id| {
                    self.registry()
                        .get(id)
                        .and_then(|r| r.owner.plugin_id().map(|p| off.contains(p)))
                        .unwrap_or(false)
                })
                .collect();
            for id in ids {
                instances.retire_current(&id);
            }
        }
        // Plugins never loaded (they were off) or in folders the old config did not list.
        let loader = self.loader();
        let mut extra = self.extra_plugin_dirs().to_vec();
        extra.dedup();
        let dirs = discover_plugin_dirs(&self.plugin_roots(&extra));
        let claims = self.engine_claims(&loader, &dirs);
        for dir in dirs {
            let known = plugins.iter().find(|p| p.dir == dir).map(|p| p.status);
            if matches!(known, Some(PluginState::Loaded | PluginState::Rejected)) {
                continue;
            }
            let status = self.load_one(&loader, &dir, &claims);
            if status.status == PluginState::Disabled && known.is_some() {
                continue;
            }
            if status.status == PluginState::Loaded {
                outcome.loaded.push(status.id.clone());
            }
            self.record_loaded(&status);
            let mut statuses = self.plugins_mut();
            match statuses.iter_mut().find(|p| p.dir == dir) {
                Some(entry) => *entry = status,
                None => statuses.push(status),
            }
        }
        self.gens().bump();
        tracing::info!(?outcome, "config reloaded");
        Ok(outcome)
    }

    /// Per registered engine: its current generation, the replaced ones still draining, and
    /// the old builds of its library kept mapped with their size. Sorted by engine id.
    pub fn generations(&self) -> Vec<GenerationStatus> {
        let engines = self
            .registry()
            .ids()
            .into_iter()
            .map(|engine_id| {
                let plugin_id = self
                    .registry()
                    .get(&engine_id)
                    .and_then(|r| r.owner.plugin_id().map(str::to_owned));
                (engine_id, plugin_id)
            })
            .collect();
        self.gens().statuses(engines)
    }

    /// Where long-running work takes its engine: the slot's engine (`engine`: `None`), or
    /// the named one, in its current generation. The source resolves again after each
    /// reload, so the next turn takes the new generation while a turn in flight keeps the
    /// guard it started with.
    pub fn slot_source(self: &Arc<Self>, engine: Option<&str>) -> Arc<dyn EngineSource> {
        Arc::new(RuntimeSource {
            runtime: Arc::clone(self),
            engine: engine.map(str::to_owned),
            cached: Mutex::new(None),
        })
    }
}

/// The [`EngineSource`] of [`Runtime::slot_source`].
struct RuntimeSource {
    runtime: Arc<Runtime>,
    engine: Option<String>,
    /// The guard last resolved and the reload epoch it was resolved at — held weakly: the
    /// source must not keep a replaced generation alive after the last operation on it ended
    /// (it is disposed then); while any operation holds the guard, it is reused.
    cached: Mutex<Option<(u64, Weak<GuardedEngine>)>>,
}

impl EngineSource for RuntimeSource {
    fn current(&self) -> Arc<GuardedEngine> {
        let epoch = self.runtime.gens().epoch();
        let last = lock(&self.cached)
            .as_ref()
            .and_then(|(at, guard)| Some((*at, guard.upgrade()?)));
        if let Some((at, guard)) = &last {
            if *at == epoch {
                return Arc::clone(guard);
            }
        }
        // Resolved without holding the cache: a first use may run a factory.
        let resolved = match &self.engine {
            Some(id) => self.runtime.resolve_id(id),
            None => self.runtime.resolve(),
        };
        match resolved {
            Ok(resolved) => {
                let guard = Arc::new(resolved.engine);
                // A fallback to legacy is not kept: the engine may come back without a reload
                // (its quarantine cleared), and resolving a turn's engine is cheap.
                if resolved.resolution.fallback.is_none() {
                    *lock(&self.cached) = Some((epoch, Arc::downgrade(&guard)));
                }
                guard
            }
            Err(err) => {
                // Strict policy and an unusable engine. The guard last served, while an
                // operation still holds it, keeps answering (it applies the strict rule
                // itself); with none, legacy.
                tracing::warn!(error = %err, "context engine unavailable for the next operation");
                match last {
                    Some((_, guard)) => guard,
                    None => Arc::new(self.runtime.legacy_guarded()),
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_plugin_is_answered_with_the_nearest_known_one() {
        let known = vec!["faulty".to_owned(), "sliding-window".to_owned()];
        let typo = ReloadError::UnknownPlugin {
            plugin_id: "sliding-windw".into(),
            known: known.clone(),
        };
        assert_eq!(typo.code(), "unknown_plugin");
        assert!(
            typo.to_string()
                .ends_with("`pincer plugins list`. Did you mean \"sliding-window\"?"),
            "{typo}"
        );
        let far = ReloadError::UnknownPlugin {
            plugin_id: "nope".into(),
            known,
        };
        assert!(!far.to_string().contains("Did you mean"), "{far}");
    }
}
