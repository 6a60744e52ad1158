//! Conversations as the host reads them for one-off operations (`pincer assemble`, tests):
//! a JSON array of OpenClaw messages, `{"messages": [...]}` (an OpenClaw `*.context.json`), an
//! OpenClaw session file (the context of its active leaf, with entry ids), or an OpenAI-style
//! chat transcript (`tool_calls` / `tool_call_id`, as in τ-bench), converted on
//! read with the mapping of OpenClaw's golden data. Also the chat transcript files that
//! `pincer sessions import` and `pincer run --import` take ([`ChatList`]), and which dialect
//! their messages are written in: every sniffing of a conversation file's format is here.
//!
//! The append-only JSONL session tree of docs/CONTRACT.md §10 is `session/tree.rs`'s; this module only
//! turns a file into the `Message`s an engine sees. It knows nothing of engines: running one
//! over a transcript is the harness's (`crate::harness::assemble`).

use crate::types::json_kind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pincer_plugin_abi::latest::{EntryId, Message};
use pincer_plugin_api::interop;
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

impl TranscriptError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            TranscriptError::Unreadable { .. } => "transcript_unreadable",
            TranscriptError::Invalid { .. } => "transcript_invalid",
        }
    }
}

/// A conversation in memory.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    messages: Arc<[Message]>,
    entry_ids: Arc<[EntryId]>,
}

impl Transcript {
    /// A transcript of `messages`.
    pub fn new(messages: Vec<Message>) -> Self {
        Transcript {
            messages: messages.into(),
            entry_ids: Arc::from(Vec::new()),
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

    /// The session entry ids beside the messages: those of an OpenClaw session file's context,
    /// none for a plain conversation file.
    pub fn entry_ids(&self) -> Arc<[EntryId]> {
        Arc::clone(&self.entry_ids)
    }

    /// The context of an OpenClaw session file's active leaf, with its entry ids.
    pub fn from_session(tree: &super::tree::SessionTree) -> Self {
        let context = super::context::build_session_context(tree, None);
        Transcript {
            messages: context.messages.into(),
            entry_ids: Arc::from(context.entry_ids),
        }
    }

    /// Reads a conversation file.
    ///
    /// # Errors
    /// [`TranscriptError`] naming the file and what is wrong.
    pub fn read(path: &Path) -> Result<Self, TranscriptError> {
        let unreadable = |source| TranscriptError::Unreadable {
            path: path.to_owned(),
            source,
        };
        // A session file is read as the session reader reads it (streamed, its long lines
        // skipped: `sessions.maxLineBytes`), known by its first line alone.
        if starts_as_session_file(path).map_err(unreadable)? {
            let tree = super::tree::SessionTree::read(path).map_err(|err| match err {
                super::tree::SessionReadError::Unreadable { source, .. } => unreadable(source),
                super::tree::SessionReadError::Directory { .. } => {
                    unreadable(std::io::Error::other("it is a directory"))
                }
            })?;
            return Ok(Self::from_session(&tree));
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        let invalid = |message: String| TranscriptError::Invalid {
            path: path.to_owned(),
            message,
        };
        let value: Value = super::lone_surrogates::from_str(&text)
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
                from_openai(&item, index)
            } else {
                serde_json::from_value::<Message>(item).map_err(|e| e.to_string())
            }
            .map_err(|e| format!("message {index}: {e}"))?;
            messages.push(message);
        }
        Ok(Transcript::new(messages))
    }
}

/// Whether the file at `path` is an OpenClaw session file: its first non-blank line (read up
/// to 64 KiB, the most a header takes) a `{"type":"session"}` header.
fn starts_as_session_file(path: &Path) -> std::io::Result<bool> {
    use std::io::{BufRead as _, Read as _};
    let file = std::fs::File::open(path)?;
    let mut reader = std::io::BufReader::new(file.take(64 << 10));
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(false);
        }
        if !line.trim_ascii().is_empty() {
            break;
        }
    }
    Ok(
        super::lone_surrogates::from_slice::<Value>(line.trim_ascii_end())
            .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("session")),
    )
}

/// One OpenAI chat message as OpenClaw's message, by the golden data's mapping
/// ([`pincer_plugin_api::interop::openai_chat_to_openclaw`]); a system message is kept as
/// `{role:"system"}` (OpenClaw leaves it out of the session; engines here may pin it).
fn from_openai(item: &Value, index: usize) -> Result<Message, String> {
    let role = item
        .get("role")
        .and_then(Value::as_str)
        .ok_or("missing \"role\"")?;
    if role == "system" {
        return Ok(Message::system(
            item["content"].as_str().unwrap_or_default(),
        ));
    }
    let value = interop::openai_chat_to_openclaw(item, index)
        .ok_or_else(|| format!("unknown role \"{role}\""))?;
    Message::from_value(value).map_err(|e| e.to_string())
}

/// What a chat transcript file must hold, to finish "expected …".
const CHAT_LIST_SHAPE: &str = "a JSON array of chat messages (OpenAI chat `{\"role\", \"content\"}` or OpenClaw messages), or an object holding one under \"messages\" or \"traj\" (one τ-bench task)";

/// Why a chat transcript file (what `pincer sessions import` and `pincer run --import` take)
/// was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChatListError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{} is not JSON: {source}", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The file is JSON but holds no chat transcript.
    #[error("{} is not a transcript: {what}; expected {CHAT_LIST_SHAPE}", path.display())]
    NotATranscript {
        /// The file.
        path: PathBuf,
        /// What it holds instead.
        what: String,
    },
}

impl ChatListError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            ChatListError::Unreadable { .. } => "transcript_unreadable",
            ChatListError::NotJson { .. } => "transcript_not_json",
            ChatListError::NotATranscript { .. } => "transcript_invalid",
        }
    }
}

/// How the messages of a chat list are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatDialect {
    /// OpenAI chat messages (`tool` messages, `tool_calls`).
    OpenAi,
    /// OpenClaw messages (`toolResult`, `compactionSummary` or `custom` roles, or content
    /// given as an array of blocks).
    OpenClaw,
}

/// The messages of a chat transcript file, as JSON: a JSON array of chat messages, or an
/// object holding one under `messages` or `traj` (a τ-bench task).
#[derive(Debug, Clone)]
pub struct ChatList {
    messages: Vec<Value>,
}

impl ChatList {
    /// Reads the chat transcript `file`. Anything else — a list of things that are not
    /// messages (a τ-bench task list), no message but a system prompt — is refused with what
    /// was expected.
    ///
    /// # Errors
    /// [`ChatListError`] naming the file and what is wrong.
    pub fn read(file: &Path) -> Result<ChatList, ChatListError> {
        let text = std::fs::read_to_string(file).map_err(|source| ChatListError::Unreadable {
            path: file.to_owned(),
            source,
        })?;
        let value: Value =
            serde_json::from_str(&text).map_err(|source| ChatListError::NotJson {
                path: file.to_owned(),
                source,
            })?;
        let not_a_transcript = |what: String| ChatListError::NotATranscript {
            path: file.to_owned(),
            what,
        };
        let list = match value {
            Value::Array(list) => list,
            Value::Object(mut map) => match map.remove("messages").or_else(|| map.remove("traj")) {
                Some(Value::Array(list)) => list,
                _ => {
                    return Err(not_a_transcript(
                        "an object without a \"messages\" or \"traj\" array".into(),
                    ))
                }
            },
            other => return Err(not_a_transcript(format!("it holds {}", json_kind(&other)))),
        };
        for (index, item) in list.iter().enumerate() {
            match item.get("role") {
                Some(Value::String(_)) => {}
                _ => {
                    let what = match item {
                        Value::Object(map) if map.contains_key("traj") => format!(
                            "item {index} is a τ-bench task, not a message (import one task: an object with \"traj\")"
                        ),
                        Value::Object(map) => format!(
                            "item {index} is not a message: it has no string \"role\" (its keys: {})",
                            map.keys().take(6).map(String::as_str).collect::<Vec<_>>().join(", ")
                        ),
                        other => {
                            format!("item {index} is {}, not a message object", json_kind(other))
                        }
                    };
                    return Err(not_a_transcript(what));
                }
            }
        }
        if !list.iter().any(|m| m["role"] != "system") {
            return Err(not_a_transcript(
                "it holds no message but a system prompt (nothing to import)".into(),
            ));
        }
        Ok(ChatList { messages: list })
    }

    /// The messages, as the file holds them (the system prompt included).
    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    /// The content of the first system message, or `""`.
    pub fn system_prompt(&self) -> &str {
        self.messages
            .iter()
            .find(|m| m["role"] == "system")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
    }

    /// How the messages are written: OpenClaw's when any has an OpenClaw-only role or its
    /// content as an array of blocks, else OpenAI chat.
    pub fn dialect(&self) -> ChatDialect {
        let openclaw = self.messages.iter().any(|m| {
            matches!(
                m["role"].as_str(),
                Some("toolResult" | "compactionSummary" | "custom")
            ) || m["content"].is_array()
        });
        if openclaw {
            ChatDialect::OpenClaw
        } else {
            ChatDialect::OpenAi
        }
    }
}
