//! Assembly: root summaries, then the raw messages after them, newest first into the budget,
//! cut only at tool-call group starts ([`crate::groups`]), tokens estimated as OpenClaw does
//! (CJK-aware). Raw messages are references into the host's messages (never copies);
//! summaries are new messages.
//!
//! A summary the host wrote over its own history (after a delegated compaction) counts as
//! covered: the assembly stops there, and the engine's own summaries stand for that span.
//!
//! Cache stability: nothing here depends on the turn but the store and the budget, so from one
//! turn to the next the assembled prompt only grows at its end — unless a compaction changed
//! the summaries, or the raw part outgrew the budget (which the compaction debt prevents).

use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{AssembleResult, ContextBuilder, EngineError, EntryIds, Message};

use crate::compaction::render;
use crate::groups::groups;
use crate::store::{is_host_summary, seq_of_entry, Store};

/// An assembly and what identifies it.
pub struct Assembled {
    /// The result for the host.
    pub result: AssembleResult,
    /// The identity of each item, in prompt order (`s<id>` for a summary, the entry id or
    /// `#<index>` for a host message): what prefix stability compares.
    pub signature: Vec<String>,
    /// The estimate of the whole context.
    pub tokens: u64,
    /// Whether the newest group alone was over the budget (kept anyway).
    pub over_budget: bool,
    /// Host messages left out for the budget (not covered by a summary).
    pub dropped_raw: usize,
}

/// Assembles the context of `conversation` over the host's `messages`.
///
/// # Errors
/// Database errors.
pub fn assemble(
    store: &Store,
    conversation: i64,
    messages: &[Message],
    entry_ids: &EntryIds<'_>,
    budget: Option<u64>,
) -> Result<Assembled, EngineError> {
    let budget = budget.unwrap_or(u64::MAX);
    let frontier = store.frontier(conversation)?;
    let bounds = groups(messages, |m| m);
    // A host message is covered when the store holds it before the frontier.
    let covered = |index: usize| -> Result<bool, EngineError> {
        if is_host_summary(&messages[index]) {
            return Ok(true);
        }
        if frontier == 0 {
            return Ok(false);
        }
        let Some(entry) = entry_ids.get(index) else {
            return Ok(false);
        };
        store.with(|conn| {
            Ok(seq_of_entry(conn, conversation, entry)?.is_some_and(|seq| seq < frontier))
        })
    };
    let mut tokens = 0u64;
    let mut kept_start = messages.len();
    let mut over_budget = false;
    let mut dropped_raw = 0;
    let mut raw_done = false;
    for group in bounds.iter().rev() {
        if raw_done {
            break;
        }
        let mut group_covered = false;
        for i in group.clone() {
            if covered(i)? {
                group_covered = true;
                break;
            }
        }
        if group_covered {
            break;
        }
        let t: u64 = messages[group.clone()]
            .iter()
            .map(estimate_message_tokens)
            .sum();
        if tokens.saturating_add(t) <= budget {
            tokens += t;
            kept_start = group.start;
        } else if kept_start == messages.len() {
            // The newest group is kept even alone over the budget: the model must see the turn.
            tokens += t;
            kept_start = group.start;
            over_budget = true;
        } else {
            raw_done = true;
        }
    }
    if raw_done {
        // Everything older and not covered is left out (it stays in the store).
        let mut i = kept_start;
        while i > 0 && !covered(i - 1)? {
            i -= 1;
            dropped_raw += 1;
        }
    }
    // Summaries, newest first, while they fit beside the raw part.
    let roots = store.roots(conversation)?;
    let mut summaries: Vec<(String, Message, u64)> = Vec::new();
    for root in roots.iter().rev() {
        let message = render(
            root.id,
            root.depth,
            root.first_seq,
            root.last_seq,
            &root.text,
        );
        let t = estimate_message_tokens(&message);
        if tokens.saturating_add(t) > budget {
            break;
        }
        tokens += t;
        summaries.push((format!("s{}", root.id), message, t));
    }
    summaries.reverse();
    let mut builder = ContextBuilder::new();
    let mut signature = Vec::with_capacity(summaries.len() + messages.len() - kept_start);
    for (id, message, _) in summaries {
        builder.push(message);
        signature.push(id);
    }
    if kept_start < messages.len() {
        builder.keep_range(kept_start..messages.len());
        for i in kept_start..messages.len() {
            signature.push(
                entry_ids
                    .get(i)
                    .map_or_else(|| format!("#{i}"), str::to_owned),
            );
        }
    }
    builder.estimated_tokens(tokens);
    if over_budget {
        builder.may_overflow();
    }
    Ok(Assembled {
        result: builder.finish(),
        signature,
        tokens,
        over_budget,
        dropped_raw,
    })
}
