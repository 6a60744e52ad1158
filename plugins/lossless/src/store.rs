//! The SQLite store: every message of every conversation, in order, with its typed parts; the
//! summary DAG with its provenance; the full-text index; subagent grants; assembly statistics.
//!
//! One database per engine instance (`lossless.db` in the engine's state directory), in WAL
//! mode with `synchronous = FULL`, so a message is durable when the statement that inserted it
//! has committed. The schema is versioned by `PRAGMA user_version`; [`MIGRATIONS`] brings any
//! older database up to date inside one transaction.
//!
//! Every write transaction is `BEGIN IMMEDIATE`: it takes the write lock up front, where the
//! busy timeout applies, so two processes sharing one database (a gateway and a CLI) wait for
//! each other instead of failing a read-then-write upgrade with `SQLITE_BUSY`.
//!
//! Identity of a message (deduplication): the host's entry id when it gives one; otherwise
//! role + tool-call id + content hash (a tool-call id alone is not an identity: τ-bench reuses
//! them for distinct calls). A conversation is keyed by the host's session key (else the
//! session id).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{BlockKind, EngineError, Message, Role};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use sha2::{Digest as _, Sha256};

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// Each migration brings the schema from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    -- Tokens of the assembled context when afterTurn found it over the threshold; 0 = no debt.
    debt INTEGER NOT NULL DEFAULT 0,
    -- The budget of the last assembly (the one compaction aims below).
    last_budget INTEGER,
    -- Bumped by every pass that changed the summaries.
    epoch INTEGER NOT NULL DEFAULT 0,
    -- The last assembly's item identities (JSON array) and the epoch it saw.
    last_assembly TEXT,
    last_assembly_epoch INTEGER NOT NULL DEFAULT 0,
    assemblies INTEGER NOT NULL DEFAULT 0,
    stable_assemblies INTEGER NOT NULL DEFAULT 0,
    compaction_assemblies INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    seq INTEGER NOT NULL,
    entry_id TEXT,
    identity TEXT NOT NULL,
    role TEXT NOT NULL,
    tool_call_id TEXT,
    json TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    payload_path TEXT,
    indexed INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    UNIQUE (conversation_id, seq)
);
CREATE UNIQUE INDEX messages_entry ON messages (conversation_id, entry_id) WHERE entry_id IS NOT NULL;
CREATE INDEX messages_identity ON messages (conversation_id, identity);
CREATE INDEX messages_unindexed ON messages (indexed) WHERE indexed = 0;
CREATE TABLE parts (
    message_id INTEGER NOT NULL REFERENCES messages(id),
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT,
    tool_call_id TEXT,
    tool_name TEXT,
    PRIMARY KEY (message_id, idx)
);
CREATE TABLE summaries (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    depth INTEGER NOT NULL,
    text TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    source_tokens INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    level TEXT NOT NULL,
    parent_id INTEGER REFERENCES summaries(id),
    created_at INTEGER NOT NULL
);
CREATE INDEX summaries_roots ON summaries (conversation_id, first_seq) WHERE parent_id IS NULL;
CREATE TABLE summary_messages (
    summary_id INTEGER NOT NULL REFERENCES summaries(id),
    message_id INTEGER NOT NULL REFERENCES messages(id),
    PRIMARY KEY (summary_id, message_id)
);
CREATE INDEX summary_messages_message ON summary_messages (message_id);
CREATE VIRTUAL TABLE fts USING fts5 (text, kind UNINDEXED, ref UNINDEXED, conversation_id UNINDEXED);
CREATE TABLE grants (
    child_key TEXT PRIMARY KEY,
    parent_conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    max_seq INTEGER NOT NULL,
    max_results INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
"#];

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A database error as the engine reports it.
pub fn db_error(context: &str) -> impl Fn(rusqlite::Error) -> EngineError + '_ {
    move |err| EngineError::failed(format!("lossless store: {context}: {err}"))
}

/// A stored message.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// Row id (`m<id>` in tool answers).
    pub id: i64,
    /// Position in the conversation, from 0.
    pub seq: i64,
    /// The host's entry id.
    pub entry_id: Option<String>,
    /// The role.
    pub role: String,
    /// The message as stored (a reference when its payload was externalized).
    pub json: String,
    /// The token estimate of the original.
    pub tokens: u64,
    /// Where the original payload lives when externalized.
    pub payload_path: Option<String>,
}

/// A summary node of the DAG.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Row id (`s<id>`).
    pub id: i64,
    /// 0 for a leaf (over messages), `n + 1` over nodes of depth at most `n`.
    pub depth: i64,
    /// The summary text.
    pub text: String,
    /// Its token estimate (as the assembled message).
    pub tokens: u64,
    /// Tokens of what it replaced.
    pub source_tokens: u64,
    /// First covered message seq.
    pub first_seq: i64,
    /// Last covered message seq.
    pub last_seq: i64,
    /// `normal`, `aggressive` or `truncation`.
    pub level: String,
    /// The node that condensed it, if any.
    pub parent_id: Option<i64>,
}

/// What an ingest did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    /// Messages written.
    pub added: usize,
    /// Messages recognised as already stored.
    pub duplicates: usize,
}

/// A message to store, with its host entry id.
pub struct Incoming<'a> {
    /// The message.
    pub message: &'a Message,
    /// The host's entry id.
    pub entry_id: Option<&'a str>,
}

/// Whether `message` is a summary the host wrote over its own history (a runtime compaction's
/// or a branch's): never stored, never assembled — the store has the messages it stands for.
pub fn is_host_summary(message: &Message) -> bool {
    matches!(
        message.role(),
        Role::CompactionSummary | Role::BranchSummary
    )
}

/// The identity of a message without an entry id: role, tool-call id and content hash.
pub fn identity_of(message: &Message) -> String {
    let value = message.to_value();
    let mut hasher = Sha256::new();
    // The content and the tool fields, not the timestamp (a re-sent message keeps its identity).
    hasher.update(
        value
            .get("content")
            .map(|c| c.to_string())
            .unwrap_or_default(),
    );
    for key in [
        "toolName",
        "isError",
        "summary",
        "command",
        "output",
        "customType",
    ] {
        if let Some(v) = value.get(key) {
            hasher.update(key.as_bytes());
            hasher.update(v.to_string());
        }
    }
    let digest = hasher.finalize();
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}|{}|{hex}",
        message.role_name(),
        tool_call_key(message).unwrap_or_default()
    )
}

/// The tool-call id a message carries: a result's id, or its calls' ids joined.
fn tool_call_key(message: &Message) -> Option<String> {
    if let Some(id) = message.tool_result_id() {
        return Some(id.to_owned());
    }
    let ids: Vec<&str> = message.tool_call_ids().collect();
    (!ids.is_empty()).then(|| ids.join(","))
}

/// The searchable text of a message: its text blocks, tool calls and results.
pub fn searchable_text(message: &Message) -> String {
    let mut out = String::new();
    for block in message.blocks() {
        match block.kind() {
            BlockKind::Text => out.push_str(block.as_text().unwrap_or_default()),
            BlockKind::Thinking => out.push_str(block.as_thinking().unwrap_or_default()),
            BlockKind::ToolCall => {
                if let Some(call) = block.as_tool_call() {
                    out.push_str(call.name);
                    out.push(' ');
                    out.push_str(call.arguments_json);
                }
            }
            _ => {}
        }
        out.push('\n');
    }
    if out.trim().is_empty() {
        out = message.plain_text();
    }
    out
}

/// The store. Every method takes the connection for one short statement or transaction; slow
/// work (summarising) happens between calls, never under the lock.
pub struct Store {
    conn: Mutex<Connection>,
    path: Option<PathBuf>,
    payload_dir: Option<PathBuf>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating and migrating) the database at `path`, or an in-memory one for `None`.
    ///
    /// # Errors
    /// When the file cannot be opened, is not a database of this engine, or is newer than this
    /// build.
    pub fn open(path: Option<&Path>) -> Result<Store, EngineError> {
        let conn = match path {
            Some(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|err| {
                        EngineError::failed(format!(
                            "lossless store: cannot create {}: {err}",
                            dir.display()
                        ))
                    })?;
                }
                Connection::open(path)
            }
            None => Connection::open_in_memory(),
        }
        .map_err(|err| {
            EngineError::failed(format!(
                "lossless store: cannot open {}: {err}",
                path.map_or("an in-memory database".into(), |p| p.display().to_string())
            ))
        })?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db_error("busy timeout"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db_error("WAL mode"))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(db_error("synchronous"))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(db_error("foreign keys"))?;
        let mut conn = conn;
        migrate(&mut conn)?;
        Ok(Store {
            conn: Mutex::new(conn),
            path: path.map(Path::to_owned),
            payload_dir: path.and_then(Path::parent).map(|d| d.join("payloads")),
        })
    }

    /// The database file, when not in memory.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Where externalized payloads go.
    pub fn payload_dir(&self) -> Option<&Path> {
        self.payload_dir.as_deref()
    }

    /// Runs `f` with the connection.
    ///
    /// # Errors
    /// `f`'s, or a poisoned lock.
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| EngineError::failed("lossless store: a previous call panicked"))?;
        f(&mut conn)
    }

    /// The one value `sql` selects with `?1` bound to `id`.
    ///
    /// # Errors
    /// Database errors (no row is one).
    pub fn value<T: rusqlite::types::FromSql>(&self, sql: &str, id: i64) -> Result<T, EngineError> {
        self.with(|conn| {
            conn.prepare_cached(sql)
                .and_then(|mut stmt| stmt.query_row([id], |r| r.get(0)))
                .map_err(|err| EngineError::failed(format!("lossless store: {sql}: {err}")))
        })
    }

    /// The conversation keyed `key`, created when new.
    ///
    /// # Errors
    /// Database errors.
    pub fn conversation(&self, key: &str) -> Result<i64, EngineError> {
        if let Some(id) = self.find_conversation(key)? {
            return Ok(id);
        }
        self.with(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO conversations (key, created_at) VALUES (?1, ?2)",
                params![key, now_ms()],
            )
            .map_err(db_error("create conversation"))?;
            conn.query_row("SELECT id FROM conversations WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .map_err(db_error("read conversation"))
        })
    }

    /// The conversation keyed `key`, if it exists.
    ///
    /// # Errors
    /// Database errors.
    pub fn find_conversation(&self, key: &str) -> Result<Option<i64>, EngineError> {
        self.with(|conn| {
            conn.query_row("SELECT id FROM conversations WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(db_error("read conversation"))
        })
    }

    /// Stores `incoming` in order after what the conversation holds, skipping messages already
    /// stored (by entry id; without one, by identity against the newest stored message). One
    /// transaction: committed (durable) when this returns.
    ///
    /// # Errors
    /// Database errors.
    pub fn ingest(
        &self,
        conversation: i64,
        incoming: &[Incoming<'_>],
    ) -> Result<Ingested, EngineError> {
        self.with(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_error("begin ingest"))?;
            let mut result = Ingested::default();
            let mut next_seq: i64 = tx
                .query_row(
                    "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?1",
                    [conversation],
                    |r| r.get(0),
                )
                .map_err(db_error("next seq"))?;
            let mut newest_identity: Option<String> = tx
                .query_row(
                    "SELECT identity FROM messages WHERE conversation_id = ?1 ORDER BY seq DESC LIMIT 1",
                    [conversation],
                    |r| r.get(0),
                )
                .optional()
                .map_err(db_error("newest message"))?;
            for item in incoming {
                if is_host_summary(item.message) {
                    // The host's own compaction summaries stand for messages already stored.
                    result.duplicates += 1;
                    continue;
                }
                let identity = identity_of(item.message);
                let duplicate = match item.entry_id {
                    Some(entry) => tx
                        .query_row(
                            "SELECT 1 FROM messages WHERE conversation_id = ?1 AND entry_id = ?2",
                            params![conversation, entry],
                            |_| Ok(()),
                        )
                        .optional()
                        .map_err(db_error("entry lookup"))?
                        .is_some(),
                    None => newest_identity.as_deref() == Some(identity.as_str()),
                };
                if duplicate {
                    result.duplicates += 1;
                    continue;
                }
                insert_message(&tx, conversation, next_seq, item, &identity)?;
                next_seq += 1;
                newest_identity = Some(identity);
                result.added += 1;
            }
            tx.commit().map_err(db_error("commit ingest"))?;
            Ok(result)
        })
    }

    /// The entry ids among `entry_ids` that are stored.
    ///
    /// # Errors
    /// Database errors.
    pub fn seq_of_entry(
        &self,
        conversation: i64,
        entry_id: &str,
    ) -> Result<Option<i64>, EngineError> {
        self.with(|conn| seq_of_entry(conn, conversation, entry_id))
    }

    /// Messages with `first <= seq <= last`, in order.
    ///
    /// # Errors
    /// Database errors.
    pub fn messages_between(
        &self,
        conversation: i64,
        first: i64,
        last: i64,
    ) -> Result<Vec<StoredMessage>, EngineError> {
        self.with(|conn| messages_between(conn, conversation, first, last, i64::MAX, 0))
    }

    /// The root summaries (not yet condensed), oldest first.
    ///
    /// # Errors
    /// Database errors.
    pub fn roots(&self, conversation: i64) -> Result<Vec<Summary>, EngineError> {
        self.with(|conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {SUMMARY_COLUMNS} FROM summaries \
                     WHERE conversation_id = ?1 AND parent_id IS NULL ORDER BY first_seq"
                ))
                .map_err(db_error("roots"))?;
            let rows = stmt
                .query_map([conversation], summary_row)
                .map_err(db_error("roots"))?;
            rows.collect::<Result<_, _>>().map_err(db_error("roots"))
        })
    }

    /// One summary by id.
    ///
    /// # Errors
    /// Database errors.
    pub fn summary(&self, id: i64) -> Result<Option<(i64, Summary)>, EngineError> {
        self.with(|conn| {
            conn.query_row(
                &format!("SELECT conversation_id, {SUMMARY_COLUMNS} FROM summaries WHERE id = ?1"),
                [id],
                |r| {
                    let conversation: i64 = r.get(0)?;
                    Ok((conversation, summary_row_at(r, 1)?))
                },
            )
            .optional()
            .map_err(db_error("summary"))
        })
    }

    /// The children of summary `id`, oldest first.
    ///
    /// # Errors
    /// Database errors.
    pub fn children(&self, id: i64) -> Result<Vec<Summary>, EngineError> {
        self.with(|conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {SUMMARY_COLUMNS} FROM summaries WHERE parent_id = ?1 ORDER BY first_seq"
                ))
                .map_err(db_error("children"))?;
            let rows = stmt.query_map([id], summary_row).map_err(db_error("children"))?;
            rows.collect::<Result<_, _>>().map_err(db_error("children"))
        })
    }

    /// The first seq not covered by any summary (the raw region starts there).
    ///
    /// # Errors
    /// Database errors.
    pub fn frontier(&self, conversation: i64) -> Result<i64, EngineError> {
        self.with(|conn| frontier(conn, conversation))
    }

    /// The number of stored messages.
    ///
    /// # Errors
    /// Database errors.
    pub fn message_count(&self, conversation: i64) -> Result<i64, EngineError> {
        self.value(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = ?1",
            conversation,
        )
    }

    /// Writes a leaf summary over the messages of `span` (seqs, one transaction).
    ///
    /// # Errors
    /// Database errors.
    pub fn insert_leaf(
        &self,
        conversation: i64,
        span: std::ops::RangeInclusive<i64>,
        text: &str,
        tokens: u64,
        source_tokens: u64,
        level: &str,
    ) -> Result<i64, EngineError> {
        let (first, last) = (*span.start(), *span.end());
        self.with(|conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db_error("begin leaf"))?;
            let id = insert_summary(
                &tx,
                conversation,
                0,
                text,
                tokens,
                source_tokens,
                first,
                last,
                level,
            )?;
            tx.execute(
                "INSERT INTO summary_messages (summary_id, message_id) \
                 SELECT ?1, id FROM messages WHERE conversation_id = ?2 AND seq BETWEEN ?3 AND ?4",
                params![id, conversation, first, last],
            )
            .map_err(db_error("leaf provenance"))?;
            bump_epoch(&tx, conversation)?;
            tx.commit().map_err(db_error("commit leaf"))?;
            Ok(id)
        })
    }

    /// Writes a condensed summary over `children` (roots, contiguous, oldest first).
    ///
    /// # Errors
    /// Database errors.
    pub fn insert_condensed(
        &self,
        conversation: i64,
        children: &[Summary],
        text: &str,
        tokens: u64,
        level: &str,
    ) -> Result<i64, EngineError> {
        let depth = children.iter().map(|c| c.depth).max().unwrap_or(0) + 1;
        let first = children.first().map_or(0, |c| c.first_seq);
        let last = children.last().map_or(0, |c| c.last_seq);
        let source: u64 = children.iter().map(|c| c.tokens).sum();
        self.with(|conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db_error("begin condensed"))?;
            let id = insert_summary(
                &tx,
                conversation,
                depth,
                text,
                tokens,
                source,
                first,
                last,
                level,
            )?;
            for child in children {
                tx.execute(
                    "UPDATE summaries SET parent_id = ?1 WHERE id = ?2 AND parent_id IS NULL",
                    params![id, child.id],
                )
                .map_err(db_error("condense child"))?;
            }
            bump_epoch(&tx, conversation)?;
            tx.commit().map_err(db_error("commit condensed"))?;
            Ok(id)
        })
    }

    /// Records that the context changed outside the engine's passes (a delegated compaction).
    ///
    /// # Errors
    /// Database errors.
    pub fn bump_epoch(&self, conversation: i64) -> Result<(), EngineError> {
        self.with(|conn| {
            conn.execute(
                "UPDATE conversations SET epoch = epoch + 1 WHERE id = ?1",
                [conversation],
            )
            .map_err(db_error("epoch"))
            .map(drop)
        })
    }

    /// Indexes the messages not yet in the full-text index (off the turn's path); how many.
    ///
    /// # Errors
    /// Database errors.
    pub fn index_pending(&self) -> Result<usize, EngineError> {
        self.with(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_error("begin index"))?;
            let pending: Vec<(i64, i64, String, Option<String>)> = {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT id, conversation_id, json, payload_path FROM messages WHERE indexed = 0",
                    )
                    .map_err(db_error("pending"))?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .map_err(db_error("pending"))?;
                rows.collect::<Result<_, _>>().map_err(db_error("pending"))?
            };
            for (id, conversation, json, payload) in &pending {
                let text = match payload {
                    // The original, read back: a search must find what was externalized.
                    Some(path) => std::fs::read_to_string(path).unwrap_or_default(),
                    None => Message::from_value(
                        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
                    )
                    .map(|m| searchable_text(&m))
                    .unwrap_or_default(),
                };
                tx.execute(
                    "INSERT INTO fts (text, kind, ref, conversation_id) VALUES (?1, 'message', ?2, ?3)",
                    params![text, id, conversation],
                )
                .map_err(db_error("index message"))?;
                tx.execute("UPDATE messages SET indexed = 1 WHERE id = ?1", [id])
                    .map_err(db_error("index message"))?;
            }
            tx.commit().map_err(db_error("commit index"))?;
            Ok(pending.len())
        })
    }
}

const SUMMARY_COLUMNS: &str =
    "id, depth, text, tokens, source_tokens, first_seq, last_seq, level, parent_id";

fn summary_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Summary> {
    summary_row_at(r, 0)
}

fn summary_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Summary> {
    Ok(Summary {
        id: r.get(at)?,
        depth: r.get(at + 1)?,
        text: r.get(at + 2)?,
        tokens: r.get::<_, i64>(at + 3)? as u64,
        source_tokens: r.get::<_, i64>(at + 4)? as u64,
        first_seq: r.get(at + 5)?,
        last_seq: r.get(at + 6)?,
        level: r.get(at + 7)?,
        parent_id: r.get(at + 8)?,
    })
}

fn migrate(conn: &mut Connection) -> Result<(), EngineError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(db_error("schema version"))?;
    if version > SCHEMA_VERSION {
        return Err(EngineError::failed(format!(
            "lossless store: the database has schema version {version}, newer than this engine \
             understands ({SCHEMA_VERSION}); upgrade the lossless plugin or point databasePath \
             elsewhere"
        )));
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db_error("begin migration"))?;
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql).map_err(|err| {
            EngineError::failed(format!(
                "lossless store: migration {from} → {} failed: {err}",
                from + 1
            ))
        })?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(db_error("schema version"))?;
    tx.commit().map_err(db_error("commit migration"))
}

fn insert_message(
    tx: &Transaction<'_>,
    conversation: i64,
    seq: i64,
    item: &Incoming<'_>,
    identity: &str,
) -> Result<(), EngineError> {
    let message = item.message;
    let json = message.to_value().to_string();
    tx.prepare_cached(
        "INSERT INTO messages (conversation_id, seq, entry_id, identity, role, tool_call_id, json, tokens, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            conversation,
            seq,
            item.entry_id,
            identity,
            message.role_name(),
            tool_call_key(message),
            json,
            estimate_message_tokens(message) as i64,
            now_ms(),
        ])
    })
    .map_err(db_error("insert message"))?;
    let id = tx.last_insert_rowid();
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO parts (message_id, idx, kind, text, tool_call_id, tool_name) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(db_error("insert part"))?;
    for (idx, block) in message.blocks().iter().enumerate() {
        let call = block.as_tool_call();
        let text = block
            .as_text()
            .or(block.as_thinking())
            .map(str::to_owned)
            .or_else(|| call.as_ref().map(|c| c.arguments_json.to_owned()));
        stmt.execute(params![
            id,
            idx as i64,
            block.type_name(),
            text,
            call.as_ref()
                .map(|c| c.id.to_owned())
                .or_else(|| message.tool_result_id().map(str::to_owned)),
            call.as_ref()
                .map(|c| c.name.to_owned())
                .or_else(|| message.tool_name().map(str::to_owned)),
        ])
        .map_err(db_error("insert part"))?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn insert_summary(
    tx: &Transaction<'_>,
    conversation: i64,
    depth: i64,
    text: &str,
    tokens: u64,
    source_tokens: u64,
    first: i64,
    last: i64,
    level: &str,
) -> Result<i64, EngineError> {
    tx.execute(
        "INSERT INTO summaries (conversation_id, depth, text, tokens, source_tokens, first_seq, last_seq, level, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![conversation, depth, text, tokens as i64, source_tokens as i64, first, last, level, now_ms()],
    )
    .map_err(db_error("insert summary"))?;
    let id = tx.last_insert_rowid();
    tx.execute(
        "INSERT INTO fts (text, kind, ref, conversation_id) VALUES (?1, 'summary', ?2, ?3)",
        params![text, id, conversation],
    )
    .map_err(db_error("index summary"))?;
    Ok(id)
}

fn bump_epoch(tx: &Transaction<'_>, conversation: i64) -> Result<(), EngineError> {
    tx.execute(
        "UPDATE conversations SET epoch = epoch + 1 WHERE id = ?1",
        [conversation],
    )
    .map_err(db_error("epoch"))
    .map(drop)
}

/// The seq of the message with `entry_id`.
pub fn seq_of_entry(
    conn: &Connection,
    conversation: i64,
    entry_id: &str,
) -> Result<Option<i64>, EngineError> {
    conn.prepare_cached("SELECT seq FROM messages WHERE conversation_id = ?1 AND entry_id = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![conversation, entry_id], |r| r.get(0))
                .optional()
        })
        .map_err(db_error("entry lookup"))
}

/// The first seq no summary covers.
pub fn frontier(conn: &Connection, conversation: i64) -> Result<i64, EngineError> {
    conn.prepare_cached(
        "SELECT COALESCE(MAX(last_seq) + 1, 0) FROM summaries WHERE conversation_id = ?1 AND parent_id IS NULL",
    )
    .and_then(|mut stmt| stmt.query_row([conversation], |r| r.get(0)))
    .map_err(db_error("frontier"))
}

/// Messages with `first <= seq <= last`, at most `limit` from `offset`.
pub fn messages_between(
    conn: &Connection,
    conversation: i64,
    first: i64,
    last: i64,
    limit: i64,
    offset: i64,
) -> Result<Vec<StoredMessage>, EngineError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, seq, entry_id, role, json, tokens, payload_path FROM messages \
             WHERE conversation_id = ?1 AND seq BETWEEN ?2 AND ?3 ORDER BY seq LIMIT ?4 OFFSET ?5",
        )
        .map_err(db_error("messages"))?;
    let rows = stmt
        .query_map(params![conversation, first, last, limit, offset], |r| {
            Ok(StoredMessage {
                id: r.get(0)?,
                seq: r.get(1)?,
                entry_id: r.get(2)?,
                role: r.get(3)?,
                json: r.get(4)?,
                tokens: r.get::<_, i64>(5)? as u64,
                payload_path: r.get(6)?,
            })
        })
        .map_err(db_error("messages"))?;
    rows.collect::<Result<_, _>>().map_err(db_error("messages"))
}
