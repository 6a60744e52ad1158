//! Preparing a compaction (docs/CONTRACT.md §9.3, OpenClaw's `prepareCompaction` and `findCutPoint`):
//! which entries of the active path are summarised, which stay verbatim, and where the kept
//! tail starts.
//!
//! The path is taken root first, the leaf last (`SessionTree::path`, OpenClaw's
//! `getBranch()`), and read as OpenClaw reads it:
//!
//! 1. **Anti-loop.** A path that ends in a `reset`, or in a `compaction` written by a hook
//!    (`fromHook`), is not compacted again (`Ok(None)`).
//! 2. **The previous boundary** is the last `compaction` or `reset`. After a compaction its
//!    summary is fed to the summariser (`previousSummary`) and the window starts at its
//!    `firstKeptEntryId`; after a reset its kept entries become a prelude that is summarised
//!    first, and the window starts after the reset.
//! 3. `tokensBefore` is `estimateContextTokens` of the path's context; the keep-recent budget
//!    is `keepRecentTokens / clamp(usageTokens / estimatedTotal, 1, keepRecentTokens)` plus the
//!    prelude's tokens.
//! 4. **The cut** (`find_cut_point`) is an assistant message or a turn start (user,
//!    bashExecution, branchSummary, compactionSummary, a custom message that is not a runtime
//!    context carrier) — never a toolResult, so a tool call and its results stay on one side.
//!    Walking back from the leaf it is the last such entry once `keepRecent` tokens are
//!    reached; it is capped at `preserveFromEntryId`, then moved back over metadata-only
//!    entries (labels, model changes, …). A cut inside a turn splits it: the turn's start up to
//!    the cut is summarised on its own (the turn prefix).
//! 5. Files read and modified are collected from the summarised tool calls and merged with the
//!    previous (non-hook) compaction's `details`.
//!
//! Not done here: OpenClaw's retention budget constraint (an automatic compaction that must
//! fit the foreground request shrinks the tail to fit). Its error text is kept for fidelity.

use std::collections::BTreeSet;

use pincer_plugin_abi::latest::{Message, Role};
use pincer_plugin_api::tokens::{estimate_context_tokens, estimate_message_tokens};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::settings::CompactionSettings;
use super::text::{tail_utf16, truncate_utf16, utf16_len};
use crate::session::context::{build_session_context, message_of, reset_replay};
use crate::session::tree::{Entry, EntryKind, EntryType, SessionTree};

/// OpenClaw's error when no recent message fits beside the foreground request.
pub const NO_RECENT_MESSAGE_FITS: &str = "No complete recent message fits beside the foreground prompt, tools, and summary. Reduce the request or select a larger context window.";
/// OpenClaw's error when the first kept entry has no id.
pub const FIRST_KEPT_ENTRY_HAS_NO_ID: &str =
    "First kept entry has no UUID - session may need migration";
/// The longest latest-unresolved-user-request OpenClaw keeps (UTF-16 units).
pub const MAX_LATEST_USER_REQUEST_CHARS: usize = 800;
/// What replaces the middle of a longer request.
pub const LATEST_USER_REQUEST_TRUNCATED_MARKER: &str =
    "\n[... latest user request truncated ...]\n";

/// Why a compaction could not be prepared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// No complete recent message fits beside the foreground request.
    #[error("{NO_RECENT_MESSAGE_FITS}")]
    NoRecentMessageFits,
    /// The entry where the kept tail starts has no id.
    #[error("{FIRST_KEPT_ENTRY_HAS_NO_ID} (run `pincer sessions show` on it; a file OpenClaw wrote before version 2 is migrated when pincer appends to it)")]
    FirstKeptEntryHasNoId,
}

impl PrepareError {
    /// A stable snake_case code (OpenClaw's `CompactionError` kinds).
    pub fn code(&self) -> &'static str {
        match self {
            PrepareError::NoRecentMessageFits => "summarization_failed",
            PrepareError::FirstKeptEntryHasNoId => "invalid_session",
        }
    }
}

/// The `details` stored on a compaction entry (OpenClaw's `CompactionDetails`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionDetails {
    /// Files read (and not modified) in the compacted history, sorted.
    pub read_files: Vec<String>,
    /// Files written or edited in the compacted history, sorted.
    pub modified_files: Vec<String>,
    /// The request a run owner resumes after compaction (at most 800 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_unresolved_user_request: Option<String>,
}

impl CompactionDetails {
    /// Reads details as OpenClaw's `parseCompactionDetails` does: both file lists must be
    /// arrays of strings; a request longer than 800 characters is dropped.
    pub fn parse(value: &Value) -> Option<Self> {
        let strings = |key: &str| -> Option<Vec<String>> {
            value
                .get(key)?
                .as_array()?
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        Some(CompactionDetails {
            read_files: strings("readFiles")?,
            modified_files: strings("modifiedFiles")?,
            latest_unresolved_user_request: value
                .get("latestUnresolvedUserRequest")
                .and_then(Value::as_str)
                .filter(|r| utf16_len(r) <= MAX_LATEST_USER_REQUEST_CHARS)
                .map(str::to_owned),
        })
    }
}

/// Files the summarised history touched (OpenClaw's `FileOperations`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileOperations {
    /// Paths read.
    pub read: BTreeSet<String>,
    /// Paths written (created).
    pub written: BTreeSet<String>,
    /// Paths edited.
    pub edited: BTreeSet<String>,
}

/// A tool name as file operations compare it: lower case, without an `mcp__<server>__` or
/// `<namespace>__` prefix.
fn file_tool_name(name: &str) -> String {
    let name = name.to_lowercase();
    let from = if name.starts_with("mcp__") { 5 } else { 0 };
    match name[from..].find("__") {
        Some(at) => name[from + at + 2..].to_owned(),
        None => name,
    }
}

impl FileOperations {
    /// Restores the lists an earlier compaction recorded (modified files count as edited).
    pub fn merge_details(&mut self, details: &CompactionDetails) {
        self.read.extend(details.read_files.iter().cloned());
        self.edited.extend(details.modified_files.iter().cloned());
    }

    /// Adds the file operations of one message: `read`/`write`/`edit` tool calls with a
    /// `path`, `file_path` or `filePath` argument, and the added and modified files an
    /// `apply_patch` result reports in `details.summary` (deleted files are left out).
    pub fn extract_from(&mut self, message: &Message) {
        match message.role() {
            Role::ToolResult => {
                if message.tool_name().map(file_tool_name).as_deref() != Some("apply_patch") {
                    return;
                }
                let Some(details) = message
                    .details_json()
                    .and_then(|d| serde_json::from_str::<Value>(d).ok())
                else {
                    return;
                };
                let paths = |key: &str| -> Vec<String> {
                    details["summary"][key]
                        .as_array()
                        .map(|list| {
                            list.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default()
                };
                self.written.extend(paths("added"));
                self.edited.extend(paths("modified"));
            }
            Role::Assistant => {
                for call in message.tool_calls() {
                    let Ok(args) = serde_json::from_str::<Value>(call.arguments_json) else {
                        continue;
                    };
                    let Some(path) = ["path", "file_path", "filePath"]
                        .iter()
                        .find_map(|key| args.get(*key).and_then(Value::as_str))
                    else {
                        continue;
                    };
                    let set = match file_tool_name(call.name).as_str() {
                        "read" => &mut self.read,
                        "write" => &mut self.written,
                        "edit" => &mut self.edited,
                        _ => continue,
                    };
                    set.insert(path.to_owned());
                }
            }
            _ => {}
        }
    }

    /// `(readFiles, modifiedFiles)`: modified = edited ∪ written; read = read − modified; both
    /// sorted.
    pub fn lists(&self) -> (Vec<String>, Vec<String>) {
        let modified: BTreeSet<&String> = self.edited.iter().chain(&self.written).collect();
        let read = self
            .read
            .iter()
            .filter(|f| !modified.contains(f))
            .cloned()
            .collect();
        (read, modified.into_iter().cloned().collect())
    }
}

/// What [`prepare_compaction`] decided (OpenClaw's `CompactionPreparation`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionPreparation {
    /// The entry where the kept tail starts.
    pub first_kept_entry_id: String,
    /// Messages summarised into the history summary (a reset's prelude first).
    pub messages_to_summarize: Vec<Message>,
    /// The start of a split turn, summarised on its own.
    pub turn_prefix_messages: Vec<Message>,
    /// Whether the cut splits a turn.
    pub is_split_turn: bool,
    /// The request a run owner resumes after compaction (overflow recovery only).
    pub latest_unresolved_user_request: Option<String>,
    /// `estimateContextTokens` of the path's context before compaction.
    pub tokens_before: u64,
    /// The previous compaction's summary, updated by this one.
    pub previous_summary: Option<String>,
    /// The previous (non-hook) compaction's details.
    pub previous_summary_details: Option<CompactionDetails>,
    /// Files the summarised history touched, with the previous compaction's.
    pub file_ops: FileOperations,
    /// The settings used.
    pub settings: CompactionSettings,
}

/// What a caller may add to [`prepare_compaction`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PrepareOptions<'a> {
    /// An admitted, unprocessed user entry that must stay verbatim: the cut is never after it.
    pub preserve_from_entry_id: Option<&'a str>,
    /// The run owner resumes the latest user request after compaction (overflow recovery):
    /// record it in the details and the summary.
    pub unresolved_request: bool,
}

/// One entry of the window, with what compaction sees of it.
struct Item<'t> {
    entry: &'t Entry,
    /// OpenClaw's `getMessageFromEntryForCompaction` (`None` for compactions and metadata).
    message: Option<Message>,
    /// Whether the projection gives a message (an empty branch summary does, with no text).
    projected: bool,
}

impl<'t> Item<'t> {
    fn of(entry: &'t Entry) -> Self {
        let projected_empty_branch = entry.entry_type == EntryType::BranchSummary;
        let message = match entry.entry_type {
            EntryType::Compaction | EntryType::Reset => None,
            _ => message_of(entry),
        };
        Item {
            projected: message.is_some() || projected_empty_branch,
            message,
            entry,
        }
    }

    fn is_turn_start(&self) -> bool {
        match &self.message {
            Some(m) => is_turn_start_message(m),
            // An empty branch summary is still a branchSummary message to OpenClaw.
            None => self.entry.entry_type == EntryType::BranchSummary,
        }
    }

    fn is_cut_point(&self) -> bool {
        self.message
            .as_ref()
            .is_some_and(|m| m.role() == Role::Assistant)
            || self.is_turn_start()
    }

    fn tokens(&self) -> u64 {
        self.message.as_ref().map_or(0, estimate_message_tokens)
    }
}

/// Whether a custom message only carries runtime context (`details.runtimeContextCarrier`).
fn is_runtime_context_carrier(message: &Message) -> bool {
    message.role() == Role::Custom
        && message
            .details_json()
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
            .is_some_and(|d| d["runtimeContextCarrier"] == Value::Bool(true))
}

/// Whether `message` starts a turn. pincer's `system` role (hosts that keep the prompt in the
/// transcript) starts one too.
fn is_turn_start_message(message: &Message) -> bool {
    match message.role() {
        Role::Custom => !is_runtime_context_carrier(message),
        Role::User
        | Role::BashExecution
        | Role::BranchSummary
        | Role::CompactionSummary
        | Role::System => true,
        Role::Assistant | Role::ToolResult | Role::Other => false,
    }
}

/// Where `find_cut_point` cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutPoint {
    /// The first entry kept verbatim (an index into the window).
    pub first_kept_index: usize,
    /// The start of the split turn, when the cut splits one.
    pub turn_start_index: Option<usize>,
    /// Whether the cut splits a turn.
    pub is_split_turn: bool,
}

/// OpenClaw's `findCutPoint` over `items[start..end]` (without the retention budget).
fn find_cut_point(
    items: &[Item<'_>],
    start: usize,
    end: usize,
    keep_recent: f64,
    preserve_from: Option<&str>,
) -> CutPoint {
    let whole = CutPoint {
        first_kept_index: start,
        turn_start_index: None,
        is_split_turn: false,
    };
    if start >= end {
        return whole;
    }
    let mut last_allowed = end - 1;
    let mut cut = None;
    for (i, item) in items.iter().enumerate().take(end).skip(start) {
        if preserve_from.is_some_and(|id| item.entry.id() == id) {
            last_allowed = i;
        }
        if item.is_cut_point() {
            cut = Some(i);
        }
    }
    let Some(mut cut) = cut else {
        return whole;
    };
    // The latest valid cut also covers a trailing tool result larger than the whole budget.
    let mut accumulated = 0u64;
    for i in (start..end).rev() {
        let item = &items[i];
        if item.message.is_none() {
            continue;
        }
        if item.is_cut_point() {
            cut = i;
        }
        accumulated += item.tokens();
        if accumulated as f64 >= keep_recent {
            break;
        }
    }
    cut = cut.min(last_allowed);
    // Metadata may follow the cut, but the cut moves back over metadata right before it.
    while cut > start {
        let previous = &items[cut - 1];
        if matches!(
            previous.entry.entry_type,
            EntryType::Compaction | EntryType::Reset | EntryType::Message(_)
        ) || previous.projected
        {
            break;
        }
        cut -= 1;
    }
    if items[cut].is_turn_start() {
        return CutPoint {
            first_kept_index: cut,
            turn_start_index: None,
            is_split_turn: false,
        };
    }
    let turn_start = (start..=cut).rev().find(|&i| items[i].is_turn_start());
    CutPoint {
        first_kept_index: cut,
        turn_start_index: turn_start,
        is_split_turn: turn_start.is_some(),
    }
}

/// The compaction view of a user message's content: its text parts joined with newlines.
fn compaction_text(message: &Message) -> String {
    message
        .content()
        .texts()
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last user request of `messages`, at most 800 characters (head and tail kept around
/// OpenClaw's marker).
pub fn latest_user_request(messages: &[Message]) -> Option<String> {
    let source = messages
        .iter()
        .rev()
        .filter(|m| m.role() == Role::User)
        .map(|m| compaction_text(m).trim().to_owned())
        .find(|text| !text.is_empty())?;
    if utf16_len(&source) <= MAX_LATEST_USER_REQUEST_CHARS {
        return Some(source);
    }
    let budget = MAX_LATEST_USER_REQUEST_CHARS - utf16_len(LATEST_USER_REQUEST_TRUNCATED_MARKER);
    let head = budget / 2;
    Some(format!(
        "{}{LATEST_USER_REQUEST_TRUNCATED_MARKER}{}",
        truncate_utf16(&source, head),
        tail_utf16(&source, budget - head)
    ))
}

/// A compaction entry's `details` and `fromHook`.
fn compaction_record(entry: &Entry) -> (Option<Value>, bool) {
    let record = entry.record();
    let from_hook = record.get("fromHook").and_then(Value::as_bool) == Some(true);
    (record.get("details").cloned(), from_hook)
}

/// Prepares the compaction of `leaf`'s path (the active leaf when `None`) in `tree`; `Ok(None)`
/// when there is nothing to compact (the anti-loop rule, or nothing before the cut).
///
/// # Errors
/// OpenClaw's two preparation errors ([`PrepareError`]).
pub fn prepare_compaction(
    tree: &SessionTree,
    leaf: Option<&str>,
    settings: &CompactionSettings,
    options: &PrepareOptions<'_>,
) -> Result<Option<CompactionPreparation>, PrepareError> {
    let path = tree.path(leaf);
    let Some(last) = path.last() else {
        return Ok(None);
    };
    // Anti-loop: a reset, or a compaction a hook wrote, ends this turn's compactions.
    match last.entry_type {
        EntryType::Reset => return Ok(None),
        EntryType::Compaction if compaction_record(last).1 => return Ok(None),
        _ => {}
    }
    let boundary = path
        .iter()
        .rposition(|e| matches!(e.entry_type, EntryType::Compaction | EntryType::Reset));
    let mut previous_summary = None;
    let mut previous_summary_details = None;
    let mut previous_request = None;
    let mut prelude: Vec<Message> = Vec::new();
    // The window: entries `window[start..]` (the path, or what follows a reset).
    let mut window: &[&Entry] = &path;
    let mut start = 0;
    // The boundary whose details are merged into the file lists (a compaction, not a reset).
    let mut merge_from: Option<usize> = None;
    if let Some(b) = boundary {
        let first_kept = match path[b].kind() {
            EntryKind::Compaction {
                summary,
                first_kept_entry_id,
                ..
            } => {
                previous_summary = Some(summary);
                let (details, from_hook) = compaction_record(path[b]);
                let details = details.as_ref().and_then(CompactionDetails::parse);
                previous_request = details
                    .as_ref()
                    .and_then(|d| d.latest_unresolved_user_request.clone());
                if !from_hook {
                    previous_summary_details = details;
                }
                first_kept_entry_id
            }
            EntryKind::Reset {
                first_kept_entry_id,
            } => first_kept_entry_id,
            _ => unreachable!("the boundary is a compaction or a reset"),
        };
        let first_kept_index = first_kept
            .as_deref()
            .and_then(|id| tree.position_on_path(&path, id));
        if path[b].entry_type == EntryType::Reset {
            if let Some(k) = first_kept_index.filter(|&k| k <= b) {
                prelude = reset_replay(&path[k..b])
                    .into_iter()
                    .map(|(_, m)| m)
                    .collect();
            }
            window = &path[b + 1..];
        } else {
            start = first_kept_index.unwrap_or(b + 1);
            merge_from = Some(b);
        }
    }
    let end = window.len();

    let context = build_session_context(tree, leaf);
    let latest_unresolved_user_request = if options.unresolved_request {
        latest_user_request(&context.messages).or(previous_request)
    } else {
        None
    };
    let usage = estimate_context_tokens(&context.messages);
    let tokens_before = usage.tokens;
    let total_estimated: u64 = context.messages.iter().map(estimate_message_tokens).sum();
    // Provider usage counts prompt and schema tokens the estimate does not: bring the trigger's
    // units to the walk's, capped so that a small transcript still frees something.
    let scale = if total_estimated > 0 {
        (usage.usage_tokens as f64 / total_estimated as f64)
            .max(1.0)
            .min(settings.keep_recent_tokens.max(1) as f64)
    } else {
        1.0
    };
    let prelude_tokens: u64 = prelude.iter().map(estimate_message_tokens).sum();
    let keep_recent = settings.keep_recent_tokens as f64 / scale + prelude_tokens as f64;

    let items: Vec<Item<'_>> = window
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if i < start {
                // Before the window: never read.
                Item {
                    entry: e,
                    message: None,
                    projected: false,
                }
            } else {
                Item::of(e)
            }
        })
        .collect();
    let cut = find_cut_point(
        &items,
        start,
        end,
        keep_recent,
        options.preserve_from_entry_id,
    );
    if cut.first_kept_index == end {
        return Err(PrepareError::NoRecentMessageFits);
    }
    let first_kept_entry_id = items[cut.first_kept_index].entry.id();
    if first_kept_entry_id.is_empty() {
        return Err(PrepareError::FirstKeptEntryHasNoId);
    }
    let history_end = match cut.turn_start_index {
        Some(turn_start) if cut.is_split_turn => turn_start,
        _ => cut.first_kept_index,
    };
    let mut messages_to_summarize = prelude;
    let mut turn_prefix_messages = Vec::new();
    for (i, item) in items
        .into_iter()
        .enumerate()
        .take(cut.first_kept_index)
        .skip(start)
    {
        if let Some(message) = item.message {
            if i < history_end {
                messages_to_summarize.push(message);
            } else {
                turn_prefix_messages.push(message);
            }
        }
    }
    if messages_to_summarize.is_empty() && turn_prefix_messages.is_empty() {
        return Ok(None);
    }
    let mut file_ops = FileOperations::default();
    if let Some(b) = merge_from {
        let (details, from_hook) = compaction_record(window[b]);
        if let Some(details) = details.as_ref().and_then(CompactionDetails::parse) {
            if !from_hook {
                file_ops.merge_details(&details);
            }
        }
    }
    for message in &messages_to_summarize {
        file_ops.extract_from(message);
    }
    if cut.is_split_turn {
        for message in &turn_prefix_messages {
            file_ops.extract_from(message);
        }
    }
    Ok(Some(CompactionPreparation {
        first_kept_entry_id: first_kept_entry_id.to_owned(),
        messages_to_summarize,
        turn_prefix_messages,
        is_split_turn: cut.is_split_turn,
        latest_unresolved_user_request,
        tokens_before,
        previous_summary,
        previous_summary_details,
        file_ops,
        settings: *settings,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree(lines: &[Value]) -> SessionTree {
        let mut text = String::from("{\"type\":\"session\",\"version\":4,\"id\":\"s\"}\n");
        for line in lines {
            text += &line.to_string();
            text.push('\n');
        }
        SessionTree::parse(&text)
    }

    fn message(id: &str, parent: Option<&str>, message: Value) -> Value {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z", "message": message})
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    fn assistant_call(id: &str, name: &str, args: Value) -> Value {
        json!({"role": "assistant", "content": [{"type": "toolCall", "id": id, "name": name, "arguments": args}]})
    }

    fn result(id: &str, text: &str) -> Value {
        json!({"role": "toolResult", "toolCallId": id, "toolName": "t", "content": [{"type": "text", "text": text}], "isError": false})
    }

    fn settings(keep: u64) -> CompactionSettings {
        CompactionSettings {
            enabled: true,
            reserve_tokens: 1000,
            keep_recent_tokens: keep,
        }
    }

    /// One turn: a user message, an assistant tool call, three large tool results, and the
    /// answer. A small keep-recent budget reached inside the results cuts at the answer or the
    /// call, never at a result.
    #[test]
    fn the_cut_never_lands_on_a_tool_result() {
        let big = "x".repeat(4000);
        let t = tree(&[
            message("u1", None, user("first question")),
            message("a1", Some("u1"), assistant_call("c1", "lookup", json!({}))),
            message("r1", Some("a1"), result("c1", &big)),
            message("r2", Some("r1"), result("c1", &big)),
            message("r3", Some("r2"), result("c1", &big)),
            message(
                "a2",
                Some("r3"),
                json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]}),
            ),
        ]);
        for keep in [1, 500, 1500, 2500, 100_000] {
            let prep =
                prepare_compaction(&t, None, &settings(keep), &PrepareOptions::default()).unwrap();
            if let Some(prep) = prep {
                let kept = t.get(&prep.first_kept_entry_id).unwrap();
                assert_ne!(
                    kept.entry_type,
                    EntryType::Message(Role::ToolResult),
                    "keep {keep}: cut at {}",
                    prep.first_kept_entry_id
                );
            }
        }
        // 1500 tokens are reached inside r2 (1000 tokens each): the cut is the latest valid
        // cut seen so far — a2 — and the turn is split: u1…r3 is the turn prefix.
        let prep = prepare_compaction(&t, None, &settings(1500), &PrepareOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(prep.first_kept_entry_id, "a2");
        assert!(prep.is_split_turn);
        assert!(prep.messages_to_summarize.is_empty());
        assert_eq!(prep.turn_prefix_messages.len(), 5, "u1, a1, r1, r2, r3");
    }

    #[test]
    fn a_reset_or_a_hook_compaction_at_the_leaf_stops_compaction() {
        let base = [
            message("u1", None, user("a")),
            message(
                "a1",
                Some("u1"),
                json!({"role": "assistant", "content": "b"}),
            ),
            message("u2", Some("a1"), user("c")),
        ];
        let mut with_reset = base.to_vec();
        with_reset.push(json!({"type": "reset", "id": "r", "parentId": "u2", "timestamp": "2026-01-01T00:00:00.000Z", "reason": "new"}));
        assert_eq!(
            prepare_compaction(
                &tree(&with_reset),
                None,
                &settings(0),
                &PrepareOptions::default()
            ),
            Ok(None)
        );
        let mut with_hook = base.to_vec();
        with_hook.push(json!({"type": "compaction", "id": "c", "parentId": "u2", "timestamp": "2026-01-01T00:00:00.000Z", "summary": "s", "firstKeptEntryId": "u2", "tokensBefore": 5, "fromHook": true}));
        assert_eq!(
            prepare_compaction(
                &tree(&with_hook),
                None,
                &settings(0),
                &PrepareOptions::default()
            ),
            Ok(None)
        );
        // Not from a hook: the kept tail can be compacted again.
        let mut plain = base.to_vec();
        plain.push(json!({"type": "compaction", "id": "c", "parentId": "u2", "timestamp": "2026-01-01T00:00:00.000Z", "summary": "s", "firstKeptEntryId": "a1", "tokensBefore": 5, "details": {"readFiles": ["/a"], "modifiedFiles": []}}));
        let prep = prepare_compaction(
            &tree(&plain),
            None,
            &settings(0),
            &PrepareOptions::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(prep.previous_summary.as_deref(), Some("s"));
        assert_eq!(prep.first_kept_entry_id, "u2");
        assert_eq!(
            prep.messages_to_summarize.len(),
            1,
            "a1 only: u1 was summarised"
        );
        assert_eq!(
            prep.file_ops.lists().0,
            ["/a"],
            "merged from the previous details"
        );
    }

    #[test]
    fn file_operations_and_the_unresolved_request() {
        let t = tree(&[
            message("u1", None, user("fix the bug")),
            message(
                "a1",
                Some("u1"),
                assistant_call("c1", "read", json!({"path": "/src/a.rs"})),
            ),
            message("r1", Some("a1"), result("c1", "fn a() {}")),
            message(
                "a2",
                Some("r1"),
                assistant_call("c2", "mcp__fs__edit", json!({"file_path": "/src/b.rs"})),
            ),
            message("r2", Some("a2"), result("c2", "ok")),
            message("u2", Some("r2"), user(&"y".repeat(2000))),
            message(
                "a3",
                Some("u2"),
                json!({"role": "assistant", "content": "working"}),
            ),
        ]);
        let options = PrepareOptions {
            unresolved_request: true,
            ..PrepareOptions::default()
        };
        let prep = prepare_compaction(&t, None, &settings(1), &options)
            .unwrap()
            .unwrap();
        assert_eq!(prep.first_kept_entry_id, "a3");
        let (read, modified) = prep.file_ops.lists();
        assert_eq!(
            (read, modified),
            (vec!["/src/a.rs".to_owned()], vec!["/src/b.rs".to_owned()])
        );
        let request = prep.latest_unresolved_user_request.unwrap();
        assert_eq!(utf16_len(&request), MAX_LATEST_USER_REQUEST_CHARS);
        assert!(request.contains(LATEST_USER_REQUEST_TRUNCATED_MARKER));
    }

    #[test]
    fn the_cut_moves_back_over_metadata_and_stops_at_preserved_entries() {
        let t = tree(&[
            message("u1", None, user("a")),
            message(
                "a1",
                Some("u1"),
                json!({"role": "assistant", "content": "b"}),
            ),
            json!({"type": "label", "id": "l", "parentId": "a1", "timestamp": "2026-01-01T00:00:00.000Z", "targetId": "u1", "label": "x"}),
            message("u2", Some("l"), user("c")),
            message(
                "a2",
                Some("u2"),
                json!({"role": "assistant", "content": "d"}),
            ),
        ]);
        let prep = prepare_compaction(&t, None, &settings(2), &PrepareOptions::default())
            .unwrap()
            .unwrap();
        // The walk stops at a2 (cut point, 1 token), then u2 (2 tokens): cut u2, then back
        // over the label.
        assert_eq!(prep.first_kept_entry_id, "l");
        let preserve = PrepareOptions {
            preserve_from_entry_id: Some("a1"),
            ..PrepareOptions::default()
        };
        let prep = prepare_compaction(&t, None, &settings(1), &preserve)
            .unwrap()
            .unwrap();
        assert_eq!(prep.first_kept_entry_id, "a1");
        assert!(prep.is_split_turn);
    }
}
