//! Conversations: reading them (`transcript`: OpenClaw message arrays or OpenAI chat
//! transcripts), OpenClaw's session files (`tree`: the append-only JSONL tree, read as
//! OpenClaw reads it; `context`: `buildSessionContext` and `convertToLlm`); writing session files OpenClaw reads back
//! (`writer`; `holder`: who holds a session's lock), by many threads or tasks at once with group commit (`group_commit`); importing and exporting OpenAI chat transcripts (`openai`); where sessions live
//! (`store`: the `SessionStore` seam, JSONL files and their `sessions.json` index; `key`: session keys, agent ids and checked session-file paths). The
//! readers know nothing of engines.

pub(crate) mod context;
pub(crate) mod group_commit;
pub(crate) mod holder;
pub(crate) mod key;
pub(crate) mod limits;
pub(crate) mod lone_surrogates;
pub(crate) mod openai;
pub(crate) mod store;
pub(crate) mod time;
pub(crate) mod transcript;
pub(crate) mod tree;
pub(crate) mod writer;

pub use context::{build_session_context, convert_to_llm, SessionContext};
pub use group_commit::{DurableAppend, SharedSessionWriter};
pub use key::{
    AgentId, SessionFile, SessionFileError, SessionKey, SessionKeyError, AGENT_ID_RULE,
    SESSION_KEY_RULE,
};
pub use limits::{human_bytes, max_line_bytes, set_max_line_bytes};
pub use openai::{export_openai, import_openai, ImportError};
pub use store::{
    CounterUpdate, Created, JsonlStore, OnExisting, SessionCounters, SessionStore, SessionSummary,
    StoreError, DEFAULT_AGENT,
};
pub use transcript::{ChatDialect, ChatList, ChatListError, Transcript, TranscriptError};
pub use tree::{Entry, EntryKind, EntryType, LongLine, SessionReadError, SessionTree};
pub use writer::new_session_id;
pub use writer::{Durability, SessionWriteError, SessionWriter};
