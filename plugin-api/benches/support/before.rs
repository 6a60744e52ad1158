//! The token estimate as it was before the fast path (commit 8710702, `plugin-api/src/tokens.rs`),
//! kept verbatim so that the benchmark measures before and after side by side in one run and
//! checks that both give the same count for every message.

#![allow(dead_code)]

use pincer_plugin_api::{BlockKind, Content, Message, Role};

pub const IMAGE_CHARS: u64 = 8_000;

const IMAGE_NOTE: &str = "[image data omitted from summary input]";
const OTHER_NOTE: &str = "[non-text data omitted from summary input]";
const NOTE_OVERHEAD: u64 = 17;

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

pub fn estimate_string_chars(text: &str) -> u64 {
    // ASCII: one byte, one UTF-16 unit, no weight.
    if text.is_ascii() {
        return text.len() as u64;
    }
    text.chars()
        .map(|c| c.len_utf16() as u64 + extra_weight(c as u32))
        .sum()
}

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

pub fn estimate_message_tokens(message: &Message) -> u64 {
    message_chars(message).div_ceil(4)
}

pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(estimate_message_tokens).sum()
}
