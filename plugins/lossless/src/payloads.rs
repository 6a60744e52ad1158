//! Large tool payloads moved out of the database by `maintain`: the text goes to
//! `payloads/<sha256>.txt` beside the database; the stored message keeps a reference and a
//! short exploration summary (size, line count, head). `lcm_expand` reads the original back.

use std::path::Path;

use pincer_plugin_api::{EngineError, Message, Role};
use rusqlite::params;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::store::{db_error, Store, StoredMessage};

/// The original message of a stored row (its payload read back when externalized).
///
/// # Errors
/// When the payload file is gone or the row does not parse.
pub fn original(row: &StoredMessage) -> Result<Value, EngineError> {
    let mut value: Value = serde_json::from_str(&row.json).map_err(|err| {
        EngineError::failed(format!(
            "lossless store: message m{} does not parse: {err}",
            row.id
        ))
    })?;
    if let Some(path) = &row.payload_path {
        let text = std::fs::read_to_string(path).map_err(|err| {
            EngineError::failed(format!(
                "lossless store: the payload of m{} ({path}) cannot be read: {err}; it was moved out of the database by maintain",
                row.id
            ))
        })?;
        value["content"] = serde_json::json!([{ "type": "text", "text": text }]);
    }
    Ok(value)
}

/// Moves tool results longer than `threshold` characters to files; `(rows rewritten, bytes
/// freed in the database)`.
///
/// # Errors
/// File or database errors.
pub fn externalize(store: &Store, threshold: usize) -> Result<(u64, u64), EngineError> {
    let Some(dir) = store.payload_dir().map(Path::to_owned) else {
        return Ok((0, 0));
    };
    if threshold == 0 {
        return Ok((0, 0));
    }
    let candidates: Vec<(i64, String)> = store.with(|conn| {
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, json FROM messages WHERE role = 'toolResult' AND payload_path IS NULL AND length(json) > ?1 AND indexed = 1",
            )
            .map_err(db_error("payload candidates"))?;
        let rows = stmt
            .query_map([threshold as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_error("payload candidates"))?;
        rows.collect::<Result<_, _>>().map_err(db_error("payload candidates"))
    })?;
    let (mut rewritten, mut freed) = (0u64, 0u64);
    for (id, json) in candidates {
        let Ok(message) = serde_json::from_str(&json)
            .map_err(|_| ())
            .and_then(|v| Message::from_value(v).map_err(|_| ()))
        else {
            continue;
        };
        if message.role() != Role::ToolResult {
            continue;
        }
        let text = message.plain_text();
        if text.chars().count() <= threshold {
            continue;
        }
        std::fs::create_dir_all(&dir).map_err(|err| {
            EngineError::failed(format!("lossless: cannot create {}: {err}", dir.display()))
        })?;
        let digest: String = Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let path = dir.join(format!("{digest}.txt"));
        if !path.exists() {
            let tmp = dir.join(format!("{digest}.tmp"));
            std::fs::write(&tmp, &text)
                .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|err| {
                    EngineError::failed(format!("lossless: cannot write {}: {err}", path.display()))
                })?;
        }
        let lines = text.lines().count();
        let head: String = text.chars().take(400).collect();
        let mut value: Value = serde_json::from_str(&json).unwrap_or(Value::Null);
        value["content"] = serde_json::json!([{ "type": "text", "text": format!(
            "[payload of {} characters, {lines} lines, moved to {}; lcm_expand(\"m{id}\") returns it]\n{head}…",
            text.chars().count(), path.display()
        )}]);
        let new_json = value.to_string();
        store.with(|conn| {
            conn.execute(
                "UPDATE messages SET json = ?1, payload_path = ?2 WHERE id = ?3",
                params![new_json, path.to_string_lossy(), id],
            )
            .map_err(db_error("externalize"))
        })?;
        rewritten += 1;
        freed += (json.len() as u64).saturating_sub(new_json.len() as u64);
    }
    Ok((rewritten, freed))
}
