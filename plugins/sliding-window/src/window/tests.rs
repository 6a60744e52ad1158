//! Unit tests of [`select_window`]: one transcript shape per rule.

use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::{ContentBlock, Message, Role};

use super::*;

/// A text message of exactly `tokens` estimated tokens.
fn text(role: Role, tokens: usize) -> Message {
    let body = "x".repeat(tokens * 4);
    match role {
        Role::User => Message::user(body),
        Role::Assistant => Message::assistant(body),
        _ => Message::system(body),
    }
}

fn user(tokens: usize) -> Message {
    text(Role::User, tokens)
}

fn assistant(tokens: usize) -> Message {
    text(Role::Assistant, tokens)
}

fn system(tokens: usize) -> Message {
    text(Role::System, tokens)
}

/// An assistant message calling `ids` (each call 4 tokens: name "f" plus 15 chars of arguments).
fn calls(ids: &[&str]) -> Message {
    let blocks = ids
        .iter()
        .map(|id| ContentBlock::tool_call(*id, "f", &serde_json::json!({"a": "0123456"})))
        .collect();
    Message::assistant_blocks(blocks)
}

/// A tool-result message answering `id` with `tokens` tokens of output.
fn result(id: &str, tokens: usize) -> Message {
    Message::tool_result(id, "f", "r".repeat(tokens * 4), false)
}

const DEFAULTS: WindowOptions = WindowOptions {
    min_messages: 1,
    keep_system: true,
};

/// Selects, checks the bookkeeping every window must satisfy, and returns the kept indices.
fn select(messages: &[Message], budget: Option<u64>, options: &WindowOptions) -> Vec<usize> {
    let window = select_window(messages, budget, options);
    let indices: Vec<usize> = window.indices().collect();
    let honest: u64 = indices
        .iter()
        .map(|&i| estimate_message_tokens(&messages[i]))
        .sum();
    assert_eq!(
        window.tokens, honest,
        "estimated tokens must be the kept sum"
    );
    assert_eq!(
        window.input_tokens,
        messages.iter().map(estimate_message_tokens).sum::<u64>()
    );
    assert_eq!(window.len(), indices.len());
    assert!(window.kept.iter().all(|r| !r.is_empty()));
    assert!(
        window.kept.windows(2).all(|w| w[0].end < w[1].start),
        "ranges sorted, disjoint and merged: {:?}",
        window.kept
    );
    assert_eq!(
        window.over_budget,
        budget.is_some_and(|b| window.tokens > b)
    );
    indices
}

#[test]
fn keeps_system_and_the_newest_messages_that_fit() {
    let messages = [
        system(10),
        user(20),
        assistant(20),
        user(5),
        assistant(5),
        user(5),
    ];
    // 10 (system) + 5 + 5 + 5 = 25; adding the 20-token assistant would exceed 40.
    assert_eq!(select(&messages, Some(40), &DEFAULTS), [0, 3, 4, 5]);
}

#[test]
fn budget_exactly_at_a_boundary() {
    let messages = [system(4), user(6), assistant(6), user(6), assistant(6)];
    // Exactly system + the last four: everything fits.
    assert_eq!(select(&messages, Some(28), &DEFAULTS), [0, 1, 2, 3, 4]);
    // One token less: the oldest user turn goes, and then the assistant that would start the
    // window, so the window starts on a user turn.
    assert_eq!(select(&messages, Some(27), &DEFAULTS), [0, 3, 4]);
    // Exactly system + the last two.
    assert_eq!(select(&messages, Some(16), &DEFAULTS), [0, 3, 4]);
}

#[test]
fn parallel_tool_calls_are_kept_or_dropped_together() {
    let messages = [
        system(1),
        user(1),
        calls(&["a", "b", "c"]), // 12 tokens
        result("a", 3),
        result("b", 3),
        result("c", 3),
        assistant(2),
        user(2),
    ];
    let group: u64 = messages[2..6].iter().map(estimate_message_tokens).sum();
    assert_eq!(group, 21);
    // system 1 + user 1 + group 21 + 2 + 2 = 27: all fit.
    assert_eq!(
        select(&messages, Some(27), &DEFAULTS),
        [0, 1, 2, 3, 4, 5, 6, 7]
    );
    // Without the user turn before it, the group still fits but the window must start on a
    // user turn: everything up to the last user goes, the group with it.
    assert_eq!(select(&messages, Some(26), &DEFAULTS), [0, 7]);
    // With room for two of the three results only, the whole group goes.
    assert_eq!(select(&messages, Some(5 + 18), &DEFAULTS), [0, 7]);
    // Nothing ever keeps a strict part of the group.
    for budget in 0..40 {
        let kept = select(&messages, Some(budget), &DEFAULTS);
        let in_group = kept.iter().filter(|i| (2..6).contains(*i)).count();
        assert!(in_group == 0 || in_group == 4, "budget {budget}: {kept:?}");
    }
}

#[test]
fn a_result_before_its_call_is_grouped_with_it() {
    let messages = [
        user(2),
        result("r", 2), // recorded before the call it answers
        calls(&["r"]),
        assistant(2),
        user(2),
    ];
    for budget in 0..30 {
        let kept = select(&messages, Some(budget), &DEFAULTS);
        assert_eq!(
            kept.contains(&1),
            kept.contains(&2),
            "budget {budget}: {kept:?}"
        );
    }
    assert_eq!(select(&messages, None, &DEFAULTS), [0, 1, 2, 3, 4]);
}

#[test]
fn a_reused_call_id_pairs_each_result_with_its_own_call() {
    let messages = [
        user(2),
        calls(&["c1"]),  // 1: first call c1
        result("c1", 2), // 2: answers 1
        assistant(2),
        user(2),         // 4
        calls(&["c1"]),  // 5: a different call, same id
        result("c1", 2), // 6: answers 5
        assistant(2),
    ];
    // The second pair fits on its own (user 2 + 4 + 2 + 2 = 10): the first pair is not dragged
    // along, as it would be if the second result were paired with the first call.
    assert_eq!(select(&messages, Some(10), &DEFAULTS), [4, 5, 6, 7]);
    for budget in 0..30 {
        let kept = select(&messages, Some(budget), &DEFAULTS);
        assert_eq!(kept.contains(&1), kept.contains(&2), "{budget}: {kept:?}");
        assert_eq!(kept.contains(&5), kept.contains(&6), "{budget}: {kept:?}");
    }
}

#[test]
fn a_reused_id_whose_first_result_comes_first_pairs_with_the_following_call() {
    let messages = [
        user(1),
        result("c1", 1), // 1: no call before it: pairs with the following call (2)
        calls(&["c1"]),  // 2
        result("c1", 1), // 3: pairs with 2, the nearest preceding
        user(1),
        calls(&["c1"]),  // 5
        result("c1", 1), // 6: pairs with 5
    ];
    assert_eq!(select(&messages, Some(7), &DEFAULTS), [4, 5, 6]);
    let all: Vec<usize> = (0..7).collect();
    assert_eq!(select(&messages, Some(100), &DEFAULTS), all);
    for budget in 0..20 {
        let kept = select(&messages, Some(budget), &DEFAULTS);
        let first_pair = [1, 2, 3].map(|i| kept.contains(&i));
        assert!(
            first_pair == [true; 3] || first_pair == [false; 3],
            "{kept:?}"
        );
    }
}

#[test]
fn an_orphan_result_is_dropped() {
    let messages = [
        system(1),
        user(1),
        result("gone", 5), // its call was compacted away
        assistant(1),
        user(1),
    ];
    assert_eq!(select(&messages, None, &DEFAULTS), [0, 1, 3, 4]);
    assert_eq!(select(&messages, Some(4), &DEFAULTS), [0, 1, 3, 4]);
}

#[test]
fn orphans_are_kept_when_they_are_all_there_is() {
    let messages = [system(1), result("gone", 2), result("also-gone", 2)];
    assert_eq!(select(&messages, None, &DEFAULTS), [0, 1, 2]);
    assert_eq!(select(&messages, Some(3), &DEFAULTS), [0, 2]);
}

#[test]
fn a_tool_result_without_a_call_id_is_an_orphan() {
    let no_id = Message::from_value(serde_json::json!({
        "role": "toolResult", "toolName": "f", "content": [{"type": "text", "text": "rrrr"}],
        "isError": false,
    }))
    .unwrap();
    let messages = [user(1), no_id, user(1), assistant(1)];
    assert_eq!(select(&messages, None, &DEFAULTS), [0, 2, 3]);
}

#[test]
fn the_window_starts_on_a_user_turn() {
    let messages = [
        system(1),
        user(1),
        assistant(1),
        user(1),
        calls(&["a"]), // 4 tokens
        result("a", 1),
        assistant(1),
        user(1),
        assistant(1),
        assistant(1),
    ];
    // Room for everything after index 3's user turn except the user turn itself: the window
    // would start on the assistant's tool call, so it drops to the next user turn.
    assert_eq!(select(&messages, Some(1 + 9), &DEFAULTS), [0, 7, 8, 9]);
    // With the user turn: it starts there.
    assert_eq!(
        select(&messages, Some(1 + 10), &DEFAULTS),
        [0, 3, 4, 5, 6, 7, 8, 9]
    );
    // Trimming to the user turn would leave fewer than minMessages: the window is kept as is.
    let five = WindowOptions {
        min_messages: 5,
        ..DEFAULTS
    };
    assert_eq!(select(&messages, Some(1 + 9), &five), [0, 4, 5, 6, 7, 8, 9]);
    // No user message kept at all: nothing to start on, nothing trimmed.
    assert_eq!(select(&messages, Some(1 + 2), &DEFAULTS), [0, 8, 9]);
}

#[test]
fn an_uncut_window_is_left_as_the_conversation_began() {
    let messages = [system(1), assistant(1), user(1), assistant(1)];
    assert_eq!(select(&messages, Some(100), &DEFAULTS), [0, 1, 2, 3]);
    // Once something is cut off the rule applies.
    let messages = [system(1), assistant(5), assistant(1), user(1), assistant(1)];
    assert_eq!(select(&messages, Some(4), &DEFAULTS), [0, 3, 4]);
}

#[test]
fn min_messages_overrides_the_budget_for_one_huge_message() {
    let messages = [system(10), user(5), assistant(5), user(1000)];
    assert_eq!(select(&messages, Some(100), &DEFAULTS), [0, 3]);
    let window = select_window(&messages, Some(100), &DEFAULTS);
    assert!(window.over_budget);
    assert_eq!(window.tokens, 1010);
    // With minMessages 0 the huge message goes too.
    let zero = WindowOptions {
        min_messages: 0,
        ..DEFAULTS
    };
    assert_eq!(select(&messages, Some(100), &zero), [0]);
}

#[test]
fn min_messages_takes_whole_groups() {
    let messages = [
        user(1),
        calls(&["a", "b"]),
        result("a", 50),
        result("b", 50),
    ];
    // The newest message alone would split the group: the whole group comes, then the user
    // turn before it fits nowhere, so the window is the group.
    assert_eq!(select(&messages, Some(10), &DEFAULTS), [1, 2, 3]);
}

#[test]
fn min_messages_does_not_count_system_messages() {
    let messages = [system(1), user(50), system(1)];
    // The trailing system notice alone does not satisfy minMessages 1: the user turn comes too.
    assert_eq!(select(&messages, Some(3), &DEFAULTS), [0, 1, 2]);
}

#[test]
fn the_system_prompt_is_kept_even_when_it_alone_exceeds_the_budget() {
    let messages = [system(50), user(1), assistant(1)];
    let window = select_window(&messages, Some(10), &DEFAULTS);
    assert_eq!(window.indices().collect::<Vec<_>>(), [0, 2]);
    assert!(window.over_budget);
}

#[test]
fn no_budget_keeps_everything() {
    let messages = [
        system(100),
        user(1000),
        calls(&["a", "b"]),
        result("b", 2000),
        result("a", 1),
        assistant(500),
        user(1),
    ];
    let all: Vec<usize> = (0..messages.len()).collect();
    assert_eq!(select(&messages, None, &DEFAULTS), all);
    let window = select_window(&messages, None, &DEFAULTS);
    assert_eq!(window.kept, std::slice::from_ref(&(0..7)));
    assert!(!window.over_budget);
}

#[test]
fn keep_system_false_lets_the_system_prompt_go() {
    let messages = [system(10), user(1), assistant(1)];
    let options = WindowOptions {
        min_messages: 1,
        keep_system: false,
    };
    assert_eq!(select(&messages, Some(5), &options), [1, 2]);
    // Nothing cut off that could have been kept? The system prompt was: the window still
    // starts on the user turn.
    assert_eq!(select(&messages, Some(100), &options), [0, 1, 2]);
}

#[test]
fn empty_input() {
    assert!(select(&[], Some(10), &DEFAULTS).is_empty());
    assert!(select(&[], None, &DEFAULTS).is_empty());
    let window = select_window(&[], Some(0), &DEFAULTS);
    assert_eq!(window, Window::default());
}

#[test]
fn only_system_messages() {
    let messages = [system(5), system(5)];
    assert_eq!(select(&messages, Some(100), &DEFAULTS), [0, 1]);
    // Pinned even over budget; nothing else to keep.
    assert_eq!(select(&messages, Some(1), &DEFAULTS), [0, 1]);
}

#[test]
fn a_hundred_thousand_messages_is_linear() {
    let mut messages = vec![system(100)];
    for turn in 0..25_000 {
        let id = format!("call_{}", turn % 1000); // ids reused all along
        messages.push(user(10));
        messages.push(calls(&[&id]));
        messages.push(result(&id, 30));
        messages.push(assistant(20));
    }
    let started = std::time::Instant::now();
    let window = select_window(&messages, Some(128_000), &DEFAULTS);
    let elapsed = started.elapsed();
    assert!(window.tokens <= 128_000);
    assert_eq!(messages[window.kept[1].start].role(), Role::User);
    // Generous even for an unoptimised debug build; quadratic behaviour takes minutes.
    assert!(elapsed.as_secs() < 5, "took {elapsed:?}");
    let everything = select_window(&messages, None, &DEFAULTS);
    assert_eq!(everything.kept, std::slice::from_ref(&(0..messages.len())));
}
