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
//! - A failed write or sync never leaves the file so that a later append is glued to a
//!   fragment (every byte goes through the [`disk`](crate::disk) seam):
//!   - a failed **write** (a full disk: part of the line may have been written) is cut back to
//!     the end of the last complete line before the error is returned
//!     ([`SessionWriteError::AppendFailed`]); nothing of that append is kept and the writer
//!     goes on — the next append, once there is space, starts a line of its own;
//!   - a failed **sync**, or a write whose fragment cannot be cut off, *poisons* the writer:
//!     what reached the disk is unknown (after a failed `fdatasync` Linux may have dropped the
//!     dirty pages, and will not say so twice — PostgreSQL's "fsyncgate"), so every later
//!     append, commit or save is refused with [`SessionWriteError::Poisoned`] and nothing more
//!     is written, not even on drop. [`SessionWriter::recover`] then cuts the file back to
//!     where the last successful sync left it (nothing after it was acknowledged as durable),
//!     syncs that, and reads the file again; the harness does so before its next operation on
//!     the session. Opening the file again also reads what is really there and ends a torn
//!     last line ([`SessionWriter::open`]).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use pincer_plugin_abi::latest::Message;
use serde_json::{json, Map, Value};

use super::time::{iso_now, now_ms};
use super::tree::{SessionReadError, SessionTree};
use crate::disk;

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
    /// An append could not be written (a full disk, an I/O error): the file was cut back to
    /// its last complete line, so nothing of it is kept and the writer goes on.
    #[error(
        "cannot append to session {}: {source}; nothing of this append was kept (the file ends \
         with its last complete entry, as before it): free disk space or fix the error, then \
         append again",
        path.display()
    )]
    AppendFailed {
        /// The file.
        path: PathBuf,
        /// The write's error.
        source: std::io::Error,
    },
    /// An earlier write or sync failed in a way that leaves the file's content unknown: this
    /// writer appends nothing more.
    #[error(
        "session {} is not appended to any more by this writer: {cause}; what reached the disk \
         is unknown, so nothing more is written through it — open the session again (the \
         gateway's next call on it cuts the file back to its last durable entry and goes on; a \
         new command reads what is really on the disk)",
        path.display()
    )]
    Poisoned {
        /// The file.
        path: PathBuf,
        /// What failed, and why.
        cause: String,
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
            SessionWriteError::AppendFailed { .. } => "session_append_failed",
            SessionWriteError::Poisoned { .. } => "session_write_poisoned",
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
    /// Where the last complete line written or read ends: what a failed write is cut back to.
    pub(super) end: u64,
    /// Where the file ended at the last successful sync (or when it was opened): what
    /// [`SessionWriter::recover`] cuts back to after a failed sync.
    pub(super) synced: u64,
    /// Why this writer writes nothing more (a sync failed, or a failed write could not be cut
    /// back; see the module docs): every append is refused, nothing is written on drop.
    pub(super) poisoned: Option<String>,
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
            disk::create_dir_all(parent).map_err(io)?;
        }
        let file =
            disk::open(path, OpenOptions::new().append(true).create_new(true)).map_err(io)?;
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
        // Synced with durability `turn` too: a recovery never cuts back before the header.
        if durability != Durability::None {
            writer.sync()?;
        }
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
        let file = disk::open(path, OpenOptions::new().append(true)).map_err(io)?;
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
            disk::write_all(&writer.file, path, b"\n").map_err(io)?;
        }
        writer.end = writer.file.metadata().map_err(io)?.len();
        writer.synced = writer.end;
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
            end: 0,
            synced: 0,
            poisoned: None,
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
        disk::copy(&self.path, &aside).map_err(io)?;
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
        disk::replace(&self.path, &fresh, text.as_bytes()).map_err(io)?;
        let file = disk::open(&self.path, OpenOptions::new().append(true)).map_err(io)?;
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

    /// Why this writer appends nothing more, when an earlier write or sync failed so that the
    /// file's content is unknown (see the module docs): open the file again to go on.
    pub fn is_poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Makes a poisoned writer write again: cuts the file back to where the last successful
    /// sync left it (with durability `none`, to its last complete line), syncs it, and reads
    /// the session again from the file — the appends acknowledged as durable are all there,
    /// and nothing of a later one. Does nothing when the writer is not poisoned.
    ///
    /// # Errors
    /// [`SessionWriteError::Poisoned`] when the file cannot be cut back or synced (the writer
    /// stays poisoned), or the file's read error.
    pub fn recover(&mut self) -> Result<(), SessionWriteError> {
        if self.poisoned.is_none() || self.staged.is_some() {
            return self.refuse_if_poisoned();
        }
        let keep = if self.durability == Durability::None {
            self.end
        } else {
            self.synced
        };
        if let Err(err) = disk::set_len(&self.file, &self.path, keep)
            .and_then(|()| disk::sync_data(&self.file, &self.path))
        {
            return Err(self.poison(format!(
                "it could not be cut back to its last durable entry ({err})"
            )));
        }
        let tree = SessionTree::read(&self.path)?;
        tracing::warn!(session = %self.path.display(), bytes = keep,
            "session writer recovered: the file was cut back to its last durable entry");
        self.last_entry = tree.leaf.clone();
        self.tree = tree;
        self.end = keep;
        self.synced = keep;
        self.poisoned = None;
        Ok(())
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
        self.refuse_if_poisoned()?;
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
        if let Err(source) = disk::write_all(&self.file, &self.path, line.as_bytes()) {
            return Err(self.cut_back(source));
        }
        self.end += line.len() as u64;
        line.pop();
        Ok(line)
    }

    /// After a failed write: cuts the file back to the end of its last complete line, so that
    /// the next append starts a line of its own; poisons the writer when that fails too.
    fn cut_back(&mut self, source: std::io::Error) -> SessionWriteError {
        match disk::set_len(&self.file, &self.path, self.end) {
            Ok(()) => {
                tracing::warn!(session = %self.path.display(), err = %source,
                    "session append failed; its fragment was cut off");
                SessionWriteError::AppendFailed {
                    path: self.path.clone(),
                    source,
                }
            }
            Err(truncate) => self.poison(format!(
                "an append failed ({source}) and its fragment could not be cut off ({truncate})"
            )),
        }
    }

    /// Marks the writer failed for good (see the module docs); the error to report.
    pub(super) fn poison(&mut self, cause: String) -> SessionWriteError {
        tracing::error!(session = %self.path.display(), %cause,
            "session writer stopped: nothing more is appended until the session is opened again");
        self.poisoned = Some(cause.clone());
        SessionWriteError::Poisoned {
            path: self.path.clone(),
            cause,
        }
    }

    fn refuse_if_poisoned(&self) -> Result<(), SessionWriteError> {
        match &self.poisoned {
            Some(cause) => Err(SessionWriteError::Poisoned {
                path: self.path.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn sync_if(&mut self, level: Durability) -> Result<(), SessionWriteError> {
        // Staged lines are made durable by the group commit that writes them.
        if self.durability == level && self.staged.is_none() {
            self.sync()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), SessionWriteError> {
        self.refuse_if_poisoned()?;
        match disk::sync_data(&self.file, &self.path) {
            Ok(()) => {
                self.synced = self.end;
                Ok(())
            }
            Err(source) => Err(self.poison(format!("fdatasync failed ({source})"))),
        }
    }
}

impl Drop for SessionWriter {
    fn drop(&mut self) {
        if self.poisoned.is_some() {
            return;
        }
        // Left staged only when a group commit did not finish (a panic): write it as it stands.
        if let Some(staged) = self.staged.take().filter(|s| !s.is_empty()) {
            if let Err(err) = disk::write_all(&self.file, &self.path, &staged) {
                tracing::warn!(%err, "session lines not written on close");
                let _ = disk::set_len(&self.file, &self.path, self.end);
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
