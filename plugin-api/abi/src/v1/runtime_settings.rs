//! `runtimeSettings` schema version 1 (docs/CONTRACT.md §7): what the host tells an engine about
//! the run it serves — runtime mode, model, engine selection, execution host, limits and
//! diagnostics.
//!
//! Nullable fields are always present (as `RNone` / JSON `null`); discriminators are never
//! null. The host builds this object (pincer-host's `runtime_settings` module applies the
//! trimming and reason-code rules); engines only read it.
//!
//! **Stability:** frozen for API 1.x, matching `schemaVersion: 1`.

use abi_stable::{
    std_types::{ROption, RString},
    StableAbi,
};
use serde::{Deserialize, Serialize};

/// The schema version this module describes.
pub const RUNTIME_SETTINGS_SCHEMA_VERSION: u32 = 1;

/// How the runtime is running this turn.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeMode {
    /// As configured.
    Normal,
    /// On a fallback (model or engine) for a known reason.
    Fallback,
    /// Degraded: some capability is unavailable this turn.
    Degraded,
}

/// Where the selected engine id came from.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionSource {
    /// `plugins.slots.contextEngine` named it.
    Configured,
    /// Nothing was configured; the default (`legacy`) applies.
    Default,
    /// The host cannot tell.
    Unknown,
}

/// Why the runtime fell back or degraded.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// The model provider timed out.
    ProviderTimeout,
    /// The provider is unavailable.
    ProviderUnavailable,
    /// The provider rate-limited the run.
    RateLimited,
    /// The context overflowed.
    ContextOverflow,
    /// The runtime itself is unavailable.
    RuntimeUnavailable,
    /// Anything else.
    Unknown,
}

/// `runtime`: the host and its mode.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeInfo {
    /// Always `"pincer"`.
    pub host: RString,
    /// Normal, fallback or degraded.
    pub mode: RuntimeMode,
    /// The agent harness, if any.
    pub harness_id: ROption<RString>,
    /// The runtime instance, if any.
    pub runtime_id: ROption<RString>,
}

/// `model`: what was asked for and what runs.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// The model the configuration asked for.
    pub requested: ROption<RString>,
    /// The model that actually runs.
    pub resolved: ROption<RString>,
    /// Its provider.
    pub provider: ROption<RString>,
    /// Its family.
    pub family: ROption<RString>,
}

/// `contextEngineSelection`.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineSelection {
    /// The engine id selected for this run.
    pub selected_id: ROption<RString>,
    /// Where that id came from.
    pub source: SelectionSource,
}

/// `executionHost`: the host descriptor the run was checked against.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionHost {
    /// Such as `pincer-embedded` or `cli:claude-cli`.
    pub id: ROption<RString>,
    /// A label for messages, such as `CLI backend "claude-cli"`.
    pub label: ROption<RString>,
}

/// `limits`.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// The prompt's token budget.
    pub prompt_token_budget: ROption<u64>,
    /// The model's output limit.
    pub max_output_tokens: ROption<u64>,
}

/// `diagnostics`.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostics {
    /// Why the run fell back.
    pub fallback_reason: ROption<ReasonCode>,
    /// Why the run is degraded.
    pub degraded_reason: ROption<ReasonCode>,
}

/// `runtimeSettings`, schema version 1.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSettings {
    /// Always [`RUNTIME_SETTINGS_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The runtime.
    pub runtime: RuntimeInfo,
    /// The model.
    pub model: ModelInfo,
    /// The engine selection.
    pub context_engine_selection: EngineSelection,
    /// The execution host.
    pub execution_host: ExecutionHost,
    /// Limits.
    pub limits: Limits,
    /// Diagnostics.
    pub diagnostics: Diagnostics,
}
