//! Writing OpenClaw session files that OpenClaw reads back: version 4, one JSON object per
//! line, full UUID entry ids, append-only.
//!
//! - [`SessionWriter::create`] writes the header; [`SessionWriter::open`] continues a file.
//! - Appends are children of the active leaf and become the leaf; [`SessionWriter::branch`]
//!   moves the leaf and writes nothing; [`SessionWriter::save`] writes a `leaf` record when the
//!   active leaf is not the last entry (as OpenClaw does at save time), and is called on drop.
//! - Nothing already written is ever rewritten, with two exceptions that keep the original
//!   beside the new file: a file without a valid header is backed up as
//!   `<f>.corrupt-<ms>-<8hex>.jsonl` before the first write, and a version 1–2 file (migrated in
//!   memory with fresh ids, which differ on every load) is kept as `<f>.v<N>-<ms>.jsonl` and
//!   written out once as version 4 before anything is appended.
//! - A file of a newer version than 4 is read for what is understood and refused for writing.
//! - Durability ([`Durability`]): `entry` fsyncs every append, `turn` at
//!   [`SessionWriter::commit`], `none` leaves it to the OS.
//! - Several threads or tasks share one writer through
//!   [`SharedSessionWriter`](super::group_commit::SharedSessionWriter) (group commit).
//! - One writer per file: an exclusive advisory lock is held while the writer lives; a second
//!   writer (in this or another process) gets [`SessionWriteError::Locked`] at once.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use pincer_plugin_api::abi::latest::Message;
use serde_json::{json, Map, Value};

use super::time::{iso_now, now_ms};
use super::tree::{SessionReadError, SessionTree};

/// The session file version this writer writes.
pub const SESSION_VERSION: u64 = 4;

/// When appends reach the disk (config `sessions.durability`).
pub use crate::types::Durability;

/// Why a session could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SessionWriteError {
    /// The file could not be read first.
    #[error(transparent)]
    Read(#[from] SessionReadError),
    /// An I/O error while writing.
    #[error("cannot write session {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Another writer holds the file.
    #[error(
        "session {} is being written by another pincer (its lock is held){}; `pincer sessions \
         show` and `pincer sessions context` read it meanwhile",
        path.display(),
        match holder {
            Some(holder) if holder.gateway => format!(": {holder}"),
            Some(holder) => format!(" ({holder}): wait for it to finish, or stop it"),
            None => ": wait for it to finish, or stop it".to_owned(),
        }
    )]
    Locked {
        /// The file.
        path: PathBuf,
        /// The process holding the lock, when it can be seen (`/proc/locks`).
        holder: Option<super::holder::LockHolder>,
    },
    /// The file is of a version this pincer does not write.
    #[error(
        "session {} is version {version}, newer than the {SESSION_VERSION} this pincer writes: it \
         was read, but nothing is appended to it; upgrade pincer to continue it",
        path.display()
    )]
    FutureVersion {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u64,
    },
    /// The record's line would be longer than `sessions.maxLineBytes`: nothing was written.
    #[error(
        "cannot append to session {}: the record is {bytes} bytes as one line, longer than \
         sessions.maxLineBytes ({max_line_bytes}); nothing was written (send a smaller message, \
         or raise sessions.maxLineBytes in pincer.json)",
        path.display()
    )]
    LineTooLong {
        /// The file.
        path: PathBuf,
        /// The line's length (without its newline).
        bytes: u64,
        /// The bound.
        max_line_bytes: u64,
    },
    /// `branch` named an entry the session does not have.
    #[error("session {} has no entry \"{id}\" to branch from", path.display())]
    NoSuchEntry {
        /// The file.
        path: PathBuf,
        /// The id.
        id: String,
    },
}

impl SessionWriteError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SessionWriteError::Read(e) => e.code(),
            SessionWriteError::Io { .. } => "session_io",
            SessionWriteError::Locked { .. } => "session_locked",
            SessionWriteError::FutureVersion { .. } => "session_future_version",
            SessionWriteError::NoSuchEntry { .. } => "session_no_such_entry",
            SessionWriteError::LineTooLong { .. } => "session_line_too_long",
        }
    }
}

/// An open session file, appended to.
#[derive(Debug)]
pub struct SessionWriter {
    pub(super) path: PathBuf,
    pub(super) file: File,
    tree: SessionTree,
    pub(super) durability: Durability,
    /// The last entry written or read, in file order (where a `leaf` record must point away from).
    last_entry: Option<String>,
    /// Lines formatted but not yet written, when a [`SharedSessionWriter`] writes them in
    /// batches; `None` when every line is written at once.
    pub(super) staged: Option<Vec<u8>>,
    /// A batched write or sync failed: what reached the disk is unknown, so nothing more is
    /// written (not even the `leaf` record on drop).
    pub(super) poisoned: bool,
}

impl SessionWriter {
    /// Creates a new session file at `path` (which must not exist) with a version-4 header whose
    /// `id` is the file's stem: OpenClaw names a session file `<sessionId>.jsonl`, so the header,
    /// the file name and the index's `sessionId` hold one id (a fresh one when the stem is empty).
    ///
    /// # Errors
    /// I/O errors, or [`SessionWriteError::Locked`].
    pub fn create(
        path: &Path,
        cwd: &str,
        durability: Durability,
    ) -> Result<Self, SessionWriteError> {
        let io = |source| SessionWriteError::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)
            .map_err(io)?;
        let mut writer = SessionWriter::locked(path, file, SessionTree::default(), durability)?;
        let header = json!({
            "type": "session",
            "version": SESSION_VERSION,
            "id": path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(new_session_id),
            "timestamp": iso_now(),
            "cwd": cwd,
        });
        writer.write_line(&header)?;
        writer.sync_if(Durability::Entry)?;
        if let Value::Object(header) = header {
            writer.tree.header = Some(header);
        }
        Ok(writer)
    }

    /// Opens an existing session file to append to it.
    ///
    /// # Errors
    /// As [`SessionWriteError`] says: unreadable, locked, or of a future version.
    pub fn open(path: &Path, durability: Durability) -> Result<Self, SessionWriteError> {
        let io = |source| SessionWriteError::Io {
            path: path.to_owned(),
            source,
        };
        let file = OpenOptions::new().append(true).open(path).map_err(io)?;
        // Lock before reading, so that what is read is what a concurrent writer finished.
        let mut writer = SessionWriter::locked(path, file, SessionTree::default(), durability)?;
        let tree = SessionTree::read(path)?;
        let version = tree
            .header
            .as_ref()
            .and_then(|h| h.get("version"))
            .and_then(Value::as_u64);
        match (tree.header.is_some(), version) {
            (true, Some(v)) if v > SESSION_VERSION => {
                return Err(SessionWriteError::FutureVersion {
                    path: path.to_owned(),
                    version: v,
                })
            }
            (false, _) => {
                writer.rewrite_aside(&tree, "corrupt", None)?;
            }
            _ if tree.migrated => {
                let was = tree.source_version;
                writer.rewrite_aside(&tree, &format!("v{was}"), Some(was))?;
            }
            _ => {}
        }
        // A crash can leave a torn last line without its newline: end it, so that the next
        // entry starts a line of its own (the torn one stays one dropped line).
        if !tree.ends_with_newline {
            writer.file.write_all(b"\n").map_err(io)?;
        }
        // Where the file leaves the leaf (its last `leaf` record, else its last entry): a
        // `leaf` record is written on save when the leaf moves away from it.
        writer.last_entry = tree.leaf.clone();
        writer.tree = tree;
        Ok(writer)
    }

    fn locked(
        path: &Path,
        file: File,
        tree: SessionTree,
        durability: Durability,
    ) -> Result<Self, SessionWriteError> {
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SessionWriteError::Locked {
                    path: path.to_owned(),
                    holder: super::holder::lock_holder(path),
                })
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(SessionWriteError::Io {
                    path: path.to_owned(),
                    source,
                })
            }
        }
        Ok(SessionWriter {
            path: path.to_owned(),
            file,
            tree,
            durability,
            last_entry: None,
            staged: None,
            poisoned: false,
        })
    }

    /// Keeps the original file beside as `<f>.<tag>-<ms>[-<8hex>].jsonl` and writes the tree
    /// afresh as version 4 (header, then every entry and opaque record).
    fn rewrite_aside(
        &mut self,
        tree: &SessionTree,
        tag: &str,
        _old_version: Option<u64>,
    ) -> Result<(), SessionWriteError> {
        let io = |source| SessionWriteError::Io {
            path: self.path.clone(),
            source,
        };
        let stem = self.path.with_extension("");
        let hex = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let aside = PathBuf::from(format!("{}.{tag}-{}-{hex}.jsonl", stem.display(), now_ms()));
        std::fs::copy(&self.path, &aside).map_err(io)?;
        let mut header = tree.header.clone().unwrap_or_else(|| {
            let mut h = Map::new();
            h.insert("type".into(), "session".into());
            h.insert("id".into(), uuid::Uuid::now_v7().to_string().into());
            h.insert("timestamp".into(), iso_now().into());
            h
        });
        header.insert("version".into(), SESSION_VERSION.into());
        let mut text = serde_json::to_string(&Value::Object(header)).expect("json") + "\n";
        // Every record as read (a migrated one as migrated), in the order read.
        for line in tree
            .entries
            .iter()
            .map(|e| e.text())
            .chain(tree.opaque.iter().map(|r| r.as_str()))
        {
            text += line;
            text.push('\n');
        }
        // Write the new content beside, then swap it in: the lock stays on our open handle,
        // so reopen and re-lock the new file.
        let fresh = PathBuf::from(format!("{}.rewrite-{hex}.tmp", stem.display()));
        std::fs::write(&fresh, text).map_err(io)?;
        File::open(&fresh).and_then(|f| f.sync_all()).map_err(io)?;
        std::fs::rename(&fresh, &self.path).map_err(io)?;
        let file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        file.try_lock().map_err(|_| SessionWriteError::Locked {
            path: self.path.clone(),
            holder: super::holder::lock_holder(&self.path),
        })?;
        self.file = file;
        tracing::warn!(
            session = %self.path.display(),
            original = %aside.display(),
            "session rewritten as version {SESSION_VERSION} before appending; the original is kept beside it"
        );
        Ok(())
    }

    /// The session as written so far.
    pub fn tree(&self) -> &SessionTree {
        &self.tree
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `message`; returns the new entry's id.
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_message(&mut self, message: &Message) -> Result<String, SessionWriteError> {
        self.append("message", json!({ "message": message.to_value() }))
    }

    /// Appends a `compaction` entry.
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_compaction(
        &mut self,
        summary: &str,
        first_kept_entry_id: &str,
        tokens_before: u64,
        details: Option<Value>,
    ) -> Result<String, SessionWriteError> {
        self.append_compaction_measured(summary, first_kept_entry_id, tokens_before, None, details)
    }

    /// Appends a `compaction` entry with its optional `tokensAfter` (the estimate of the
    /// context it leaves).
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_compaction_measured(
        &mut self,
        summary: &str,
        first_kept_entry_id: &str,
        tokens_before: u64,
        tokens_after: Option<u64>,
        details: Option<Value>,
    ) -> Result<String, SessionWriteError> {
        let mut fields = json!({
            "summary": summary,
            "firstKeptEntryId": first_kept_entry_id,
            "tokensBefore": tokens_before,
        });
        if let Some(tokens_after) = tokens_after {
            fields["tokensAfter"] = tokens_after.into();
        }
        if let Some(details) = details {
            fields["details"] = details;
        }
        self.append("compaction", fields)
    }

    /// Appends a `reset` boundary (`reason`: new, reset, idle, daily, cron-stale).
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_reset(
        &mut self,
        reason: &str,
        first_kept_entry_id: Option<&str>,
    ) -> Result<String, SessionWriteError> {
        let mut fields = json!({ "reason": reason });
        if let Some(id) = first_kept_entry_id {
            fields["firstKeptEntryId"] = id.into();
        }
        self.append("reset", fields)
    }

    /// Appends a `custom_message` entry (in the model's context).
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_custom_message(
        &mut self,
        custom_type: &str,
        content: Value,
        display: bool,
        details: Option<Value>,
    ) -> Result<String, SessionWriteError> {
        let mut fields =
            json!({ "customType": custom_type, "content": content, "display": display });
        if let Some(details) = details {
            fields["details"] = details;
        }
        self.append("custom_message", fields)
    }

    /// Appends a `label` for `target_id` (`None` clears it).
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_label(
        &mut self,
        target_id: &str,
        label: Option<&str>,
    ) -> Result<String, SessionWriteError> {
        let mut fields = json!({ "targetId": target_id });
        if let Some(label) = label {
            fields["label"] = label.into();
        }
        self.append("label", fields)
    }

    /// Appends `session_info` with the session's name (runs of CR/LF collapse to one space).
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_session_info(&mut self, name: &str) -> Result<String, SessionWriteError> {
        let name = name
            .split(['\r', '\n'])
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        self.append("session_info", json!({ "name": name.trim() }))
    }

    /// Appends a `custom` entry (extension data, never in the model's context).
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_custom(
        &mut self,
        custom_type: &str,
        data: Option<Value>,
    ) -> Result<String, SessionWriteError> {
        let mut fields = json!({ "customType": custom_type });
        if let Some(data) = data {
            fields["data"] = data;
        }
        self.append("custom", fields)
    }

    /// Appends a `thinking_level_change`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_thinking_level_change(
        &mut self,
        level: &str,
    ) -> Result<String, SessionWriteError> {
        self.append("thinking_level_change", json!({ "thinkingLevel": level }))
    }

    /// Appends a `model_change`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn append_model_change(
        &mut self,
        provider: &str,
        model_id: &str,
    ) -> Result<String, SessionWriteError> {
        self.append(
            "model_change",
            json!({ "provider": provider, "modelId": model_id }),
        )
    }

    /// Moves the active leaf to `id`; the next append is its child. Writes nothing.
    ///
    /// # Errors
    /// [`SessionWriteError::NoSuchEntry`].
    pub fn branch(&mut self, id: &str) -> Result<(), SessionWriteError> {
        if self.tree.get(id).is_none() {
            return Err(SessionWriteError::NoSuchEntry {
                path: self.path.clone(),
                id: id.to_owned(),
            });
        }
        self.tree.leaf = Some(id.to_owned());
        Ok(())
    }

    /// Moves the leaf to `from` (the root when `None`) and appends a `branch_summary` there.
    ///
    /// # Errors
    /// [`SessionWriteError::NoSuchEntry`] or I/O errors.
    pub fn branch_with_summary(
        &mut self,
        from: Option<&str>,
        summary: &str,
        details: Option<Value>,
    ) -> Result<String, SessionWriteError> {
        match from {
            Some(id) => self.branch(id)?,
            None => self.tree.leaf = None,
        }
        let mut fields = json!({ "fromId": from.unwrap_or("root"), "summary": summary });
        if let Some(details) = details {
            fields["details"] = details;
        }
        self.append("branch_summary", fields)
    }

    /// Appends an entry of `kind` with `fields`, as a child of the active leaf.
    fn append(&mut self, kind: &str, fields: Value) -> Result<String, SessionWriteError> {
        let id = uuid::Uuid::new_v4().to_string();
        let mut record = Map::new();
        record.insert("type".into(), kind.into());
        record.insert("id".into(), id.clone().into());
        record.insert(
            "parentId".into(),
            self.tree.leaf.clone().map_or(Value::Null, Value::from),
        );
        record.insert("timestamp".into(), iso_now().into());
        if let Value::Object(fields) = fields {
            record.extend(fields);
        }
        let line = self.write_line(&Value::Object(record))?;
        self.sync_if(Durability::Entry)?;
        let _ = self.tree.push_line(line);
        self.tree.leaf = Some(id.clone());
        self.last_entry = Some(id.clone());
        Ok(id)
    }

    /// Ends a turn: with `turn` durability, this is where the appends reach the disk.
    ///
    /// # Errors
    /// I/O errors.
    pub fn commit(&mut self) -> Result<(), SessionWriteError> {
        self.save()?;
        if self.durability != Durability::None && self.staged.is_none() {
            self.sync()?;
        }
        Ok(())
    }

    /// Writes a `leaf` record when the active leaf is not the last entry.
    ///
    /// # Errors
    /// I/O errors.
    pub fn save(&mut self) -> Result<(), SessionWriteError> {
        if self.tree.leaf == self.last_entry {
            return Ok(());
        }
        let Some(last) = self.last_entry.clone() else {
            return Ok(());
        };
        let record = json!({
            "type": "leaf",
            "id": uuid::Uuid::new_v4().to_string(),
            "parentId": last,
            "timestamp": iso_now(),
            "targetId": self.tree.leaf,
        });
        self.write_line(&record)?;
        self.sync_if(Durability::Entry)?;
        self.last_entry = self.tree.leaf.clone();
        Ok(())
    }

    /// Writes `record` as one line; the line, without its newline.
    fn write_line(&mut self, record: &Value) -> Result<String, SessionWriteError> {
        let mut line = serde_json::to_string(record).expect("a JSON value serializes");
        let max_line_bytes = super::limits::max_line_bytes();
        if line.len() as u64 > max_line_bytes {
            return Err(SessionWriteError::LineTooLong {
                path: self.path.clone(),
                bytes: line.len() as u64,
                max_line_bytes,
            });
        }
        line.push('\n');
        if let Some(staged) = &mut self.staged {
            staged.extend_from_slice(line.as_bytes());
            line.pop();
            return Ok(line);
        }
        // One write of the whole line: an append of a torn line is what a crash leaves at worst,
        // and the reader drops it.
        self.file
            .write_all(line.as_bytes())
            .map_err(|source| SessionWriteError::Io {
                path: self.path.clone(),
                source,
            })?;
        line.pop();
        Ok(line)
    }

    fn sync_if(&mut self, level: Durability) -> Result<(), SessionWriteError> {
        // Staged lines are made durable by the group commit that writes them.
        if self.durability == level && self.staged.is_none() {
            self.sync()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), SessionWriteError> {
        self.file
            .sync_data()
            .map_err(|source| SessionWriteError::Io {
                path: self.path.clone(),
                source,
            })
    }
}

impl Drop for SessionWriter {
    fn drop(&mut self) {
        if self.poisoned {
            return;
        }
        // Left staged only when a group commit did not finish (a panic): write it as it stands.
        if let Some(staged) = self.staged.take().filter(|s| !s.is_empty()) {
            if let Err(err) = self.file.write_all(&staged) {
                tracing::warn!(%err, "session lines not written on close");
                return;
            }
        }
        if let Err(err) = self.commit() {
            tracing::warn!(%err, "session not saved on close");
        }
    }
}

/// A fresh session id: a UUID v7 (time-ordered), as OpenClaw's.
pub fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
