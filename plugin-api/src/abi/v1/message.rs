//! Messages as the engine sees them: OpenClaw's message model in frozen `#[repr(C)]` form.
//!
//! The host keeps its sessions in exactly these types, so a slice of them crosses the
//! boundary as a borrowed [`RSlice`](crate::abi::RSlice) without a single copy. The JSON
//! form (serde) follows OpenClaw's field names (`role`, `content`, `toolCall`, …) so that
//! transcripts read and written by the host stay familiar.
//!
//! **Stability:** frozen for API 1.x. New message data travels in [`Message::extra_json`]
//! and [`ContentBlock::Other`] until a new major.

use abi_stable::{
    std_types::{ROption, RString, RVec},
    StableAbi,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Who wrote a message.
#[repr(u8)]
#[derive(
    StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// A person (or the harness speaking for one).
    User,
    /// The model.
    Assistant,
    /// The result of a tool the model called.
    ToolResult,
    /// The system prompt or a system notice.
    System,
    /// Host- or plugin-defined content; see [`Message::custom_type`].
    Custom,
}

impl Role {
    /// The role's name as it appears in transcripts (`"toolResult"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolResult => "toolResult",
            Role::System => "system",
            Role::Custom => "custom",
        }
    }
}

/// One part of a tool result's content.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ToolResultPart {
    /// Text output.
    Text {
        /// The text.
        text: RString,
    },
    /// An image output, base64 encoded.
    Image {
        /// The MIME type, such as `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: RString,
        /// Base64 data.
        data: RString,
    },
}

/// One block of a message's content.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: RString,
    },
    /// Model reasoning that providers may return.
    Thinking {
        /// The reasoning text.
        thinking: RString,
    },
    /// A call of a tool by the model.
    ToolCall {
        /// The call id that the matching [`ContentBlock::ToolResult`] names.
        id: RString,
        /// The tool's name.
        name: RString,
        /// The arguments, as a JSON text.
        #[serde(
            rename = "arguments",
            serialize_with = "ser_json_text",
            deserialize_with = "de_json_text"
        )]
        arguments_json: RString,
    },
    /// The result of a tool call.
    ToolResult {
        /// The id of the [`ContentBlock::ToolCall`] this answers.
        #[serde(rename = "toolCallId")]
        tool_call_id: RString,
        /// What the tool returned.
        content: RVec<ToolResultPart>,
        /// Whether the tool failed.
        #[serde(rename = "isError", default)]
        is_error: bool,
    },
    /// An image, base64 encoded.
    Image {
        /// The MIME type, such as `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: RString,
        /// Base64 data.
        data: RString,
    },
    /// A block kind this version of the API does not know, kept as JSON.
    Other {
        /// The block's `type`.
        kind: RString,
        /// The whole block as JSON.
        json: RString,
    },
}

/// Token usage the provider reported for an assistant message.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Tokens read from the provider's prompt cache.
    pub cache_read: u64,
    /// Tokens written to the provider's prompt cache.
    pub cache_write: u64,
    /// The provider's total, 0 when it gave none.
    pub total_tokens: u64,
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

/// One message of a conversation.
///
/// Build one with [`Message::text`] or the struct literal; read it with the accessors.
///
/// ```
/// use pincer_plugin_api::{Message, Role};
/// let m = Message::text(Role::User, "Book me a flight to Seattle");
/// assert_eq!(m.role, Role::User);
/// assert_eq!(m.plain_text(), "Book me a flight to Seattle");
/// ```
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The content blocks, in order. A plain string in JSON reads as one text block.
    #[serde(deserialize_with = "de_content")]
    pub content: RVec<ContentBlock>,
    /// The session entry this message came from, when it came from a session.
    #[serde(default, skip_serializing_if = "ROption::is_none", with = "ropt")]
    pub entry_id: ROption<RString>,
    /// Milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "ROption::is_none", with = "ropt")]
    pub timestamp: ROption<i64>,
    /// Provider usage, on assistant messages.
    #[serde(default, skip_serializing_if = "ROption::is_none", with = "ropt")]
    pub usage: ROption<Usage>,
    /// For [`Role::Custom`]: what kind of custom message (`compactionSummary`, `hook`, …).
    #[serde(default, skip_serializing_if = "ROption::is_none", with = "ropt")]
    pub custom_type: ROption<RString>,
    /// Fields this version of the API does not model, as a JSON object text.
    #[serde(default, skip_serializing_if = "ROption::is_none", with = "ropt")]
    pub extra_json: ROption<RString>,
}

impl Message {
    /// A message with one text block.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: vec![ContentBlock::Text {
                text: RString::from(text.into()),
            }]
            .into(),
            entry_id: ROption::RNone,
            timestamp: ROption::RNone,
            usage: ROption::RNone,
            custom_type: ROption::RNone,
            extra_json: ROption::RNone,
        }
    }

    /// A message with the given blocks.
    pub fn with_blocks(role: Role, blocks: Vec<ContentBlock>) -> Self {
        Message {
            content: blocks.into(),
            ..Message::text(role, "")
        }
    }

    /// The content blocks.
    pub fn blocks(&self) -> &[ContentBlock] {
        &self.content
    }

    /// The entry id, if the message came from a session.
    pub fn entry_id(&self) -> Option<&str> {
        self.entry_id.as_ref().map(|s| s.as_str()).into()
    }

    /// All text blocks joined with newlines (thinking, tools and images left out).
    pub fn plain_text(&self) -> String {
        let mut out = String::new();
        for block in self.content.iter() {
            if let ContentBlock::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    /// The ids of the tool calls this message makes, in order.
    pub fn tool_call_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall { id, .. } => Some(id.as_str()),
            _ => None,
        })
    }

    /// The ids of the tool calls this message answers, in order.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
    }
}

/// serde helpers for `ROption<T>` as a plain optional field.
mod ropt {
    use super::*;

    pub fn serialize<T: Serialize, S: Serializer>(v: &ROption<T>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().into_option().serialize(s)
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<ROption<T>, D::Error> {
        Ok(Option::<T>::deserialize(d)?.into())
    }
}

fn ser_json_text<S: Serializer>(text: &RString, s: S) -> Result<S::Ok, S::Error> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => value.serialize(s),
        Err(_) => text.as_str().serialize(s),
    }
}

fn de_json_text<'de, D: Deserializer<'de>>(d: D) -> Result<RString, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(match value {
        // OpenAI-style transcripts carry arguments as a JSON text already.
        serde_json::Value::String(s) => RString::from(s),
        other => RString::from(other.to_string()),
    })
}

fn de_content<'de, D: Deserializer<'de>>(d: D) -> Result<RVec<ContentBlock>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Blocks(Vec<serde_json::Value>),
    }
    Ok(match Content::deserialize(d)? {
        Content::Text(text) => vec![ContentBlock::Text { text: text.into() }].into(),
        Content::Blocks(values) => values
            .into_iter()
            .map(|value| {
                let kind = value
                    .get("type")
                    .and_then(|t| t.as_str())
                    .unwrap_or("")
                    .to_owned();
                serde_json::from_value::<ContentBlock>(value.clone()).unwrap_or_else(|_| {
                    ContentBlock::Other {
                        kind: kind.into(),
                        json: value.to_string().into(),
                    }
                })
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_keeps_tool_pairs() {
        let json = r#"{"role":"assistant","content":[{"type":"text","text":"checking"},
            {"type":"toolCall","id":"c1","name":"get_user","arguments":{"user_id":"mia"}}],
            "entryId":"a1b2c3d4","timestamp":1715800000000}"#;
        let m: Message = serde_json::from_str(json).unwrap();
        assert_eq!(m.tool_call_ids().collect::<Vec<_>>(), ["c1"]);
        assert_eq!(m.entry_id(), Some("a1b2c3d4"));
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(back["content"][1]["arguments"]["user_id"], "mia");
    }

    #[test]
    fn string_content_and_unknown_blocks_are_kept() {
        let m: Message = serde_json::from_str(
            r#"{"role":"user","content":[{"type":"audio","data":"x"},{"type":"text","text":"hi"}]}"#,
        )
        .unwrap();
        assert!(matches!(&m.content[0], ContentBlock::Other { kind, .. } if kind == "audio"));
        let m: Message = serde_json::from_str(r#"{"role":"system","content":"be brief"}"#).unwrap();
        assert_eq!(m.plain_text(), "be brief");
    }
}
