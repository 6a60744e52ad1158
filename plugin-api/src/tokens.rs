//! Token estimation as OpenClaw 2026.9.6 computes it (`estimateTokens`,
//! `estimateContextTokens`; the rules observed in `shared/data/openclaw-golden/README.md`, which
//! win over docs/CONTRACT.md §9.5): `ceil(chars / 4)` per message, where a string's chars are its UTF-16
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

use serde_json::Value;

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
const fn extra_weight(c: u32) -> u64 {
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
///
/// Text is almost always ASCII (one byte, one UTF-16 unit, no weight), so the whole string is
/// first checked eight bytes at a time, without a branch per byte; only a string with a byte
/// ≥ 0x80 is walked, and even then its ASCII runs are skipped a word at a time and only the
/// other characters are decoded.
pub fn estimate_string_chars(text: &str) -> u64 {
    let bytes = text.as_bytes();
    if is_ascii(bytes) {
        bytes.len() as u64
    } else {
        mixed_chars(bytes)
    }
}

/// The high bit of each byte of a word.
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// Eight bytes as a word (`bytes` has at least 8).
#[inline(always)]
fn word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[..8]);
    u64::from_ne_bytes(w)
}

/// Whether every byte is below 0x80. No early exit: the answer is almost always yes, and a
/// branch-free OR over the words (the last one overlapping the others) vectorises, where the
/// standard library's check walks the last bytes one at a time.
#[inline]
fn is_ascii(bytes: &[u8]) -> bool {
    let n = bytes.len();
    if n < 8 {
        let mut or = 0u8;
        for &b in bytes {
            or |= b;
        }
        return or < 0x80;
    }
    let (words, _) = bytes.as_chunks::<8>();
    let mut or = word(&bytes[n - 8..]);
    for w in words {
        or |= u64::from_ne_bytes(*w);
    }
    or & HIGH_BITS == 0
}

/// [`estimate_string_chars`] of UTF-8 `bytes` that are not all ASCII.
fn mixed_chars(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    let (mut i, mut chars) = (0, 0u64);
    while i < n {
        let lead = bytes[i];
        if lead < 0x80 {
            // ASCII: a word at a time while the run lasts.
            let step = if i + 8 <= n && word(&bytes[i..]) & HIGH_BITS == 0 {
                8
            } else {
                1
            };
            i += step;
            chars += step as u64;
            continue;
        }
        // `bytes` is valid UTF-8: a lead byte has all its continuation bytes.
        let (units, weight, width) = match lead {
            0x80..=0xDF => {
                let code = u32::from(lead & 0x1F) << 6 | cont(bytes[i + 1]);
                (1, bmp_weight(code), 2)
            }
            0xE0..=0xEF => {
                let code =
                    u32::from(lead & 0x0F) << 12 | cont(bytes[i + 1]) << 6 | cont(bytes[i + 2]);
                (1, bmp_weight(code), 3)
            }
            _ => {
                let code = u32::from(lead & 0x07) << 18
                    | cont(bytes[i + 1]) << 12
                    | cont(bytes[i + 2]) << 6
                    | cont(bytes[i + 3]);
                // Beyond the BMP: two UTF-16 units.
                (2, extra_weight(code), 4)
            }
        };
        chars += units + weight;
        i += width;
    }
    chars
}

/// [`extra_weight`] of a BMP code point: one table look-up for the 256-code-point pages that
/// weigh the same throughout (most of them, CJK included), the full match for the others.
#[inline(always)]
fn bmp_weight(code: u32) -> u64 {
    match BMP_PAGE_WEIGHTS[(code >> 8) as usize & 0xFF] {
        MIXED_PAGE => extra_weight(code),
        weight => u64::from(weight),
    }
}

/// A page of [`BMP_PAGE_WEIGHTS`] whose code points do not all weigh the same.
const MIXED_PAGE: u8 = u8::MAX;

/// For each page of 256 BMP code points (`code >> 8`), the [`extra_weight`] all of them share,
/// or [`MIXED_PAGE`]. Computed from [`extra_weight`] at compile time, so the two cannot
/// disagree.
static BMP_PAGE_WEIGHTS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut page = 0;
    while page < 256 {
        let first = extra_weight((page as u32) << 8);
        let mut uniform = true;
        let mut low = 1;
        while low < 256 {
            if extra_weight((page as u32) << 8 | low) != first {
                uniform = false;
            }
            low += 1;
        }
        table[page] = if uniform { first as u8 } else { MIXED_PAGE };
        page += 1;
    }
    table
};

/// The six payload bits of a UTF-8 continuation byte.
#[inline(always)]
fn cont(byte: u8) -> u32 {
    u32::from(byte & 0x3F)
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
///
/// Nothing is allocated or serialised: texts are counted where the message holds them (a tool
/// call's arguments are already JSON text), and the sender suffix is counted, not written.
pub fn message_chars(message: &Message) -> u64 {
    if message.is_excluded_from_context() {
        return 0;
    }
    match message.role() {
        Role::Assistant => assistant_chars(message.content()),
        Role::User => content_chars(message.content()) + sender_chars(message),
        Role::ToolResult | Role::Custom | Role::System => content_chars(message.content()),
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

/// The chars of assistant content: text, thinking, tool calls.
fn assistant_chars(content: Content<'_>) -> u64 {
    match content {
        Content::None => 0,
        Content::Text(text) => estimate_string_chars(text),
        Content::Blocks(blocks) => blocks
            .iter()
            .map(|block| match block.kind() {
                BlockKind::Text => estimate_string_chars(block.as_text().unwrap_or("")),
                BlockKind::Thinking => estimate_string_chars(block.as_thinking().unwrap_or("")),
                BlockKind::ToolCall => block.as_tool_call().map_or(0, |call| {
                    estimate_string_chars(call.name) + estimate_string_chars(call.arguments_json)
                }),
                BlockKind::Image | BlockKind::Other => 0,
            })
            .sum(),
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

/// `f(id, name)` for a user message that carries `__openclaw.senderId` (and maybe
/// `__openclaw.senderName`), both strings.
fn with_sender<R>(message: &Message, f: impl FnOnce(&str, Option<&str>) -> R) -> Option<R> {
    let meta = message.extra("__openclaw")?;
    let id = meta.get("senderId").and_then(Value::as_str)?;
    Some(f(id, meta.get("senderName").and_then(Value::as_str)))
}

/// The chars of ` sender={"id":…,"name":…}` (the object as `JSON.stringify` writes it) for a
/// user message that carries `__openclaw.senderId`, counted without writing it: the fixed
/// ASCII parts, and each string as JSON writes it.
fn sender_chars(message: &Message) -> u64 {
    with_sender(message, |id, name| {
        let id_part = r#" sender={"id":"#.len() as u64 + json_string_chars(id) + 1; // + `}`
        id_part
            + name.map_or(0, |name| {
                r#","name":"#.len() as u64 + json_string_chars(name)
            })
    })
    .unwrap_or(0)
}

/// The estimate's chars of `text` written as a JSON string (quotes and escapes included), as
/// `JSON.stringify` and `serde_json` write it: `"` and `\` and the control characters with a
/// short escape (`\b \t \n \f \r`) take one char more, the other control characters five more
/// (`\u00XX`); nothing else is escaped. Escapes are ASCII, so they add no weight.
fn json_string_chars(text: &str) -> u64 {
    let escapes: u64 = text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | b'\t' | b'\n' | 0x0C | b'\r' => 1,
            0..=0x1F => 5,
            _ => 0,
        })
        .sum();
    2 + estimate_string_chars(text) + escapes
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

/// Real token counts with OpenAI's BPE encodings (feature `tiktoken`, off by default).
///
/// The [estimate](crate::tokens) is OpenClaw's: cheap, and what OpenClaw's own thresholds are
/// tuned for. An engine that must know what a prompt costs in a given model's tokens (to fill
/// a window to the last token, to report usage) counts with the model's encoding instead:
///
/// ```
/// use pincer_plugin_api::tokens::tiktoken::Encoding;
/// use pincer_plugin_api::Message;
///
/// let encoding = Encoding::for_model("gpt-4o").unwrap_or(Encoding::O200kBase);
/// assert_eq!(encoding, Encoding::O200kBase);
/// assert_eq!(Encoding::Cl100kBase.count_text("hello world"), 2);
/// assert_eq!(encoding.count_message(&Message::user("hello world")), 2);
/// ```
///
/// The encodings are compiled into the library (the `tiktoken-rs` crate embeds OpenAI's
/// published rank files): nothing is read from disk or fetched at run time. Each encoding is
/// built the first time it is used, once per process, and shared by all threads: its rank
/// table is parsed, about 45 ms for `cl100k_base` and 100 ms for `o200k_base` in a release
/// build; [`Encoding::preload`](tiktoken::Encoding::preload) does it ahead of time, for
/// instance in an engine's `create`.
///
/// Counting is BPE encoding: 14–22 µs for a τ-bench message (about 260 chars; release build),
/// 600–900 times the [estimate](crate::tokens::estimate_message_tokens). Count once and keep
/// the count, rather than recount a whole context every turn.
///
/// Text is encoded as ordinary text: a special token's spelling such as `<|endoftext|>` in a
/// message counts as the ordinary tokens it is made of, as a provider's API counts it.
#[cfg(feature = "tiktoken")]
pub mod tiktoken {
    use std::sync::OnceLock;

    use serde_json::Value;
    use tiktoken_rs::CoreBPE;

    use crate::abi::v1::{BlockKind, Content, Message, Role};

    /// One of OpenAI's BPE encodings.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum Encoding {
        /// `cl100k_base`: GPT-4, GPT-3.5 Turbo, `text-embedding-ada-002` and `-3-*`.
        Cl100kBase,
        /// `o200k_base`: GPT-4o, GPT-4.1, GPT-5, the o-series (and, for ordinary text, the
        /// gpt-oss models' `o200k_harmony`, which only adds special tokens).
        O200kBase,
    }

    impl Encoding {
        /// Every encoding this module has.
        pub const ALL: [Encoding; 2] = [Encoding::Cl100kBase, Encoding::O200kBase];

        /// The encoding's name as tiktoken spells it (`"cl100k_base"`, `"o200k_base"`).
        pub fn name(self) -> &'static str {
            match self {
                Encoding::Cl100kBase => "cl100k_base",
                Encoding::O200kBase => "o200k_base",
            }
        }

        /// The encoding named `name` ([`Encoding::name`]'s spelling).
        pub fn from_name(name: &str) -> Option<Encoding> {
            Encoding::ALL.into_iter().find(|e| e.name() == name)
        }

        /// The encoding an OpenAI model uses, by its name as the API spells it (`"gpt-4o"`,
        /// `"gpt-4-0613"`, `"gpt-5-mini"`, …); `None` for models of other providers and for
        /// OpenAI's older encodings (`p50k`, `r50k`).
        ///
        /// ```
        /// use pincer_plugin_api::tokens::tiktoken::Encoding;
        /// assert_eq!(Encoding::for_model("gpt-4o-2024-08-06"), Some(Encoding::O200kBase));
        /// assert_eq!(Encoding::for_model("gpt-4"), Some(Encoding::Cl100kBase));
        /// assert_eq!(Encoding::for_model("claude-sonnet-4"), None);
        /// ```
        pub fn for_model(model: &str) -> Option<Encoding> {
            use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
            match get_tokenizer(model)? {
                Tokenizer::Cl100kBase => Some(Encoding::Cl100kBase),
                Tokenizer::O200kBase | Tokenizer::O200kHarmony => Some(Encoding::O200kBase),
                _ => None,
            }
        }

        /// Builds the encoding now rather than on its first use (45–100 ms in a release build,
        /// once per process).
        pub fn preload(self) {
            self.bpe();
        }

        /// The token ids of `text`, encoded as ordinary text.
        pub fn encode(self, text: &str) -> Vec<u32> {
            self.bpe().encode_ordinary(text)
        }

        /// How many tokens `text` is, encoded as ordinary text.
        pub fn count_text(self, text: &str) -> u64 {
            if text.is_empty() {
                return 0;
            }
            self.bpe().encode_ordinary(text).len() as u64
        }

        /// How many tokens the text a message carries is: the parts that
        /// [`message_chars`](super::message_chars) counts, each encoded on its own and the
        /// counts added up:
        /// - assistant: text blocks, thinking, and each tool call's name and arguments (JSON);
        /// - user, toolResult, custom, system: the string content or each text block, and for
        ///   a user message with `__openclaw.senderId` the ` sender={…}` OpenClaw adds;
        /// - bashExecution: command and output; branchSummary and compactionSummary: the
        ///   summary;
        /// - a message with `excludeFromContext`, or of any other role: 0.
        ///
        /// Not counted: images and other non-text blocks (what they cost depends on the
        /// provider, not on an encoding), and the few tokens a chat format adds around each
        /// message (its role and separators; 3–4 tokens per message in OpenAI's chat format).
        pub fn count_message(self, message: &Message) -> u64 {
            let mut tokens = 0;
            for_each_text(message, |text| tokens += self.count_text(text));
            tokens
        }

        /// The sum of [`Encoding::count_message`] over `messages`.
        pub fn count_messages(self, messages: &[Message]) -> u64 {
            messages.iter().map(|m| self.count_message(m)).sum()
        }

        /// The encoding, built on first use.
        fn bpe(self) -> &'static CoreBPE {
            static CL100K_BASE: OnceLock<CoreBPE> = OnceLock::new();
            static O200K_BASE: OnceLock<CoreBPE> = OnceLock::new();
            // The rank files are compiled in: they cannot be missing or malformed.
            match self {
                Encoding::Cl100kBase => CL100K_BASE.get_or_init(|| {
                    tiktoken_rs::cl100k_base().expect("the embedded cl100k_base encoding")
                }),
                Encoding::O200kBase => O200K_BASE.get_or_init(|| {
                    tiktoken_rs::o200k_base().expect("the embedded o200k_base encoding")
                }),
            }
        }
    }

    /// `f` on each text of `message` that [`Encoding::count_message`] counts.
    fn for_each_text(message: &Message, mut f: impl FnMut(&str)) {
        if message.is_excluded_from_context() {
            return;
        }
        match message.role() {
            Role::Assistant => match message.content() {
                Content::None => {}
                Content::Text(text) => f(text),
                Content::Blocks(blocks) => {
                    for block in blocks {
                        match block.kind() {
                            BlockKind::Text => f(block.as_text().unwrap_or("")),
                            BlockKind::Thinking => f(block.as_thinking().unwrap_or("")),
                            BlockKind::ToolCall => {
                                if let Some(call) = block.as_tool_call() {
                                    f(call.name);
                                    f(call.arguments_json);
                                }
                            }
                            BlockKind::Image | BlockKind::Other => {}
                        }
                    }
                }
            },
            Role::User | Role::ToolResult | Role::Custom | Role::System => {
                message.content().texts().for_each(&mut f);
                if message.role() == Role::User {
                    let sender = super::with_sender(message, |id, name| {
                        let mut sender = serde_json::Map::new();
                        sender.insert("id".into(), id.into());
                        if let Some(name) = name {
                            sender.insert("name".into(), name.into());
                        }
                        format!(" sender={}", Value::Object(sender))
                    });
                    if let Some(sender) = sender {
                        f(&sender);
                    }
                }
            }
            Role::BashExecution => {
                f(message.command().unwrap_or(""));
                f(message.output().unwrap_or(""));
            }
            Role::CompactionSummary | Role::BranchSummary => f(message.summary().unwrap_or("")),
            Role::Other => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `estimateStringChars` as it reads: per code point, its UTF-16 length plus its weight.
    fn reference_chars(text: &str) -> u64 {
        text.chars()
            .map(|c| c.len_utf16() as u64 + extra_weight(c as u32))
            .sum()
    }

    /// Every bound of every weighted range, and its neighbours.
    fn edge_code_points() -> Vec<char> {
        let bounds = [
            0x7F, 0x80, 0xB7, 0x2C7, 0x2C9, 0x2CB, 0x2D9, 0x2EA, 0x2EB, 0x305, 0x323, 0x7FF, 0x800,
            0x1100, 0x11FF, 0x2E80, 0x2FFF, 0x3000, 0x319F, 0x31A0, 0x4DFF, 0x4E00, 0x9FA5, 0x9FA6,
            0x9FFF, 0xA000, 0xA4FF, 0xA700, 0xA707, 0xA960, 0xA97F, 0xAC00, 0xD7AF, 0xD7B0, 0xD7FF,
            0xE000, 0xF900, 0xFAFF, 0xFE10, 0xFE4F, 0xFF01, 0xFF60, 0xFF61, 0xFFDC, 0xFFE0, 0xFFE6,
            0xFFFF, 0x10000, 0x16FE0, 0x16FFF, 0x1AFF0, 0x1B16F, 0x1D360, 0x1D371, 0x1F200,
            0x1F2FF, 0x1F600, 0x20000, 0x2FA1F, 0x30000, 0x3347F, 0x10FFFF,
        ];
        bounds
            .iter()
            .flat_map(|&b: &u32| [b.wrapping_sub(1), b, b + 1])
            .filter_map(char::from_u32)
            .collect()
    }

    #[test]
    fn every_code_point_counts_as_the_reference_counts_it() {
        let mut buf = [0u8; 4];
        for code in 0..=0x10FFFF {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let text = c.encode_utf8(&mut buf);
            assert_eq!(
                estimate_string_chars(text),
                reference_chars(text),
                "U+{code:04X}"
            );
        }
    }

    #[test]
    fn mixed_strings_count_as_the_reference_counts_them_at_every_alignment() {
        // Each edge code point at every offset of an ASCII run, before every tail length:
        // the word-at-a-time paths see it in every lane and at every end.
        for c in edge_code_points() {
            for before in 0..=17 {
                for after in 0..=17 {
                    let text = format!("{}{c}{}", "a".repeat(before), "b".repeat(after));
                    assert_eq!(
                        estimate_string_chars(&text),
                        reference_chars(&text),
                        "{text:?}"
                    );
                }
            }
        }
        // Pseudo-random strings over ASCII, Latin, punctuation, CJK, kana, Hangul, emoji.
        let pool: Vec<char> = "a Z9\n\t{}\"é’—«日本語こんにちは한국어ＡＢ１！｡ｱ😀𝍠𠀀ㄅ˙̅"
            .chars()
            .chain(edge_code_points())
            .collect();
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        for len in 0..300 {
            let text: String = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // Mostly ASCII, as real text is.
                    if state.is_multiple_of(4) {
                        pool[(state >> 8) as usize % pool.len()]
                    } else {
                        (b'a' + (state >> 8) as u8 % 26) as char
                    }
                })
                .collect();
            assert_eq!(
                estimate_string_chars(&text),
                reference_chars(&text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn ascii_of_every_length_counts_its_length() {
        let text: String = (0..200u8).map(|i| (b' ' + i % 95) as char).collect();
        for end in 0..=text.len() {
            assert_eq!(estimate_string_chars(&text[..end]), end as u64);
        }
    }

    /// The sender suffix as OpenClaw writes it, and as the estimate counted it before it
    /// counted without writing.
    fn written_sender_chars(id: &str, name: Option<&str>) -> u64 {
        let mut sender = serde_json::Map::new();
        sender.insert("id".into(), id.into());
        if let Some(name) = name {
            sender.insert("name".into(), name.into());
        }
        estimate_string_chars(&format!(" sender={}", Value::Object(sender)))
    }

    #[test]
    fn the_sender_suffix_counts_as_written() {
        let strings = [
            "",
            "u123",
            "Ann",
            "quote\"back\\slash",
            "ctl\u{0}\u{1}\u{7}\u{8}\t\n\u{b}\u{c}\r\u{1b}\u{1f} \u{7f}",
            "日本語 😀 ｱ",
            "\u{2028}\u{2029}</script>",
        ];
        for id in strings {
            for name in strings.iter().map(Some).chain([None]) {
                let mut meta = serde_json::json!({ "senderId": id });
                if let Some(name) = name {
                    meta["senderName"] = (*name).into();
                }
                let message = Message::from_value(
                    serde_json::json!({"role": "user", "content": "hi", "__openclaw": meta}),
                )
                .unwrap();
                assert_eq!(
                    sender_chars(&message),
                    written_sender_chars(id, name.copied()),
                    "{id:?} {name:?}"
                );
                assert_eq!(message_chars(&message), 2 + sender_chars(&message));
            }
        }
        // No sender id, or not a string: nothing.
        for meta in [
            serde_json::json!({"senderName": "Ann"}),
            serde_json::json!({"senderId": 7}),
            serde_json::json!("u1"),
        ] {
            let message = Message::from_value(
                serde_json::json!({"role": "user", "content": "hi", "__openclaw": meta}),
            )
            .unwrap();
            assert_eq!(message_chars(&message), 2);
        }
    }

    #[cfg(feature = "tiktoken")]
    mod tiktoken {
        use super::super::tiktoken::Encoding;
        use crate::abi::v1::{ContentBlock, Message};

        #[test]
        fn known_texts_count_as_openai_encodes_them() {
            use Encoding::{Cl100kBase, O200kBase};
            // Ids from OpenAI's published encodings (tiktoken's own examples).
            assert_eq!(Cl100kBase.encode("hello world"), [15339, 1917]);
            assert_eq!(Cl100kBase.count_text("hello world"), 2);
            assert_eq!(Cl100kBase.count_text("tiktoken is great!"), 6);
            assert_eq!(O200kBase.encode("hello world"), [24912, 2375]);
            assert_eq!(O200kBase.count_text("hello world"), 2);
            for encoding in Encoding::ALL {
                assert_eq!(encoding.count_text(""), 0);
                assert_eq!(Encoding::from_name(encoding.name()), Some(encoding));
                // A special token's spelling is ordinary text.
                assert!(encoding.count_text("<|endoftext|>") > 1);
            }
            // o200k_base has more CJK merges than cl100k_base.
            let japanese = "お誕生日おめでとう";
            assert!(O200kBase.count_text(japanese) < Cl100kBase.count_text(japanese));
        }

        #[test]
        fn a_message_counts_each_text_it_carries() {
            let e = Encoding::Cl100kBase;
            let count = |t: &str| e.count_text(t);
            let arguments = serde_json::json!({"reservation_id": "ZFA04Y"});
            let assistant = Message::assistant_blocks(vec![
                ContentBlock::thinking("The user wants a refund."),
                ContentBlock::text("Let me check."),
                ContentBlock::tool_call("call_1", "get_reservation_details", &arguments),
                ContentBlock::image("aGVsbG8=", "image/png"),
            ]);
            assert_eq!(
                e.count_message(&assistant),
                count("The user wants a refund.")
                    + count("Let me check.")
                    + count("get_reservation_details")
                    + count(&arguments.to_string())
            );
            let result = Message::tool_result("call_1", "get_reservation_details", "{}", false);
            assert_eq!(e.count_message(&result), count("{}"));
            let user = Message::from_value(serde_json::json!({
                "role": "user", "content": "hello world",
                "__openclaw": {"senderId": "u1", "senderName": "Ann"},
            }))
            .unwrap();
            assert_eq!(
                e.count_message(&user),
                2 + count(r#" sender={"id":"u1","name":"Ann"}"#)
            );
            let excluded = Message::from_value(serde_json::json!({
                "role": "user", "content": "hello world", "excludeFromContext": true,
            }))
            .unwrap();
            assert_eq!(e.count_message(&excluded), 0);
            assert_eq!(
                e.count_message(&Message::compaction_summary("hello world", 10)),
                2
            );
            assert_eq!(
                e.count_messages(&[assistant.clone(), result.clone(), excluded]),
                e.count_message(&assistant) + e.count_message(&result)
            );
        }

        #[test]
        fn encodings_are_built_once_and_shared_across_threads() {
            let counts: Vec<u64> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|_| s.spawn(|| Encoding::O200kBase.count_text("hello world")))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(counts, [2; 4]);
            // Preloading an encoding already built is instant: benches/tokens.rs measures it.
            Encoding::O200kBase.preload();
        }
    }
}
