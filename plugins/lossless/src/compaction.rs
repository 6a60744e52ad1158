//! Compaction that always converges: leaf passes over the oldest raw chunk outside the
//! protected fresh tail, condensed passes that fold root summaries into a deeper node, each
//! escalating normal → aggressive → truncation, stopping with an explicit [`StopReason`].
//!
//! Progress argument: a leaf pass moves the frontier forward by at least one message group and
//! replaces it with a strictly smaller summary; a condensed pass removes at least one root and
//! writes a strictly smaller node. An output at least as large as its input fails its level;
//! when every level fails the run stops with `no_progress` (never a retry of the same input,
//! lossless-claw#639), and a run that changed nothing never reports `compacted` (lossless-claw#1177).

use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{EngineError, Host, Message, Role};

use crate::groups::{group_start, groups};
use crate::store::{Store, StoredMessage, Summary};
use crate::summarize::{self, Input, Level, Mode};

/// Why a compaction run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The context fits the target.
    BudgetMet,
    /// Nothing outside the fresh tail to summarise, and fewer than two roots to condense.
    NoCandidate,
    /// Every level produced output at least as large as its input.
    NoProgress,
}

impl StopReason {
    /// The snake_case name reported to hosts.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::BudgetMet => "budget_met",
            StopReason::NoCandidate => "no_candidate",
            StopReason::NoProgress => "no_progress",
        }
    }
}

/// One pass that wrote a node.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pass {
    /// `leaf` or `condensed`.
    pub kind: &'static str,
    /// The node written (`s<id>`).
    pub node: String,
    /// Its depth.
    pub depth: i64,
    /// The level that succeeded.
    pub level: &'static str,
    /// Tokens replaced.
    pub tokens_in: u64,
    /// Tokens of the node.
    pub tokens_out: u64,
}

/// What a compaction run did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The passes, in order.
    pub passes: Vec<Pass>,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// Context tokens before.
    pub tokens_before: u64,
    /// Context tokens after.
    pub tokens_after: u64,
}

/// The knobs of a run (from the config and the budget).
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Newest messages protected from leaf passes.
    pub fresh_tail_messages: usize,
    /// At most this many tokens protected by count (the newest user turn is protected anyway).
    pub fresh_tail_max_tokens: u64,
    /// A leaf pass takes groups until it has this many tokens.
    pub leaf_chunk_tokens: u64,
    /// Condense when this many roots of one depth are side by side.
    pub condense_fan_in: usize,
    /// Which summariser.
    pub mode: Mode,
}

/// The summary as the model sees it: a user message with the node's id, depth and span.
pub fn render(id: i64, depth: i64, first: i64, last: i64, text: &str) -> Message {
    Message::user(format!(
        "[lcm summary s{id} · depth {depth} · messages {first}–{last} · lcm_expand(\"s{id}\") has the originals]\n{text}"
    ))
}

/// The tokens of a summary rendered with a six-digit id (what compaction plans with).
fn rendered_tokens(depth: i64, first: i64, last: i64, text: &str) -> u64 {
    estimate_message_tokens(&render(999_999, depth, first, last, text))
}

/// The context's tokens as assembly would count them without a budget: roots plus the raw
/// messages after the frontier.
///
/// # Errors
/// Database errors.
pub fn context_tokens(store: &Store, conversation: i64) -> Result<u64, EngineError> {
    let roots: u64 = store.roots(conversation)?.iter().map(|s| s.tokens).sum();
    let frontier = store.frontier(conversation)?;
    let raw: i64 = store.with(|conn| {
        conn.query_row(
            "SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE conversation_id = ?1 AND seq >= ?2",
            rusqlite::params![conversation, frontier],
            |r| r.get(0),
        )
        .map_err(crate::store::db_error("raw tokens"))
    })?;
    Ok(roots + raw as u64)
}

/// A compaction run over one conversation.
pub struct Run<'a> {
    /// The store.
    pub store: &'a Store,
    /// The host (its model, when it has one); `None`: offline summaries only.
    pub host: Option<&'a Host>,
    /// The conversation.
    pub conversation: i64,
    /// The knobs.
    pub policy: Policy,
    /// `/compact <instructions>`.
    pub instructions: Option<&'a str>,
}

enum PassResult {
    Wrote(Pass),
    NoCandidate,
    NoProgress,
}

impl Run<'_> {
    /// Passes until the context is at most `target` tokens, or no pass can help.
    ///
    /// # Errors
    /// Database errors.
    pub fn until(&self, target: u64) -> Result<Outcome, EngineError> {
        let tokens_before = context_tokens(self.store, self.conversation)?;
        let mut passes = Vec::new();
        let mut tokens = tokens_before;
        let stop_reason = loop {
            if tokens <= target {
                break StopReason::BudgetMet;
            }
            // Roots that reached the fan-in are folded first (the DAG stays shallow and small).
            let result = match self.condensed_pass(false)? {
                PassResult::NoCandidate => match self.leaf_pass()? {
                    PassResult::NoCandidate => self.condensed_pass(true)?,
                    other => other,
                },
                other => other,
            };
            match result {
                PassResult::Wrote(pass) => passes.push(pass),
                PassResult::NoCandidate => break StopReason::NoCandidate,
                PassResult::NoProgress => break StopReason::NoProgress,
            }
            let now = context_tokens(self.store, self.conversation)?;
            if now >= tokens {
                // Cannot happen when every pass shrinks its input; stop rather than loop.
                break StopReason::NoProgress;
            }
            tokens = now;
        };
        Ok(Outcome {
            passes,
            stop_reason,
            tokens_before,
            tokens_after: tokens,
        })
    }

    /// One leaf pass over the oldest chunk outside the fresh tail.
    fn leaf_pass(&self) -> Result<PassResult, EngineError> {
        let frontier = self.store.frontier(self.conversation)?;
        let raw = self
            .store
            .messages_between(self.conversation, frontier, i64::MAX)?;
        let parsed: Vec<Message> = raw.iter().map(parse_stored).collect();
        let bounds = groups(&parsed, |m| m);
        let tail = self.fresh_tail_start(&raw, &parsed, &bounds);
        if tail == 0 {
            return Ok(PassResult::NoCandidate);
        }
        let mut end = 0;
        let mut tokens = 0;
        for group in &bounds {
            if group.start >= tail || (end > 0 && tokens >= self.policy.leaf_chunk_tokens) {
                break;
            }
            tokens += raw[group.clone()].iter().map(|m| m.tokens).sum::<u64>();
            end = group.end;
        }
        let chunk = &raw[..end];
        let input = Input {
            depth: 0,
            items: chunk
                .iter()
                .zip(&parsed)
                .map(|(stored, message)| {
                    (
                        label(stored, message),
                        crate::store::searchable_text(message),
                    )
                })
                .collect(),
            previous: self
                .store
                .roots(self.conversation)?
                .last()
                .map(|s| s.text.clone()),
            instructions: self.instructions.map(str::to_owned),
        };
        let (first, last) = (chunk[0].seq, chunk[chunk.len() - 1].seq);
        let Some((text, out_tokens, level)) = self.escalate(&input, tokens, 0, first, last) else {
            return Ok(PassResult::NoProgress);
        };
        let id = self.store.insert_leaf(
            self.conversation,
            first..=last,
            &text,
            out_tokens,
            tokens,
            level.as_str(),
        )?;
        Ok(PassResult::Wrote(Pass {
            kind: "leaf",
            node: format!("s{id}"),
            depth: 0,
            level: level.as_str(),
            tokens_in: tokens,
            tokens_out: out_tokens,
        }))
    }

    /// Where the fresh tail starts in `raw`: the newest `fresh_tail_messages` within the token
    /// cap, widened to the newest user message, snapped to a group start.
    fn fresh_tail_start(
        &self,
        raw: &[StoredMessage],
        parsed: &[Message],
        bounds: &[std::ops::Range<usize>],
    ) -> usize {
        let mut start = raw.len();
        let mut tokens = 0;
        while start > 0
            && raw.len() - start < self.policy.fresh_tail_messages
            && tokens + raw[start - 1].tokens <= self.policy.fresh_tail_max_tokens
        {
            start -= 1;
            tokens += raw[start].tokens;
        }
        if let Some(user) = parsed.iter().rposition(|m| m.role() == Role::User) {
            start = start.min(user);
        }
        if start >= raw.len() {
            return raw.len();
        }
        group_start(bounds, start)
    }

    /// One condensed pass: `fan_in` side-by-side roots of the lowest such depth, or with
    /// `force`, the oldest roots (at least two) whatever their depths.
    fn condensed_pass(&self, force: bool) -> Result<PassResult, EngineError> {
        let roots = self.store.roots(self.conversation)?;
        let fan_in = self.policy.condense_fan_in.max(2);
        let mut pick: Option<&[Summary]> = None;
        let mut depths: Vec<i64> = roots.iter().map(|r| r.depth).collect();
        depths.sort_unstable();
        depths.dedup();
        'depths: for depth in depths {
            let mut run_start = 0;
            for i in 0..roots.len() {
                if roots[i].depth != depth {
                    run_start = i + 1;
                } else if i + 1 - run_start == fan_in {
                    pick = Some(&roots[run_start..=i]);
                    break 'depths;
                }
            }
        }
        if pick.is_none() && force && roots.len() >= 2 {
            pick = Some(&roots[..roots.len().min(fan_in)]);
        }
        let Some(children) = pick else {
            return Ok(PassResult::NoCandidate);
        };
        let tokens: u64 = children.iter().map(|c| c.tokens).sum();
        let depth = children.iter().map(|c| c.depth).max().unwrap_or(0) + 1;
        let (first, last) = (children[0].first_seq, children[children.len() - 1].last_seq);
        let previous_index = roots
            .iter()
            .position(|r| r.id == children[0].id)
            .unwrap_or(0);
        let input = Input {
            depth,
            items: children
                .iter()
                .map(|c| {
                    (
                        format!("s{} (messages {}–{})", c.id, c.first_seq, c.last_seq),
                        c.text.clone(),
                    )
                })
                .collect(),
            previous: previous_index.checked_sub(1).map(|i| roots[i].text.clone()),
            instructions: self.instructions.map(str::to_owned),
        };
        let Some((text, out_tokens, level)) = self.escalate(&input, tokens, depth, first, last)
        else {
            return Ok(PassResult::NoProgress);
        };
        let id = self.store.insert_condensed(
            self.conversation,
            children,
            &text,
            out_tokens,
            level.as_str(),
        )?;
        Ok(PassResult::Wrote(Pass {
            kind: "condensed",
            node: format!("s{id}"),
            depth,
            level: level.as_str(),
            tokens_in: tokens,
            tokens_out: out_tokens,
        }))
    }

    /// The first level whose rendered output is smaller than `tokens_in`.
    fn escalate(
        &self,
        input: &Input,
        tokens_in: u64,
        depth: i64,
        first: i64,
        last: i64,
    ) -> Option<(String, u64, Level)> {
        for level in Level::ESCALATION {
            let text = summarize::summarize(self.host, self.policy.mode, input, level);
            let tokens = rendered_tokens(depth, first, last, &text);
            if tokens < tokens_in {
                return Some((text, tokens, level));
            }
            tracing::debug!(
                level = level.as_str(),
                tokens,
                tokens_in,
                "lossless: summary not smaller than its input; escalating"
            );
        }
        None
    }
}

/// The stored message parsed back (a message that no longer parses reads as its raw JSON text).
pub fn parse_stored(stored: &StoredMessage) -> Message {
    serde_json::from_str(&stored.json)
        .ok()
        .and_then(|v| Message::from_value(v).ok())
        .unwrap_or_else(|| Message::user(stored.json.clone()))
}

fn label(stored: &StoredMessage, message: &Message) -> String {
    match message.tool_name() {
        Some(tool) => format!("m{} {} ({tool})", stored.id, stored.role),
        None => format!("m{} {}", stored.id, stored.role),
    }
}
