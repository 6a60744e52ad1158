//! The pure selection behind the engine: which input messages a sliding window keeps.
//!
//! [`select_window`] takes the host's messages, a token budget and [`WindowOptions`], and
//! returns a [`Window`]: sorted index ranges into the input plus the honest token estimate of
//! what they hold. It allocates a handful of vectors and one hash map, whatever the input, and
//! runs in O(n + blocks): a 100,000-message transcript takes milliseconds.
//!
//! # The rules
//!
//! 1. **Pinned system prompt.** With `keep_system`, every [`Role::System`] message before the
//!    first other message is kept and counted against the budget. Without it they are ordinary
//!    messages (the oldest, so the first to go).
//! 2. **Tool pairing.** Every `toolResult` message is paired with the *nearest preceding*
//!    tool call (an assistant message's `toolCall` block) of its `toolCallId`, else with the *nearest following* one (a result
//!    recorded before its call). So an id reused for a later, different call pairs each result
//!    with its own call.
//! 3. **Atomic groups.** The window is a suffix of the transcript (after the pinned system
//!    messages) that starts at a cut no pair crosses: a call and all its results are kept or
//!    dropped together, parallel calls included. The spans between consecutive valid cuts are
//!    the atomic groups the window grows by, newest first, while the next group still fits.
//! 4. **minMessages.** Groups are added even over budget until the window holds at least
//!    `min_messages` non-system messages, so the model always sees the latest turn.
//! 5. **Orphan results.** A tool-result message none of whose results pairs with any call in the
//!    transcript is never kept: a dangling result is what providers reject with a 400. The one
//!    exception: when every message after the pinned system prompt is such an orphan, they are
//!    treated as ordinary messages, because dropping them would leave the model no conversation
//!    at all (and the host would have sent them anyway).
//! 6. **Start on a user turn.** When the window cut something off (an older message that could
//!    have been kept was dropped) and some kept group begins with a [`Role::User`] message,
//!    the groups before the oldest such group are dropped, one at a time, as long as the window
//!    keeps `min_messages` non-system messages. A window that cut nothing off is the
//!    conversation as it began and is left alone (a leading greeting or compaction summary
//!    stays).
//!
//! Without any budget rules 3 and 4 keep everything, so the window is the whole transcript minus
//! orphan results.

use std::collections::HashMap;
use std::ops::Range;

use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{Message, Role};

/// How the window is chosen, besides the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowOptions {
    /// Keep at least this many of the newest non-system messages (whole groups), even when they
    /// exceed the budget.
    pub min_messages: usize,
    /// Pin the leading system messages (counted against the budget).
    pub keep_system: bool,
}

/// The messages a window keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// The kept input indices, as sorted, disjoint, non-adjacent, non-empty ranges.
    pub kept: Vec<Range<usize>>,
    /// The sum of [`estimate_message_tokens`] over the kept messages, system included.
    pub tokens: u64,
    /// The sum of [`estimate_message_tokens`] over the whole input.
    pub input_tokens: u64,
    /// Whether `tokens` exceeds the budget: the pinned system prompt alone does, or the
    /// `min_messages` rule forced a group in.
    pub over_budget: bool,
}

impl Window {
    /// How many input messages are kept.
    pub fn len(&self) -> usize {
        self.kept.iter().map(ExactSizeIterator::len).sum()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The kept input indices, increasing.
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.kept.iter().flat_map(Range::clone)
    }
}

/// What the selection needs to know about one message, computed once.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Its token estimate.
    tokens: u64,
    /// The smallest index it is paired with (itself when it pairs with nothing earlier): a cut
    /// at `c` is valid when no message at or after `c` has `low < c`.
    low: usize,
    /// A tool-result message none of whose results has a call in the transcript.
    orphan: bool,
}

/// Where the calls of one id are.
#[derive(Clone, Copy, Debug)]
struct CallSites {
    /// The first message making a call with this id.
    first: usize,
    /// The latest such message before the one being looked at, during the forward pass.
    latest: Option<usize>,
}

/// One atomic group of the window: from `start` to the start of the next newer group.
#[derive(Clone, Copy, Debug)]
struct Group {
    start: usize,
    /// Tokens of the messages it keeps (orphans excluded).
    tokens: u64,
    /// Non-system messages it keeps.
    counted: usize,
    /// Its first kept message, if any.
    first_kept: Option<usize>,
}

impl Group {
    fn ending_at(end: usize) -> Self {
        Group {
            start: end,
            tokens: 0,
            counted: 0,
            first_kept: None,
        }
    }
}

/// Chooses the window: the pinned system messages and the newest atomic groups that fit
/// `budget` (see the module docs for every rule). `budget` is `None` when there is none.
///
/// ```
/// use pincer_plugin_api::Message;
/// use sliding_window::{select_window, WindowOptions};
///
/// let messages = [
///     Message::system("Be brief."),         // 3 tokens
///     Message::user("an old question"),     // 4
///     Message::assistant("an old answer"),  // 4
///     Message::user("a new question"),      // 4
/// ];
/// let options = WindowOptions { min_messages: 1, keep_system: true };
/// let window = select_window(&messages, Some(8), &options);
/// assert_eq!(window.kept, [0..1, 3..4]);
/// assert_eq!(window.tokens, 7);
/// ```
pub fn select_window(messages: &[Message], budget: Option<u64>, options: &WindowOptions) -> Window {
    let n = messages.len();
    let pinned_end = if options.keep_system {
        messages
            .iter()
            .position(|m| m.role() != Role::System)
            .unwrap_or(n)
    } else {
        0
    };
    let slots = analyse(messages);
    let input_tokens = slots.iter().map(|s| s.tokens).sum::<u64>();
    let pinned_tokens = slots[..pinned_end].iter().map(|s| s.tokens).sum::<u64>();

    let first_regular = (pinned_end..n).find(|&j| !slots[j].orphan);
    // Rule 5: orphans are dropped unless they are all there is.
    let drop_orphans = first_regular.is_some();
    let dropped = |j: usize| drop_orphans && slots[j].orphan;
    let remaining = budget.map(|b| b.saturating_sub(pinned_tokens));

    // Walk backwards, closing a group at every valid cut. `groups` is newest first.
    let mut groups: Vec<Group> = Vec::new();
    let mut kept_tokens = 0u64;
    let mut kept_counted = 0usize;
    let mut group = Group::ending_at(n);
    let mut reach = usize::MAX;
    for j in (pinned_end..n).rev() {
        // Pairs reaching into the pinned prefix never constrain a cut: it is always kept.
        reach = reach.min(slots[j].low.max(pinned_end));
        if !dropped(j) {
            group.tokens = group.tokens.saturating_add(slots[j].tokens);
            group.counted += usize::from(messages[j].role() != Role::System);
            group.first_kept = Some(j);
        }
        if reach < j {
            continue;
        }
        group.start = j;
        let total = kept_tokens.saturating_add(group.tokens);
        let fits = remaining.is_none_or(|r| total <= r);
        if !fits && kept_counted >= options.min_messages {
            break;
        }
        kept_tokens = total;
        kept_counted += group.counted;
        groups.push(group);
        group = Group::ending_at(j);
    }

    // Rule 6: start on a user turn when the window cut something off.
    let window_start = groups.last().map_or(n, |g| g.start);
    if first_regular.is_some_and(|first| first < window_start) {
        let starts_with_user = |g: &Group| {
            g.first_kept
                .is_some_and(|k| messages[k].role() == Role::User)
        };
        if let Some(target) = groups.iter().rposition(starts_with_user) {
            while groups.len() > target + 1 {
                let oldest = groups[groups.len() - 1];
                if kept_counted - oldest.counted < options.min_messages {
                    break;
                }
                kept_counted -= oldest.counted;
                kept_tokens -= oldest.tokens;
                groups.pop();
            }
        }
    }

    let mut kept: Vec<Range<usize>> = Vec::new();
    let mut keep = |index: usize| match kept.last_mut() {
        Some(last) if last.end == index => last.end += 1,
        _ => kept.push(index..index + 1),
    };
    (0..pinned_end).for_each(&mut keep);
    let window_start = groups.last().map_or(n, |g| g.start);
    (window_start..n).filter(|&j| !dropped(j)).for_each(keep);

    let tokens = pinned_tokens.saturating_add(kept_tokens);
    Window {
        kept,
        tokens,
        input_tokens,
        over_budget: budget.is_some_and(|b| tokens > b),
    }
}

/// Token estimates, pairing and orphans of every message, in two passes over the blocks.
fn analyse(messages: &[Message]) -> Vec<Slot> {
    let mut calls: HashMap<&str, CallSites> = HashMap::new();
    for (index, message) in messages.iter().enumerate() {
        for id in message.tool_call_ids() {
            calls.entry(id).or_insert(CallSites {
                first: index,
                latest: None,
            });
        }
    }

    let mut slots: Vec<Slot> = messages
        .iter()
        .enumerate()
        .map(|(index, message)| Slot {
            tokens: estimate_message_tokens(message),
            low: index,
            orphan: false,
        })
        .collect();
    for (index, message) in messages.iter().enumerate() {
        let mut matched = false;
        if let Some(id) = message.tool_result_id() {
            if let Some(sites) = calls.get(id) {
                matched = true;
                // Nearest preceding call, else the nearest following one (the first).
                let call = sites.latest.unwrap_or(sites.first);
                let (early, late) = if call < index {
                    (call, index)
                } else {
                    (index, call)
                };
                slots[late].low = slots[late].low.min(early);
            }
        }
        for id in message.tool_call_ids() {
            if let Some(sites) = calls.get_mut(id) {
                sites.latest = Some(index);
            }
        }
        slots[index].orphan = message.role() == Role::ToolResult && !matched;
    }
    slots
}

#[cfg(test)]
mod tests;
