//! `twin` — TEST ONLY: one plugin library exporting two context engines, `twin` (the plugin
//! id) and `twin-echo` (an engine id that is not the plugin id). Both keep every message and
//! delegate compaction to the runtime; they exist so the host's tests can exercise what
//! OpenClaw's slot rules say about multi-engine plugins and engine ids ≠ plugin ids.

use pincer_plugin_api::prelude::*;

/// Generates one engine that keeps every message.
macro_rules! keep_all_engine {
    ($name:ident, $id:literal) => {
        #[doc = concat!("The `", $id, "` engine: keeps every message.")]
        pub struct $name {
            host: Host,
        }

        impl Engine for $name {
            const ID: &'static str = $id;

            fn create(_ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
                Ok($name { host })
            }

            fn info(&self) -> Result<EngineInfo, EngineError> {
                Ok(EngineInfo::new($id, env!("CARGO_PKG_VERSION")))
            }

            fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
                Ok(IngestResult { ingested: false })
            }

            fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
                Ok(ContextBuilder::new()
                    .keep_range(0..params.messages.len())
                    .finish())
            }

            fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
                self.host.delegate_compaction_to_runtime(params)
            }
        }
    };
}

keep_all_engine!(Twin, "twin");
keep_all_engine!(TwinEcho, "twin-echo");

pincer_plugin_api::export_engine!(Twin, TwinEcho);
