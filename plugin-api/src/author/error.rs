//! The error an engine returns: an opaque value with a [`ErrorKind`] and a message. It crosses
//! the boundary as the ABI's `EngineError` (whose layout is frozen); authors never see that
//! type.

use std::fmt;

use crate::abi::v1 as abi;

/// Why an engine call did not produce a result.
///
/// Built with [`EngineError::failed`], [`EngineError::aborted`],
/// [`EngineError::invalid_config`] or [`EngineError::not_implemented`]; read with
/// [`EngineError::kind`] and [`EngineError::message`]. The host copies the message into its own
/// memory as soon as the call returns, so an error never outlives the library it came from.
///
/// ```
/// use pincer_plugin_api::{EngineError, ErrorKind};
///
/// let err = EngineError::invalid_config("`keep` must be at least 1");
/// assert_eq!(err.kind(), ErrorKind::InvalidConfig);
/// assert_eq!(err.message(), "`keep` must be at least 1");
/// assert_eq!(err.to_string(), "invalid engine config: `keep` must be at least 1");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EngineError(abi::EngineError);

/// What kind of failure an [`EngineError`] is; the kind decides the host's reaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The engine could not do what was asked.
    Failed,
    /// The engine panicked; the message is the panic payload and where it happened. Made by
    /// the export adapter, never by engine code.
    Panicked,
    /// The engine stopped because the call's abort signal fired. Aborts never quarantine.
    Aborted,
    /// The engine does not implement an optional method (or extension) the host called.
    NotImplemented,
    /// The engine's configuration is not usable; the message says which setting and why.
    InvalidConfig,
}

impl ErrorKind {
    /// A stable snake_case name: `failed`, `panicked`, `aborted`, `not_implemented`,
    /// `invalid_config`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Failed => "failed",
            ErrorKind::Panicked => "panicked",
            ErrorKind::Aborted => "aborted",
            ErrorKind::NotImplemented => "not_implemented",
            ErrorKind::InvalidConfig => "invalid_config",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EngineError {
    /// An error of kind [`ErrorKind::Failed`](crate::ErrorKind::Failed) with the given message.
    pub fn failed(message: impl Into<String>) -> Self {
        EngineError(abi::EngineError::failed(message))
    }

    /// An error of kind [`ErrorKind::Aborted`](crate::ErrorKind::Aborted) with the given message.
    pub fn aborted(message: impl Into<String>) -> Self {
        EngineError(abi::EngineError::aborted(message))
    }

    /// An error of kind [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) with the given message.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        EngineError(abi::EngineError::invalid_config(message))
    }

    /// An error of kind [`ErrorKind::NotImplemented`](crate::ErrorKind::NotImplemented) naming the method: "`method` is not
    /// implemented".
    pub fn not_implemented(method: &str) -> Self {
        EngineError(abi::EngineError::not_implemented(method))
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self.0 {
            abi::EngineError::Failed(_) => ErrorKind::Failed,
            abi::EngineError::Panicked(_) => ErrorKind::Panicked,
            abi::EngineError::Aborted(_) => ErrorKind::Aborted,
            abi::EngineError::NotImplemented(_) => ErrorKind::NotImplemented,
            abi::EngineError::InvalidConfig(_) => ErrorKind::InvalidConfig,
        }
    }

    /// The message, whatever the kind.
    pub fn message(&self) -> &str {
        self.0.message()
    }

    /// The error as it crosses the boundary. Not part of the API.
    #[doc(hidden)]
    pub fn into_abi(self) -> abi::EngineError {
        self.0
    }

    /// An error that came back across the boundary. Not part of the API.
    #[doc(hidden)]
    pub fn from_abi(error: abi::EngineError) -> Self {
        EngineError(error)
    }
}

impl fmt::Debug for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineError")
            .field("kind", &self.kind())
            .field("message", &self.message())
            .finish()
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for EngineError {}

/// What `?` uses on the ABI's own checks (an `AbortSignal`'s `check()`). Not part of the API.
#[doc(hidden)]
impl From<abi::EngineError> for EngineError {
    fn from(error: abi::EngineError) -> Self {
        EngineError(error)
    }
}

/// The export adapter's conversion. Not part of the API.
#[doc(hidden)]
impl From<EngineError> for abi::EngineError {
    fn from(error: EngineError) -> Self {
        error.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_and_message_read_back_what_was_built() {
        let cases = [
            (EngineError::failed("x"), ErrorKind::Failed, "x"),
            (EngineError::aborted("y"), ErrorKind::Aborted, "y"),
            (
                EngineError::invalid_config("z"),
                ErrorKind::InvalidConfig,
                "z",
            ),
            (
                EngineError::not_implemented("maintain"),
                ErrorKind::NotImplemented,
                "maintain is not implemented",
            ),
        ];
        for (err, kind, message) in cases {
            assert_eq!(err.kind(), kind);
            assert_eq!(err.message(), message);
            assert_eq!(err.kind().as_str(), err.clone().into_abi().kind_name());
        }
        let panicked = EngineError::from_abi(abi::EngineError::Panicked("boom".into()));
        assert_eq!(panicked.kind(), ErrorKind::Panicked);
        assert_eq!(panicked.to_string(), "boom");
    }
}
