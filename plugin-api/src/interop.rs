//! Conversions from other transcript formats into OpenClaw's message JSON — one place for the
//! mapping that pincer's OpenAI chat importer, the engines' tests and the differential tests
//! against OpenClaw's golden data all use.

use serde_json::{json, Map, Value};

use crate::Message;

/// The timestamp OpenClaw's golden data gives the first message of a converted transcript:
/// 2024-05-15T20:00:00Z, in ms.
pub const OPENAI_CHAT_EPOCH_MS: i64 = 1_715_803_200_000;

/// One OpenAI chat message (`{role, content, tool_calls?, tool_call_id?, name?}`) as OpenClaw's
/// message JSON, exactly as the golden data's README maps it:
///
/// | OpenAI chat | OpenClaw |
/// |---|---|
/// | `system` | `None`: OpenClaw keeps the system prompt out of the session |
/// | `user` | `{role:"user", content:<string>, timestamp}` |
/// | `assistant` (+`tool_calls`) | `{role:"assistant", content:[text?, toolCall{id,name,arguments:<parsed>}…], api:"openai-completions", provider:"openai", model:"gpt-4o", usage:<zero>, stopReason:"toolUse"\|"stop", timestamp}` |
/// | `tool` | `{role:"toolResult", toolCallId, toolName, content:[{type:"text",text}], isError:false, timestamp}` |
///
/// `index` is the message's position in the OpenAI transcript (system included); the
/// timestamp is [`OPENAI_CHAT_EPOCH_MS`] + (`index` + 1) s, as in the golden data. A role
/// this mapping does not know is `None`.
pub fn openai_chat_to_openclaw(value: &Value, index: usize) -> Option<Value> {
    let timestamp = OPENAI_CHAT_EPOCH_MS + (index as i64 + 1) * 1000;
    let text = value["content"].as_str().unwrap_or_default();
    match value["role"].as_str()? {
        "user" => Some(json!({"role": "user", "content": text, "timestamp": timestamp})),
        "assistant" => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            let calls = value["tool_calls"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            for call in calls {
                let arguments = match &call["function"]["arguments"] {
                    Value::String(s) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                    Value::Null => Value::Object(Map::new()),
                    other => other.clone(),
                };
                content.push(json!({
                    "type": "toolCall",
                    "id": call["id"].as_str().unwrap_or_default(),
                    "name": call["function"]["name"].as_str().unwrap_or_default(),
                    "arguments": arguments,
                }));
            }
            let zero =
                json!({"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0});
            Some(json!({
                "role": "assistant",
                "content": content,
                "api": "openai-completions",
                "provider": "openai",
                "model": "gpt-4o",
                "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": zero},
                "stopReason": if calls.is_empty() { "stop" } else { "toolUse" },
                "timestamp": timestamp,
            }))
        }
        "tool" => Some(json!({
            "role": "toolResult",
            "toolCallId": value["tool_call_id"].as_str().unwrap_or_default(),
            "toolName": value["name"].as_str().unwrap_or_default(),
            "content": [{"type": "text", "text": text}],
            "isError": false,
            "timestamp": timestamp,
        })),
        _ => None,
    }
}

/// A whole OpenAI chat transcript as messages ([`openai_chat_to_openclaw`] per message;
/// system messages are left out).
pub fn openai_chat_messages(transcript: &[Value]) -> Vec<Message> {
    transcript
        .iter()
        .enumerate()
        .filter_map(|(index, value)| openai_chat_to_openclaw(value, index))
        .filter_map(|value| Message::from_value(value).ok())
        .collect()
}
