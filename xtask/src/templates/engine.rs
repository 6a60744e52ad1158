//! `new-engine` — a pincer context engine.
//!
//! `assemble` keeps the newest messages that fit `keepTokens` (by reference: nothing is
//! copied); `compact` is delegated to the host runtime, which an engine that does not own
//! compaction must do so that `/compact` and overflow recovery keep working.

use pincer_plugin_api::prelude::*;
use pincer_plugin_api::tokens::estimate_message_tokens;
use serde::Deserialize;

/// The engine's config (`plugins.entries.new-engine.config`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Keep the newest messages that fit this many tokens.
    #[serde(default = "default_keep_tokens")]
    pub keep_tokens: u64,
}

fn default_keep_tokens() -> u64 {
    8_000
}

/// The engine.
pub struct NewEngine {
    config: Config,
    host: Host,
}

impl Engine for NewEngine {
    const ID: &'static str = "new-engine";

    fn create(ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
        Ok(NewEngine {
            config: ctx.config()?,
            host,
        })
    }

    fn info(&self) -> Result<EngineInfo, EngineError> {
        Ok(EngineInfo::new("NewEngine", env!("CARGO_PKG_VERSION"))
            .accepted_host_params(&["sessionKey", "abortSignal"]))
    }

    fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
        let messages = params.messages;
        let mut tokens = 0;
        let mut start = messages.len();
        while start > 0 {
            let cost = estimate_message_tokens(&messages[start - 1]);
            if tokens + cost > self.config.keep_tokens {
                break;
            }
            tokens += cost;
            start -= 1;
        }
        tracing::debug!(
            kept = messages.len() - start,
            tokens,
            "new-engine: assembled"
        );
        Ok(ContextBuilder::new()
            .keep_range(start..messages.len())
            .estimated_tokens(tokens)
            .finish())
    }

    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        self.host.delegate_compaction_to_runtime(params)
    }
}

pincer_plugin_api::export_engine!(NewEngine);

#[cfg(test)]
mod tests {
    use pincer_plugin_api::testing::{Conversation, TestEngine, TestHost};

    use super::NewEngine;

    #[test]
    fn keeps_the_newest_messages_that_fit() {
        let host = TestHost::new();
        // Each message below is 2 tokens (8 characters, 4 per token).
        let engine = TestEngine::new::<NewEngine>(&host, serde_json::json!({"keepTokens": 4}))
            .expect("the engine starts");
        let conversation = Conversation::new()
            .user("aaaaaaaa")
            .assistant("bbbbbbbb")
            .user("cccccccc");
        let assembled = engine.assemble(&conversation, None).expect("assemble");
        assert_eq!(assembled.texts(), ["bbbbbbbb", "cccccccc"]);
        assert_eq!(assembled.estimated_tokens, Some(4));
    }

    #[test]
    fn compaction_goes_to_the_runtime() {
        let host = TestHost::new();
        let engine = TestEngine::new::<NewEngine>(&host, serde_json::json!({})).expect("starts");
        engine
            .compact(&Conversation::new().user("hi"))
            .expect("compact");
        assert_eq!(host.delegated_compactions(), 1);
    }
}
