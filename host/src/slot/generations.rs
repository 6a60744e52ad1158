//! [`Generations`]: the engine instances a `Runtime` serves and their lifecycle — the
//! current instance of each engine id and its generation number, the retired instances
//! draining until no call holds them (the reaper disposes each once), the old builds of
//! libraries kept mapped, the content hash of each plugin's serving build, the reload epoch
//! sources re-resolve on, and the restarts of isolated engines whose worker died.
//!
//! Its fields are private: the runtime creates instances (factories, contract validation) and
//! hands them here to be installed, swapped, retired and counted; `reload` and `restart` hold
//! the policies and the types callers see.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::engines::backend::WorkerInfo;
use crate::engines::bounded::{self, Deadline};
use crate::engines::instance::EngineInstance;
use crate::plugins::library::{LoadedLibrary, UnloadState, UnloadWatch};
use crate::plugins::MANIFEST_FILE_NAME;
use crate::slot::guarded::FIRST_GENERATION;
use crate::slot::restart::{RestartPolicy, RestartStatus, Restarts};
use crate::types::LEGACY_ENGINE_ID;
use pincer_plugin_abi::latest::AbortController;

/// How often the reaper looks at retired instances that calls still hold.
const REAP_INTERVAL: Duration = Duration::from_millis(5);

/// The current instance of one engine id.
struct Cached {
    /// The registration it was created from (`Registration::generation`).
    registration: u64,
    /// Its generation: 1 for the first instance of the id, one more for each that replaced it.
    generation: u64,
    /// The instance.
    instance: Arc<EngineInstance>,
}

/// The instances a runtime serves, and everything about their generations.
pub(super) struct Generations {
    /// The current instance of each engine id (see [`Cached`]).
    instances: Mutex<BTreeMap<String, Cached>>,
    /// One reload (of a plugin or of the config) at a time.
    serial: Mutex<()>,
    /// Plugin id → content hash of the files its serving build came from.
    fingerprints: Mutex<BTreeMap<String, String>>,
    /// Engine id → the last generation installed.
    numbers: Mutex<BTreeMap<String, u64>>,
    /// Bumped by every successful reload or restart: sources re-resolve when it moves.
    epoch: AtomicU64,
    retirement: Arc<Retirement>,
    reaper: Mutex<Option<JoinHandle<()>>>,
    kept: Mutex<Vec<KeptLibrary>>,
    /// Restarts of isolated engines whose worker died (`slot::restart`).
    restarts: Mutex<Restarts>,
}

/// The instance table, locked: registrations and instances change together under it, so an
/// operation sees the old pair or the new one.
pub(super) struct Instances<'a> {
    table: MutexGuard<'a, BTreeMap<String, Cached>>,
    generations: &'a Generations,
}

impl Instances<'_> {
    /// The current instance of `id` and its generation, when it was created from
    /// registration `registration` or a newer one (registration numbers only grow: a newer
    /// one is what a reload swapped in after the caller read the registry).
    pub(super) fn current(
        &self,
        id: &str,
        registration: u64,
    ) -> Option<(u64, Arc<EngineInstance>)> {
        self.table
            .get(id)
            .filter(|cached| cached.registration >= registration)
            .map(|cached| (cached.generation, Arc::clone(&cached.instance)))
    }

    /// Puts `instance` in the table as `id`'s current instance, created from registration
    /// `registration`; the instance it replaces is retired (disposed once no call holds it).
    /// Returns its generation.
    pub(super) fn install(
        &mut self,
        id: &str,
        registration: u64,
        instance: &Arc<EngineInstance>,
    ) -> u64 {
        let generation = self.generations.next_generation(id);
        let old = self.table.insert(
            id.to_owned(),
            Cached {
                registration,
                generation,
                instance: Arc::clone(instance),
            },
        );
        if let Some(old) = old {
            self.generations.retire(id, old.generation, old.instance);
        }
        generation
    }

    /// Takes `id` out of the table and retires its instance, if it had one.
    pub(super) fn retire_current(&mut self, id: &str) {
        if let Some(old) = self.table.remove(id) {
            self.generations.retire(id, old.generation, old.instance);
        }
    }

    /// The engine ids with an instance.
    pub(super) fn ids(&self) -> Vec<String> {
        self.table.keys().cloned().collect()
    }
}

impl Generations {
    /// No instance yet; `dispose` runs under `cleanup`.
    pub(super) fn new(cleanup: Duration) -> Self {
        Generations {
            instances: Mutex::new(BTreeMap::new()),
            serial: Mutex::new(()),
            fingerprints: Mutex::new(BTreeMap::new()),
            numbers: Mutex::new(BTreeMap::new()),
            epoch: AtomicU64::new(0),
            retirement: Arc::new(Retirement {
                queue: Mutex::new(Vec::new()),
                wake: Condvar::new(),
                stop: AtomicBool::new(false),
                cleanup_ms: AtomicU64::new(cleanup.as_millis() as u64),
            }),
            reaper: Mutex::new(None),
            kept: Mutex::new(Vec::new()),
            restarts: Mutex::new(Restarts::default()),
        }
    }

    /// The instance table, locked.
    pub(super) fn instances(&self) -> Instances<'_> {
        Instances {
            table: lock(&self.instances),
            generations: self,
        }
    }

    /// Each engine id with an instance and the registration it was created from.
    pub(super) fn registrations(&self) -> Vec<(String, u64)> {
        lock(&self.instances)
            .iter()
            .map(|(id, cached)| (id.clone(), cached.registration))
            .collect()
    }

    /// The current generation of `engine_id` (0: no instance yet; `legacy` is always the
    /// first).
    pub(super) fn current_generation(&self, engine_id: &str) -> u64 {
        if engine_id == LEGACY_ENGINE_ID {
            return FIRST_GENERATION;
        }
        lock(&self.instances)
            .get(engine_id)
            .map_or(0, |cached| cached.generation)
    }

    /// The worker process of `engine_id`'s current instance, for an isolated engine.
    pub(super) fn worker(&self, engine_id: &str) -> Option<WorkerInfo> {
        lock(&self.instances)
            .get(engine_id)
            .and_then(|cached| cached.instance.worker())
    }

    /// How the worker of `engine_id`'s current instance died, for an isolated engine whose
    /// worker is dead.
    pub(super) fn worker_death(&self, engine_id: &str) -> Option<String> {
        self.worker(engine_id).and_then(|worker| worker.death)
    }

    /// Takes one reload's turn: one reload (of a plugin or of the config) at a time.
    pub(super) fn begin_reload(&self) -> MutexGuard<'_, ()> {
        lock(&self.serial)
    }

    /// The reload epoch: moves at every successful reload or restart.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Moves the reload epoch: sources resolve again.
    pub(super) fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Follows the config's cleanup deadline of `dispose`.
    pub(super) fn set_cleanup(&self, cleanup: Duration) {
        self.retirement
            .cleanup_ms
            .store(cleanup.as_millis() as u64, Ordering::Relaxed);
    }

    /// Records the content hash of a plugin's serving build: its manifest in `dir` and its
    /// library's sha256 (loaded at startup, or by a config reload).
    pub(super) fn loaded(&self, plugin_id: &str, dir: &Path, library_sha256: &str) {
        let fingerprint = fingerprint_of(&read_manifest_bytes(dir), library_sha256);
        self.set_fingerprint(plugin_id, fingerprint);
    }

    /// Records `fingerprint` as the content hash of `plugin_id`'s serving build.
    pub(super) fn set_fingerprint(&self, plugin_id: &str, fingerprint: String) {
        lock(&self.fingerprints).insert(plugin_id.to_owned(), fingerprint);
    }

    /// Whether `fingerprint` is the content hash of `plugin_id`'s serving build.
    pub(super) fn is_serving(&self, plugin_id: &str, fingerprint: &str) -> bool {
        lock(&self.fingerprints)
            .get(plugin_id)
            .is_some_and(|serving| serving == fingerprint)
    }

    /// The next generation of `engine_id`, recorded as the last one installed.
    fn next_generation(&self, engine_id: &str) -> u64 {
        let mut numbers = lock(&self.numbers);
        let next = numbers.get(engine_id).map_or(FIRST_GENERATION, |g| g + 1);
        numbers.insert(engine_id.to_owned(), next);
        next
    }

    /// Hands `instance` to the reaper, starting it on first use.
    pub(super) fn retire(&self, engine_id: &str, generation: u64, instance: Arc<EngineInstance>) {
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

    /// Keeps the record of an old build that stays mapped.
    pub(super) fn keep(&self, old: &LoadedLibrary, current: &Path) {
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

    /// The status of each of `engines` (engine id, owning plugin): its current generation,
    /// the replaced ones still draining, and the old builds of its library kept mapped.
    pub(super) fn statuses(&self, engines: Vec<(String, Option<String>)>) -> Vec<GenerationStatus> {
        let draining: BTreeMap<String, usize> = {
            let queue = lock(&self.retirement.queue);
            let mut counts = BTreeMap::new();
            for retired in queue.iter() {
                *counts.entry(retired.engine_id.clone()).or_insert(0) += 1;
            }
            counts
        };
        let kept = lock(&self.kept);
        engines
            .into_iter()
            .map(|(engine_id, plugin_id)| {
                let old: Vec<&KeptLibrary> = kept
                    .iter()
                    .filter(|k| {
                        Some(&k.plugin_id) == plugin_id.as_ref()
                            && k.engine_ids.contains(&engine_id)
                    })
                    .collect();
                let state = |k: &KeptLibrary| k.unload.as_ref().map(|w| w.state());
                let count = |s: UnloadState| old.iter().filter(|k| state(k) == Some(s)).count();
                let mapped: Vec<&&KeptLibrary> = old
                    .iter()
                    .filter(|k| state(k) != Some(UnloadState::Unloaded))
                    .collect();
                GenerationStatus {
                    worker: self.worker(&engine_id),
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

    /// Whether `engine_id`, whose worker died, is due a restart under `policy`: counts it as
    /// one when it is.
    pub(super) fn restart_due(&self, engine_id: &str, policy: RestartPolicy) -> bool {
        lock(&self.restarts).due(engine_id, policy)
    }

    /// Forgets the restarts of `engine_id` (the operator reloaded it).
    pub(super) fn forget_restarts(&self, engine_id: &str) {
        lock(&self.restarts).forget(engine_id);
    }

    /// The restarts of every isolated engine that had one, each under its policy.
    pub(super) fn restart_statuses(
        &self,
        policy_of: impl Fn(&str) -> RestartPolicy,
    ) -> Vec<RestartStatus> {
        lock(&self.restarts).statuses(policy_of)
    }

    /// Takes every current instance out of the table (shutdown: the caller disposes them).
    pub(super) fn take_current(&self) -> Vec<Arc<EngineInstance>> {
        std::mem::take(&mut *lock(&self.instances))
            .into_values()
            .map(|cached| cached.instance)
            .collect()
    }

    /// Stops the reaper and disposes every retired instance left (callers are done).
    pub(super) fn shutdown(&self) {
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
}

impl Drop for Generations {
    fn drop(&mut self) {
        // The reaper exits at its next wake-up; it is not waited for (a dispose in progress
        // is bounded by its own deadline).
        self.retirement.stop.store(true, Ordering::Release);
        self.retirement.wake.notify_all();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
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
    pub worker: Option<WorkerInfo>,
    /// Of the kept ones, `unloadOnReload` builds still open: something from them (an
    /// instance a call or guard holds, a rollback handle) is alive; closed when it is dropped.
    pub unloading: usize,
    /// Of the kept ones, `unloadOnReload` builds closed but still mapped by the dynamic
    /// loader: a thread-local destructor they registered is pending on a running thread.
    pub pinned: usize,
    /// Old builds closed and unmapped (`unloadOnReload`).
    pub unloaded_generations: usize,
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

/// The manifest's bytes in `dir` (empty when it cannot be read).
pub(super) fn read_manifest_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(MANIFEST_FILE_NAME)).unwrap_or_default()
}

/// The content hash of the manifest bytes `manifest` and the library sha256.
pub(super) fn fingerprint_of(manifest: &[u8], library_sha256: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(manifest);
    hash.update(library_sha256.as_bytes());
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `dispose` of one instance under `window`; a stall or failure is logged, never waited for.
pub(super) fn dispose_within(instance: &Arc<EngineInstance>, window: Duration) {
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
