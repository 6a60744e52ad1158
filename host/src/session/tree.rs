//! Reading OpenClaw's session files (reference §10, §10a; the golden data's README): the
//! append-only JSONL tree, versions 1–4, read exactly as OpenClaw 2026.9.6 reads it.
//!
//! - Line 1 is the header (`{"type":"session","version":4,"id",…}`); every later line is a
//!   record. Blank lines are ignored; lines that do not parse are dropped and counted (one
//!   warning per load, OpenClaw's wording); a torn last line is one such line.
//! - A record that is valid JSON but not an entry is kept opaque (not in the tree).
//! - `leaf` control records decide the active leaf (the last one wins); without one, the last
//!   entry is the leaf. A missing parent is not repaired: walks stop at the hole.
//! - Versions 1 and 2 are migrated in memory: fresh ids, a linear parent chain,
//!   `firstKeptEntryIndex` (record index, header = 0) → `firstKeptEntryId`, role `hookMessage`
//!   → `custom` with `customType: "hook"`.
//! - Assistant and toolResult messages with string content are normalised to one text block.
//!
//! Writing is [`super::writer`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use pincer_plugin_api::abi::latest::{Message, Role};
use serde_json::{Map, Value};

/// Why a session file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SessionReadError {
    /// The file could not be read.
    #[error("cannot read session {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl SessionReadError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SessionReadError::Unreadable { .. } => "session_unreadable",
        }
    }
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryKind {
    /// `message`.
    Message(Message),
    /// `thinking_level_change`.
    ThinkingLevelChange(String),
    /// `model_change`.
    ModelChange {
        /// The provider.
        provider: String,
        /// The model id.
        model_id: String,
    },
    /// `compaction`.
    Compaction {
        /// The summary.
        summary: String,
        /// The first entry kept verbatim.
        first_kept_entry_id: Option<String>,
        /// Tokens before (as written).
        tokens_before: Value,
    },
    /// `reset`.
    Reset {
        /// The first entry kept, if any.
        first_kept_entry_id: Option<String>,
    },
    /// `branch_summary`.
    BranchSummary {
        /// The entry branched back to (`root` from the root).
        from_id: Value,
        /// The summary.
        summary: String,
    },
    /// `custom_message`.
    CustomMessage,
    /// `custom`, `label`, `session_info`: never in the context.
    Other,
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The id.
    pub id: String,
    /// The parent (`None` for a root).
    pub parent_id: Option<String>,
    /// What it is.
    pub kind: EntryKind,
    /// The record as read (after migration), without its `message` (held as [`EntryKind::Message`]
    /// instead of twice); [`Entry::to_record`] gives the whole record back.
    pub raw: Map<String, Value>,
}

impl Entry {
    /// The whole record, as it is written.
    pub fn to_record(&self) -> Value {
        let mut record = self.raw.clone();
        if let EntryKind::Message(message) = &self.kind {
            record.insert("message".into(), message.to_value());
        }
        Value::Object(record)
    }

    /// The entry's `timestamp` (ISO) in ms since the Unix epoch, if it parses.
    pub fn timestamp_ms(&self) -> Option<i64> {
        self.raw
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(super::time::parse_iso_ms)
    }
}

/// A session file in memory.
#[derive(Debug, Clone, Default)]
pub struct SessionTree {
    /// The header (after migration), if the first line was one.
    pub header: Option<Map<String, Value>>,
    /// The entries, in file order.
    pub entries: Vec<Entry>,
    /// Valid JSON lines that are not entries, kept as they are.
    pub opaque: Vec<Value>,
    /// The active leaf.
    pub leaf: Option<String>,
    /// Lines dropped because they did not parse.
    pub skipped_lines: usize,
    /// Whether the file was migrated from version 1 or 2.
    pub migrated: bool,
    /// The version the file declared (1 when its header names none).
    pub source_version: u64,
    /// Whether the text read ended with a newline (else its last line may be torn).
    pub ends_with_newline: bool,
    index: HashMap<String, usize>,
}

impl SessionTree {
    /// Reads a session file.
    ///
    /// # Errors
    /// When the file cannot be read; damaged lines are tolerated as OpenClaw tolerates them.
    pub fn read(path: &Path) -> Result<Self, SessionReadError> {
        let bytes = std::fs::read(path).map_err(|source| SessionReadError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        let text = String::from_utf8_lossy(&bytes);
        Ok(Self::parse(&text))
    }

    /// Parses a session file's text.
    pub fn parse(text: &str) -> Self {
        let (records, skipped) = parse_lines(text.trim());
        let valid_records = records.len();
        let mut tree = SessionTree {
            skipped_lines: skipped,
            ends_with_newline: text.is_empty() || text.ends_with('\n'),
            ..SessionTree::default()
        };
        let mut records = records.into_iter().peekable();
        if let Some(Value::Object(first)) = records.peek() {
            if first.get("type").and_then(Value::as_str) == Some("session") {
                if let Some(Value::Object(header)) = records.next() {
                    tree.header = Some(header);
                }
            }
        }
        let version = tree
            .header
            .as_ref()
            .and_then(|h| h.get("version"))
            .and_then(Value::as_u64)
            .unwrap_or(1);
        tree.source_version = version;
        let mut records: Vec<Value> = records.collect();
        if tree.header.is_some() && version < 3 {
            migrate(&mut records);
            tree.migrated = true;
            if let Some(header) = &mut tree.header {
                header.insert("version".into(), Value::from(3));
            }
        }
        // Records in order: each entry becomes the leaf, a `leaf` record moves it.
        let mut leaf = None;
        for record in records {
            let Value::Object(map) = record else {
                tree.opaque.push(record);
                continue;
            };
            if map.get("type").and_then(Value::as_str) == Some("leaf") {
                if let Some(target) = map.get("targetId") {
                    leaf = target.as_str().map(str::to_owned);
                }
                continue;
            }
            if let Some(id) = tree.push_record(Value::Object(map)) {
                leaf = Some(id);
            }
        }
        tree.leaf = leaf;
        if tree.skipped_lines > 0 {
            tracing::warn!(
                "[parseJsonlEntries] skipped {} malformed JSONL line(s) — {} valid entries were loaded",
                tree.skipped_lines,
                valid_records
            );
        }
        tree
    }

    /// Adds a record (an entry, or an opaque record when it is not one); the entry's id.
    pub(crate) fn push_record(&mut self, record: Value) -> Option<String> {
        let Value::Object(map) = record else {
            self.opaque.push(record);
            return None;
        };
        match entry_of(map) {
            Ok(entry) => {
                let id = entry.id.clone();
                self.index.insert(id.clone(), self.entries.len());
                self.entries.push(entry);
                Some(id)
            }
            Err(map) => {
                self.opaque.push(Value::Object(map));
                None
            }
        }
    }

    /// The entry `id`.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.index.get(id).map(|&i| &self.entries[i])
    }

    /// The path from the root to `leaf` (the active leaf when `None`), stopping at a missing
    /// parent.
    pub fn path(&self, leaf: Option<&str>) -> Vec<&Entry> {
        let mut path = Vec::new();
        let mut next = leaf.or(self.leaf.as_deref()).and_then(|id| self.get(id));
        let mut guard = 0;
        while let Some(entry) = next {
            path.push(entry);
            guard += 1;
            if guard > self.entries.len() {
                break; // a cycle in a damaged file: stop rather than loop
            }
            next = entry.parent_id.as_deref().and_then(|id| self.get(id));
        }
        path.reverse();
        path
    }

    /// The tips of the tree: entries no other entry names as its parent.
    pub fn tips(&self) -> Vec<&str> {
        let parents: std::collections::HashSet<&str> = self
            .entries
            .iter()
            .filter_map(|e| e.parent_id.as_deref())
            .collect();
        self.entries
            .iter()
            .filter(|e| !parents.contains(e.id.as_str()))
            .map(|e| e.id.as_str())
            .collect()
    }
}

fn string(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Parses the non-blank lines into JSON values, in order, on up to two threads (the machine's
/// cores); returns them with the count of lines that did not parse.
fn parse_lines(text: &str) -> (Vec<Value>, usize) {
    fn parse(chunk: &str) -> (Vec<Value>, usize) {
        let mut records = Vec::new();
        let mut skipped = 0;
        for line in chunk.split('\n') {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(value) => records.push(value),
                Err(_) => skipped += 1,
            }
        }
        (records, skipped)
    }
    const PARALLEL_FROM: usize = 1 << 20;
    if text.len() < PARALLEL_FROM {
        return parse(text);
    }
    // Split at the newline nearest the middle: each half holds whole lines.
    let middle = text.len() / 2;
    let cut = text[middle..]
        .find('\n')
        .map_or(text.len(), |at| middle + at);
    let (first, second) = (&text[..cut], text.get(cut + 1..).unwrap_or(""));
    let ((mut records, a), (rest, b)) = std::thread::scope(|scope| {
        let other = scope.spawn(|| parse(second));
        let mine = parse(first);
        (mine, other.join().unwrap_or_default())
    });
    records.extend(rest);
    (records, a + b)
}

/// An entry from a record, or the record back when it is not one.
fn entry_of(mut map: Map<String, Value>) -> Result<Entry, Map<String, Value>> {
    let (Some(kind), Some(id)) = (string(&map, "type"), string(&map, "id")) else {
        return Err(map);
    };
    let parent_id = match map.get("parentId") {
        Some(Value::String(parent)) => Some(parent.clone()),
        Some(Value::Null) | None => None,
        Some(_) => return Err(map),
    };
    let kind = match kind.as_str() {
        "message" => {
            let Some(value) = map.remove("message") else {
                return Err(map);
            };
            let mut message = match Message::from_value(value.clone()) {
                Ok(message) => message,
                Err(_) => {
                    map.insert("message".into(), value);
                    return Err(map);
                }
            };
            if matches!(message.role(), Role::Assistant | Role::ToolResult) {
                message.normalize_string_content();
            }
            EntryKind::Message(message)
        }
        "thinking_level_change" => {
            EntryKind::ThinkingLevelChange(string(&map, "thinkingLevel").unwrap_or_default())
        }
        "model_change" => EntryKind::ModelChange {
            provider: string(&map, "provider").unwrap_or_default(),
            model_id: string(&map, "modelId").unwrap_or_default(),
        },
        "compaction" => EntryKind::Compaction {
            summary: string(&map, "summary").unwrap_or_default(),
            first_kept_entry_id: string(&map, "firstKeptEntryId"),
            tokens_before: map.get("tokensBefore").cloned().unwrap_or(Value::Null),
        },
        "reset" => EntryKind::Reset {
            first_kept_entry_id: string(&map, "firstKeptEntryId"),
        },
        "branch_summary" => EntryKind::BranchSummary {
            from_id: map.get("fromId").cloned().unwrap_or(Value::Null),
            summary: string(&map, "summary").unwrap_or_default(),
        },
        "custom_message" => EntryKind::CustomMessage,
        "custom" | "label" | "session_info" => EntryKind::Other,
        _ => return Err(map),
    };
    Ok(Entry {
        id,
        parent_id,
        kind,
        raw: map,
    })
}

/// Version 1–2 → 3, in memory: fresh ids in a linear chain, `firstKeptEntryIndex` →
/// `firstKeptEntryId` (record index, header = 0), `hookMessage` → `custom`/`hook`.
fn migrate(records: &mut [Value]) {
    let ids: Vec<String> = records
        .iter()
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let mut previous: Option<String> = None;
    for (i, record) in records.iter_mut().enumerate() {
        let Value::Object(map) = record else { continue };
        map.insert("id".into(), Value::from(ids[i].clone()));
        map.insert(
            "parentId".into(),
            previous.clone().map_or(Value::Null, Value::from),
        );
        previous = Some(ids[i].clone());
        if let Some(index) = map.remove("firstKeptEntryIndex").and_then(|v| v.as_u64()) {
            // Record indexes count the header as 0.
            if let Some(id) = (index as usize).checked_sub(1).and_then(|i| ids.get(i)) {
                map.insert("firstKeptEntryId".into(), Value::from(id.clone()));
            }
        }
        if let Some(Value::Object(message)) = map.get_mut("message") {
            if message.get("role").and_then(Value::as_str) == Some("hookMessage") {
                message.insert("role".into(), Value::from("custom"));
                message.insert("customType".into(), Value::from("hook"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_file_parsed_on_two_threads_keeps_its_order() {
        let mut text = String::from("{\"type\":\"session\",\"version\":4,\"id\":\"s\"}\n");
        let body = "x".repeat(1000);
        let mut parent = "null".to_owned();
        for i in 0..3000 {
            text += &format!(
                "{{\"type\":\"message\",\"id\":\"e{i}\",\"parentId\":{parent},\"message\":{{\"role\":\"user\",\"content\":\"{body}\"}}}}\n"
            );
            if i == 2500 {
                text += "{broken\n\n";
            }
            parent = format!("\"e{i}\"");
        }
        assert!(text.len() > 2 << 20);
        let tree = SessionTree::parse(&text);
        assert_eq!(tree.skipped_lines, 1);
        let ids: Vec<&str> = tree.entries.iter().map(|e| e.id.as_str()).collect();
        let expected: Vec<String> = (0..3000).map(|i| format!("e{i}")).collect();
        assert_eq!(ids, expected);
        assert_eq!(tree.path(None).len(), 3000);
    }

    #[test]
    fn damaged_lines_are_counted_and_non_entries_kept_opaque() {
        let text = "{\"type\":\"session\",\"version\":4,\"id\":\"s\"}\n\
            {\"type\":\"message\",\"id\":\"a\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n\
            {this is not json\n{\"foo\":1}\n\n   \n\
            {\"type\":\"message\",\"id\":\"b\",\"parentId\":\"a\",\"message\":{\"role\":\"assistant\",\"content\":\"yo\"}}\n\
            {\"type\":\"message\",\"id\":\"c\",\"parentId\":\"b\",\"mess";
        let tree = SessionTree::parse(text);
        assert_eq!(
            tree.skipped_lines, 2,
            "the malformed line and the torn last line"
        );
        assert_eq!(tree.entries.len(), 2);
        assert_eq!(tree.opaque, [serde_json::json!({"foo": 1})]);
        assert_eq!(tree.leaf.as_deref(), Some("b"));
        // String content of an assistant message is normalised to one text block.
        let EntryKind::Message(m) = &tree.get("b").unwrap().kind else {
            panic!()
        };
        assert_eq!(m.blocks().len(), 1);
    }
}
