//! Why an engine call failed, in host memory: [`EngineCallError`] and its [`CallErrorKind`].
//! A leaf: every engine layer (backends, the instance, bounded calls, the guard) names it, and
//! it names no other engine module.

use pincer_plugin_abi::latest::EngineError;
use serde::Serialize;

/// The kind of an engine call's failure; serialized as [`CallErrorKind::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallErrorKind {
    /// The engine returned an error.
    Failed,
    /// The engine panicked (caught inside the plugin).
    Panicked,
    /// The call was aborted.
    Aborted,
    /// The engine lacks the optional method.
    NotImplemented,
    /// The engine rejected its configuration.
    InvalidConfig,
    /// The call ran past its deadline.
    TimedOut,
    /// The engine's worker process died (a signal, an exit, a broken protocol): isolated
    /// engines only.
    Crashed,
}

impl CallErrorKind {
    /// A stable snake_case code (`failed`, `panicked`, `aborted`, `not_implemented`,
    /// `invalid_config`, `timed_out`, `crashed`): the serialized form.
    pub const fn code(self) -> &'static str {
        match self {
            CallErrorKind::Failed => "failed",
            CallErrorKind::Panicked => "panicked",
            CallErrorKind::Aborted => "aborted",
            CallErrorKind::NotImplemented => "not_implemented",
            CallErrorKind::InvalidConfig => "invalid_config",
            CallErrorKind::TimedOut => "timed_out",
            CallErrorKind::Crashed => "crashed",
        }
    }
}

/// Why an engine call failed, in host memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct EngineCallError {
    /// What kind of failure.
    pub kind: CallErrorKind,
    /// The message, as the engine (or host) gave it.
    pub message: String,
}

impl EngineCallError {
    /// A host-made error.
    pub fn new(kind: CallErrorKind, message: impl Into<String>) -> Self {
        EngineCallError {
            kind,
            message: message.into(),
        }
    }

    /// A stable snake_case code for machines: its kind's.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// Whether this is an abort (aborts never quarantine: docs/CONTRACT.md §4.4a).
    pub fn is_abort(&self) -> bool {
        self.kind == CallErrorKind::Aborted
    }
}

impl From<EngineError> for EngineCallError {
    fn from(err: EngineError) -> Self {
        let kind = match &err {
            EngineError::Failed(_) => CallErrorKind::Failed,
            EngineError::Panicked(_) => CallErrorKind::Panicked,
            EngineError::Aborted(_) => CallErrorKind::Aborted,
            EngineError::NotImplemented(_) => CallErrorKind::NotImplemented,
            EngineError::InvalidConfig(_) => CallErrorKind::InvalidConfig,
        };
        EngineCallError {
            kind,
            // A stranger's words: cut and cleaned before the host keeps, logs or prints them.
            // Its bytes, made UTF-8 first: an ABI-level stranger can hand over any.
            message: crate::types::sanitize_text(
                &String::from_utf8_lossy(err.message().as_bytes()),
                crate::types::MAX_ENGINE_TEXT_LEN,
            ),
        }
    }
}
