//! The tools the model calls (declared in `info`, answered by `callTool`), with the shapes
//! clients rely on:
//!
//! - `lcm_grep {query, limit?}` → `{matches: [{kind: "message"|"summary", id, snippet}]}`
//!   (FTS5 over every message and summary);
//! - `lcm_describe {id}` → the node: `{id, kind, depth, covers, parents, children, …}`;
//! - `lcm_expand {id, page?}` → `{messages: [{id, seq, role, entryId, message}], nextPage?}`,
//!   the original messages behind a summary (or one message), externalized payloads read back;
//! - `lcm_stats {}` → the doctor view of the store.
//!
//! What a caller may read is an [`Access`]: its own conversation, plus — for a subagent with a
//! live grant — its parent's, up to the message the grant was given at, with results capped.

use pincer_plugin_api::EngineError;
use rusqlite::{params, OptionalExtension};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::store::{db_error, messages_between, now_ms, Store};

/// One readable conversation, up to `max_seq`, at most `max_results` per call.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// The conversation.
    pub conversation: i64,
    /// The newest readable message.
    pub max_seq: i64,
    /// The cap on results per call.
    pub max_results: usize,
}

/// What a tool caller may read.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Readable conversations.
    pub scopes: Vec<Scope>,
}

impl Access {
    /// The access of session `key`: its own conversation and a live grant's.
    ///
    /// # Errors
    /// Database errors.
    pub fn of(store: &Store, key: &str, own_limit: usize) -> Result<Access, EngineError> {
        let mut scopes = Vec::new();
        if let Some(conversation) = store.find_conversation(key)? {
            scopes.push(Scope {
                conversation,
                max_seq: i64::MAX,
                max_results: own_limit,
            });
        }
        let grant: Option<(i64, i64, i64)> = store.with(|conn| {
            conn.query_row(
                "SELECT parent_conversation_id, max_seq, max_results FROM grants WHERE child_key = ?1 AND expires_at > ?2",
                params![key, now_ms()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(db_error("grant"))
        })?;
        if let Some((conversation, max_seq, max_results)) = grant {
            scopes.push(Scope {
                conversation,
                max_seq,
                max_results: max_results as usize,
            });
        }
        Ok(Access { scopes })
    }

    fn scope_of(&self, conversation: i64) -> Option<&Scope> {
        self.scopes.iter().find(|s| s.conversation == conversation)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    query: String,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdArgs {
    id: String,
    page: Option<usize>,
}

/// The JSON schemas of the tools, for `info`.
pub fn specs() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "lcm_grep",
            "Search everything said in this conversation, including what was summarized away. Returns matching messages and summaries with their ids.",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"], "additionalProperties": false}),
        ),
        (
            "lcm_describe",
            "Describe a summary (s…) or message (m…): what it covers, its parents and children.",
            json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}),
        ),
        (
            "lcm_expand",
            "The original messages behind a summary (s…) or one message (m…), paged.",
            json!({"type": "object", "properties": {"id": {"type": "string"}, "page": {"type": "integer", "minimum": 0}}, "required": ["id"], "additionalProperties": false}),
        ),
        (
            "lcm_stats",
            "The state of the conversation store: messages, summaries by depth, debt, prefix stability, size.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
    ]
}

fn args<'a, T: Deserialize<'a>>(tool: &str, text: &'a str) -> Result<T, EngineError> {
    serde_json::from_str(if text.trim().is_empty() { "{}" } else { text }).map_err(|err| {
        EngineError::failed(format!(
            "{tool}: bad arguments ({err}); see the tool's schema"
        ))
    })
}

/// `lcm_grep`.
///
/// # Errors
/// Bad arguments or database errors.
pub fn grep(
    store: &Store,
    access: &Access,
    arguments: &str,
    default_limit: usize,
) -> Result<Value, EngineError> {
    let a: GrepArgs = args("lcm_grep", arguments)?;
    // Each word quoted: the model's query is text, never FTS5 syntax.
    let query: Vec<String> = a
        .query
        .split_whitespace()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    if query.is_empty() {
        return Err(EngineError::failed(
            "lcm_grep: the query is empty; give one or more words",
        ));
    }
    let query = query.join(" ");
    store.index_pending()?;
    let mut matches = Vec::new();
    for scope in &access.scopes {
        let limit = a
            .limit
            .unwrap_or(default_limit)
            .min(default_limit)
            .min(scope.max_results);
        let rows: Vec<(String, i64, String)> = store.with(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT kind, ref, snippet(fts, 0, '[', ']', '…', 16) FROM fts \
                     WHERE fts MATCH ?1 AND conversation_id = ?2 ORDER BY rank LIMIT ?3",
                )
                .map_err(db_error("grep"))?;
            let rows = stmt
                .query_map(
                    params![query, scope.conversation, (limit * 4) as i64],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(db_error("grep"))?;
            rows.collect::<Result<_, _>>().map_err(db_error("grep"))
        })?;
        let mut taken = 0;
        for (kind, id, snippet) in rows {
            if taken == limit {
                break;
            }
            if !in_scope(store, scope, &kind, id)? {
                continue;
            }
            taken += 1;
            let prefix = if kind == "summary" { "s" } else { "m" };
            matches.push(json!({"kind": kind, "id": format!("{prefix}{id}"), "snippet": snippet}));
        }
    }
    Ok(json!({ "matches": matches }))
}

fn in_scope(store: &Store, scope: &Scope, kind: &str, id: i64) -> Result<bool, EngineError> {
    if scope.max_seq == i64::MAX {
        return Ok(true);
    }
    let sql = if kind == "summary" {
        "SELECT last_seq FROM summaries WHERE id = ?1"
    } else {
        "SELECT seq FROM messages WHERE id = ?1"
    };
    let seq: Option<i64> = store.with(|conn| {
        conn.query_row(sql, [id], |r| r.get(0))
            .optional()
            .map_err(db_error("scope"))
    })?;
    Ok(seq.is_some_and(|s| s <= scope.max_seq))
}

enum NodeId {
    Summary(i64),
    Message(i64),
}

fn parse_id(tool: &str, id: &str) -> Result<NodeId, EngineError> {
    let bad = || {
        EngineError::failed(format!("{tool}: unknown id {id:?}; ids look like s12 (summary) or m34 (message), as lcm_grep returns them"))
    };
    let (kind, number) = id.split_at_checked(1).ok_or_else(bad)?;
    let number: i64 = number.parse().map_err(|_| bad())?;
    match kind {
        "s" => Ok(NodeId::Summary(number)),
        "m" => Ok(NodeId::Message(number)),
        _ => Err(bad()),
    }
}

fn not_found(tool: &str, id: &str) -> EngineError {
    EngineError::failed(format!(
        "{tool}: no {id} in this conversation (or outside what this session may read)"
    ))
}

/// `lcm_describe`.
///
/// # Errors
/// Bad arguments, an unknown id, or database errors.
pub fn describe(store: &Store, access: &Access, arguments: &str) -> Result<Value, EngineError> {
    let a: IdArgs = args("lcm_describe", arguments)?;
    match parse_id("lcm_describe", &a.id)? {
        NodeId::Summary(id) => {
            let Some((conversation, node)) = store.summary(id)? else {
                return Err(not_found("lcm_describe", &a.id));
            };
            let Some(scope) = access
                .scope_of(conversation)
                .filter(|s| node.last_seq <= s.max_seq)
            else {
                return Err(not_found("lcm_describe", &a.id));
            };
            let covers: Vec<String> =
                messages_in(store, scope.conversation, node.first_seq, node.last_seq)?
                    .into_iter()
                    .map(|m| format!("m{m}"))
                    .collect();
            let children: Vec<String> = store
                .children(id)?
                .iter()
                .map(|c| format!("s{}", c.id))
                .collect();
            Ok(json!({
                "id": a.id, "kind": "summary", "depth": node.depth, "level": node.level,
                "text": node.text, "tokens": node.tokens, "sourceTokens": node.source_tokens,
                "firstSeq": node.first_seq, "lastSeq": node.last_seq,
                "covers": covers,
                "parents": node.parent_id.map(|p| vec![format!("s{p}")]).unwrap_or_default(),
                "children": children,
            }))
        }
        NodeId::Message(id) => {
            let row: Option<(i64, i64, String, Option<String>, i64)> = store.with(|conn| {
                conn.query_row(
                    "SELECT conversation_id, seq, role, entry_id, tokens FROM messages WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
                .optional()
                .map_err(db_error("describe"))
            })?;
            let Some((conversation, seq, role, entry_id, tokens)) = row else {
                return Err(not_found("lcm_describe", &a.id));
            };
            if access
                .scope_of(conversation)
                .is_none_or(|s| seq > s.max_seq)
            {
                return Err(not_found("lcm_describe", &a.id));
            }
            let parents: Vec<String> = store.with(|conn| {
                let mut stmt = conn
                    .prepare_cached("SELECT summary_id FROM summary_messages WHERE message_id = ?1")
                    .map_err(db_error("describe"))?;
                let rows = stmt
                    .query_map([id], |r| r.get::<_, i64>(0))
                    .map_err(db_error("describe"))?;
                rows.map(|r| r.map(|s| format!("s{s}")))
                    .collect::<Result<_, _>>()
                    .map_err(db_error("describe"))
            })?;
            Ok(json!({
                "id": a.id, "kind": "message", "depth": -1, "role": role, "seq": seq,
                "entryId": entry_id, "tokens": tokens,
                "covers": [a.id], "parents": parents, "children": [],
            }))
        }
    }
}

fn messages_in(
    store: &Store,
    conversation: i64,
    first: i64,
    last: i64,
) -> Result<Vec<i64>, EngineError> {
    store.with(|conn| {
        let mut stmt = conn
            .prepare_cached("SELECT id FROM messages WHERE conversation_id = ?1 AND seq BETWEEN ?2 AND ?3 ORDER BY seq")
            .map_err(db_error("covers"))?;
        let rows = stmt
            .query_map(params![conversation, first, last], |r| r.get(0))
            .map_err(db_error("covers"))?;
        rows.collect::<Result<_, _>>().map_err(db_error("covers"))
    })
}

/// `lcm_expand`.
///
/// # Errors
/// Bad arguments, an unknown id, or database errors.
pub fn expand(
    store: &Store,
    access: &Access,
    arguments: &str,
    page_size: usize,
) -> Result<Value, EngineError> {
    let a: IdArgs = args("lcm_expand", arguments)?;
    let (conversation, first, last) = match parse_id("lcm_expand", &a.id)? {
        NodeId::Summary(id) => {
            let Some((conversation, node)) = store.summary(id)? else {
                return Err(not_found("lcm_expand", &a.id));
            };
            (conversation, node.first_seq, node.last_seq)
        }
        NodeId::Message(id) => {
            let row: Option<(i64, i64)> = store.with(|conn| {
                conn.query_row(
                    "SELECT conversation_id, seq FROM messages WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(db_error("expand"))
            })?;
            let Some((conversation, seq)) = row else {
                return Err(not_found("lcm_expand", &a.id));
            };
            (conversation, seq, seq)
        }
    };
    let Some(scope) = access.scope_of(conversation).filter(|s| last <= s.max_seq) else {
        return Err(not_found("lcm_expand", &a.id));
    };
    let page = a.page.unwrap_or(0);
    let size = page_size.min(scope.max_results).max(1);
    let rows = store.with(|conn| {
        messages_between(
            conn,
            conversation,
            first,
            last,
            size as i64 + 1,
            (page * size) as i64,
        )
    })?;
    let more = rows.len() > size;
    let mut messages = Vec::new();
    for row in rows.into_iter().take(size) {
        let message = crate::payloads::original(&row)?;
        messages.push(json!({
            "id": format!("m{}", row.id), "seq": row.seq, "role": row.role,
            "entryId": row.entry_id, "message": message,
        }));
    }
    let mut answer = json!({ "id": a.id, "messages": messages });
    if more {
        answer["nextPage"] = json!(page + 1);
    }
    Ok(answer)
}
