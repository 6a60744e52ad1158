//! Reading the host's session file for `bootstrap`: OpenClaw's append-only JSONL tree, each
//! record `{type, id, parentId, …}`; the active branch is the chain of parents from the last
//! record, and its `message` records are the conversation. Lines that do not parse are
//! skipped (a torn last line after a crash is normal for an append-only file).

use std::collections::HashMap;
use std::path::Path;

use pincer_plugin_api::{EngineError, Message};

/// The messages of the active branch, oldest first, with their entry ids.
///
/// # Errors
/// When the file cannot be read.
pub fn active_messages(path: &Path) -> Result<Vec<(String, Message)>, EngineError> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        EngineError::failed(format!(
            "lossless bootstrap: cannot read {}: {err}",
            path.display()
        ))
    })?;
    let mut records: HashMap<String, serde_json::Value> = HashMap::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(id) = record.get("id").and_then(|v| v.as_str()).map(str::to_owned) else {
            continue;
        };
        last = Some(id.clone());
        records.insert(id, record);
    }
    let mut chain = Vec::new();
    let mut at = last;
    while let Some(id) = at.take() {
        let Some(record) = records.remove(&id) else {
            break;
        };
        at = record
            .get("parentId")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        if record.get("type").and_then(|v| v.as_str()) == Some("message") {
            if let Some(message) = record
                .get("message")
                .cloned()
                .and_then(|m| Message::from_value(m).ok())
            {
                chain.push((id, message));
            }
        }
    }
    chain.reverse();
    Ok(chain)
}
