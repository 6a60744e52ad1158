//! Token estimation as OpenClaw does it (reference §9.5): `ceil(chars / 4)` per message, with
//! CJK and full-width characters counted as 4 chars each and an image as 8,000 chars.
//!
//! Shared by the host and by engines so that both sides agree on what "fits" means.

use crate::abi::v1::{ContentBlock, Message, ToolResultPart};

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
    text.chars().map(|c| if is_wide(c) { 4 } else { 1 }).sum()
}

/// The estimate's character count of one message.
pub fn message_chars(message: &Message) -> u64 {
    message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => estimate_string_chars(text),
            ContentBlock::Thinking { thinking } => estimate_string_chars(thinking),
            ContentBlock::ToolCall {
                name,
                arguments_json,
                ..
            } => estimate_string_chars(name) + estimate_string_chars(arguments_json),
            ContentBlock::ToolResult { content, .. } => content
                .iter()
                .map(|part| match part {
                    ToolResultPart::Text { text } => estimate_string_chars(text),
                    ToolResultPart::Image { .. } => IMAGE_CHARS,
                })
                .sum(),
            ContentBlock::Image { .. } => IMAGE_CHARS,
            ContentBlock::Other { json, .. } => estimate_string_chars(json),
        })
        .sum()
}

/// `estimateTokens(message) = ceil(chars / 4)`.
///
/// ```
/// use pincer_plugin_api::{tokens::estimate_message_tokens, Message, Role};
/// assert_eq!(estimate_message_tokens(&Message::text(Role::User, "abcde")), 2);
/// assert_eq!(estimate_message_tokens(&Message::text(Role::User, "日本")), 2);
/// ```
pub fn estimate_message_tokens(message: &Message) -> u64 {
    message_chars(message).div_ceil(4)
}

/// The sum of [`estimate_message_tokens`] over `messages`.
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(estimate_message_tokens).sum()
}
