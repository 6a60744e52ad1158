//! Messages as the engine sees them: OpenClaw's agent message model in frozen `#[repr(C)]` form.
//!
//! A [`Message`] is what OpenClaw calls an `AgentMessage`: `{role:"user", content, timestamp}`,
//! `{role:"assistant", content:[…], api, provider, model, usage, stopReason, errorMessage?}`,
//! `{role:"toolResult", toolCallId, toolName, content:[…], isError}` (a tool result is a
//! message of its own), `{role:"custom", customType, content, display, details}`,
//! `{role:"compactionSummary", summary, tokensBefore}` and `{role:"branchSummary", summary,
//! fromId}` (no `content`), `{role:"bashExecution", command, output, …}`, `{role:"system"}`, and
//! any role a later OpenClaw invents.
//!
//! **Lossless.** Reading message JSON and writing it back gives an equal JSON value: every key
//! the model names is read into a typed field *only when writing that field back reproduces the
//! value exactly*; every other key (unknown keys, `null`s, values of an unexpected type) is kept
//! verbatim in the message's extra object and written back unchanged. Content blocks follow the
//! same rule, and a block of a type this version does not know is kept whole. (One exception,
//! by necessity: JSON text that is not Unicode — a lone surrogate escape such as `"\ud800"`,
//! which JavaScript's `JSON.stringify` can write — cannot be read into Rust strings at all; the
//! reader refuses it with an error rather than change it.)
//!
//! The host keeps its conversations in exactly these values, so a slice of them crosses the
//! boundary as a borrowed `RSlice` without a copy. The session entry id a message came from is
//! not part of the message (OpenClaw's message JSON has none): it travels beside it, as
//! [`EntryId`]s in the call's parameters.
//!
//! Fields are private: engines read a message through accessors that return `&str`,
//! `Option<u64>`, plain enums and slices, and build new ones with the constructors
//! ([`Message::user`], [`Message::compaction_summary`], …) or from JSON.
//!
//! **Stability:** frozen for API 1.x. [`Role`] and [`BlockKind`] are closed enums whose `Other`
//! variant carries what a later OpenClaw adds (see their docs).

use std::fmt;

use abi_stable::{
    std_types::{RBox, ROption, RString, RVec},
    StableAbi,
};
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------
// Roles
// ---------------------------------------------------------------------------------------------

/// Who wrote a message: OpenClaw's roles.
///
/// **Closed in 1.x** (no variant is ever added): a role that a later OpenClaw invents is read as
/// [`Role::Other`] and its name is kept ([`Message::role_name`]), so an engine built today still
/// sees — and round-trips — it. A new variant would change the layout every 1.0 library was
/// checked against, for no gain over `Other`.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A person (or the harness speaking for one): `user`.
    User,
    /// The model: `assistant`.
    Assistant,
    /// The result of one tool call: `toolResult`.
    ToolResult,
    /// Host- or plugin-defined content with a `customType`: `custom`.
    Custom,
    /// The summary that stands for compacted history: `compactionSummary`.
    CompactionSummary,
    /// The summary of a branch the conversation came back from: `branchSummary`.
    BranchSummary,
    /// A shell command run by the user and its output: `bashExecution`.
    BashExecution,
    /// A system prompt kept in the transcript (hosts that do so): `system`.
    System,
    /// Any other role; its name is [`Message::role_name`].
    Other,
}

impl Role {
    /// The role's name in OpenClaw's JSON (`"toolResult"`, …); `"other"` for [`Role::Other`]
    /// (use [`Message::role_name`] for the real name).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolResult => "toolResult",
            Role::Custom => "custom",
            Role::CompactionSummary => "compactionSummary",
            Role::BranchSummary => "branchSummary",
            Role::BashExecution => "bashExecution",
            Role::System => "system",
            Role::Other => "other",
        }
    }

    /// The role named `name`, [`Role::Other`] for a name this version does not know.
    pub fn from_name(name: &str) -> Role {
        match name {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "toolResult" => Role::ToolResult,
            "custom" => Role::Custom,
            "compactionSummary" => Role::CompactionSummary,
            "branchSummary" => Role::BranchSummary,
            "bashExecution" => Role::BashExecution,
            "system" => Role::System,
            _ => Role::Other,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// Usage
// ---------------------------------------------------------------------------------------------

/// What a model call cost, in the provider's currency units (`usage.cost`).
///
/// Written as JavaScript writes numbers: an integral value as an integer (`0`, not `0.0`).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cost {
    /// Input tokens' cost.
    pub input: f64,
    /// Output tokens' cost.
    pub output: f64,
    /// Cache reads' cost.
    pub cache_read: f64,
    /// Cache writes' cost.
    pub cache_write: f64,
    /// The total.
    pub total: f64,
}

impl Serialize for Cost {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(5))?;
        for (key, value) in [
            ("input", self.input),
            ("output", self.output),
            ("cacheRead", self.cache_read),
            ("cacheWrite", self.cache_write),
            ("total", self.total),
        ] {
            map.serialize_entry(key, &js_number(value))?;
        }
        map.end()
    }
}

/// `value` as `JSON.stringify` writes it: integral values as integers.
fn js_number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0 {
        Value::from(value as i64)
    } else {
        Value::from(value)
    }
}

/// Token usage the provider reported for an assistant message (`usage`).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Tokens read from the provider's prompt cache.
    pub cache_read: u64,
    /// Tokens written to the provider's prompt cache.
    pub cache_write: u64,
    /// The provider's total.
    pub total_tokens: u64,
    /// What it cost.
    pub cost: Cost,
}

impl Usage {
    /// The context size this usage implies: `total_tokens` when given, else the sum of the parts.
    pub fn context_tokens(&self) -> u64 {
        if self.total_tokens > 0 {
            self.total_tokens
        } else {
            self.input + self.output + self.cache_read + self.cache_write
        }
    }
}

// ---------------------------------------------------------------------------------------------
// JSON text and entry ids
// ---------------------------------------------------------------------------------------------

/// A JSON value kept as its text (tool arguments, `details`, unknown keys).
#[repr(transparent)]
#[derive(StableAbi, Clone, PartialEq, Eq)]
pub struct JsonText(RString);

impl JsonText {
    /// The JSON text of `value`.
    pub fn from_value(value: &Value) -> Self {
        JsonText(RString::from(value.to_string()))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_str::<&serde_json::value::RawValue>(&self.0) {
            Ok(raw) => raw.serialize(s),
            Err(_) => Value::Null.serialize(s),
        }
    }
}

/// The session entry a message came from, or none (a message the host or an engine made).
///
/// It travels beside the messages — `entry_ids[i]` belongs to `messages[i]` — never inside
/// the message JSON.
#[repr(transparent)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EntryId(ROption<RString>);

impl EntryId {
    /// No entry.
    pub const NONE: EntryId = EntryId(ROption::RNone);

    /// The entry `id`.
    pub fn new(id: impl Into<String>) -> Self {
        EntryId(ROption::RSome(RString::from(id.into())))
    }

    /// The id, if any.
    pub fn as_str(&self) -> Option<&str> {
        match &self.0 {
            ROption::RSome(id) => Some(id.as_str()),
            ROption::RNone => None,
        }
    }

    /// Whether the id is UTF-8 (or absent): for hosts, before reading an id a library made.
    pub fn is_utf8(&self) -> bool {
        opt_is_utf8(&self.0)
    }
}

/// As JSON: the id, or `null` for none.
impl Serialize for EntryId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_str().serialize(s)
    }
}

impl PartialEq<str> for EntryId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == Some(other)
    }
}

impl PartialEq<&str> for EntryId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

impl PartialEq<String> for EntryId {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == Some(other.as_str())
    }
}

impl From<Option<String>> for EntryId {
    fn from(id: Option<String>) -> Self {
        id.map_or(EntryId::NONE, EntryId::new)
    }
}

// ---------------------------------------------------------------------------------------------
// Content blocks
// ---------------------------------------------------------------------------------------------

/// The kind of a [`ContentBlock`].
///
/// **Closed in 1.x:** a block type this version does not know is [`BlockKind::Other`], kept
/// whole as JSON; its `type` is [`ContentBlock::type_name`].
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// `{type:"text", text}`.
    Text,
    /// `{type:"thinking", thinking}`.
    Thinking,
    /// `{type:"toolCall", id, name, arguments}`.
    ToolCall,
    /// `{type:"image", data, mimeType}`.
    Image,
    /// Anything else.
    Other,
}

/// One block of a message's `content`. Read it with the accessors; build one with
/// [`ContentBlock::text`], [`ContentBlock::tool_call`], … or from JSON.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct ContentBlock {
    kind: BlockKind,
    /// text / thinking / tool-call id / image data; for `Other`, the whole block's JSON.
    first: RString,
    /// The rest, boxed: most blocks are plain text with nothing more.
    more: ROption<RBox<BlockMore>>,
}

/// What a block has beyond its first string.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Default)]
struct BlockMore {
    /// tool-call name / image mimeType.
    second: RString,
    /// tool-call arguments.
    arguments: ROption<JsonText>,
    /// Keys of the block this version does not model, as a JSON object.
    extra: ROption<JsonText>,
}

static NO_MORE: BlockMore = BlockMore {
    second: RString::new(),
    arguments: ROption::RNone,
    extra: ROption::RNone,
};

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::plain(BlockKind::Text, text.into(), String::new())
    }

    /// A thinking block.
    pub fn thinking(thinking: impl Into<String>) -> Self {
        ContentBlock::plain(BlockKind::Thinking, thinking.into(), String::new())
    }

    /// A tool call; `arguments` is the arguments object.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: &Value) -> Self {
        ContentBlock::new(
            BlockKind::ToolCall,
            id.into(),
            BlockMore {
                second: name.into().into(),
                arguments: ROption::RSome(JsonText::from_value(arguments)),
                extra: ROption::RNone,
            },
        )
    }

    /// An image, base64 `data` of `mime_type`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        ContentBlock::plain(BlockKind::Image, data.into(), mime_type.into())
    }

    fn plain(kind: BlockKind, first: String, second: String) -> Self {
        ContentBlock::new(
            kind,
            first,
            BlockMore {
                second: second.into(),
                ..BlockMore::default()
            },
        )
    }

    fn new(kind: BlockKind, first: String, more: BlockMore) -> Self {
        ContentBlock {
            kind,
            first: first.into(),
            more: if more == BlockMore::default() {
                ROption::RNone
            } else {
                ROption::RSome(RBox::new(more))
            },
        }
    }

    fn more(&self) -> &BlockMore {
        match &self.more {
            ROption::RSome(more) => more,
            ROption::RNone => &NO_MORE,
        }
    }

    /// The kind.
    pub fn kind(&self) -> BlockKind {
        self.kind
    }

    /// The block's `type` as written (`"text"`, …, or an unknown type's name).
    pub fn type_name(&self) -> &str {
        match self.kind {
            BlockKind::Text => "text",
            BlockKind::Thinking => "thinking",
            BlockKind::ToolCall => "toolCall",
            BlockKind::Image => "image",
            BlockKind::Other => &self.more().second,
        }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        (self.kind == BlockKind::Text).then_some(self.first.as_str())
    }

    /// The reasoning of a thinking block.
    pub fn as_thinking(&self) -> Option<&str> {
        (self.kind == BlockKind::Thinking).then_some(self.first.as_str())
    }

    /// A tool call's id, name and arguments (JSON text).
    pub fn as_tool_call(&self) -> Option<ToolCallRef<'_>> {
        (self.kind == BlockKind::ToolCall).then(|| ToolCallRef {
            id: &self.first,
            name: &self.more().second,
            arguments_json: match &self.more().arguments {
                ROption::RSome(a) => a.as_str(),
                ROption::RNone => "{}",
            },
        })
    }

    /// An image's base64 data and MIME type.
    pub fn as_image(&self) -> Option<(&str, &str)> {
        (self.kind == BlockKind::Image)
            .then_some((self.first.as_str(), self.more().second.as_str()))
    }

    /// The block as a JSON value (exactly what was read, for every kind).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A tool call, borrowed from its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolCallRef<'a> {
    /// The call id, which the answering `toolResult` message names as `toolCallId`.
    pub id: &'a str,
    /// The tool's name.
    pub name: &'a str,
    /// The arguments as JSON text.
    pub arguments_json: &'a str,
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.kind == BlockKind::Other {
            return JsonText(self.first.clone()).serialize(s);
        }
        let more = self.more();
        let extra = extra_map(&more.extra);
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", self.type_name())?;
        match self.kind {
            BlockKind::Text => map.serialize_entry("text", self.first.as_str())?,
            BlockKind::Thinking => map.serialize_entry("thinking", self.first.as_str())?,
            BlockKind::ToolCall => {
                map.serialize_entry("id", self.first.as_str())?;
                map.serialize_entry("name", more.second.as_str())?;
                if let ROption::RSome(arguments) = &more.arguments {
                    map.serialize_entry("arguments", arguments)?;
                }
            }
            BlockKind::Image => {
                map.serialize_entry("data", self.first.as_str())?;
                map.serialize_entry("mimeType", more.second.as_str())?;
            }
            BlockKind::Other => unreachable!("handled above"),
        }
        for (key, value) in &extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ContentBlock::from_value(Value::deserialize(d)?))
    }
}

impl ContentBlock {
    /// Reads a block from JSON; never fails (an unexpected block is kept whole as `Other`).
    pub fn from_value(value: Value) -> Self {
        let Value::Object(mut map) = value else {
            return ContentBlock::other(value);
        };
        let kind = match map.get("type").and_then(Value::as_str) {
            Some("text") => BlockKind::Text,
            Some("thinking") => BlockKind::Thinking,
            Some("toolCall") => BlockKind::ToolCall,
            Some("image") => BlockKind::Image,
            _ => return ContentBlock::other(Value::Object(map)),
        };
        let (first_key, second_key) = match kind {
            BlockKind::Text => ("text", None),
            BlockKind::Thinking => ("thinking", None),
            BlockKind::ToolCall => ("id", Some("name")),
            BlockKind::Image => ("data", Some("mimeType")),
            BlockKind::Other => unreachable!(),
        };
        // The required string fields must be strings, else the block is kept whole.
        let is_str =
            |map: &Map<String, Value>, key: &str| map.get(key).is_some_and(Value::is_string);
        if !is_str(&map, first_key) || second_key.is_some_and(|k| !is_str(&map, k)) {
            return ContentBlock::other(Value::Object(map));
        }
        map.remove("type");
        let first = take_string(&mut map, first_key);
        let second = second_key
            .map(|k| take_string(&mut map, k))
            .unwrap_or_default();
        let arguments = if kind == BlockKind::ToolCall {
            map.remove("arguments").map(|a| JsonText::from_value(&a))
        } else {
            None
        };
        ContentBlock::new(
            kind,
            first,
            BlockMore {
                second: second.into(),
                arguments: arguments.into(),
                extra: extra_text(map),
            },
        )
    }

    fn other(value: Value) -> Self {
        // The top-level `type`, kept beside the JSON so that reading it never parses.
        let type_name = match value.get("type") {
            Some(Value::String(name)) => name.clone(),
            _ => String::new(),
        };
        ContentBlock {
            kind: BlockKind::Other,
            first: value.to_string().into(),
            more: ROption::RSome(RBox::new(BlockMore {
                second: type_name.into(),
                ..BlockMore::default()
            })),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Content
// ---------------------------------------------------------------------------------------------

/// A message's `content` as written: a string, or blocks.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
enum ContentRepr {
    /// `content` is absent (summaries) or was not a string or an array (then it is in extra).
    Absent,
    /// `content` is a string.
    Text(RString),
    /// `content` is an array of blocks.
    Blocks(RVec<ContentBlock>),
}

/// A message's content, borrowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Content<'a> {
    /// The message has no content (summaries, bash executions).
    None,
    /// `content` is a plain string (OpenClaw user and custom messages often are).
    Text(&'a str),
    /// `content` is a list of blocks.
    Blocks(&'a [ContentBlock]),
}

impl<'a> Content<'a> {
    /// The text blocks' texts (the string itself for string content), in order.
    pub fn texts(self) -> impl Iterator<Item = &'a str> {
        let (single, blocks) = match self {
            Content::None => (None, &[][..]),
            Content::Text(text) => (Some(text), &[][..]),
            Content::Blocks(blocks) => (None, blocks),
        };
        single
            .into_iter()
            .chain(blocks.iter().filter_map(ContentBlock::as_text))
    }

    /// The blocks (empty for string content or none).
    pub fn blocks(self) -> &'a [ContentBlock] {
        match self {
            Content::Blocks(blocks) => blocks,
            _ => &[],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Message
// ---------------------------------------------------------------------------------------------

/// One message of a conversation, in OpenClaw's shape (see the module docs).
///
/// ```
/// use pincer_plugin_abi::latest::{Message, Role};
/// let m = Message::user("Book me a flight to Seattle");
/// assert_eq!(m.role(), Role::User);
/// assert_eq!(m.plain_text(), "Book me a flight to Seattle");
///
/// // Lossless: unknown keys and blocks survive a read and a write.
/// let json = serde_json::json!({
///     "role": "toolResult", "toolCallId": "call_1", "toolName": "get_user",
///     "content": [{"type": "text", "text": "{}"}, {"type": "audio", "data": "…"}],
///     "isError": false, "timestamp": 1715800000000_i64, "someFutureKey": [1, 2],
/// });
/// let m = Message::from_value(json.clone()).unwrap();
/// assert_eq!(m.tool_result_id(), Some("call_1"));
/// assert_eq!(m.to_value(), json);
/// ```
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct Message {
    role: Role,
    content: ContentRepr,
    timestamp: ROption<i64>,
    /// `toolCallId` (toolResult), `customType` (custom), `fromId` (branchSummary),
    /// `command` (bashExecution), the role's name ([`Role::Other`]).
    key: ROption<RString>,
    /// `toolName` (toolResult), `summary` (summaries), `output` (bashExecution), `details` as
    /// JSON text (custom).
    text2: ROption<RString>,
    /// `isError` (toolResult), `display` (custom).
    flag: ROption<bool>,
    /// `excludeFromContext`.
    exclude_from_context: ROption<bool>,
    /// `tokensBefore` (compactionSummary).
    tokens_before: ROption<u64>,
    /// Assistant metadata, boxed: most messages are not assistant messages.
    assistant: ROption<RBox<AssistantMeta>>,
    /// Keys this version does not model (or whose value is not of the modelled type).
    extra: ROption<JsonText>,
}

/// An assistant message's provider metadata.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Default)]
struct AssistantMeta {
    api: ROption<RString>,
    provider: ROption<RString>,
    model: ROption<RString>,
    usage: ROption<Usage>,
    stop_reason: ROption<RString>,
    error_message: ROption<RString>,
}

/// The keys a role models: (json key, slot).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Key,
    Text2,
    Flag,
    TokensBefore,
    Details,
    Api,
    Provider,
    Model,
    Usage,
    StopReason,
    ErrorMessage,
}

fn role_slots(role: Role) -> &'static [(&'static str, Slot)] {
    match role {
        Role::ToolResult => &[
            ("toolCallId", Slot::Key),
            ("toolName", Slot::Text2),
            ("isError", Slot::Flag),
        ],
        Role::Custom => &[
            ("customType", Slot::Key),
            ("display", Slot::Flag),
            ("details", Slot::Details),
        ],
        Role::CompactionSummary => &[
            ("summary", Slot::Text2),
            ("tokensBefore", Slot::TokensBefore),
        ],
        Role::BranchSummary => &[("summary", Slot::Text2), ("fromId", Slot::Key)],
        Role::BashExecution => &[("command", Slot::Key), ("output", Slot::Text2)],
        Role::Assistant => &[
            ("api", Slot::Api),
            ("provider", Slot::Provider),
            ("model", Slot::Model),
            ("usage", Slot::Usage),
            ("stopReason", Slot::StopReason),
            ("errorMessage", Slot::ErrorMessage),
        ],
        Role::User | Role::System | Role::Other => &[],
    }
}

impl Message {
    fn empty(role: Role) -> Self {
        Message {
            role,
            content: ContentRepr::Absent,
            timestamp: ROption::RNone,
            key: ROption::RNone,
            text2: ROption::RNone,
            flag: ROption::RNone,
            exclude_from_context: ROption::RNone,
            tokens_before: ROption::RNone,
            assistant: ROption::RNone,
            extra: ROption::RNone,
        }
    }

    /// `{role:"user", content:<text>}`.
    pub fn user(text: impl Into<String>) -> Self {
        Message {
            content: ContentRepr::Text(RString::from(text.into())),
            ..Message::empty(Role::User)
        }
    }

    /// `{role:"system", content:<text>}`.
    pub fn system(text: impl Into<String>) -> Self {
        Message {
            content: ContentRepr::Text(RString::from(text.into())),
            ..Message::empty(Role::System)
        }
    }

    /// `{role:"assistant", content:[{type:"text",text}]}`.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::assistant_blocks(vec![ContentBlock::text(text)])
    }

    /// `{role:"assistant", content:<blocks>}` (text, thinking, tool calls).
    pub fn assistant_blocks(blocks: Vec<ContentBlock>) -> Self {
        Message {
            content: ContentRepr::Blocks(blocks.into()),
            ..Message::empty(Role::Assistant)
        }
    }

    /// `{role:"toolResult", toolCallId, toolName, content:[{type:"text",text}], isError}`.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        tool_name: impl Into<String>,
        text: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Message {
            content: ContentRepr::Blocks(vec![ContentBlock::text(text)].into()),
            key: ROption::RSome(tool_call_id.into().into()),
            text2: ROption::RSome(tool_name.into().into()),
            flag: ROption::RSome(is_error),
            ..Message::empty(Role::ToolResult)
        }
    }

    /// `{role:"custom", customType, content:<text>, display}`.
    pub fn custom(custom_type: impl Into<String>, text: impl Into<String>, display: bool) -> Self {
        Message {
            content: ContentRepr::Text(RString::from(text.into())),
            key: ROption::RSome(custom_type.into().into()),
            flag: ROption::RSome(display),
            ..Message::empty(Role::Custom)
        }
    }

    /// `{role:"compactionSummary", summary, tokensBefore}`: what stands for compacted history.
    pub fn compaction_summary(summary: impl Into<String>, tokens_before: u64) -> Self {
        Message {
            text2: ROption::RSome(summary.into().into()),
            tokens_before: ROption::RSome(tokens_before),
            ..Message::empty(Role::CompactionSummary)
        }
    }

    /// `{role:"branchSummary", summary, fromId}`.
    pub fn branch_summary(summary: impl Into<String>, from_id: impl Into<String>) -> Self {
        Message {
            text2: ROption::RSome(summary.into().into()),
            key: ROption::RSome(from_id.into().into()),
            ..Message::empty(Role::BranchSummary)
        }
    }

    /// The same message with `timestamp` (ms since the Unix epoch).
    pub fn with_timestamp(mut self, timestamp_ms: i64) -> Self {
        self.forget_extra(&["timestamp"]);
        self.timestamp = ROption::RSome(timestamp_ms);
        self
    }

    /// Reads a message from OpenClaw JSON.
    ///
    /// # Errors
    /// When `value` is not an object or has no string `role`; everything else is accepted
    /// and kept.
    pub fn from_value(value: Value) -> Result<Self, MessageError> {
        let Value::Object(mut map) = value else {
            return Err(MessageError("a message must be a JSON object".into()));
        };
        let role_name = match map.remove("role") {
            Some(Value::String(name)) => name,
            Some(other) => {
                return Err(MessageError(format!(
                    "a message's \"role\" must be a string, found {other}"
                )))
            }
            None => return Err(MessageError("a message needs a \"role\"".into())),
        };
        let role = Role::from_name(&role_name);
        let mut message = Message::empty(role);
        if role == Role::Other {
            message.key = ROption::RSome(role_name.into());
        }
        match map.remove("content") {
            None => {}
            Some(Value::String(text)) => message.content = ContentRepr::Text(text.into()),
            Some(Value::Array(blocks)) => {
                message.content =
                    ContentRepr::Blocks(blocks.into_iter().map(ContentBlock::from_value).collect())
            }
            Some(other) => {
                map.insert("content".into(), other);
            }
        }
        if let Some(ts) = map.get("timestamp").and_then(exact_i64) {
            message.timestamp = ROption::RSome(ts);
            map.remove("timestamp");
        }
        if let Some(Value::Bool(b)) = map.get("excludeFromContext") {
            message.exclude_from_context = ROption::RSome(*b);
            map.remove("excludeFromContext");
        }
        for &(key, slot) in role_slots(role) {
            if let Some(value) = map.get(key) {
                if message.set_slot(slot, value) {
                    map.remove(key);
                }
            }
        }
        message.extra = extra_text(map);
        Ok(message)
    }

    /// Stores `value` in `slot` if it fits exactly; false leaves it for extra.
    fn set_slot(&mut self, slot: Slot, value: &Value) -> bool {
        let string = || value.as_str().map(|s| ROption::RSome(RString::from(s)));
        match slot {
            Slot::Key => string().map(|s| self.key = s).is_some(),
            Slot::Text2 => string().map(|s| self.text2 = s).is_some(),
            Slot::Flag => value
                .as_bool()
                .map(|b| self.flag = ROption::RSome(b))
                .is_some(),
            Slot::TokensBefore => match value.as_u64() {
                Some(n) if value.is_u64() => {
                    self.tokens_before = ROption::RSome(n);
                    true
                }
                _ => false,
            },
            Slot::Details => {
                self.text2 = ROption::RSome(RString::from(value.to_string()));
                true
            }
            Slot::Api => string().map(|s| self.meta_mut().api = s).is_some(),
            Slot::Provider => string().map(|s| self.meta_mut().provider = s).is_some(),
            Slot::Model => string().map(|s| self.meta_mut().model = s).is_some(),
            Slot::StopReason => string().map(|s| self.meta_mut().stop_reason = s).is_some(),
            Slot::ErrorMessage => string()
                .map(|s| self.meta_mut().error_message = s)
                .is_some(),
            Slot::Usage => match serde_json::from_value::<Usage>(value.clone()) {
                // Typed only when writing it back gives the same value (integers stay
                // integers, every key present).
                Ok(usage) if serde_json::to_value(usage).ok().as_ref() == Some(value) => {
                    self.meta_mut().usage = ROption::RSome(usage);
                    true
                }
                _ => false,
            },
        }
    }

    /// The message as OpenClaw JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    // -- accessors ------------------------------------------------------------------------

    /// The role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The role as written (`"toolResult"`, or an unknown role's name).
    pub fn role_name(&self) -> &str {
        match (&self.role, &self.key) {
            (Role::Other, ROption::RSome(name)) => name,
            (role, _) => role.as_str(),
        }
    }

    /// The content.
    pub fn content(&self) -> Content<'_> {
        match &self.content {
            ContentRepr::Absent => Content::None,
            ContentRepr::Text(text) => Content::Text(text),
            ContentRepr::Blocks(blocks) => Content::Blocks(blocks),
        }
    }

    /// The content blocks (empty when the content is a string or absent; see [`Message::content`]).
    pub fn blocks(&self) -> &[ContentBlock] {
        self.content().blocks()
    }

    /// All text (string content, or the text blocks) joined with newlines; for summaries, the
    /// summary. Thinking, tools and images are left out.
    pub fn plain_text(&self) -> String {
        if let Some(summary) = self.summary() {
            return summary.to_owned();
        }
        let mut out = String::new();
        for text in self.content().texts() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
        out
    }

    /// Milliseconds since the Unix epoch, when the message has an integer `timestamp`.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp.into_option()
    }

    /// Whether `excludeFromContext` is set: the message is kept in the session but never
    /// shown to the model.
    pub fn is_excluded_from_context(&self) -> bool {
        matches!(self.exclude_from_context, ROption::RSome(true))
    }

    /// The tool calls an assistant message makes, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = ToolCallRef<'_>> {
        let blocks = if self.role == Role::Assistant {
            self.blocks()
        } else {
            &[]
        };
        blocks.iter().filter_map(ContentBlock::as_tool_call)
    }

    /// The ids of the tool calls an assistant message makes, in order.
    pub fn tool_call_ids(&self) -> impl Iterator<Item = &str> {
        // The id is the block's first string: no need to reach the boxed rest.
        let blocks = if self.role == Role::Assistant {
            self.blocks()
        } else {
            &[]
        };
        blocks
            .iter()
            .filter(|block| block.kind == BlockKind::ToolCall)
            .map(|block| block.first.as_str())
    }

    /// The id of the tool call a `toolResult` message answers (`toolCallId`).
    pub fn tool_result_id(&self) -> Option<&str> {
        self.key_for(Role::ToolResult)
    }

    /// A `toolResult`'s `toolName`.
    pub fn tool_name(&self) -> Option<&str> {
        self.text2_for(Role::ToolResult)
    }

    /// A `toolResult`'s `isError`.
    pub fn is_error(&self) -> Option<bool> {
        (self.role == Role::ToolResult)
            .then(|| self.flag.into_option())
            .flatten()
    }

    /// A `custom` message's `customType`.
    pub fn custom_type(&self) -> Option<&str> {
        self.key_for(Role::Custom)
    }

    /// A `custom` message's `display`.
    pub fn display(&self) -> Option<bool> {
        (self.role == Role::Custom)
            .then(|| self.flag.into_option())
            .flatten()
    }

    /// A `custom` message's `details`, as JSON text.
    pub fn details_json(&self) -> Option<&str> {
        self.text2_for(Role::Custom)
    }

    /// The `summary` of a compaction or branch summary.
    pub fn summary(&self) -> Option<&str> {
        match self.role {
            Role::CompactionSummary | Role::BranchSummary => opt_text(&self.text2),
            _ => None,
        }
    }

    /// A compaction summary's `tokensBefore`.
    pub fn tokens_before(&self) -> Option<u64> {
        self.tokens_before.into_option()
    }

    /// A branch summary's `fromId`.
    pub fn from_id(&self) -> Option<&str> {
        self.key_for(Role::BranchSummary)
    }

    /// A bash execution's `command`.
    pub fn command(&self) -> Option<&str> {
        self.key_for(Role::BashExecution)
    }

    /// A bash execution's `output`.
    pub fn output(&self) -> Option<&str> {
        self.text2_for(Role::BashExecution)
    }

    /// An assistant message's `api`.
    pub fn api(&self) -> Option<&str> {
        self.meta().and_then(|m| opt_text(&m.api))
    }

    /// An assistant message's `provider`.
    pub fn provider(&self) -> Option<&str> {
        self.meta().and_then(|m| opt_text(&m.provider))
    }

    /// An assistant message's `model`.
    pub fn model(&self) -> Option<&str> {
        self.meta().and_then(|m| opt_text(&m.model))
    }

    /// An assistant message's `usage`.
    pub fn usage(&self) -> Option<&Usage> {
        self.meta().and_then(|m| m.usage.as_ref().into_option())
    }

    /// An assistant message's `stopReason` (`stop`, `toolUse`, `error`, …).
    pub fn stop_reason(&self) -> Option<&str> {
        self.meta().and_then(|m| opt_text(&m.stop_reason))
    }

    /// An assistant message's `errorMessage`.
    pub fn error_message(&self) -> Option<&str> {
        self.meta().and_then(|m| opt_text(&m.error_message))
    }

    /// The value of a key this version does not model (or whose value had another type than
    /// the modelled one), parsed from the extra object.
    pub fn extra(&self, key: &str) -> Option<Value> {
        extra_map(&self.extra).remove(key)
    }

    /// The assistant metadata, created empty if the message has none yet.
    fn meta_mut(&mut self) -> &mut AssistantMeta {
        if self.assistant.is_none() {
            self.assistant = ROption::RSome(RBox::new(AssistantMeta::default()));
        }
        match &mut self.assistant {
            ROption::RSome(meta) => meta,
            ROption::RNone => unreachable!("set above"),
        }
    }

    fn meta(&self) -> Option<&AssistantMeta> {
        self.assistant.as_ref().map(|b| &**b).into_option()
    }

    fn key_for(&self, role: Role) -> Option<&str> {
        (self.role == role).then(|| opt_text(&self.key)).flatten()
    }

    fn text2_for(&self, role: Role) -> Option<&str> {
        (self.role == role).then(|| opt_text(&self.text2)).flatten()
    }

    // -- setters the host needs for imports and repairs -----------------------------------

    /// Drops `keys` from the extra object (a typed field now holds them).
    fn forget_extra(&mut self, keys: &[&str]) {
        if self.extra.is_none() {
            return;
        }
        let mut map = extra_map(&self.extra);
        for key in keys {
            map.remove(*key);
        }
        self.extra = extra_text(map);
    }

    /// Sets an assistant message's provider metadata (`api`, `provider`, `model`).
    pub fn with_model(mut self, api: &str, provider: &str, model: &str) -> Self {
        if self.role == Role::Assistant {
            self.forget_extra(&["api", "provider", "model"]);
            let meta = self.meta_mut();
            meta.api = ROption::RSome(api.into());
            meta.provider = ROption::RSome(provider.into());
            meta.model = ROption::RSome(model.into());
        }
        self
    }

    /// Sets an assistant message's `usage` and `stopReason`.
    pub fn with_usage(mut self, usage: Usage, stop_reason: &str) -> Self {
        if self.role == Role::Assistant {
            self.forget_extra(&["usage", "stopReason"]);
            let meta = self.meta_mut();
            meta.usage = ROption::RSome(usage);
            meta.stop_reason = ROption::RSome(stop_reason.into());
        }
        self
    }

    /// Replaces string content by one text block (OpenClaw's normalisation of assistant and
    /// toolResult messages on load).
    pub fn normalize_string_content(&mut self) {
        if let ContentRepr::Text(text) = &self.content {
            let block = ContentBlock::text(text.as_str());
            self.content = ContentRepr::Blocks(vec![block].into());
        }
    }
}

/// Why JSON could not be read as a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageError(String);

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MessageError {}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let extra = extra_map(&self.extra);
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("role", self.role_name())?;
        // OpenClaw's key order: role-specific keys around content as OpenClaw writes them.
        let slots = role_slots(self.role);
        let (before, after) = slots.split_at(match self.role {
            Role::ToolResult => 2,
            Role::Custom => 1,
            _ => 0,
        });
        for &(key, slot) in before {
            self.serialize_slot(&mut map, key, slot)?;
        }
        match &self.content {
            ContentRepr::Absent => {}
            ContentRepr::Text(text) => map.serialize_entry("content", text.as_str())?,
            ContentRepr::Blocks(blocks) => map.serialize_entry("content", blocks.as_slice())?,
        }
        for &(key, slot) in after {
            self.serialize_slot(&mut map, key, slot)?;
        }
        if let ROption::RSome(b) = self.exclude_from_context {
            map.serialize_entry("excludeFromContext", &b)?;
        }
        if let ROption::RSome(ts) = self.timestamp {
            map.serialize_entry("timestamp", &ts)?;
        }
        for (key, value) in &extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl Message {
    fn serialize_slot<M: SerializeMap>(
        &self,
        map: &mut M,
        key: &str,
        slot: Slot,
    ) -> Result<(), M::Error> {
        let meta = self.meta();
        let text = opt_text;
        match slot {
            Slot::Key => opt_entry(map, key, text(&self.key)),
            Slot::Text2 => opt_entry(map, key, text(&self.text2)),
            Slot::Flag => opt_entry(map, key, self.flag.into_option()),
            Slot::TokensBefore => opt_entry(map, key, self.tokens_before.into_option()),
            Slot::Details => opt_entry(
                map,
                key,
                self.text2_for(Role::Custom).and_then(|text| {
                    serde_json::from_str::<&serde_json::value::RawValue>(text).ok()
                }),
            ),
            Slot::Api => opt_entry(map, key, meta.and_then(|m| text(&m.api))),
            Slot::Provider => opt_entry(map, key, meta.and_then(|m| text(&m.provider))),
            Slot::Model => opt_entry(map, key, meta.and_then(|m| text(&m.model))),
            Slot::Usage => opt_entry(map, key, meta.and_then(|m| m.usage.as_ref().into_option())),
            Slot::StopReason => opt_entry(map, key, meta.and_then(|m| text(&m.stop_reason))),
            Slot::ErrorMessage => opt_entry(map, key, meta.and_then(|m| text(&m.error_message))),
        }
    }
}

fn opt_entry<M: SerializeMap, T: Serialize>(
    map: &mut M,
    key: &str,
    value: Option<T>,
) -> Result<(), M::Error> {
    match value {
        Some(value) => map.serialize_entry(key, &value),
        None => Ok(()),
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Message::from_value(Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// An integer that writes back as the same JSON number.
fn exact_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => n.as_i64(),
        _ => None,
    }
}

/// An optional FFI string as `Option<&str>`. For the authoring crate's views; not part of the
/// API.
#[doc(hidden)]
pub fn opt_text(value: &ROption<RString>) -> Option<&str> {
    match value {
        ROption::RSome(s) => Some(s.as_str()),
        ROption::RNone => None,
    }
}

fn take_string(map: &mut Map<String, Value>, key: &str) -> String {
    match map.remove(key) {
        Some(Value::String(s)) => s,
        _ => String::new(),
    }
}

fn extra_text(map: Map<String, Value>) -> ROption<JsonText> {
    if map.is_empty() {
        ROption::RNone
    } else {
        ROption::RSome(JsonText::from_value(&Value::Object(map)))
    }
}

fn extra_map(extra: &ROption<JsonText>) -> Map<String, Value> {
    match extra {
        ROption::RSome(text) => match serde_json::from_str(text.as_str()) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        },
        ROption::RNone => Map::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// UTF-8 at the boundary
// ---------------------------------------------------------------------------------------------

/// Whether an FFI string's bytes are UTF-8. `RString` assumes they are, but a library written
/// against the ABI alone can hand over any bytes, so a host checks what it did not make.
pub fn is_utf8(value: &RString) -> bool {
    std::str::from_utf8(value.as_str().as_bytes()).is_ok()
}

fn opt_is_utf8(value: &ROption<RString>) -> bool {
    match value {
        ROption::RSome(s) => is_utf8(s),
        ROption::RNone => true,
    }
}

fn json_is_utf8(value: &ROption<JsonText>) -> bool {
    match value {
        ROption::RSome(JsonText(s)) => is_utf8(s),
        ROption::RNone => true,
    }
}

impl ContentBlock {
    /// The first of this block's strings that is not UTF-8, by its JSON key; `None` when all
    /// are (see [`Message::invalid_utf8`]).
    pub fn invalid_utf8(&self) -> Option<&'static str> {
        if !is_utf8(&self.first) {
            return Some(match self.kind {
                BlockKind::Text => "text",
                BlockKind::Thinking => "thinking",
                BlockKind::ToolCall => "id",
                BlockKind::Image => "data",
                BlockKind::Other => "block",
            });
        }
        let ROption::RSome(more) = &self.more else {
            return None;
        };
        if !is_utf8(&more.second) {
            return Some(match self.kind {
                BlockKind::ToolCall => "name",
                BlockKind::Image => "mimeType",
                _ => "type",
            });
        }
        if !json_is_utf8(&more.arguments) {
            return Some("arguments");
        }
        (!json_is_utf8(&more.extra)).then_some("(unknown keys)")
    }
}

impl Message {
    /// The first of this message's strings that is not UTF-8, as `content` or
    /// `content[i].<key>` or the message's JSON key; `None` when every string is UTF-8.
    ///
    /// For hosts: every accessor of a message reads its strings as `&str`, so a message that
    /// came from a library is checked with this before anything reads it.
    pub fn invalid_utf8(&self) -> Option<String> {
        match &self.content {
            ContentRepr::Absent => {}
            ContentRepr::Text(text) => {
                if !is_utf8(text) {
                    return Some("content".to_owned());
                }
            }
            ContentRepr::Blocks(blocks) => {
                for (i, block) in blocks.iter().enumerate() {
                    if let Some(key) = block.invalid_utf8() {
                        return Some(format!("content[{i}].{key}"));
                    }
                }
            }
        }
        let slot_key = |wanted: Slot| {
            role_slots(self.role)
                .iter()
                .find(|(_, slot)| *slot == wanted)
                .map_or("(unnamed)", |(key, _)| *key)
        };
        if !opt_is_utf8(&self.key) {
            return Some(match self.role {
                Role::Other => "role".to_owned(),
                _ => slot_key(Slot::Key).to_owned(),
            });
        }
        if !opt_is_utf8(&self.text2) {
            return Some(match self.role {
                Role::Custom => "details".to_owned(),
                _ => slot_key(Slot::Text2).to_owned(),
            });
        }
        if let ROption::RSome(meta) = &self.assistant {
            for (value, key) in [
                (&meta.api, "api"),
                (&meta.provider, "provider"),
                (&meta.model, "model"),
                (&meta.stop_reason, "stopReason"),
                (&meta.error_message, "errorMessage"),
            ] {
                if !opt_is_utf8(value) {
                    return Some(key.to_owned());
                }
            }
        }
        (!json_is_utf8(&self.extra)).then(|| "(unknown keys)".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(value: Value) {
        let message = Message::from_value(value.clone()).unwrap();
        assert_eq!(message.to_value(), value);
    }

    #[test]
    fn every_role_round_trips_with_unknown_keys_and_blocks() {
        round_trip(json!({"role":"user","content":"hi","timestamp":1}));
        round_trip(json!({"role":"assistant","content":[
            {"type":"text","text":"checking","textSignature":"x"},
            {"type":"thinking","thinking":"hmm","thinkingSignature":"sig","redacted":false},
            {"type":"toolCall","id":"c1","name":"get_user","arguments":{"user_id":"mia","n":1.5}},
            {"type":"image","data":"AAAA","mimeType":"image/png"},
            {"type":"audio","data":"x"}, "a string block", {"type":"text","text":7}],
            "api":"openai-completions","provider":"openai","model":"gpt-4o",
            "usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,
                     "cost":{"input":0.5,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}},
            "stopReason":"error","errorMessage":"boom","timestamp":2}));
        round_trip(json!({"role":"toolResult","toolCallId":"c1","toolName":"t",
            "content":[{"type":"text","text":"{}"}],"isError":false,"timestamp":3,"details":{"a":1}}));
        round_trip(
            json!({"role":"custom","customType":"hook","content":[{"type":"text","text":"x"}],
            "display":false,"details":null,"timestamp":4}),
        );
        round_trip(
            json!({"role":"compactionSummary","summary":"s","tokensBefore":4321,"timestamp":5}),
        );
        round_trip(json!({"role":"branchSummary","summary":"s","fromId":"root","timestamp":6}));
        round_trip(
            json!({"role":"bashExecution","command":"ls","output":"a\nb","exitCode":0,
            "cancelled":false,"truncated":false,"excludeFromContext":true,"timestamp":7}),
        );
        round_trip(json!({"role":"futureRole","content":{"weird":true},"timestamp":"yesterday"}));
        // Values of an unexpected type stay verbatim.
        round_trip(
            json!({"role":"assistant","content":"plain","usage":{"input":1},"model":null,
            "timestamp":1.5}),
        );
        round_trip(json!({"role":"toolResult","toolCallId":5,"isError":"no","content":[]}));
    }

    #[test]
    fn accessors_read_openclaws_fields() {
        let m = Message::from_value(json!({"role":"toolResult","toolCallId":"c1","toolName":"t",
            "content":[{"type":"text","text":"out"}],"isError":true}))
        .unwrap();
        assert_eq!(
            (m.tool_result_id(), m.tool_name(), m.is_error()),
            (Some("c1"), Some("t"), Some(true))
        );
        assert_eq!(m.plain_text(), "out");
        let m = Message::compaction_summary("earlier", 99);
        assert_eq!(
            (m.summary(), m.tokens_before()),
            (Some("earlier"), Some(99))
        );
        assert_eq!(
            m.to_value(),
            json!({"role":"compactionSummary","summary":"earlier","tokensBefore":99})
        );
        let m = Message::from_value(
            json!({"role":"assistant","content":[{"type":"mystery","type2":1}]}),
        )
        .unwrap();
        assert_eq!(m.blocks()[0].type_name(), "mystery");
        assert_eq!(m.blocks()[0].kind(), BlockKind::Other);
    }

    #[test]
    fn floats_anywhere_round_trip_exactly() {
        // Doubles that a shortest-form print and a non-exact parse would change.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x);
            if !f.is_finite() {
                continue;
            }
            let small = (x % 1_000_000) as f64 / 1_024.0 + 971.986_371_854_762_9;
            round_trip(json!({"role":"assistant","content":[
                {"type":"toolCall","id":"c","name":"n","arguments":{"a":f,"b":small}},
                {"type":"mystery","v":f}],
                "usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,
                         "cost":{"input":small,"output":f,"cacheRead":0,"cacheWrite":0,"total":small}},
                "someKey":[f, small]}));
            round_trip(
                json!({"role":"custom","customType":"t","content":"x","display":true,"details":{"f":f}}),
            );
        }
    }

    #[test]
    fn setters_replace_what_extra_held() {
        let m = Message::from_value(
            json!({"role":"assistant","content":[],"api":null,"timestamp":"soon"}),
        )
        .unwrap()
        .with_model("a", "p", "m")
        .with_timestamp(5);
        assert_eq!(m.api(), Some("a"));
        assert_eq!(
            m.to_value(),
            json!({"role":"assistant","content":[],"api":"a","provider":"p","model":"m","timestamp":5})
        );
    }

    #[test]
    fn an_unknown_block_names_its_own_type() {
        let m = Message::from_value(json!({"role":"user","content":[
            {"content":[{"type":"text","text":"x"}],"type":"tool_result"},
            {"kind":"type","type":"audio"},
            {"no":"type"}]}))
        .unwrap();
        let names: Vec<&str> = m.blocks().iter().map(ContentBlock::type_name).collect();
        assert_eq!(names, ["tool_result", "audio", ""]);
    }

    #[test]
    fn not_a_message_is_an_error() {
        assert!(Message::from_value(json!([1])).is_err());
        assert!(Message::from_value(json!({"content":"x"})).is_err());
        assert!(Message::from_value(json!({"role":3})).is_err());
    }
}
