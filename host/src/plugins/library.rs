//! Verified loading of plugin libraries, one checked step after another:
//!
//! 1. read and validate `pincer.plugin.json` (no plugin code runs) and check its
//!    `apiVersion` against this host;
//! 2. confine `library` to the plugin folder;
//! 3. read the library once, check size, sha256 and that every loadable segment lies inside
//!    the file (a truncated library would kill the host with SIGBUS inside `dlopen`);
//! 4. read the manifest the library embeds as data (`.pincer_manifest`) from those bytes and
//!    compare it with the sidecar — id, version, API major, `panic = "unwind"` — so a library
//!    that claims to be something else, needs another API, or was built with `panic = "abort"`
//!    is refused before any of its code runs (its constructors included). The record is data
//!    the plugin's author writes: it catches honest mistakes and mismatches before `dlopen`,
//!    it does not make a hostile library safe to open;
//! 5. write those same bytes to a private content-addressed cache (never overwriting a file
//!    that may be mapped);
//! 6. open the *copy* and check abi_stable's header, the API major and every layout;
//! 7. compare the manifest the loaded library returns with the embedded one and the sidecar.
//!
//! Each step has its own error (see [`LoadError`]), whose message says what to do.
//!
//! **Architecture Invariant:** the host never `dlopen`s a file it has not verified, and never a
//! path a user can rewrite: only the private copies made in step 5.

use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::plugins::loading::{
    open_closable_library, open_library, read_embedded_manifest, EmbeddedManifest,
    EmbeddedManifestError, OpenError, OpenedLibrary,
};
use pincer_plugin_abi::latest::{EngineBox, EngineError, FactoryParams, HostServicesArc};
use pincer_plugin_abi::{ROption, RStr};
use serde::Serialize;

use super::cache;
use super::verify;
use crate::config::Isolation;
use crate::plugins::manifest::{read_manifest, ManifestError, PluginManifest, MANIFEST_FILE_NAME};

/// The `pincer-plugin-api` version this host is built against.
pub fn host_api_version() -> semver::Version {
    semver::Version::parse(pincer_plugin_api::API_VERSION).expect("the crate version is semver")
}

/// Why a plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The manifest is missing or invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The manifest asks for an API this host does not provide.
    #[error(
        "plugin \"{plugin_id}\" requires pincer-plugin-api {required}, but this host provides {host}: \
         use a host of that version or rebuild the plugin against pincer-plugin-api {host}"
    )]
    ApiRequirement {
        /// The plugin.
        plugin_id: String,
        /// Its `apiVersion`.
        required: String,
        /// This host's API version.
        host: String,
    },
    /// The library file failed verification.
    #[error(transparent)]
    Verify(#[from] verify::VerifyError),
    /// The library is not the one `pincer plugins install` verified.
    #[error(transparent)]
    InstalledPinMismatch(Box<InstalledPinMismatch>),
    /// The private copy could not be made.
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
    /// The library could not be opened as a pincer plugin.
    #[error("{source} (library {})", path.display())]
    Open {
        /// The library.
        path: PathBuf,
        /// What failed.
        source: OpenError,
    },
    /// The library's own manifest contradicts `pincer.plugin.json`.
    #[error(
        "the library says its {field} is \"{library}\" but {} says \"{sidecar}\": \
         re-package the plugin with `pincer plugins pack` so the manifest and the library match",
        manifest.display()
    )]
    ManifestMismatch {
        /// Which field.
        field: &'static str,
        /// What the sidecar says.
        sidecar: String,
        /// What the library says.
        library: String,
        /// The sidecar's path.
        manifest: PathBuf,
    },
    /// The library embeds no pincer manifest, or several: it is not a pincer plugin built with
    /// `export_engine!`, or it was tampered with. Found before it is loaded.
    #[error(
        "not a pincer plugin: {}: {error} (checked before loading it)",
        path.display()
    )]
    EmbeddedManifest {
        /// The library.
        path: PathBuf,
        /// What was found.
        error: EmbeddedManifestError,
    },
    /// The manifest the loaded library returns is not the one its file embeds: the file was
    /// altered after it was built, or made by hand.
    #[error(
        "library {} reports itself as {loaded} once loaded, but its file says {embedded}: the file \
         was altered after it was built or made by hand; it is refused (rebuild the plugin with \
         `export_engine!`)",
        path.display()
    )]
    LoadedManifestDiffers {
        /// The library.
        path: PathBuf,
        /// What the file's bytes say.
        embedded: String,
        /// What the loaded code returned.
        loaded: String,
    },
    /// The library crashed or failed its checks when probed in a throwaway worker process.
    #[error(
        "library {} of plugin \"{plugin_id}\" failed its probe in a throwaway worker process ({reason}), so it is not opened in this process; run its engines isolated (plugins.entries.{plugin_id}.isolation: \"process\") or fix the library",
        path.display()
    )]
    ProbeFailed {
        /// The plugin.
        plugin_id: String,
        /// The library.
        path: PathBuf,
        /// What happened in the worker.
        reason: String,
    },
    /// The library was built with `panic = "abort"`.
    #[error(
        "plugin \"{plugin_id}\" was built with panic = \"abort\": its first panic would abort the \
         whole host, so it is refused before any call; rebuild it with panic = \"unwind\" (the default)"
    )]
    PanicAbort {
        /// The plugin.
        plugin_id: String,
    },
}

impl LoadError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            LoadError::Manifest(e) => e.code(),
            LoadError::ApiRequirement { .. } => "api_requirement",
            LoadError::Verify(e) => e.code(),
            LoadError::Cache(_) => "cache_failed",
            LoadError::InstalledPinMismatch(_) => "installed_pin_mismatch",
            LoadError::Open { source, .. } => source.code(),
            LoadError::ManifestMismatch { .. } => "manifest_mismatch",
            LoadError::PanicAbort { .. } => "panic_abort",
            LoadError::EmbeddedManifest { error, .. } => error.code(),
            LoadError::LoadedManifestDiffers { .. } => "manifest_tampered",
            LoadError::ProbeFailed { .. } => "probe_failed",
        }
    }
}

/// A library whose sha256 is not the one `pincer plugins install` recorded.
#[derive(Debug, thiserror::Error)]
#[error(
    "library {} has sha256 {found}, but plugins.entries.{plugin_id}.sha256 (recorded by `pincer plugins install`) is {pinned}: the file changed after it was installed, so it is refused before it is opened; reinstall the plugin (`pincer plugins install --force`) if the change is yours",
    path.display()
)]
pub struct InstalledPinMismatch {
    /// The plugin.
    pub plugin_id: String,
    /// The library.
    pub path: PathBuf,
    /// What the config records.
    pub pinned: String,
    /// What the file hashes to now.
    pub found: String,
}

/// The library's own manifest, in host memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LibraryFacts {
    /// Plugin id.
    pub plugin_id: String,
    /// Plugin version.
    pub plugin_version: String,
    /// The API version it was built against.
    pub api_version: String,
    /// Engine ids it exports.
    pub engine_ids: Vec<String>,
    /// Built with `panic = "unwind"`.
    pub panic_unwind: bool,
}

impl LibraryFacts {
    /// One line: id, version, api, engines, panic strategy.
    fn describe(&self) -> String {
        format!(
            "{} {} (api {}, engines {:?}, panic unwind {})",
            self.plugin_id,
            self.plugin_version,
            self.api_version,
            self.engine_ids,
            self.panic_unwind
        )
    }
}

impl LibraryFacts {
    /// What an opened library's own code says it is (its root module's manifest).
    pub fn of_opened(opened: &OpenedLibrary) -> Self {
        let lib = opened.manifest();
        LibraryFacts {
            plugin_id: lib.plugin_id.to_string(),
            plugin_version: lib.plugin_version.to_string(),
            api_version: lib.api_version.to_string(),
            engine_ids: lib.engine_ids.iter().map(|s| s.to_string()).collect(),
            panic_unwind: lib.panic_unwind,
        }
    }
}

impl From<&EmbeddedManifest> for LibraryFacts {
    fn from(manifest: &EmbeddedManifest) -> Self {
        LibraryFacts {
            plugin_id: manifest.plugin_id.clone(),
            plugin_version: manifest.plugin_version.clone(),
            api_version: manifest.api_version.clone(),
            engine_ids: manifest.engine_ids.clone(),
            panic_unwind: manifest.panic_unwind,
        }
    }
}

/// Where a closable library is in its life (`plugins.entries.<id>.unloadOnReload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UnloadState {
    /// Open: something from it (an engine instance, a rollback handle) is still alive.
    Open,
    /// Closed (`dlclose`) and no longer mapped. (Where the mappings cannot be read — not
    /// Linux — closed is all that is known.)
    Unloaded,
    /// Closed, but the dynamic loader keeps it mapped: a thread-local destructor it registered
    /// is pending on a thread still running (see [`LoadedLibrary`]).
    Pinned,
}

/// The shared record of a closable library's state, which outlives the library.
#[derive(Debug)]
pub struct UnloadWatch {
    path: PathBuf,
    state: AtomicU8,
}

impl UnloadWatch {
    /// The private copy the library was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its state now. A pinned library is looked up again: it is unloaded once the dynamic
    /// loader let it go.
    pub fn state(&self) -> UnloadState {
        match self.state.load(Ordering::Acquire) {
            0 => UnloadState::Open,
            1 => UnloadState::Unloaded,
            _ => {
                if is_mapped(&self.path) == Some(false) {
                    self.state.store(1, Ordering::Release);
                    UnloadState::Unloaded
                } else {
                    UnloadState::Pinned
                }
            }
        }
    }
}

/// Whether `path` is mapped into this process (`None`: cannot tell on this platform).
pub fn is_mapped(path: &Path) -> Option<bool> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let path = path.to_string_lossy();
    Some(maps.lines().any(|line| {
        // The pathname is the sixth field; it may contain spaces, and a deleted file's ends
        // with " (deleted)".
        let name = line.splitn(6, ' ').nth(5).unwrap_or("").trim_start();
        name == path || name.strip_suffix(" (deleted)") == Some(&path)
    }))
}

/// A plugin library that passed every check.
///
/// **Kept mapped by default.** Dropping the last `Arc` of a library does nothing to its
/// mapping: whatever came from it may outlive the host's bookkeeping. A library loaded with
/// `plugins.entries.<id>.unloadOnReload` ([`Loader::with_unload_on_reload`]) is closed
/// (`dlclose`) when its last `Arc` is dropped, so everything that carries its code or its
/// memory holds that `Arc`: engine instances (`engines::backend::InProcess`) and rollback
/// handles (`engines::instance::Rollback`); results and errors are copied into host memory
/// (see `engines::backend`).
///
/// Its code also runs only on threads that end before it can close — every call on a thread
/// of its own (`engines::bounded::run_on_own_thread`), every drop of its objects too — because
/// of what code leaves for a thread's exit: a `thread_local!` holding a `Drop` type registers a
/// destructor with the C runtime, and with glibc the library then stays mapped after
/// `dlclose` until that thread exits ([`UnloadState::Pinned`]); `std::thread::current()` on a
/// thread this library's `std` did not start registers `std`'s exit hook as a `pthread` key,
/// which glibc does not count at all: once the library is unmapped, that thread's exit calls
/// into nothing and the process dies. The state is read back from `/proc/self/maps`.
pub struct LoadedLibrary {
    manifest: PluginManifest,
    facts: LibraryFacts,
    copy_path: PathBuf,
    sha256: String,
    /// Some: closable, and where its state is recorded.
    unload: Option<Arc<UnloadWatch>>,
    /// Dropped by hand in `Drop`, then the mapping is looked up.
    /// `None` for an isolated plugin: its code is never opened in this process.
    opened: ManuallyDrop<Option<OpenedLibrary>>,
}

impl Drop for LoadedLibrary {
    fn drop(&mut self) {
        // SAFETY: `opened` is not used after this.
        let opened = unsafe { ManuallyDrop::take(&mut self.opened) };
        drop(opened);
        if let Some(watch) = &self.unload {
            let mapped = is_mapped(&self.copy_path);
            let state = if mapped == Some(true) { 2 } else { 1 };
            watch.state.store(state, Ordering::Release);
            if mapped == Some(true) {
                tracing::warn!(
                    plugin = %self.manifest.id,
                    library = %self.copy_path.display(),
                    "plugin library closed but still mapped: a thread-local destructor it registered is pending on a running thread (its engine did not join a thread in dispose?), or another handle holds the same file"
                );
            } else {
                tracing::info!(
                    plugin = %self.manifest.id,
                    library = %self.copy_path.display(),
                    "old plugin library unloaded"
                );
            }
        }
    }
}

impl std::fmt::Debug for LoadedLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedLibrary")
            .field("id", &self.manifest.id)
            .field("copy", &self.copy_path)
            .finish()
    }
}

impl LoadedLibrary {
    /// The sidecar manifest.
    pub fn manifest(&self) -> &PluginManifest {
        &self.manifest
    }

    /// What the library says about itself.
    pub fn facts(&self) -> &LibraryFacts {
        &self.facts
    }

    /// The private copy that was opened.
    pub fn copy_path(&self) -> &Path {
        &self.copy_path
    }

    /// The library's sha256 (lowercase hex).
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Whether the library is run in worker processes only (`isolation: "process"`): then
    /// none of its code runs in this process, and its facts are what its bytes said (the
    /// worker checks them against the loaded code).
    pub fn is_isolated(&self) -> bool {
        self.opened.is_none()
    }

    /// Whether the library is closed when its last `Arc` is dropped (`unloadOnReload`).
    pub fn unloads(&self) -> bool {
        self.unload.is_some()
    }

    /// The record of a closable library's state, `None` when it is kept mapped.
    pub fn unload_watch(&self) -> Option<Arc<UnloadWatch>> {
        self.unload.clone()
    }

    /// Creates the FFI object of engine `engine_id` with `config` (already validated against
    /// the manifest's schema by the caller) and the host's services. The object must not
    /// outlive this library: [`crate::engines`] keeps an `Arc` of it next to the object.
    ///
    /// # Errors
    /// The factory's error or panic.
    pub fn new_engine_object(
        &self,
        engine_id: &str,
        config: &serde_json::Value,
        dirs: &EngineDirs,
        host: HostServicesArc,
    ) -> Result<EngineBox, EngineError> {
        let config_json = config.to_string();
        let plugin_dir = self.manifest.dir.to_string_lossy().into_owned();
        let state_dir = dirs
            .engine_state_dir(engine_id)
            .map(|d| d.to_string_lossy().into_owned());
        let params = FactoryParams {
            state_dir: opt_str(state_dir.as_deref()),
            engine_id: RStr::from_str(engine_id),
            config_json: RStr::from_str(&config_json),
            agent_dir: opt_str(dirs.agent_dir.as_deref()),
            workspace_dir: opt_str(dirs.workspace_dir.as_deref()),
            plugin_dir: ROption::RSome(RStr::from_str(&plugin_dir)),
        };
        match &*self.opened {
            Some(opened) => opened.new_engine(&params, host),
            None => Err(EngineError::failed(format!(
                "plugin \"{}\" runs isolated: its engines are created in worker processes",
                self.manifest.id
            ))),
        }
    }
}

/// Step 4: what the library's bytes say it is, against the sidecar and this host, before any
/// of its code runs.
fn check_embedded(
    manifest: &PluginManifest,
    embedded: &EmbeddedManifest,
    library: &Path,
) -> Result<(), LoadError> {
    let host = host_api_version();
    let major = |v: &str| v.split('.').next().unwrap_or("").to_owned();
    if major(&embedded.api_version) != host.major.to_string() {
        return Err(LoadError::Open {
            path: library.to_owned(),
            source: OpenError::ApiMajorMismatch {
                found: embedded.api_version.clone(),
                host: host.to_string(),
            },
        });
    }
    let mismatch = |field, sidecar: String, library: String| LoadError::ManifestMismatch {
        field,
        sidecar,
        library,
        manifest: manifest.dir.join(MANIFEST_FILE_NAME),
    };
    if embedded.plugin_id != manifest.id {
        return Err(mismatch(
            "id",
            manifest.id.clone(),
            embedded.plugin_id.clone(),
        ));
    }
    if embedded.plugin_version != manifest.version.to_string() {
        return Err(mismatch(
            "version",
            manifest.version.to_string(),
            embedded.plugin_version.clone(),
        ));
    }
    let mut declared = manifest.context_engine_ids.clone();
    let mut exported = embedded.engine_ids.clone();
    declared.sort();
    exported.sort();
    if declared != exported {
        return Err(mismatch(
            "contextEngineIds",
            declared.join(", "),
            exported.join(", "),
        ));
    }
    if !embedded.panic_unwind {
        return Err(LoadError::PanicAbort {
            plugin_id: manifest.id.clone(),
        });
    }
    Ok(())
}

fn opt_str(value: Option<&str>) -> ROption<RStr<'_>> {
    match value {
        Some(v) => ROption::RSome(RStr::from_str(v)),
        None => ROption::RNone,
    }
}

/// The directories handed to an engine factory.
#[derive(Debug, Clone, Default)]
pub struct EngineDirs {
    /// The agent's directory.
    pub agent_dir: Option<String>,
    /// The workspace directory.
    pub workspace_dir: Option<String>,
    /// Where each engine gets its own state directory, `<root>/<engine id>/`
    /// (`$PINCER_HOME/state/engines` by default).
    pub engine_state_root: Option<PathBuf>,
}

impl EngineDirs {
    /// Creates (owner-only) and returns engine `engine_id`'s state directory; `None` when
    /// there is no root or it cannot be created (logged).
    pub fn engine_state_dir(&self, engine_id: &str) -> Option<PathBuf> {
        let dir = self.engine_state_root.as_ref()?.join(engine_id);
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match crate::disk::create_dir_with(&builder, &dir) {
            Ok(()) => Some(dir),
            Err(err) => {
                tracing::warn!(engine_id, dir = %dir.display(), %err, "cannot create the engine's state directory; the engine gets none");
                None
            }
        }
    }
}

/// A plugin that passed steps 1–4 of verified loading (nothing of it has run).
pub struct VerifiedPlugin {
    /// The checked sidecar manifest.
    pub manifest: PluginManifest,
    /// The library file, confined to the plugin folder.
    pub library: PathBuf,
    /// The library's verified bytes and their sha256.
    pub verified: verify::VerifiedLibrary,
    /// The manifest the library embeds, as its bytes say.
    pub embedded: EmbeddedManifest,
}

/// Loads plugins into a private cache.
#[derive(Debug, Clone)]
pub struct Loader {
    cache_dir: PathBuf,
    limits: verify::VerifyLimits,
    /// sha256 by plugin id, as `pincer plugins install` recorded them in the config.
    installed_pins: std::collections::BTreeMap<String, String>,
    /// Where each plugin's engines run; [`Isolation::Process`] libraries are never opened
    /// here.
    isolation: (Isolation, std::collections::BTreeMap<String, Isolation>),
    /// Plugins whose libraries are opened closable (`plugins.entries.<id>.unloadOnReload`).
    unload_on_reload: std::collections::BTreeSet<String>,
    /// Runs a library not seen before somewhere else before this process opens it.
    probe: Option<ProbeHook>,
}

/// Runs a library's code somewhere else — a throwaway worker process — before this process
/// opens it: `Err` with what happened refuses it. Installed by the runtime (the isolation tier
/// lives above this layer).
pub type LibraryProbe = Arc<dyn Fn(&Path, &LibraryFacts) -> Result<(), String> + Send + Sync>;

/// A [`LibraryProbe`] held by a [`Loader`].
#[derive(Clone)]
struct ProbeHook(LibraryProbe);

impl std::fmt::Debug for ProbeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LibraryProbe")
    }
}

impl Loader {
    /// A loader that copies libraries into `cache_dir` before opening them.
    pub fn new(cache_dir: PathBuf) -> Self {
        Loader {
            cache_dir,
            limits: verify::VerifyLimits::default(),
            installed_pins: std::collections::BTreeMap::new(),
            isolation: (Isolation::InProcess, std::collections::BTreeMap::new()),
            unload_on_reload: std::collections::BTreeSet::new(),
            probe: None,
        }
    }

    /// Probes each library not probed before (by content: a record under the cache's
    /// `probed/` folder) with `probe` before it is opened in this process, and by
    /// [`Loader::probe`].
    pub fn with_probe(mut self, probe: LibraryProbe) -> Self {
        self.probe = Some(ProbeHook(probe));
        self
    }

    /// Probes `plugin`'s library (its verified file) with the installed probe, if any: what
    /// `pincer plugins install` runs before it copies anything.
    ///
    /// # Errors
    /// [`LoadError::ProbeFailed`].
    pub fn probe(&self, plugin: &VerifiedPlugin) -> Result<(), LoadError> {
        let Some(ProbeHook(probe)) = &self.probe else {
            return Ok(());
        };
        probe(&plugin.library, &LibraryFacts::from(&plugin.embedded)).map_err(|reason| {
            LoadError::ProbeFailed {
                plugin_id: plugin.manifest.id.clone(),
                path: plugin.library.clone(),
                reason,
            }
        })
    }

    /// Where plugins' engines run: `per_plugin`, else `default`. [`Loader::load_verified`]
    /// makes an isolated plugin's private copy but never opens it in this process.
    pub fn with_isolation(
        mut self,
        default: Isolation,
        per_plugin: impl IntoIterator<Item = (String, Isolation)>,
    ) -> Self {
        self.isolation = (default, per_plugin.into_iter().collect());
        self
    }

    /// Where plugin `plugin_id`'s engines run.
    pub fn isolation_of(&self, plugin_id: &str) -> Isolation {
        self.isolation
            .1
            .get(plugin_id)
            .copied()
            .unwrap_or(self.isolation.0)
    }

    /// Opens the libraries of these plugins so that they are closed once nothing from them
    /// is alive (`plugins.entries.<id>.unloadOnReload`; see [`LoadedLibrary`]).
    pub fn with_unload_on_reload(mut self, plugin_ids: impl IntoIterator<Item = String>) -> Self {
        self.unload_on_reload = plugin_ids.into_iter().collect();
        self
    }

    /// Also checks each plugin's library against the sha256 `pincer plugins install` recorded
    /// (`plugins.entries.<id>.sha256`), before it is opened.
    pub fn with_installed_pins(mut self, pins: impl IntoIterator<Item = (String, String)>) -> Self {
        self.installed_pins = pins.into_iter().collect();
        self
    }

    /// Reads and checks the manifest of the plugin in `plugin_dir`, without touching its
    /// library. This is everything `doctor` can know without loading.
    ///
    /// # Errors
    /// A [`LoadError::Manifest`] or [`LoadError::ApiRequirement`].
    pub fn read_checked_manifest(&self, plugin_dir: &Path) -> Result<PluginManifest, LoadError> {
        let manifest = read_manifest(plugin_dir)?;
        let host = host_api_version();
        if !manifest.api_version.matches(&host) {
            return Err(LoadError::ApiRequirement {
                plugin_id: manifest.id.clone(),
                required: manifest.api_version.to_string(),
                host: host.to_string(),
            });
        }
        Ok(manifest)
    }

    /// Steps 1–4 of verified loading: manifest, API requirement, library confinement, size,
    /// sha256, segment bounds, and the library's embedded manifest against the sidecar — all
    /// without running any of the plugin's code. `pincer plugins install` runs this on a
    /// plugin before it copies anything.
    ///
    /// # Errors
    /// The first step that fails, as a [`LoadError`].
    pub fn verify(&self, plugin_dir: &Path) -> Result<VerifiedPlugin, LoadError> {
        let manifest = self.read_checked_manifest(plugin_dir)?;
        let library = verify::resolve_library_path(&manifest.dir, &manifest.library)?;
        let verified = verify::verify_library(&library, manifest.sha256.as_deref(), &self.limits)?;
        if let Some(pinned) = self.installed_pins.get(&manifest.id) {
            if !pinned.eq_ignore_ascii_case(&verified.sha256_hex) {
                return Err(LoadError::InstalledPinMismatch(Box::new(
                    InstalledPinMismatch {
                        plugin_id: manifest.id.clone(),
                        path: library,
                        pinned: pinned.clone(),
                        found: verified.sha256_hex,
                    },
                )));
            }
        }
        let embedded = read_embedded_manifest(&verified.bytes).map_err(|error| {
            LoadError::EmbeddedManifest {
                path: library.clone(),
                error,
            }
        })?;
        check_embedded(&manifest, &embedded, &library)?;
        Ok(VerifiedPlugin {
            manifest,
            library,
            verified,
            embedded,
        })
    }

    /// Runs every step of verified loading for the plugin in `plugin_dir`.
    ///
    /// # Errors
    /// The first step that fails, as a [`LoadError`].
    pub fn load(&self, plugin_dir: &Path) -> Result<Arc<LoadedLibrary>, LoadError> {
        self.load_verified(self.verify(plugin_dir)?)
    }

    /// Steps 5 and on of verified loading for a plugin [`Loader::verify`] passed: the private
    /// copy of exactly the bytes that were verified, `dlopen`, the ABI checks and the
    /// library's own manifest. (A hot reload verifies first to compare content hashes.)
    ///
    /// # Errors
    /// The first step that fails, as a [`LoadError`].
    pub fn load_verified(&self, plugin: VerifiedPlugin) -> Result<Arc<LoadedLibrary>, LoadError> {
        let VerifiedPlugin {
            manifest,
            library: source,
            verified,
            embedded,
        } = plugin;
        let file_name = Path::new(&manifest.library)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| manifest.library.clone());
        let copy_path = cache::cache_copy(&self.cache_dir, &verified, &file_name)?;
        if self.isolation_of(&manifest.id) == Isolation::Process {
            // Nothing of it runs here: a worker opens the copy and checks the loaded code
            // against these facts.
            return Ok(Arc::new(LoadedLibrary {
                facts: LibraryFacts::from(&embedded),
                manifest,
                copy_path,
                sha256: verified.sha256_hex,
                unload: None,
                opened: ManuallyDrop::new(None),
            }));
        }
        if let Some(ProbeHook(probe)) = &self.probe {
            // Once per library content: a record beside the private copies.
            let record = self.cache_dir.join("probed").join(&verified.sha256_hex);
            if !record.exists() {
                probe(&copy_path, &LibraryFacts::from(&embedded)).map_err(|reason| {
                    LoadError::ProbeFailed {
                        plugin_id: manifest.id.clone(),
                        path: source.clone(),
                        reason,
                    }
                })?;
                if let Some(dir) = record.parent() {
                    let _ = crate::disk::create_dir_all(dir);
                }
                let _ = crate::disk::write(&record, b"");
            }
        }
        let closable = self.unload_on_reload.contains(&manifest.id);
        // SAFETY: `copy_path` is the private copy of bytes that passed verification. A
        // closable library is closed only when its `LoadedLibrary` is dropped, and everything
        // from it holds that value's `Arc` or was copied into host memory (see the type).
        let opened = if closable {
            // SAFETY: as above: a verified private copy, closed only when its last user is gone.
            unsafe { open_closable_library(&copy_path) }
        } else {
            // SAFETY: as above: a verified private copy, kept open for the process.
            unsafe { open_library(&copy_path) }
        }
        .map_err(|source| {
            if let OpenError::LayoutMismatch { full, .. } = &source {
                tracing::debug!(plugin = %manifest.id, report = %full, "abi_stable layout report");
            }
            LoadError::Open {
                path: copy_path.clone(),
                source,
            }
        })?;
        let facts = LibraryFacts::of_opened(&opened);
        // The id, version, API major and `panic = "unwind"` were checked against the sidecar
        // before `dlopen` (step 4); what the loaded code says must be what its bytes said.
        let expected = LibraryFacts::from(&embedded);
        if facts != expected {
            // Tampering, or a hand-made library: either way not what was verified. Kept
            // mapped even when closable: nothing tracks what its code did.
            std::mem::forget(opened);
            return Err(LoadError::LoadedManifestDiffers {
                path: source,
                embedded: expected.describe(),
                loaded: facts.describe(),
            });
        }
        let unload = closable.then(|| {
            Arc::new(UnloadWatch {
                path: copy_path.clone(),
                state: AtomicU8::new(0),
            })
        });
        Ok(Arc::new(LoadedLibrary {
            manifest,
            facts,
            copy_path,
            sha256: verified.sha256_hex,
            unload,
            opened: ManuallyDrop::new(Some(opened)),
        }))
    }
}
