//! [`Runtime`]: the library's front door. It reads the home and its config, registers
//! `legacy`, discovers and loads plugins (each through every verification step), and resolves
//! the configured engine for an operation (reference §3.4): disabled or denied plugins give
//! `legacy` silently with the slot kept; an unregistered or failing engine is quarantined and
//! `legacy` answers (or, with the strict policy, the operation fails).
//!
//! Engine instances are created once per id and reused across operations; `dispose` runs once
//! per instance, at [`Runtime::shutdown`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::config::{ConfigError, DisabledBy, FallbackPolicy, LoadedConfig, PincerHome};
use crate::engines::bounded::{self, Deadline, Overrun};
use crate::engines::crash_journal::JournalTag;
use crate::engines::instance::{EngineCallError, EngineInstance};
use crate::engines::legacy::create_legacy;
use crate::engines::services::{HostServices, NoRuntimeCompaction, RuntimeCompactor};
use crate::plugins::catalog::plugin_roots;
use crate::plugins::discovery::discover_plugin_dirs;
use crate::plugins::library::{EngineDirs, LoadedLibrary, Loader};
use crate::slot::contract::CallTrust;
use crate::slot::guarded::{GuardedEngine, Timeouts};
use crate::slot::quarantine::Quarantine;
use crate::slot::registry::{
    validate_contract, EngineClaims, EngineFactory, FactoryInput, Lifecycle, RegisterOptions,
    Registration, Registry,
};
use crate::slot::requirements::HostDescriptor;
use crate::slot::runtime_settings::{build_runtime_settings, RuntimeSettingsInput};
use crate::types::{HostRequirements, Method, Owner, LEGACY_ENGINE_ID};
use pincer_plugin_api::abi::latest::AbortController;
use pincer_plugin_api::abi::latest::{RuntimeSettings, SelectionSource};

/// The quarantine reason of an engine no plugin registered (reference §3.4.4); the list of
/// available engines goes to the diagnostic, not the record.
pub const NOT_REGISTERED: &str = "not registered";

/// How a runtime is opened.
pub struct RuntimeOptions {
    /// The home.
    pub home: PincerHome,
    /// Extra plugin folders (`--plugins-dir`), searched after the home's and the config's.
    pub extra_plugin_dirs: Vec<PathBuf>,
    /// The runtime's compaction; `None`: no summarisation model.
    pub compactor: Option<Arc<dyn RuntimeCompactor>>,
    /// Directories handed to engine factories.
    pub dirs: EngineDirs,
    /// Which plugin libraries are opened (all by default).
    pub open_libraries: OpenLibraries,
}

/// Which plugin libraries a runtime opens. Every plugin is verified either way (manifest,
/// permissions, claims, file, sha256, embedded record: nothing of it runs); opening runs its
/// code (constructors at `dlopen`), so a command opens only what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpenLibraries {
    /// Every plugin found (an embedder's default; `pincer doctor --load`).
    #[default]
    All,
    /// Only the plugin that declares the selected engine; the others are verified and listed
    /// as `verified`, their engines not registered.
    Selected,
}

impl RuntimeOptions {
    /// Options for `home` with nothing else set.
    pub fn new(home: PincerHome) -> Self {
        RuntimeOptions {
            home,
            extra_plugin_dirs: Vec::new(),
            compactor: None,
            dirs: EngineDirs::default(),
            open_libraries: OpenLibraries::All,
        }
    }
}

/// Whether a discovered plugin was loaded. `Display` and `Serialize` give `loaded`,
/// `rejected` or `disabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginState {
    /// Verified, opened, and its engines registered.
    Loaded,
    /// Refused: its manifest, library or id is wrong (see its error).
    Rejected,
    /// Not loaded by configuration (`plugins.enabled`, `allow`, `deny`, `entries.<id>.enabled`).
    Disabled,
    /// Verified without being opened: its engines are not the selected one
    /// ([`OpenLibraries::Selected`]).
    Verified,
}

impl PluginState {
    /// `loaded`, `rejected`, `disabled` or `verified`.
    pub const fn as_str(self) -> &'static str {
        match self {
            PluginState::Loaded => "loaded",
            PluginState::Rejected => "rejected",
            PluginState::Disabled => "disabled",
            PluginState::Verified => "verified",
        }
    }
}

impl std::fmt::Display for PluginState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// What became of one discovered plugin.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// The plugin id (the folder name when the manifest could not be read).
    pub id: String,
    /// Loaded, rejected or disabled.
    pub status: PluginState,
    /// The plugin folder.
    pub dir: PathBuf,
    /// The manifest's version, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The engines it registered.
    pub engines: Vec<String>,
    /// Why it was rejected or disabled.
    pub error: Option<PluginProblem>,
    /// The library's sha256, when loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Registration diagnostics (level error), if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
    /// Warnings: unknown manifest keys, an insecure-permissions override in force.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The manifest's `hostRequirements`, when it could be read (known without loading).
    #[serde(skip)]
    pub host_requirements: HostRequirements,
    /// The engines its manifest declares (`contextEngineIds`), known without loading.
    #[serde(rename = "contextEngineIds")]
    pub declared_engines: Vec<String>,
}

/// A plugin's problem, for people and machines.
#[derive(Debug, Clone, Serialize)]
pub struct PluginProblem {
    /// A stable snake_case code.
    pub code: String,
    /// One line that says what to do.
    pub message: String,
}

/// How the selected engine resolved.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// `plugins.slots.contextEngine`, or `legacy`.
    pub selected: String,
    /// The engine that will answer.
    pub resolved: String,
    /// Why they differ, if they do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What kind of fallback it is, when `legacy` answers for another engine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
}

/// Why `legacy` answers for the selected engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// The operator turned the owning plugin off (disabled, denied, not allowed, or all
    /// plugins off): a choice, not a failure (§3.4).
    Disabled,
    /// Registered for read-only discovery only (§3.4.5).
    ReadOnlyDiscovery,
    /// Quarantined earlier in this process.
    Quarantined,
    /// No plugin registered it (§3.4.4).
    NotRegistered,
    /// Its factory or contract validation failed (§3.4.6).
    Failed,
}

impl Fallback {
    /// Whether this fallback is something broken (as opposed to the operator's choice).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Fallback::Quarantined | Fallback::NotRegistered | Fallback::Failed
        )
    }
}

/// Why an operation could not get an engine.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Strict policy: the configured engine cannot be used.
    #[error("{message} (plugins.contextEngineFallback is \"strict\", so the operation fails instead of using legacy)")]
    Strict {
        /// What went wrong.
        message: String,
    },
}

impl ResolveError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            ResolveError::Strict { .. } => "strict_fallback",
        }
    }
}

/// A resolved engine for one operation.
pub struct ResolvedEngine {
    /// The guarded engine.
    pub engine: GuardedEngine,
    /// How it resolved.
    pub resolution: Resolution,
}

/// The host library's runtime.
pub struct Runtime {
    home: PincerHome,
    config: LoadedConfig,
    registry: Registry,
    quarantine: Arc<Quarantine>,
    plugins: Vec<PluginStatus>,
    compactor: Arc<dyn RuntimeCompactor>,
    dirs: EngineDirs,
    legacy: Arc<EngineInstance>,
    /// Live instances by engine id, with the registration generation they were created from.
    instances: Mutex<BTreeMap<String, (u64, Arc<EngineInstance>)>>,
    missing_plugin_dirs: Vec<PathBuf>,
    open_libraries: OpenLibraries,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("home", &self.home).finish()
    }
}

impl Runtime {
    /// Opens the runtime: config, legacy, plugin discovery and verified loading.
    ///
    /// # Errors
    /// Only a config that cannot be read; plugin problems are recorded in
    /// [`Runtime::plugins`], never fatal.
    pub fn open(options: RuntimeOptions) -> Result<Self, ConfigError> {
        let config = LoadedConfig::load(&options.home.config_path())?;
        Ok(Self::with_config(options, config))
    }

    /// Opens the runtime with an already loaded config.
    pub fn with_config(options: RuntimeOptions, config: LoadedConfig) -> Self {
        let quarantine = Arc::new(Quarantine::new(Some(&options.home.state_dir())));
        let registry = Registry::new(Arc::clone(&quarantine));
        let compactor = options
            .compactor
            .unwrap_or_else(|| Arc::new(NoRuntimeCompaction));
        let legacy = Arc::new(
            create_legacy(HostServices::new(
                LEGACY_ENGINE_ID,
                Arc::clone(&compactor),
                None,
            ))
            .expect("the built-in legacy engine always constructs"),
        );
        registry
            .register_for_owner(
                LEGACY_ENGINE_ID,
                EngineFactory::Native(Arc::new(|input: &FactoryInput<'_>| {
                    crate::engines::legacy::create_legacy(input.services.clone())
                })),
                Owner::Core,
                RegisterOptions::default(),
            )
            .expect("legacy registers first");
        let mut dirs = options.dirs;
        if dirs.engine_state_root.is_none() {
            dirs.engine_state_root = Some(options.home.state_dir().join("engines"));
        }
        let mut runtime = Runtime {
            home: options.home,
            config,
            registry,
            quarantine,
            plugins: Vec::new(),
            compactor,
            dirs,
            legacy,
            instances: Mutex::new(BTreeMap::new()),
            missing_plugin_dirs: Vec::new(),
            open_libraries: options.open_libraries,
        };
        runtime.load_plugins(&options.extra_plugin_dirs);
        // Engines that took an earlier process down stay quarantined (until cleared, or until
        // their library changes); this process's calls are journaled from here on.
        let state_dir = runtime.home.state_dir();
        runtime
            .quarantine
            .recall_crashes(&state_dir, |id| runtime.registry.library_sha256(id));
        crate::engines::crash_journal::open_global(&state_dir);
        runtime
    }

    /// Every folder searched for plugins, in order.
    pub fn plugin_roots(&self, extra: &[PathBuf]) -> Vec<PathBuf> {
        plugin_roots(&self.home, &self.config.config, extra)
            .into_iter()
            .map(|root| root.path)
            .collect()
    }

    fn plugin_allowed(&self, plugin_id: &str) -> Result<(), DisabledBy> {
        match self.config.config.plugin_disabled_by(plugin_id) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    fn load_plugins(&mut self, extra: &[PathBuf]) {
        let loader = Loader::new(self.home.cache_dir()).with_installed_pins(
            self.config
                .config
                .plugins
                .entries
                .iter()
                .filter_map(|(id, entry)| Some((id.clone(), entry.sha256.clone()?))),
        );
        let roots = self.plugin_roots(extra);
        // The home's own plugins folder may well not exist; a folder someone named should.
        self.missing_plugin_dirs = roots
            .iter()
            .skip(1)
            .filter(|root| !root.is_dir())
            .cloned()
            .collect();
        let dirs = discover_plugin_dirs(&roots);
        // Every enabled plugin's engine ids, from manifests alone, before any library opens.
        let mut claims = EngineClaims::default();
        for manifest in dirs
            .iter()
            .filter_map(|d| loader.read_checked_manifest(d).ok())
        {
            if self.plugin_allowed(&manifest.id).is_ok() {
                claims.claim(&manifest.id, &manifest.context_engine_ids);
            }
        }
        for dir in dirs {
            let status = self.load_one(&loader, &dir, &claims);
            self.plugins.push(status);
        }
    }

    fn load_one(&self, loader: &Loader, dir: &Path, claims: &EngineClaims) -> PluginStatus {
        let folder_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut status = PluginStatus {
            id: folder_name,
            status: PluginState::Rejected,
            dir: dir.to_owned(),
            version: None,
            engines: Vec::new(),
            error: None,
            sha256: None,
            diagnostics: Vec::new(),
            warnings: Vec::new(),
            host_requirements: HostRequirements::default(),
            declared_engines: Vec::new(),
        };
        let problem = |code: &str, message: String| {
            Some(PluginProblem {
                code: code.to_owned(),
                message,
            })
        };
        // Read the manifest first (no plugin code runs) to learn the id and policy.
        let manifest = match loader.read_checked_manifest(dir) {
            Ok(manifest) => {
                status.id = manifest.id.clone();
                status.version = Some(manifest.version.to_string());
                status.host_requirements = manifest.host_requirements.clone();
                status.declared_engines = manifest.context_engine_ids.clone();
                status.warnings = manifest.unknown_key_warnings();
                manifest
            }
            Err(err) => {
                status.error = problem(err.code(), err.to_string());
                return status;
            }
        };
        if let Some(other) = self
            .plugins
            .iter()
            .find(|p| p.id == status.id && p.status == PluginState::Loaded)
        {
            status.error = problem(
                "duplicate_plugin",
                format!(
                    "plugin id \"{}\" is already loaded from {}: remove one of the two folders",
                    status.id,
                    other.dir.display()
                ),
            );
            return status;
        }
        if let Err(why) = self.plugin_allowed(&status.id) {
            status.status = PluginState::Disabled;
            status.error = problem("disabled", format!("not loaded: {why}"));
            return status;
        }
        if let Err(refusal) = claims.check(&status.id, &status.declared_engines) {
            tracing::error!(plugin = %status.id, code = refusal.code, "{}", refusal.message);
            status.error = problem(refusal.code, refusal.message);
            return status;
        }
        let trust_override = self
            .config
            .config
            .plugins
            .entries
            .get(&status.id)
            .is_some_and(|e| e.trust_insecure_permissions);
        match crate::plugins::permissions::check_manifest_plugin(&manifest) {
            Err(err) if !trust_override => {
                tracing::error!(plugin = %status.id, "{err}");
                status.error = problem(err.code(), err.to_string());
                return status;
            }
            Err(err) => status.warnings.push(format!(
                "loaded although its files are unsafe, because plugins.entries.{}.trustInsecurePermissions is true: {}",
                status.id,
                err.problems
                    .iter()
                    .map(|p| format!("{} is {}", p.path.display(), p.problem))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            Ok(()) => {}
        }
        if self.open_libraries == OpenLibraries::Selected
            && !status
                .declared_engines
                .iter()
                .any(|e| e == self.config.config.selected_engine())
        {
            // Not needed by this command: everything checkable without running its code.
            match loader.verify(dir) {
                Ok(verified) => {
                    status.status = PluginState::Verified;
                    status.sha256 = Some(verified.verified.sha256_hex);
                }
                Err(err) => status.error = problem(err.code(), err.to_string()),
            }
            return status;
        }
        let library: Arc<LoadedLibrary> = match loader.load(dir) {
            Ok(library) => library,
            Err(err) => {
                status.error = problem(err.code(), err.to_string());
                return status;
            }
        };
        status.status = PluginState::Loaded;
        status.sha256 = Some(library.sha256().to_owned());
        for engine_id in library.facts().engine_ids.clone() {
            match self.registry.register_plugin_engine(
                &status.id,
                &engine_id,
                EngineFactory::Plugin {
                    library: Arc::clone(&library),
                    engine_id: engine_id.clone(),
                },
            ) {
                Ok(id) => status.engines.push(id),
                Err(diagnostic) => {
                    tracing::error!(plugin = %status.id, "{diagnostic}");
                    status.diagnostics.push(diagnostic);
                }
            }
        }
        status
    }

    /// The home.
    pub fn home(&self) -> &PincerHome {
        &self.home
    }

    /// The loaded configuration.
    pub fn config(&self) -> &LoadedConfig {
        &self.config
    }

    /// What became of each discovered plugin, in discovery order.
    pub fn plugins(&self) -> &[PluginStatus] {
        &self.plugins
    }

    /// Plugin folders named in `plugins.load.paths` or `--plugins-dir` that do not exist.
    pub fn missing_plugin_dirs(&self) -> &[PathBuf] {
        &self.missing_plugin_dirs
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The quarantine.
    pub fn quarantine(&self) -> &Arc<Quarantine> {
        &self.quarantine
    }

    /// The shared legacy instance.
    pub fn legacy(&self) -> &Arc<EngineInstance> {
        &self.legacy
    }

    fn services_for(&self, engine_id: &str) -> HostServices {
        HostServices::new(engine_id, Arc::clone(&self.compactor), None)
    }

    /// The `runtimeSettings` of an operation resolved as `resolution` on `host`.
    pub fn runtime_settings(
        &self,
        resolution: &Resolution,
        host: &HostDescriptor,
        prompt_token_budget: Option<u64>,
    ) -> Arc<RuntimeSettings> {
        // §7.4: an explicit "legacy" is the default engine, not a configured choice.
        let configured =
            self.config.config.engine_is_configured() && resolution.selected != LEGACY_ENGINE_ID;
        Arc::new(build_runtime_settings(&RuntimeSettingsInput {
            selected_engine: Some(&resolution.selected),
            selection_source: Some(if configured {
                SelectionSource::Configured
            } else {
                SelectionSource::Default
            }),
            execution_host: Some(host),
            prompt_token_budget: prompt_token_budget.map(|b| b as f64),
            degraded_reason: resolution
                .reason
                .as_deref()
                .filter(|_| resolution.resolved != resolution.selected)
                .map(|_| "runtime_unavailable"),
            ..Default::default()
        }))
    }

    /// The call deadlines from the config.
    pub fn timeouts(&self) -> Timeouts {
        let config = &self.config.config;
        Timeouts {
            calls: config.plugins.call_timeouts_ms.clone(),
            compact: config.agents.defaults.compaction.timeout(),
        }
    }

    fn legacy_guarded(&self) -> GuardedEngine {
        GuardedEngine::new(
            LEGACY_ENGINE_ID,
            Some(Owner::Core),
            Arc::clone(&self.legacy),
            Arc::clone(&self.legacy),
            Arc::clone(&self.quarantine),
            FallbackPolicy::Legacy,
        )
        .with_timeouts(self.timeouts())
    }

    /// Resolves the configured engine for one operation (§3.4).
    ///
    /// # Errors
    /// Strict policy with an unusable engine.
    pub fn resolve(&self) -> Result<ResolvedEngine, ResolveError> {
        let selected = self.config.config.selected_engine().to_owned();
        self.resolve_id(&selected)
    }

    /// Resolves engine `selected` for one operation, as if the slot named it.
    ///
    /// # Errors
    /// Strict policy with an unusable engine.
    pub fn resolve_id(&self, selected: &str) -> Result<ResolvedEngine, ResolveError> {
        let policy = self.config.config.plugins.context_engine_fallback;
        let to_legacy = |fallback: Option<Fallback>, reason: Option<String>| ResolvedEngine {
            engine: self.legacy_guarded(),
            resolution: Resolution {
                selected: selected.to_owned(),
                resolved: LEGACY_ENGINE_ID.to_owned(),
                reason,
                fallback,
            },
        };
        if selected == LEGACY_ENGINE_ID {
            return Ok(to_legacy(None, None));
        }
        let registration = self.registry.get(selected);
        // The owning plugin: the registration's, else a discovered plugin that declares the
        // engine (or has its id) — known from manifests, so a plugin that was not loaded
        // (disabled, or rejected) still owns its engines.
        let declaring = self
            .plugins
            .iter()
            .find(|p| p.declared_engines.iter().any(|e| e == selected) || p.id == selected);
        let owner_plugin = registration
            .as_ref()
            .and_then(|r| r.owner.plugin_id().map(str::to_owned))
            .or_else(|| declaring.map(|p| p.id.clone()));
        if let Some(plugin_id) = &owner_plugin {
            if let Err(why) = self.plugin_allowed(plugin_id) {
                // Disabled or denied: legacy, silently; the slot is kept; no factory call.
                return Ok(to_legacy(
                    Some(Fallback::Disabled),
                    Some(format!("plugin \"{plugin_id}\" {why}")),
                ));
            }
        } else if self.config.config.plugins.enabled == Some(false) {
            return Ok(to_legacy(
                Some(Fallback::Disabled),
                Some(DisabledBy::PluginsOff.to_string()),
            ));
        }
        if let Some(record) = self.quarantine.get(selected) {
            if policy == FallbackPolicy::Strict {
                return Err(ResolveError::Strict {
                    message: format!(
                        "context engine \"{selected}\" is quarantined after failing during {}: {}",
                        record.operation, record.reason
                    ),
                });
            }
            return Ok(to_legacy(
                Some(Fallback::Quarantined),
                Some(format!(
                    "quarantined after failing during {}: {}",
                    record.operation, record.reason
                )),
            ));
        }
        // `reason` is the record's; `diagnostic` is what the operator is told.
        let fail = |fallback: Fallback,
                    operation: &str,
                    owner: Option<&Owner>,
                    reason: &str,
                    diagnostic: String| {
            if policy == FallbackPolicy::Strict {
                return Err(ResolveError::Strict {
                    message: diagnostic,
                });
            }
            self.quarantine.record(selected, owner, operation, reason);
            Ok(to_legacy(Some(fallback), Some(diagnostic)))
        };
        let Some(registration) = registration else {
            // Registered engines, and those of plugins verified but not opened by this command.
            let mut available = self.registry.ids();
            available.extend(
                self.plugins
                    .iter()
                    .filter(|p| p.status == PluginState::Verified)
                    .flat_map(|p| p.declared_engines.iter().cloned()),
            );
            available.sort();
            available.dedup();
            tracing::warn!(
                target: "pincer::registry",
                engine_id = selected,
                available = %available.join(", "),
                "[context-engine] Context engine \"{selected}\" is not registered; falling back to default engine \"{LEGACY_ENGINE_ID}\"."
            );
            let why = match declaring {
                Some(plugin) if plugin.status == PluginState::Rejected => plugin
                    .error
                    .as_ref()
                    .map(|e| format!(": plugin \"{}\" was rejected: {}", plugin.id, e.message))
                    .unwrap_or_default(),
                Some(plugin) if !plugin.diagnostics.is_empty() => format!(
                    ": plugin \"{}\" could not register it: {}",
                    plugin.id,
                    plugin.diagnostics.join("; ")
                ),
                _ => String::new(),
            };
            return fail(
                Fallback::NotRegistered,
                "resolve",
                None,
                NOT_REGISTERED,
                format!(
                    "Context engine \"{selected}\" is not registered{why}. Available engines: {}",
                    if available.is_empty() {
                        "(none)".to_owned()
                    } else {
                        available.join(", ")
                    }
                ),
            );
        };
        let owner = registration.owner.clone();
        if registration.lifecycle == Lifecycle::ReadOnlyDiscovery {
            tracing::warn!(
                "[context-engine] Context engine \"{selected}\" owner={owner} is registered for read-only discovery only; falling back to default engine \"{LEGACY_ENGINE_ID}\" without quarantine until runtime activation registers it."
            );
            return Ok(to_legacy(
                Some(Fallback::ReadOnlyDiscovery),
                Some("registered for read-only discovery only".into()),
            ));
        }
        let instance = match self.instance(selected, &registration) {
            Ok(instance) => instance,
            Err((operation, reason)) => {
                return fail(
                    Fallback::Failed,
                    operation,
                    Some(&owner),
                    &reason,
                    reason.clone(),
                )
            }
        };
        Ok(ResolvedEngine {
            engine: GuardedEngine::new(
                selected,
                Some(owner),
                instance,
                Arc::clone(&self.legacy),
                Arc::clone(&self.quarantine),
                policy,
            )
            .with_timeouts(self.timeouts())
            .with_trust(
                self.config.config.plugins.result_limits,
                self.registry.library_sha256(selected).as_deref(),
            ),
            resolution: Resolution {
                selected: selected.to_owned(),
                resolved: selected.to_owned(),
                reason: None,
                fallback: None,
            },
        })
    }

    /// The cached instance of `id`, creating it on first use. Errors carry the quarantine
    /// operation (`factory` or `contract-validation`) and reason.
    fn instance(
        &self,
        id: &str,
        registration: &Registration,
    ) -> Result<Arc<EngineInstance>, (&'static str, String)> {
        let stale = {
            let instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            match instances.get(id) {
                Some((generation, instance)) if *generation == registration.generation => {
                    return Ok(Arc::clone(instance));
                }
                Some((_, instance)) => Some(Arc::clone(instance)),
                None => None,
            }
        };
        if let Some(old) = stale {
            // Re-registered since: the old instance is done with.
            self.dispose_bounded(&old);
        }
        // The factory (and the `info` it answers) is plugin code: bounded like any call, and
        // run without holding the instance lock so other operations are not held up.
        let services = self.services_for(id);
        let dirs = self.dirs.clone();
        let created: Box<dyn FnOnce() -> Result<EngineInstance, EngineCallError> + Send> =
            match &registration.factory {
                EngineFactory::Native(make) => {
                    let make = Arc::clone(make);
                    let config = self.config.config.entry_config(id);
                    Box::new(move || {
                        make(&FactoryInput {
                            config: &config,
                            dirs: &dirs,
                            services,
                        })
                    })
                }
                EngineFactory::Plugin { library, engine_id } => {
                    let plugin_id = library.manifest().id.clone();
                    let entries = &self.config.config.plugins.entries;
                    // Keyed by plugin id; an engine's own id is accepted for engines of
                    // multi-engine libraries.
                    let config = if entries.contains_key(&plugin_id) || !entries.contains_key(id) {
                        self.config.config.entry_config(&plugin_id)
                    } else {
                        self.config.config.entry_config(id)
                    };
                    if let Err(err) = library.manifest().validate_config(&config) {
                        return Err(("factory", err.to_string()));
                    }
                    // A crash in the factory is remembered like one in any call.
                    let trust = CallTrust {
                        tag: Some(JournalTag::new(id, Some(library.sha256()))),
                        ..CallTrust::default()
                    };
                    let library = Arc::clone(library);
                    let engine_id = engine_id.clone();
                    Box::new(move || {
                        let _in_call = trust.enter(Method::Factory);
                        EngineInstance::from_library(
                            &library,
                            &engine_id,
                            &config,
                            &dirs,
                            services.into_abi(),
                        )
                    })
                }
            };
        let window = self.timeouts().calls.for_method(Method::Factory);
        let instance = match bounded::run(
            Deadline::new(window),
            Arc::new(AbortController::new()),
            created,
        ) {
            Ok(created) => created.map_err(|err| ("factory", err.message))?,
            Err(Overrun::TimedOut { waited }) => {
                return Err((
                    "factory",
                    format!(
                        "the engine factory timed out after {} ms",
                        waited.as_millis()
                    ),
                ))
            }
            Err(Overrun::Aborted) => {
                return Err(("factory", "the engine factory was aborted".into()))
            }
        };
        validate_contract(id, &instance).map_err(|reason| ("contract-validation", reason))?;
        if let EngineFactory::Plugin { library, .. } = &registration.factory {
            let manifest = library.manifest();
            let reported = instance.descriptor().host_requirements.clone();
            if manifest.host_requirements_declared && reported != manifest.host_requirements {
                // `list`, `inspect` and `doctor --fix` trust the manifest without loading the
                // library: an engine that says otherwise is not used.
                let render = |r: &HostRequirements| {
                    serde_json::to_string(r).unwrap_or_else(|_| "?".to_owned())
                };
                self.dispose_bounded(&Arc::new(instance));
                return Err((
                    "contract-validation",
                    format!(
                        "Context engine \"{id}\" reports hostRequirements {} but the manifest of plugin \"{}\" declares {}: make them equal (`pincer plugins pack` writes the manifest from the built library)",
                        render(&reported),
                        manifest.id,
                        render(&manifest.host_requirements)
                    ),
                ));
            }
        }
        let instance = Arc::new(instance);
        let mut instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        match instances.get(id) {
            // Another operation created it meanwhile: keep one instance per registration.
            Some((generation, existing)) if *generation == registration.generation => {
                let existing = Arc::clone(existing);
                drop(instances);
                self.dispose_bounded(&instance);
                Ok(existing)
            }
            _ => {
                instances.insert(
                    id.to_owned(),
                    (registration.generation, Arc::clone(&instance)),
                );
                Ok(instance)
            }
        }
    }

    /// `dispose` of one instance under the cleanup deadline; a stall or failure is logged.
    fn dispose_bounded(&self, instance: &Arc<EngineInstance>) {
        let window = self.timeouts().calls.for_method(Method::Dispose);
        let engine = Arc::clone(instance);
        let id = instance.descriptor().id.clone();
        match bounded::run(
            Deadline::new(window),
            Arc::new(AbortController::new()),
            move || engine.dispose(),
        ) {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(engine_id = %id, error = %err, "context engine dispose failed")
            }
            Err(overrun) => tracing::warn!(
                engine_id = %id,
                outcome = ?overrun,
                "context engine dispose stalled; continuing without it"
            ),
        }
    }

    /// Disposes every engine instance once (legacy included) and forgets them. Each
    /// `dispose` runs under the cleanup deadline (10 s by default); a stall is logged and left
    /// behind, never waited for, so a hung plugin cannot block shutdown.
    pub fn shutdown(&self) {
        let instances: Vec<Arc<EngineInstance>> = {
            let mut map = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *map)
                .into_values()
                .map(|(_, i)| i)
                .collect()
        };
        for instance in instances.iter().chain(std::iter::once(&self.legacy)) {
            self.dispose_bounded(instance);
        }
        if let Some(journal) = crate::engines::crash_journal::global() {
            journal.retire_abandoned();
        }
    }
}
