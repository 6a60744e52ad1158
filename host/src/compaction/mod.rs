//! The built-in compaction (docs/CONTRACT.md §9.3): what `legacy.compact` and
//! `delegateCompactionToRuntime` do. A long session is kept inside the model's window by
//! summarising its older part and **appending** a `compaction` entry; history is never
//! rewritten, and `buildSessionContext` then starts from the summary and the kept tail.
//!
//! - `settings`: OpenClaw's defaults, the reserve floor, small windows, `shouldCompact`.
//! - `prepare`: the anti-loop rule, the previous boundary, the cut point (never a
//!   toolResult), split turns, file operations.
//! - `summarizer`: the [`Summarizer`] seam and the offline [`ExtractiveSummarizer`].
//! - `compact`: assembling the summary (turn context, file lists, the 16000-character cap)
//!   and compacting a session file ([`compact_session`]).
//! - `runtime`: [`SessionCompactor`], the runtime's compactor behind `legacy.compact`.
//! - `text`: lengths and cuts in UTF-16 units, as OpenClaw's character budgets count.

pub(crate) mod compact;
pub(crate) mod prepare;
pub(crate) mod runtime;
pub(crate) mod settings;
pub(crate) mod summarizer;
pub(crate) mod text;

pub use compact::{
    cap_compaction_summary, compact, compact_session, compact_session_until,
    format_file_operations, CompactError, CompactOptions, CompactOutcome, CompactionResult,
    SessionCompaction, SkipReason, MAX_COMPACTION_SUMMARY_CHARS, SUMMARY_TRUNCATED_MARKER,
    TURN_CONTEXT_PREFIX,
};
pub use prepare::{
    prepare_compaction, CompactionDetails, CompactionPreparation, FileOperations, PrepareError,
    PrepareOptions,
};
pub use runtime::{
    open_runtime, with_builtin_compaction, with_configured_services, OpenError, SessionCompactor,
};
pub use settings::{should_compact, CompactionSettings};
pub use summarizer::{
    serialize_conversation, ExtractiveSummarizer, ModelSummarizer, Summarizer, SummaryError,
    SummaryKind, SummaryRequest,
};
