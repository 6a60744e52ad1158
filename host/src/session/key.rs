//! Session references as typed values: a [`SessionKey`] is a name the store maps to storage,
//! never a path; an [`AgentId`] is the agent whose sessions it names; a [`SessionFile`] is a
//! path the local CLI was given, checked to be a session file (its first record is a session
//! header) before anything reads it for writing.
//!
//! A key is 1–[`MAX_SESSION_KEY_LEN`] bytes of ASCII letters, digits and `: . _ - + @ = # ! ~`
//! ([`SESSION_KEY_RULE`]): every key OpenClaw makes fits (`main`, `agent:main:main`,
//! `agent:main:subagent:<uuid>`, `agent:main:telegram:group:-100123`,
//! `…:thread:1700000000.000100`, `cron:<id>`, `hook:<uuid>`), and nothing that names a file
//! does (no `/`, `\`, space or control character). OpenClaw's shape `agent:<agentId>:<rest>`
//! puts the session under agent `<agentId>`, normalised as OpenClaw's `normalizeAgentId`
//! normalises a valid id (lower case); an agent id that is not `[a-z0-9][a-z0-9_-]{0,63}`
//! (letters of either case) is refused. Every other key belongs to the agent the caller names
//! (`main` by default).

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::store::DEFAULT_AGENT;

/// The longest session key accepted, in bytes.
pub const MAX_SESSION_KEY_LEN: usize = 256;

/// The longest agent id accepted (OpenClaw's limit).
pub const MAX_AGENT_ID_LEN: usize = 64;

/// What a session key may be, to finish a sentence "a session key is …".
pub const SESSION_KEY_RULE: &str = "1–256 characters of ASCII letters, digits and `: . _ - + @ = # ! ~` (no `/`, `\\`, spaces or control characters: a key is a name, never a path); a key `agent:<agentId>:<rest>` needs an agent id of 1–64 characters a-z, 0-9, `_`, `-` starting with a letter or digit, and a non-empty rest";

/// What an agent id may be, to finish a sentence "an agent id is …".
pub const AGENT_ID_RULE: &str =
    "1–64 characters a-z, 0-9, `_` or `-`, starting with a letter or digit (upper case is read as lower case)";

/// An agent id, normalised (lower case, `[a-z0-9][a-z0-9_-]{0,63}`): a folder name of the store
/// that cannot leave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(String);

impl AgentId {
    /// Reads an agent id as OpenClaw normalises a valid one: trimmed, lower-cased.
    ///
    /// # Errors
    /// [`SessionKeyError::AgentId`] naming [`AGENT_ID_RULE`].
    pub fn parse(text: &str) -> Result<AgentId, SessionKeyError> {
        let id = text.trim().to_ascii_lowercase();
        let first_ok = id
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let rest_ok = id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
        if !first_ok || !rest_ok || id.len() > MAX_AGENT_ID_LEN {
            return Err(SessionKeyError::AgentId {
                given: text.to_owned(),
            });
        }
        Ok(AgentId(id))
    }

    /// The default agent, `main`.
    pub fn main() -> AgentId {
        AgentId(DEFAULT_AGENT.to_owned())
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for AgentId {
    type Err = SessionKeyError;

    fn from_str(text: &str) -> Result<AgentId, SessionKeyError> {
        AgentId::parse(text)
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A session key, checked against [`SESSION_KEY_RULE`], with the agent whose session it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    key: String,
    /// The agent: the key's own (`agent:<agentId>:…`), else the one it was read for.
    agent: AgentId,
}

/// Why a text is not a session key (or an agent id).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionKeyError {
    /// The key breaks the key rule.
    #[error("session key {given:?} is not usable: a session key is {SESSION_KEY_RULE}")]
    Key {
        /// The text given (cut to 300 bytes).
        given: String,
    },
    /// The agent id (of `agent:<agentId>:…`, or given by itself) breaks the agent id rule.
    #[error("agent id {given:?} is not usable: an agent id is {AGENT_ID_RULE}")]
    AgentId {
        /// The text given.
        given: String,
    },
}

impl SessionKeyError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SessionKeyError::Key { .. } => "invalid_session",
            SessionKeyError::AgentId { .. } => "invalid_agent",
        }
    }
}

fn key_byte_ok(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b':' | b'.' | b'_' | b'-' | b'+' | b'@' | b'=' | b'#' | b'!' | b'~'
        )
}

impl SessionKey {
    /// Reads a key; a key not of the shape `agent:<agentId>:<rest>` belongs to `main`.
    ///
    /// # Errors
    /// As [`SessionKey::parse_for`].
    pub fn parse(text: &str) -> Result<SessionKey, SessionKeyError> {
        SessionKey::parse_for(text, &AgentId::main())
    }

    /// Reads a key; a key not of the shape `agent:<agentId>:<rest>` belongs to `agent`.
    ///
    /// # Errors
    /// [`SessionKeyError::Key`] for a key against [`SESSION_KEY_RULE`] (an `agent:` key without
    /// an agent id and a rest included), [`SessionKeyError::AgentId`] for an `agent:` key whose
    /// agent id is against [`AGENT_ID_RULE`].
    pub fn parse_for(text: &str, agent: &AgentId) -> Result<SessionKey, SessionKeyError> {
        let refused = || SessionKeyError::Key {
            given: cut(text, 300),
        };
        if text.is_empty() || text.len() > MAX_SESSION_KEY_LEN || !text.bytes().all(key_byte_ok) {
            return Err(refused());
        }
        let agent = match text.strip_prefix("agent:") {
            Some(rest) => {
                let (id, rest) = rest.split_once(':').ok_or_else(refused)?;
                if id.is_empty() || rest.is_empty() {
                    return Err(refused());
                }
                AgentId::parse(id)?
            }
            None => agent.clone(),
        };
        Ok(SessionKey {
            key: text.to_owned(),
            agent,
        })
    }

    /// The key as given.
    pub fn as_str(&self) -> &str {
        &self.key
    }

    /// The agent whose session it is.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

impl std::str::FromStr for SessionKey {
    type Err = SessionKeyError;

    fn from_str(text: &str) -> Result<SessionKey, SessionKeyError> {
        SessionKey::parse(text)
    }
}

/// A path checked to hold a session file: its first record (after blank lines and a byte-order
/// mark) is a session header `{"type":"session",…}`. Only the local CLI makes one; the gateway
/// names sessions by key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFile(PathBuf);

/// Why a path is not a session file.
#[derive(Debug, thiserror::Error)]
pub enum SessionFileError {
    /// It could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Its first record is not a session header.
    #[error(
        "{} is not a session file: its first record is {found}, not a session header \
         {{\"type\":\"session\",…}}; it was not changed. Name a session file, or a session key \
         or id (`pincer sessions list`)",
        path.display()
    )]
    NotASession {
        /// The path.
        path: PathBuf,
        /// What the first record is, in words.
        found: &'static str,
    },
}

impl SessionFileError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SessionFileError::Unreadable { .. } => "session_file_unreadable",
            SessionFileError::NotASession { .. } => "not_a_session_file",
        }
    }
}

/// How much of a file is read to find its first record: a header is a few hundred bytes.
const HEADER_PROBE_BYTES: u64 = 64 * 1024;

impl SessionFile {
    /// Checks that `path` is a session file, reading at most its first 64 KiB.
    ///
    /// # Errors
    /// [`SessionFileError`]: unreadable (a directory included), or not a session file.
    pub fn check(path: &Path) -> Result<SessionFile, SessionFileError> {
        let unreadable = |source| SessionFileError::Unreadable {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        if file.metadata().map_err(unreadable)?.is_dir() {
            return Err(unreadable(std::io::Error::other("it is a directory")));
        }
        let mut head = Vec::new();
        file.take(HEADER_PROBE_BYTES)
            .read_to_end(&mut head)
            .map_err(unreadable)?;
        let head = head.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&head);
        let first = head
            .split(|&b| b == b'\n')
            .find(|line| !line.trim_ascii().is_empty());
        let found = match first {
            None => "missing (the file is empty)",
            Some(line) => match serde_json::from_slice::<serde_json::Value>(line) {
                Ok(serde_json::Value::Object(record))
                    if record.get("type").and_then(|t| t.as_str()) == Some("session") =>
                {
                    return Ok(SessionFile(path.to_owned()))
                }
                Ok(serde_json::Value::Object(_)) => "a JSON object of another type",
                Ok(_) => "JSON that is not an object",
                Err(_) => "not a JSON line",
            },
        };
        Err(SessionFileError::NotASession {
            path: path.to_owned(),
            found,
        })
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_not_a_session_file_says_why_by_code() {
        let dir = tempfile::tempdir().unwrap();
        let folder = SessionFile::check(dir.path()).unwrap_err();
        assert_eq!(folder.code(), "session_file_unreadable");
        let tasks = dir.path().join("tasks.json");
        std::fs::write(&tasks, "[{\"foo\":1}]\n").unwrap();
        let err = SessionFile::check(&tasks).unwrap_err();
        assert_eq!(err.code(), "not_a_session_file");
        let session = dir.path().join("s.jsonl");
        std::fs::write(
            &session,
            "{\"type\":\"session\",\"version\":3,\"id\":\"s\"}\n",
        )
        .unwrap();
        assert!(SessionFile::check(&session).is_ok());
    }

    #[test]
    fn every_key_openclaw_makes_is_a_key() {
        for (key, agent) in [
            ("main", "main"),
            ("agent:main:main", "main"),
            (
                "agent:main:subagent:0b7c5a6e-3f1d-4b8e-9a55-1c2d3e4f5a6b",
                "main",
            ),
            ("agent:main:telegram:group:-100123", "main"),
            (
                "agent:main:slack:channel:c0123:thread:1700000000.000100",
                "main",
            ),
            ("agent:Ops_1:whatsapp:direct:+15551234567", "ops_1"),
            ("agent:work:discord:dm:user@example.com", "work"),
            ("cron:daily-report", "main"),
            ("hook:0b7c5a6e-3f1d-4b8e-9a55-1c2d3e4f5a6b", "main"),
            ("s", "main"),
            ("task:3", "main"),
            ("demo:lossless", "main"),
            ("victim.txt", "main"),
        ] {
            let parsed = SessionKey::parse(key).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(parsed.as_str(), key);
            assert_eq!(parsed.agent().as_str(), agent, "{key}");
        }
    }

    #[test]
    fn paths_and_bad_agent_ids_are_refused_naming_the_rule() {
        for bad in [
            "",
            "/tmp/x/victim.txt",
            "../../etc/passwd",
            "a\\b",
            "two words",
            "line\nbreak",
            "é",
            "agent:",
            "agent:main",
            "agent:main:",
            "agent::x",
        ] {
            let err = SessionKey::parse(bad).expect_err(bad);
            assert_eq!(err.code(), "invalid_session", "{bad:?}");
            assert!(err.to_string().contains("never a path"), "{err}");
        }
        let long = "k".repeat(MAX_SESSION_KEY_LEN + 1);
        assert!(SessionKey::parse(&long).is_err());
        assert!(SessionKey::parse(&long[1..]).is_ok());
        for bad in [
            "agent:-x:main",
            "agent:a.b:main",
            "agent:a+b:main",
            &format!("agent:{}:main", "a".repeat(65)),
        ] {
            let err = SessionKey::parse(bad).expect_err(bad);
            assert_eq!(err.code(), "invalid_agent", "{bad:?}");
        }
    }

    #[test]
    fn a_key_without_an_agent_belongs_to_the_agent_it_is_read_for() {
        let ops = AgentId::parse("Ops").unwrap();
        assert_eq!(ops.as_str(), "ops");
        assert_eq!(SessionKey::parse_for("t", &ops).unwrap().agent(), &ops);
        assert_eq!(
            SessionKey::parse_for("agent:main:x", &ops).unwrap().agent(),
            &AgentId::main()
        );
        assert!(AgentId::parse("../x").is_err());
    }
}
