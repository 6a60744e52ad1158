//! Host-parameter projection (docs/CONTRACT.md §6.1): an engine that declares
//! `acceptedHostParams` sees only those host parameters (and, for `compact`, always the abort
//! signal).

use pincer_plugin_abi::latest::HostParams;
use pincer_plugin_abi::ROption;

use crate::engines::instance::EngineDescriptor;
use crate::types::Method;

/// An engine's `acceptedHostParams` as a bit set, worked out once so that projecting a call's
/// host parameters is a few bit tests (and the mask is `Copy`, so a hand-off carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostParamMask(Option<u8>);

const SESSION_KEY: u8 = 1 << 0;
const PROMPT: u8 = 1 << 1;
const RUNTIME_SETTINGS: u8 = 1 << 2;
const SESSION_TARGET: u8 = 1 << 3;
const RUNTIME_CONTEXT: u8 = 1 << 4;
const ABORT_SIGNAL: u8 = 1 << 5;

impl HostParamMask {
    /// Keeps everything: an engine that declared no list.
    pub const ALL: HostParamMask = HostParamMask(None);

    /// The mask of a declared list (`None`: keep everything).
    pub fn of(accepted: Option<&[String]>) -> Self {
        HostParamMask(accepted.map(|names| {
            names.iter().fold(0, |bits, name| {
                bits | match name.as_str() {
                    "sessionKey" => SESSION_KEY,
                    "prompt" => PROMPT,
                    "runtimeSettings" => RUNTIME_SETTINGS,
                    "sessionTarget" => SESSION_TARGET,
                    "runtimeContext" => RUNTIME_CONTEXT,
                    "abortSignal" => ABORT_SIGNAL,
                    _ => 0,
                }
            })
        }))
    }

    /// The mask of an engine's `info`.
    pub fn of_engine(info: &EngineDescriptor) -> Self {
        Self::of(info.accepted_host_params.as_deref())
    }

    /// `host` as the engine may see it for `method`: a host param is kept when the engine
    /// declared no list, listed it, or — for `compact` — it is the abort signal.
    pub fn apply<'a>(self, method: Method, host: &HostParams<'a>) -> HostParams<'a> {
        let Some(bits) = self.0 else {
            return *host;
        };
        let keep = |bit: u8| bits & bit != 0;
        HostParams {
            session_key: kept(keep(SESSION_KEY), host.session_key),
            prompt: kept(keep(PROMPT), host.prompt),
            runtime_settings: kept(keep(RUNTIME_SETTINGS), host.runtime_settings),
            session_target: kept(keep(SESSION_TARGET), host.session_target),
            runtime_context_json: kept(keep(RUNTIME_CONTEXT), host.runtime_context_json),
            // `promptCache` lives inside `runtimeContext` (§1): it goes with it.
            prompt_cache: kept(keep(RUNTIME_CONTEXT), host.prompt_cache),
            abort_signal: kept(
                keep(ABORT_SIGNAL) || method == Method::Compact,
                host.abort_signal,
            ),
        }
    }
}

fn kept<T>(keep: bool, value: ROption<T>) -> ROption<T> {
    if keep {
        value
    } else {
        ROption::RNone
    }
}
