//! Where sessions live: the [`SessionStore`] seam and its embedded default, [`JsonlStore`] —
//! `$PINCER_HOME/agents/<agentId>/sessions/<sessionId>.jsonl`, with the index `sessions.json`
//! (sessionKey → sessionId, file, update time and OpenClaw's counters: `compactionCount`,
//! `inputTokens`, `outputTokens`, `totalTokens`, `contextTokens`) written atomically (a temp
//! file, then a rename), as OpenClaw lays them out. Index updates are read-modify-writes serialised by
//! `sessions.json.lock`, so concurrent updates (two processes, a CLI beside a gateway) never lose
//! one another; fields of an index entry that pincer does not know (OpenClaw's `chatType`,
//! toggles, overrides …) are kept as they are.
//!
//! A session is named by a [`SessionKey`] — never by a path: the mapping from key to storage is
//! the store's, so another store (a database) takes the same keys. A key is looked up in its
//! agent's index, else taken as a session id of that agent ([`SessionStore::find`]); a new
//! session's file is always `<agents>/<agentId>/sessions/<sessionId>.jsonl`, the header's `id`
//! and the index's `sessionId` being that one id. A key never moves to a new session silently:
//! [`SessionStore::create`] and [`JsonlStore::register`] refuse a key the index holds unless
//! told to replace it ([`OnExisting::Replace`]), and then say what they replaced. Only the local
//! CLI names a session by a path, and only a checked [`SessionFile`] ([`JsonlStore::for_file`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::context::{build_session_context, SessionContext};
use super::key::{AgentId, SessionFile, SessionKey};
use super::time::now_ms;
use super::tree::SessionTree;
use super::writer::{new_session_id, Durability, SessionWriteError, SessionWriter};

/// The agent a command means when it names none.
pub const DEFAULT_AGENT: &str = "main";

/// One session, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// The session key (`None` for a file the index does not name).
    pub session_key: Option<String>,
    /// The session id (the file's stem).
    pub session_id: String,
    /// The file.
    pub session_file: PathBuf,
    /// When the index last saw it written, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<i64>,
    /// OpenClaw's counters kept in the index.
    #[serde(flatten)]
    pub counters: SessionCounters,
}

/// The counters `sessions.json` keeps per session key, named as OpenClaw names them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCounters {
    /// Compactions completed for this session key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_count: Option<u64>,
    /// Input tokens of the last model call (as the provider reported them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens of the last model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Total tokens of the last model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// The context the last turn sent, in tokens (an estimate where no usage was reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
}

/// One change to a session's counters ([`SessionStore::record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterUpdate {
    /// A compaction completed: `compactionCount` + 1.
    Compaction,
    /// A model call's usage: the token counters are replaced by it.
    Usage {
        /// Input tokens.
        input: u64,
        /// Output tokens.
        output: u64,
        /// Total tokens (input + output + cache, as reported).
        total: u64,
        /// The context sent, in tokens.
        context: u64,
    },
}

impl SessionCounters {
    fn apply(&mut self, update: CounterUpdate) {
        match update {
            CounterUpdate::Compaction => {
                self.compaction_count = Some(self.compaction_count.unwrap_or(0) + 1);
            }
            CounterUpdate::Usage {
                input,
                output,
                total,
                context,
            } => {
                self.input_tokens = Some(input);
                self.output_tokens = Some(output);
                self.total_tokens = Some(total);
                self.context_tokens = Some(context);
            }
        }
    }
}

impl SessionSummary {
    /// A session file the index does not name: its id is the file's stem.
    fn unindexed(session_file: PathBuf) -> Self {
        SessionSummary {
            session_key: None,
            session_id: session_file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            session_file,
            updated_at: None,
            counters: SessionCounters::default(),
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Nothing matched the reference.
    #[error(
        "no session \"{reference}\" for agent \"{agent}\": give a session key or a session id \
         (`pincer sessions list` shows them), or on the command line a session file's path"
    )]
    NotFound {
        /// The agent.
        agent: String,
        /// What was asked for.
        reference: String,
    },
    /// The index is not valid JSON of the expected shape.
    #[error("the session index {} is damaged: {message}; fix or remove it (the session files are intact)", path.display())]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An I/O error.
    #[error("session store I/O on {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Writing a session failed.
    #[error(transparent)]
    Write(#[from] SessionWriteError),
    /// The key already names a session, and the operation would point it at a new one.
    #[error(
        "session key \"{key}\" of agent \"{agent}\" already names session {session_id} ({}): \
         nothing was changed; use a new key, or replace it (`--force` on the command line; the \
         old file is kept)",
        file.display()
    )]
    KeyExists {
        /// The agent.
        agent: String,
        /// The key.
        key: String,
        /// The session it names.
        session_id: String,
        /// That session's file.
        file: PathBuf,
    },
}

impl StoreError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "session_not_found",
            StoreError::BadIndex { .. } => "session_index_damaged",
            StoreError::Io { .. } => "session_store_io",
            StoreError::Write(e) => e.code(),
            StoreError::KeyExists { .. } => "session_key_exists",
        }
    }
}

/// What creating or registering a session does with a key the index already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExisting {
    /// Refuse ([`StoreError::KeyExists`]): nothing is written.
    Refuse,
    /// Point the key at the new session; the old session's file stays where it is.
    Replace,
}

/// A session created (or a file registered) under a key.
#[derive(Debug)]
pub struct Created<W> {
    /// The new session.
    pub summary: SessionSummary,
    /// Its writer ([`SessionStore::create`]), or `()` ([`JsonlStore::register`]).
    pub writer: W,
    /// The session the key named before, when it was replaced.
    pub replaced: Option<SessionSummary>,
}

/// Where sessions are kept. The JSONL store is the embedded default; a database backend (a fleet
/// of gateways sharing sessions) implements the same operations.
pub trait SessionStore {
    /// The sessions of `agent`, by session key, then unindexed files, each sorted.
    ///
    /// # Errors
    /// I/O errors or a damaged index.
    fn list(&self, agent: &AgentId) -> Result<Vec<SessionSummary>, StoreError>;

    /// The session `key` names in its agent's index, else the session of that agent whose id is
    /// `key`; `None` when there is none.
    ///
    /// # Errors
    /// I/O errors or a damaged index.
    fn find(&self, key: &SessionKey) -> Result<Option<SessionSummary>, StoreError>;

    /// As [`SessionStore::find`], with nothing found an error.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], or as [`SessionStore::find`].
    fn resolve(&self, key: &SessionKey) -> Result<SessionSummary, StoreError> {
        self.find(key)?.ok_or_else(|| StoreError::NotFound {
            agent: key.agent().to_string(),
            reference: key.to_string(),
        })
    }

    /// Reads a session.
    ///
    /// # Errors
    /// I/O errors.
    fn read(&self, session: &SessionSummary) -> Result<SessionTree, StoreError>;

    /// The context of a session at `leaf` (the active leaf when `None`): OpenClaw's
    /// `buildSessionContext`.
    ///
    /// # Errors
    /// As [`SessionStore::read`].
    fn context(
        &self,
        session: &SessionSummary,
        leaf: Option<&str>,
    ) -> Result<SessionContext, StoreError> {
        let tree = self.read(session)?;
        Ok(build_session_context(&tree, leaf))
    }

    /// Opens a session to append to it (one writer per session at a time).
    ///
    /// # Errors
    /// I/O errors, [`SessionWriteError::Locked`] or a session of a future version.
    fn open(
        &self,
        session: &SessionSummary,
        durability: Durability,
    ) -> Result<SessionWriter, StoreError>;

    /// Updates the counters of the session indexed under `key`.
    ///
    /// # Errors
    /// I/O errors, a damaged index, or a key the index does not hold.
    fn record(
        &self,
        key: &SessionKey,
        update: CounterUpdate,
    ) -> Result<SessionCounters, StoreError>;

    /// Creates a new, empty session under `key` and records it in the index.
    ///
    /// # Errors
    /// I/O errors, or [`StoreError::KeyExists`] for a key the index holds with
    /// [`OnExisting::Refuse`] (checked before anything is written).
    fn create(
        &self,
        key: &SessionKey,
        cwd: &str,
        durability: Durability,
        existing: OnExisting,
    ) -> Result<Created<SessionWriter>, StoreError>;

    /// Whether `session` is kept where `agent`'s sessions are (an index entry may name a
    /// session elsewhere, which only the local CLI may follow).
    fn holds(&self, agent: &AgentId, session: &SessionSummary) -> bool;

    /// The session `file` is for `agent`: its index entry when the index names that file, else
    /// an unindexed summary (its id the file's stem).
    fn for_file(&self, agent: &AgentId, file: &SessionFile) -> SessionSummary;

    /// Whether the session an index entry names can be opened: there, gone, or there but not
    /// usable as a session.
    ///
    /// # Errors
    /// I/O errors other than the session being gone.
    fn presence(&self, session: &SessionSummary) -> Result<Presence, StoreError>;
}

/// Whether the session an index entry names can be opened ([`SessionStore::presence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// It is there.
    Present,
    /// It is gone: the key may be given a new session.
    Gone,
    /// It is there but no session can be kept in it; why, to finish "which …".
    Unusable(&'static str),
}

/// The on-disk index entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexEntry {
    session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated_at: Option<i64>,
    #[serde(flatten)]
    counters: SessionCounters,
    /// Fields pincer does not know, kept as they are.
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

/// Sessions as JSONL files under `<root>/<agent>/sessions/`.
#[derive(Debug, Clone)]
pub struct JsonlStore {
    root: PathBuf,
}

impl JsonlStore {
    /// A store rooted at `agents_dir` (`$PINCER_HOME/agents`).
    pub fn new(agents_dir: PathBuf) -> Self {
        JsonlStore { root: agents_dir }
    }

    /// The folder of `agent`'s sessions.
    pub fn sessions_dir(&self, agent: &AgentId) -> PathBuf {
        self.dir_of(agent.as_str())
    }

    fn dir_of(&self, agent: &str) -> PathBuf {
        self.root.join(agent).join("sessions")
    }

    fn index_path(&self, agent: &str) -> PathBuf {
        self.dir_of(agent).join("sessions.json")
    }

    /// Holds `sessions.json.lock` exclusively until dropped (waiting for another holder).
    fn lock_index(&self, agent: &str) -> Result<std::fs::File, StoreError> {
        let dir = self.dir_of(agent);
        let path = dir.join("sessions.json.lock");
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        crate::disk::create_dir_all(&dir).map_err(io)?;
        let file = crate::disk::open(
            &path,
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true),
        )
        .map_err(io)?;
        file.lock().map_err(io)?;
        Ok(file)
    }

    fn read_index(&self, agent: &str) -> Result<BTreeMap<String, IndexEntry>, StoreError> {
        let path = self.index_path(agent);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| StoreError::BadIndex {
                path,
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    /// Writes the index atomically: a temp file beside it, synced, renamed over it.
    fn write_index(
        &self,
        agent: &str,
        index: &BTreeMap<String, IndexEntry>,
    ) -> Result<(), StoreError> {
        let path = self.index_path(agent);
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(index).expect("the index serializes") + "\n";
        crate::disk::replace(&path, &tmp, text.as_bytes()).map_err(io)
    }

    fn summary(&self, agent: &str, key: Option<&str>, entry: &IndexEntry) -> SessionSummary {
        SessionSummary {
            session_key: key.map(str::to_owned),
            session_id: entry.session_id.clone(),
            session_file: entry.session_file.clone().unwrap_or_else(|| {
                self.dir_of(agent)
                    .join(format!("{}.jsonl", entry.session_id))
            }),
            updated_at: entry.updated_at,
            counters: entry.counters.clone(),
        }
    }

    /// Records `session_file` under `key` (an import, or a session written elsewhere).
    ///
    /// # Errors
    /// I/O errors, a damaged index, or [`StoreError::KeyExists`] when `key` names another
    /// session and `existing` is [`OnExisting::Refuse`].
    pub fn register(
        &self,
        key: &SessionKey,
        session_id: &str,
        session_file: &Path,
        existing: OnExisting,
    ) -> Result<Created<()>, StoreError> {
        let agent = key.agent().as_str();
        let session_key = key.as_str();
        // Read-modify-write under a lock, so that two processes registering at once both land.
        let _lock = self.lock_index(agent)?;
        let mut index = self.read_index(agent)?;
        let replaced = match index.get(session_key) {
            Some(old) if old.session_id != session_id => {
                let old = self.summary(agent, Some(session_key), old);
                if existing == OnExisting::Refuse {
                    return Err(self.exists(key, old));
                }
                Some(old)
            }
            _ => None,
        };
        // A key given a new session keeps its settings (the fields pincer does not know); its
        // counters start again unless it is the same session.
        let (counters, other) = match index.remove(session_key) {
            Some(old) if old.session_id == session_id => (old.counters, old.other),
            Some(old) => (SessionCounters::default(), old.other),
            None => Default::default(),
        };
        let entry = IndexEntry {
            session_id: session_id.to_owned(),
            session_file: (session_file != self.dir_of(agent).join(format!("{session_id}.jsonl")))
                .then(|| session_file.to_owned()),
            updated_at: Some(now_ms()),
            counters,
            other,
        };
        let summary = self.summary(agent, Some(session_key), &entry);
        index.insert(session_key.to_owned(), entry);
        self.write_index(agent, &index)?;
        Ok(Created {
            summary,
            writer: (),
            replaced,
        })
    }

    fn exists(&self, key: &SessionKey, old: SessionSummary) -> StoreError {
        StoreError::KeyExists {
            agent: key.agent().to_string(),
            key: key.to_string(),
            session_id: old.session_id,
            file: old.session_file,
        }
    }
}

impl SessionStore for JsonlStore {
    fn list(&self, agent: &AgentId) -> Result<Vec<SessionSummary>, StoreError> {
        let agent = agent.as_str();
        let index = self.read_index(agent)?;
        let mut out: Vec<SessionSummary> = index
            .iter()
            .map(|(key, entry)| self.summary(agent, Some(key), entry))
            .collect();
        let dir = self.dir_of(agent);
        let mut unindexed = Vec::new();
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let path = entry.path();
                    let is_session = path.extension().is_some_and(|e| e == "jsonl")
                        // Originals kept beside (`<f>.corrupt-…`, `<f>.v1-…`) are not sessions.
                        && path
                            .file_stem()
                            .is_some_and(|s| !s.to_string_lossy().contains('.'));
                    if is_session && !out.iter().any(|s| s.session_file == path) {
                        unindexed.push(SessionSummary::unindexed(path));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(StoreError::Io { path: dir, source }),
        }
        unindexed.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        out.extend(unindexed);
        Ok(out)
    }

    fn find(&self, key: &SessionKey) -> Result<Option<SessionSummary>, StoreError> {
        let listed = self.list(key.agent())?;
        let reference = key.as_str();
        Ok(listed
            .iter()
            .find(|s| s.session_key.as_deref() == Some(reference))
            .or_else(|| listed.iter().find(|s| s.session_id == reference))
            .cloned())
    }

    /// Whether `session`'s file lies directly in `agent`'s sessions folder (an index entry's
    /// `sessionFile` may name a file elsewhere, which only the local CLI may follow).
    /// The folders are compared as written, else resolved (an index OpenClaw wrote names its
    /// files by absolute paths, which may reach the same folder another way).
    fn holds(&self, agent: &AgentId, session: &SessionSummary) -> bool {
        let file = &session.session_file;
        let named = file
            .file_name()
            .is_some_and(|n| n != ".." && n != "." && !n.is_empty());
        let Some(parent) = file.parent() else {
            return false;
        };
        let dir = self.sessions_dir(agent);
        named
            && (parent == dir
                || matches!(
                    (std::fs::canonicalize(parent), std::fs::canonicalize(&dir)),
                    (Ok(a), Ok(b)) if a == b
                ))
    }

    /// The session `file` is for `agent`: its index entry when the index names that file, else
    /// an unindexed summary (its id the file's stem).
    fn for_file(&self, agent: &AgentId, file: &SessionFile) -> SessionSummary {
        let path = file.path();
        self.list(agent)
            .unwrap_or_default()
            .into_iter()
            .find(|s| s.session_file == path)
            .unwrap_or_else(|| SessionSummary::unindexed(path.to_owned()))
    }

    /// A directory, a symbolic link or anything but a regular file is unusable.
    fn presence(&self, session: &SessionSummary) -> Result<Presence, StoreError> {
        match std::fs::symlink_metadata(&session.session_file) {
            Ok(meta) if meta.is_file() => Ok(Presence::Present),
            Ok(meta) if meta.is_dir() => Ok(Presence::Unusable("is a directory")),
            Ok(meta) if meta.is_symlink() => Ok(Presence::Unusable("is a symbolic link")),
            Ok(_) => Ok(Presence::Unusable("is not a regular file")),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Presence::Gone),
            Err(source) => Err(StoreError::Io {
                path: session.session_file.clone(),
                source,
            }),
        }
    }

    fn read(&self, session: &SessionSummary) -> Result<SessionTree, StoreError> {
        Ok(SessionTree::read(&session.session_file).map_err(SessionWriteError::from)?)
    }

    fn create(
        &self,
        key: &SessionKey,
        cwd: &str,
        durability: Durability,
        existing: OnExisting,
    ) -> Result<Created<SessionWriter>, StoreError> {
        // Refused before a file is made; `register` checks again under the index's lock.
        if existing == OnExisting::Refuse {
            let indexed = self.read_index(key.agent().as_str())?;
            if let Some(old) = indexed.get(key.as_str()) {
                let old = self.summary(key.agent().as_str(), Some(key.as_str()), old);
                return Err(self.exists(key, old));
            }
        }
        let session_id = new_session_id();
        let file = self
            .sessions_dir(key.agent())
            .join(format!("{session_id}.jsonl"));
        let writer = SessionWriter::create(&file, cwd, durability)?;
        match self.register(key, &session_id, &file, existing) {
            Ok(created) => Ok(Created {
                summary: created.summary,
                writer,
                replaced: created.replaced,
            }),
            Err(err) => {
                // Not indexed: the empty session is not left behind.
                drop(writer);
                let _ = crate::disk::remove_file(&file);
                Err(err)
            }
        }
    }

    fn open(
        &self,
        session: &SessionSummary,
        durability: Durability,
    ) -> Result<SessionWriter, StoreError> {
        Ok(SessionWriter::open(&session.session_file, durability)?)
    }

    fn record(
        &self,
        key: &SessionKey,
        update: CounterUpdate,
    ) -> Result<SessionCounters, StoreError> {
        let (agent, session_key) = (key.agent().as_str(), key.as_str());
        let _lock = self.lock_index(agent)?;
        let mut index = self.read_index(agent)?;
        let entry = index
            .get_mut(session_key)
            .ok_or_else(|| StoreError::NotFound {
                agent: agent.to_owned(),
                reference: session_key.to_owned(),
            })?;
        entry.counters.apply(update);
        entry.updated_at = Some(now_ms());
        let counters = entry.counters.clone();
        self.write_index(agent, &index)?;
        Ok(counters)
    }
}
