//! Contract checks on what an engine returns, made where the guard turns the engine's answer
//! into the host's — before anything else reads it. Engines are written by strangers: a
//! result that breaks the contract fails the call like an error does (the engine is
//! quarantined and `legacy` answers), so nothing downstream has to distrust it.
//!
//! `assemble`: each input message referenced at most once and in order, and only messages
//! that exist; new messages and the system-prompt addition within `plugins.resultLimits`; an
//! `estimatedTokens` above the call's budget is not trusted — the host's own estimate of the
//! assembled context replaces it, and a figure that differs is flagged in the log.
//!
//! `callTool`: the content within `plugins.resultLimits.maxToolResultBytes` (it goes to the
//! model and into the session). `compact`: the summary within the new-message budget and the
//! reason within [`MAX_REASON_BYTES`] (both reach the session file, logs and terminals);
//! `bootstrap` and `maintain`: their reasons too.
//!
//! Also the crash journal's side of a guarded call ([`CallTrust`]): the tag that marks the
//! engine as in flight while its code runs.

use pincer_plugin_abi::latest::{
    AssembleResult, AssembledItem, BootstrapResult, CompactResult, MaintainResult, ToolCallResult,
};
use pincer_plugin_abi::{ROption, RString};
use pincer_plugin_api::tokens::estimate_message_tokens;
#[cfg(test)]
use std::sync::Arc;

use crate::config::ResultLimits;
use crate::engines::crash_journal::{self, InCall, JournalTag};
use crate::engines::request::{
    AssembleRequest, BootstrapRequest, CompactRequest, MaintainRequest, ToolCallRequest,
};
use crate::types::Method;

/// What broke the contract: the reason an engine's result was refused (and the engine
/// quarantined). Reads as its text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ContractViolation(String);

impl ContractViolation {
    /// A stable snake_case code for machines.
    pub const fn code(&self) -> &'static str {
        "contract_violation"
    }

    /// The reason, as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ContractViolation {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// What a guard needs to hold an engine to the contract: the result caps, and the crash
/// journal tag of a plugin engine (none for the default engine).
#[derive(Debug, Clone, Default)]
pub struct CallTrust {
    /// The caps on results.
    pub limits: ResultLimits,
    /// Marks the engine in flight in the crash journal.
    pub tag: Option<JournalTag>,
}

impl CallTrust {
    /// Marks the engine as in `method` until the guard drops (nothing without a journal).
    #[inline]
    pub fn enter(&self, method: Method) -> Option<InCall> {
        let tag = self.tag.as_ref()?;
        Some(crash_journal::global()?.enter(tag, method))
    }
}

/// The contract check of an `assemble` result against its request.
///
/// # Errors
/// What broke the contract, as the quarantine reason.
pub fn check_assemble(
    request: &AssembleRequest,
    result: &mut AssembleResult,
    limits: &ResultLimits,
) -> Result<(), ContractViolation> {
    let input = request.messages.len() as u64;
    let mut next = 0u64;
    let mut new_messages = 0u64;
    let mut new_chars = 0u64;
    for item in result.items.iter() {
        match item {
            AssembledItem::Input { start, end } => {
                if start > end || *end > input {
                    return Err(ContractViolation(format!(
                        "the assemble result references input messages {start}..{end}, but the input has {input}: an engine may keep only messages it was given"
                    )));
                }
                if start < end && *start < next {
                    return Err(ContractViolation(format!(
                        "the assemble result references input messages {start}..{end} after already using up to {next}: each input message may be referenced at most once, in order"
                    )));
                }
                next = next.max(*end);
            }
            AssembledItem::New(message) => {
                new_messages += 1;
                if new_messages > limits.max_new_messages {
                    return Err(ContractViolation(format!(
                        "the assemble result adds more than {} new messages (plugins.resultLimits.maxNewMessages)",
                        limits.max_new_messages
                    )));
                }
                new_chars = new_chars.saturating_add(estimate_message_tokens(message) * 4);
                if new_chars > limits.max_new_message_chars {
                    return Err(ContractViolation(format!(
                        "the assemble result's new messages hold more than {} characters (plugins.resultLimits.maxNewMessageChars)",
                        limits.max_new_message_chars
                    )));
                }
            }
        }
    }
    if let ROption::RSome(addition) = &result.system_prompt_addition {
        if addition.len() as u64 > limits.max_system_prompt_addition_bytes {
            return Err(ContractViolation(format!(
                "the assemble result's systemPromptAddition is {} bytes, more than {} (plugins.resultLimits.maxSystemPromptAdditionBytes)",
                addition.len(),
                limits.max_system_prompt_addition_bytes
            )));
        }
    }
    if let (ROption::RSome(estimate), Some(budget)) =
        (result.estimated_tokens, request.token_budget)
    {
        if estimate > budget {
            // Above the budget, the number decides whether the turn compacts: the host's own
            // estimate of the assembled context replaces it (the same function engines get,
            // so an honest engine's figure is unchanged), and a different figure is flagged.
            let own = own_estimate(result, &request.messages);
            if own != estimate {
                tracing::warn!(
                    target: "pincer::contract",
                    estimated_tokens = estimate,
                    token_budget = budget,
                    host_estimate = own,
                    "the engine's estimatedTokens is above the budget and not what the context holds; it is not trusted: the host's estimate replaces it"
                );
            }
            result.estimated_tokens = ROption::RSome(own);
        }
    }
    Ok(())
}

/// The host's token estimate of what `result` assembles from `input` (already checked: every
/// range lies inside `input`).
fn own_estimate(result: &AssembleResult, input: &[pincer_plugin_api::Message]) -> u64 {
    result
        .items
        .iter()
        .map(|item| match item {
            AssembledItem::Input { start, end } => input[*start as usize..*end as usize]
                .iter()
                .map(estimate_message_tokens)
                .sum::<u64>(),
            AssembledItem::New(message) => estimate_message_tokens(message),
        })
        .sum()
}

/// The longest `reason` a `compact` result may give, in bytes.
pub const MAX_REASON_BYTES: usize = 64 << 10;

/// The contract check of a `callTool` result.
///
/// # Errors
/// What broke the contract, as the quarantine reason.
pub fn check_tool_result(
    request: &ToolCallRequest,
    result: &mut ToolCallResult,
    limits: &ResultLimits,
) -> Result<(), ContractViolation> {
    let bytes = result.content.len() as u64;
    if bytes > limits.max_tool_result_bytes {
        return Err(ContractViolation(format!(
            "tool {} returned {bytes} bytes, more than plugins.resultLimits.maxToolResultBytes ({}): page large results (raise the cap in pincer.json only for an engine you trust)",
            request.tool_name, limits.max_tool_result_bytes
        )));
    }
    Ok(())
}

/// The contract check of a `compact` result.
///
/// # Errors
/// What broke the contract, as the quarantine reason.
pub fn check_compact(
    _request: &CompactRequest,
    result: &mut CompactResult,
    limits: &ResultLimits,
) -> Result<(), ContractViolation> {
    check_reason("compact", &result.reason)?;
    let summary = result
        .result
        .as_ref()
        .into_option()
        .and_then(|details| details.summary.as_ref().into_option());
    if let Some(summary) = summary {
        if summary.len() as u64 > limits.max_new_message_chars {
            return Err(ContractViolation(format!(
                "the compaction summary is {} bytes, more than plugins.resultLimits.maxNewMessageChars ({})",
                summary.len(),
                limits.max_new_message_chars
            )));
        }
    }
    Ok(())
}

/// `reason` of a `method` result within [`MAX_REASON_BYTES`].
fn check_reason(method: &str, reason: &ROption<RString>) -> Result<(), ContractViolation> {
    match reason {
        ROption::RSome(reason) if reason.len() > MAX_REASON_BYTES => {
            Err(ContractViolation(format!(
                "the {method} result's reason is {} bytes, more than {MAX_REASON_BYTES}",
                reason.len()
            )))
        }
        _ => Ok(()),
    }
}

/// The contract check of a `bootstrap` result: its reason within [`MAX_REASON_BYTES`].
///
/// # Errors
/// What broke the contract, as the quarantine reason.
pub fn check_bootstrap(
    _request: &BootstrapRequest,
    result: &mut BootstrapResult,
    _limits: &ResultLimits,
) -> Result<(), ContractViolation> {
    check_reason("bootstrap", &result.reason)
}

/// The contract check of a `maintain` result: its reason within [`MAX_REASON_BYTES`].
///
/// # Errors
/// What broke the contract, as the quarantine reason.
pub fn check_maintain(
    _request: &MaintainRequest,
    result: &mut MaintainResult,
    _limits: &ResultLimits,
) -> Result<(), ContractViolation> {
    check_reason("maintain", &result.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_plugin_abi::latest::CompactionDetails;

    fn compacted(summary: usize, reason: usize) -> CompactResult {
        CompactResult {
            ok: true,
            compacted: true,
            reason: ROption::RSome("r".repeat(reason).into()),
            result: ROption::RSome(CompactionDetails {
                summary: ROption::RSome("s".repeat(summary).into()),
                first_kept_entry_id: ROption::RNone,
                tokens_before: 10,
                tokens_after: ROption::RNone,
                details_json: ROption::RNone,
                session_id: ROption::RNone,
                session_file: ROption::RNone,
            }),
        }
    }

    #[test]
    fn bootstrap_and_maintain_reasons_beyond_their_cap_break_the_contract() {
        let at = |n: usize| ROption::RSome(RString::from("x".repeat(n)));
        assert_eq!(check_reason("maintain", &at(MAX_REASON_BYTES)), Ok(()));
        assert_eq!(check_reason("maintain", &ROption::RNone), Ok(()));
        let err = check_reason("bootstrap", &at(MAX_REASON_BYTES + 1)).unwrap_err();
        assert!(err.contains("bootstrap result's reason"), "{err}");
    }

    #[test]
    fn a_compact_result_beyond_its_caps_breaks_the_contract() {
        let request = CompactRequest::manual(
            Arc::from("s"),
            Arc::from("/tmp/s.jsonl"),
            Arc::from(Vec::new()),
            Arc::from(Vec::new()),
            crate::engines::request::HostInputs::default(),
        );
        let limits = ResultLimits {
            max_new_message_chars: 100,
            ..ResultLimits::default()
        };
        assert_eq!(
            check_compact(&request, &mut compacted(100, 10), &limits),
            Ok(())
        );
        let err = check_compact(&request, &mut compacted(101, 10), &limits).unwrap_err();
        assert!(err.contains("maxNewMessageChars (100)"), "{err}");
        let err =
            check_compact(&request, &mut compacted(1, MAX_REASON_BYTES + 1), &limits).unwrap_err();
        assert!(err.contains("reason"), "{err}");
    }
}
