//! The engine's configuration (`plugins.entries.lossless.config`), every key optional; the
//! manifest's `configSchema` is the same list, and the crate docs' table explains each key.

use pincer_plugin_api::EngineError;
use serde::Deserialize;

use crate::summarize::Mode;

/// The configuration.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// The database file (default `lossless.db` in the engine's state directory; in memory
    /// when the host gives no state directory).
    pub database_path: Option<String>,
    /// The engine's own token budget; the smaller of it and the host's budget applies.
    pub token_budget: Option<u64>,
    /// Newest messages a leaf pass never takes.
    pub fresh_tail_messages: usize,
    /// At most this many tokens protected by `freshTailMessages` (default a quarter of the
    /// budget); the newest user message and what follows it are protected whatever it costs.
    pub fresh_tail_max_tokens: Option<u64>,
    /// A leaf pass summarises about this many tokens (default a fifth of the budget).
    pub leaf_chunk_tokens: Option<u64>,
    /// Roots of one depth folded into a deeper node once this many are side by side.
    pub condense_fan_in: usize,
    /// Share of the budget at which `afterTurn` records compaction debt.
    pub compact_threshold: f64,
    /// Share of the budget a compaction aims at.
    pub compact_target: f64,
    /// Share of the budget past which debt is paid even while the prompt cache is warm.
    pub urgent_threshold: f64,
    /// A prompt cache untouched this long is cold (paying debt then costs no cache hit).
    pub cache_ttl_ms: u64,
    /// `auto`, `model` or `offline`.
    pub summarizer: Mode,
    /// Messages per `lcm_expand` page.
    pub expand_page_size: usize,
    /// Default and maximum `lcm_grep` results.
    pub grep_limit: usize,
    /// At most this many messages imported by one `bootstrap`.
    pub bootstrap_max_messages: usize,
    /// Tool results longer than this many characters are moved to files by `maintain`
    /// (0: never).
    pub large_payload_chars: usize,
    /// How long a subagent's read grant lives unless its spawn gives a shorter TTL.
    pub grant_ttl_ms: u64,
    /// At most this many results per tool call of a subagent reading its parent's store.
    pub grant_max_results: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_path: None,
            token_budget: None,
            fresh_tail_messages: 8,
            fresh_tail_max_tokens: None,
            leaf_chunk_tokens: None,
            condense_fan_in: 4,
            compact_threshold: 0.75,
            compact_target: 0.5,
            urgent_threshold: 0.9,
            cache_ttl_ms: 300_000,
            summarizer: Mode::Auto,
            expand_page_size: 20,
            grep_limit: 20,
            bootstrap_max_messages: 5_000,
            large_payload_chars: 32_768,
            grant_ttl_ms: 3_600_000,
            grant_max_results: 50,
        }
    }
}

impl Config {
    /// Checks what serde cannot.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](pincer_plugin_api::ErrorKind::InvalidConfig) naming the key and what to write instead.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |msg: &str| Err(EngineError::invalid_config(format!("lossless: {msg}")));
        if self.token_budget == Some(0) {
            return bad("tokenBudget must be at least 1 (omit it to use the host's budget)");
        }
        if self.condense_fan_in < 2 {
            return bad("condenseFanIn must be at least 2 (a node folds at least two others)");
        }
        for (name, value) in [
            ("compactThreshold", self.compact_threshold),
            ("compactTarget", self.compact_target),
            ("urgentThreshold", self.urgent_threshold),
        ] {
            if !(value > 0.0 && value <= 1.0) {
                return bad(&format!(
                    "{name} must be a share of the budget in (0, 1], not {value}"
                ));
            }
        }
        if self.compact_target >= self.compact_threshold {
            return bad(
                "compactTarget must be below compactThreshold (else every turn would compact)",
            );
        }
        if self.expand_page_size == 0 || self.grep_limit == 0 {
            return bad("expandPageSize and grepLimit must be at least 1");
        }
        Ok(())
    }

    /// The budget of an assembly: the smaller of `tokenBudget` and the host's.
    pub fn effective_budget(&self, host: Option<u64>) -> Option<u64> {
        match (self.token_budget, host) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
