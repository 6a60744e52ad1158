//! `buildSessionContext` and `convertToLlm`, as OpenClaw 2026.9.6 computes them (the golden
//! data's README): the messages the model sees for a leaf of a session tree, and their
//! LLM-facing projection. Differentially tested against OpenClaw's own output on every golden
//! case (`tests/tests/sessions.rs`).

use pincer_plugin_abi::latest::{EntryId, Message, Role};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::tree::{Entry, EntryKind, EntryType, SessionTree};

/// What OpenClaw's `buildSessionContext` returns: `{messages, thinkingLevel, model}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionContext {
    /// The messages, in prompt order.
    pub messages: Vec<Message>,
    /// The last `thinking_level_change` on the path (`off` by default).
    pub thinking_level: String,
    /// `{provider, modelId}` of the last `model_change` or assistant message on the path.
    pub model: Option<Value>,
    /// The session entry each message came from (beside the messages, never inside them), as
    /// engine requests take it.
    #[serde(skip)]
    pub entry_ids: Vec<EntryId>,
}

/// The text OpenClaw puts before a compaction summary in the LLM projection.
const COMPACTION_PREFIX: &str =
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
/// …and after it.
const COMPACTION_SUFFIX: &str = "\n</summary>";
/// The text before a branch summary (which has no newline before its closing tag).
const BRANCH_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
/// …and after it.
const BRANCH_SUFFIX: &str = "</summary>";

/// The context of `leaf` (the active leaf when `None`).
///
/// Only the entries that give the context are parsed: the last thinking-level change, the last
/// model change or assistant message, the boundary, and the messages after it (on both cores
/// when there are many).
pub fn build_session_context(tree: &SessionTree, leaf: Option<&str>) -> SessionContext {
    let path = tree.path(leaf);
    // The last of each on the path wins: search from the leaf back.
    let thinking_level = path
        .iter()
        .rev()
        .find(|e| e.entry_type == EntryType::ThinkingLevelChange)
        .and_then(|e| match e.kind() {
            EntryKind::ThinkingLevelChange(level) => Some(level),
            _ => None,
        })
        .unwrap_or_else(|| "off".to_owned());
    let model = path
        .iter()
        .rev()
        .find(|e| {
            matches!(
                e.entry_type,
                EntryType::ModelChange | EntryType::Message(Role::Assistant)
            )
        })
        .and_then(|e| match e.kind() {
            EntryKind::ModelChange { provider, model_id } => {
                Some(json!({"provider": provider, "modelId": model_id}))
            }
            EntryKind::Message(message) => Some(json!({
                "provider": message.provider(),
                "modelId": message.model(),
            })),
            _ => None,
        });
    let boundary = path
        .iter()
        .rposition(|e| matches!(e.entry_type, EntryType::Compaction | EntryType::Reset));
    let mut messages: Vec<(EntryId, Message)> = Vec::new();
    match boundary {
        None => messages.extend(messages_of(&path)),
        Some(b) => {
            let kept_from = |first: Option<String>| {
                first
                    .as_deref()
                    .and_then(|id| tree.position_on_path(&path[..b], id))
            };
            match path[b].kind() {
                EntryKind::Compaction {
                    summary,
                    first_kept_entry_id,
                    tokens_before,
                } => {
                    let mut summary_message = Map::new();
                    summary_message.insert("role".into(), "compactionSummary".into());
                    summary_message.insert("summary".into(), summary.into());
                    summary_message.insert("tokensBefore".into(), tokens_before);
                    if let Some(ms) = path[b].timestamp_ms() {
                        summary_message.insert("timestamp".into(), ms.into());
                    }
                    if let Ok(m) = Message::from_value(Value::Object(summary_message)) {
                        messages.push((EntryId::new(path[b].id()), m));
                    }
                    if let Some(k) = kept_from(first_kept_entry_id) {
                        messages.extend(messages_of(&path[k..b]));
                    }
                }
                EntryKind::Reset {
                    first_kept_entry_id,
                } => {
                    if let Some(k) = kept_from(first_kept_entry_id) {
                        messages.extend(
                            reset_replay(&path[k..b])
                                .into_iter()
                                .map(|(id, m)| (EntryId::new(id), m)),
                        );
                    }
                }
                _ => unreachable!("the boundary is a compaction or a reset"),
            }
            messages.extend(messages_of(&path[b + 1..]));
        }
    }
    let (entry_ids, messages) = messages.into_iter().unzip();
    SessionContext {
        messages,
        thinking_level,
        model,
        entry_ids,
    }
}

/// The messages `entries` yield in the context, with their entry ids; parsed on two threads
/// when there are many.
fn messages_of(entries: &[&Entry]) -> Vec<(EntryId, Message)> {
    fn parse(entries: &[&Entry]) -> Vec<(EntryId, Message)> {
        entries
            .iter()
            .filter_map(|e| message_of(e).map(|m| (EntryId::new(e.id()), m)))
            .collect()
    }
    const PARALLEL_FROM: usize = 2_000;
    if entries.len() < PARALLEL_FROM {
        return parse(entries);
    }
    let (first, second) = entries.split_at(entries.len() / 2);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| parse(second));
        let mut mine = parse(first);
        // A panic there is a bug here; parse again on this thread rather than lose messages.
        mine.extend(other.join().unwrap_or_else(|_| parse(second)));
        mine
    })
}

/// The kept range of a reset: user and assistant messages, and the tool results whose call is
/// kept too (OpenClaw's `selectResetKeptEntries`), with their entry ids.
pub fn reset_replay(range: &[&Entry]) -> Vec<(String, Message)> {
    let kept: Vec<(&str, Message)> = range
        .iter()
        .filter(|e| {
            matches!(
                e.entry_type,
                EntryType::Message(Role::User | Role::Assistant | Role::ToolResult)
            )
        })
        .filter_map(|e| e.message().map(|m| (e.id(), m)))
        .filter(|(_, m)| !m.is_excluded_from_context())
        .collect();
    let calls: std::collections::HashSet<String> = kept
        .iter()
        .flat_map(|(_, m)| m.tool_call_ids().map(str::to_owned))
        .collect();
    kept.into_iter()
        .filter(|(_, m)| {
            m.role() != Role::ToolResult || m.tool_result_id().is_some_and(|id| calls.contains(id))
        })
        .map(|(id, m)| (id.to_owned(), m))
        .collect()
}

/// The message an entry yields in the context, if any (`message` unless excluded,
/// `custom_message`, a non-empty `branch_summary`).
pub fn message_of(entry: &Entry) -> Option<Message> {
    match entry.entry_type {
        EntryType::Message(_) => entry.message().filter(|m| !m.is_excluded_from_context()),
        EntryType::CustomMessage => {
            let record = entry.record();
            let mut m = Map::new();
            m.insert("role".into(), "custom".into());
            for key in ["customType", "content", "display", "details"] {
                if let Some(value) = record.get(key) {
                    m.insert(key.into(), value.clone());
                }
            }
            // From the record already parsed, not a second parse of the line.
            let timestamp = record.get("timestamp").and_then(Value::as_str);
            if let Some(ms) = timestamp.and_then(super::time::parse_iso_ms) {
                m.insert("timestamp".into(), ms.into());
            }
            Message::from_value(Value::Object(m)).ok()
        }
        EntryType::BranchSummary => {
            let EntryKind::BranchSummary { from_id, summary } = entry.kind() else {
                return None;
            };
            if summary.is_empty() {
                return None;
            }
            let mut m = Map::new();
            m.insert("role".into(), "branchSummary".into());
            m.insert("summary".into(), summary.into());
            m.insert("fromId".into(), from_id);
            if let Some(ms) = entry.timestamp_ms() {
                m.insert("timestamp".into(), ms.into());
            }
            Message::from_value(Value::Object(m)).ok()
        }
        _ => None,
    }
}

/// OpenClaw's `convertToLlm`: custom messages become user messages (string content as one text
/// block), summaries become user messages with OpenClaw's fixed framing; user, assistant and
/// toolResult messages pass unchanged; anything else is left out.
pub fn convert_to_llm(messages: &[Message]) -> Vec<Value> {
    let user = |content: Value, timestamp: Option<i64>| {
        let mut m = Map::new();
        m.insert("role".into(), "user".into());
        m.insert("content".into(), content);
        if let Some(ts) = timestamp {
            m.insert("timestamp".into(), ts.into());
        }
        Value::Object(m)
    };
    let text_block = |text: String| json!([{"type": "text", "text": text}]);
    messages
        .iter()
        .filter_map(|m| match m.role() {
            Role::User | Role::Assistant | Role::ToolResult => Some(m.to_value()),
            Role::Custom => {
                let content = match m.to_value().get("content") {
                    Some(Value::String(text)) => text_block(text.clone()),
                    Some(other) => other.clone(),
                    None => json!([]),
                };
                Some(user(content, m.timestamp()))
            }
            Role::CompactionSummary => Some(user(
                text_block(format!(
                    "{COMPACTION_PREFIX}{}{COMPACTION_SUFFIX}",
                    m.summary().unwrap_or_default()
                )),
                m.timestamp(),
            )),
            Role::BranchSummary => Some(user(
                text_block(format!(
                    "{BRANCH_PREFIX}{}{BRANCH_SUFFIX}",
                    m.summary().unwrap_or_default()
                )),
                m.timestamp(),
            )),
            _ => None,
        })
        .collect()
}
