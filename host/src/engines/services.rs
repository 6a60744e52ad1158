//! The host services every engine receives: logging into the host's `tracing` subscriber,
//! model completion, delegation of compaction to the runtime, and token estimation. What an
//! engine passes in is checked first ([`super::checked`]): log text made UTF-8, requests with
//! text that is not UTF-8 refused.
//!
//! The runtime's compaction is reached through [`RuntimeCompactor`]; the summarising
//! algorithm itself (docs/CONTRACT.md §9.3) plugs in behind it.

use std::sync::Arc;

use pincer_plugin_abi::latest::{
    CompactParams, CompactResult, EngineError, ExtensionRef, HostServicesAbi, HostServicesArc,
    LlmCompleteRequest, LlmCompleteResponse, LogLevel, LogRecord, Message,
};
use pincer_plugin_abi::{ROption, RResult, RSlice, RStr};
use tracing::level_filters::LevelFilter;

use super::checked::{self, lossy};

/// The runtime's own compaction: what `delegateCompactionToRuntime` calls and what the
/// `legacy` engine's `compact` is.
pub trait RuntimeCompactor: Send + Sync {
    /// Compacts the session named in `params`.
    ///
    /// # Errors
    /// When compaction could not run.
    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError>;
}

/// The compactor of a host with no summarising model configured: an honest "not compacted".
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRuntimeCompaction;

impl RuntimeCompactor for NoRuntimeCompaction {
    fn compact(&self, _params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        Ok(CompactResult {
            ok: false,
            compacted: false,
            reason: ROption::RSome(
                "runtime compaction is unavailable: this runtime was opened without a compactor \
                 (embedders: open it with `pincer_host::compaction::open_runtime`, as the pincer \
                 binary does)"
                    .into(),
            ),
            result: ROption::RNone,
        })
    }
}

/// A model the host can complete with (`runtime-llm-complete`).
pub trait ModelClient: Send + Sync {
    /// Completes `request`.
    ///
    /// # Errors
    /// When the model call fails.
    fn complete(&self, request: &LlmCompleteRequest<'_>) -> Result<Message, EngineError>;
}

/// The host's side of [`HostServicesAbi`].
#[derive(Clone)]
pub struct HostServices {
    engine_id: Arc<str>,
    compactor: Arc<dyn RuntimeCompactor>,
    model: Option<Arc<dyn ModelClient>>,
}

impl HostServices {
    /// Services for engine `engine_id`.
    pub fn new(
        engine_id: &str,
        compactor: Arc<dyn RuntimeCompactor>,
        model: Option<Arc<dyn ModelClient>>,
    ) -> Self {
        HostServices {
            engine_id: Arc::from(engine_id),
            compactor,
            model,
        }
    }

    /// The FFI object handed to the engine.
    pub fn into_abi(self) -> HostServicesArc {
        crate::plugins::loading::host_services(self)
    }
}

/// Runs host code called from a plugin, turning a panic into an error: an unwind reaching
/// abi_stable's FFI shim would end the whole process.
fn catch_host_panic<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, EngineError>,
) -> Result<T, EngineError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_owned());
        Err(EngineError::failed(format!(
            "the host's {what} panicked: {message}"
        )))
    })
}

fn format_fields(record: &LogRecord<'_>) -> String {
    let mut out = String::new();
    for pair in record.fields.iter() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&lossy(pair.name.as_str().as_bytes()));
        out.push('=');
        out.push_str(&lossy(pair.value.as_str().as_bytes()));
    }
    out
}

impl HostServicesAbi for HostServices {
    fn log(&self, record: &LogRecord<'_>) {
        // A subscriber that panics must not take the process down through the FFI shim.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.emit(record)));
    }

    fn max_log_level(&self) -> LogLevel {
        match LevelFilter::current() {
            LevelFilter::OFF | LevelFilter::ERROR => LogLevel::Error,
            LevelFilter::WARN => LogLevel::Warn,
            LevelFilter::INFO => LogLevel::Info,
            LevelFilter::DEBUG => LogLevel::Debug,
            _ => LogLevel::Trace,
        }
    }

    fn llm_complete(
        &self,
        request: &LlmCompleteRequest<'_>,
    ) -> RResult<LlmCompleteResponse, EngineError> {
        self.complete(request)
    }

    fn delegate_compaction_to_runtime(
        &self,
        params: &CompactParams<'_>,
    ) -> RResult<CompactResult, EngineError> {
        self.delegate(params)
    }

    fn estimate_tokens(&self, messages: RSlice<'_, Message>) -> u64 {
        checked::estimate_passed_messages(messages.as_slice())
    }

    fn extension(&self, _name: RStr<'_>) -> ROption<ExtensionRef> {
        ROption::RNone
    }
}

impl HostServices {
    fn emit(&self, record: &LogRecord<'_>) {
        let engine_id: &str = &self.engine_id;
        // An engine's bytes, made UTF-8 before anything reads them as text.
        let target = &*lossy(record.target.as_str().as_bytes());
        let message = &*lossy(record.message.as_str().as_bytes());
        let fields = format_fields(record);
        // One callsite per level; the plugin's target and fields travel as fields.
        match record.level {
            LogLevel::Error => {
                tracing::error!(target: "pincer::plugin", engine_id, plugin_target = target, fields = %fields, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "pincer::plugin", engine_id, plugin_target = target, fields = %fields, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "pincer::plugin", engine_id, plugin_target = target, fields = %fields, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "pincer::plugin", engine_id, plugin_target = target, fields = %fields, "{message}")
            }
            LogLevel::Trace => {
                tracing::trace!(target: "pincer::plugin", engine_id, plugin_target = target, fields = %fields, "{message}")
            }
        }
    }

    fn complete(
        &self,
        request: &LlmCompleteRequest<'_>,
    ) -> RResult<LlmCompleteResponse, EngineError> {
        if let Err(refused) = checked::check_llm_request(request) {
            return RResult::RErr(refused);
        }
        match &self.model {
            Some(model) => catch_host_panic("llmComplete", || model.complete(request))
                .map(|message| LlmCompleteResponse { message })
                .into(),
            None => RResult::RErr(EngineError::NotImplemented(
                "this host has no model to complete with (capability runtime-llm-complete)".into(),
            )),
        }
    }

    fn delegate(&self, params: &CompactParams<'_>) -> RResult<CompactResult, EngineError> {
        // The runtime's own compaction may re-arm the safety window as it makes progress
        // (never past ten windows); plugin engines get a single window (docs/CONTRACT.md §9.1).
        crate::engines::bounded::refresh_current_deadline();
        if let Err(refused) = checked::check_delegated_compaction(params) {
            return RResult::RErr(refused);
        }
        // This runs behind abi_stable's FFI shim, where an unwind would end the process.
        catch_host_panic("runtime compaction", || self.compactor.compact(params)).into()
    }
}
