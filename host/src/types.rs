//! The core's typed values, shared by every layer: the `legacy` id, plugin ids and their one
//! validator, and the names of engine methods. Depends on nothing else in the crate.

use std::fmt;

use serde::Serialize;

/// The id of the built-in default engine (the default of `plugins.slots.contextEngine`), the
/// fallback of every quarantined engine. The one definition every layer uses.
pub const LEGACY_ENGINE_ID: &str = "legacy";

/// The longest plugin id accepted.
pub const MAX_PLUGIN_ID_LEN: usize = 128;

/// Checks a plugin id: characters `a-z`, `0-9`, `.`, `_`, `-`, starting with a letter or
/// digit, at most [`MAX_PLUGIN_ID_LEN`] long. The one plugin-id validator of the host.
///
/// # Errors
/// What was expected, to finish a sentence "expected …".
pub fn validate_plugin_id(id: &str) -> Result<(), &'static str> {
    const EXPECTED: &str = "a non-empty id of characters a-z, 0-9, '.', '_' or '-' that starts with a letter or digit (e.g. \"sliding-window\")";
    if id.trim().is_empty() {
        return Err(EXPECTED);
    }
    let first_ok = id
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = id
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if !first_ok || !rest_ok {
        return Err(EXPECTED);
    }
    if id.len() > MAX_PLUGIN_ID_LEN {
        return Err("an id of at most 128 characters");
    }
    Ok(())
}

/// An operation the host runs against an engine: the contract's methods, by their contract
/// names, plus the host-side steps that are bounded and quarantined the same way (`factory`,
/// `rollback`). `Display` (and `Serialize`) give the contract name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// Creating the engine (the library's factory and the first `info`).
    Factory,
    /// `info`.
    Info,
    /// `bootstrap`.
    Bootstrap,
    /// `ingest`.
    Ingest,
    /// `ingestBatch`.
    IngestBatch,
    /// `afterTurn`.
    AfterTurn,
    /// `assemble`.
    Assemble,
    /// `compact`.
    Compact,
    /// `maintain`.
    Maintain,
    /// `prepareSubagentSpawn`.
    PrepareSubagentSpawn,
    /// `onSubagentEnded`.
    OnSubagentEnded,
    /// A rollback handle returned by `prepareSubagentSpawn`.
    Rollback,
    /// `callTool`.
    CallTool,
    /// `dispose`.
    Dispose,
}

impl Method {
    /// Every method, in contract order.
    pub const ALL: [Method; 14] = [
        Method::Factory,
        Method::Info,
        Method::Bootstrap,
        Method::Ingest,
        Method::IngestBatch,
        Method::AfterTurn,
        Method::Assemble,
        Method::Compact,
        Method::Maintain,
        Method::PrepareSubagentSpawn,
        Method::OnSubagentEnded,
        Method::Rollback,
        Method::CallTool,
        Method::Dispose,
    ];

    /// The contract name (`ingestBatch`, `afterTurn`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Factory => "factory",
            Method::Info => "info",
            Method::Bootstrap => "bootstrap",
            Method::Ingest => "ingest",
            Method::IngestBatch => "ingestBatch",
            Method::AfterTurn => "afterTurn",
            Method::Assemble => "assemble",
            Method::Compact => "compact",
            Method::Maintain => "maintain",
            Method::PrepareSubagentSpawn => "prepareSubagentSpawn",
            Method::OnSubagentEnded => "onSubagentEnded",
            Method::Rollback => "rollback",
            Method::CallTool => "callTool",
            Method::Dispose => "dispose",
        }
    }

    /// The method of a contract name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Method {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_are_the_contract_names_and_round_trip() {
        assert_eq!(Method::IngestBatch.to_string(), "ingestBatch");
        assert_eq!(
            Method::PrepareSubagentSpawn.to_string(),
            "prepareSubagentSpawn"
        );
        assert_eq!(Method::CallTool.to_string(), "callTool");
        for method in Method::ALL {
            assert_eq!(Method::from_name(method.as_str()), Some(method));
        }
        assert_eq!(Method::from_name("nope"), None);
    }

    #[test]
    fn plugin_ids() {
        assert!(validate_plugin_id("sliding-window").is_ok());
        assert!(validate_plugin_id("a.b_c-1").is_ok());
        for bad in [
            "",
            " ",
            "-x",
            "Upper",
            "a/b",
            &"a".repeat(MAX_PLUGIN_ID_LEN + 1),
        ] {
            assert!(validate_plugin_id(bad).is_err(), "{bad:?}");
        }
    }
}
