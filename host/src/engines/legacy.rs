//! The built-in `legacy` engine (docs/CONTRACT.md §9.2): owner `core`, `ingest` keeps nothing,
//! `assemble` passes every message through (one range, no copy) with no token estimate
//! (`estimatedTokens` 0: "the caller estimates"), `compact` delegates to the runtime's compaction, `afterTurn` and
//! `dispose` do nothing. It accepts every host parameter.
//!
//! It is written against the same authoring API as any plugin and wrapped by the same adapter
//! (`into_engine_box`), so the host treats it exactly like a loaded engine.

use pincer_plugin_api::prelude::*;
use pincer_plugin_api::{into_engine_box, optional_fns};

use crate::engines::instance::{EngineCallError, EngineInstance, EngineOrigin};
use crate::engines::services::HostServices;
use crate::types::LEGACY_ENGINE_ID;

/// Every host parameter of docs/CONTRACT.md §6.1, which legacy accepts.
pub const ALL_HOST_PARAMS: [&str; 6] = [
    "sessionKey",
    "prompt",
    "runtimeSettings",
    "sessionTarget",
    "runtimeContext",
    "abortSignal",
];

/// The legacy engine.
pub struct LegacyEngine {
    host: Host,
}

impl Engine for LegacyEngine {
    const ID: &'static str = LEGACY_ENGINE_ID;

    fn create(_ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
        Ok(LegacyEngine { host })
    }

    fn info(&self) -> Result<EngineInfo, EngineError> {
        Ok(
            EngineInfo::new("Legacy Context Engine", "1.0.0")
                .accepted_host_params(&ALL_HOST_PARAMS),
        )
    }

    fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
        Ok(AssembleResult::pass_through(params.messages.len()))
    }

    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        self.host.delegate_compaction_to_runtime(params)
    }
}

impl AfterTurn for LegacyEngine {
    fn after_turn(&self, _params: &AfterTurnParams<'_>) -> Result<(), EngineError> {
        Ok(())
    }
}

impl Dispose for LegacyEngine {
    fn dispose(&self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// Creates a legacy engine instance with the given host services.
///
/// # Errors
/// Never in practice; the signature matches every other factory.
pub fn create_legacy(services: HostServices) -> Result<EngineInstance, EngineCallError> {
    let engine = LegacyEngine {
        host: Host::from_services(services.into_abi()),
    };
    EngineInstance::new(
        into_engine_box(engine, optional_fns!(LegacyEngine)),
        EngineOrigin::Builtin,
        None,
    )
}

#[cfg(any(test, feature = "test-support"))]
/// A shared legacy instance.
///
/// # Errors
/// As [`create_legacy`].
pub fn shared_legacy(
    services: HostServices,
) -> Result<std::sync::Arc<EngineInstance>, EngineCallError> {
    create_legacy(services).map(std::sync::Arc::new)
}
