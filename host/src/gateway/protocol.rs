//! The gateway's wire protocol: one JSON request per HTTP `POST /v1/call`, one JSON answer.
//!
//! A request names a contract method (the method table's rows answered at the gateway:
//! [`crate::engines::methods::GATEWAY_METHODS`]), the harness's `turn`, or a gateway method
//! (`health`, `doctor`, `reload`), the session key it is
//! for, and its parameters. Every successful answer carries the `engineId` and `generation`
//! that served it; every failure a stable snake_case `code` and a message saying what was wrong
//! and what to do, and — when an engine had been taken for the call — that engine's `engineId`
//! and `generation` too. Documented in `docs/GATEWAY.md`, schema `docs/gateway.schema.json`.

use crate::types::json_kind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engines::methods::GATEWAY_METHODS;
use crate::session::key::SessionKey;
use crate::types::Method;

/// The path every call is posted to.
pub const CALL_PATH: &str = "/v1/call";

/// The methods a gateway answers, by contract name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayMethod {
    /// One agent turn through the harness (`prompt`).
    Turn,
    /// An engine method the method table has the gateway answer
    /// (the method table's `gateway` column), on the session's snapshot.
    Engine(Method),
    /// Engines, generations, quarantine.
    Health,
    /// The doctor report.
    Doctor,
    /// Reloads a plugin (or every plugin).
    Reload,
}

impl GatewayMethod {
    /// Every method, in the order the documentation lists them: `turn`, the engine methods
    /// (the method table's `GATEWAY_METHODS`), then the gateway's own.
    pub const ALL: [GatewayMethod; GATEWAY_METHODS.len() + 4] = {
        let mut all = [GatewayMethod::Turn; GATEWAY_METHODS.len() + 4];
        let mut i = 0;
        while i < GATEWAY_METHODS.len() {
            all[i + 1] = GatewayMethod::Engine(GATEWAY_METHODS[i]);
            i += 1;
        }
        all[i + 1] = GatewayMethod::Health;
        all[i + 2] = GatewayMethod::Doctor;
        all[i + 3] = GatewayMethod::Reload;
        all
    };

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            GatewayMethod::Turn => "turn",
            GatewayMethod::Engine(method) => method.as_str(),
            GatewayMethod::Health => "health",
            GatewayMethod::Doctor => "doctor",
            GatewayMethod::Reload => "reload",
        }
    }

    /// The method named `name`.
    pub fn parse(name: &str) -> Option<GatewayMethod> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// The engine method a call of this method is, when it is one.
    pub fn engine_method(self) -> Option<Method> {
        match self {
            GatewayMethod::Engine(method) => Some(method),
            _ => None,
        }
    }

    /// Whether the method works on a session (and so needs `session`).
    pub fn needs_session(self) -> bool {
        !matches!(
            self,
            GatewayMethod::Health | GatewayMethod::Doctor | GatewayMethod::Reload
        )
    }
}

impl std::fmt::Display for GatewayMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One call as it arrives.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// The method's wire name.
    pub method: String,
    /// The session key (created on first use); required by session methods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The method's parameters (an object; absent means `{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// A successful answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallAnswer {
    /// Always `true`.
    pub ok: bool,
    /// The method answered.
    pub method: String,
    /// The session it was for, when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The engine that served the call (the slot's engine for gateway methods).
    pub engine_id: String,
    /// The generation of that engine that served it.
    pub generation: u64,
    /// The method's result.
    pub result: Value,
}

/// A failed call's answer body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorAnswer {
    /// Always `false`.
    pub ok: bool,
    /// The engine the call had taken when it failed (absent when no engine was involved: a
    /// malformed request, a parameter of the wrong type, an unknown method).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_id: Option<String>,
    /// The generation of that engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// What went wrong.
    pub error: ErrorBody,
}

/// The error of a failed call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable snake_case code.
    pub code: String,
    /// What was wrong and what to do.
    pub message: String,
}

/// Why a call failed, with the HTTP status it is answered with.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct GatewayError {
    /// The HTTP status.
    pub status: u16,
    /// A stable snake_case code.
    pub code: &'static str,
    /// What was wrong and what to do.
    pub message: String,
    /// The engine (id, generation) the call had taken when it failed, if any.
    pub engine: Option<(String, u64)>,
}

impl GatewayError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        GatewayError {
            status,
            code,
            message: message.into(),
            engine: None,
        }
    }

    /// The same error, naming the engine (id and generation) that was serving the call when
    /// it failed; an engine already named is kept.
    #[must_use]
    pub fn served_by(mut self, engine_id: &str, generation: u64) -> Self {
        if self.engine.is_none() {
            self.engine = Some((engine_id.to_owned(), generation));
        }
        self
    }

    /// A request the gateway cannot use (400).
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(400, code, message)
    }

    /// A failure while serving a well-formed request (500 unless the code says otherwise).
    pub fn failed(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(500, code, message)
    }

    /// The answer body.
    pub fn body(&self) -> ErrorAnswer {
        ErrorAnswer {
            ok: false,
            engine_id: self.engine.as_ref().map(|(id, _)| id.clone()),
            generation: self.engine.as_ref().map(|(_, generation)| *generation),
            error: ErrorBody {
                code: self.code.to_owned(),
                message: self.message.clone(),
            },
        }
    }
}

/// The parameters of a call, read field by field with errors that name the field.
pub struct Params<'a> {
    method: GatewayMethod,
    object: Option<&'a serde_json::Map<String, Value>>,
}

impl<'a> Params<'a> {
    /// The parameters `value` of `method` (absent or `null`: no parameters).
    ///
    /// # Errors
    /// `params` is not an object.
    pub fn new(method: GatewayMethod, value: Option<&'a Value>) -> Result<Self, GatewayError> {
        let object = match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(other) => {
                return Err(GatewayError::bad_request(
                    "invalid_params",
                    format!(
                        "params of {method} must be a JSON object, not {}",
                        json_kind(other)
                    ),
                ))
            }
        };
        Ok(Params { method, object })
    }

    /// The field `name`, when present and not `null`.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.object
            .and_then(|o| o.get(name))
            .filter(|v| !v.is_null())
    }

    fn wrong(&self, name: &str, expected: &str, found: &Value) -> GatewayError {
        GatewayError::bad_request(
            "invalid_params",
            format!(
                "params.{name} of {} must be {expected}, not {}",
                self.method,
                json_kind(found)
            ),
        )
    }

    /// A required field.
    ///
    /// # Errors
    /// The field is missing.
    pub fn required(&self, name: &str, expected: &str) -> Result<&'a Value, GatewayError> {
        self.get(name).ok_or_else(|| {
            GatewayError::bad_request(
                "invalid_params",
                format!("{} needs params.{name} ({expected})", self.method),
            )
        })
    }

    /// An optional string.
    ///
    /// # Errors
    /// Present but not a string.
    pub fn str(&self, name: &str) -> Result<Option<&'a str>, GatewayError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong(name, "a string", other)),
        }
    }

    /// A required string.
    ///
    /// # Errors
    /// Missing or not a string.
    pub fn required_str(&self, name: &str) -> Result<&'a str, GatewayError> {
        self.required(name, "a string")?;
        Ok(self.str(name)?.expect("present"))
    }

    /// An optional non-negative integer.
    ///
    /// # Errors
    /// Present but not one.
    pub fn u64(&self, name: &str) -> Result<Option<u64>, GatewayError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a non-negative integer", v)),
        }
    }

    /// An optional boolean (absent: `false`).
    ///
    /// # Errors
    /// Present but not a boolean.
    pub fn flag(&self, name: &str) -> Result<bool, GatewayError> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.wrong(name, "true or false", other)),
        }
    }

    /// An optional array.
    ///
    /// # Errors
    /// Present but not an array.
    pub fn array(&self, name: &str) -> Result<Option<&'a Vec<Value>>, GatewayError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(self.wrong(name, "an array", other)),
        }
    }
}

/// Reads a call from the request body `bytes`.
///
/// # Errors
/// Not JSON, not a call object, an unknown method, or a session method without `session`.
pub fn parse_call(bytes: &[u8]) -> Result<(GatewayMethod, CallRequest), GatewayError> {
    let value: Value = crate::session::lone_surrogates::from_slice(bytes).map_err(|err| {
        GatewayError::bad_request(
            "bad_json",
            format!("the request body is not JSON ({err}); send {{\"method\": …, \"session\": …, \"params\": {{…}}}}"),
        )
    })?;
    if !value.is_object() {
        return Err(GatewayError::bad_request(
            "bad_request",
            format!(
                "the request body must be a JSON object {{\"method\", \"session\", \"params\"}}, not {}",
                json_kind(&value)
            ),
        ));
    }
    let call: CallRequest = serde_json::from_value(value).map_err(|err| {
        GatewayError::bad_request(
            "bad_request",
            format!("the request is not a call: {err} (fields: method, session, params)"),
        )
    })?;
    let method = GatewayMethod::parse(&call.method).ok_or_else(|| {
        GatewayError::new(
            404,
            "unknown_method",
            format!(
                "unknown method {:?}; the gateway answers: {}",
                call.method,
                GatewayMethod::ALL.map(|m| m.as_str()).join(", ")
            ),
        )
    })?;
    if method.needs_session() {
        match call.session.as_deref() {
            None => {
                return Err(GatewayError::bad_request(
                    "missing_session",
                    format!(
                    "{method} works on a session: give \"session\" (a key; created on first use)"
                ),
                ))
            }
            Some(key) => {
                session_key(key)?;
            }
        }
    }
    Ok((method, call))
}

/// The session `key` names: a key, never a path (`400 invalid_session` naming the rule).
///
/// # Errors
/// A key against [`crate::session::key::SESSION_KEY_RULE`] or with an unusable agent id.
pub fn session_key(key: &str) -> Result<SessionKey, GatewayError> {
    SessionKey::parse(key)
        .map_err(|err| GatewayError::bad_request("invalid_session", err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::methods::METHODS;

    #[test]
    fn the_engine_methods_a_gateway_answers_are_the_method_tables() {
        let ours: Vec<_> = GatewayMethod::ALL
            .into_iter()
            .filter_map(GatewayMethod::engine_method)
            .collect();
        let table: Vec<_> = METHODS
            .iter()
            .filter(|row| row.gateway)
            .map(|row| row.method)
            .collect();
        let mut sorted = ours.clone();
        sorted.sort();
        assert_eq!(sorted, table);
        for method in ours {
            assert_eq!(
                GatewayMethod::parse(method.as_str()).and_then(GatewayMethod::engine_method),
                Some(method)
            );
        }
    }
}
