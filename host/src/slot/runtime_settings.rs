//! Building `runtimeSettings` v1 (docs/CONTRACT.md §7) with every rule: strings trimmed and empty ones
//! made null, numbers kept only when finite, reason codes mapped from free text, `mode` and
//! `source` derived when not given. Nullable fields are always present; discriminators never
//! null.

use pincer_plugin_abi::latest::{
    Diagnostics, EngineSelection, ExecutionHost, Limits, ModelInfo, ReasonCode, RuntimeInfo,
    RuntimeMode, RuntimeSettings, SelectionSource, RUNTIME_SETTINGS_SCHEMA_VERSION,
};
use pincer_plugin_abi::{ROption, RString};

use crate::slot::requirements::HostDescriptor;

/// What the host knows about a run, loosely typed, as callers have it.
#[derive(Debug, Clone, Default)]
pub struct RuntimeSettingsInput<'a> {
    /// An explicit mode; else derived.
    pub mode: Option<RuntimeMode>,
    /// The harness id.
    pub harness_id: Option<&'a str>,
    /// The runtime id.
    pub runtime_id: Option<&'a str>,
    /// The model asked for.
    pub requested_model: Option<&'a str>,
    /// The model that runs.
    pub resolved_model: Option<&'a str>,
    /// The provider.
    pub provider: Option<&'a str>,
    /// The model family.
    pub family: Option<&'a str>,
    /// The selected engine id.
    pub selected_engine: Option<&'a str>,
    /// An explicit selection source; else derived.
    pub selection_source: Option<SelectionSource>,
    /// The execution host.
    pub execution_host: Option<&'a HostDescriptor>,
    /// The prompt's token budget.
    pub prompt_token_budget: Option<f64>,
    /// The output limit.
    pub max_output_tokens: Option<f64>,
    /// Why the run fell back, as a code or free text.
    pub fallback_reason: Option<Reason<'a>>,
    /// Why the run is degraded, as a code or free text.
    pub degraded_reason: Option<Reason<'a>>,
}

/// A reason as the caller has it: a code it knows, or text to map by keyword (§7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason<'a> {
    /// A code, kept as it is.
    Code(ReasonCode),
    /// Free text (or a code's name), mapped by [`reason_code`].
    /// (No host caller passes text yet: only this module's tests construct it.)
    #[cfg_attr(not(test), allow(dead_code))]
    Text(&'a str),
}

impl Reason<'_> {
    /// Its code: the code itself, or the text mapped by [`reason_code`] (`None` for empty
    /// text).
    pub fn code(self) -> Option<ReasonCode> {
        match self {
            Reason::Code(code) => Some(code),
            Reason::Text(text) => reason_code(Some(text)),
        }
    }
}

fn text(value: Option<&str>) -> ROption<RString> {
    match value.map(str::trim) {
        Some(v) if !v.is_empty() => ROption::RSome(RString::from(v)),
        _ => ROption::RNone,
    }
}

fn number(value: Option<f64>) -> ROption<u64> {
    match value {
        Some(v) if v.is_finite() && v >= 0.0 => ROption::RSome(v.floor() as u64),
        _ => ROption::RNone,
    }
}

/// Maps a reason to its code (§7.2): a known code is kept; other text maps by keyword; empty
/// is null.
pub fn reason_code(reason: Option<&str>) -> Option<ReasonCode> {
    let reason = reason?.trim();
    if reason.is_empty() {
        return None;
    }
    let exact = match reason {
        "provider_timeout" => Some(ReasonCode::ProviderTimeout),
        "provider_unavailable" => Some(ReasonCode::ProviderUnavailable),
        "rate_limited" => Some(ReasonCode::RateLimited),
        "context_overflow" => Some(ReasonCode::ContextOverflow),
        "runtime_unavailable" => Some(ReasonCode::RuntimeUnavailable),
        "unknown" => Some(ReasonCode::Unknown),
        _ => None,
    };
    if exact.is_some() {
        return exact;
    }
    let lower = reason.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    Some(if has(&["timeout"]) {
        ReasonCode::ProviderTimeout
    } else if has(&["rate", "limit", "429"]) {
        ReasonCode::RateLimited
    } else if has(&["overflow", "context", "pressure"]) {
        ReasonCode::ContextOverflow
    } else if has(&["runtime"]) {
        ReasonCode::RuntimeUnavailable
    } else if has(&["provider", "primary", "unavailable"]) {
        ReasonCode::ProviderUnavailable
    } else {
        ReasonCode::Unknown
    })
}

/// Builds `runtimeSettings` (§7).
pub fn build_runtime_settings(input: &RuntimeSettingsInput<'_>) -> RuntimeSettings {
    let requested = text(input.requested_model);
    let resolved = text(input.resolved_model);
    let fallback_reason = input.fallback_reason.and_then(Reason::code);
    let degraded_reason = input.degraded_reason.and_then(Reason::code);
    let mode = input.mode.unwrap_or_else(|| {
        if degraded_reason.is_some() {
            RuntimeMode::Degraded
        } else if fallback_reason.is_some()
            || matches!((&requested, &resolved), (ROption::RSome(a), ROption::RSome(b)) if a != b)
        {
            RuntimeMode::Fallback
        } else {
            RuntimeMode::Normal
        }
    });
    let selected_id = text(input.selected_engine);
    let source = input.selection_source.unwrap_or(if selected_id.is_some() {
        SelectionSource::Configured
    } else {
        SelectionSource::Unknown
    });
    RuntimeSettings {
        schema_version: RUNTIME_SETTINGS_SCHEMA_VERSION,
        runtime: RuntimeInfo {
            host: "pincer".into(),
            mode,
            harness_id: text(input.harness_id),
            runtime_id: text(input.runtime_id),
        },
        model: ModelInfo {
            requested,
            resolved,
            provider: text(input.provider),
            family: text(input.family),
        },
        context_engine_selection: EngineSelection {
            selected_id,
            source,
        },
        execution_host: ExecutionHost {
            id: text(input.execution_host.map(|h| h.id.as_str())),
            label: text(input.execution_host.map(|h| h.label.as_str())),
        },
        limits: Limits {
            prompt_token_budget: number(input.prompt_token_budget),
            max_output_tokens: number(input.max_output_tokens),
        },
        diagnostics: Diagnostics {
            fallback_reason: fallback_reason.map_or(ROption::RNone, ROption::RSome),
            degraded_reason: degraded_reason.map_or(ROption::RNone, ROption::RSome),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nullable_fields_are_present_and_discriminators_never_null() {
        let settings = build_runtime_settings(&RuntimeSettingsInput::default());
        let value = serde_json::to_value(&settings).unwrap();
        assert_eq!(
            value,
            json!({
                "schemaVersion": 1,
                "runtime": {"host": "pincer", "mode": "normal", "harnessId": null, "runtimeId": null},
                "model": {"requested": null, "resolved": null, "provider": null, "family": null},
                "contextEngineSelection": {"selectedId": null, "source": "unknown"},
                "executionHost": {"id": null, "label": null},
                "limits": {"promptTokenBudget": null, "maxOutputTokens": null},
                "diagnostics": {"fallbackReason": null, "degradedReason": null}
            })
        );
    }

    #[test]
    fn strings_are_trimmed_and_numbers_must_be_finite() {
        let settings = build_runtime_settings(&RuntimeSettingsInput {
            harness_id: Some("  "),
            runtime_id: Some(" rt-1 "),
            selected_engine: Some(" sliding-window "),
            prompt_token_budget: Some(f64::NAN),
            max_output_tokens: Some(4096.7),
            ..Default::default()
        });
        assert_eq!(settings.runtime.harness_id, ROption::RNone);
        assert_eq!(settings.runtime.runtime_id, ROption::RSome("rt-1".into()));
        assert_eq!(settings.limits.prompt_token_budget, ROption::RNone);
        assert_eq!(settings.limits.max_output_tokens, ROption::RSome(4096));
        assert_eq!(
            settings.context_engine_selection.source,
            SelectionSource::Configured
        );
    }

    #[test]
    fn reason_codes_map_in_order() {
        let cases = [
            ("rate_limited", ReasonCode::RateLimited),
            ("Request timeout after 30s", ReasonCode::ProviderTimeout),
            ("HTTP 429", ReasonCode::RateLimited),
            ("context window pressure", ReasonCode::ContextOverflow),
            ("runtime went away", ReasonCode::RuntimeUnavailable),
            ("primary model unavailable", ReasonCode::ProviderUnavailable),
            ("something odd", ReasonCode::Unknown),
        ];
        for (text, code) in cases {
            assert_eq!(reason_code(Some(text)), Some(code), "{text}");
        }
        assert_eq!(reason_code(Some("  ")), None);
    }

    #[test]
    fn mode_is_derived_degraded_then_fallback_then_normal() {
        let degraded = build_runtime_settings(&RuntimeSettingsInput {
            fallback_reason: Some(Reason::Text("timeout")),
            degraded_reason: Some(Reason::Text("overflow")),
            ..Default::default()
        });
        assert_eq!(degraded.runtime.mode, RuntimeMode::Degraded);
        let switched = build_runtime_settings(&RuntimeSettingsInput {
            requested_model: Some("gpt-5"),
            resolved_model: Some("gpt-4o"),
            ..Default::default()
        });
        assert_eq!(switched.runtime.mode, RuntimeMode::Fallback);
        let explicit = build_runtime_settings(&RuntimeSettingsInput {
            mode: Some(RuntimeMode::Normal),
            fallback_reason: Some(Reason::Text("timeout")),
            selection_source: Some(SelectionSource::Default),
            ..Default::default()
        });
        assert_eq!(explicit.runtime.mode, RuntimeMode::Normal);
        assert_eq!(
            explicit.context_engine_selection.source,
            SelectionSource::Default
        );
    }
}
