//! [`Runtime`]: the library's front door. It reads the home and its config, registers
//! `legacy`, discovers and loads plugins (each through every verification step), and resolves
//! the configured engine for an operation (docs/CONTRACT.md §3.4): disabled or denied plugins give
//! `legacy` silently with the slot kept; an unregistered or failing engine is quarantined and
//! `legacy` answers (or, with the strict policy, the operation fails).
//!
//! Engine instances are created once per id and reused across operations; `dispose` runs once
//! per instance, when a replaced one has drained or at [`Runtime::shutdown`]. The runtime
//! creates them (factory, contract validation, host requirements) and restarts an isolated
//! engine whose worker died (`slot::restart` has the policy); their table, generations,
//! retirement and restart counts are its `Generations` (`slot::generations`). Hot reload
//! (`slot::reload`) works through the methods here, not the fields.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::config::{ConfigError, DisabledBy, FallbackPolicy, Isolation, LoadedConfig, PincerHome};
use crate::engines::bounded::{self, Deadline, Overrun};
use crate::engines::crash_journal::JournalTag;
use crate::engines::instance::{EngineCallError, EngineInstance};
use crate::engines::legacy::create_legacy;
use crate::engines::services::{HostServices, ModelClient, NoRuntimeCompaction, RuntimeCompactor};
use crate::plugins::catalog::plugin_roots;
use crate::plugins::discovery::discover_plugin_dirs;
use crate::plugins::library::{EngineDirs, LoadedLibrary, Loader, VerifiedPlugin};
use crate::plugins::manifest::PluginManifest;
use crate::slot::contract::CallTrust;
use crate::slot::generations::{dispose_within, Generations};
use crate::slot::guarded::{GuardedEngine, Timeouts};
use crate::slot::quarantine::Quarantine;
use crate::slot::registry::{
    validate_contract, EngineClaims, EngineFactory, FactoryInput, Lifecycle, Pinning,
    RegisterOptions, Registration, Registry,
};
use crate::slot::requirements::HostDescriptor;
use crate::slot::restart::{RestartPolicy, RestartStatus};
use crate::slot::runtime_settings::{build_runtime_settings, Reason, RuntimeSettingsInput};
use crate::slot::suggest::Suggestion;
use crate::types::{HostRequirements, Method, Owner, LEGACY_ENGINE_ID};
use pincer_plugin_abi::latest::AbortController;
use pincer_plugin_abi::latest::{ReasonCode, RuntimeSettings, SelectionSource};

/// The quarantine reason of an engine no plugin registered (docs/CONTRACT.md §3.4.4); the list of
/// available engines goes to the diagnostic, not the record.
pub const NOT_REGISTERED: &str = "not registered";

/// The step of setting an engine up that failed: the quarantine record's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetupStep {
    /// Resolving the slot's engine id (`resolve`): no plugin registered it.
    Resolve,
    /// The engine's factory or the `info` it answers (`factory`), bounded.
    Factory,
    /// What the new instance says of itself (`contract-validation`): its `info`, its host
    /// requirements against its manifest's.
    ContractValidation,
}

impl SetupStep {
    /// `resolve`, `factory` or `contract-validation`, as quarantine records and reload
    /// refusals name it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            SetupStep::Resolve => "resolve",
            SetupStep::Factory => "factory",
            SetupStep::ContractValidation => "contract-validation",
        }
    }
}

impl std::fmt::Display for SetupStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Why an engine instance could not be created: the failing step and what went wrong.
#[derive(Debug)]
pub(crate) struct SetupFailure {
    /// The step.
    pub(crate) step: SetupStep,
    /// What went wrong, for the quarantine record and the operator.
    pub(crate) reason: String,
}

impl SetupFailure {
    fn new(step: SetupStep, reason: impl Into<String>) -> Self {
        SetupFailure {
            step,
            reason: reason.into(),
        }
    }
}

/// How a runtime is opened.
pub struct RuntimeOptions {
    /// The home.
    pub home: PincerHome,
    /// Extra plugin folders (`--plugins-dir`), searched after the home's and the config's.
    pub extra_plugin_dirs: Vec<PathBuf>,
    /// The runtime's compaction; `None`: no summarisation model.
    pub compactor: Option<Arc<dyn RuntimeCompactor>>,
    /// The model engines' `llmComplete` reaches; `None`: engines are told there is none.
    pub model: Option<Arc<dyn ModelClient>>,
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
            model: None,
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
    /// The config in force; [`Runtime::reload_config`] swaps it.
    config: RwLock<Arc<LoadedConfig>>,
    registry: Registry,
    quarantine: Arc<Quarantine>,
    plugins: RwLock<Vec<PluginStatus>>,
    compactor: Arc<dyn RuntimeCompactor>,
    model: Option<Arc<dyn ModelClient>>,
    dirs: EngineDirs,
    legacy: Arc<EngineInstance>,
    missing_plugin_dirs: Vec<PathBuf>,
    /// `--plugins-dir` folders, searched again by reloads.
    extra_plugin_dirs: Vec<PathBuf>,
    /// The instances served, their generations, retired instances, kept libraries and
    /// restarts.
    generations: Generations,
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
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use pincer_host::{PincerHome, Runtime, RuntimeOptions};
    ///
    /// # fn main() -> Result<(), pincer_host::ConfigError> {
    /// let runtime = Runtime::open(RuntimeOptions::new(PincerHome::resolve(None)))?;
    /// for plugin in runtime.plugins() {
    ///     println!("{} {}", plugin.id, plugin.status);
    /// }
    /// runtime.shutdown();
    /// # Ok(()) }
    /// ```
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
                options.model.clone(),
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
        let cleanup = config
            .config
            .plugins
            .call_timeouts_ms
            .for_method(Method::Dispose);
        let mut runtime = Runtime {
            home: options.home,
            config: RwLock::new(Arc::new(config)),
            registry,
            quarantine,
            plugins: RwLock::new(Vec::new()),
            compactor,
            model: options.model,
            dirs,
            legacy,
            missing_plugin_dirs: Vec::new(),
            extra_plugin_dirs: options.extra_plugin_dirs.clone(),
            generations: Generations::new(cleanup),
            open_libraries: options.open_libraries,
        };
        // Crashes of earlier processes are read first: a library whose own code took one down
        // while it was opened or at exit is not opened again. This process is journaled from
        // here on, the opening of its libraries included.
        let state_dir = runtime.home.state_dir();
        crate::slot::quarantine::harvest_crashes(&state_dir);
        crate::engines::crash_journal::open_global(&state_dir);
        runtime.load_plugins(&options.extra_plugin_dirs);
        // Engines that took an earlier process down stay quarantined (until cleared, or until
        // their library changes).
        runtime
            .quarantine
            .recall_crashes(&state_dir, |id| runtime.registry.library_sha256(id));
        runtime
    }

    /// Every folder searched for plugins, in order.
    pub fn plugin_roots(&self, extra: &[PathBuf]) -> Vec<PathBuf> {
        plugin_roots(&self.home, &self.config().config, extra)
            .into_iter()
            .map(|root| root.path)
            .collect()
    }

    fn plugin_allowed(&self, plugin_id: &str) -> Result<(), DisabledBy> {
        match self.config().config.plugin_disabled_by(plugin_id) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    fn load_plugins(&mut self, extra: &[PathBuf]) {
        let loader = self.loader();
        let roots = self.plugin_roots(extra);
        // The home's own plugins folder may well not exist; a folder someone named should.
        self.missing_plugin_dirs = roots
            .iter()
            .skip(1)
            .filter(|root| !root.is_dir())
            .cloned()
            .collect();
        let dirs = discover_plugin_dirs(&roots);
        let claims = self.engine_claims(&loader, &dirs);
        for dir in dirs {
            let status = self.load_one(&loader, &dir, &claims);
            self.record_loaded(&status);
            self.plugins_mut().push(status);
        }
    }

    /// The loader, with the sha256 each installed plugin was pinned to at install: a library
    /// changed on disk since is refused before it is opened (also on reload: an installed
    /// plugin is replaced by installing it again).
    pub(super) fn loader(&self) -> Loader {
        let config = self.config();
        let entries = &config.config.plugins.entries;
        let loader = if config.config.plugins.probe_libraries == Some(false) {
            Loader::new(self.home.cache_dir())
        } else {
            Loader::new(self.home.cache_dir())
                .with_probe(crate::engines::isolation::process::library_probe(entries))
        };
        loader
            .with_installed_pins(
                entries
                    .iter()
                    .filter_map(|(id, entry)| Some((id.clone(), entry.sha256.clone()?))),
            )
            .with_isolation(
                crate::config::Isolation::default_from_env(),
                entries
                    .iter()
                    .filter_map(|(id, entry)| Some((id.clone(), entry.isolation?))),
            )
            .with_unload_on_reload(
                entries
                    .iter()
                    .filter(|(_, entry)| entry.unload_on_reload)
                    .map(|(id, _)| id.clone()),
            )
    }

    /// Every enabled plugin's engine ids among `dirs`, from manifests alone, before any
    /// library opens; a plugin with a recorded sha256 (`plugins.entries.<id>.sha256`) is
    /// pinned, and keeps the ids it claims against unpinned newcomers.
    pub(super) fn engine_claims(&self, loader: &Loader, dirs: &[PathBuf]) -> EngineClaims {
        let mut claims = EngineClaims::default();
        let config = self.config();
        let pinning = |id: &str| {
            let recorded = config
                .config
                .plugins
                .entries
                .get(id)
                .is_some_and(|e| e.sha256.is_some());
            if recorded {
                Pinning::Pinned
            } else {
                Pinning::Unpinned
            }
        };
        for manifest in dirs
            .iter()
            .filter_map(|d| loader.read_checked_manifest(d).ok())
        {
            if self.plugin_allowed(&manifest.id).is_ok() {
                claims.claim(
                    &manifest.id,
                    &manifest.context_engine_ids,
                    pinning(&manifest.id),
                );
            }
        }
        claims
    }

    /// What is checked of a plugin before its library is opened, beyond the manifest itself:
    /// its engine ids are its own (`claims`), and its files cannot be changed by others (unless
    /// `trustInsecurePermissions` overrides it: then a warning). On load and on reload.
    pub(super) fn admit(
        &self,
        manifest: &PluginManifest,
        claims: &EngineClaims,
    ) -> Result<Vec<String>, PluginProblem> {
        let problem = |code: &str, message: String| PluginProblem {
            code: code.to_owned(),
            message,
        };
        if let Err(refusal) = claims.check(&manifest.id, &manifest.context_engine_ids) {
            tracing::error!(plugin = %manifest.id, code = refusal.code, "{}", refusal.message);
            return Err(problem(refusal.code, refusal.message));
        }
        let trust_override = self
            .config()
            .config
            .plugins
            .entries
            .get(&manifest.id)
            .is_some_and(|e| e.trust_insecure_permissions);
        match crate::plugins::permissions::check_manifest_plugin(manifest) {
            Err(err) if !trust_override => {
                tracing::error!(plugin = %manifest.id, "{err}");
                Err(problem(err.code(), err.to_string()))
            }
            Err(err) => Ok(vec![format!(
                "loaded although its files are unsafe, because plugins.entries.{}.trustInsecurePermissions is true: {}",
                manifest.id,
                err.problems
                    .iter()
                    .map(|p| format!("{} is {}", p.path.display(), p.problem))
                    .collect::<Vec<_>>()
                    .join("; ")
            )]),
            Ok(()) => Ok(Vec::new()),
        }
    }

    /// Opens a verified plugin's library (steps 5 and on of [`Loader::load_verified`]),
    /// journaled: in process, the opening (`dlopen`, its constructors) is marked in the crash
    /// journal, and the opened library is listed there with its code's address ranges, so that
    /// a crash in its code outside any call is attributed to it. A library whose own code took
    /// an earlier process down while it was opened or at exit is refused (`library_crashed_host`)
    /// until `pincer health --clear` or until it changes.
    pub(super) fn open_verified(
        &self,
        loader: &Loader,
        plugin: VerifiedPlugin,
    ) -> Result<Arc<LoadedLibrary>, PluginProblem> {
        let in_process = loader.isolation_of(&plugin.manifest.id) != Isolation::Process;
        let sha256 = plugin.verified.sha256_hex.clone();
        let engine_id = plugin
            .manifest
            .context_engine_ids
            .first()
            .cloned()
            .unwrap_or_else(|| plugin.manifest.id.clone());
        if in_process {
            if let Some(record) = self.quarantine.library_crash(&sha256) {
                let message = format!(
                    "library {} of plugin \"{}\" is not opened: {} (recorded for engine \"{}\"); `pincer health --clear` lets it be opened again once it is fixed, as does a changed library",
                    plugin.library.display(),
                    plugin.manifest.id,
                    record.reason,
                    record.engine_id,
                );
                tracing::error!(plugin = %plugin.manifest.id, "{message}");
                return Err(PluginProblem {
                    code: "library_crashed_host".to_owned(),
                    message,
                });
            }
        }
        let tag = JournalTag::new(&engine_id, Some(&sha256));
        let journal = in_process
            .then(crate::engines::crash_journal::global)
            .flatten();
        let loading = journal.map(|journal| journal.enter_loading(&tag));
        let library = loader.load_verified(plugin).map_err(|err| PluginProblem {
            code: err.code().to_owned(),
            message: err.to_string(),
        })?;
        drop(loading);
        if let Some(journal) = journal.filter(|_| !library.is_isolated()) {
            if let Some(index) = journal.library_loaded(&tag) {
                crate::engines::fatal_signal::watch_library(library.copy_path(), index);
            }
        }
        Ok(library)
    }

    pub(super) fn load_one(
        &self,
        loader: &Loader,
        dir: &Path,
        claims: &EngineClaims,
    ) -> PluginStatus {
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
        // The first folder with an id is the one used, whether its library was opened
        // (`loaded`) or only checked (`verified`, `pincer doctor` without `--load`).
        if let Some(other) = self.plugins_read().iter().find(|p| {
            p.id == status.id
                && p.dir != dir
                && matches!(p.status, PluginState::Loaded | PluginState::Verified)
        }) {
            status.error = problem(
                "duplicate_plugin",
                format!(
                    "plugin id \"{}\" is already used from {}, so this folder ({}) is refused: remove one of the two folders",
                    status.id,
                    other.dir.display(),
                    dir.display()
                ),
            );
            return status;
        }
        if let Err(why) = self.plugin_allowed(&status.id) {
            status.status = PluginState::Disabled;
            status.error = problem(
                "disabled",
                format!("not loaded: {}", why.for_plugin(&status.id)),
            );
            return status;
        }
        match self.admit(&manifest, claims) {
            Ok(warnings) => status.warnings.extend(warnings),
            Err(refusal) => {
                status.error = Some(refusal);
                return status;
            }
        }
        if self.open_libraries == OpenLibraries::Selected
            && !status
                .declared_engines
                .iter()
                .any(|e| e == self.config().config.selected_engine())
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
        let opened = loader
            .verify(dir)
            .map_err(|err| PluginProblem {
                code: err.code().to_owned(),
                message: err.to_string(),
            })
            .and_then(|verified| self.open_verified(loader, verified));
        let library: Arc<LoadedLibrary> = match opened {
            Ok(library) => library,
            Err(refusal) => {
                status.error = Some(refusal);
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

    /// The configuration in force (a snapshot: [`Runtime::reload_config`] may replace it).
    pub fn config(&self) -> Arc<LoadedConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// What became of each discovered plugin, in discovery order (a snapshot: a reload may
    /// change it).
    pub fn plugins(&self) -> Vec<PluginStatus> {
        self.plugins_read().clone()
    }

    pub(super) fn plugins_read(&self) -> std::sync::RwLockReadGuard<'_, Vec<PluginStatus>> {
        self.plugins.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn plugins_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<PluginStatus>> {
        self.plugins.write().unwrap_or_else(|e| e.into_inner())
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

    /// What an isolated engine's worker applies to itself: the entry's `limits` and
    /// `sandbox`, and the directories it may write (its state and workspace directories).
    fn confinement_of(
        &self,
        plugin_id: &str,
        dirs: &crate::plugins::library::EngineDirs,
        engine_id: &str,
    ) -> crate::engines::isolation::settings::Confinement {
        let config = self.config();
        let entry = config.config.plugins.entries.get(plugin_id);
        let mut writable_dirs: Vec<PathBuf> =
            dirs.engine_state_dir(engine_id).into_iter().collect();
        writable_dirs.extend(dirs.workspace_dir.as_ref().map(PathBuf::from));
        crate::engines::isolation::settings::Confinement::of_entry(entry, writable_dirs)
    }

    fn services_for(&self, engine_id: &str) -> HostServices {
        HostServices::new(engine_id, Arc::clone(&self.compactor), self.model.clone())
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
            self.config().config.engine_is_configured() && resolution.selected != LEGACY_ENGINE_ID;
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
                .map(|_| Reason::Code(ReasonCode::RuntimeUnavailable)),
            ..Default::default()
        }))
    }

    /// The call deadlines from the config.
    pub fn timeouts(&self) -> Timeouts {
        let config = self.config();
        let config = &config.config;
        Timeouts {
            calls: config.plugins.call_timeouts_ms.clone(),
            compact: config.agents.defaults.compaction.timeout(),
        }
    }

    pub(super) fn legacy_guarded(&self) -> GuardedEngine {
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
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use pincer_host::{PincerHome, Runtime, RuntimeOptions};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = Runtime::open(RuntimeOptions::new(PincerHome::resolve(None)))?;
    /// let resolved = runtime.resolve()?;
    /// println!("{} answers", resolved.resolution.resolved);
    /// # Ok(()) }
    /// ```
    pub fn resolve(&self) -> Result<ResolvedEngine, ResolveError> {
        let selected = self.config().config.selected_engine().to_owned();
        self.resolve_id(&selected)
    }

    /// Resolves engine `selected` for one operation, as if the slot named it.
    ///
    /// # Errors
    /// Strict policy with an unusable engine.
    pub fn resolve_id(&self, selected: &str) -> Result<ResolvedEngine, ResolveError> {
        let policy = self.config().config.plugins.context_engine_fallback;
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
            .plugins_read()
            .iter()
            .find(|p| p.declared_engines.iter().any(|e| e == selected) || p.id == selected)
            .cloned();
        let owner_plugin = registration
            .as_ref()
            .and_then(|r| r.owner.plugin_id().map(str::to_owned))
            .or_else(|| declaring.as_ref().map(|p| p.id.clone()));
        if let Some(plugin_id) = &owner_plugin {
            if let Err(why) = self.plugin_allowed(plugin_id) {
                // Disabled or denied: legacy, silently; the slot is kept; no factory call.
                return Ok(to_legacy(
                    Some(Fallback::Disabled),
                    Some(format!(
                        "plugin \"{plugin_id}\" {}",
                        why.for_plugin(plugin_id)
                    )),
                ));
            }
        } else if self.config().config.plugins.enabled == Some(false) {
            return Ok(to_legacy(
                Some(Fallback::Disabled),
                Some(DisabledBy::PluginsOff.to_string()),
            ));
        }
        if self.quarantine.get(selected).is_some() {
            // An isolated engine whose worker died comes back as a new worker after its
            // backoff (which clears its quarantine).
            self.restart_dead_worker(selected);
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
                    step: SetupStep,
                    owner: Option<&Owner>,
                    reason: &str,
                    diagnostic: String| {
            if policy == FallbackPolicy::Strict {
                return Err(ResolveError::Strict {
                    message: diagnostic,
                });
            }
            self.quarantine
                .record(selected, owner, step.as_str(), reason);
            Ok(to_legacy(Some(fallback), Some(diagnostic)))
        };
        let Some(registration) = registration else {
            // Registered engines, and those of plugins verified but not opened by this command.
            let mut available = self.registry.ids();
            available.extend(
                self.plugins_read()
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
                SetupStep::Resolve,
                None,
                NOT_REGISTERED,
                format!(
                    "Context engine \"{selected}\" is not registered{why}. Available engines: {}{}",
                    if available.is_empty() {
                        "(none)".to_owned()
                    } else {
                        available.join(", ")
                    },
                    Suggestion::nearest(selected, &available)
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
        let (generation, instance) = match self.instance(selected, &registration) {
            Ok(found) => found,
            Err(SetupFailure { step, reason }) => {
                return fail(
                    Fallback::Failed,
                    step,
                    Some(&owner),
                    &reason,
                    reason.clone(),
                )
            }
        };
        // An isolated engine's calls are not journaled: its crash is its worker's, not the
        // host's, and the host dying mid-call is no evidence against it.
        let journaled_sha256 = if instance.worker().is_some() {
            None
        } else {
            self.registry.library_sha256(selected)
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
            .with_generation(generation)
            .with_trust(
                self.config().config.plugins.result_limits,
                journaled_sha256.as_deref(),
            ),
            resolution: Resolution {
                selected: selected.to_owned(),
                resolved: selected.to_owned(),
                reason: None,
                fallback: None,
            },
        })
    }

    /// The current instance of `id` and its generation, creating it on first use. An error
    /// names the failing step (`factory` or `contract-validation`) and why.
    fn instance(
        &self,
        id: &str,
        registration: &Registration,
    ) -> Result<(u64, Arc<EngineInstance>), SetupFailure> {
        // An instance from this registration or a newer one (a reload swapped it in after
        // this operation read the registry) is the one to use.
        if let Some(found) = self
            .generations
            .instances()
            .current(id, registration.generation)
        {
            return Ok(found);
        }
        let config = self.config();
        let instance = Arc::new(self.create_instance(id, &registration.factory, &config.config)?);
        let mut instances = self.generations.instances();
        match instances.current(id, registration.generation) {
            // Another operation created it meanwhile: keep one instance per registration.
            Some(existing) => {
                drop(instances);
                self.dispose_bounded(&instance);
                Ok(existing)
            }
            None => {
                // A stale instance (re-registered since) is retired: disposed once no call
                // holds it any more, never under a call in flight.
                let generation = instances.install(id, registration.generation, &instance);
                Ok((generation, instance))
            }
        }
    }

    /// Creates an instance of `id` from `factory` with `config`'s entry for it: the factory
    /// and the `info` it answers run bounded, then contract validation and the manifest's
    /// host requirements. An error names the failing step and why.
    pub(super) fn create_instance(
        &self,
        id: &str,
        factory: &EngineFactory,
        config: &crate::config::Config,
    ) -> Result<EngineInstance, SetupFailure> {
        // The factory (and the `info` it answers) is plugin code: bounded like any call, and
        // run without holding the instance lock so other operations are not held up.
        let services = self.services_for(id);
        let dirs = self.dirs.clone();
        let limits = config.plugins.result_limits;
        let created: Box<dyn FnOnce() -> Result<EngineInstance, EngineCallError> + Send> =
            match factory {
                EngineFactory::Native(make) => {
                    let make = Arc::clone(make);
                    let config = factory.entry_config(config, id);
                    Box::new(move || {
                        make(&FactoryInput {
                            config: &config,
                            dirs: &dirs,
                            services,
                        })
                    })
                }
                EngineFactory::Plugin { library, engine_id } => {
                    let config = factory.entry_config(config, id);
                    if let Err(err) = library.manifest().validate_config(&config) {
                        return Err(SetupFailure::new(SetupStep::Factory, err.to_string()));
                    }
                    // A crash in the factory is remembered like one in any call.
                    let trust = CallTrust {
                        tag: Some(JournalTag::new(id, Some(library.sha256()))),
                        ..CallTrust::default()
                    };
                    let library = Arc::clone(library);
                    let engine_id = engine_id.clone();
                    if library.is_isolated() {
                        // Nothing runs here: a crash of the worker is not the host's.
                        let confinement =
                            self.confinement_of(&library.manifest().id, &dirs, &engine_id);
                        Box::new(move || {
                            EngineInstance::from_isolated_library(
                                &library,
                                &engine_id,
                                &config,
                                &dirs,
                                services.into_abi(),
                                confinement,
                                &limits,
                            )
                        })
                    } else {
                        Box::new(move || {
                            let _in_call = trust.enter(Method::Factory);
                            EngineInstance::from_library(
                                &library,
                                &engine_id,
                                &config,
                                &dirs,
                                services.into_abi(),
                                &limits,
                            )
                        })
                    }
                }
            };
        let window = self.timeouts().calls.for_method(Method::Factory);
        let deadline = Deadline::new(window);
        let abort = Arc::new(AbortController::new());
        let outcome = match factory {
            // A library closed after reload runs its code only on threads that end with the
            // call.
            EngineFactory::Plugin { library, .. } if library.unloads() => {
                bounded::run_on_own_thread(deadline, abort, Arc::clone(library), created)
            }
            _ => bounded::run(deadline, abort, created),
        };
        let instance = match outcome {
            Ok(created) => {
                created.map_err(|err| SetupFailure::new(SetupStep::Factory, err.message))?
            }
            Err(Overrun::TimedOut { waited }) => {
                return Err(SetupFailure::new(
                    SetupStep::Factory,
                    format!(
                        "the engine factory timed out after {} ms",
                        waited.as_millis()
                    ),
                ))
            }
            Err(Overrun::Aborted) => {
                return Err(SetupFailure::new(
                    SetupStep::Factory,
                    "the engine factory was aborted",
                ))
            }
        };
        validate_contract(id, &instance)
            .map_err(|reason| SetupFailure::new(SetupStep::ContractValidation, reason))?;
        if let EngineFactory::Plugin { library, .. } = factory {
            let manifest = library.manifest();
            let reported = instance.descriptor().host_requirements.clone();
            if manifest.host_requirements_declared && reported != manifest.host_requirements {
                // `list`, `inspect` and `doctor --fix` trust the manifest without loading the
                // library: an engine that says otherwise is not used.
                let render = |r: &HostRequirements| {
                    serde_json::to_string(r).unwrap_or_else(|_| "?".to_owned())
                };
                self.dispose_bounded(&Arc::new(instance));
                return Err(SetupFailure::new(
                    SetupStep::ContractValidation,
                    format!(
                        "Context engine \"{id}\" reports hostRequirements {} but the manifest of plugin \"{}\" declares {}: make them equal (`pincer plugins pack` writes the manifest from the built library)",
                        render(&reported),
                        manifest.id,
                        render(&manifest.host_requirements)
                    ),
                ));
            }
        }
        Ok(instance)
    }

    /// `dispose` of one instance under the cleanup deadline; a stall or failure is logged.
    pub(super) fn dispose_bounded(&self, instance: &Arc<EngineInstance>) {
        dispose_within(instance, self.timeouts().calls.for_method(Method::Dispose));
    }

    /// The instances served and their generations (for `reload`).
    pub(super) fn gens(&self) -> &Generations {
        &self.generations
    }

    /// `--plugins-dir` folders the runtime was opened with (reloads search them again).
    pub(super) fn extra_plugin_dirs(&self) -> &[PathBuf] {
        &self.extra_plugin_dirs
    }

    /// Puts `config` in force (a config reload).
    pub(super) fn set_config(&self, config: LoadedConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
    }

    /// Records the content hash of a plugin just loaded, so that a reload of unchanged files
    /// does nothing.
    pub(super) fn record_loaded(&self, status: &PluginStatus) {
        if status.status != PluginState::Loaded {
            return;
        }
        if let Some(sha256) = &status.sha256 {
            self.generations.loaded(&status.id, &status.dir, sha256);
        }
    }

    /// The restart policy of `engine_id`: its plugin's entry's `maxRestarts` and
    /// `restartBackoffMs`, or the defaults.
    fn restart_policy(&self, engine_id: &str) -> RestartPolicy {
        let config = self.config();
        let plugin = self
            .registry
            .get(engine_id)
            .and_then(|r| r.owner.plugin_id().map(str::to_owned));
        RestartPolicy::of_entry(plugin.and_then(|p| config.config.plugins.entries.get(&p)))
    }

    /// When the current instance of `engine_id` is an isolated engine whose worker died and
    /// its backoff has passed, starts a new worker as a new generation and clears the
    /// quarantine (see `slot::restart`); returns whether it did.
    fn restart_dead_worker(&self, engine_id: &str) -> bool {
        let Some(death) = self.generations.worker_death(engine_id) else {
            return false;
        };
        if !self
            .generations
            .restart_due(engine_id, self.restart_policy(engine_id))
        {
            return false;
        }
        let Some(registration) = self.registry.get(engine_id) else {
            return false;
        };
        let config = self.config();
        match self.create_instance(engine_id, &registration.factory, &config.config) {
            Ok(instance) => {
                let instance = Arc::new(instance);
                let generation = self.generations.instances().install(
                    engine_id,
                    registration.generation,
                    &instance,
                );
                self.quarantine.clear(Some(engine_id));
                self.generations.bump();
                tracing::warn!(
                    engine_id,
                    generation,
                    previous = %death,
                    "restarted the engine worker as a new generation"
                );
                true
            }
            Err(SetupFailure { step, reason }) => {
                tracing::error!(engine_id, step = step.as_str(), %reason, "the engine worker could not be restarted");
                false
            }
        }
    }

    /// The restarts of every isolated engine that had one, or is out of them.
    pub fn worker_restarts(&self) -> Vec<RestartStatus> {
        self.generations
            .restart_statuses(|engine_id| self.restart_policy(engine_id))
    }

    /// Disposes every engine instance once (legacy included) and forgets them: the current
    /// generation of each engine and every retired one not disposed yet. Each `dispose` runs
    /// under the cleanup deadline (10 s by default); a stall is logged and left behind, never
    /// waited for, so a hung plugin cannot block shutdown. Callers finish their calls first
    /// (the gateway does): shutdown is the end of every generation.
    pub fn shutdown(&self) {
        let instances = self.generations.take_current();
        for instance in instances.iter().chain(std::iter::once(&self.legacy)) {
            self.dispose_bounded(instance);
        }
        if let Some(journal) = crate::engines::crash_journal::global() {
            journal.retire_abandoned();
        }
        self.generations.shutdown();
    }
}
