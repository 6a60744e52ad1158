//! `pincer estimate`: OpenClaw's token estimate of a conversation.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pincer_host::session::Transcript;

use crate::common::fail;

/// `pincer estimate`'s arguments.
#[derive(clap::Args, Debug)]
pub struct EstimateArgs {
    /// A JSON array of messages, `{"messages": [...]}`, an OpenClaw session file (the
    /// context of its active leaf), or an OpenAI chat transcript.
    file: PathBuf,
    /// Print JSON (the only output form; accepted for symmetry).
    #[arg(long)]
    json: bool,
}

/// Runs `pincer estimate`.
pub fn run(args: EstimateArgs) -> ExitCode {
    let EstimateArgs { file, json: _ } = args;
    estimate(&file)
}

fn estimate(path: &Path) -> ExitCode {
    let transcript = match Transcript::read(path) {
        Ok(t) => t,
        Err(err) => return fail(err, 2),
    };
    let messages = transcript.messages();
    let per_message: Vec<u64> = messages
        .iter()
        .map(pincer_plugin_api::tokens::estimate_message_tokens)
        .collect();
    let context = pincer_plugin_api::tokens::estimate_context_tokens(messages);
    let out = serde_json::json!({
        "perMessage": per_message,
        "sum": per_message.iter().sum::<u64>(),
        "estimateContextTokens": {
            "tokens": context.tokens,
            "usageTokens": context.usage_tokens,
            "trailingTokens": context.trailing_tokens,
            "lastUsageIndex": context.last_usage_index,
        },
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serializes")
    );
    ExitCode::SUCCESS
}
