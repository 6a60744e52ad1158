//! What the benchmarks share: the staged `sliding-window` plugin and a generated conversation.

use std::path::PathBuf;

use pincer_plugin_api::{ContentBlock, Message};

/// The staged `sliding-window` plugin folder (`cargo xtask bench` stages release builds).
pub fn staged_dir() -> PathBuf {
    std::env::var_os("PINCER_STAGED_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"))
        .join("sliding-window")
}

/// An airline-support-like conversation of `n` messages: user, assistant with a tool call,
/// tool result, assistant answer, repeated.
pub fn conversation(n: usize) -> Vec<Message> {
    let mut out = vec![Message::system("You are an airline agent. ".repeat(40))];
    let mut i = 0;
    while out.len() < n {
        let id = format!("call_{}", i % 97);
        out.push(Message::user(format!(
            "Please check reservation R{i} and the flights on May {}.",
            i % 28 + 1
        )));
        out.push(Message::assistant_blocks(vec![ContentBlock::tool_call(
            id.clone(),
            "get_reservation_details",
            &serde_json::json!({ "reservation_id": format!("R{i}") }),
        )]));
        out.push(Message::tool_result(
            id,
            "get_reservation_details",
            format!(
                "{{\"reservation_id\":\"R{i}\",\"flights\":[\"HAT{i:03}\"],\"cabin\":\"economy\"}}"
            ),
            false,
        ));
        out.push(Message::assistant(format!(
            "Reservation R{i} is on HAT{i:03} in economy. Anything else?"
        )));
        i += 1;
    }
    out.truncate(n);
    out
}
