//! The built-in compaction as the runtime's compactor ([`SessionCompactor`], a
//! [`RuntimeCompactor`]): what `legacy.compact` and every engine's
//! `delegateCompactionToRuntime` reach (docs/CONTRACT.md §9.2).
//!
//! As OpenClaw's delegate does, it compacts the session the parameters name (`sessionFile`;
//! without one, the session key, else the session id, of the agent, looked up in the store the
//! compactor was given — [`SessionCompactor::with_store`]), honours `force`, takes `currentTokenCount` as the observed count (reported as
//! `tokensBefore`), treats `tokenBudget` as the model's window (settings scaled to it, and the
//! threshold when not forced), ignores `compactionTarget`, and answers
//! `{ok, compacted, reason, result: {summary, firstKeptEntryId, tokensBefore, tokensAfter,
//! details}}`. Nothing to compact is `ok: true, compacted: false` with the reason; a failure is
//! `ok: false` with what went wrong; an abort is `EngineError::Aborted`.

use std::path::PathBuf;
use std::sync::Arc;

use pincer_plugin_abi::latest::{CompactParams, CompactResult, CompactionDetails, EngineError};
use pincer_plugin_abi::{ROption, RString};

use super::compact::{compact_session_until, CompactError, CompactOptions, CompactOutcome};
use super::settings::CompactionSettings;
use super::summarizer::{summarizer_from_config, Summarizer};
use crate::config::{Config, ConfigError, LoadedConfig};
use crate::engines::services::ModelClient;
use crate::engines::services::RuntimeCompactor;
use crate::model::openai::model_for_spec;
use crate::model::{ModelError, ModelProvider, ModelService};
use crate::session::key::{AgentId, SessionKey};
use crate::session::store::{JsonlStore, SessionStore, DEFAULT_AGENT};
use crate::session::writer::Durability;
use crate::slot::runtime::Runtime;
use crate::slot::runtime::RuntimeOptions;

/// The built-in compaction of session files.
#[derive(Clone)]
pub struct SessionCompactor {
    settings: CompactionSettings,
    summarizer: Arc<dyn Summarizer>,
    durability: Durability,
    store: Option<JsonlStore>,
}

impl std::fmt::Debug for SessionCompactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCompactor")
            .field("settings", &self.settings)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl SessionCompactor {
    /// A compactor with `settings` (before any window scaling), `summarizer`, appending with
    /// `durability`.
    pub fn new(
        settings: CompactionSettings,
        summarizer: Arc<dyn Summarizer>,
        durability: Durability,
    ) -> Self {
        SessionCompactor {
            settings,
            summarizer,
            durability,
            store: None,
        }
    }

    /// Sessions named by key or id only (no `sessionFile`) are looked up in `store`.
    pub fn with_store(mut self, store: JsonlStore) -> Self {
        self.store = Some(store);
        self
    }

    /// The file of the session `params` name: `sessionFile`, else the key (the parameter's,
    /// else the session target's), else the id, of the agent (`main` when none), in the store.
    fn session_file(&self, params: &CompactParams<'_>) -> Result<PathBuf, String> {
        let file = params.session_file.as_str();
        if !file.is_empty() {
            return Ok(PathBuf::from(file));
        }
        let target = params.host.session_target.into_option();
        let agent = pick(
            params.agent_id.into_option().map(|s| s.as_str()),
            target
                .and_then(|t| t.agent_id.into_option())
                .map(|s| s.as_str()),
        )
        .unwrap_or(DEFAULT_AGENT);
        let key = pick(
            params.host.session_key(),
            target
                .and_then(|t| t.session_key.into_option())
                .map(|s| s.as_str()),
        );
        let id = pick(Some(params.session_id.as_str()), None);
        let Some(store) = &self.store else {
            return Err("runtime compaction needs the session's file (sessionFile is empty) and this host has no session store to look its key or id up in: pass sessionFile".to_owned());
        };
        let Some(reference) = key.or(id) else {
            return Err("runtime compaction needs the session: sessionFile, sessionKey and sessionId are all empty".to_owned());
        };
        let agent = AgentId::parse(agent).map_err(|e| format!("{e} ({})", e.code()))?;
        let key =
            SessionKey::parse_for(reference, &agent).map_err(|e| format!("{e} ({})", e.code()))?;
        store
            .resolve(&key)
            .map(|s| s.session_file)
            .map_err(|e| format!("{e} ({})", e.code()))
    }

    /// The compactor `config` asks for: `agents.defaults.compaction` settings and summariser
    /// (offline unless `compaction.model` names a model), `sessions.durability`.
    pub fn from_config(config: &Config) -> Self {
        SessionCompactor::new(
            CompactionSettings::from_config(&config.agents.defaults.compaction),
            summarizer_from_config(config),
            config.sessions.durability,
        )
    }

    /// The settings before window scaling.
    pub fn settings(&self) -> CompactionSettings {
        self.settings
    }
}

/// `options` with the built-in compaction as the runtime's compactor (what `legacy.compact`
/// and `delegateCompactionToRuntime` run), configured from `config` and finding sessions in
/// the home's store — what the `pincer` binary uses. Without it a runtime answers compactions
/// with an honest "not compacted".
pub fn with_builtin_compaction(mut options: RuntimeOptions, config: &Config) -> RuntimeOptions {
    let store = JsonlStore::new(options.home.root().join("agents"));
    options.compactor = Some(Arc::new(
        SessionCompactor::from_config(config).with_store(store),
    ));
    options
}

/// `options` with what `config` configures beyond plugins: the built-in compaction (see
/// [`with_builtin_compaction`]) and the model engines' `llmComplete` reaches — `llm` when
/// given, else `model.llmComplete`, else none.
///
/// # Errors
/// A `model.llmComplete` that names no model this host can reach (not `openai:NAME`, or its
/// API key's variable unset).
pub fn with_configured_services(
    mut options: RuntimeOptions,
    config: &Config,
    llm: Option<Arc<dyn ModelProvider>>,
) -> Result<RuntimeOptions, OpenError> {
    let llm = match (llm, config.model.llm_complete.as_deref()) {
        (Some(model), _) => Some(model),
        (None, Some(spec)) => Some(Arc::new(model_for_spec(spec, &config.model).map_err(
            |source| OpenError::LlmComplete {
                spec: spec.to_owned(),
                source,
            },
        )?) as Arc<dyn ModelProvider>),
        (None, None) => None,
    };
    options.model = llm.map(|model| Arc::new(ModelService::new(model)) as Arc<dyn ModelClient>);
    Ok(with_builtin_compaction(options, config))
}

/// Opens a runtime as the `pincer` binary does: `pincer.json` read, then
/// [`with_configured_services`] — so `legacy.compact` compacts, and `llmComplete` reaches the
/// configured model. (A bare [`Runtime::open`] has neither: it sits below both layers.)
///
/// # Errors
/// An unreadable config, or an unusable `model.llmComplete`.
pub fn open_runtime(options: RuntimeOptions) -> Result<Runtime, OpenError> {
    let config = LoadedConfig::load(&options.home.config_path())?;
    let options = with_configured_services(options, &config.config, None)?;
    Ok(Runtime::with_config(options, config))
}

/// Why [`open_runtime`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `pincer.json` could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `model.llmComplete` names no usable model.
    #[error("model.llmComplete {spec:?}: {source}")]
    LlmComplete {
        /// The configured name.
        spec: String,
        /// Why it cannot be used.
        source: ModelError,
    },
}

impl OpenError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            OpenError::Config(err) => err.code(),
            OpenError::LlmComplete { source, .. } => source.code(),
        }
    }
}

fn text(s: impl Into<String>) -> ROption<RString> {
    ROption::RSome(RString::from(s.into()))
}

/// `a`, else `b`, whichever is given and not empty.
fn pick<'a>(a: Option<&'a str>, b: Option<&'a str>) -> Option<&'a str> {
    a.filter(|s| !s.is_empty()).or(b.filter(|s| !s.is_empty()))
}

impl RuntimeCompactor for SessionCompactor {
    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        let session_file = match self.session_file(params) {
            Ok(path) => path,
            Err(reason) => {
                return Ok(CompactResult {
                    ok: false,
                    compacted: false,
                    reason: text(reason),
                    result: ROption::RNone,
                })
            }
        };
        let window = params.token_budget.into_option();
        // `compactionTarget` is ignored, as OpenClaw's delegate ignores it.
        let options = CompactOptions {
            force: params.force,
            custom_instructions: params
                .custom_instructions
                .into_option()
                .map(|s| s.as_str().to_owned()),
            current_token_count: params.current_token_count.into_option(),
            context_window: window,
            unresolved_request: false,
            durability: self.durability,
        };
        let settings = self.settings.for_window(window.unwrap_or(0));
        let aborted = || params.host.is_aborted();
        match compact_session_until(
            &session_file,
            &settings,
            self.summarizer.as_ref(),
            &options,
            &aborted,
        ) {
            Ok(CompactOutcome::Compacted(done)) => Ok(CompactResult {
                ok: true,
                compacted: true,
                reason: ROption::RNone,
                result: ROption::RSome(CompactionDetails {
                    summary: text(done.summary),
                    first_kept_entry_id: text(done.first_kept_entry_id),
                    tokens_before: done.tokens_before,
                    tokens_after: ROption::RSome(done.tokens_after),
                    details_json: text(
                        serde_json::to_string(&done.details).expect("details serialize"),
                    ),
                    session_id: ROption::RNone,
                    session_file: ROption::RNone,
                }),
            }),
            Ok(CompactOutcome::Skipped(reason)) => Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: text(reason.to_string()),
                result: ROption::RNone,
            }),
            Err(CompactError::Aborted) => {
                Err(EngineError::aborted(CompactError::Aborted.to_string()))
            }
            Err(err) => Ok(CompactResult {
                ok: false,
                compacted: false,
                reason: text(format!("{err} ({})", err.code())),
                result: ROption::RNone,
            }),
        }
    }
}
