//! Conversations as the host reads them for one-off operations (`pincer assemble`, tests):
//! a JSON array of messages in pincer's format, `{"messages": [...]}`, or an OpenAI-style chat
//! transcript (`tool_calls` / `tool_call_id`, as in τ-bench), converted on read.
//!
//! The append-only JSONL session tree of reference §10 is a later issue; this module only
//! turns a file into the `Message`s an engine sees. It knows nothing of engines: running one
//! over a transcript is [`super::assemble`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pincer_plugin_api::abi::v1::{ContentBlock, Message, Role, ToolResultPart};
use serde_json::Value;

/// Why a conversation file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The file could not be read.
    #[error("cannot read conversation {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a conversation.
    #[error("{}: {message} (expected a JSON array of messages, {{\"messages\": [...]}}, or an OpenAI-style chat transcript)", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// A conversation in memory.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    messages: Arc<[Message]>,
}

impl Transcript {
    /// A transcript of `messages`.
    pub fn new(messages: Vec<Message>) -> Self {
        Transcript {
            messages: messages.into(),
        }
    }

    /// The messages.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages, shared (what bounded engine calls hold on to).
    pub fn shared_messages(&self) -> Arc<[Message]> {
        Arc::clone(&self.messages)
    }

    /// Reads a conversation file.
    ///
    /// # Errors
    /// [`TranscriptError`] naming the file and what is wrong.
    pub fn read(path: &Path) -> Result<Self, TranscriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| TranscriptError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        let invalid = |message: String| TranscriptError::Invalid {
            path: path.to_owned(),
            message,
        };
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| invalid(format!("line {} column {}: {e}", e.line(), e.column())))?;
        Self::from_json(value).map_err(invalid)
    }

    /// Parses a conversation from JSON (any of the accepted shapes).
    ///
    /// # Errors
    /// A message saying which message is wrong.
    pub fn from_json(value: Value) -> Result<Self, String> {
        let list = match value {
            Value::Array(list) => list,
            Value::Object(mut map) => match map.remove("messages").or_else(|| map.remove("traj")) {
                Some(Value::Array(list)) => list,
                _ => return Err("no \"messages\" array".to_owned()),
            },
            _ => return Err("not an array or object".to_owned()),
        };
        let openai = list.iter().any(|m| {
            m.get("tool_calls").is_some()
                || m.get("tool_call_id").is_some()
                || m.get("role").and_then(Value::as_str) == Some("tool")
        });
        let mut messages = Vec::with_capacity(list.len());
        for (index, item) in list.into_iter().enumerate() {
            let message = if openai {
                from_openai(&item)
            } else {
                serde_json::from_value::<Message>(item).map_err(|e| e.to_string())
            }
            .map_err(|e| format!("message {index}: {e}"))?;
            messages.push(message);
        }
        Ok(Transcript::new(messages))
    }
}

fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// One OpenAI chat message to pincer's model.
fn from_openai(item: &Value) -> Result<Message, String> {
    let role = item
        .get("role")
        .and_then(Value::as_str)
        .ok_or("missing \"role\"")?;
    let content = text_of(item.get("content"));
    Ok(match role {
        "system" => Message::text(Role::System, content),
        "user" => Message::text(Role::User, content),
        "assistant" => {
            let mut blocks = Vec::new();
            if !content.is_empty() {
                blocks.push(ContentBlock::Text {
                    text: content.into(),
                });
            }
            for call in item
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let function = call.get("function").unwrap_or(&Value::Null);
                blocks.push(ContentBlock::ToolCall {
                    id: text_of(call.get("id")).into(),
                    name: text_of(function.get("name")).into(),
                    arguments_json: text_of(function.get("arguments")).into(),
                });
            }
            Message::with_blocks(Role::Assistant, blocks)
        }
        "tool" => Message::with_blocks(
            Role::ToolResult,
            vec![ContentBlock::ToolResult {
                tool_call_id: text_of(item.get("tool_call_id")).into(),
                content: vec![ToolResultPart::Text {
                    text: content.into(),
                }]
                .into(),
                is_error: false,
            }],
        ),
        other => return Err(format!("unknown role \"{other}\"")),
    })
}
