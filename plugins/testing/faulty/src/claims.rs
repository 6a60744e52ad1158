//! `compactClaim: {"tokensBefore": N, "tokensAfter": M}` in the config: `compact` answers
//! `compacted` with these token counts and changes nothing — an engine whose claim the host
//! must check (a compaction whose tokens did not go down is reported as none).

use pincer_plugin_api::prelude::*;
use serde::Deserialize;

/// What `compact` claims.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactClaim {
    tokens_before: u64,
    tokens_after: u64,
}

impl CompactClaim {
    /// The answer: `compacted`, with the claimed counts.
    pub fn answer(&self) -> CompactResult {
        CompactResult::compacted(
            Compaction::new(self.tokens_before)
                .summary("faulty claims it compacted")
                .tokens_after(self.tokens_after),
        )
    }
}
