//! Conversations as the host reads them for one-off operations (`pincer assemble`, tests):
//! a JSON array of messages in pincer's format, `{"messages": [...]}`, or an OpenAI-style chat
//! transcript (`tool_calls` / `tool_call_id`, as in τ-bench), converted on read.
//!
//! The append-only JSONL session tree of reference §10 is a later issue; this module only
//! turns a file into the `Message`s an engine sees.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pincer_plugin_api::abi::v1::{
    AbortSignal, AssembleResult, ContentBlock, Message, Role, ToolResultPart,
};
use serde_json::Value;

use crate::request::{AssembleRequest, HostInputs};

use crate::engine::resolve_assembled;
use crate::guarded::{Answer, GuardError, GuardedEngine};

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

/// The answer of one `assemble` over a transcript.
pub struct AssembledView {
    /// The engine's result.
    pub result: AssembleResult,
    /// Who answered.
    pub answer: Answer,
    input: Arc<[Message]>,
}

impl AssembledView {
    /// The messages the model would see, in order (references, no copies).
    pub fn messages(&self) -> Vec<&Message> {
        resolve_assembled(&self.result, &self.input)
    }

    /// For each message the model would see: its index in the input, or `None` if new.
    pub fn origins(&self) -> Vec<Option<usize>> {
        let mut out = Vec::new();
        for item in self.result.items.iter() {
            match item {
                pincer_plugin_api::AssembledItem::Input { start, end } => {
                    out.extend((*start as usize..*end as usize).map(Some))
                }
                pincer_plugin_api::AssembledItem::New(_) => out.push(None),
            }
        }
        out
    }
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

    /// Runs `assemble` of `engine` over the transcript.
    ///
    /// # Errors
    /// What the guard returns (abort, strict policy, both engines failing).
    pub fn assemble(
        &self,
        engine: &GuardedEngine,
        session_id: &str,
        token_budget: Option<u64>,
    ) -> Result<AssembledView, GuardError> {
        self.assemble_with(engine, session_id, token_budget, HostInputs::default())
    }

    /// Runs `assemble` with the given host parameters (`sessionKey` defaults to the session id).
    ///
    /// # Errors
    /// What the guard returns.
    pub fn assemble_with(
        &self,
        engine: &GuardedEngine,
        session_id: &str,
        token_budget: Option<u64>,
        mut host: HostInputs,
    ) -> Result<AssembledView, GuardError> {
        let session_id: Arc<str> = Arc::from(session_id);
        if host.session_key.is_none() {
            host.session_key = Some(Arc::clone(&session_id));
        }
        let request = Arc::new(AssembleRequest {
            session_id,
            messages: Arc::clone(&self.messages),
            token_budget,
            host,
        });
        let guarded = engine.assemble(request, Arc::new(AbortSignal::new()))?;
        Ok(AssembledView {
            result: guarded.value,
            answer: guarded.answer,
            input: Arc::clone(&self.messages),
        })
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
