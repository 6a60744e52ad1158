//! Tool-call groups: the units every cut respects, in assembly and in compaction alike.
//!
//! A group is an assistant message that calls tools together with every `toolResult` that
//! directly follows it (parallel calls answered in any order, ids reused across calls: the
//! results belong to the call before them by position, not by id alone); any other message is
//! a group of its own. A `toolResult` with no call before it (a transcript that put results
//! first) is a group of its own too, so a cut never separates it from anything. Cutting only
//! at group starts is what keeps every call with its results (lossless-claw#861, #992, #1147).

use std::ops::Range;

use pincer_plugin_api::{Message, Role};

/// The groups of `messages`, in order, covering every index once.
pub fn groups<'a, M>(
    messages: &'a [M],
    message: impl Fn(&'a M) -> &'a Message,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let m = message(&messages[i]);
        let mut end = i + 1;
        if m.role() == Role::Assistant && m.tool_call_ids().next().is_some() {
            while end < messages.len() && message(&messages[end]).role() == Role::ToolResult {
                end += 1;
            }
        }
        out.push(i..end);
        i = end;
    }
    out
}

/// The start of the group that holds index `at` (`at` itself when it starts one).
pub fn group_start(groups: &[Range<usize>], at: usize) -> usize {
    groups
        .iter()
        .find(|g| g.contains(&at))
        .map_or(at, |g| g.start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_plugin_api::ContentBlock;

    fn call(ids: &[&str]) -> Message {
        Message::assistant_blocks(
            ids.iter()
                .map(|id| ContentBlock::tool_call(*id, "f", &serde_json::json!({})))
                .collect(),
        )
    }

    #[test]
    fn results_stay_with_their_call_whatever_their_order_or_ids() {
        let messages = vec![
            Message::user("q"),
            call(&["a", "b"]),
            Message::tool_result("b", "f", "2", false),
            Message::tool_result("a", "f", "1", false),
            call(&["a"]), // a reused id
            Message::tool_result("a", "f", "3", false),
            Message::tool_result("z", "f", "orphan", false),
            Message::assistant("done"),
        ];
        let g = groups(&messages, |m| m);
        assert_eq!(g, vec![0..1, 1..4, 4..7, 7..8]);
        assert_eq!(group_start(&g, 3), 1);
        let orphan_first = vec![
            Message::tool_result("x", "f", "r", false),
            Message::user("u"),
        ];
        assert_eq!(groups(&orphan_first, |m| m), vec![0..1, 1..2]);
    }
}
