//! Running a compaction (docs/CONTRACT.md §9.3, OpenClaw's `compact()`), and compacting a session file
//! ([`compact_session`]).
//!
//! The summary is assembled as OpenClaw assembles it: the history summary (updating the
//! previous one; output budget 0.8 of the reserve), for a split turn the turn-prefix summary
//! (0.5 of the reserve) after `"\n\n---\n\n**Turn Context (split turn):**\n\n"`, then the file
//! lists (`<read-files>`, `<modified-files>`, 900 characters each), and, before everything, the
//! optional `## Latest unresolved user request` block. The whole is capped at 16000 characters
//! with the marker `"\n\n[Compaction summary truncated to fit budget]"`, the turn context and
//! file lists kept at the end.
//!
//! [`compact_session`] opens the file with [`SessionWriter::open`] (one writer per file),
//! prepares, summarises, and **appends** a `compaction` entry: history is never rewritten.
//! "Nothing to compact" is an outcome, not an error ([`CompactOutcome::Skipped`]).

use std::fmt;
use std::path::Path;

use pincer_plugin_abi::latest::Message;
use pincer_plugin_api::tokens::estimate_context_tokens;
use serde_json::Value;

use super::prepare::{
    prepare_compaction, CompactionDetails, CompactionPreparation, PrepareError, PrepareOptions,
};
use super::settings::{should_compact, CompactionSettings};
use super::summarizer::{Summarizer, SummaryError, SummaryKind, SummaryRequest};
use super::text::{truncate_utf16, utf16_len};
use crate::session::context::build_session_context;
use crate::session::tree::{EntryType, SessionTree};
use crate::session::writer::{Durability, SessionWriteError, SessionWriter};

/// The longest summary OpenClaw persists (UTF-16 units).
pub const MAX_COMPACTION_SUMMARY_CHARS: usize = 16_000;
/// What marks a summary cut to fit.
pub const SUMMARY_TRUNCATED_MARKER: &str = "\n\n[Compaction summary truncated to fit budget]";
/// What precedes the summary of a split turn's start.
pub const TURN_CONTEXT_PREFIX: &str = "\n\n---\n\n**Turn Context (split turn):**\n\n";
/// The longest each file list gets (UTF-16 units, tags included).
pub const MAX_FILE_OPS_LIST_CHARS: usize = 900;
/// The history summary when there was none and only a turn prefix is summarised.
const NO_PRIOR_HISTORY: &str = "No prior history.";

/// `summary` within `max_chars` (UTF-16 units): cut, with [`SUMMARY_TRUNCATED_MARKER`] before
/// `preserved_suffix` when the summary ends with it (OpenClaw's `capCompactionSummary`).
///
/// ```
/// use pincer_host::compaction::{cap_compaction_summary, SUMMARY_TRUNCATED_MARKER};
/// let long = "x".repeat(20_000);
/// let capped = cap_compaction_summary(&long, 16_000, "");
/// assert_eq!(capped.len(), 16_000);
/// assert!(capped.ends_with(SUMMARY_TRUNCATED_MARKER));
/// ```
pub fn cap_compaction_summary(summary: &str, max_chars: usize, preserved_suffix: &str) -> String {
    if max_chars == 0 || utf16_len(summary) <= max_chars {
        return summary.to_owned();
    }
    let suffix = if !preserved_suffix.is_empty() && summary.ends_with(preserved_suffix) {
        preserved_suffix
    } else {
        ""
    };
    let marker = utf16_len(SUMMARY_TRUNCATED_MARKER);
    if max_chars < marker + utf16_len(suffix) {
        return truncate_utf16(summary, max_chars).to_owned();
    }
    let budget = max_chars - marker - utf16_len(suffix);
    let prefix = &summary[..summary.len() - suffix.len()];
    format!(
        "{}{SUMMARY_TRUNCATED_MARKER}{suffix}",
        truncate_utf16(prefix, budget)
    )
}

/// One file list, `<tag>\n…\n</tag>`, within `max_chars`; the overflow as `...and N more`.
fn format_bounded_file_list(tag: &str, files: &[String], max_chars: usize) -> String {
    if files.is_empty() || max_chars == 0 {
        return String::new();
    }
    let open = format!("<{tag}>\n");
    let close = format!("\n</{tag}>");
    let mut lines: Vec<String> = Vec::new();
    let mut used = utf16_len(&open) + utf16_len(&close);
    for (i, file) in files.iter().enumerate() {
        let line = format!("{file}\n");
        let remaining = files.len() - i - 1;
        let overflow = if remaining > 0 {
            format!("...and {remaining} more\n")
        } else {
            String::new()
        };
        if used + utf16_len(&line) + utf16_len(&overflow) > max_chars {
            let overflow = format!("...and {} more\n", files.len() - i);
            if used + utf16_len(&overflow) <= max_chars {
                lines.push(overflow);
            }
            break;
        }
        used += utf16_len(&line);
        lines.push(line);
    }
    if lines.is_empty() {
        return String::new();
    }
    format!("{open}{}{close}", lines.concat().trim_end())
}

/// The file lists appended to a summary (OpenClaw's `formatFileOperations`): empty, or
/// `"\n\n<read-files>…</read-files>\n\n<modified-files>…</modified-files>"`.
pub fn format_file_operations(read_files: &[String], modified_files: &[String]) -> String {
    let sections: Vec<String> = [
        format_bounded_file_list("read-files", read_files, MAX_FILE_OPS_LIST_CHARS),
        format_bounded_file_list("modified-files", modified_files, MAX_FILE_OPS_LIST_CHARS),
    ]
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect();
    if sections.is_empty() {
        String::new()
    } else {
        format!("\n\n{}", sections.join("\n\n"))
    }
}

/// A compaction's result, ready to be appended (OpenClaw's `CompactionResult`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionResult {
    /// The summary that replaces the compacted history.
    pub summary: String,
    /// Where the kept history starts.
    pub first_kept_entry_id: String,
    /// The estimated context before compaction.
    pub tokens_before: u64,
    /// The files and the unresolved request, stored as the entry's `details`.
    pub details: CompactionDetails,
}

/// The output budget of a summary: `floor(ratio × reserve)`.
fn output_tokens(kind: SummaryKind, reserve_tokens: u64) -> u64 {
    (kind.reserve_ratio() * reserve_tokens as f64).floor() as u64
}

/// Writes the summary of `preparation` with `summarizer` and assembles it (see the module
/// docs). `custom_instructions` is the `/compact <text>` focus.
///
/// # Errors
/// When the summariser fails.
pub fn compact(
    preparation: &CompactionPreparation,
    summarizer: &dyn Summarizer,
    custom_instructions: Option<&str>,
) -> Result<CompactionResult, SummaryError> {
    let focus = custom_instructions.map(str::trim).filter(|f| !f.is_empty());
    let unresolved = preparation
        .latest_unresolved_user_request
        .as_deref()
        .map(|r| {
            format!("The run owner will resume this request after compaction. Preserve it as current work.\nLatest unresolved user request: {r}")
        });
    let instructions = [focus.map(str::to_owned), unresolved]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n\n");
    let instructions = (!instructions.is_empty()).then_some(instructions.as_str());
    let reserve = preparation.settings.reserve_tokens;

    let summarize_turn_prefix =
        preparation.is_split_turn && !preparation.turn_prefix_messages.is_empty();
    let previous_file_ops = preparation
        .previous_summary_details
        .as_ref()
        .map(|d| format_file_operations(&d.read_files, &d.modified_files))
        .unwrap_or_default();
    let previous_summary = preparation.previous_summary.as_deref();
    let history = if !preparation.messages_to_summarize.is_empty() || !summarize_turn_prefix {
        summarizer.summarize(&SummaryRequest {
            messages: &preparation.messages_to_summarize,
            previous_summary,
            custom_instructions: instructions,
            max_output_tokens: output_tokens(SummaryKind::History, reserve),
            kind: SummaryKind::History,
        })?
    } else {
        // Only a turn prefix: the previous summary stands, without its old file lists.
        match previous_summary {
            Some(p) if !previous_file_ops.is_empty() && p.ends_with(&previous_file_ops) => {
                p[..p.len() - previous_file_ops.len()].to_owned()
            }
            Some(p) => p.to_owned(),
            None => NO_PRIOR_HISTORY.to_owned(),
        }
    };
    let latest_context = if summarize_turn_prefix {
        let prefix = summarizer.summarize(&SummaryRequest {
            messages: &preparation.turn_prefix_messages,
            previous_summary: None,
            custom_instructions: instructions,
            max_output_tokens: output_tokens(SummaryKind::TurnPrefix, reserve),
            kind: SummaryKind::TurnPrefix,
        })?;
        format!("{TURN_CONTEXT_PREFIX}{prefix}")
    } else {
        String::new()
    };

    let (read_files, modified_files) = preparation.file_ops.lists();
    let file_operations = format_file_operations(&read_files, &modified_files);
    let unresolved_block = preparation
        .latest_unresolved_user_request
        .as_ref()
        .map(|r| {
            format!(
                "## Latest unresolved user request\n{}\n\n",
                Value::String(r.clone())
            )
        })
        .unwrap_or_default();
    // OpenClaw's fitting without a foreground budget: render at the 16000-character cap.
    let max_chars = MAX_COMPACTION_SUMMARY_CHARS;
    let required = utf16_len(&file_operations) + utf16_len(&unresolved_block);
    let preserved_history = utf16_len(&history).min(max_chars / 2);
    let latest_budget = max_chars
        .saturating_sub(required)
        .saturating_sub(utf16_len(SUMMARY_TRUNCATED_MARKER))
        .saturating_sub(preserved_history);
    let suffix = format!(
        "{}{file_operations}",
        if latest_budget > 0 {
            cap_compaction_summary(&latest_context, latest_budget, "")
        } else {
            String::new()
        }
    );
    let summary = format!(
        "{unresolved_block}{}",
        cap_compaction_summary(
            &format!("{history}{suffix}"),
            max_chars - utf16_len(&unresolved_block),
            &suffix,
        )
    );
    Ok(CompactionResult {
        summary,
        first_kept_entry_id: preparation.first_kept_entry_id.clone(),
        tokens_before: preparation.tokens_before,
        details: CompactionDetails {
            read_files,
            modified_files,
            latest_unresolved_user_request: preparation.latest_unresolved_user_request.clone(),
        },
    })
}

/// How [`compact_session`] runs.
#[derive(Debug, Clone, Default)]
pub struct CompactOptions {
    /// Compact even below the threshold; with nothing before the keep-recent budget, compact
    /// down to the last message (OpenClaw's manual `/compact`).
    pub force: bool,
    /// `/compact <text>`: what the summary should focus on.
    pub custom_instructions: Option<String>,
    /// The token count the caller observed (reported as `tokensBefore` when given, and
    /// compared with the threshold when not forced).
    pub current_token_count: Option<u64>,
    /// The model's context window, when known: without `force`, a context at or below
    /// `window - reserve` is not compacted.
    pub context_window: Option<u64>,
    /// The caller resumes the latest user request after compaction (overflow recovery). It is
    /// also kept, without being asked, when the session's path ends inside a turn (on the
    /// user's message or on tool results rather than on an answer).
    pub unresolved_request: bool,
    /// How the appended entry reaches the disk.
    pub durability: Durability,
}

/// A compaction that was appended to a session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionCompaction {
    /// The appended `compaction` entry's id.
    pub entry_id: String,
    /// The summary.
    pub summary: String,
    /// Where the kept history starts.
    pub first_kept_entry_id: String,
    /// The context before: the observed count when the caller gave one, else the estimate.
    pub tokens_before: u64,
    /// `estimateContextTokens` of the context after the compaction.
    pub tokens_after: u64,
    /// The entry's details.
    pub details: CompactionDetails,
}

/// Why nothing was compacted (not a failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Nothing lies before the kept tail (OpenClaw: `Nothing to compact (session too small)`).
    NothingToCompact,
    /// The session ends in a compaction that left nothing more to summarise.
    AlreadyCompacted,
    /// The last entry is a reset or a hook's compaction: no compaction right after it.
    AntiLoop,
    /// Not forced, and the context is within the threshold.
    BelowThreshold {
        /// The context's tokens.
        tokens: u64,
        /// The window.
        window: u64,
        /// The reserve.
        reserve: u64,
    },
    /// Not forced, and automatic compaction is disabled.
    Disabled,
    /// The summary and the kept history would be no smaller than the context: nothing is
    /// appended.
    NotSmaller {
        /// The context's estimate before.
        before: u64,
        /// The estimate the compaction would have left.
        after: u64,
    },
}

/// Why a compaction that claims `compacted` is not one: its tokens did not go down (`before`
/// unknown, i.e. 0, or `after` unknown claims nothing). The one rule the built-in compaction,
/// the harness and `pincer compact` apply.
pub fn not_smaller(before: u64, after: Option<u64>) -> Option<SkipReason> {
    let after = after?;
    (before > 0 && after >= before).then_some(SkipReason::NotSmaller { before, after })
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::NothingToCompact => f.write_str("Nothing to compact (session too small)"),
            SkipReason::AlreadyCompacted => f.write_str("Already compacted"),
            SkipReason::AntiLoop => f.write_str(
                "Nothing to compact: the session ends in a reset or a hook's compaction (anti-loop rule)",
            ),
            SkipReason::BelowThreshold {
                tokens,
                window,
                reserve,
            } => write!(
                f,
                "below threshold: {tokens} tokens is within the {window}-token window less its {reserve}-token reserve"
            ),
            SkipReason::Disabled => f.write_str("compaction is disabled"),
            SkipReason::NotSmaller { before, after } => write!(
                f,
                "not smaller: the compacted context would be {after} tokens, the context is {before} ({before} -> {after}); nothing was appended"
            ),
        }
    }
}

/// What [`compact_session`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum CompactOutcome {
    /// A compaction entry was appended.
    Compacted(SessionCompaction),
    /// Nothing was compacted, and nothing is wrong.
    Skipped(SkipReason),
}

/// Why a session could not be compacted.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// The session could not be opened or appended to.
    #[error(transparent)]
    Session(#[from] SessionWriteError),
    /// The compaction could not be prepared.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The summary could not be written.
    #[error(transparent)]
    Summary(#[from] SummaryError),
    /// The caller aborted; nothing was appended.
    #[error("Compaction cancelled: the caller aborted before the summary was appended; the session is unchanged")]
    Aborted,
}

impl CompactError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            CompactError::Session(e) => e.code(),
            CompactError::Prepare(e) => e.code(),
            CompactError::Summary(e) => e.code(),
            CompactError::Aborted => "compaction_aborted",
        }
    }
}

/// Compacts the session file at `path` (its active leaf) with `settings` and `summarizer`.
///
/// # Errors
/// See [`CompactError`]; on any error nothing is appended.
pub fn compact_session(
    path: &Path,
    settings: &CompactionSettings,
    summarizer: &dyn Summarizer,
    options: &CompactOptions,
) -> Result<CompactOutcome, CompactError> {
    compact_session_until(path, settings, summarizer, options, &|| false)
}

/// [`compact_session`], stopping with [`CompactError::Aborted`] when `aborted()` turns true
/// before the entry is appended.
///
/// # Errors
/// See [`CompactError`].
pub fn compact_session_until(
    path: &Path,
    settings: &CompactionSettings,
    summarizer: &dyn Summarizer,
    options: &CompactOptions,
    aborted: &dyn Fn() -> bool,
) -> Result<CompactOutcome, CompactError> {
    let mut writer = SessionWriter::open(path, options.durability)?;
    let tree = writer.tree();
    if !options.force {
        if !settings.enabled {
            return Ok(CompactOutcome::Skipped(SkipReason::Disabled));
        }
        if let Some(window) = options.context_window.filter(|&w| w > 0) {
            let tokens = options.current_token_count.unwrap_or_else(|| {
                estimate_context_tokens(&build_session_context(tree, None).messages).tokens
            });
            if !should_compact(tokens, window, settings) {
                return Ok(CompactOutcome::Skipped(SkipReason::BelowThreshold {
                    tokens,
                    window,
                    reserve: settings.reserve_tokens,
                }));
            }
        }
    }
    // A compaction in the middle of a turn (overflow recovery: the path ends on the user's
    // message or on tool results, not on an answer) keeps the request the run will resume.
    let turn_open = tree
        .path(None)
        .iter()
        .rev()
        .find_map(|entry| entry.message())
        .is_some_and(|last| {
            last.role() != pincer_plugin_abi::latest::Role::Assistant
                || last.tool_calls().next().is_some()
        });
    let prepare_options = PrepareOptions {
        preserve_from_entry_id: None,
        unresolved_request: options.unresolved_request || turn_open,
    };
    let mut preparation = prepare_compaction(tree, None, settings, &prepare_options)?;
    if preparation.is_none() && options.force {
        // A manual compaction uses the smallest valid history rather than none.
        let smallest = CompactionSettings {
            keep_recent_tokens: 0,
            ..*settings
        };
        preparation = prepare_compaction(tree, None, &smallest, &prepare_options)?;
    }
    let Some(preparation) = preparation else {
        let path_entries = tree.path(None);
        let last = path_entries.last().map(|e| e.entry_type);
        let from_hook_or_reset = match last {
            Some(EntryType::Reset) => true,
            Some(EntryType::Compaction) => path_entries
                .last()
                .is_some_and(|e| e.record().get("fromHook") == Some(&Value::Bool(true))),
            _ => false,
        };
        let reason = if from_hook_or_reset {
            SkipReason::AntiLoop
        } else if last == Some(EntryType::Compaction) {
            SkipReason::AlreadyCompacted
        } else {
            SkipReason::NothingToCompact
        };
        return Ok(CompactOutcome::Skipped(reason));
    };
    if aborted() {
        return Err(CompactError::Aborted);
    }
    let instructions = options.custom_instructions.as_deref();
    let result = compact(&preparation, summarizer, instructions)?;
    if aborted() {
        return Err(CompactError::Aborted);
    }
    let details = serde_json::to_value(&result.details).expect("details serialize");
    // The estimate of what is left (not the last usage, which measured the prompt before),
    // recorded in the entry as `tokensAfter`.
    let measured = estimate_after(
        writer.tree(),
        &result.summary,
        result.tokens_before,
        &result.first_kept_entry_id,
    );
    // A summary no smaller than what it replaces is no compaction: nothing is appended. Both
    // sides are the plain estimate (`tokensBefore` may come from a provider's usage).
    let estimated_before = pincer_plugin_api::tokens::estimate_tokens(
        &build_session_context(writer.tree(), None).messages,
    );
    if let Some(reason) = not_smaller(estimated_before, measured) {
        return Ok(CompactOutcome::Skipped(reason));
    }
    let entry_id = writer.append_compaction_measured(
        &result.summary,
        &result.first_kept_entry_id,
        result.tokens_before,
        measured,
        Some(details),
    )?;
    writer.commit()?;
    let tokens_after = measured.unwrap_or_else(|| {
        pincer_plugin_api::tokens::estimate_tokens(
            &build_session_context(writer.tree(), None).messages,
        )
    });
    Ok(CompactOutcome::Compacted(SessionCompaction {
        entry_id,
        summary: result.summary,
        first_kept_entry_id: result.first_kept_entry_id,
        tokens_before: options.current_token_count.unwrap_or(result.tokens_before),
        tokens_after,
        details: result.details,
    }))
}

/// The estimate of the context a compaction with `summary`, kept from `first_kept`, leaves:
/// its summary message and the current context's messages from `first_kept` on — what
/// `buildSessionContext` gives once the entry is appended. `None` when `first_kept` is not in
/// the current context.
fn estimate_after(
    tree: &SessionTree,
    summary: &str,
    tokens_before: u64,
    first_kept: &str,
) -> Option<u64> {
    let context = build_session_context(tree, None);
    let start = context
        .entry_ids
        .iter()
        .position(|id| id.as_str() == Some(first_kept))?;
    let summary = Message::from_value(serde_json::json!({
        "role": "compactionSummary",
        "summary": summary,
        "tokensBefore": tokens_before,
    }))
    .ok()?;
    let mut after = Vec::with_capacity(context.messages.len() - start + 1);
    after.push(summary);
    after.extend_from_slice(&context.messages[start..]);
    Some(pincer_plugin_api::tokens::estimate_tokens(&after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::prepare::FileOperations;
    use pincer_plugin_abi::latest::Message;

    /// A summariser that answers with a fixed text.
    struct Fixed(String);
    impl Summarizer for Fixed {
        fn summarize(&self, _: &SummaryRequest<'_>) -> Result<String, SummaryError> {
            Ok(self.0.clone())
        }
    }

    fn preparation() -> CompactionPreparation {
        let mut file_ops = FileOperations::default();
        file_ops.read.insert("/a".into());
        file_ops.edited.insert("/b".into());
        CompactionPreparation {
            first_kept_entry_id: "k".into(),
            messages_to_summarize: vec![Message::user("hi")],
            turn_prefix_messages: vec![Message::user("turn")],
            is_split_turn: true,
            latest_unresolved_user_request: Some("do \"it\"".into()),
            tokens_before: 99,
            previous_summary: None,
            previous_summary_details: None,
            file_ops,
            settings: CompactionSettings::default(),
        }
    }

    #[test]
    fn the_summary_is_assembled_in_openclaws_order() {
        let result = compact(&preparation(), &Fixed("S".into()), None).unwrap();
        assert_eq!(
            result.summary,
            "## Latest unresolved user request\n\"do \\\"it\\\"\"\n\nS\n\n---\n\n**Turn Context (split turn):**\n\nS\n\n<read-files>\n/a\n</read-files>\n\n<modified-files>\n/b\n</modified-files>"
        );
        assert_eq!(result.details.read_files, ["/a"]);
        assert_eq!(result.details.modified_files, ["/b"]);
    }

    #[test]
    fn a_long_summary_is_capped_at_16000_with_the_marker_and_keeps_its_file_lists() {
        let result = compact(&preparation(), &Fixed("x".repeat(40_000)), None).unwrap();
        assert_eq!(utf16_len(&result.summary), MAX_COMPACTION_SUMMARY_CHARS);
        assert!(result.summary.contains(SUMMARY_TRUNCATED_MARKER));
        assert!(result
            .summary
            .ends_with("<modified-files>\n/b\n</modified-files>"));
        assert!(result.summary.contains(TURN_CONTEXT_PREFIX));
    }

    #[test]
    fn long_file_lists_end_with_a_count() {
        let files: Vec<String> = (0..200).map(|i| format!("/src/file{i:03}.rs")).collect();
        let text = format_file_operations(&files, &[]);
        assert!(utf16_len(&text) <= MAX_FILE_OPS_LIST_CHARS + 2);
        assert!(text.contains("...and "), "{text}");
        assert!(text.ends_with("more\n</read-files>") || text.ends_with("</read-files>"));
    }
}
