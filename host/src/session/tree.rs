//! Reading OpenClaw's session files (reference §10, §10a; the golden data's README): the
//! append-only JSONL tree, versions 1–4, read exactly as OpenClaw 2026.9.6 reads it.
//!
//! - Line 1 is the header (`{"type":"session","version":4,"id",…}`); every later line is a
//!   record. Blank lines are ignored; lines that do not parse are dropped and counted (one
//!   warning per load, OpenClaw's wording); a torn last line is one such line.
//! - A record that is valid JSON but not an entry is kept opaque (not in the tree).
//! - `leaf` control records decide the active leaf (the last one wins); without one, the last
//!   entry is the leaf. A missing parent is not repaired: walks stop at the hole. Of two
//!   entries with one id, the later is the one found by id (OpenClaw's `Map` keeps the last).
//! - Versions 1 and 2 are migrated in memory: fresh ids, a linear parent chain,
//!   `firstKeptEntryIndex` (record index, header = 0) → `firstKeptEntryId`, role `hookMessage`
//!   → `custom` with `customType: "hook"`.
//! - Assistant and toolResult messages with string content are normalised to one text block.
//! - Bytes that are not UTF-8 read as U+FFFD, as Node's `utf8` decoding reads them.
//!
//! **How it is fast.** A load does not build a JSON value per line. The file is read on both
//! cores, and each line is *validated* by a streaming pass that keeps only what the tree needs
//! (type, id, parentId, a leaf record's target, a message's role) and skips every other value
//! without allocating. An [`Entry`] keeps its line as a range of the file's text; its fields and
//! message are parsed when asked for ([`Entry::kind`], [`Entry::message`], [`Entry::record`]),
//! so building a context parses only the messages on the context path. Records the writer adds
//! carry their own line.
//!
//! Writing is [`super::writer`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pincer_plugin_api::abi::latest::{Message, Role};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
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
    /// The path names a directory.
    #[error(
        "cannot read session {}: it is a directory; name a session file (`<id>.jsonl`) inside it",
        path.display()
    )]
    Directory {
        /// The path.
        path: PathBuf,
    },
}

impl SessionReadError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SessionReadError::Unreadable { .. } => "session_unreadable",
            SessionReadError::Directory { .. } => "session_is_directory",
        }
    }
}

/// The type of an entry, known without parsing its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    /// `message`, with its message's role.
    Message(Role),
    /// `thinking_level_change`.
    ThinkingLevelChange,
    /// `model_change`.
    ModelChange,
    /// `compaction`.
    Compaction,
    /// `reset`.
    Reset,
    /// `branch_summary`.
    BranchSummary,
    /// `custom_message`.
    CustomMessage,
    /// `custom`.
    Custom,
    /// `label`.
    Label,
    /// `session_info`.
    SessionInfo,
}

impl EntryType {
    /// The type as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryType::Message(_) => "message",
            EntryType::ThinkingLevelChange => "thinking_level_change",
            EntryType::ModelChange => "model_change",
            EntryType::Compaction => "compaction",
            EntryType::Reset => "reset",
            EntryType::BranchSummary => "branch_summary",
            EntryType::CustomMessage => "custom_message",
            EntryType::Custom => "custom",
            EntryType::Label => "label",
            EntryType::SessionInfo => "session_info",
        }
    }
}

/// What an entry is, with its fields parsed ([`Entry::kind`]).
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

/// One line of a session file, as read (or as the writer wrote it): a range of the file's text
/// shared by every record read with it, or a line of its own.
#[derive(Clone)]
pub struct RecordText(TextRepr);

#[derive(Clone)]
enum TextRepr {
    Shared(Arc<String>, Range<usize>),
    Own(Box<str>),
}

impl RecordText {
    /// A line of its own.
    pub fn new(line: impl Into<Box<str>>) -> Self {
        RecordText(TextRepr::Own(line.into()))
    }

    /// The line, without its newline.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            TextRepr::Shared(text, range) => &text[range.clone()],
            TextRepr::Own(line) => line,
        }
    }

    /// The line as a JSON value (`Null` if it does not parse, which a record read never does).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.as_str()).unwrap_or(Value::Null)
    }
}

impl fmt::Debug for RecordText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for RecordText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The id.
    pub id: String,
    /// The parent (`None` for a root).
    pub parent_id: Option<String>,
    /// The type (and a message's role).
    pub entry_type: EntryType,
    text: RecordText,
}

impl Entry {
    /// The record's line, exactly as in the file (for a migrated file: as migrated).
    pub fn text(&self) -> &str {
        self.text.as_str()
    }

    /// The whole record.
    pub fn record(&self) -> Map<String, Value> {
        match self.text.to_value() {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// The message of a `message` entry (string content of an assistant or toolResult message
    /// normalised to one text block); `None` for other entries.
    pub fn message(&self) -> Option<Message> {
        #[derive(Deserialize)]
        struct Only {
            message: Message,
        }
        let EntryType::Message(role) = self.entry_type else {
            return None;
        };
        let mut message = match serde_json::from_str::<Only>(self.text()) {
            Ok(only) => only.message,
            // A record with two `message` keys: the last one counts, as in the head.
            Err(_) => Message::from_value(self.record().remove("message")?).ok()?,
        };
        if matches!(role, Role::Assistant | Role::ToolResult) {
            message.normalize_string_content();
        }
        Some(message)
    }

    /// What the entry is, with its fields parsed.
    pub fn kind(&self) -> EntryKind {
        if let EntryType::Message(_) = self.entry_type {
            return self.message().map_or(EntryKind::Other, EntryKind::Message);
        }
        let map = self.record();
        let string = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
        match self.entry_type {
            EntryType::ThinkingLevelChange => {
                EntryKind::ThinkingLevelChange(string("thinkingLevel").unwrap_or_default())
            }
            EntryType::ModelChange => EntryKind::ModelChange {
                provider: string("provider").unwrap_or_default(),
                model_id: string("modelId").unwrap_or_default(),
            },
            EntryType::Compaction => EntryKind::Compaction {
                summary: string("summary").unwrap_or_default(),
                first_kept_entry_id: string("firstKeptEntryId"),
                tokens_before: map.get("tokensBefore").cloned().unwrap_or(Value::Null),
            },
            EntryType::Reset => EntryKind::Reset {
                first_kept_entry_id: string("firstKeptEntryId"),
            },
            EntryType::BranchSummary => EntryKind::BranchSummary {
                from_id: map.get("fromId").cloned().unwrap_or(Value::Null),
                summary: string("summary").unwrap_or_default(),
            },
            EntryType::CustomMessage => EntryKind::CustomMessage,
            EntryType::Message(_) | EntryType::Custom | EntryType::Label | EntryType::SessionInfo => {
                EntryKind::Other
            }
        }
    }

    /// The entry's `timestamp` (ISO) in ms since the Unix epoch, if it parses.
    pub fn timestamp_ms(&self) -> Option<i64> {
        #[derive(Deserialize)]
        struct Only<'a> {
            #[serde(borrow)]
            timestamp: Option<Cow<'a, str>>,
        }
        let stamp = serde_json::from_str::<Only<'_>>(self.text()).ok()?.timestamp?;
        super::time::parse_iso_ms(&stamp)
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
    pub opaque: Vec<RecordText>,
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
    /// Whether the file held bytes that are not UTF-8 (read as U+FFFD).
    pub replaced_invalid_utf8: bool,
    index: HashMap<String, usize>,
}

impl SessionTree {
    /// Reads a session file.
    ///
    /// # Errors
    /// When the file cannot be read; damaged lines are tolerated as OpenClaw tolerates them.
    pub fn read(path: &Path) -> Result<Self, SessionReadError> {
        let unreadable = |source| SessionReadError::Unreadable {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        if file.metadata().map_err(unreadable)?.is_dir() {
            return Err(SessionReadError::Directory {
                path: path.to_owned(),
            });
        }
        let bytes = read_on_two_threads(&file).map_err(unreadable)?;
        let (text, replaced) = match String::from_utf8(bytes) {
            Ok(text) => (text, false),
            Err(err) => (
                String::from_utf8_lossy(err.as_bytes()).into_owned(),
                true,
            ),
        };
        let mut tree = Self::from_text(text);
        if replaced {
            tree.replaced_invalid_utf8 = true;
            tracing::warn!(
                session = %path.display(),
                "session file holds bytes that are not UTF-8: they read as U+FFFD (the file is not changed)"
            );
        }
        Ok(tree)
    }

    /// Parses a session file's text.
    pub fn parse(text: &str) -> Self {
        Self::from_text(text.to_owned())
    }

    /// Parses a session file's text, keeping it as the entries' lines.
    pub fn from_text(text: String) -> Self {
        let text = Arc::new(text);
        let lines = scan_lines(&text);
        let mut tree = SessionTree {
            ends_with_newline: text.is_empty() || text.ends_with('\n'),
            ..SessionTree::default()
        };
        let mut records = Vec::with_capacity(lines.len());
        for (range, head) in lines {
            match head {
                None => tree.skipped_lines += 1,
                Some(head) => records.push((RecordText(TextRepr::Shared(text.clone(), range)), head)),
            }
        }
        let valid_records = records.len();
        let mut records = records.into_iter().peekable();
        if let Some((line, RecordHead::Object(head))) = records.peek() {
            if head.kind == Some(RecordKind::Session) {
                if let Value::Object(header) = line.to_value() {
                    tree.header = Some(header);
                    records.next();
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
        let records: Vec<(RecordText, RecordHead<'_>)> = if tree.header.is_some() && version < 3 {
            tree.migrated = true;
            if let Some(header) = &mut tree.header {
                header.insert("version".into(), Value::from(3));
            }
            migrate(records.map(|(line, _)| line.to_value()).collect())
        } else {
            records.collect()
        };
        // Records in order: each entry becomes the leaf, a `leaf` record moves it.
        let mut leaf = None;
        tree.entries.reserve(records.len());
        for (line, head) in records {
            if let RecordHead::Object(head) = &head {
                if head.kind == Some(RecordKind::Leaf) {
                    match &head.target {
                        Field::Absent => {}
                        Field::Str(target) => leaf = Some(target.clone().into_owned()),
                        Field::Null | Field::Other => leaf = None,
                    }
                    continue;
                }
            }
            if let Some(id) = tree.push_head(line, head) {
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

    /// Adds a record the writer wrote (one line, without its newline); the entry's id, or
    /// `None` when the record is not an entry (then it is kept opaque).
    pub(crate) fn push_line(&mut self, line: String) -> Option<String> {
        let head = RecordHead::parse(&line).unwrap_or(RecordHead::NotObject).into_owned();
        self.push_head(RecordText::new(line), head)
    }

    fn push_head(&mut self, text: RecordText, head: RecordHead<'_>) -> Option<String> {
        let RecordHead::Object(head) = head else {
            self.opaque.push(text);
            return None;
        };
        let entry_type = head.entry_type();
        let (Some(entry_type), Some(id)) = (entry_type, head.id) else {
            self.opaque.push(text);
            return None;
        };
        let parent_id = match head.parent {
            Field::Str(parent) => Some(parent.into_owned()),
            Field::Null | Field::Absent => None,
            Field::Other => {
                self.opaque.push(text);
                return None;
            }
        };
        let id = id.into_owned();
        self.index.insert(id.clone(), self.entries.len());
        self.entries.push(Entry {
            id: id.clone(),
            parent_id,
            entry_type,
            text,
        });
        Some(id)
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

/// Reads a whole file; a large one as two halves read at once (page-cache copies and page faults
/// on both cores).
fn read_on_two_threads(file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::FileExt as _;
    const PARALLEL_FROM: u64 = 4 << 20;
    let len = file.metadata()?.len();
    if len < PARALLEL_FROM {
        let mut bytes = Vec::with_capacity(len as usize + 1);
        (&*file).read_to_end(&mut bytes)?;
        return Ok(bytes);
    }
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    let mut bytes = vec![0u8; len];
    let (first, second) = bytes.split_at_mut(len / 2);
    let read_exact_at = |buf: &mut [u8], offset: usize| file.read_exact_at(buf, offset as u64);
    let (a, b) = std::thread::scope(|scope| {
        let other = scope.spawn(|| read_exact_at(second, len / 2));
        let mine = read_exact_at(first, 0);
        (mine, other.join().unwrap_or_else(|_| Err(std::io::Error::other("reader thread panicked"))))
    });
    a?;
    b?;
    // The file may have grown since its length was taken (a writer appending): read the rest.
    (&*file).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The non-blank lines of `text` with their heads (`None`: the line does not parse), in order,
/// scanned on up to two threads (the machine's cores).
fn scan_lines(text: &str) -> Vec<(Range<usize>, Option<RecordHead<'static>>)> {
    fn scan(text: &str, offset: usize) -> Vec<(Range<usize>, Option<RecordHead<'static>>)> {
        let mut out = Vec::with_capacity(text.len() / 512);
        let mut start = 0;
        for line in text.split('\n') {
            let range = offset + start..offset + start + line.len();
            start += line.len() + 1;
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            out.push((range, RecordHead::parse(line).map(RecordHead::into_owned)));
        }
        out
    }
    const PARALLEL_FROM: usize = 1 << 20;
    if text.len() < PARALLEL_FROM {
        return scan(text, 0);
    }
    // Split at the newline nearest the middle: each half holds whole lines.
    let middle = text.len() / 2;
    let cut = text[middle..].find('\n').map_or(text.len(), |at| middle + at);
    let (first, second) = (&text[..cut], text.get(cut + 1..).unwrap_or(""));
    let (mut lines, rest) = std::thread::scope(|scope| {
        let other = scope.spawn(|| scan(second, cut + 1));
        let mine = scan(first, 0);
        (mine, other.join().unwrap_or_default())
    });
    lines.extend(rest);
    lines
}

/// Version 1–2 → 3, in memory: fresh ids in a linear chain, `firstKeptEntryIndex` →
/// `firstKeptEntryId` (record index, header = 0), `hookMessage` → `custom`/`hook`. Each record
/// gets a line of its own (the migrated record).
fn migrate(mut records: Vec<Value>) -> Vec<(RecordText, RecordHead<'static>)> {
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
    records
        .into_iter()
        .map(|record| {
            let line = serde_json::to_string(&record).expect("a JSON value serializes");
            let head = RecordHead::parse(&line)
                .unwrap_or(RecordHead::NotObject)
                .into_owned();
            (RecordText::new(line), head)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The streaming head of a record
// ---------------------------------------------------------------------------------------------

/// A string field of a record: absent, `null`, a string, or another JSON value.
#[derive(Debug, Clone, Default)]
enum Field<'a> {
    #[default]
    Absent,
    Null,
    Str(Cow<'a, str>),
    Other,
}

impl Field<'_> {
    fn into_owned(self) -> Field<'static> {
        match self {
            Field::Absent => Field::Absent,
            Field::Null => Field::Null,
            Field::Str(s) => Field::Str(Cow::Owned(s.into_owned())),
            Field::Other => Field::Other,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Field::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// What a valid record line is, as far as the tree needs to know.
#[derive(Debug)]
enum RecordHead<'a> {
    /// Valid JSON that is not an object.
    NotObject,
    /// An object.
    Object(ObjectHead<'a>),
}

/// The fields of a record object the tree reads; every other value is skipped unparsed. As in
/// `JSON.parse`, of two equal keys the last counts.
#[derive(Debug, Default)]
struct ObjectHead<'a> {
    /// `None` when `type` is absent or not a string.
    kind: Option<RecordKind>,
    id: Option<Cow<'a, str>>,
    parent: Field<'a>,
    target: Field<'a>,
    /// `Some(role)` when `message` is an object with a string `role`.
    message_role: Option<Role>,
}

impl<'a> RecordHead<'a> {
    /// The head of a line; `None` when the line is not valid JSON.
    fn parse(line: &'a str) -> Option<Self> {
        serde_json::from_str(line).ok()
    }

    fn into_owned(self) -> RecordHead<'static> {
        match self {
            RecordHead::NotObject => RecordHead::NotObject,
            RecordHead::Object(head) => RecordHead::Object(ObjectHead {
                kind: head.kind,
                id: head.id.map(|s| Cow::Owned(s.into_owned())),
                parent: head.parent.into_owned(),
                target: head.target.into_owned(),
                message_role: head.message_role,
            }),
        }
    }
}

impl ObjectHead<'_> {
    /// The entry this record is, if it is one by its type (a `message` needs an object with a
    /// string `role`).
    fn entry_type(&self) -> Option<EntryType> {
        match self.kind? {
            RecordKind::Message => self.message_role.map(EntryType::Message),
            RecordKind::Entry(entry_type) => Some(entry_type),
            RecordKind::Session | RecordKind::Leaf | RecordKind::Unknown => None,
        }
    }
}

/// A record's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordKind {
    Session,
    Leaf,
    Message,
    Entry(EntryType),
    Unknown,
}

impl RecordKind {
    fn of(name: &str) -> RecordKind {
        match name {
            "session" => RecordKind::Session,
            "leaf" => RecordKind::Leaf,
            "message" => RecordKind::Message,
            "thinking_level_change" => RecordKind::Entry(EntryType::ThinkingLevelChange),
            "model_change" => RecordKind::Entry(EntryType::ModelChange),
            "compaction" => RecordKind::Entry(EntryType::Compaction),
            "reset" => RecordKind::Entry(EntryType::Reset),
            "branch_summary" => RecordKind::Entry(EntryType::BranchSummary),
            "custom_message" => RecordKind::Entry(EntryType::CustomMessage),
            "custom" => RecordKind::Entry(EntryType::Custom),
            "label" => RecordKind::Entry(EntryType::Label),
            "session_info" => RecordKind::Entry(EntryType::SessionInfo),
            _ => RecordKind::Unknown,
        }
    }
}

/// A string, borrowed from the line when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any JSON value, read as a [`Field`] (other values are skipped unparsed).
impl<'de> Deserialize<'de> for Field<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Field<'de>, E> {
                Ok(Field::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field<'de>, E> {
                Ok(Field::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Field<'de>, E> {
                Ok(Field::Null)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Field<'de>, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Field::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Field<'de>, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| Field::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Field<'de>, E> {
                Ok(Field::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Field<'de>, E> {
                Ok(Field::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Field<'de>, E> {
                Ok(Field::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Field<'de>, E> {
                Ok(Field::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// The role of a `message` value: `Some` when it is an object with a string `role`.
struct MessageRole(Option<Role>);

impl<'de> Deserialize<'de> for MessageRole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MessageRole;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageRole, A::Error> {
                let mut role = None;
                while let Some(Str(key)) = map.next_key::<Str<'_>>()? {
                    if key == "role" {
                        role = match map.next_value::<Field<'_>>()? {
                            Field::Str(name) => Some(Role::from_name(&name)),
                            _ => None,
                        };
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(MessageRole(role))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MessageRole, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| MessageRole(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<MessageRole, E> {
                Ok(MessageRole(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<MessageRole, E> {
                Ok(MessageRole(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<MessageRole, E> {
                Ok(MessageRole(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<MessageRole, E> {
                Ok(MessageRole(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<MessageRole, E> {
                Ok(MessageRole(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<MessageRole, E> {
                Ok(MessageRole(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RecordHead<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RecordHead<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RecordHead<'de>, A::Error> {
                let mut head = ObjectHead::default();
                while let Some(Str(key)) = map.next_key::<Str<'_>>()? {
                    match &*key {
                        "type" => {
                            head.kind = map.next_value::<Field<'_>>()?.as_str().map(RecordKind::of)
                        }
                        "id" => head.id = string_of(map.next_value::<Field<'_>>()?),
                        "parentId" => head.parent = map.next_value()?,
                        "targetId" => head.target = map.next_value()?,
                        "message" => head.message_role = map.next_value::<MessageRole>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(RecordHead::Object(head))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RecordHead<'de>, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| RecordHead::NotObject)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<RecordHead<'de>, E> {
                Ok(RecordHead::NotObject)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<RecordHead<'de>, E> {
                Ok(RecordHead::NotObject)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<RecordHead<'de>, E> {
                Ok(RecordHead::NotObject)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<RecordHead<'de>, E> {
                Ok(RecordHead::NotObject)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<RecordHead<'de>, E> {
                Ok(RecordHead::NotObject)
            }
            fn visit_unit<E: de::Error>(self) -> Result<RecordHead<'de>, E> {
                Ok(RecordHead::NotObject)
            }
        }
        d.deserialize_any(V)
    }
}

fn string_of(field: Field<'_>) -> Option<Cow<'_, str>> {
    match field {
        Field::Str(s) => Some(s),
        _ => None,
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
        assert_eq!(tree.entries[2999].message().unwrap().plain_text(), body);
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
        assert_eq!(tree.opaque.len(), 1);
        assert_eq!(tree.opaque[0].as_str(), "{\"foo\":1}");
        assert_eq!(tree.leaf.as_deref(), Some("b"));
        // String content of an assistant message is normalised to one text block.
        let EntryKind::Message(m) = tree.get("b").unwrap().kind() else {
            panic!()
        };
        assert_eq!(m.blocks().len(), 1);
    }

    /// The streaming head decides exactly as a parse into a JSON value would: of two equal
    /// keys the last counts; a `message` that is no object, or has no string role, makes the
    /// record opaque; so do an id or parent of the wrong type; escaped strings are read.
    #[test]
    fn the_streaming_head_reads_records_as_json_parse_does() {
        let text = [
            r#"{"type":"session","version":4,"id":"s"}"#,
            r#"{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"x"}}"#,
            r#"{"type":"message","id":"b","parentId":"a","message":["role","user"]}"#,
            r#"{"type":"message","id":"c","parentId":"a","message":{"role":7}}"#,
            r#"{"type":"message","id":"d","parentId":"a","message":{"role":7,"role":"user"}}"#,
            r#"{"type":"message","id":"e","parentId":{"x":1},"message":{"role":"user"}}"#,
            r#"{"type":"compaction","id":7,"parentId":"a"}"#,
            r#"{"type":"label","id":"f\u0022g","parentId":"d","type":"custom"}"#,
            r#"["type","message"]"#,
            r#"{"type":"leaf","targetId":"a","targetId":"d"}"#,
        ]
        .join("\n");
        let tree = SessionTree::parse(&text);
        let ids: Vec<&str> = tree.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "d", "f\"g"]);
        assert_eq!(tree.entries[2].entry_type, EntryType::Custom);
        assert_eq!(tree.opaque.len(), 5);
        assert_eq!(tree.leaf.as_deref(), Some("d"));
        assert_eq!(tree.skipped_lines, 0);
    }
}
