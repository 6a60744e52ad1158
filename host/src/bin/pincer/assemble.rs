//! `pincer assemble`: runs the selected engine's `assemble` over a conversation file and
//! shows what it kept.

use std::process::ExitCode;

use pincer_host::config::PincerHome;
use pincer_host::operator::health_line;
use pincer_host::operator::HostDescriptor;
use pincer_host::operator::HostOperation;
use pincer_host::runtime::Runtime;
use pincer_host::session::Transcript;
use pincer_plugin_api::{BlockKind, Content, Message};

use crate::common::{fail, prepare, print_resolution, EngineRun};

/// `pincer assemble`'s arguments.
#[derive(clap::Args, Debug)]
pub struct AssembleArgs {
    #[command(flatten)]
    run: EngineRun,
    /// The prompt's token budget.
    #[arg(long, value_name = "TOKENS")]
    token_budget: Option<u64>,
    /// The execution host to check the engine's requirements against
    /// (`pincer-embedded`, or a CLI backend or harness id from pincer.json).
    #[arg(long, value_name = "HOST", default_value = "pincer-embedded")]
    host: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `pincer assemble`.
pub fn run(home: PincerHome, args: AssembleArgs) -> ExitCode {
    match prepare(home, args.run) {
        Ok((runtime, transcript)) => {
            let code = assemble(
                &runtime,
                &transcript,
                args.token_budget,
                &args.host,
                args.json,
            );
            runtime.shutdown();
            code
        }
        Err(code) => code,
    }
}

fn assemble(
    runtime: &Runtime,
    transcript: &Transcript,
    token_budget: Option<u64>,
    host: &str,
    json: bool,
) -> ExitCode {
    let resolved = match runtime.resolve() {
        Ok(r) => r,
        Err(err) => return fail(err, 1),
    };
    let Some(host) = HostDescriptor::find(&runtime.config().config, host) else {
        return fail(
            format!(
                "unknown host \"{host}\": use pincer-embedded or a CLI backend or harness declared under hosts in pincer.json"
            ),
            2,
        );
    };
    // Host requirements are checked before the run starts, and fail closed.
    if let Err(err) = resolved.engine.check_host(HostOperation::AgentRun, &host) {
        return fail(err, 1);
    }
    let settings = runtime.runtime_settings(&resolved.resolution, &host, token_budget);
    let view = match transcript.assemble_in(&resolved.engine, "cli-session", token_budget, settings)
    {
        Ok(v) => v,
        Err(err) => return fail(err, 1),
    };
    let messages = view.messages();
    let origins = view.origins();
    let quarantine = runtime.quarantine().list();
    if json {
        let kept: Vec<serde_json::Value> = messages
            .iter()
            .zip(&origins)
            .map(|(m, origin)| serde_json::json!({"index": origin, "message": m}))
            .collect();
        let out = serde_json::json!({
            "contextEngine": resolved.resolution,
            "answeredBy": view.answer.answered_by,
            "failure": view.answer.failure,
            "inputMessages": transcript.messages().len(),
            "keptMessages": kept,
            "estimatedTokens": view.result.estimated_tokens.unwrap_or(0),
            "systemPromptAddition": view.result.system_prompt_addition.as_ref().map(|s| s.to_string()).into_option(),
            "quarantine": quarantine,
            "health": health_line(&quarantine),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializes")
        );
        return ExitCode::SUCCESS;
    }
    let r = &resolved.resolution;
    print_resolution(r);
    if let Some(failure) = &view.answer.failure {
        println!("engine \"{}\" failed: {}", r.selected, failure.message);
        println!("-> quarantined; answered by {}", view.answer.answered_by);
    } else {
        println!("answered by: {}", view.answer.answered_by);
    }
    println!(
        "kept {} of {} messages, estimated {} tokens{}",
        messages.len(),
        transcript.messages().len(),
        view.result.estimated_tokens.unwrap_or(0),
        if view.result.estimated_tokens.unwrap_or(0) == 0 {
            " (0: the engine leaves estimation to the caller)"
        } else {
            ""
        }
    );
    for (message, origin) in messages.iter().zip(&origins) {
        let index = origin
            .map(|i| format!("#{i:<3}"))
            .unwrap_or_else(|| "new ".to_owned());
        println!("  {index} {:<10} {}", message.role_name(), preview(message));
    }
    if let Some(line) = health_line(&quarantine) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

fn preview(message: &Message) -> String {
    let mut parts = Vec::new();
    if let Some(id) = message.tool_result_id() {
        parts.push(format!("[toolResult id={id}]"));
    }
    if let Some(summary) = message.summary() {
        parts.push(summary.to_owned());
    }
    match message.content() {
        Content::None => {}
        Content::Text(text) => parts.push(text.to_owned()),
        Content::Blocks(blocks) => {
            for block in blocks {
                parts.push(match block.kind() {
                    BlockKind::Text => block.as_text().unwrap_or_default().to_owned(),
                    BlockKind::Thinking => "[thinking]".to_owned(),
                    BlockKind::ToolCall => block
                        .as_tool_call()
                        .map(|call| format!("[toolCall {} id={}]", call.name, call.id))
                        .unwrap_or_default(),
                    BlockKind::Image => "[image]".to_owned(),
                    BlockKind::Other => format!("[{}]", block.type_name()),
                });
            }
        }
    }
    let text = parts.join(" ").replace('\n', " ");
    if text.chars().count() > 90 {
        format!("{}…", text.chars().take(89).collect::<String>())
    } else {
        text
    }
}
