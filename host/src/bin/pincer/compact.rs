//! `pincer compact`: compacts a session now with the selected engine's guarded `compact`,
//! forced.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use pincer_host::config::PincerHome;
use pincer_host::harness::{Harness, HarnessOptions, ManualCompactParams, SessionError};
use pincer_host::operator::HostDescriptor;
use pincer_host::runtime::Runtime;
use pincer_host::session::{AgentId, SessionSummary, SessionTree};
use pincer_host::FixedEngine;

use crate::common::{
    fail, file_size_note, open, print_resolution, session_arg, store_of, warn_long_lines,
};

/// `pincer compact`'s arguments.
#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    /// A session file, session key or session id.
    session: String,
    /// The agent whose keys and ids are searched.
    #[arg(long, value_name = "ID", default_value = "main")]
    agent: AgentId,
    /// Use this engine instead of plugins.slots.contextEngine.
    #[arg(long, value_name = "ID")]
    engine: Option<String>,
    /// The model's context window in tokens, the budget the engine compacts towards (the
    /// keep-recent budget and reserve scale down to a quarter of a small window each);
    /// 128,000 by default, as `pincer run` and `pincer serve`.
    #[arg(long, value_name = "TOKENS", default_value_t = 128_000)]
    context_window: u64,
    /// What the summary should focus on (`/compact <text>`).
    #[arg(long, value_name = "TEXT")]
    instructions: Option<String>,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `pincer compact`.
pub fn run(home: PincerHome, args: CompactArgs) -> ExitCode {
    let resolved = match session_arg(&home, &args.agent, &args.session) {
        Ok(summary) => summary,
        Err(code) => return code,
    };
    let runtime = match open(home, args.plugins_dirs, Some((args.engine, None))) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let request = CompactCommand {
        agent: &args.agent,
        session: &resolved,
        context_window: Some(args.context_window),
        instructions: args.instructions.as_deref(),
        json: args.json,
    };
    let code = compact_command(&runtime, &request);
    runtime.shutdown();
    code
}

/// What `pincer compact` was asked.
struct CompactCommand<'a> {
    agent: &'a AgentId,
    session: &'a SessionSummary,
    context_window: Option<u64>,
    instructions: Option<&'a str>,
    json: bool,
}

/// `pincer compact`: the selected engine's guarded `compact`, forced, over a session.
fn compact_command(runtime: &Runtime, command: &CompactCommand<'_>) -> ExitCode {
    let session = command.session;
    let path = &session.session_file;
    let working = crate::progress::Working::start(
        format!(
            "compacting session {}{}",
            path.display(),
            file_size_note(path)
        ),
        crate::progress::drawable(command.json),
    );
    let tree = match SessionTree::read(path) {
        Ok(tree) => tree,
        Err(err) => return fail(err, 2),
    };
    working.suspend(|| warn_long_lines(path, &tree));
    let resolved = match runtime.resolve() {
        Ok(r) => r,
        Err(err) => return fail(err, 1),
    };
    let Some(host) = HostDescriptor::find(&runtime.config().config, "pincer-embedded") else {
        return fail("the embedded host descriptor is missing", 1);
    };
    let params = ManualCompactParams {
        token_budget: command.context_window,
        instructions: command.instructions.map(str::to_owned),
        runtime_settings: Some(runtime.runtime_settings(
            &resolved.resolution,
            &host,
            command.context_window,
        )),
    };
    let engine = Arc::new(resolved.engine);
    let mut options = HarnessOptions::new(command.context_window.unwrap_or_default());
    options.host = host;
    let harness = Harness::without_model(
        Arc::new(FixedEngine(Arc::clone(&engine))),
        store_of(runtime),
        options,
    );
    let mut held = match harness.hold(session.clone(), command.agent) {
        Ok(held) => held,
        Err(err) => return fail(err, 2),
    };
    // A manual compaction: checked against the engine's `manual-compact` requirements first.
    let outcome = harness
        .session(&mut held)
        .compact_manually(&engine, &tree, params);
    drop(working);
    let done = match outcome {
        Ok(done) => done,
        Err(SessionError::Engine(err)) => {
            if command.json {
                let out = serde_json::json!({
                    "sessionFile": path,
                    "contextEngine": resolved.resolution,
                    "ok": false,
                    "compacted": false,
                    "error": {"code": err.code(), "message": err.to_string()},
                });
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out).expect("serializes")
                );
            }
            return fail(err, 1);
        }
        Err(err) => return fail(err, 1),
    };
    let guarded = &done.answer;
    let compacted = done.compacted;
    let reason = done.reason;
    let result = &guarded.value;
    let details = result.result.as_ref().into_option();
    if command.json {
        let out = serde_json::json!({
            "sessionFile": path,
            "sessionId": session.session_id,
            "sessionKey": session.session_key,
            "contextEngine": resolved.resolution,
            "answeredBy": guarded.answer.answered_by,
            "ok": result.ok,
            "compacted": compacted,
            "reason": reason,
            "result": details.map(|d| serde_json::json!({
                "summary": d.summary.as_ref().map(|s| s.to_string()).into_option(),
                "firstKeptEntryId": d.first_kept_entry_id.as_ref().map(|s| s.to_string()).into_option(),
                "tokensBefore": d.tokens_before,
                "tokensAfter": d.tokens_after.into_option(),
                "details": d.details_json.as_ref().into_option()
                    .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok()),
            })),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializes")
        );
    } else {
        print_resolution(&resolved.resolution);
        match (compacted, details) {
            (true, Some(d)) => {
                println!(
                    "compacted {}: {} -> {} tokens, {}",
                    path.display(),
                    d.tokens_before,
                    d.tokens_after
                        .map_or_else(|| "?".to_owned(), |t| t.to_string()),
                    d.first_kept_entry_id.as_ref().into_option().map_or_else(
                        // An engine that keeps its own history (lossless) cuts no entry.
                        || "nothing cut from the session file (the engine keeps its own summaries)"
                            .to_owned(),
                        |id| format!("kept from entry {id}"),
                    ),
                );
                if let Some(summary) = d.summary.as_ref().into_option() {
                    println!("summary:\n{summary}");
                }
            }
            _ => println!(
                "not compacted: {}",
                reason.as_deref().unwrap_or("the engine gave no reason")
            ),
        }
    }
    if result.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
