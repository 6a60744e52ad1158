//! Reading OpenClaw's session files (docs/CONTRACT.md §10, §10a; the golden data's README): the
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
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pincer_plugin_abi::latest::{Message, Role};
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

    /// The line as a JSON value (`Null` if it does not parse, which a record read never does);
    /// a lone surrogate escape reads as U+FFFD ([`super::lone_surrogates`]).
    pub fn to_value(&self) -> Value {
        super::lone_surrogates::from_str(self.as_str()).unwrap_or(Value::Null)
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

/// One entry of the tree: its type, and its line, from which everything else is read.
#[derive(Clone)]
pub struct Entry {
    /// The type (and a message's role).
    pub entry_type: EntryType,
    text: RecordText,
    id: Span,
    parent: Option<Span>,
    /// The id hashed with the tree's hasher.
    id_hash: u64,
    /// Where the parent is in `entries` ([`NO_PARENT`] for a root or a missing parent).
    parent_index: u32,
}

/// [`Entry::parent_index`] of an entry without a parent in the tree.
const NO_PARENT: u32 = u32::MAX;

/// Entries are equal when their records are (whatever tree, hasher or position they have).
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.entry_type == other.entry_type && self.text() == other.text()
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("id", &self.id())
            .field("parent_id", &self.parent_id())
            .field("entry_type", &self.entry_type)
            .finish()
    }
}

impl Entry {
    /// The id.
    pub fn id(&self) -> &str {
        self.id.resolve(self.text())
    }

    /// The parent's id (`None` for a root).
    pub fn parent_id(&self) -> Option<&str> {
        self.parent.as_ref().map(|p| p.resolve(self.text()))
    }

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
        let mut message = match super::lone_surrogates::from_str::<Only>(self.text()) {
            Ok(only) => only.message,
            // A record with two `message` keys: the last one counts, as in the head.
            Err(_) => Message::from_value(self.record().remove("message")?).ok()?,
        };
        if matches!(role, Role::Assistant | Role::ToolResult) {
            message.normalize_string_content();
        }
        Some(message)
    }

    /// The role of a `message` entry, read from the line's head without parsing the message.
    pub fn role(&self) -> Option<Role> {
        match self.entry_type {
            EntryType::Message(role) => Some(role),
            _ => None,
        }
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
            EntryType::Message(_)
            | EntryType::Custom
            | EntryType::Label
            | EntryType::SessionInfo => EntryKind::Other,
        }
    }

    /// The entry's `timestamp` (ISO) in ms since the Unix epoch, if it parses.
    pub fn timestamp_ms(&self) -> Option<i64> {
        #[derive(Deserialize)]
        struct Only<'a> {
            #[serde(borrow)]
            timestamp: Option<Cow<'a, str>>,
        }
        #[derive(Deserialize)]
        struct Owned {
            timestamp: Option<String>,
        }
        match serde_json::from_str::<Only<'_>>(self.text()) {
            Ok(only) => super::time::parse_iso_ms(&only.timestamp?),
            // A line that parses only with its lone surrogates replaced.
            Err(_) => {
                let stamp = super::lone_surrogates::from_str::<Owned>(self.text())
                    .ok()?
                    .timestamp?;
                super::time::parse_iso_ms(&stamp)
            }
        }
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
    /// Lines skipped unread because they are longer than `sessions.maxLineBytes`
    /// ([`set_max_line_bytes`](super::set_max_line_bytes)), in file order.
    pub long_lines: Vec<LongLine>,
    index: EntryIndex,
}

/// A line of a session file skipped because it is longer than the bound: never held in memory,
/// not in the tree (what it held is missing from the context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LongLine {
    /// The line's number in the file (the first line is 1).
    pub line: u64,
    /// Its length in bytes, without its newline.
    pub bytes: u64,
    /// The bound it is over (`sessions.maxLineBytes`).
    pub max_line_bytes: u64,
}

impl fmt::Display for LongLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} is {} ({} bytes), longer than sessions.maxLineBytes ({}): skipped, so what it \
             holds is not in the context (raise sessions.maxLineBytes in pincer.json to read it)",
            self.line,
            super::limits::human_bytes(self.bytes),
            self.bytes,
            super::limits::human_bytes(self.max_line_bytes),
        )
    }
}

/// Entries by id (the last of equal ids wins), holding positions in `entries` rather than
/// copies of the ids; hashed with a per-process random seed (a crafted file cannot make lookups
/// collide).
#[derive(Clone, Default)]
struct EntryIndex {
    table: hashbrown::HashTable<u32>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Whether two entries have had one id (then parents are found by id, not by position).
    duplicates: bool,
}

impl EntryIndex {
    fn hash(&self, id: &str) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, id)
    }

    fn find(&self, entries: &[Entry], hash: u64, id: &str) -> Option<usize> {
        self.table
            .find(hash, |&i| {
                let entry = &entries[i as usize];
                entry.id_hash == hash && entry.id() == id
            })
            .map(|&i| i as usize)
    }

    /// Indexes `entries[at]` (which must be the last entry).
    fn insert(&mut self, entries: &[Entry], at: usize) {
        // The new entry's line is not touched (it left the cache when it was scanned) unless
        // another id has its hash.
        let entry = &entries[at];
        let hash = entry.id_hash;
        let position = u32::try_from(at).expect("fewer than 2^32 entries");
        match self.table.entry(
            hash,
            |&i| {
                let other = &entries[i as usize];
                other.id_hash == hash && other.id() == entry.id()
            },
            |&i| entries[i as usize].id_hash,
        ) {
            hashbrown::hash_table::Entry::Occupied(mut slot) => {
                *slot.get_mut() = position;
                self.duplicates = true;
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(position);
            }
        }
    }
}

impl fmt::Debug for EntryIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntryIndex({} ids)", self.table.len())
    }
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
        let max_line_bytes = super::limits::max_line_bytes();
        // A file no longer than the bound cannot hold a longer line: read whole (fast); else
        // streamed, long lines skipped without being held.
        let (bytes, halves_are_utf8, long_lines, ends_with_newline) =
            if file.metadata().map_err(unreadable)?.len() <= max_line_bytes {
                let (bytes, checked) = read_on_two_threads(&file).map_err(unreadable)?;
                (bytes, checked, Vec::new(), None)
            } else {
                let read = read_bounded(&file, max_line_bytes).map_err(unreadable)?;
                (
                    read.bytes,
                    false,
                    read.long_lines,
                    Some(read.ends_with_newline),
                )
            };
        let (text, replaced) = if halves_are_utf8 {
            // SAFETY: each half was checked to be UTF-8, and they were cut between characters
            // (a half that does not end on a character boundary fails its check).
            (unsafe { String::from_utf8_unchecked(bytes) }, false)
        } else {
            match String::from_utf8(bytes) {
                Ok(text) => (text, false),
                Err(err) => (String::from_utf8_lossy(err.as_bytes()).into_owned(), true),
            }
        };
        let mut tree = Self::from_text(text);
        if let Some(ends_with_newline) = ends_with_newline {
            // What the file ends with, not what was kept of it (a skipped last line).
            tree.ends_with_newline = ends_with_newline;
        }
        for long in &long_lines {
            tracing::warn!(session = %path.display(), "session file: {long}");
        }
        tree.long_lines = long_lines;
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
        let mut tree = SessionTree {
            ends_with_newline: text.is_empty() || text.ends_with('\n'),
            ..SessionTree::default()
        };
        // `text.trim()` in OpenClaw removes a byte-order mark before the first line.
        let bom = if text.starts_with('\u{feff}') { 3 } else { 0 };
        let mut lines = scan_lines(&text[bom..], &tree.index.hasher);
        if bom > 0 {
            for (range, _) in &mut lines {
                *range = range.start + bom..range.end + bom;
            }
        }
        tree.skipped_lines = lines.iter().filter(|(_, head)| head.is_none()).count();
        let valid_records = lines.len() - tree.skipped_lines;
        // A malformed line stays in the stream as `None`: the record after it does not follow
        // the record before it.
        let mut records = lines
            .into_iter()
            .map(|(range, head)| (RecordText(TextRepr::Shared(text.clone(), range)), head))
            .peekable();
        while let Some((_, None)) = records.peek() {
            records.next();
        }
        if let Some((line, Some(Head::Object(head)))) = records.peek() {
            if head.head.kind == Some(RecordKind::Session) {
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
        let records: Box<dyn Iterator<Item = (RecordText, Option<Head>)>> =
            if tree.header.is_some() && version < 3 {
                tree.migrated = true;
                if let Some(header) = &mut tree.header {
                    header.insert("version".into(), Value::from(3));
                }
                let values = records
                    .filter(|(_, head)| head.is_some())
                    .map(|(line, _)| line.to_value());
                Box::new(migrate(values.collect(), &tree.index.hasher).into_iter())
            } else {
                Box::new(records)
            };
        // Records in order: each entry becomes the leaf, a `leaf` record moves it.
        enum Leaf {
            Entry(usize),
            Id(Option<String>),
        }
        let mut leaf = Leaf::Id(None);
        tree.entries.reserve(valid_records);
        tree.index.table = hashbrown::HashTable::with_capacity(valid_records);
        // The entry the previous record became, if it became one.
        let mut previous: Option<usize> = None;
        for (line, head) in records {
            let Some(head) = head else {
                previous = None;
                continue;
            };
            if let Head::Object(head) = &head {
                if head.head.kind == Some(RecordKind::Leaf) {
                    match &head.head.target {
                        Field::Absent => {}
                        Field::Str(target) => {
                            leaf = Leaf::Id(Some(target.resolve(line.as_str()).to_owned()))
                        }
                        Field::Null | Field::Other => leaf = Leaf::Id(None),
                    }
                    previous = None;
                    continue;
                }
            }
            previous = tree.push_head(line, head, previous);
            if let Some(at) = previous {
                leaf = Leaf::Entry(at);
            }
        }
        tree.resolve_parents();
        tree.leaf = match leaf {
            Leaf::Entry(at) => Some(tree.entries[at].id().to_owned()),
            Leaf::Id(id) => id,
        };
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
        let head = Head::of(&line, &self.index.hasher, None).unwrap_or(Head::NotObject);
        let duplicates_before = self.index.duplicates;
        let at = self.push_head(RecordText::new(line), head, None)?;
        // A repeated id changes whose parent it is for every child of that id.
        if self.index.duplicates && !duplicates_before {
            self.resolve_parents();
        }
        Some(self.entries[at].id().to_owned())
    }

    /// Adds the record `text` with its `head`: as an entry (its position returned) when it is
    /// one, else as an opaque record. `previous`: the entry the record before became.
    fn push_head(
        &mut self,
        text: RecordText,
        head: Head,
        previous: Option<usize>,
    ) -> Option<usize> {
        let Head::Object(Located {
            head,
            id_hash,
            parent_is_previous,
        }) = head
        else {
            self.opaque.push(text);
            return None;
        };
        let entry_type = head.entry_type();
        let (Some(entry_type), Some(id)) = (entry_type, head.id) else {
            self.opaque.push(text);
            return None;
        };
        let parent = match head.parent {
            Field::Str(parent) => Some(parent),
            Field::Null | Field::Absent => None,
            Field::Other => {
                self.opaque.push(text);
                return None;
            }
        };
        // The parent is found by position when it is the entry just before (the common case);
        // else by id, now or (not yet read, or ids repeated) in `resolve_parents`.
        let parent_index = match (&parent, previous) {
            (Some(_), Some(before)) if parent_is_previous => before as u32,
            (Some(span), _) => {
                let parent_id = span.resolve(text.as_str());
                let hash = self.index.hash(parent_id);
                self.index
                    .find(&self.entries, hash, parent_id)
                    .map_or(NO_PARENT, |i| i as u32)
            }
            (None, _) => NO_PARENT,
        };
        self.entries.push(Entry {
            entry_type,
            text,
            id,
            parent,
            id_hash,
            parent_index,
        });
        let at = self.entries.len() - 1;
        self.index.insert(&self.entries, at);
        Some(at)
    }

    /// Finds by id the parents not found by position while reading: parents read after their
    /// children, missing parents, and every parent when ids repeat (the last of equal ids is
    /// the one found).
    fn resolve_parents(&mut self) {
        let all = self.index.duplicates;
        for at in 0..self.entries.len() {
            let entry = &self.entries[at];
            if entry.parent.is_none() || !(all || entry.parent_index == NO_PARENT) {
                continue;
            }
            let parent_id = entry.parent_id().unwrap_or_default();
            let hash = self.index.hash(parent_id);
            let found = self.index.find(&self.entries, hash, parent_id);
            self.entries[at].parent_index = found.map_or(NO_PARENT, |i| i as u32);
        }
    }

    /// The entry `id`.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.position(id).map(|i| &self.entries[i])
    }

    /// Where the entry `id` is in [`SessionTree::entries`].
    pub fn position(&self, id: &str) -> Option<usize> {
        let hash = self.index.hash(id);
        self.index.find(&self.entries, hash, id)
    }

    /// Where the parent of `entries[at]` is in [`SessionTree::entries`]: the entry its
    /// `parentId` names (the last of equal ids); `None` for a root or a missing parent.
    pub fn parent_position(&self, at: usize) -> Option<usize> {
        let index = self.entries.get(at)?.parent_index;
        (index != NO_PARENT).then_some(index as usize)
    }

    /// The path from the root to `leaf` (the active leaf when `None`), stopping at a missing
    /// parent.
    pub fn path(&self, leaf: Option<&str>) -> Vec<&Entry> {
        let mut path = Vec::new();
        let mut next = leaf
            .or(self.leaf.as_deref())
            .and_then(|id| self.position(id));
        // A damaged file can make a cycle (a parent written after its child, repeated ids):
        // the walk stops at the first entry it has seen.
        let mut seen = vec![false; self.entries.len()];
        while let Some(at) = next {
            if std::mem::replace(&mut seen[at], true) {
                break;
            }
            let entry = &self.entries[at];
            path.push(entry);
            next = (entry.parent_index != NO_PARENT).then_some(entry.parent_index as usize);
        }
        path.reverse();
        path
    }

    /// Where the first entry with id `id` is on `path` (a path of this tree), comparing hashes
    /// before ids.
    pub fn position_on_path(&self, path: &[&Entry], id: &str) -> Option<usize> {
        let hash = self.index.hash(id);
        path.iter().position(|e| e.id_hash == hash && e.id() == id)
    }

    /// The tips of the tree: entries no other entry names as its parent.
    pub fn tips(&self) -> Vec<&str> {
        let parents: std::collections::HashSet<&str> =
            self.entries.iter().filter_map(Entry::parent_id).collect();
        self.entries
            .iter()
            .filter(|e| !parents.contains(e.id()))
            .map(Entry::id)
            .collect()
    }
}

/// Reads a whole file; a large one as two halves read at once (page-cache copies and page faults
/// on both cores), each checked for UTF-8 by the thread that read it. The flag says whether the
/// whole file was so checked (false: not checked yet, or not UTF-8).
fn read_on_two_threads(file: &std::fs::File) -> std::io::Result<(Vec<u8>, bool)> {
    use std::io::{Read as _, Seek as _};
    use std::os::unix::fs::FileExt as _;
    const PARALLEL_FROM: u64 = 4 << 20;
    let len = file.metadata()?.len();
    if len < PARALLEL_FROM {
        let mut bytes = Vec::with_capacity(len as usize + 1);
        (&*file).read_to_end(&mut bytes)?;
        return Ok((bytes, false));
    }
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    let mut bytes = vec![0u8; len];
    let (first, second) = bytes.split_at_mut(len / 2);
    let read_and_check = |buf: &mut [u8], offset: usize| {
        file.read_exact_at(buf, offset as u64)
            .map(|()| std::str::from_utf8(buf).is_ok())
    };
    let (a, b) = std::thread::scope(|scope| {
        let other = scope.spawn(|| read_and_check(second, len / 2));
        let mine = read_and_check(first, 0);
        (
            mine,
            other
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("reader thread panicked"))),
        )
    });
    let halves_are_utf8 = a? && b?;
    // The file may have grown since its length was taken (a writer appending): read the rest.
    (&*file).seek(std::io::SeekFrom::Start(len as u64))?;
    let grew = (&*file).read_to_end(&mut bytes)? > 0;
    Ok((bytes, halves_are_utf8 && !grew))
}

/// The lines of the session file `path` longer than `sessions.maxLineBytes`, found by scanning
/// for newlines (nothing is parsed or kept); none, without a read, when the file is no longer
/// than the bound. What `pincer doctor` reports.
///
/// # Errors
/// When the file cannot be read.
pub fn long_lines(path: &Path) -> std::io::Result<Vec<LongLine>> {
    use std::io::BufRead as _;
    let max_line_bytes = super::limits::max_line_bytes();
    let file = std::fs::File::open(path)?;
    if file.metadata()?.len() <= max_line_bytes {
        return Ok(Vec::new());
    }
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let (mut found, mut line, mut length) = (Vec::new(), 1u64, 0u64);
    let end_line = |line: u64, length: u64, found: &mut Vec<LongLine>| {
        if length > max_line_bytes {
            found.push(LongLine {
                line,
                bytes: length,
                max_line_bytes,
            });
        }
    };
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let read = chunk.len();
        let mut rest = chunk;
        while let Some(at) = memchr::memchr(b'\n', rest) {
            end_line(line, length + at as u64, &mut found);
            (line, length) = (line + 1, 0);
            rest = &rest[at + 1..];
        }
        length += rest.len() as u64;
        reader.consume(read);
    }
    end_line(line, length, &mut found);
    Ok(found)
}

/// A file read with its long lines left out ([`read_bounded`]).
struct BoundedRead {
    /// The file's bytes without the long lines (each dropped with its newline).
    bytes: Vec<u8>,
    long_lines: Vec<LongLine>,
    /// Whether the file's last byte is a newline (or the file is empty).
    ends_with_newline: bool,
}

/// Streams `file`, keeping every line no longer than `max_line_bytes`; a longer line is
/// dropped as soon as it is known to be too long, and the rest of it is only scanned for its
/// newline. Memory: the kept lines, plus one read buffer and at most `max_line_bytes` of a
/// line in progress.
fn read_bounded(file: &std::fs::File, max_line_bytes: u64) -> std::io::Result<BoundedRead> {
    use std::io::BufRead as _;
    let limit = usize::try_from(max_line_bytes).unwrap_or(usize::MAX);
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut bytes = Vec::new();
    let mut long_lines = Vec::new();
    // Where the line in progress starts in `bytes`, and its number.
    let mut line_start = 0usize;
    let mut line = 1u64;
    // The length so far of a long line being skipped.
    let mut skipping: Option<u64> = None;
    let mut last_byte = None;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let read = chunk.len();
        last_byte = chunk.last().copied();
        let mut rest = chunk;
        while !rest.is_empty() {
            let newline = memchr::memchr(b'\n', rest);
            let piece = newline.map_or(rest.len(), |at| at);
            if let Some(so_far) = &mut skipping {
                *so_far += piece as u64;
            } else if bytes.len() - line_start + piece > limit {
                skipping = Some((bytes.len() - line_start + piece) as u64);
                bytes.truncate(line_start);
            } else {
                bytes.extend_from_slice(&rest[..newline.map_or(piece, |at| at + 1)]);
            }
            let Some(at) = newline else { break };
            if let Some(length) = skipping.take() {
                long_lines.push(LongLine {
                    line,
                    bytes: length,
                    max_line_bytes,
                });
            }
            line += 1;
            line_start = bytes.len();
            rest = &rest[at + 1..];
        }
        reader.consume(read);
    }
    if let Some(length) = skipping {
        long_lines.push(LongLine {
            line,
            bytes: length,
            max_line_bytes,
        });
    }
    Ok(BoundedRead {
        bytes,
        long_lines,
        ends_with_newline: last_byte.is_none_or(|b| b == b'\n'),
    })
}

/// The non-blank lines of `text` with their heads (`None`: the line does not parse), in order,
/// scanned on up to two threads (the machine's cores).
fn scan_lines(text: &str, hasher: &Hasher) -> Vec<(Range<usize>, Option<Head>)> {
    let scan = |text: &str, offset: usize| {
        let mut out = Vec::with_capacity(text.len() / 512);
        let mut start = 0;
        // The id of the record before (while its line is still in the cache).
        let mut previous_id: Option<&str> = None;
        for line in text.split('\n') {
            let range = offset + start..offset + start + line.len();
            start += line.len() + 1;
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            let head = Head::of(line, hasher, previous_id);
            previous_id = match &head {
                // (An id written with escapes is not compared: its parent is found by id.)
                Some(Head::Object(located)) => {
                    located.head.id.as_ref().and_then(|id| id.in_line(line))
                }
                _ => None,
            };
            out.push((range, head));
        }
        out
    };
    const PARALLEL_FROM: usize = 1 << 20;
    if text.len() < PARALLEL_FROM {
        return scan(text, 0);
    }
    // Split at the first newline after the middle byte (which may be inside a character): each
    // half holds whole lines.
    let middle = text.len() / 2;
    let cut = text.as_bytes()[middle..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |at| middle + at);
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
fn migrate(mut records: Vec<Value>, hasher: &Hasher) -> Vec<(RecordText, Option<Head>)> {
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
            let head = Head::of(&line, hasher, None).unwrap_or(Head::NotObject);
            (RecordText::new(line), Some(head))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The streaming head of a record
// ---------------------------------------------------------------------------------------------

/// A string field of a record: absent, `null`, a string, or another JSON value.
#[derive(Debug, Clone, Default)]
enum Field<S> {
    #[default]
    Absent,
    Null,
    Str(S),
    Other,
}

impl<S> Field<S> {
    fn map<T>(self, f: impl FnOnce(S) -> T) -> Field<T> {
        match self {
            Field::Absent => Field::Absent,
            Field::Null => Field::Null,
            Field::Str(s) => Field::Str(f(s)),
            Field::Other => Field::Other,
        }
    }

    fn into_str(self) -> Option<S> {
        match self {
            Field::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A string of a record: where it is in the record's line (when written there without
/// escapes, the common case: no copy), or the unescaped string.
#[derive(Debug, Clone, PartialEq)]
enum Span {
    InLine { start: u32, len: u32 },
    Own(Box<str>),
}

impl Span {
    /// The span of `s`, a string read from `line`.
    fn of(line: &str, s: Cow<'_, str>) -> Span {
        match s {
            Cow::Borrowed(b) => {
                let start = (b.as_ptr() as usize).wrapping_sub(line.as_ptr() as usize);
                match (u32::try_from(start), u32::try_from(b.len())) {
                    (Ok(start), Ok(len))
                        if line
                            .get(start as usize..)
                            .is_some_and(|rest| rest.starts_with(b)) =>
                    {
                        Span::InLine { start, len }
                    }
                    _ => Span::Own(b.into()),
                }
            }
            Cow::Owned(o) => Span::Own(o.into()),
        }
    }

    /// The string, when it is a range of `line`.
    fn in_line<'t>(&self, line: &'t str) -> Option<&'t str> {
        match self {
            Span::InLine { start, len } => line.get(*start as usize..(*start + *len) as usize),
            Span::Own(_) => None,
        }
    }

    fn resolve<'t>(&'t self, line: &'t str) -> &'t str {
        match self {
            Span::InLine { start, len } => &line[*start as usize..(*start + *len) as usize],
            Span::Own(s) => s,
        }
    }
}

/// What a valid record line is, as far as the tree needs to know; strings as [`Span`]s of the
/// line.
#[derive(Debug)]
enum Head {
    /// Valid JSON that is not an object.
    NotObject,
    /// An object.
    Object(Located),
}

/// The hasher of a tree's ids.
type Hasher = hashbrown::DefaultHashBuilder;

/// An object's head, with what the tree works out while the line is at hand.
#[derive(Debug)]
struct Located {
    head: ObjectHead<Span>,
    /// The id hashed (0 without an id).
    id_hash: u64,
    /// Whether the parent is the id of the record just before.
    parent_is_previous: bool,
}

impl Head {
    /// The head of a line; `None` when the line is not valid JSON. `previous_id`: the id of
    /// the record before, if known.
    fn of(line: &str, hasher: &Hasher, previous_id: Option<&str>) -> Option<Head> {
        // A line OpenClaw wrote with a lone surrogate escape parses with U+FFFD in its place
        // ([`super::lone_surrogates`]); the replacement has the escape's length, so the spans
        // of strings borrowed from it (which hold no escape) are spans of `line` too.
        let replaced;
        let (parsed, head) = match serde_json::from_str::<RecordHead<'_>>(line) {
            Ok(head) => (line, head),
            Err(_) => {
                replaced = match super::lone_surrogates::replace_lone_surrogates_str(line) {
                    Cow::Borrowed(_) => return None,
                    Cow::Owned(replaced) => replaced,
                };
                let head = serde_json::from_str::<RecordHead<'_>>(&replaced).ok()?;
                (replaced.as_str(), head)
            }
        };
        let head = match head {
            RecordHead::NotObject => return Some(Head::NotObject),
            RecordHead::Object(head) => head,
        };
        let id_hash = head
            .id
            .as_deref()
            .map_or(0, |id| std::hash::BuildHasher::hash_one(hasher, id));
        let parent_is_previous = match (&head.parent, previous_id) {
            (Field::Str(parent), Some(previous)) => parent == previous,
            _ => false,
        };
        let span = |s| Span::of(parsed, s);
        Some(Head::Object(Located {
            head: ObjectHead {
                kind: head.kind,
                id: head.id.map(span),
                parent: head.parent.map(span),
                target: head.target.map(span),
                message_role: head.message_role,
            },
            id_hash,
            parent_is_previous,
        }))
    }
}

/// A record line as parsed, its strings borrowed from the line where they can be.
enum RecordHead<'a> {
    NotObject,
    Object(ObjectHead<Cow<'a, str>>),
}

/// The fields of a record object the tree reads; every other value is skipped unparsed. As in
/// `JSON.parse`, of two equal keys the last counts.
#[derive(Debug)]
struct ObjectHead<S> {
    /// `None` when `type` is absent or not a string.
    kind: Option<RecordKind>,
    id: Option<S>,
    parent: Field<S>,
    target: Field<S>,
    /// `Some(role)` when `message` is an object with a string `role`.
    message_role: Option<Role>,
}

impl<S> Default for ObjectHead<S> {
    fn default() -> Self {
        ObjectHead {
            kind: None,
            id: None,
            parent: Field::Absent,
            target: Field::Absent,
            message_role: None,
        }
    }
}

impl<S> ObjectHead<S> {
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

/// The `visit_*` methods of a visitor for the JSON values that are neither what it looks for nor
/// anything to read: arrays (skipped unparsed) and scalars all give `$value`; with `str unit:`,
/// strings and `null` too.
macro_rules! other_values {
    (str unit: $ty:ty, $value:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_unit<E: de::Error>(self) -> Result<$ty, E> {
            Ok($value)
        }
    };
    ($ty:ty, $value:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<$ty, A::Error> {
            IgnoredAny.visit_seq(seq).map(|_| $value)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$ty, E> {
            Ok($value)
        }
    };
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
impl<'de> Deserialize<'de> for Field<Cow<'de, str>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Field<Cow<'de, str>>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(
                self,
                v: &'de str,
            ) -> Result<Field<Cow<'de, str>>, E> {
                Ok(Field::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field<Cow<'de, str>>, E> {
                Ok(Field::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Field<Cow<'de, str>>, E> {
                Ok(Field::Null)
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Field<Cow<'de, str>>, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Field::Other)
            }
            other_values!(Field<Cow<'de, str>>, Field::Other);
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
                        role = match map.next_value::<Field<Cow<'_, str>>>()? {
                            Field::Str(name) => Some(Role::from_name(&name)),
                            _ => None,
                        };
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(MessageRole(role))
            }
            other_values!(MessageRole, MessageRole(None));
            other_values!(str unit: MessageRole, MessageRole(None));
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
                            head.kind = map
                                .next_value::<Field<Cow<'_, str>>>()?
                                .into_str()
                                .map(|kind| RecordKind::of(&kind))
                        }
                        "id" => head.id = map.next_value::<Field<Cow<'_, str>>>()?.into_str(),
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
            other_values!(RecordHead<'de>, RecordHead::NotObject);
            other_values!(str unit: RecordHead<'de>, RecordHead::NotObject);
        }
        d.deserialize_any(V)
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
        let ids: Vec<&str> = tree.entries.iter().map(Entry::id).collect();
        let expected: Vec<String> = (0..3000).map(|i| format!("e{i}")).collect();
        assert_eq!(ids, expected);
        assert_eq!(tree.path(None).len(), 3000);
        assert_eq!(tree.entries[2999].message().unwrap().plain_text(), body);
        // Read from a file: large enough to be read as two halves at once.
        let mut big = text.clone();
        while big.len() <= 4 << 20 {
            big += &text[text.find('\n').unwrap() + 1..];
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.jsonl");
        std::fs::write(&path, &big).unwrap();
        let read = SessionTree::read(&path).unwrap();
        assert_eq!(read.entries.len(), SessionTree::parse(&big).entries.len());
        assert_eq!(
            read.entries.last().unwrap().text(),
            big.trim_end().rsplit('\n').next().unwrap()
        );
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
        let ids: Vec<&str> = tree.entries.iter().map(Entry::id).collect();
        assert_eq!(ids, ["a", "d", "f\"g"]);
        assert_eq!(tree.entries[2].entry_type, EntryType::Custom);
        assert_eq!(tree.opaque.len(), 5);
        assert_eq!(tree.leaf.as_deref(), Some("d"));
        assert_eq!(tree.skipped_lines, 0);
    }

    fn path_ids(tree: &SessionTree) -> Vec<&str> {
        tree.path(None).into_iter().map(Entry::id).collect()
    }

    /// Parents are found as OpenClaw's `Map` finds them: a parent written after its child is
    /// found; of two entries with one id, the later one is everyone's parent.
    #[test]
    fn parents_are_found_by_id_wherever_they_are() {
        let line = |id: &str, parent: &str| {
            format!(
                r#"{{"type":"message","id":"{id}","parentId":{parent},"message":{{"role":"user","content":"{id}"}}}}"#
            )
        };
        let forward = [line("b", "\"a\""), line("a", "null"), line("c", "\"b\"")].join("\n");
        let tree = SessionTree::parse(&forward);
        assert_eq!(path_ids(&tree), ["a", "b", "c"]);

        let duplicate = [
            line("a", "null"),
            line("x", "\"a\""),
            line("b", "\"x\""),
            line("x", "null"),
            line("c", "\"b\""),
        ]
        .join("\n");
        let tree = SessionTree::parse(&duplicate);
        // b's parent is the second x (a root), not the line before b.
        assert_eq!(path_ids(&tree), ["x", "b", "c"]);
        let context = crate::session::build_session_context(&tree, None);
        let texts: Vec<String> = context.messages.iter().map(|m| m.plain_text()).collect();
        assert_eq!(texts, ["x", "b", "c"]);
        assert_eq!(context.entry_ids, ["x", "b", "c"]);

        // A byte-order mark before the header is not part of it (JavaScript's trim drops it).
        let with_bom = format!(
            "\u{feff}{{\"type\":\"session\",\"version\":4,\"id\":\"s\"}}\n{}",
            line("a", "null")
        );
        let tree = SessionTree::parse(&with_bom);
        assert!(tree.header.is_some());
        assert_eq!((tree.skipped_lines, path_ids(&tree)), (0, vec!["a"]));

        // A hole: the walk stops there.
        let hole = [line("a", "null"), line("b", "\"gone\""), line("c", "\"b\"")].join("\n");
        assert_eq!(path_ids(&SessionTree::parse(&hole)), ["b", "c"]);
    }

    #[test]
    fn a_bounded_read_keeps_lines_up_to_the_bound_and_skips_longer_ones_across_reads() {
        // Lines of the bound's length and one more, and one longer than the read buffer
        // (1 MiB), so that a skip spans several reads; a last line without its newline.
        let bound = 1000u64;
        let at_bound = "a".repeat(bound as usize);
        let over = "b".repeat(bound as usize + 1);
        let huge = "c".repeat(3 << 20);
        let text = format!("{at_bound}\n{over}\n\nkept\n{huge}\nlast\n{huge}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, &text).unwrap();
        let read = read_bounded(&std::fs::File::open(&path).unwrap(), bound).unwrap();
        assert_eq!(
            String::from_utf8(read.bytes).unwrap(),
            format!("{at_bound}\n\nkept\nlast\n")
        );
        let long = |line, bytes| LongLine {
            line,
            bytes,
            max_line_bytes: bound,
        };
        assert_eq!(
            read.long_lines,
            [long(2, bound + 1), long(5, 3 << 20), long(7, 3 << 20)]
        );
        assert!(!read.ends_with_newline);
    }

    #[test]
    fn a_message_with_a_lone_surrogate_escape_is_read_with_u_fffd_and_its_line_kept() {
        let line = r#"{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"x\ud83d"}}"#;
        let tree = SessionTree::parse(line);
        assert_eq!(tree.skipped_lines, 0);
        let entry = tree.get("a").expect("the entry is kept");
        assert_eq!(entry.text(), line, "its line as written");
        assert_eq!(entry.message().unwrap().plain_text(), "x\u{fffd}");
    }
}
