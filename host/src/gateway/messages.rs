//! Messages checked at the door: every message a client hands the gateway is checked against
//! OpenClaw's message model before anything is stored or handed to an engine.
//!
//! The model is OpenClaw's `AgentMessage`: pi-ai's `user`, `assistant` and `toolResult`
//! messages plus the agent's own `custom`, `bashExecution`, `compactionSummary` and
//! `branchSummary`. Each role's required fields must be there with their types; a field the
//! model types that is present must have that type; `content` blocks must be objects whose
//! `type` the role allows (user, toolResult and custom: `text`, `image`; assistant: `text`,
//! `thinking`, `toolCall`), each with its own required fields. Keys the model does not name are
//! accepted and kept (a later OpenClaw may add some), as session files keep them.
//!
//! A role OpenClaw does not know is refused. OpenClaw's `convertToLlm` (pi-coding-agent's
//! `messages.ts`) turns each known role into what the model sees and, for any other role,
//! returns nothing (`default: return undefined`, then filtered out): such a message would be
//! stored and then silently missing from every model request. The gateway refuses it instead,
//! so that nothing a client stores disappears. `system` is not an `AgentMessage` role either
//! (a system prompt is the gateway's `--system`), and `hookMessage` is the role OpenClaw's
//! files before version 3 used for what is now `custom` with `customType: "hook"`.

use serde_json::{Map, Value};

use crate::types::json_kind;

/// What is wrong with a message: the field (relative to the message: `content[2].type`, or
/// empty for the message itself) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageFault {
    /// The field, as a path inside the message (`toolCallId`, `content[1].text`).
    pub field: String,
    /// What was wrong and what the model expects.
    pub problem: String,
}

impl MessageFault {
    fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        MessageFault {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// The roles OpenClaw's message model knows, in the order the documentation lists them.
pub const KNOWN_ROLES: [&str; 7] = [
    "user",
    "assistant",
    "toolResult",
    "custom",
    "bashExecution",
    "compactionSummary",
    "branchSummary",
];

/// Which block types a role's `content` may hold.
fn allowed_blocks(role: &str) -> &'static [&'static str] {
    match role {
        "assistant" => &["text", "thinking", "toolCall"],
        _ => &["text", "image"],
    }
}

/// Checks `value` against OpenClaw's message model.
///
/// # Errors
/// The first fault found, naming its field.
pub fn check_message(value: &Value) -> Result<(), MessageFault> {
    let Value::Object(map) = value else {
        return Err(MessageFault::new(
            "",
            format!(
                "must be a message object ({{\"role\": …, \"content\": …}}), not {}",
                json_kind(value)
            ),
        ));
    };
    let role = match map.get("role") {
        None => {
            return Err(MessageFault::new(
                "role",
                format!("is missing (one of {})", KNOWN_ROLES.join(", ")),
            ))
        }
        Some(Value::String(role)) => role.as_str(),
        Some(other) => {
            return Err(MessageFault::new(
                "role",
                format!("must be a string, not {}", json_kind(other)),
            ))
        }
    };
    let fields = Fields { map };
    fields.optional("timestamp", Kind::Number)?;
    fields.optional("excludeFromContext", Kind::Bool)?;
    match role {
        "user" => fields.content(role)?,
        "assistant" => {
            fields.content(role)?;
            for key in ["api", "provider", "model", "stopReason", "errorMessage"] {
                fields.optional(key, Kind::String)?;
            }
            fields.optional("usage", Kind::Object)?;
        }
        "toolResult" => {
            fields.required("toolCallId", Kind::NonEmptyString)?;
            fields.required("toolName", Kind::String)?;
            fields.optional("isError", Kind::Bool)?;
            fields.content(role)?;
        }
        "custom" => {
            fields.required("customType", Kind::String)?;
            fields.optional("display", Kind::Bool)?;
            fields.content(role)?;
        }
        "bashExecution" => {
            fields.required("command", Kind::String)?;
            fields.required("output", Kind::String)?;
            for key in ["cancelled", "truncated"] {
                fields.optional(key, Kind::Bool)?;
            }
        }
        "compactionSummary" => {
            fields.required("summary", Kind::String)?;
            fields.required("tokensBefore", Kind::Number)?;
        }
        "branchSummary" => {
            fields.required("summary", Kind::String)?;
            fields.required("fromId", Kind::String)?;
        }
        "hookMessage" => {
            return Err(MessageFault::new(
                "role",
                "\"hookMessage\" is the role of OpenClaw session files before version 3; send \
                 it as {\"role\": \"custom\", \"customType\": \"hook\", …}",
            ))
        }
        "system" => {
            return Err(MessageFault::new(
                "role",
                "\"system\" is not a role of OpenClaw's message model (its context never \
                 carries a system message); give the system prompt with `pincer serve --system`",
            ))
        }
        other => {
            return Err(MessageFault::new(
                "role",
                format!(
                    "{other:?} is not a role OpenClaw knows ({}); OpenClaw leaves a message \
                     of any other role out of what the model sees, so the gateway does not \
                     store one",
                    KNOWN_ROLES.join(", ")
                ),
            ))
        }
    }
    Ok(())
}

/// The JSON types the model gives fields.
#[derive(Clone, Copy)]
enum Kind {
    String,
    NonEmptyString,
    Number,
    Bool,
    Object,
}

impl Kind {
    fn fits(self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::NonEmptyString => value.as_str().is_some_and(|s| !s.is_empty()),
            Kind::Number => value.is_number(),
            Kind::Bool => value.is_boolean(),
            Kind::Object => value.is_object(),
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::String => "a string",
            Kind::NonEmptyString => "a non-empty string",
            Kind::Number => "a number",
            Kind::Bool => "true or false",
            Kind::Object => "an object",
        }
    }
}

/// The fields of one object (a message or a block), read for checking.
struct Fields<'a> {
    map: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn required(&self, key: &str, kind: Kind) -> Result<(), MessageFault> {
        match self.map.get(key) {
            None => Err(MessageFault::new(
                key,
                format!("is missing ({})", kind.expected()),
            )),
            Some(value) => check_kind(key, value, kind),
        }
    }

    fn optional(&self, key: &str, kind: Kind) -> Result<(), MessageFault> {
        match self.map.get(key) {
            None => Ok(()),
            Some(value) => check_kind(key, value, kind),
        }
    }

    /// `content`: a string, or an array of blocks of the types `role` allows.
    fn content(&self, role: &str) -> Result<(), MessageFault> {
        let allowed = allowed_blocks(role);
        let blocks = match self.map.get("content") {
            None => {
                return Err(MessageFault::new(
                    "content",
                    "is missing (a string, or an array of content blocks)",
                ))
            }
            Some(Value::String(_)) => return Ok(()),
            Some(Value::Array(blocks)) => blocks,
            Some(other) => {
                return Err(MessageFault::new(
                    "content",
                    format!(
                        "must be a string or an array of content blocks, not {}",
                        json_kind(other)
                    ),
                ))
            }
        };
        for (index, block) in blocks.iter().enumerate() {
            let at = |field: &str| {
                if field.is_empty() {
                    format!("content[{index}]")
                } else {
                    format!("content[{index}].{field}")
                }
            };
            let Value::Object(map) = block else {
                return Err(MessageFault::new(
                    at(""),
                    format!(
                        "must be a content block object ({{\"type\": …}}), not {}",
                        json_kind(block)
                    ),
                ));
            };
            let kind = match map.get("type") {
                Some(Value::String(kind)) => kind.as_str(),
                None => {
                    return Err(MessageFault::new(
                        at("type"),
                        format!("is missing (one of {})", allowed.join(", ")),
                    ))
                }
                Some(other) => {
                    return Err(MessageFault::new(
                        at("type"),
                        format!("must be a string, not {}", json_kind(other)),
                    ))
                }
            };
            if !allowed.contains(&kind) {
                return Err(MessageFault::new(
                    at("type"),
                    format!(
                        "{kind:?} is not a block type of a {role} message (OpenClaw allows {})",
                        allowed.join(", ")
                    ),
                ));
            }
            let block = Fields { map };
            let required: &[(&str, Kind)] = match kind {
                "text" => &[("text", Kind::String)],
                "thinking" => &[("thinking", Kind::String)],
                "image" => &[("data", Kind::String), ("mimeType", Kind::String)],
                "toolCall" => &[
                    ("id", Kind::NonEmptyString),
                    ("name", Kind::NonEmptyString),
                    ("arguments", Kind::Object),
                ],
                _ => &[],
            };
            for &(key, kind) in required {
                block
                    .required(key, kind)
                    .map_err(|fault| MessageFault::new(at(&fault.field), fault.problem))?;
            }
        }
        Ok(())
    }
}

fn check_kind(key: &str, value: &Value, kind: Kind) -> Result<(), MessageFault> {
    if kind.fits(value) {
        Ok(())
    } else {
        Err(MessageFault::new(
            key,
            format!("must be {}, not {}", kind.expected(), json_kind(value)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fault(value: Value) -> MessageFault {
        check_message(&value).expect_err("refused")
    }

    #[test]
    fn the_issue_s_messages_are_refused_naming_the_field() {
        assert_eq!(
            fault(json!({"role": "user", "content": 5})).field,
            "content"
        );
        assert_eq!(fault(json!({"role": "user"})).field, "content");
        assert_eq!(
            fault(json!({"role": "toolResult", "toolName": "t", "content": "x"})).field,
            "toolCallId"
        );
        assert_eq!(
            fault(json!({"role": "user", "content": [{"type": "wat"}]})).field,
            "content[0].type"
        );
        assert_eq!(
            fault(json!({"role": "wizard", "content": "hi"})).field,
            "role"
        );
        assert_eq!(
            fault(json!({"role": "user", "content": ["text"]})).field,
            "content[0]"
        );
        assert_eq!(
            fault(json!({"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}))
                .field,
            "content[0].type"
        );
        assert_eq!(
            fault(json!({"role": "assistant", "content": [{"type": "image", "data": "", "mimeType": "image/png"}]}))
                .field,
            "content[0].type"
        );
        assert_eq!(
            fault(json!({"role": "assistant", "content": [{"type": "toolCall", "id": "c", "name": "n"}]}))
                .field,
            "content[0].arguments"
        );
    }

    #[test]
    fn openclaw_s_own_shapes_pass() {
        for message in [
            json!({"role": "user", "content": "hi", "timestamp": 1}),
            json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}]}),
            json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "…", "thinkingSignature": "s"}, {"type": "text", "text": "ok"}, {"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}],
                   "api": "openai-completions", "provider": "fake", "model": "echo-1", "stopReason": "toolUse",
                   "usage": {"input": 1, "output": 2}, "timestamp": 2}),
            json!({"role": "toolResult", "toolCallId": "c1", "toolName": "read", "content": [{"type": "text", "text": "x"}], "isError": false}),
            json!({"role": "custom", "customType": "note", "content": "x", "display": false, "details": {"a": 1}}),
            json!({"role": "bashExecution", "command": "ls", "output": "a", "exitCode": 0, "cancelled": false, "truncated": false}),
            json!({"role": "compactionSummary", "summary": "s", "tokensBefore": 10}),
            json!({"role": "branchSummary", "summary": "s", "fromId": "root"}),
            json!({"role": "user", "content": "x", "someFutureKey": [1]}),
        ] {
            assert_eq!(check_message(&message), Ok(()), "{message}");
        }
    }
}
