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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::runtime::{Cached, PluginState, PluginStatus, Runtime};
use crate::config::{Config, ConfigError, LoadedConfig};
use crate::engines::bounded::{self, Deadline};
use crate::engines::instance::EngineInstance;
use crate::plugins::discovery::discover_plugin_dirs;
use crate::plugins::library::{LoadedLibrary, UnloadState, UnloadWatch};
use crate::plugins::MANIFEST_FILE_NAME;
use crate::slot::guarded::{GuardedEngine, FIRST_GENERATION};
use crate::slot::registry::EngineFactory;
use crate::slot::source::EngineSource;
use crate::types::{Method, LEGACY_ENGINE_ID};
use pincer_plugin_api::abi::latest::AbortController;

/// How often the reaper looks at retired instances that calls still hold.
const REAP_INTERVAL: Duration = Duration::from_millis(5);

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

/// Per engine: the generation serving and what older ones still cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationStatus {
    /// The engine id.
    pub engine_id: String,
    /// The plugin that registered it (`None` for engines linked into the host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_id: Option<String>,
    /// The current generation; 0 when no instance was created yet (it is created on first
    /// use, or by a reload).
    pub generation: u64,
    /// Replaced instances that calls still hold: disposed as soon as the last call ends.
    pub draining: usize,
    /// Old builds of its library still mapped: kept by default for the life of the process;
    /// with `unloadOnReload`, until nothing from them is alive (see `unloading`, `pinned`).
    pub kept_generations: usize,
    /// Their size on disk, in bytes (the private copies that are mapped).
    pub kept_bytes: u64,
    /// The worker process of the current generation, for an isolated engine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<crate::engines::backend::WorkerInfo>,
    /// Of the kept ones, `unloadOnReload` builds still open: something from them (an
    /// instance a call or guard holds, a rollback handle) is alive; closed when it is dropped.
    pub unloading: usize,
    /// Of the kept ones, `unloadOnReload` builds closed but still mapped by the dynamic
    /// loader: a thread-local destructor they registered is pending on a running thread.
    pub pinned: usize,
    /// Old builds closed and unmapped (`unloadOnReload`).
    pub unloaded_generations: usize,
}

/// Why a reload was refused. The old generation (or config) keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// No plugin with this id was discovered.
    #[error("no plugin \"{plugin_id}\" is known to this runtime (known: {}): check the id with `pincer plugins list`", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
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

/// An instance replaced while calls may still hold it.
struct Retired {
    engine_id: String,
    generation: u64,
    instance: Arc<EngineInstance>,
}

/// The retired instances and the reaper's controls.
struct Retirement {
    queue: Mutex<Vec<Retired>>,
    wake: Condvar,
    stop: AtomicBool,
    /// The cleanup deadline of `dispose`, in milliseconds (follows the config).
    cleanup_ms: AtomicU64,
}

impl Retirement {
    fn cleanup(&self) -> Duration {
        Duration::from_millis(self.cleanup_ms.load(Ordering::Relaxed))
    }

    /// The reaper: disposes each retired instance once only the queue holds it.
    fn reap(self: Arc<Self>) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            // Nothing but the queue holds it, and nothing can take a new reference: it is
            // neither in the instance cache nor in a guard any more.
            let (free, held): (Vec<Retired>, Vec<Retired>) = std::mem::take(&mut *queue)
                .into_iter()
                .partition(|r| Arc::strong_count(&r.instance) == 1);
            *queue = held;
            if !free.is_empty() {
                drop(queue);
                for retired in free {
                    match retired.instance.closable_library().cloned() {
                        Some(library) => release_within(retired, library, self.cleanup()),
                        None => {
                            dispose_within(&retired.instance, self.cleanup());
                            tracing::info!(
                                engine_id = %retired.engine_id,
                                generation = retired.generation,
                                "retired context engine generation disposed"
                            );
                        }
                    }
                }
                queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            queue = if queue.is_empty() {
                self.wake.wait(queue).unwrap_or_else(|e| e.into_inner())
            } else {
                self.wake
                    .wait_timeout(queue, REAP_INTERVAL)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            };
        }
    }
}

/// Disposes and drops the retired instance of a closable library (`unloadOnReload`) on a
/// thread of its own that ends, waits for that thread to exit (so any thread-local destructor
/// the engine's `dispose` or `Drop` registered has run), then lets go of the library: when
/// nothing else from it is alive (no rollback handle), this closes it. A `dispose` past
/// `window` is not waited for: its thread still holds the instance, and the library with it.
fn release_within(retired: Retired, library: Arc<LoadedLibrary>, window: Duration) {
    let Retired {
        engine_id,
        generation,
        instance,
    } = retired;
    let (done, finished) = std::sync::mpsc::channel();
    let on_thread = Arc::clone(&instance);
    let spawned = std::thread::Builder::new()
        .name("pincer-unload".into())
        .spawn(move || {
            let outcome = on_thread.dispose();
            // The engine object's drop runs here, on this thread, before the library closes.
            drop(on_thread);
            let _ = done.send(outcome);
        });
    let handle = match spawned {
        Ok(handle) => {
            drop(instance);
            handle
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot start a thread to release a plugin library; disposing on the reaper");
            dispose_within(&instance, window);
            return;
        }
    };
    match finished.recv_timeout(window) {
        Ok(outcome) => {
            // `join` returns once the thread has exited, its thread-local destructors run.
            let _ = handle.join();
            if let Err(err) = outcome {
                tracing::warn!(engine_id = %engine_id, error = %err, "context engine dispose failed");
            }
            tracing::info!(
                engine_id = %engine_id,
                generation,
                "retired context engine generation disposed"
            );
        }
        Err(_) => tracing::warn!(
            engine_id = %engine_id,
            generation,
            "context engine dispose stalled; its library stays open until it returns"
        ),
    }
    drop(library);
}

/// An old build of a plugin's library: kept mapped, or — `unloadOnReload` — closed once
/// nothing from it is alive.
struct KeptLibrary {
    plugin_id: String,
    engine_ids: Vec<String>,
    path: PathBuf,
    bytes: u64,
    /// Some: a closable library, and where its state is recorded.
    unload: Option<Arc<UnloadWatch>>,
}

/// The reload bookkeeping a [`Runtime`] carries.
pub(crate) struct ReloadState {
    extra_plugin_dirs: Vec<PathBuf>,
    /// One reload (of a plugin or of the config) at a time.
    serial: Mutex<()>,
    /// Plugin id → content hash of the files its serving build came from.
    fingerprints: Mutex<BTreeMap<String, String>>,
    /// Engine id → the last generation installed.
    generations: Mutex<BTreeMap<String, u64>>,
    /// Bumped by every successful reload: sources re-resolve when it moves.
    epoch: AtomicU64,
    retirement: Arc<Retirement>,
    reaper: Mutex<Option<JoinHandle<()>>>,
    kept: Mutex<Vec<KeptLibrary>>,
}

impl ReloadState {
    pub(crate) fn new(extra_plugin_dirs: Vec<PathBuf>, cleanup: Duration) -> Self {
        ReloadState {
            extra_plugin_dirs,
            serial: Mutex::new(()),
            fingerprints: Mutex::new(BTreeMap::new()),
            generations: Mutex::new(BTreeMap::new()),
            epoch: AtomicU64::new(0),
            retirement: Arc::new(Retirement {
                queue: Mutex::new(Vec::new()),
                wake: Condvar::new(),
                stop: AtomicBool::new(false),
                cleanup_ms: AtomicU64::new(cleanup.as_millis() as u64),
            }),
            reaper: Mutex::new(None),
            kept: Mutex::new(Vec::new()),
        }
    }

    /// Records the content hash of a plugin loaded at startup (or by a config reload).
    pub(crate) fn loaded(&self, status: &PluginStatus) {
        if status.status != PluginState::Loaded {
            return;
        }
        if let Some(sha) = &status.sha256 {
            let fingerprint = fingerprint(&status.dir, sha);
            lock(&self.fingerprints).insert(status.id.clone(), fingerprint);
        }
    }

    /// The next generation of `engine_id`, recorded as the last one installed.
    fn next_generation(&self, engine_id: &str) -> u64 {
        let mut generations = lock(&self.generations);
        let next = generations
            .get(engine_id)
            .map_or(FIRST_GENERATION, |g| g + 1);
        generations.insert(engine_id.to_owned(), next);
        next
    }

    /// Hands `instance` to the reaper, starting it on first use.
    fn retire(&self, engine_id: &str, generation: u64, instance: Arc<EngineInstance>) {
        lock(&self.retirement.queue).push(Retired {
            engine_id: engine_id.to_owned(),
            generation,
            instance,
        });
        let mut reaper = lock(&self.reaper);
        if reaper.is_none() && !self.retirement.stop.load(Ordering::Acquire) {
            let retirement = Arc::clone(&self.retirement);
            match std::thread::Builder::new()
                .name("pincer-reaper".into())
                .spawn(move || retirement.reap())
            {
                Ok(handle) => *reaper = Some(handle),
                // Without a reaper, shutdown disposes them (still once, still drained).
                Err(err) => tracing::warn!(error = %err, "cannot start the reaper thread"),
            }
        }
        drop(reaper);
        self.retirement.wake.notify_all();
    }

    /// Stops the reaper and disposes every retired instance left (callers are done).
    pub(crate) fn shutdown(&self) {
        self.retirement.stop.store(true, Ordering::Release);
        self.retirement.wake.notify_all();
        if let Some(handle) = lock(&self.reaper).take() {
            let _ = handle.join();
        }
        let left = std::mem::take(&mut *lock(&self.retirement.queue));
        for retired in left {
            dispose_within(&retired.instance, self.retirement.cleanup());
        }
    }

    pub(super) fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Keeps the record of an old build that stays mapped.
    fn keep(&self, old: &LoadedLibrary, current: &Path) {
        let mut kept = lock(&self.kept);
        // The same content reloaded again is the same mapping: current, not kept.
        kept.retain(|k| k.path != current);
        if old.copy_path() == current || kept.iter().any(|k| k.path == old.copy_path()) {
            return;
        }
        kept.push(KeptLibrary {
            plugin_id: old.manifest().id.clone(),
            engine_ids: old.facts().engine_ids.clone(),
            path: old.copy_path().to_owned(),
            bytes: std::fs::metadata(old.copy_path()).map_or(0, |m| m.len()),
            unload: old.unload_watch(),
        });
    }
}

impl Drop for ReloadState {
    fn drop(&mut self) {
        // The reaper exits at its next wake-up; it is not waited for (a dispose in progress
        // is bounded by its own deadline).
        self.retirement.stop.store(true, Ordering::Release);
        self.retirement.wake.notify_all();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The content hash of a plugin's files: its manifest's bytes and its library's sha256.
fn fingerprint(dir: &Path, library_sha256: &str) -> String {
    fingerprint_of(&read_manifest_bytes(dir), library_sha256)
}

/// The manifest's bytes in `dir` (empty when it cannot be read).
fn read_manifest_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(MANIFEST_FILE_NAME)).unwrap_or_default()
}

/// The content hash of the manifest bytes `manifest` and the library sha256.
fn fingerprint_of(manifest: &[u8], library_sha256: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(manifest);
    hash.update(library_sha256.as_bytes());
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `dispose` of one instance under `window`; a stall or failure is logged, never waited for.
pub(crate) fn dispose_within(instance: &Arc<EngineInstance>, window: Duration) {
    let engine = Arc::clone(instance);
    let id = instance.descriptor().id.clone();
    let deadline = Deadline::new(window);
    let abort = Arc::new(AbortController::new());
    let outcome = match instance.closable_library() {
        Some(library) => {
            bounded::run_on_own_thread(deadline, abort, Arc::clone(library), move || {
                engine.dispose()
            })
        }
        None => bounded::run(deadline, abort, move || engine.dispose()),
    };
    match outcome {
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

/// The config entry an engine's factory gets: keyed by plugin id; an engine's own id is
/// accepted for engines of multi-engine libraries; native engines by their id.
pub(super) fn engine_entry_config(
    config: &Config,
    id: &str,
    factory: &EngineFactory,
) -> serde_json::Value {
    match factory {
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

/// A new instance made beside the serving one, waiting to be swapped in.
struct Prepared {
    engine_id: String,
    factory: EngineFactory,
    instance: Arc<EngineInstance>,
}

impl Runtime {
    /// Puts `instance` in the cache as `id`'s current instance, created from registration
    /// `registration`; the instance it replaces is retired (disposed once no call holds it).
    /// Returns its generation.
    pub(super) fn install(
        &self,
        instances: &mut BTreeMap<String, Cached>,
        id: &str,
        registration: u64,
        instance: &Arc<EngineInstance>,
    ) -> u64 {
        let generation = self.reload.next_generation(id);
        let old = instances.insert(
            id.to_owned(),
            Cached {
                registration,
                generation,
                instance: Arc::clone(instance),
            },
        );
        if let Some(old) = old {
            self.reload.retire(id, old.generation, old.instance);
        }
        generation
    }

    /// The current generation of `engine_id` (0: no instance yet).
    fn current_generation(&self, engine_id: &str) -> u64 {
        if engine_id == LEGACY_ENGINE_ID {
            return FIRST_GENERATION;
        }
        lock(&self.instances)
            .get(engine_id)
            .map_or(0, |cached| cached.generation)
    }

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
        let _serial = lock(&self.reload.serial);
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
                .map(|e| self.current_generation(e))
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
        let dirs = discover_plugin_dirs(&self.plugin_roots(&self.reload.extra_plugin_dirs));
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
        let worker_dead = status.engines.iter().any(|e| self.worker_dead(e));
        if status.status == PluginState::Loaded
            && !worker_dead
            && lock(&self.reload.fingerprints).get(plugin_id) == Some(&fingerprint)
        {
            return Ok(ReloadOutcome {
                plugin_id: plugin_id.to_owned(),
                unchanged: true,
                engines: status
                    .engines
                    .iter()
                    .map(|e| (e.clone(), self.current_generation(e)))
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
                Err((step, reason)) => {
                    for made in &prepared {
                        self.dispose_bounded(&made.instance);
                    }
                    return Err(refused(step, reason));
                }
            }
        }
        let old_library =
            status
                .engines
                .iter()
                .find_map(|id| match self.registry.get(id).map(|r| r.factory) {
                    Some(EngineFactory::Plugin { library, .. }) => Some(library),
                    _ => None,
                });
        // The swap: registrations and instances change together under the instance lock, so
        // an operation sees the old pair or the new one.
        let mut engines = BTreeMap::new();
        let mut diagnostics = Vec::new();
        {
            let mut instances = lock(&self.instances);
            for made in &prepared {
                match self.registry.register_plugin_engine(
                    plugin_id,
                    &made.engine_id,
                    made.factory.clone(),
                ) {
                    Ok(id) => {
                        let registration = self.registry.get(&id).map_or(0, |r| r.generation);
                        let generation =
                            self.install(&mut instances, &id, registration, &made.instance);
                        engines.insert(id, generation);
                    }
                    Err(diagnostic) => {
                        tracing::error!(plugin = %plugin_id, "{diagnostic}");
                        diagnostics.push(diagnostic);
                        self.reload
                            .retire(&made.engine_id, 0, Arc::clone(&made.instance));
                    }
                }
            }
            // Engines the new build no longer exports are gone.
            for vanished in status.engines.iter().filter(|e| !engines.contains_key(*e)) {
                self.registry.remove(vanished);
                if let Some(old) = instances.remove(vanished) {
                    self.reload.retire(vanished, old.generation, old.instance);
                }
            }
        }
        drop(prepared);
        if let Some(old) = &old_library {
            self.reload.keep(old, library.copy_path());
        }
        lock(&self.reload.fingerprints).insert(plugin_id.to_owned(), fingerprint);
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
            self.forget_restarts(engine_id);
        }
        self.reload.bump();
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
        let _serial = lock(&self.reload.serial);
        let new = LoadedConfig::load(&self.home.config_path()).map_err(ReloadError::Config)?;
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
        let cached: Vec<(String, u64)> = lock(&self.instances)
            .iter()
            .map(|(id, c)| (id.clone(), c.registration))
            .collect();
        let mut prepared: Vec<(String, u64, Arc<EngineInstance>)> = Vec::new();
        for (id, registration) in cached {
            let Some(reg) = self.registry.get(&id) else {
                continue;
            };
            let off = reg
                .owner
                .plugin_id()
                .is_some_and(|p| new.config.plugin_disabled_by(p).is_some());
            if off
                || engine_entry_config(&old.config, &id, &reg.factory)
                    == engine_entry_config(&new.config, &id, &reg.factory)
            {
                continue;
            }
            match self.create_instance(&id, &reg.factory, &new.config) {
                Ok(instance) => {
                    prepared.push((id, registration.max(reg.generation), Arc::new(instance)))
                }
                Err((step, reason)) => {
                    for (_, _, made) in &prepared {
                        self.dispose_bounded(made);
                    }
                    return Err(ReloadError::EngineConfig {
                        engine_id: id,
                        step: step.to_owned(),
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
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
        self.reload
            .retirement
            .cleanup_ms
            .store(cleanup.as_millis() as u64, Ordering::Relaxed);
        {
            let mut instances = lock(&self.instances);
            for (id, registration, instance) in &prepared {
                let generation = self.install(&mut instances, id, *registration, instance);
                outcome.reconfigured.insert(id.clone(), generation);
            }
            // A plugin turned off: its instances are retired (its engines resolve to legacy).
            let off: BTreeSet<&str> = outcome.disabled.iter().map(String::as_str).collect();
            let ids: Vec<String> = instances
                .keys()
                .filter(|id| {
                    self.registry
                        .get(id)
                        .and_then(|r| r.owner.plugin_id().map(|p| off.contains(p)))
                        .unwrap_or(false)
                })
                .cloned()
                .collect();
            for id in ids {
                if let Some(old) = instances.remove(&id) {
                    self.reload.retire(&id, old.generation, old.instance);
                }
            }
        }
        // Plugins never loaded (they were off) or in folders the old config did not list.
        let loader = self.loader();
        let mut extra = self.reload.extra_plugin_dirs.clone();
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
            self.reload.loaded(&status);
            let mut statuses = self.plugins_mut();
            match statuses.iter_mut().find(|p| p.dir == dir) {
                Some(entry) => *entry = status,
                None => statuses.push(status),
            }
        }
        self.reload.bump();
        tracing::info!(?outcome, "config reloaded");
        Ok(outcome)
    }

    /// Per registered engine: its current generation, the replaced ones still draining, and
    /// the old builds of its library kept mapped with their size. Sorted by engine id.
    pub fn generations(&self) -> Vec<GenerationStatus> {
        let draining: BTreeMap<String, usize> = {
            let queue = lock(&self.reload.retirement.queue);
            let mut counts = BTreeMap::new();
            for retired in queue.iter() {
                *counts.entry(retired.engine_id.clone()).or_insert(0) += 1;
            }
            counts
        };
        let kept = lock(&self.reload.kept);
        self.registry
            .ids()
            .into_iter()
            .map(|engine_id| {
                let plugin_id = self
                    .registry
                    .get(&engine_id)
                    .and_then(|r| r.owner.plugin_id().map(str::to_owned));
                let old: Vec<&KeptLibrary> = kept
                    .iter()
                    .filter(|k| {
                        Some(&k.plugin_id) == plugin_id.as_ref()
                            && k.engine_ids.contains(&engine_id)
                    })
                    .collect();
                // (Its own statement: the lock is released before `current_generation`.)
                let worker = lock(&self.instances)
                    .get(&engine_id)
                    .and_then(|c| c.instance.worker());
                let state = |k: &KeptLibrary| k.unload.as_ref().map(|w| w.state());
                let count = |s: UnloadState| old.iter().filter(|k| state(k) == Some(s)).count();
                let mapped: Vec<&&KeptLibrary> = old
                    .iter()
                    .filter(|k| state(k) != Some(UnloadState::Unloaded))
                    .collect();
                GenerationStatus {
                    worker,
                    generation: self.current_generation(&engine_id),
                    draining: draining.get(&engine_id).copied().unwrap_or(0),
                    kept_generations: mapped.len(),
                    kept_bytes: mapped.iter().map(|k| k.bytes).sum(),
                    unloading: count(UnloadState::Open),
                    pinned: count(UnloadState::Pinned),
                    unloaded_generations: count(UnloadState::Unloaded),
                    plugin_id,
                    engine_id,
                }
            })
            .collect()
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
        let epoch = self.runtime.reload.epoch.load(Ordering::Acquire);
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
