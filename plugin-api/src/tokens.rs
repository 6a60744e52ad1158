//! Token estimation as OpenClaw 2026.9.6 computes it (`estimateTokens`,
//! `estimateContextTokens`; the rules observed in `shared/data/openclaw-golden/README.md`, which
//! win over reference §9.5): `ceil(chars / 4)` per message, where a string's chars are its UTF-16
//! length plus an extra weight for each code point of the CJK classes below.
//!
//! | class | code points | chars each |
//! |---|---|---|
//! | common CJK, Hangul, full-width | U+00B7, U+3000–U+319F, U+4E00–U+9FA5, U+AC00–U+D7AF, U+FF01–U+FF60 | 4 |
//! | rare BMP CJK | U+1100–U+11FF, U+2E80–U+2FFF, U+31A0–U+4DFF, U+9FA6–U+9FFF, U+A000–U+A4FF, U+A700–U+A707, U+A960–U+A97F, U+D7B0–U+D7FF, U+F900–U+FAFF | 12 |
//! | phonetic, half-width, compatibility forms | U+02C7, U+02C9–U+02CB, U+02D9, U+02EA–U+02EB, U+0305, U+0323, U+FE10–U+FE4F, U+FF61–U+FFDC, U+FFE0–U+FFE6 | 8 |
//! | counting rods | U+1D360–U+1D371 | 12 (2 UTF-16 units) |
//! | supplementary ideographs and kana | U+16FE0–U+16FFF, U+1AFF0–U+1B16F, U+1F200–U+1F2FF, U+20000–U+2FA1F, U+30000–U+3347F | 16 (2 UTF-16 units) |
//!
//! Shared by the host and by engines (directly, or through the host services) so that both sides
//! agree on what "fits" means. Differentially tested against OpenClaw's own output in
//! `tests/golden_tokens.rs`.

use crate::abi::v1::{BlockKind, Content, Message, Role, Usage};

/// Characters an image block counts as in user, toolResult and custom messages (2,000 tokens).
pub const IMAGE_CHARS: u64 = 8_000;

/// The note added, once, when a user/toolResult/custom message has image blocks.
const IMAGE_NOTE: &str = "[image data omitted from summary input]";
/// The note added, once, when it has blocks that are neither text nor image.
const OTHER_NOTE: &str = "[non-text data omitted from summary input]";
/// What each note adds beyond its own length, as OpenClaw 2026.9.6 was observed to count.
const NOTE_OVERHEAD: u64 = 17;

/// The extra chars (beyond its UTF-16 length) code point `c` counts.
fn extra_weight(c: u32) -> u64 {
    match c {
        0xB7 | 0x3000..=0x319F | 0x4E00..=0x9FA5 | 0xAC00..=0xD7AF | 0xFF01..=0xFF60 => 3,
        0x1100..=0x11FF
        | 0x2E80..=0x2FFF
        | 0x31A0..=0x4DFF
        | 0x9FA6..=0x9FFF
        | 0xA000..=0xA4FF
        | 0xA700..=0xA707
        | 0xA960..=0xA97F
        | 0xD7B0..=0xD7FF
        | 0xF900..=0xFAFF => 11,
        0x2C7
        | 0x2C9..=0x2CB
        | 0x2D9
        | 0x2EA..=0x2EB
        | 0x305
        | 0x323
        | 0xFE10..=0xFE4F
        | 0xFF61..=0xFFDC
        | 0xFFE0..=0xFFE6 => 7,
        0x1D360..=0x1D371 => 10,
        0x16FE0..=0x16FFF
        | 0x1AFF0..=0x1B16F
        | 0x1F200..=0x1F2FF
        | 0x20000..=0x2FA1F
        | 0x30000..=0x3347F => 14,
        _ => 0,
    }
}

/// The estimate's character count of `text` (`estimateStringChars`).
///
/// ```
/// use pincer_plugin_api::tokens::estimate_string_chars;
/// assert_eq!(estimate_string_chars("hello"), 5);
/// assert_eq!(estimate_string_chars("日本"), 8); // common CJK: 4 each
/// assert_eq!(estimate_string_chars("😀"), 2); // an emoji: its two UTF-16 units
/// ```
pub fn estimate_string_chars(text: &str) -> u64 {
    // ASCII: one byte, one UTF-16 unit, no weight.
    if text.is_ascii() {
        return text.len() as u64;
    }
    text.chars()
        .map(|c| c.len_utf16() as u64 + extra_weight(c as u32))
        .sum()
}

/// The estimate's character count of one message, by role (OpenClaw's `estimateTokens`):
/// - assistant: text, thinking, and tool calls (name + arguments JSON); images count nothing;
/// - user, toolResult, custom: the text (string content, or the text blocks joined with
///   newlines), [`IMAGE_CHARS`] per image block, and one note for each kind of block left out
///   (images; anything else); a user message with `__openclaw.senderId` also counts
///   ` sender={"id":…,"name":…}`;
/// - bashExecution: command + output; branchSummary and compactionSummary: the summary;
/// - a message with `excludeFromContext`, or of any other role, nothing.
///
/// One deliberate difference: a `system` message counts as a user message would. OpenClaw keeps
/// the system prompt out of its sessions and counts such a message 0; pincer's engines see the
/// system prompt of hosts that keep it in the transcript and must count what it costs.
pub fn message_chars(message: &Message) -> u64 {
    if message.is_excluded_from_context() {
        return 0;
    }
    match message.role() {
        Role::Assistant => {
            let blocks: u64 = message
                .blocks()
                .iter()
                .map(|block| match block.kind() {
                    BlockKind::Text => estimate_string_chars(block.as_text().unwrap_or("")),
                    BlockKind::Thinking => estimate_string_chars(block.as_thinking().unwrap_or("")),
                    BlockKind::ToolCall => block.as_tool_call().map_or(0, |call| {
                        estimate_string_chars(call.name)
                            + estimate_string_chars(call.arguments_json)
                    }),
                    BlockKind::Image | BlockKind::Other => 0,
                })
                .sum();
            blocks
                + match message.content() {
                    Content::Text(text) => estimate_string_chars(text),
                    _ => 0,
                }
        }
        Role::User | Role::ToolResult | Role::Custom | Role::System => {
            let content = content_chars(message.content());
            if message.role() == Role::User {
                content + sender_chars(message)
            } else {
                content
            }
        }
        Role::BashExecution => {
            estimate_string_chars(message.command().unwrap_or(""))
                + estimate_string_chars(message.output().unwrap_or(""))
        }
        Role::CompactionSummary | Role::BranchSummary => {
            estimate_string_chars(message.summary().unwrap_or(""))
        }
        Role::Other => 0,
    }
}

/// The chars of user/toolResult/custom content: text joined with newlines, images, notes.
fn content_chars(content: Content<'_>) -> u64 {
    match content {
        Content::None => 0,
        Content::Text(text) => estimate_string_chars(text),
        Content::Blocks(blocks) => {
            let (mut chars, mut texts) = (0u64, 0u64);
            let (mut images, mut other) = (false, false);
            for block in blocks {
                match block.kind() {
                    BlockKind::Text => {
                        chars += estimate_string_chars(block.as_text().unwrap_or(""));
                        texts += 1;
                    }
                    BlockKind::Image => {
                        chars += IMAGE_CHARS;
                        images = true;
                    }
                    _ => other = true,
                }
            }
            chars += texts.saturating_sub(1); // the joining newlines
            if images {
                chars += IMAGE_NOTE.len() as u64 + NOTE_OVERHEAD;
            }
            if other {
                chars += OTHER_NOTE.len() as u64 + NOTE_OVERHEAD;
            }
            chars
        }
    }
}

/// ` sender={"id":…,"name":…}` for a user message that carries `__openclaw.senderId`.
fn sender_chars(message: &Message) -> u64 {
    let Some(meta) = message.extra("__openclaw") else {
        return 0;
    };
    let Some(id) = meta.get("senderId").and_then(serde_json::Value::as_str) else {
        return 0;
    };
    let mut sender = serde_json::Map::new();
    sender.insert("id".into(), id.into());
    if let Some(name) = meta.get("senderName").and_then(serde_json::Value::as_str) {
        sender.insert("name".into(), name.into());
    }
    estimate_string_chars(&format!(" sender={}", serde_json::Value::Object(sender)))
}

/// `estimateTokens(message) = ceil(chars / 4)`.
///
/// ```
/// use pincer_plugin_api::{tokens::estimate_message_tokens, Message};
/// assert_eq!(estimate_message_tokens(&Message::user("abcde")), 2);
/// assert_eq!(estimate_message_tokens(&Message::user("日本")), 2);
/// ```
pub fn estimate_message_tokens(message: &Message) -> u64 {
    message_chars(message).div_ceil(4)
}

/// The sum of [`estimate_message_tokens`] over `messages`.
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(estimate_message_tokens).sum()
}

/// What [`estimate_context_tokens`] found (`estimateContextTokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextTokens {
    /// `usage_tokens + trailing_tokens`.
    pub tokens: u64,
    /// The context size the provider reported on the last usable assistant message.
    pub usage_tokens: u64,
    /// The estimate of the messages after it (of all of them when there is none).
    pub trailing_tokens: u64,
    /// The index of that assistant message.
    pub last_usage_index: Option<usize>,
}

/// The context's size as OpenClaw measures it: the usage the provider reported on the last
/// assistant message that has some (not stopped by `error` or `aborted`), plus the estimate of
/// every message after it; the plain estimate when no message has usage.
pub fn estimate_context_tokens(messages: &[Message]) -> ContextTokens {
    let last = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(index, message)| {
            usable_usage(message).map(|usage| (index, usage.context_tokens()))
        });
    match last {
        None => {
            let tokens = estimate_tokens(messages);
            ContextTokens {
                tokens,
                usage_tokens: 0,
                trailing_tokens: tokens,
                last_usage_index: None,
            }
        }
        Some((index, usage_tokens)) => {
            let trailing_tokens = estimate_tokens(&messages[index + 1..]);
            ContextTokens {
                tokens: usage_tokens + trailing_tokens,
                usage_tokens,
                trailing_tokens,
                last_usage_index: Some(index),
            }
        }
    }
}

fn usable_usage(message: &Message) -> Option<&Usage> {
    if message.role() != Role::Assistant
        || matches!(message.stop_reason(), Some("aborted" | "error"))
    {
        return None;
    }
    message.usage().filter(|usage| usage.context_tokens() > 0)
}
