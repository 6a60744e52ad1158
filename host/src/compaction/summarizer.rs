//! Where compaction summaries come from: the [`Summarizer`] trait, and the default
//! [`ExtractiveSummarizer`] — offline and deterministic (same messages, same bytes), with no
//! model and no network.
//!
//! The extractive summary is built from the messages themselves, in OpenClaw's summary
//! headings: the earlier summary (when updating one), the goal (the first user request; "since
//! then" when updating), the
//! progress (per message: the user's words, the assistant's answers and tool calls, a short
//! head of each tool result), and the latest request. It is trimmed to the output budget
//! (`maxTokens` of the request, in the estimate's tokens), keeping the goal and the most recent
//! messages and saying how many earlier ones were left out.
//!
//! **With a model.** [`ModelSummarizer`] asks a [`ModelProvider`] (an OpenAI-compatible
//! chat-completions server: `agents.defaults.compaction.model: "openai:NAME"`, see
//! [`summarizer_from_config`]): it sends [`SummaryRequest::system_prompt`] as the system message
//! and [`SummaryRequest::user_prompt`] (the conversation serialised as OpenClaw's
//! `serializeConversation` does, the previous summary, the focus, the format) as the user
//! message, with `max_tokens` = [`SummaryRequest::max_output_tokens`], and returns the answer's
//! text. A failed or empty answer fails the compaction; nothing is appended.

use std::sync::Arc;

use pincer_plugin_abi::latest::{Message, Role};
use pincer_plugin_api::tokens::estimate_string_chars;
use serde_json::Value;

use super::text::{truncate_utf16, utf16_len};
use crate::config::Config;
use crate::model::openai::model_for_spec;
use crate::model::{ModelProvider, ModelRequest};

/// Which summary is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryKind {
    /// The history before the cut (output budget: 0.8 of the reserve).
    History,
    /// The start of a turn split by the cut (output budget: 0.5 of the reserve).
    TurnPrefix,
}

impl SummaryKind {
    /// The share of the reserve the summary may use (OpenClaw's `reserveRatio`).
    pub fn reserve_ratio(self) -> f64 {
        match self {
            SummaryKind::History => 0.8,
            SummaryKind::TurnPrefix => 0.5,
        }
    }
}

/// One summary to write.
#[derive(Debug, Clone, Copy)]
pub struct SummaryRequest<'a> {
    /// The messages to summarise, oldest first.
    pub messages: &'a [Message],
    /// The summary being updated (history summaries only).
    pub previous_summary: Option<&'a str>,
    /// Extra instructions (`/compact <text>`), and the unresolved request to preserve.
    pub custom_instructions: Option<&'a str>,
    /// The most the summary may take, in the estimate's tokens
    /// (`floor(reserveRatio × reserveTokens)`).
    pub max_output_tokens: u64,
    /// History or turn prefix.
    pub kind: SummaryKind,
}

/// The system prompt of a model-backed summary.
pub const SUMMARY_SYSTEM_PROMPT: &str = "You summarise a conversation between a user and an AI assistant into a structured checkpoint that another model will use to continue the work. Output only the summary in the format asked for: do not continue the conversation and do not answer its questions.";

/// The format of a history summary (OpenClaw's headings).
pub const HISTORY_FORMAT: &str = "Use this format:\n\n## Goal\n[What the user is trying to accomplish]\n\n## Constraints & Preferences\n- [Requirements the user stated, or \"(none)\"]\n\n## Progress\n### Done\n- [x] [Completed work]\n\n### In Progress\n- [ ] [Current work]\n\n### Blocked\n- [Blockers, if any]\n\n## Key Decisions\n- **[Decision]**: [Why]\n\n## Next Steps\n1. [What happens next]\n\n## Critical Context\n- [Data needed to continue, or \"(none)\"]\n\nBe concise. Keep exact file paths, function names and error messages.";

/// The format of a turn-prefix summary.
pub const TURN_PREFIX_FORMAT: &str = "This is the start of a turn too large to keep; its end is kept verbatim. Summarise the start so the kept end can be understood:\n\n## Original Request\n[What the user asked for in this turn]\n\n## Early Progress\n- [Decisions and work done so far]\n\n## Context for Suffix\n- [What is needed to understand the kept work]\n\nBe concise.";

impl SummaryRequest<'_> {
    /// The system prompt a model-backed summariser sends.
    pub fn system_prompt(&self) -> &'static str {
        SUMMARY_SYSTEM_PROMPT
    }

    /// The user message a model-backed summariser sends: the conversation, the previous
    /// summary to update, the focus, and the format.
    pub fn user_prompt(&self) -> String {
        let mut out = format!(
            "<conversation>\n{}\n</conversation>\n\n",
            serialize_conversation(self.messages)
        );
        if let Some(previous) = self.previous_summary {
            out += &format!("<previous-summary>\n{previous}\n</previous-summary>\n\nUpdate the previous summary with the new messages above: keep what still matters, add new progress and decisions, drop what is stale.\n\n");
        } else {
            out += "Summarise the conversation above.\n\n";
        }
        if let Some(focus) = self.custom_instructions {
            out += &format!("Focus: {focus}\n\n");
        }
        out += match self.kind {
            SummaryKind::History => HISTORY_FORMAT,
            SummaryKind::TurnPrefix => TURN_PREFIX_FORMAT,
        };
        out
    }
}

/// Why a summary could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    /// The summariser failed (a model error, a refused request).
    #[error("the compaction summary could not be written: {0}; the session is unchanged — try again, or use the offline summariser")]
    Failed(String),
    /// The summariser returned nothing usable.
    #[error("the compaction summary came back empty; the session is unchanged — check the summarising model, or use the offline summariser")]
    Empty,
}

impl SummaryError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SummaryError::Failed(_) => "summary_failed",
            SummaryError::Empty => "summary_empty",
        }
    }
}

/// Writes compaction summaries.
pub trait Summarizer: Send + Sync {
    /// The summary of `request`, within its output budget as far as the summariser can tell.
    ///
    /// # Errors
    /// When no summary can be written; the compaction then fails and nothing is appended.
    fn summarize(&self, request: &SummaryRequest<'_>) -> Result<String, SummaryError>;
}

/// Summaries written by a model (see the module docs).
pub struct ModelSummarizer {
    model: Result<Arc<dyn ModelProvider>, String>,
}

impl std::fmt::Debug for ModelSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.model {
            Ok(model) => f
                .debug_tuple("ModelSummarizer")
                .field(&model.name())
                .finish(),
            Err(err) => f.debug_tuple("ModelSummarizer").field(err).finish(),
        }
    }
}

impl ModelSummarizer {
    /// Summaries from `model`.
    pub fn new(model: Arc<dyn ModelProvider>) -> Self {
        ModelSummarizer { model: Ok(model) }
    }
}

impl Summarizer for ModelSummarizer {
    fn summarize(&self, request: &SummaryRequest<'_>) -> Result<String, SummaryError> {
        let model = self
            .model
            .as_ref()
            .map_err(|e| SummaryError::Failed(e.clone()))?;
        let prompt = [Message::user(request.user_prompt())];
        let reply = model
            .complete(&ModelRequest {
                system_prompt: request.system_prompt(),
                messages: &prompt,
                tools: &[],
                max_output_tokens: Some(request.max_output_tokens),
            })
            .map_err(|err| SummaryError::Failed(format!("{} ({})", err, err.code())))?;
        let text = reply.message.plain_text();
        let text = text.trim();
        if text.is_empty() {
            return Err(SummaryError::Empty);
        }
        Ok(text.to_owned())
    }
}

/// The summariser `agents.defaults.compaction.model` names: `"openai:NAME"` (the server of
/// `model` in pincer.json), else the offline [`ExtractiveSummarizer`] (also for
/// `"extractive"`). A model that cannot be set up (an unset API key, a name that is not
/// `openai:NAME`) fails each compaction with the reason, rather than silently summarising
/// offline.
pub fn summarizer_from_config(config: &Config) -> Arc<dyn Summarizer> {
    match config.agents.defaults.compaction.model.as_deref().map(str::trim) {
        None | Some("" | "extractive") => Arc::new(ExtractiveSummarizer),
        Some(spec) => Arc::new(ModelSummarizer {
            model: model_for_spec(spec, &config.model)
                .map(|model| Arc::new(model) as Arc<dyn ModelProvider>)
                .map_err(|err| {
                    format!(
                        "agents.defaults.compaction.model {spec:?}: {err}; or set it to \"extractive\""
                    )
                }),
        }),
    }
}

/// The default summariser: extractive, offline, deterministic (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

/// The longest a user or assistant line gets (UTF-16 units).
const MESSAGE_LINE_CHARS: usize = 400;
/// The longest a tool-result line gets.
const TOOL_RESULT_LINE_CHARS: usize = 160;
/// The share of the budget an earlier summary may keep.
const PREVIOUS_SHARE: f64 = 0.4;

/// `text` on one line, at most `max` UTF-16 units, `…` marking a cut.
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if utf16_len(&flat) <= max {
        return flat;
    }
    format!("{}…", truncate_utf16(&flat, max.saturating_sub(1)))
}

/// A tool call as `name(key=value, …)`, values as JSON.
fn call_text(name: &str, arguments_json: &str) -> String {
    let args = match serde_json::from_str::<Value>(arguments_json) {
        Ok(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        _ => arguments_json.to_owned(),
    };
    format!("{name}({args})")
}

/// The text of a message's content (text parts joined with newlines).
fn text_of(message: &Message) -> String {
    message.plain_text()
}

/// The progress lines of `messages`, one or two per message.
fn progress_lines(messages: &[Message]) -> Vec<String> {
    let mut lines = Vec::new();
    for m in messages {
        match m.role() {
            Role::User | Role::System => {
                let text = text_of(m);
                if !text.trim().is_empty() {
                    lines.push(format!("- User: {}", one_line(&text, MESSAGE_LINE_CHARS)));
                }
            }
            Role::Assistant => {
                let text = text_of(m);
                if !text.trim().is_empty() {
                    lines.push(format!(
                        "- Assistant: {}",
                        one_line(&text, MESSAGE_LINE_CHARS)
                    ));
                }
                let calls: Vec<String> = m
                    .tool_calls()
                    .map(|c| call_text(c.name, c.arguments_json))
                    .collect();
                if !calls.is_empty() {
                    lines.push(format!(
                        "- Assistant called: {}",
                        one_line(&calls.join("; "), MESSAGE_LINE_CHARS)
                    ));
                }
            }
            Role::ToolResult => {
                let name = m.tool_name().unwrap_or("tool");
                let error = if m.is_error() == Some(true) {
                    " (error)"
                } else {
                    ""
                };
                lines.push(format!(
                    "- Result of {name}{error}: {}",
                    one_line(&text_of(m), TOOL_RESULT_LINE_CHARS)
                ));
            }
            Role::BashExecution => lines.push(format!(
                "- Ran: {}",
                one_line(m.command().unwrap_or(""), MESSAGE_LINE_CHARS)
            )),
            Role::Custom | Role::BranchSummary | Role::CompactionSummary => {
                let text = text_of(m);
                if !text.trim().is_empty() {
                    lines.push(format!("- Note: {}", one_line(&text, MESSAGE_LINE_CHARS)));
                }
            }
            Role::Other => {}
        }
    }
    lines
}

/// The estimate's chars of `text`.
fn chars(text: &str) -> u64 {
    estimate_string_chars(text)
}

/// `text` cut to `budget` estimate chars (at a line end when one is near), marked.
fn fit(text: &str, budget: u64) -> String {
    if chars(text) <= budget {
        return text.to_owned();
    }
    let marker = "\n[…]";
    let mut out = String::new();
    for line in text.lines() {
        if chars(&out) + chars(line) + 1 + chars(marker) > budget {
            break;
        }
        out += line;
        out.push('\n');
    }
    if out.is_empty() {
        let units = budget.saturating_sub(chars(marker)) as usize;
        out = truncate_utf16(text, units).to_owned();
        // CJK weighs more than its units: shrink until it fits.
        while !out.is_empty() && chars(&out) + chars(marker) > budget {
            out.pop();
        }
    }
    format!("{}{marker}", out.trim_end())
}

impl Summarizer for ExtractiveSummarizer {
    fn summarize(&self, request: &SummaryRequest<'_>) -> Result<String, SummaryError> {
        let budget = request.max_output_tokens.saturating_mul(4).max(64);
        let users: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role() == Role::User)
            .map(text_of)
            .filter(|t| !t.trim().is_empty())
            .collect();
        let mut head = String::new();
        if let Some(focus) = request.custom_instructions.filter(|f| !f.trim().is_empty()) {
            head += &format!("Focus: {}\n\n", one_line(focus, MESSAGE_LINE_CHARS));
        }
        match request.kind {
            SummaryKind::History => {
                let previous = request.previous_summary.filter(|p| !p.trim().is_empty());
                if let Some(previous) = previous {
                    let share = (budget as f64 * PREVIOUS_SHARE) as u64;
                    head += &format!("## Earlier summary\n{}\n\n", fit(previous.trim(), share));
                }
                if let Some(goal) = users.first() {
                    // Updating a summary, the first request here is not the session's goal.
                    let heading = if previous.is_some() {
                        "Since then"
                    } else {
                        "Goal"
                    };
                    head += &format!("## {heading}\n{}\n\n", one_line(goal, MESSAGE_LINE_CHARS));
                }
            }
            SummaryKind::TurnPrefix => {
                if let Some(goal) = users.first() {
                    head += &format!(
                        "## Original Request\n{}\n\n",
                        one_line(goal, MESSAGE_LINE_CHARS)
                    );
                }
            }
        }
        let mut tail = String::new();
        if request.kind == SummaryKind::History && users.len() > 1 {
            tail = format!(
                "\n\n## Latest request\n{}",
                one_line(users.last().expect("two or more"), MESSAGE_LINE_CHARS)
            );
        }
        let heading = match request.kind {
            SummaryKind::History => "## Progress\n",
            SummaryKind::TurnPrefix => "## Early Progress\n",
        };
        let lines = progress_lines(request.messages);
        // The most recent lines that fit, with the count of those left out before them.
        let fixed = chars(&head) + chars(heading) + chars(&tail);
        let room = budget.saturating_sub(fixed);
        let mut kept: Vec<&str> = Vec::new();
        let mut used = 0;
        for line in lines.iter().rev() {
            let cost = chars(line) + 1;
            // Room for the omission line, should one be needed.
            if used + cost + 48 > room {
                break;
            }
            used += cost;
            kept.push(line);
        }
        kept.reverse();
        let omitted = lines.len() - kept.len();
        let mut body = String::new();
        if omitted > 0 {
            body += &format!("- [… {omitted} earlier step(s) left out …]\n");
        }
        for line in kept {
            body += line;
            body.push('\n');
        }
        if lines.is_empty() {
            body += "- (no messages)\n";
        }
        let summary = format!("{head}{heading}{}{tail}", body.trim_end());
        // A budget too small even for the head: cut the whole summary.
        let summary = fit(summary.trim(), budget);
        if summary.trim().is_empty() {
            return Err(SummaryError::Empty);
        }
        Ok(summary)
    }
}

/// The conversation as plain text for a model-backed summary (OpenClaw's
/// `serializeConversation`): `[User]: …`, `[Assistant]: …`, `[Assistant tool calls]:
/// name(key=value; …)`, `[Tool result]: …` (tool results cut at 2000 characters), separated by
/// blank lines; runtime-context carriers left out.
pub fn serialize_conversation(messages: &[Message]) -> String {
    const TOOL_RESULT_MAX_CHARS: usize = 2000;
    let mut parts = Vec::new();
    for m in messages {
        match m.role() {
            Role::User | Role::ToolResult => {
                let text = text_of(m);
                if text.is_empty() {
                    continue;
                }
                if m.role() == Role::ToolResult {
                    let cut = truncate_utf16(&text, TOOL_RESULT_MAX_CHARS);
                    let more = utf16_len(&text) - utf16_len(cut);
                    if more > 0 {
                        parts.push(format!(
                            "[Tool result]: {cut}\n\n[... {more} more characters truncated]"
                        ));
                    } else {
                        parts.push(format!("[Tool result]: {text}"));
                    }
                } else {
                    parts.push(format!("[User]: {text}"));
                }
            }
            Role::Assistant => {
                let text: Vec<&str> = m.content().texts().collect();
                if !text.is_empty() {
                    parts.push(format!("[Assistant]: {}", text.join("\n")));
                }
                let calls: Vec<String> = m
                    .tool_calls()
                    .map(|c| call_text(c.name, c.arguments_json))
                    .collect();
                if !calls.is_empty() {
                    parts.push(format!("[Assistant tool calls]: {}", calls.join("; ")));
                }
            }
            _ => {}
        }
    }
    parts.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conversation(turns: usize) -> Vec<Message> {
        let mut out = Vec::new();
        for i in 0..turns {
            out.push(Message::user(format!(
                "Please change booking {i} to Friday"
            )));
            out.push(
                Message::from_value(json!({"role": "assistant", "content": [
                    {"type": "text", "text": format!("Looking up booking {i}.")},
                    {"type": "toolCall", "id": format!("c{i}"), "name": "get_reservation", "arguments": {"id": i}}
                ]}))
                .unwrap(),
            );
            out.push(
                Message::from_value(json!({"role": "toolResult", "toolCallId": format!("c{i}"), "toolName": "get_reservation", "content": [{"type": "text", "text": "{\"status\":\"ok\"}"}], "isError": false}))
                .unwrap(),
            );
        }
        out
    }

    #[test]
    fn the_extractive_summary_is_readable_deterministic_and_within_budget() {
        let messages = conversation(3);
        let request = SummaryRequest {
            messages: &messages,
            previous_summary: None,
            custom_instructions: None,
            max_output_tokens: 1000,
            kind: SummaryKind::History,
        };
        let summary = ExtractiveSummarizer.summarize(&request).unwrap();
        assert_eq!(summary, ExtractiveSummarizer.summarize(&request).unwrap());
        assert!(summary.starts_with("## Goal\nPlease change booking 0 to Friday"));
        assert!(summary.contains("- Assistant called: get_reservation(id=2)"));
        assert!(summary.contains("- Result of get_reservation: {\"status\":\"ok\"}"));
        assert!(summary.ends_with("## Latest request\nPlease change booking 2 to Friday"));

        for budget in [0, 10, 50, 200] {
            let many = conversation(100);
            let small = SummaryRequest {
                messages: &many,
                max_output_tokens: budget,
                ..request
            };
            let summary = ExtractiveSummarizer.summarize(&small).unwrap();
            assert!(
                chars(&summary) <= (budget * 4).max(64),
                "budget {budget}: {} chars\n{summary}",
                chars(&summary)
            );
        }
        let many = conversation(100);
        let small = SummaryRequest {
            messages: &many,
            max_output_tokens: 300,
            ..request
        };
        let summary = ExtractiveSummarizer.summarize(&small).unwrap();
        assert!(summary.contains("earlier step(s) left out"), "{summary}");
        assert!(
            summary.contains("booking 99"),
            "the most recent steps are kept"
        );
    }

    #[test]
    fn the_model_prompt_serialises_the_conversation_as_openclaw_does() {
        let messages = conversation(1);
        let request = SummaryRequest {
            messages: &messages,
            previous_summary: Some("old"),
            custom_instructions: Some("dates"),
            max_output_tokens: 100,
            kind: SummaryKind::History,
        };
        let prompt = request.user_prompt();
        assert!(prompt.contains("[User]: Please change booking 0 to Friday\n\n[Assistant]: Looking up booking 0.\n\n[Assistant tool calls]: get_reservation(id=0)\n\n[Tool result]: {\"status\":\"ok\"}"));
        assert!(prompt.contains("<previous-summary>\nold\n</previous-summary>"));
        assert!(prompt.contains("Focus: dates"));
        let update = ExtractiveSummarizer.summarize(&request).unwrap();
        assert!(
            update.starts_with(
                "Focus: dates\n\n## Earlier summary\nold\n\n## Since then\nPlease change booking 0"
            ),
            "{update}"
        );
    }
}
