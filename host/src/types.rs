//! The core's typed values, shared by every layer: the `legacy` id, plugin ids and their one
//! validator, the names of engine methods, registry owners, host requirements and session
//! durability. Depends on nothing else in the crate.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The operations a host requirement is declared for (`agent-run`, `manual-compact`,
/// `subagent-spawn`): the ABI's enum, whose `as_str` gives the contract name.
pub use pincer_plugin_abi::latest::HostOperation;

/// The id of the built-in default engine (the default of `plugins.slots.contextEngine`), the
/// fallback of every quarantined engine. The one definition every layer uses.
pub const LEGACY_ENGINE_ID: &str = "legacy";

/// The longest text an engine's error, or a quarantine reason, keeps (in bytes): an engine's
/// words reach logs, terminals and the state file, so they are cut and cleaned first.
pub const MAX_ENGINE_TEXT_LEN: usize = 2048;

/// Makes text from a plugin safe for a one-line log, a terminal or a state file, as OpenClaw's
/// `sanitizeForLog` does: escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL|ESC \\`, and
/// two-byte `ESC x`) are removed, other control characters (newlines included) become spaces,
/// and text longer than `max` bytes is cut at a character boundary and ends with `…`. Only the
/// first `4 × max` bytes are read, so a 50 MB message costs what a short one does.
pub fn sanitize_text(value: &str, max: usize) -> String {
    let mut end = value.len().min(max.saturating_mul(4));
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end.min(max + 4));
    let mut chars = value[..end].chars().peekable();
    while let Some(c) = chars.next() {
        if out.len() >= max {
            break;
        }
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: parameters and intermediates, then one final byte in @..~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC (and DCS, SOS, PM, APC): up to BEL or ST (ESC \\).
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' {
                            chars.next_if_eq(&'\\');
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\u{9b}' => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            c if c.is_control() => {
                if !out.ends_with(' ') {
                    out.push(' ');
                }
            }
            c => out.push(c),
        }
    }
    if out.len() > max || end < value.len() || chars.peek().is_some() {
        let mut cut = out.len().min(max);
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}

/// A JSON value's kind in words ("a string", "an object", …), for error messages.
pub fn json_kind(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

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
    /// `commitTurn` (§8).
    CommitTurn,
    /// `dispose`.
    Dispose,
}

impl Method {
    /// Every method, in contract order.
    pub const ALL: [Method; 15] = [
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
        Method::CommitTurn,
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
            Method::CommitTurn => "commitTurn",
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
        f.pad(self.as_str())
    }
}

impl Serialize for Method {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Who registered an engine id (docs/CONTRACT.md §3.1). `Display` and `Serialize` give the registry's
/// spelling: `core`, `public-sdk`, `plugin:<id>`; [`Owner::parse`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// The host itself: the built-in `legacy`, which no one else may take.
    Core,
    /// An embedding host registering its own engines.
    PublicSdk,
    /// The plugin of this id.
    Plugin(String),
}

impl Owner {
    /// The owner of plugin `plugin_id`.
    pub fn plugin(plugin_id: impl Into<String>) -> Self {
        Owner::Plugin(plugin_id.into())
    }

    /// The plugin id, when a plugin owns it.
    pub fn plugin_id(&self) -> Option<&str> {
        match self {
            Owner::Plugin(id) => Some(id),
            Owner::Core | Owner::PublicSdk => None,
        }
    }

    /// Whether the owner names no one: a plugin owner with a blank id.
    pub fn is_blank(&self) -> bool {
        self.plugin_id().is_some_and(|id| id.trim().is_empty())
    }

    /// Reads `core`, `public-sdk` or `plugin:<id>` (a non-empty id).
    pub fn parse(text: &str) -> Option<Owner> {
        match text {
            "core" => Some(Owner::Core),
            "public-sdk" => Some(Owner::PublicSdk),
            _ => text
                .strip_prefix("plugin:")
                .filter(|id| !id.is_empty())
                .map(Owner::plugin),
        }
    }

    fn spelling(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Owner::Core => "core".into(),
            Owner::PublicSdk => "public-sdk".into(),
            Owner::Plugin(id) => format!("plugin:{id}").into(),
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.spelling())
    }
}

impl Serialize for Owner {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.spelling())
    }
}

impl<'de> Deserialize<'de> for Owner {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Owner::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "expected an owner (core, public-sdk or plugin:<id>), found {text:?}"
            ))
        })
    }
}

/// What an engine needs from the host to run one operation: a manifest's
/// `hostRequirements.<operation>` or an engine's `info.hostRequirements` entry, host-owned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostRequirement {
    /// Host capabilities the operation needs (`requiredCapabilities`), e.g.
    /// `"assemble-before-prompt"`. Unknown capability names are kept: the host fails closed on
    /// them when the operation runs.
    pub required_capabilities: Vec<String>,
    /// Extra sentence appended to the refusal when a capability is missing (`unsupportedMessage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported_message: Option<String>,
}

/// An engine's host requirements by operation; serialized as an object keyed by the
/// operations' contract names, in their order (which is alphabetical).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostRequirements(pub BTreeMap<HostOperation, HostRequirement>);

impl std::ops::Deref for HostRequirements {
    type Target = BTreeMap<HostOperation, HostRequirement>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl FromIterator<(HostOperation, HostRequirement)> for HostRequirements {
    fn from_iter<I: IntoIterator<Item = (HostOperation, HostRequirement)>>(iter: I) -> Self {
        HostRequirements(iter.into_iter().collect())
    }
}

impl Serialize for HostRequirements {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(op, req)| (op.as_str(), req)))
    }
}

/// Serializes a [`HostOperation`] as its contract name (for `#[serde(serialize_with)]`).
pub fn serialize_host_operation<S: serde::Serializer>(
    operation: &HostOperation,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(operation.as_str())
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
    fn owners_keep_the_registry_spelling_and_round_trip() {
        for (owner, text) in [
            (Owner::Core, "core"),
            (Owner::PublicSdk, "public-sdk"),
            (Owner::plugin("sliding-window"), "plugin:sliding-window"),
        ] {
            assert_eq!(owner.to_string(), text);
            assert_eq!(
                serde_json::to_string(&owner).unwrap(),
                format!("\"{text}\"")
            );
            assert_eq!(Owner::parse(text), Some(owner.clone()));
            assert_eq!(
                serde_json::from_str::<Owner>(&format!("\"{text}\"")).unwrap(),
                owner
            );
        }
        assert_eq!(Owner::parse("plugin:"), None);
        assert_eq!(Owner::parse("Core"), None);
        assert_eq!(Owner::plugin("p").plugin_id(), Some("p"));
        assert_eq!(format!("{:<8}|", Owner::Core), "core    |");
    }

    #[test]
    fn host_requirements_serialize_keyed_by_contract_name() {
        let reqs: HostRequirements = [(
            HostOperation::AgentRun,
            HostRequirement {
                required_capabilities: vec!["compact".into()],
                unsupported_message: None,
            },
        )]
        .into_iter()
        .collect();
        assert_eq!(
            serde_json::to_string(&reqs).unwrap(),
            r#"{"agent-run":{"requiredCapabilities":["compact"]}}"#
        );
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

/// When session appends reach the disk: config `sessions.durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// `fsync` after every append: an acknowledged entry survives a crash.
    #[default]
    Entry,
    /// `fsync` at the end of a turn (the session writer's `commit`).
    Turn,
    /// Never `fsync`: the OS writes when it will.
    None,
}
