//! Host-parameter projection (reference §6.1): an engine that declares
//! `acceptedHostParams` sees only those host parameters (and, for `compact`, always the abort
//! signal).

use pincer_plugin_api::abi::latest::HostParams;
use pincer_plugin_api::abi::ROption;

use crate::engines::instance::EngineDescriptor;
use crate::types::Method;

/// Host-parameter projection (§6.1) for an engine's `info`: keep a host param when the engine
/// declared none, listed it, or — for `compact` — it is the abort signal.
pub fn project<'a>(
    info: &EngineDescriptor,
    method: Method,
    host: &HostParams<'a>,
) -> HostParams<'a> {
    project_with(info.accepted_host_params.as_deref(), method, host)
}

pub(crate) fn project_with<'a>(
    accepted: Option<&[String]>,
    method: Method,
    host: &HostParams<'a>,
) -> HostParams<'a> {
    let Some(accepted) = accepted else {
        return *host;
    };
    let keep = |name: &str| accepted.iter().any(|p| p == name);
    HostParams {
        session_key: if keep("sessionKey") {
            host.session_key
        } else {
            ROption::RNone
        },
        prompt: if keep("prompt") {
            host.prompt
        } else {
            ROption::RNone
        },
        runtime_settings: if keep("runtimeSettings") {
            host.runtime_settings
        } else {
            ROption::RNone
        },
        session_target: if keep("sessionTarget") {
            host.session_target
        } else {
            ROption::RNone
        },
        runtime_context_json: if keep("runtimeContext") {
            host.runtime_context_json
        } else {
            ROption::RNone
        },
        // `promptCache` lives inside `runtimeContext` (§1): it goes with it.
        prompt_cache: if keep("runtimeContext") {
            host.prompt_cache
        } else {
            ROption::RNone
        },
        abort_signal: if keep("abortSignal") || method == Method::Compact {
            host.abort_signal
        } else {
            ROption::RNone
        },
    }
}
