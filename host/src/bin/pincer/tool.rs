//! `pincer tool`: calls one of the selected engine's own tools (`callTool`) for a session, as
//! the model would mid-turn — how an operator or a test reads an engine's store (`lossless`'s
//! `lcm_grep`, `lcm_expand`, `lcm_stats`, …) after a run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use pincer_host::config::PincerHome;
use pincer_host::engines::request::{HostInputs, ToolCallRequest};
use pincer_host::session::SessionStore as _;
use pincer_plugin_api::abi::latest::AbortController;

#[derive(clap::Args, Debug)]
pub struct ToolArgs {
    /// The tool's name, one the engine declares.
    name: String,
    /// The session key (as `pincer run --session` named it).
    #[arg(long, value_name = "KEY")]
    session: String,
    /// The tool's arguments, a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// The agent whose session it is.
    #[arg(long, value_name = "ID", default_value = "main")]
    agent: String,
    /// Use this engine instead of plugins.slots.contextEngine.
    #[arg(long, value_name = "ID")]
    engine: Option<String>,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
    /// Print `{"content": …, "isError": …}` (content parsed when it is JSON).
    #[arg(long)]
    json: bool,
}

pub fn tool(home: PincerHome, args: ToolArgs) -> ExitCode {
    if let Err(err) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&args.args)
    {
        return super::fail(format!("--args must be a JSON object: {err}"), 2);
    }
    let session_id = super::store(&home)
        .resolve(&args.agent, &args.session)
        .map(|s| s.session_id)
        .unwrap_or_else(|_| args.session.clone());
    let runtime = match super::open(home, args.plugins_dirs, Some((args.engine, None))) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let resolved = match runtime.resolve() {
        Ok(resolved) => resolved,
        Err(err) => {
            runtime.shutdown();
            return super::fail(err, 1);
        }
    };
    let engine = &resolved.engine;
    let code = if !engine.info().tools.iter().any(|t| t.name == args.name) {
        let names: Vec<&str> = engine
            .info()
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        super::fail(
            format!(
                "engine {} declares no tool {:?} (its tools: {})",
                engine.id(),
                args.name,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ),
            2,
        )
    } else {
        let request = Arc::new(ToolCallRequest {
            session_id: Arc::from(session_id.as_str()),
            tool_name: Arc::from(args.name.as_str()),
            arguments_json: Arc::from(args.args.as_str()),
            host: HostInputs {
                session_key: Some(Arc::from(args.session.as_str())),
                ..HostInputs::default()
            },
        });
        match engine.call_tool(request, Arc::new(AbortController::new())) {
            Ok(Some(answer)) => {
                let content = answer.value.content.to_string();
                let is_error = answer.value.is_error;
                if args.json {
                    let parsed = serde_json::from_str::<serde_json::Value>(&content)
                        .unwrap_or(serde_json::Value::String(content));
                    println!(
                        "{}",
                        serde_json::json!({ "content": parsed, "isError": is_error })
                    );
                } else {
                    println!("{content}");
                }
                if is_error {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Ok(None) => super::fail(format!("engine {} has no callTool", engine.id()), 1),
            Err(err) => super::fail(err, 1),
        }
    };
    runtime.shutdown();
    code
}
