//! Everything an engine returns, checked at the boundary before any host code reads it.
//!
//! **Strings.** `abi_stable`'s `RString` and `RStr` are assumed to be UTF-8, and every host
//! accessor reads them as `&str`; but a library written against the ABI alone can hand over
//! any bytes, and text that is not UTF-8 read as `&str` can panic or abort the host (the
//! token estimate, the terminal sanitizer) or reach its JSON output. So, in process
//! ([`super::backend::InProcess`]) and in an isolated worker before a reply is encoded:
//!
//! - a **result** (and `info`) holding a string that is not UTF-8 is **refused**: the call
//!   fails with `failed`, naming the method and the field — a contract failure that
//!   quarantines the engine like any other; nothing of the result is used;
//! - an **error**'s message is **replaced**, its invalid bytes by U+FFFD (an error is already a
//!   failure; refusing it would lose what the engine said), then cut and cleaned as every
//!   engine text is ([`crate::types::sanitize_text`]);
//! - what an engine passes to the host's services: log records are replaced the same way;
//!   messages handed to `estimateTokens`, `llmComplete` or the runtime's compaction are
//!   checked and refused.
//!
//! **`info` caps** (`plugins.resultLimits`, [`ResultLimits`]): the number of tools, each tool's
//! schema, name and description, the engine's id, name and version, and the host requirements
//! and parameters it lists — refused with the limit named, before anything is copied.

use std::borrow::Cow;

use pincer_plugin_abi::latest::{
    is_utf8, AssembleResult, AssembledItem, BootstrapResult, CommitTurnStatus, CompactParams,
    CompactResult, EngineError, EngineInfo, EntryId, LlmCompleteRequest, MaintainResult, Message,
    SpawnRollbackBox, ToolCallResult,
};
use pincer_plugin_abi::{ROption, RResult, RStr, RString};

use pincer_plugin_abi::latest as abi;

use super::error::{CallErrorKind, EngineCallError};
use super::methods::for_each_engine_method;
use crate::config::ResultLimits;
use crate::types::Method;

/// Most host-requirement entries an `info` may list (one per operation in the ABI, with room).
pub const MAX_HOST_REQUIREMENTS: usize = 64;
/// Most capabilities one host requirement may list, and most `acceptedHostParams`.
pub const MAX_INFO_LIST_ITEMS: usize = 256;

/// A value an engine returns whose strings the host checks before it reads them.
pub trait CheckedStrings {
    /// The first string that is not UTF-8, by its field; `None` when all are.
    fn invalid_utf8(&self) -> Option<String>;
}

fn opt_bad(value: &ROption<RString>) -> bool {
    matches!(value, ROption::RSome(s) if !is_utf8(s))
}

fn first_bad<'a>(
    fields: impl IntoIterator<Item = (&'a ROption<RString>, &'static str)>,
) -> Option<String> {
    fields
        .into_iter()
        .find(|(value, _)| opt_bad(value))
        .map(|(_, name)| name.to_owned())
}

impl CheckedStrings for () {
    fn invalid_utf8(&self) -> Option<String> {
        None
    }
}

/// `CheckedStrings` of each result of the method table that holds no string
/// (`strings: none`).
macro_rules! stringless_results {
    ($($name:ident($params:ident) -> $result:ty {
        variant: $variant:ident, request: $request:ident, optional: $optional:ident,
        canned: [$($canned:expr)?], check: [$($check:path)?], fallback: $fallback:ident,
        strings: $strings:ident,
    })*) => {
        $(stringless_results!(@one $strings $result);)*
    };
    (@one own $result:ty) => {};
    (@one none $result:ty) => {
        impl CheckedStrings for $result {
            fn invalid_utf8(&self) -> Option<String> {
                None
            }
        }
    };
}

for_each_engine_method!(stringless_results);

impl CheckedStrings for CommitTurnStatus {
    fn invalid_utf8(&self) -> Option<String> {
        None
    }
}

impl CheckedStrings for ROption<SpawnRollbackBox> {
    fn invalid_utf8(&self) -> Option<String> {
        None
    }
}

impl CheckedStrings for Message {
    fn invalid_utf8(&self) -> Option<String> {
        Message::invalid_utf8(self)
    }
}

impl CheckedStrings for AssembleResult {
    fn invalid_utf8(&self) -> Option<String> {
        for (i, item) in self.items.iter().enumerate() {
            if let AssembledItem::New(message) = item {
                if let Some(field) = message.invalid_utf8() {
                    return Some(format!("items[{i}], a new message's {field}"));
                }
            }
        }
        first_bad([(&self.system_prompt_addition, "systemPromptAddition")])
    }
}

impl CheckedStrings for CompactResult {
    fn invalid_utf8(&self) -> Option<String> {
        if let Some(bad) = first_bad([(&self.reason, "reason")]) {
            return Some(bad);
        }
        let ROption::RSome(details) = &self.result else {
            return None;
        };
        first_bad([
            (&details.summary, "result.summary"),
            (&details.first_kept_entry_id, "result.firstKeptEntryId"),
            (&details.details_json, "result.details"),
            (&details.session_id, "result.sessionId"),
            (&details.session_file, "result.sessionFile"),
        ])
    }
}

impl CheckedStrings for BootstrapResult {
    fn invalid_utf8(&self) -> Option<String> {
        first_bad([(&self.reason, "reason")])
    }
}

impl CheckedStrings for MaintainResult {
    fn invalid_utf8(&self) -> Option<String> {
        first_bad([(&self.reason, "reason")])
    }
}

impl CheckedStrings for ToolCallResult {
    fn invalid_utf8(&self) -> Option<String> {
        (!is_utf8(&self.content)).then(|| "content".to_owned())
    }
}

impl CheckedStrings for EngineInfo {
    fn invalid_utf8(&self) -> Option<String> {
        for (value, name) in [
            (&self.id, "id"),
            (&self.name, "name"),
            (&self.version, "version"),
        ] {
            if !is_utf8(value) {
                return Some(name.to_owned());
            }
        }
        for (i, req) in self.host_requirements.iter().enumerate() {
            if req.required_capabilities.iter().any(|c| !is_utf8(c)) {
                return Some(format!("hostRequirements[{i}].requiredCapabilities"));
            }
            if opt_bad(&req.unsupported_message) {
                return Some(format!("hostRequirements[{i}].unsupportedMessage"));
            }
        }
        if let ROption::RSome(params) = &self.accepted_host_params {
            if params.iter().any(|p| !is_utf8(p)) {
                return Some("acceptedHostParams".to_owned());
            }
        }
        for (i, tool) in self.tools.iter().enumerate() {
            for (value, name) in [
                (&tool.name, "name"),
                (&tool.description, "description"),
                (&tool.parameters_schema_json, "parametersSchema"),
            ] {
                if !is_utf8(value) {
                    return Some(format!("tools[{i}].{name}"));
                }
            }
        }
        None
    }
}

/// The refusal of a `method` result whose `field` is not UTF-8.
pub fn not_utf8(method: Method, field: &str) -> EngineCallError {
    EngineCallError::new(
        CallErrorKind::Failed,
        format!(
            "the engine's {method} result holds text that is not UTF-8 (in {field}); the result is refused"
        ),
    )
}

/// A call's answer as the host uses it: an error in host memory (its message made UTF-8), or
/// a result whose every string is UTF-8.
///
/// # Errors
/// The engine's error, or the refusal of a result with a string that is not UTF-8.
pub fn checked<T: CheckedStrings>(
    method: Method,
    result: RResult<T, EngineError>,
) -> Result<T, EngineCallError> {
    let value = result.into_result().map_err(EngineCallError::from)?;
    match value.invalid_utf8() {
        Some(field) => Err(not_utf8(method, &field)),
        None => Ok(value),
    }
}

/// An engine's error message as text: its bytes, with any that are not UTF-8 replaced by
/// U+FFFD (never read as `&str` before that).
pub fn error_text(err: &EngineError) -> Cow<'_, str> {
    String::from_utf8_lossy(err.message().as_bytes())
}

/// An engine string that is not kept (log text): its bytes, made UTF-8 (U+FFFD).
pub fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// The `info` caps of `limits` (see the module docs), checked before anything of `info` is
/// copied. `info`'s strings must already be known UTF-8.
///
/// # Errors
/// The first cap broken, naming it (`plugins.resultLimits.<key>`) and the figure.
pub fn check_info(info: &EngineInfo, limits: &ResultLimits) -> Result<(), EngineCallError> {
    let refuse = |what: String| {
        Err(EngineCallError::new(
            CallErrorKind::Failed,
            format!("the engine's info is refused: {what}"),
        ))
    };
    let over = |len: usize, max: u64| len as u64 > max;
    for (value, field) in [(&info.id, "id"), (&info.name, "name")] {
        if over(value.len(), limits.max_engine_name_bytes) {
            return refuse(format!(
                "info.{field} is {} bytes, more than plugins.resultLimits.maxEngineNameBytes ({})",
                value.len(),
                limits.max_engine_name_bytes
            ));
        }
    }
    if over(info.version.len(), limits.max_engine_version_bytes) {
        return refuse(format!(
            "info.version is {} bytes, more than plugins.resultLimits.maxEngineVersionBytes ({})",
            info.version.len(),
            limits.max_engine_version_bytes
        ));
    }
    if info.host_requirements.len() > MAX_HOST_REQUIREMENTS {
        return refuse(format!(
            "info.hostRequirements lists {} entries, more than {MAX_HOST_REQUIREMENTS}",
            info.host_requirements.len()
        ));
    }
    for req in info.host_requirements.iter() {
        if req.required_capabilities.len() > MAX_INFO_LIST_ITEMS {
            return refuse(format!(
                "a host requirement lists {} capabilities, more than {MAX_INFO_LIST_ITEMS}",
                req.required_capabilities.len()
            ));
        }
        if let Some(long) = req
            .required_capabilities
            .iter()
            .find(|c| over(c.len(), limits.max_engine_name_bytes))
        {
            return refuse(format!(
                "a required capability is {} bytes, more than plugins.resultLimits.maxEngineNameBytes ({})",
                long.len(),
                limits.max_engine_name_bytes
            ));
        }
        if let ROption::RSome(message) = &req.unsupported_message {
            if over(message.len(), limits.max_tool_description_bytes) {
                return refuse(format!(
                    "a host requirement's unsupportedMessage is {} bytes, more than plugins.resultLimits.maxToolDescriptionBytes ({})",
                    message.len(),
                    limits.max_tool_description_bytes
                ));
            }
        }
    }
    if let ROption::RSome(params) = &info.accepted_host_params {
        if params.len() > MAX_INFO_LIST_ITEMS {
            return refuse(format!(
                "info.acceptedHostParams lists {} names, more than {MAX_INFO_LIST_ITEMS}",
                params.len()
            ));
        }
        if let Some(long) = params
            .iter()
            .find(|p| over(p.len(), limits.max_engine_name_bytes))
        {
            return refuse(format!(
                "an accepted host parameter is {} bytes, more than plugins.resultLimits.maxEngineNameBytes ({})",
                long.len(),
                limits.max_engine_name_bytes
            ));
        }
    }
    if over(info.tools.len(), limits.max_tools) {
        return refuse(format!(
            "it offers {} tools, more than plugins.resultLimits.maxTools ({})",
            info.tools.len(),
            limits.max_tools
        ));
    }
    for tool in info.tools.iter() {
        if over(tool.name.len(), limits.max_tool_name_bytes) {
            return refuse(format!(
                "a tool name is {} bytes, more than plugins.resultLimits.maxToolNameBytes ({})",
                tool.name.len(),
                limits.max_tool_name_bytes
            ));
        }
        let name = crate::types::sanitize_text(&tool.name, crate::types::MAX_ENGINE_TEXT_LEN);
        if over(tool.description.len(), limits.max_tool_description_bytes) {
            return refuse(format!(
                "tool \"{name}\"'s description is {} bytes, more than plugins.resultLimits.maxToolDescriptionBytes ({})",
                tool.description.len(),
                limits.max_tool_description_bytes
            ));
        }
        if over(
            tool.parameters_schema_json.len(),
            limits.max_tool_schema_bytes,
        ) {
            return refuse(format!(
                "tool \"{name}\"'s parameter schema is {} bytes, more than plugins.resultLimits.maxToolSchemaBytes ({})",
                tool.parameters_schema_json.len(),
                limits.max_tool_schema_bytes
            ));
        }
    }
    Ok(())
}

/// `info` as the host takes it: every string UTF-8 and every cap of `limits` kept.
///
/// # Errors
/// The refusal, naming the field or the cap.
pub fn check_info_all(info: &EngineInfo, limits: &ResultLimits) -> Result<(), EngineCallError> {
    if let Some(field) = info.invalid_utf8() {
        return Err(not_utf8(Method::Info, &field));
    }
    check_info(info, limits)
}

/// Whether a string an engine passed to the host is UTF-8.
pub fn str_is_utf8(value: RStr<'_>) -> bool {
    std::str::from_utf8(value.as_str().as_bytes()).is_ok()
}

fn opt_str_bad(value: ROption<RStr<'_>>) -> bool {
    matches!(value, ROption::RSome(s) if !str_is_utf8(s))
}

/// The first message (or entry id) among those an engine passed to a host service that holds
/// text that is not UTF-8, as `messages[i].<field>`.
pub fn messages_invalid_utf8(messages: &[Message], entry_ids: &[EntryId]) -> Option<String> {
    if let Some((i, field)) = messages
        .iter()
        .enumerate()
        .find_map(|(i, m)| m.invalid_utf8().map(|f| (i, f)))
    {
        return Some(format!("messages[{i}].{field}"));
    }
    entry_ids
        .iter()
        .position(|id| !id.is_utf8())
        .map(|i| format!("entryIds[{i}]"))
}

/// What the host refuses of an `llmComplete` request an engine made: text that is not UTF-8.
///
/// # Errors
/// The refusal, naming the field, as the engine's error.
pub fn check_llm_request(request: &LlmCompleteRequest<'_>) -> Result<(), EngineError> {
    let bad = if opt_str_bad(request.system_prompt) {
        Some("systemPrompt".to_owned())
    } else {
        messages_invalid_utf8(request.messages.as_slice(), &[])
    };
    match bad {
        Some(field) => Err(refused_service("llmComplete", &field)),
        None => Ok(()),
    }
}

/// What the host refuses of the parameters of a compaction an engine delegates to the runtime:
/// text that is not UTF-8.
///
/// # Errors
/// The refusal, naming the field, as the engine's error.
pub fn check_delegated_compaction(params: &CompactParams<'_>) -> Result<(), EngineError> {
    let bad = [
        (!str_is_utf8(params.session_id), "sessionId"),
        (!str_is_utf8(params.session_file), "sessionFile"),
        (opt_str_bad(params.agent_id), "agentId"),
        (opt_str_bad(params.force_reason), "forceReason"),
        (
            opt_str_bad(params.custom_instructions),
            "customInstructions",
        ),
    ]
    .into_iter()
    .find(|(bad, _)| *bad)
    .map(|(_, field)| field.to_owned())
    .or_else(|| messages_invalid_utf8(params.messages.as_slice(), params.entry_ids.as_slice()));
    match bad {
        Some(field) => Err(refused_service("delegateCompactionToRuntime", &field)),
        None => Ok(()),
    }
}

fn refused_service(service: &str, field: &str) -> EngineError {
    EngineError::failed(format!(
        "the host refuses {service}: {field} is not UTF-8 text"
    ))
}

/// The host's token estimate of messages an engine passed in (`estimateTokens`): messages
/// with text that is not UTF-8 cannot be measured and count as `u64::MAX` (never fits).
pub fn estimate_passed_messages(messages: &[Message]) -> u64 {
    if messages_invalid_utf8(messages, &[]).is_some() {
        return u64::MAX;
    }
    pincer_plugin_api::tokens::estimate_tokens(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_plugin_abi::RVec;

    fn garbage() -> RString {
        // SAFETY: deliberately not UTF-8, as a stranger's library could hand over; only its
        // bytes are read.
        unsafe { RString::from_utf8_unchecked(RVec::from(vec![b'a', 0xff, 0xfe])) }
    }

    #[test]
    fn a_result_with_bytes_that_are_not_utf8_is_refused_naming_the_field() {
        let result = ToolCallResult {
            content: garbage(),
            is_error: false,
        };
        let err = checked(Method::CallTool, RResult::ROk(result)).unwrap_err();
        assert_eq!(err.kind, CallErrorKind::Failed);
        assert!(err.message.contains("callTool"), "{}", err.message);
        assert!(err.message.contains("(in content)"), "{}", err.message);
        let fine = ToolCallResult {
            content: "ok".into(),
            is_error: false,
        };
        assert!(checked(Method::CallTool, RResult::ROk(fine)).is_ok());
    }

    #[test]
    fn an_error_that_is_not_utf8_is_kept_with_replacement_characters() {
        let err = checked::<()>(
            Method::Assemble,
            RResult::RErr(EngineError::Failed(garbage())),
        )
        .unwrap_err();
        assert_eq!(err.kind, CallErrorKind::Failed);
        assert_eq!(err.message, "a\u{fffd}\u{fffd}");
    }
}
