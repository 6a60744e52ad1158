//! OpenAI chat transcripts ↔ OpenClaw session files, with the golden data's mapping
//! ([`pincer_plugin_api::interop`]).
//!
//! Import keeps the system prompt in the session as a `custom` entry (customType
//! [`SYSTEM_PROMPT_TYPE`]): never in the model's context, as OpenClaw keeps it, and given back by
//! export. Export walks the active path and maps each message back: `user` → `user`,
//! `assistant` → `assistant` (`content` the text, `null` when there is none but tool calls;
//! `tool_calls` with `arguments` as JSON text), `toolResult` → `tool` (`tool_call_id`, `name`).
//! A τ-bench trajectory imports, exports and re-imports unchanged (tool-call arguments compared
//! parsed).

use std::path::Path;

use pincer_plugin_abi::latest::{Message, Role};
use pincer_plugin_api::interop::openai_chat_to_openclaw;
use serde_json::{json, Value};

use super::tree::{Entry, EntryType, SessionTree};
use super::writer::{Durability, SessionWriteError, SessionWriter};

/// The `customType` of the entry that keeps an imported system prompt.
pub const SYSTEM_PROMPT_TYPE: &str = "pincer.openai.system";

/// Writes `transcript` (OpenAI chat messages) as a new session file at `path`.
///
/// # Errors
/// I/O errors, or a message of a role the mapping does not know (named with its index).
pub fn import_openai(
    transcript: &[Value],
    path: &Path,
    cwd: &str,
    durability: Durability,
) -> Result<SessionWriter, ImportError> {
    let mut writer = SessionWriter::create(path, cwd, durability)?;
    for (index, raw) in transcript.iter().enumerate() {
        if raw["role"] == "system" {
            writer.append_custom(
                SYSTEM_PROMPT_TYPE,
                Some(json!({ "content": raw["content"] })),
            )?;
            continue;
        }
        let value = openai_chat_to_openclaw(raw, index).ok_or_else(|| ImportError::Message {
            index,
            reason: format!(
                "role {} is not one of system, user, assistant, tool",
                raw["role"]
            ),
        })?;
        let message = Message::from_value(value).map_err(|e| ImportError::Message {
            index,
            reason: e.to_string(),
        })?;
        writer.append_message(&message)?;
    }
    writer.commit()?;
    Ok(writer)
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Writing the session failed.
    #[error(transparent)]
    Write(#[from] SessionWriteError),
    /// A message of the transcript cannot be mapped.
    #[error("message {index} of the transcript cannot be imported: {reason}")]
    Message {
        /// Its index.
        index: usize,
        /// Why.
        reason: String,
    },
}

impl ImportError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            ImportError::Write(e) => e.code(),
            ImportError::Message { .. } => "import_message",
        }
    }
}

/// The content of a kept system prompt, when `entry` is one (`None` for any other entry).
fn kept_system_prompt(entry: &Entry) -> Option<Value> {
    if entry.entry_type != EntryType::Custom {
        return None;
    }
    let record = entry.record();
    if record.get("customType").and_then(Value::as_str) != Some(SYSTEM_PROMPT_TYPE) {
        return None;
    }
    Some(
        record
            .get("data")
            .and_then(|d| d.get("content"))
            .cloned()
            .unwrap_or(Value::Null),
    )
}

/// The system prompt kept in the session (the last one on the active path), if any.
pub fn system_prompt_of(tree: &SessionTree) -> Option<String> {
    tree.path(None)
        .iter()
        .rev()
        .find_map(|e| kept_system_prompt(e)?.as_str().map(str::to_owned))
}

/// The active path of `tree` as OpenAI chat messages (the kept system prompt first).
pub fn export_openai(tree: &SessionTree) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in tree.path(None) {
        match entry.entry_type {
            EntryType::Custom => {
                if let Some(content) = kept_system_prompt(entry) {
                    out.push(json!({ "role": "system", "content": content }));
                }
            }
            EntryType::Message(_) => {
                if let Some(message) = entry.message() {
                    out.extend(message_to_openai(&message));
                }
            }
            _ => {}
        }
    }
    out
}

/// One OpenClaw message as an OpenAI chat message (`None` for a role OpenAI chat has no
/// counterpart for).
pub fn message_to_openai(message: &Message) -> Option<Value> {
    let text = message.content().texts().collect::<Vec<_>>().join("\n");
    match message.role() {
        Role::User | Role::System => Some(json!({ "role": message.role_name(), "content": text })),
        Role::Assistant => {
            let calls: Vec<Value> = message
                .tool_calls()
                .map(|call| {
                    json!({
                        "function": { "arguments": call.arguments_json, "name": call.name },
                        "id": call.id,
                        "type": "function",
                    })
                })
                .collect();
            if calls.is_empty() {
                Some(json!({ "role": "assistant", "content": text }))
            } else {
                let content = if text.is_empty() {
                    Value::Null
                } else {
                    text.into()
                };
                Some(json!({ "role": "assistant", "content": content, "tool_calls": calls }))
            }
        }
        Role::ToolResult => Some(json!({
            "role": "tool",
            "tool_call_id": message.tool_result_id().unwrap_or_default(),
            "name": message.tool_name().unwrap_or_default(),
            "content": text,
        })),
        _ => None,
    }
}
