//! Shared by the integration tests: message builders, a deliberately naive reference of the
//! window rules (quadratic, written from the rules rather than from the fast code), and the
//! invariant checker every selected window must pass.

#![allow(dead_code)] // each test binary uses a different part

use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{ContentBlock, Message, Role};
use sliding_window::{Window, WindowOptions};

/// A text message of `chars` ASCII characters.
pub fn text(role: Role, chars: usize) -> Message {
    let body = "x".repeat(chars);
    match role {
        Role::User => Message::user(body),
        Role::Assistant => Message::assistant(body),
        Role::System => Message::system(body),
        other => panic!("no text builder for {other}"),
    }
}

/// An assistant message calling `ids`.
pub fn calls(ids: &[&str]) -> Message {
    let blocks = ids
        .iter()
        .map(|id| ContentBlock::tool_call(*id, "lookup", &serde_json::json!({"q": 1})))
        .collect();
    Message::assistant_blocks(blocks)
}

/// A tool-result message answering `id` with `chars` characters.
pub fn result(id: &str, chars: usize) -> Message {
    Message::tool_result(id, "lookup", "r".repeat(chars), false)
}

fn call_ids(message: &Message) -> Vec<&str> {
    message.tool_call_ids().collect()
}

/// Every (call message, result message) pair by the rule: the nearest preceding call of the id,
/// else the nearest following one. Quadratic on purpose.
pub fn reference_pairs(messages: &[Message]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (j, message) in messages.iter().enumerate() {
        if let Some(id) = message.tool_result_id() {
            let preceding = (0..j).rev().find(|&i| call_ids(&messages[i]).contains(&id));
            let following = || (j..messages.len()).find(|&i| call_ids(&messages[i]).contains(&id));
            if let Some(i) = preceding.or_else(following) {
                if i != j {
                    pairs.push((i, j));
                }
            }
        }
    }
    pairs
}

/// Whether message `j` is an orphan result: a `toolResult` whose call is nowhere in the
/// transcript.
pub fn reference_orphan(messages: &[Message], j: usize) -> bool {
    let message = &messages[j];
    message.role() == Role::ToolResult
        && !message
            .tool_result_id()
            .is_some_and(|id| messages.iter().any(|m| call_ids(m).contains(&id)))
}

/// The pinned prefix: the leading system messages when `keep_system`.
pub fn pinned_end(messages: &[Message], options: &WindowOptions) -> usize {
    if options.keep_system {
        messages
            .iter()
            .take_while(|m| m.role() == Role::System)
            .count()
    } else {
        0
    }
}

/// Whether a window may start at `cut`: no pair crosses it (pairs into the pinned prefix
/// excepted: that prefix is always kept).
pub fn valid_cut(pairs: &[(usize, usize)], pinned_end: usize, cut: usize) -> bool {
    pairs.iter().all(|&(a, b)| {
        let (low, high) = (a.min(b).max(pinned_end), a.max(b));
        !(low < cut && cut <= high)
    })
}

/// The window by the rules, naively: the kept indices.
pub fn reference_select(
    messages: &[Message],
    budget: Option<u64>,
    options: &WindowOptions,
) -> Vec<usize> {
    let n = messages.len();
    let pinned = pinned_end(messages, options);
    let pairs = reference_pairs(messages);
    let orphan: Vec<bool> = (0..n).map(|j| reference_orphan(messages, j)).collect();
    let any_regular = (pinned..n).any(|j| !orphan[j]);
    let dropped = |j: usize| any_regular && orphan[j];
    let tokens = |j: usize| estimate_message_tokens(&messages[j]);
    let pinned_tokens: u64 = (0..pinned).map(tokens).sum();
    let remaining = budget.map(|b| b.saturating_sub(pinned_tokens));

    // Groups, newest first, as (start, end, tokens, counted).
    let cuts: Vec<usize> = (pinned..n)
        .rev()
        .filter(|&c| valid_cut(&pairs, pinned, c))
        .collect();
    let mut window: Vec<(usize, usize, u64, usize)> = Vec::new();
    let (mut total, mut counted) = (0u64, 0usize);
    let mut end = n;
    for &start in &cuts {
        let kept = (start..end).filter(|&j| !dropped(j));
        let group_tokens: u64 = kept.clone().map(tokens).sum();
        let group_counted = kept.filter(|&j| messages[j].role() != Role::System).count();
        let fits = remaining.is_none_or(|r| total + group_tokens <= r);
        if !fits && counted >= options.min_messages {
            break;
        }
        total += group_tokens;
        counted += group_counted;
        window.push((start, end, group_tokens, group_counted));
        end = start;
    }
    window.reverse(); // oldest first
    let start = window.first().map_or(n, |g| g.0);
    let cut_something = (pinned..start).any(|j| !dropped(j));
    let user_first = |&(s, e, _, _): &(usize, usize, u64, usize)| {
        (s..e)
            .find(|&j| !dropped(j))
            .is_some_and(|j| messages[j].role() == Role::User)
    };
    if cut_something {
        if let Some(target) = window.iter().position(user_first) {
            let mut drop = 0;
            while drop < target && counted - window[drop].3 >= options.min_messages {
                counted -= window[drop].3;
                drop += 1;
            }
            window.drain(..drop);
        }
    }
    let start = window.first().map_or(n, |g| g.0);
    (0..pinned)
        .chain((start..n).filter(|&j| !dropped(j)))
        .collect()
}

/// Checks every invariant of `window` against the input, independently of how it was chosen,
/// and that it equals the reference selection. `label` names the case in failures.
pub fn check_window(
    label: &str,
    messages: &[Message],
    budget: Option<u64>,
    options: &WindowOptions,
    window: &Window,
) {
    let n = messages.len();
    let kept: Vec<usize> = window.indices().collect();
    let is_kept = {
        let mut flags = vec![false; n];
        kept.iter().for_each(|&i| flags[i] = true);
        flags
    };

    // Indices strictly increasing, in bounds; ranges non-empty and merged.
    assert!(kept.windows(2).all(|w| w[0] < w[1]), "{label}: {kept:?}");
    assert!(kept.iter().all(|&i| i < n), "{label}: out of bounds");
    assert!(window.kept.iter().all(|r| !r.is_empty()), "{label}");
    assert!(
        window.kept.windows(2).all(|w| w[0].end < w[1].start),
        "{label}: ranges not merged: {:?}",
        window.kept
    );

    // Honest tokens.
    let tokens: u64 = kept
        .iter()
        .map(|&i| estimate_message_tokens(&messages[i]))
        .sum();
    assert_eq!(window.tokens, tokens, "{label}: estimated tokens");

    // The pinned system prompt is always there.
    let pinned = pinned_end(messages, options);
    assert!((0..pinned).all(|i| is_kept[i]), "{label}: system not kept");

    // Tool pairs are never split (the pairing rule decides which call a result answers).
    let pairs = reference_pairs(messages);
    for &(call, res) in &pairs {
        assert_eq!(
            is_kept[call], is_kept[res],
            "{label}: call {call} / result {res} split; kept {kept:?}"
        );
    }
    // Every kept call has all its results (present in the input) kept, and vice versa.
    for &i in &kept {
        for &(call, res) in &pairs {
            if call == i || res == i {
                assert!(is_kept[call] && is_kept[res], "{label}: pair of {i}");
            }
        }
    }

    // No dangling results, unless the body is nothing but orphans.
    let orphans: Vec<usize> = (pinned..n)
        .filter(|&j| reference_orphan(messages, j))
        .collect();
    let all_orphans = orphans.len() == n - pinned;
    if !all_orphans {
        assert!(
            orphans.iter().all(|&j| !is_kept[j]),
            "{label}: orphan kept: {kept:?}"
        );
    }

    // The budget holds unless minMessages forced the oldest kept group in.
    let body: Vec<usize> = kept.iter().copied().filter(|&i| i >= pinned).collect();
    let counted_from = |from: usize| {
        body.iter()
            .filter(|&&i| i >= from && messages[i].role() != Role::System)
            .count()
    };
    if let Some(budget) = budget {
        let pinned_tokens: u64 = (0..pinned)
            .map(|i| estimate_message_tokens(&messages[i]))
            .sum();
        let body_tokens = window.tokens - pinned_tokens;
        assert_eq!(window.over_budget, window.tokens > budget, "{label}");
        if body_tokens > budget.saturating_sub(pinned_tokens) {
            let first = body[0];
            let next_cut = (first + 1..=n)
                .find(|&c| valid_cut(&pairs, pinned, c))
                .expect("n is a valid cut");
            assert!(
                counted_from(next_cut) < options.min_messages,
                "{label}: over budget ({} > {budget}) without minMessages forcing it; kept \
                 {kept:?}",
                window.tokens
            );
        }
    } else {
        assert!(!window.over_budget, "{label}");
    }

    // At least minMessages non-system messages are kept, when the body has them (orphans do
    // not count: they are never sent).
    let available = (pinned..n)
        .filter(|&j| {
            messages[j].role() != Role::System && (all_orphans || !reference_orphan(messages, j))
        })
        .count();
    assert!(
        counted_from(pinned) >= options.min_messages.min(available),
        "{label}: fewer than minMessages kept: {kept:?}"
    );

    // The window starts on a user turn whenever it cut something off and could: unless every
    // kept user message that starts a group would leave fewer than minMessages.
    if let Some(&first) = body.first() {
        let cut_something = (pinned..first).any(|j| all_orphans || !reference_orphan(messages, j));
        if cut_something && messages[first].role() != Role::User {
            for &u in body.iter().filter(|&&i| messages[i].role() == Role::User) {
                if valid_cut(&pairs, pinned, u) {
                    assert!(
                        counted_from(u) < options.min_messages,
                        "{label}: window could start on user {u} but starts on {first}: \
                         {kept:?}"
                    );
                }
            }
        }
    }

    // Exactly what the naive reference chooses.
    assert_eq!(
        kept,
        reference_select(messages, budget, options),
        "{label}: differs from the reference"
    );
}
