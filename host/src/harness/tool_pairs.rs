//! Tool-pair repair: what the model sees never holds a tool result without its call, nor a call
//! without a result.
//!
//! Pairing is positional, not by id alone (τ-bench reuses call ids): a tool result answers a
//! call of the nearest assistant message before it that is still unanswered. A result with no
//! such call is dropped; a call left unanswered when the next non-result message (or the end)
//! comes gets a synthetic error result, `No result provided`, as OpenClaw's transcript repair
//! gives it. Each message keeps the session entry it came from (none — the entry type's
//! default — for a synthetic one).

use pincer_plugin_abi::latest::{Message, Role};

/// The text of a synthetic result for an unanswered call.
pub const NO_RESULT_TEXT: &str = "No result provided";

/// What repair did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Repairs {
    /// Tool results dropped: no open call of theirs came before.
    pub orphan_results_dropped: usize,
    /// Synthetic results added for calls nothing answered.
    pub missing_results_added: usize,
}

/// Repairs `messages` (with the entry each came from) in place; returns what it did. A
/// synthetic result gets `E::default()` as its entry.
pub fn repair_tool_pairs<E: Default>(messages: &mut Vec<(Message, E)>) -> Repairs {
    let mut repairs = Repairs::default();
    let mut out: Vec<(Message, E)> = Vec::with_capacity(messages.len());
    // Calls of the last assistant message not answered yet: (id, tool name).
    let mut open: Vec<(String, String)> = Vec::new();
    let close =
        |open: &mut Vec<(String, String)>, out: &mut Vec<(Message, E)>, repairs: &mut Repairs| {
            for (id, name) in open.drain(..) {
                out.push((
                    Message::tool_result(id, name, NO_RESULT_TEXT, true),
                    E::default(),
                ));
                repairs.missing_results_added += 1;
            }
        };
    for (message, entry) in messages.drain(..) {
        match message.role() {
            Role::ToolResult => {
                let id = message.tool_result_id().unwrap_or_default();
                match open.iter().position(|(open_id, _)| open_id == id) {
                    Some(at) => {
                        open.remove(at);
                        out.push((message, entry));
                    }
                    None => repairs.orphan_results_dropped += 1,
                }
            }
            Role::Assistant => {
                close(&mut open, &mut out, &mut repairs);
                open = message
                    .tool_calls()
                    .map(|call| (call.id.to_owned(), call.name.to_owned()))
                    .collect();
                out.push((message, entry));
            }
            _ => {
                close(&mut open, &mut out, &mut repairs);
                out.push((message, entry));
            }
        }
    }
    close(&mut open, &mut out, &mut repairs);
    *messages = out;
    repairs
}

#[cfg(any(test, feature = "test-support"))]
/// Whether `messages` are well paired (what [`repair_tool_pairs`] guarantees).
pub fn tool_pairs_are_sound(messages: &[Message]) -> bool {
    let mut copy: Vec<(Message, ())> = messages.iter().cloned().map(|m| (m, ())).collect();
    repair_tool_pairs(&mut copy) == Repairs::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_plugin_abi::latest::ContentBlock;
    use serde_json::json;

    fn call(id: &str) -> Message {
        Message::assistant_blocks(vec![ContentBlock::tool_call(id, "lookup", &json!({}))])
    }

    fn result(id: &str) -> Message {
        Message::tool_result(id, "lookup", "ok", false)
    }

    #[test]
    fn orphans_are_dropped_and_missing_results_added_positionally() {
        let mut messages: Vec<(Message, Option<String>)> = vec![
            result("a"), // orphan: before any call
            call("a"),
            result("a"),
            result("a"), // a second answer to a call already answered: orphan
            Message::user("next"),
            call("a"), // the same id again (τ-bench reuses ids), never answered
            Message::user("again"),
        ]
        .into_iter()
        .map(|m| (m, Some("e".to_owned())))
        .collect();
        let repairs = repair_tool_pairs(&mut messages);
        assert_eq!(
            repairs,
            Repairs {
                orphan_results_dropped: 2,
                missing_results_added: 1
            }
        );
        let roles: Vec<Role> = messages.iter().map(|(m, _)| m.role()).collect();
        use Role::*;
        assert_eq!(
            roles,
            vec![Assistant, ToolResult, User, Assistant, ToolResult, User]
        );
        assert_eq!(messages[4].1, None, "the synthetic result has no entry");
        assert!(tool_pairs_are_sound(
            &messages.into_iter().map(|(m, _)| m).collect::<Vec<_>>()
        ));
    }
}
