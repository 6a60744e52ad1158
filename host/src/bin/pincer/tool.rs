//! `pincer tool`: calls a tool an engine declared (`callTool`) on a session and prints its
//! result — what a model's tool call would get, without a model.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use pincer_host::config::PincerHome;
use pincer_host::harness::{Harness, HarnessOptions, ToolCallParams};
use pincer_host::FixedEngine;
use serde_json::{json, Value};

/// The window of the harness a tool call runs on (a tool call assembles nothing: any will do).
const TOOL_CONTEXT_WINDOW: u64 = 128_000;

/// `pincer tool`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ToolArgs {
    /// The tool's name, as the engine declared it.
    name: String,
    /// The session: a key, an id or a session file.
    #[arg(long, value_name = "KEY")]
    session: String,
    /// The tool's arguments, a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// Use this engine instead of plugins.slots.contextEngine.
    #[arg(long, value_name = "ID")]
    engine: Option<String>,
    /// The agent whose sessions are searched.
    #[arg(long, value_name = "ID", default_value = "main")]
    agent: pincer_host::session::AgentId,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
    /// Print `{engineId, answeredBy, tool, isError, result}` instead of the result alone.
    #[arg(long)]
    json: bool,
}

/// Runs `pincer tool`: exit 0 with the result, 1 when the tool or the engine failed, 2 for bad
/// arguments (not JSON, an unknown session or tool).
pub fn run(home: PincerHome, args: ToolArgs) -> ExitCode {
    let arguments: Value = match serde_json::from_str(&args.args) {
        Ok(value @ Value::Object(_)) => value,
        Ok(other) => {
            return crate::common::fail(
                format!("--args must be a JSON object, not {other}: e.g. --args '{{\"query\": \"refund\"}}'"),
                2,
            )
        }
        Err(err) => return crate::common::fail(format!("--args is not JSON: {err}"), 2),
    };
    let session = match crate::common::session_ref(&home, &args.agent, &args.session) {
        Ok(session) => session,
        Err(err) => {
            return crate::common::fail(
                format!("{err}: a tool runs on an existing session (start one with `pincer run --session {}`)", args.session),
                2,
            )
        }
    };
    let runtime = match crate::common::open(
        home,
        args.plugins_dirs.clone(),
        Some((args.engine.clone(), None)),
    ) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let code = call(&runtime, &args, &session, &arguments);
    runtime.shutdown();
    code
}

fn call(
    runtime: &pincer_host::Runtime,
    args: &ToolArgs,
    session: &pincer_host::session::SessionSummary,
    arguments: &Value,
) -> ExitCode {
    let resolved = match runtime.resolve() {
        Ok(resolved) => resolved,
        Err(err) => return crate::common::fail(err, 1),
    };
    let engine = &resolved.engine;
    let declared: Vec<&str> = engine
        .info()
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    if !declared.contains(&args.name.as_str()) {
        let offered = if declared.is_empty() {
            "it declares no tools".to_owned()
        } else {
            format!("it declares: {}", declared.join(", "))
        };
        let why = resolved
            .resolution
            .reason
            .as_deref()
            .map(|r| format!(" (selected {}: {r})", resolved.resolution.selected))
            .unwrap_or_default();
        return crate::common::fail(
            format!(
                "context engine \"{}\"{why} has no tool \"{}\"; {offered}",
                engine.id(),
                args.name
            ),
            2,
        );
    }
    let engine = Arc::new(resolved.engine);
    let harness = Harness::without_model(
        Arc::new(FixedEngine(Arc::clone(&engine))),
        crate::common::store_of(runtime),
        HarnessOptions::new(TOOL_CONTEXT_WINDOW),
    );
    let mut held = match harness.hold(session.clone(), &args.agent) {
        Ok(held) => held,
        Err(err) => return crate::common::fail(err, 2),
    };
    let call = ToolCallParams {
        name: args.name.clone(),
        arguments_json: arguments.to_string(),
    };
    let answer = match harness.session(&mut held).call_tool(&engine, call) {
        Ok(Some(answer)) => answer,
        Ok(None) => {
            return crate::common::fail(
                format!(
                    "context engine \"{}\" declares tool \"{}\" but has no callTool",
                    engine.id(),
                    args.name
                ),
                1,
            )
        }
        Err(err) => return crate::common::fail(format!("callTool {}: {err}", args.name), 1),
    };
    let text = answer.value.content.as_str();
    // The tool's output is JSON when it is JSON; else it is printed as a JSON string.
    let result = serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::from(text));
    if args.json {
        println!(
            "{}",
            json!({
                "engineId": engine.id(),
                "answeredBy": &*answer.answer.answered_by,
                "tool": args.name,
                "isError": answer.value.is_error,
                "result": result,
            })
        );
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&result).expect("a JSON value prints")
        );
    }
    if answer.value.is_error {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
