//! `sliding-window` — a context engine that needs no model: it keeps the system prompt and the
//! newest messages that fit a token budget, never separating a tool call from its results, and
//! starts the kept history on a user turn.
//!
//! `assemble` answers with references to the host's messages (index ranges), never copies;
//! `ingest` stores nothing (the window is computed from the messages the host passes each turn);
//! `compact` is delegated to the host runtime, as an engine with `ownsCompaction: false` must do
//! so that `/compact` and overflow recovery keep working.
//!
//! The selection itself is the pure function [`select_window`] (rules in [`window`]'s docs),
//! public so that benchmarks and other hosts can link it statically through the rlib.
//!
//! # Config
//!
//! `plugins.entries.sliding-window.config`, every key optional:
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `tokenBudget` | integer ≥ 1 | none | the window's own budget; the effective budget is the smaller of this and the host's `tokenBudget` for the turn, whichever exists; with neither, everything is kept |
//! | `minMessages` | integer ≥ 0 | 1 | keep at least this many of the newest non-system messages (whole tool groups), even over budget |
//! | `keepSystem` | boolean | true | pin the leading system messages (counted against the budget) |

#![warn(missing_docs)]

pub mod window;

use pincer_plugin_api::prelude::*;
use serde::Deserialize;

pub use window::{select_window, Window, WindowOptions};

/// The engine's configuration, as written in `plugins.entries.sliding-window.config`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The window's own token budget (`tokenBudget`); at least 1.
    #[serde(default)]
    pub token_budget: Option<u64>,
    /// Keep at least this many of the newest non-system messages (`minMessages`, default 1).
    #[serde(default = "default_min_messages")]
    pub min_messages: usize,
    /// Pin the leading system messages (`keepSystem`, default true).
    #[serde(default = "default_keep_system")]
    pub keep_system: bool,
}

fn default_min_messages() -> usize {
    1
}

fn default_keep_system() -> bool {
    true
}

impl Config {
    /// Checks what serde cannot.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](pincer_plugin_api::ErrorKind::InvalidConfig) naming the setting.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.token_budget == Some(0) {
            return Err(EngineError::invalid_config(
                "sliding-window: tokenBudget must be at least 1 (omit it to use only the host's \
                 token budget)",
            ));
        }
        Ok(())
    }

    /// The budget of a turn: the smaller of `tokenBudget` and the host's budget, whichever
    /// exists, or `None` when neither does.
    pub fn effective_budget(&self, host_budget: Option<u64>) -> Option<u64> {
        match (self.token_budget, host_budget) {
            (Some(own), Some(host)) => Some(own.min(host)),
            (own, host) => own.or(host),
        }
    }

    /// The selection options.
    pub fn window_options(&self) -> WindowOptions {
        WindowOptions {
            min_messages: self.min_messages,
            keep_system: self.keep_system,
        }
    }
}

/// The sliding-window engine.
#[derive(Debug)]
pub struct SlidingWindow {
    config: Config,
    host: Host,
}

impl SlidingWindow {
    /// An engine with a validated config.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](pincer_plugin_api::ErrorKind::InvalidConfig) when the config is not usable.
    pub fn new(config: Config, host: Host) -> Result<Self, EngineError> {
        config.validate()?;
        Ok(SlidingWindow { config, host })
    }

    /// The engine's config.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

impl Engine for SlidingWindow {
    const ID: &'static str = "sliding-window";

    fn create(ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
        SlidingWindow::new(ctx.config()?, host)
    }

    fn info(&self) -> Result<EngineInfo, EngineError> {
        Ok(EngineInfo::new("Sliding window", env!("CARGO_PKG_VERSION"))
            .owns_compaction(false)
            .accepted_host_params(&["sessionKey", "abortSignal"]))
    }

    fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
        params.host.check_abort()?;
        let messages = params.messages;
        let budget = self.config.effective_budget(params.token_budget);
        let window = select_window(messages, budget, &self.config.window_options());
        let kept = window.len();
        tracing::debug!(
            session_key = params.host.session_key().unwrap_or(""),
            kept,
            dropped = messages.len() - kept,
            kept_tokens = window.tokens,
            dropped_tokens = window.input_tokens.saturating_sub(window.tokens),
            budget = ?budget,
            over_budget = window.over_budget,
            "sliding window assembled"
        );
        let mut context = ContextBuilder::new();
        for range in window.kept {
            context.keep_range(range);
        }
        Ok(context.estimated_tokens(window.tokens).finish())
    }

    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        self.host.delegate_compaction_to_runtime(params)
    }
}

impl Dispose for SlidingWindow {
    fn dispose(&self) -> Result<(), EngineError> {
        Ok(())
    }
}

pincer_plugin_api::export_engine!(SlidingWindow);
