//! Token estimation as OpenClaw does it (reference §9.5): `ceil(chars / 4)` per message, with
//! CJK and full-width characters counted as 4 chars each and an image as 8,000 chars.
//!
//! Shared by the host and by engines so that both sides agree on what "fits" means.

use crate::abi::v1::{BlockKind, Content, Message, Role};

/// Characters an image counts as.
pub const IMAGE_CHARS: u64 = 8_000;

/// Whether `c` is in one of the wide ranges that count as 4 chars.
fn is_wide(c: char) -> bool {
    matches!(c as u32,
        0x2E80..=0x9FFF
        | 0xA000..=0xA4FF
        | 0xAC00..=0xD7AF
        | 0xF900..=0xFAFF
        | 0xFF01..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x20000..=0x2FA1F)
}

/// The estimate's character count of `text` (`estimateStringChars`).
pub fn estimate_string_chars(text: &str) -> u64 {
    // ASCII fast path: one byte, one char.
    if text.is_ascii() {
        return text.len() as u64;
    }
    text.chars()
        .map(|c| if is_wide(c) { 4 } else { c.len_utf16() as u64 })
        .sum()
}

/// The estimate's character count of one message, by role (OpenClaw's `estimateTokens`):
/// assistant messages count their text, thinking and tool calls (name + arguments JSON);
/// user, toolResult, custom and system messages their text joined with newlines plus
/// [`IMAGE_CHARS`] per image; bash executions command + output; summaries the summary;
/// a message excluded from context, or of an unknown role, nothing.
pub fn message_chars(message: &Message) -> u64 {
    if message.is_excluded_from_context() {
        return 0;
    }
    match message.role() {
        Role::Assistant => {
            message
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
                .sum::<u64>()
                + match message.content() {
                    Content::Text(text) => estimate_string_chars(text),
                    _ => 0,
                }
        }
        Role::User | Role::ToolResult | Role::Custom | Role::System => match message.content() {
            Content::None => 0,
            Content::Text(text) => estimate_string_chars(text),
            Content::Blocks(blocks) => {
                // One pass: text blocks joined with newlines, images at a fixed weight, one
                // note for each kind of block left out.
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
                chars += texts.saturating_sub(1);
                if images {
                    chars += IMAGE_NOTE.len() as u64;
                }
                if other {
                    chars += OTHER_NOTE.len() as u64;
                }
                chars
            }
        },
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

/// The note OpenClaw adds for images left out of a text rendering.
const IMAGE_NOTE: &str = "[image data omitted from summary input]";
/// The note OpenClaw adds for other non-text blocks.
const OTHER_NOTE: &str = "[non-text data omitted from summary input]";

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
