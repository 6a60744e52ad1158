//! The bound on one line of a session file (config `sessions.maxLineBytes`, default 64 MiB).
//!
//! A session read never holds a longer line: the file is streamed, such a line is skipped by
//! scanning for its newline, and the skip is reported ([`super::tree::LongLine`]); a writer
//! refuses to append a record whose line would be longer. The bound is one value for the whole
//! process, because session files are read at every layer above this one (the store, the
//! harness, compaction, the CLI): the binary sets it from `pincer.json` when it starts
//! ([`set_max_line_bytes`]); an embedder that never sets it gets the default.

use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::config::{DEFAULT_MAX_LINE_BYTES, MIN_MAX_LINE_BYTES};

static MAX_LINE_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MAX_LINE_BYTES);

/// The longest line (in bytes, without its newline) a session read keeps and a writer appends.
pub fn max_line_bytes() -> u64 {
    MAX_LINE_BYTES.load(Ordering::Relaxed)
}

/// Sets [`max_line_bytes`] for the process (at least [`MIN_MAX_LINE_BYTES`]).
pub fn set_max_line_bytes(bytes: u64) {
    MAX_LINE_BYTES.store(bytes.max(MIN_MAX_LINE_BYTES), Ordering::Relaxed);
}

/// `bytes` for a person: `1.0 GiB`, `64.0 MiB`, `512 bytes`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.1} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}
