//! [`PluginWatcher`]: hot reload triggered by files. It watches every plugin folder the
//! runtime knows (recursively, and each folder's parent, so a folder replaced as a whole is
//! seen) and the folder of `pincer.json`, with `notify` (inotify on Linux). Events are
//! debounced: once the files have been quiet for the debounce window, the config is reloaded
//! (if `pincer.json` changed) and then each changed plugin ([`Runtime::reload_config`],
//! [`Runtime::reload_plugin`]). The content hash decides: a touch without change does
//! nothing. In-place writes (same inode), a rename over the file and delete-then-recreate
//! are all picked up; a reload that runs between a delete and its recreate is refused (the
//! old generation keeps serving) and the recreate triggers another one.
//!
//! Dropping the watcher stops it. SIGHUP is not handled here: a server calls the same
//! reload functions from its signal handler.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};

use super::reload::{ConfigReloadOutcome, ReloadError, ReloadOutcome};
use super::runtime::{PluginState, Runtime};

/// What a watch-triggered reload did, as handed to [`WatchOptions::on_reload`].
#[derive(Debug)]
pub enum WatchEvent {
    /// `pincer.json` changed and was reloaded (or refused).
    Config(Result<ConfigReloadOutcome, ReloadError>),
    /// A plugin's files changed and it was reloaded (or refused, or found unchanged).
    Plugin(Result<ReloadOutcome, ReloadError>),
}

/// A callback told of every watch-triggered reload.
pub type OnReload = Arc<dyn Fn(&WatchEvent) + Send + Sync>;

/// How the watcher behaves.
#[derive(Clone)]
pub struct WatchOptions {
    /// How long the files must be quiet before a reload (100 ms by default): a build or copy
    /// writes a library in many steps.
    pub debounce: Duration,
    /// Told of every reload the watcher ran (besides the log line).
    pub on_reload: Option<OnReload>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(100),
            on_reload: None,
        }
    }
}

impl std::fmt::Debug for WatchOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchOptions")
            .field("debounce", &self.debounce)
            .finish()
    }
}

/// The file watcher could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch plugin files: {0} (check the inotify limits: /proc/sys/fs/inotify/max_user_watches)")]
pub struct WatchError(#[from] notify::Error);

impl WatchError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        "watch_failed"
    }
}

/// Watches a runtime's plugin folders and `pincer.json`; reloads on change. Dropping it
/// stops the watching (a reload in progress finishes first).
pub struct PluginWatcher {
    stop: Option<mpsc::Sender<Message>>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for PluginWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginWatcher").finish()
    }
}

enum Message {
    Changed(Vec<PathBuf>),
    Stop,
}

/// What the worker watches: plugin folders (canonical) with their ids, and the config file.
struct Targets {
    plugins: Vec<(String, PathBuf)>,
    config: PathBuf,
}

/// What changed since the last reload, waiting for the files to be quiet.
#[derive(Debug, Default)]
struct Pending {
    /// `pincer.json` changed.
    config: bool,
    /// The plugins whose files changed.
    plugins: BTreeSet<String>,
}

impl Targets {
    fn of(runtime: &Runtime) -> Self {
        let plugins = runtime
            .plugins()
            .into_iter()
            .filter(|p| p.status != PluginState::Disabled)
            .map(|p| (p.id, canonical(&p.dir)))
            .collect();
        Targets {
            plugins,
            config: canonical(&runtime.home().config_path()),
        }
    }

    /// Adds to `pending` what a changed path belongs to (the config, plugins); whether it
    /// concerns any of them (other files in the watched folders are none of the watcher's
    /// business, and must not hold a reload back).
    fn classify(&self, path: &Path, pending: &mut Pending) -> bool {
        let mut relevant = false;
        if path == self.config {
            pending.config = true;
            relevant = true;
        }
        for (id, dir) in &self.plugins {
            if path.starts_with(dir) {
                pending.plugins.insert(id.clone());
                relevant = true;
            }
        }
        relevant
    }

    /// (Re)installs the watches: after a folder was replaced its old watch is gone.
    fn watch(&self, watcher: &mut notify::RecommendedWatcher) {
        let mut parents = BTreeSet::new();
        for (id, dir) in &self.plugins {
            if let Err(err) = watcher.watch(dir, RecursiveMode::Recursive) {
                tracing::debug!(plugin = %id, dir = %dir.display(), error = %err, "cannot watch plugin folder");
            }
            if let Some(parent) = dir.parent() {
                parents.insert(parent.to_owned());
            }
        }
        if let Some(home) = self.config.parent() {
            parents.insert(home.to_owned());
        }
        for parent in parents {
            if parent.is_dir() {
                if let Err(err) = watcher.watch(&parent, RecursiveMode::NonRecursive) {
                    tracing::debug!(dir = %parent.display(), error = %err, "cannot watch folder");
                }
            }
        }
    }
}

/// The canonical form of a path whose last component may not exist yet.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(full) = path.canonicalize() {
        return full;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .map(|p| p.join(name))
            .unwrap_or_else(|_| path.to_owned()),
        _ => path.to_owned(),
    }
}

impl PluginWatcher {
    /// Starts watching `runtime`'s plugin folders and `pincer.json`.
    ///
    /// # Errors
    /// [`WatchError`] when the platform's watcher cannot start.
    pub fn start(runtime: Arc<Runtime>, options: WatchOptions) -> Result<Self, WatchError> {
        let (sender, receiver) = mpsc::channel::<Message>();
        let events = sender.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
                Ok(event) if !event.kind.is_access() => {
                    let _ = events.send(Message::Changed(event.paths));
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "plugin file watch error"),
            })?;
        let mut targets = Targets::of(&runtime);
        targets.watch(&mut watcher);
        let worker = std::thread::Builder::new()
            .name("pincer-watch".into())
            .spawn(move || {
                let mut pending = Pending::default();
                // When the watched files will have been quiet for the debounce window; only
                // events that concern them move it.
                let mut quiet_at: Option<Instant> = None;
                loop {
                    let message = match quiet_at {
                        None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
                        Some(at) => {
                            receiver.recv_timeout(at.saturating_duration_since(Instant::now()))
                        }
                    };
                    match message {
                        Ok(Message::Changed(paths)) => {
                            let mut relevant = false;
                            for path in paths {
                                relevant |= targets.classify(&path, &mut pending);
                            }
                            if relevant {
                                quiet_at = Some(Instant::now() + options.debounce);
                            }
                        }
                        Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                        Err(RecvTimeoutError::Timeout) => {
                            quiet_at = None;
                            // Quiet for the debounce window: reload what changed.
                            let report = |event: WatchEvent| {
                                log(&event);
                                if let Some(on_reload) = &options.on_reload {
                                    on_reload(&event);
                                }
                            };
                            let Pending { config, plugins } = std::mem::take(&mut pending);
                            if config {
                                report(WatchEvent::Config(runtime.reload_config()));
                            }
                            for id in plugins {
                                report(WatchEvent::Plugin(runtime.reload_plugin(&id)));
                            }
                            targets = Targets::of(&runtime);
                            targets.watch(&mut watcher);
                        }
                    }
                }
            })
            .map_err(|err| WatchError(notify::Error::io(err)))?;
        Ok(PluginWatcher {
            stop: Some(sender),
            worker: Some(worker),
        })
    }
}

fn log(event: &WatchEvent) {
    match event {
        WatchEvent::Config(Ok(outcome)) => tracing::info!(?outcome, "pincer.json reloaded"),
        WatchEvent::Plugin(Ok(outcome)) if outcome.unchanged => {
            tracing::debug!(plugin = %outcome.plugin_id, "plugin files touched, content unchanged")
        }
        WatchEvent::Plugin(Ok(outcome)) => {
            tracing::info!(plugin = %outcome.plugin_id, generations = ?outcome.engines, "plugin hot-reloaded")
        }
        WatchEvent::Config(Err(err)) | WatchEvent::Plugin(Err(err)) => {
            tracing::warn!(code = err.code(), "{err}")
        }
    }
}

impl Drop for PluginWatcher {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Message::Stop);
        }
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}
