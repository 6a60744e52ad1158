//! Models: the OpenAI-compatible client against a chat-completions server on
//! 127.0.0.1 (no real model is reachable from here), and the replay model over the τ-bench
//! transcripts.

use pincer_host::model::openai::{OpenAiConfig, OpenAiModel};
use pincer_host::model::replay::ReplayModel;
use pincer_host::model::{ModelError, ModelProvider, ModelRequest, ToolSpec};
use pincer_plugin_api::abi::latest::{Message, Role};
use pincer_plugin_api::interop::openai_chat_messages;
use pincer_tests::chat_server::ChatServer;
use serde_json::{json, Value};

fn config(server: &ChatServer, key_env: Option<&str>) -> OpenAiConfig {
    OpenAiConfig {
        base_url: server.base_url.clone(),
        model: "test-model".into(),
        api_key_env: key_env.map(str::to_owned),
        timeout_seconds: Some(10),
    }
}

fn find_flight_tool() -> ToolSpec {
    ToolSpec {
        name: "search_direct_flight".into(),
        description: "Search direct flights between two cities on a date.".into(),
        parameters: json!({"type": "object", "properties": {"origin": {"type": "string"}}}),
    }
}

/// The request carries the system prompt first, the context projected as `convertToLlm` does,
/// tool calls with their arguments as JSON text, tool results by call id, the tools and the
/// key; the answer comes back as an OpenClaw assistant message with the provider's usage.
#[test]
fn the_openai_model_speaks_chat_completions_both_ways() {
    let server = ChatServer::start();
    server.reply_completion(
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
            "function": {"name": "search_direct_flight", "arguments": "{\"origin\":\"JFK\"}"}}]}),
        "tool_calls",
        json!({"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
               "prompt_tokens_details": {"cached_tokens": 1000}}),
    );
    std::env::set_var("PINCER_TEST_MODEL_KEY_1", "sk-test-123");
    let model = OpenAiModel::new(config(&server, Some("PINCER_TEST_MODEL_KEY_1"))).unwrap();
    assert_eq!(model.name(), "openai:test-model");

    let context = vec![
        Message::compaction_summary("Earlier: the user asked to rebook.", 900),
        Message::user("Find me a direct flight from JFK."),
        Message::assistant_blocks(vec![
            pincer_plugin_api::abi::latest::ContentBlock::tool_call(
                "call_1",
                "search_direct_flight",
                &json!({"origin": "JFK"}),
            ),
        ]),
        Message::tool_result("call_1", "search_direct_flight", "[]", false),
    ];
    let reply = model
        .complete(&ModelRequest {
            system_prompt: "You are an airline agent.",
            messages: &context,
            tools: &[find_flight_tool()],
            max_output_tokens: Some(256),
        })
        .unwrap();

    let sent = &server.recorded()[0];
    assert_eq!(sent.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test-123"));
    let body = &sent.body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 256);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You are an airline agent."})
    );
    assert_eq!(messages[1]["role"], "user", "the summary is a user message");
    assert!(messages[1]["content"]
        .as_str()
        .unwrap()
        .contains("Earlier: the user asked to rebook."));
    assert_eq!(
        messages[3]["tool_calls"][0]["function"]["arguments"],
        "{\"origin\":\"JFK\"}"
    );
    assert_eq!(messages[4]["role"], "tool");
    assert_eq!(messages[4]["tool_call_id"], "call_1");
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "search_direct_flight");

    let answer = &reply.message;
    assert_eq!(answer.role(), Role::Assistant);
    let call = answer.tool_calls().next().unwrap();
    assert_eq!((call.id, call.name), ("call_9", "search_direct_flight"));
    let arguments: Value = serde_json::from_str(call.arguments_json).unwrap();
    assert_eq!(arguments, json!({"origin": "JFK"}));
    let usage = reply.usage();
    assert_eq!(
        (usage.input, usage.cache_read, usage.output),
        (200, 1000, 40)
    );
    assert_eq!(usage.total_tokens, 1240);
    let value = answer.to_value();
    assert_eq!(value["stopReason"], "toolUse");
    assert_eq!(value["model"], "test-model");
}

/// "Prompt too long" answers of the servers people run are overflows (the harness compacts
/// and retries), with the prompt size when the server gives it; other errors keep the
/// server's words; an unreachable server and a missing key say what to do.
#[test]
fn the_openai_model_reports_overflow_errors_and_missing_keys_clearly() {
    let server = ChatServer::start();
    server.reply(
        400,
        json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                         "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}),
    );
    server.reply(
        404,
        json!({"error": {"message": "model 'nope' not found", "type": "not_found"}}),
    );
    let model = OpenAiModel::new(config(&server, None)).unwrap();
    let request = ModelRequest {
        system_prompt: "",
        messages: &[Message::user("hello")],
        tools: &[],
        max_output_tokens: None,
    };
    match model.complete(&request).unwrap_err() {
        ModelError::ContextOverflow {
            observed_tokens, ..
        } => assert_eq!(observed_tokens, Some(5000)),
        other => panic!("not an overflow: {other}"),
    }
    let err = model.complete(&request).unwrap_err();
    assert_eq!(err.code(), "model_http");
    assert!(err.to_string().contains("model 'nope' not found"), "{err}");
    assert!(
        server.recorded()[0].header("authorization").is_none(),
        "no key, no header"
    );

    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = OpenAiModel::new(OpenAiConfig {
        base_url: url.clone(),
        ..config(&server, None)
    })
    .unwrap();
    let err = unreachable.complete(&request).unwrap_err();
    assert_eq!(err.code(), "model_unreachable");
    assert!(
        err.to_string().contains(&url) && err.to_string().contains("baseUrl"),
        "{err}"
    );

    let err =
        OpenAiModel::new(config(&server, Some("PINCER_TEST_NO_SUCH_KEY_VARIABLE"))).unwrap_err();
    assert_eq!(err.code(), "model_missing_api_key");
    assert!(err.to_string().contains("PINCER_TEST_NO_SUCH_KEY_VARIABLE"));
}

/// Every τ-bench transcript replays turn by turn into exactly the messages it holds: each
/// turn's user message, the recorded assistant answers, and the recorded tool results (found
/// in order, as call ids repeat); usage comes from the estimate.
#[test]
fn every_tau_bench_transcript_replays_exactly() {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    for (index, task) in tasks.as_array().unwrap().iter().enumerate() {
        let original = openai_chat_messages(task["traj"].as_array().unwrap());
        let model = ReplayModel::new(&original);
        let mut replayed: Vec<Message> = model.script(|s| s.preamble.clone());
        while let Some(prompt) = model.script(|s| s.next_turn()) {
            replayed.push(prompt);
            loop {
                let request = ModelRequest {
                    system_prompt: "",
                    messages: &replayed,
                    tools: &[],
                    max_output_tokens: None,
                };
                let reply = match model.complete(&request) {
                    Ok(reply) => reply,
                    Err(ModelError::ReplayExhausted) => break,
                    Err(err) => panic!("task {index}: {err}"),
                };
                assert!(reply.usage().input > 0, "usage from the estimate");
                let calls: Vec<String> = reply
                    .message
                    .tool_calls()
                    .map(|c| c.id.to_owned())
                    .collect();
                replayed.push(reply.message);
                for id in &calls {
                    match model.script(|s| s.tool_result(id)) {
                        Some(result) => replayed.push(result),
                        None => panic!("task {index}: no recorded result for {id}"),
                    }
                }
                if calls.is_empty() {
                    break;
                }
            }
        }
        let strip = |m: &Message| {
            let mut v = m.to_value();
            v.as_object_mut().unwrap().remove("usage");
            v.as_object_mut().unwrap().remove("stopReason");
            v
        };
        let expected: Vec<Value> = original.iter().map(strip).collect();
        let got: Vec<Value> = replayed.iter().map(strip).collect();
        assert_eq!(got, expected, "task {index} replays as recorded");
    }
}

/// Given a context window, the replay model refuses a prompt that does not fit, as providers
/// do, with the prompt's size.
#[test]
fn the_replay_model_overflows_past_its_window() {
    let long = Message::user("x".repeat(40_000));
    let model = ReplayModel::new(&[Message::user("hi"), Message::assistant("hello")])
        .with_context_window(4096);
    let err = model
        .complete(&ModelRequest {
            system_prompt: "",
            messages: &[long],
            tools: &[],
            max_output_tokens: None,
        })
        .unwrap_err();
    match err {
        ModelError::ContextOverflow {
            observed_tokens: Some(tokens),
            ..
        } => assert!(tokens > 4096),
        other => panic!("not an overflow: {other}"),
    }
}
