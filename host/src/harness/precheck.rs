//! The pre-prompt precheck (docs/CONTRACT.md §9.4): before the model call, estimate the prompt the
//! model would get and choose a route — `fits`, `compact_only`, `truncate_tool_results_only`
//! or `compact_then_truncate`.
//!
//! The estimate is OpenClaw's precheck estimate, not the context estimate: 12 tokens per
//! message, text and thinking blocks at 6 + ⌈chars/4⌉, tool results at 2 chars per token,
//! tool calls and JSON at 3, an image 2000, summaries with their wrappers; the system prompt
//! (when not blank) and the prompt add 12 + their text; the whole × 1.2, rounded up. What tool
//! results could give back is what truncating each to its live cap would free (the cap: 30% of
//! the window at 4 chars per token, at most 16 000 chars).

use pincer_plugin_abi::latest::{BlockKind, Content, Message, Role};
use pincer_plugin_api::tokens::estimate_string_chars;

/// `SAFETY_MARGIN`.
pub const SAFETY_MARGIN: f64 = 1.2;
const MESSAGE_OVERHEAD: u64 = 12;
const BLOCK_OVERHEAD: u64 = 6;
const IMAGE_TOKENS: u64 = 2000;
const MAX_LIVE_TOOL_RESULT_CHARS: u64 = 16_000;
const TOOL_RESULT_CONTEXT_SHARE: f64 = 0.3;

/// The route the precheck chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// The prompt fits.
    Fits,
    /// Compaction is needed: truncating tool results would not free enough.
    CompactOnly,
    /// Truncating old tool results is enough.
    TruncateToolResultsOnly,
    /// Compact, then truncate tool results.
    CompactThenTruncate,
    /// Not run: the engine owns compaction and vouches for its assembly.
    Skipped,
}

impl Route {
    /// The route's name as docs/CONTRACT.md and the JSON report write it (`compact_only`).
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Fits => "fits",
            Route::CompactOnly => "compact_only",
            Route::TruncateToolResultsOnly => "truncate_tool_results_only",
            Route::CompactThenTruncate => "compact_then_truncate",
            Route::Skipped => "skipped",
        }
    }

    /// Whether the route compacts.
    pub fn compacts(self) -> bool {
        matches!(self, Route::CompactOnly | Route::CompactThenTruncate)
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The precheck's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Precheck {
    /// The route.
    pub route: Route,
    /// The prompt's estimate, margin included.
    pub estimated_prompt_tokens: u64,
    /// What the prompt may take before the reserve.
    pub prompt_budget_before_reserve: u64,
    /// How far over it is.
    pub overflow_tokens: u64,
    /// Characters truncating tool results could free.
    pub tool_result_reducible_chars: u64,
}

fn tokens_at(chars: u64, per_token: u64) -> u64 {
    chars.div_ceil(per_token)
}

fn text_tokens(text: &str) -> u64 {
    tokens_at(estimate_string_chars(text), 4)
}

/// One message's precheck estimate (before the margin).
pub fn message_tokens(message: &Message) -> u64 {
    let per_token = if message.role() == Role::ToolResult {
        2
    } else {
        4
    };
    let mut tokens = MESSAGE_OVERHEAD;
    if let Some(summary) = message.summary() {
        // Summaries are counted with their wrappers (prefix and suffix, about 40 tokens).
        tokens += BLOCK_OVERHEAD + text_tokens(summary) + 40;
    }
    match message.content() {
        Content::None => {}
        Content::Text(text) => {
            tokens += BLOCK_OVERHEAD + tokens_at(estimate_string_chars(text), per_token)
        }
        Content::Blocks(blocks) => {
            for block in blocks {
                tokens += BLOCK_OVERHEAD
                    + match block.kind() {
                        BlockKind::Text => tokens_at(
                            estimate_string_chars(block.as_text().unwrap_or_default()),
                            per_token,
                        ),
                        BlockKind::Thinking => text_tokens(block.as_thinking().unwrap_or_default()),
                        BlockKind::ToolCall => block.as_tool_call().map_or(0, |call| {
                            tokens_at(
                                estimate_string_chars(call.name)
                                    + estimate_string_chars(call.arguments_json),
                                3,
                            )
                        }),
                        BlockKind::Image => IMAGE_TOKENS,
                        BlockKind::Other => tokens_at(block.to_value().to_string().len() as u64, 3),
                    };
            }
        }
    }
    tokens
}

/// The prompt estimate of `messages`, the system prompt and the prompt, margin included.
pub fn estimate_prompt_tokens(messages: &[Message], system_prompt: &str, prompt: &str) -> u64 {
    let mut sum: u64 = messages.iter().map(message_tokens).sum();
    if !system_prompt.trim().is_empty() {
        sum += MESSAGE_OVERHEAD + text_tokens(system_prompt);
    }
    sum += MESSAGE_OVERHEAD + text_tokens(prompt);
    (sum as f64 * SAFETY_MARGIN).ceil() as u64
}

/// The live cap of one tool result's text: 30 % of the window at 4 chars per token, at most
/// 16 000 characters.
pub fn tool_result_cap(context_window: u64) -> u64 {
    (((context_window as f64 * TOOL_RESULT_CONTEXT_SHARE).floor() as u64) * 4)
        .min(MAX_LIVE_TOOL_RESULT_CHARS)
}

/// Characters that truncating each tool result to its live cap would free.
pub fn tool_result_reducible_chars(messages: &[Message], context_window: u64) -> u64 {
    let cap = tool_result_cap(context_window);
    messages
        .iter()
        .filter(|m| m.role() == Role::ToolResult)
        .map(|m| {
            let chars: u64 = m.content().texts().map(|t| t.chars().count() as u64).sum();
            chars.saturating_sub(cap)
        })
        .sum()
}

/// Truncates, in the model's view only (the session keeps every result whole), each tool
/// result whose text is over the live cap: its head is kept and a notice says how much was
/// left out. Returns how many were truncated.
pub fn truncate_tool_results(messages: &mut [Message], context_window: u64) -> usize {
    let cap = tool_result_cap(context_window) as usize;
    let mut truncated = 0;
    for message in messages.iter_mut().filter(|m| m.role() == Role::ToolResult) {
        let text: String = message.content().texts().collect::<Vec<_>>().join("\n");
        let chars = text.chars().count();
        if chars <= cap {
            continue;
        }
        let notice = |left: usize| {
            format!("\n\n[... {left} more characters truncated to fit the context window]")
        };
        let keep = cap.saturating_sub(notice(chars).chars().count());
        let head: String = text.chars().take(keep).collect();
        let kept = format!("{head}{}", notice(chars - keep));
        // The same message (id, name, timestamp, details kept) with the shortened text.
        let mut value = message.to_value();
        value["content"] = serde_json::json!([{ "type": "text", "text": kept }]);
        if let Ok(shortened) = Message::from_value(value) {
            *message = shortened;
        }
        truncated += 1;
    }
    truncated
}

/// Runs the precheck for a window of `context_window` tokens with `reserve_tokens` kept free.
pub fn precheck(
    messages: &[Message],
    system_prompt: &str,
    prompt: &str,
    context_window: u64,
    reserve_tokens: u64,
) -> Precheck {
    let estimated = estimate_prompt_tokens(messages, system_prompt, prompt);
    let budget = context_window.max(1);
    let min_prompt = (budget / 2).min(8000).max((budget - 1).min(8000));
    let reserve = reserve_tokens.min(budget.saturating_sub(min_prompt));
    let before_reserve = budget.saturating_sub(reserve).max(1);
    let overflow = estimated.saturating_sub(before_reserve);
    let reducible = tool_result_reducible_chars(messages, context_window);
    let route = if overflow == 0 {
        Route::Fits
    } else if reducible == 0 {
        Route::CompactOnly
    } else if reducible >= (overflow * 4 + 2048).max(overflow * 6) {
        Route::TruncateToolResultsOnly
    } else {
        Route::CompactThenTruncate
    };
    Precheck {
        route,
        estimated_prompt_tokens: estimated,
        prompt_budget_before_reserve: before_reserve,
        overflow_tokens: overflow,
        tool_result_reducible_chars: reducible,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_prompt_fits_and_a_large_one_must_compact() {
        let small = [Message::user("hello")];
        assert_eq!(
            precheck(&small, "sys", "hi", 4096, 20000).route,
            Route::Fits
        );
        let large: Vec<Message> = (0..40)
            .map(|_| Message::user("word ".repeat(200)))
            .collect();
        let check = precheck(&large, "sys", "hi", 4096, 20000);
        assert_eq!(check.route, Route::CompactOnly);
        assert!(check.overflow_tokens > 0);
        // A 4096 window keeps min(8000, 4095) for the prompt: the reserve shrinks to 1.
        assert_eq!(check.prompt_budget_before_reserve, 4095);
    }

    #[test]
    fn truncation_keeps_the_head_within_the_cap() {
        let mut messages = vec![
            Message::tool_result("c", "t", "y".repeat(100), false),
            Message::tool_result("d", "t", "x".repeat(200_000), false),
        ];
        assert_eq!(truncate_tool_results(&mut messages, 4096), 1);
        let text = messages[1].plain_text();
        assert_eq!(text.chars().count() as u64, tool_result_cap(4096));
        assert!(text.starts_with("xxxx") && text.contains("more characters truncated"));
        assert_eq!(messages[1].tool_result_id(), Some("d"));
        assert_eq!(
            messages[0].plain_text(),
            "y".repeat(100),
            "a short result is untouched"
        );
    }

    #[test]
    fn large_tool_results_route_to_truncation() {
        let big = Message::tool_result("c", "t", "x".repeat(200_000), false);
        let check = precheck(&[big], "", "hi", 128_000, 20000);
        assert_eq!(check.route, Route::TruncateToolResultsOnly);
    }
}
