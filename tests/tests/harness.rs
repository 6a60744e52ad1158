//! The turn harness: whole τ-bench conversations replayed turn by turn through
//! `legacy` and through the loaded `sliding-window` library, one turn against an
//! OpenAI-compatible server on 127.0.0.1, and overflow recovery.

use std::sync::{Arc, Mutex};

use pincer_host::config::PincerHome;
use pincer_host::harness::{Harness, HarnessOptions};
use pincer_host::model::replay::{ReplayModel, ReplayTools};
use pincer_host::model::{ModelError, ModelProvider, ModelReply, ModelRequest, NoTools};
use pincer_host::session::{JsonlStore, SessionTree};
use pincer_host::testing::harness::tool_pairs_are_sound;
use pincer_host::GuardedEngine;
use pincer_host::{Runtime, RuntimeOptions};
use pincer_plugin_api::abi::latest::Message;
use pincer_plugin_api::interop::openai_chat_messages;
use pincer_tests::chat_server::ChatServer;
use serde_json::{json, Value};

/// A model that checks what it is shown: never a tool result without its call, nor a call
/// without its result; it records how many messages it saw.
struct Watching<M> {
    inner: M,
    seen: Mutex<Vec<usize>>,
    /// The last request's messages and the reply to it.
    last: Mutex<Vec<Message>>,
}

impl<M: ModelProvider> ModelProvider for Watching<M> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        assert!(
            tool_pairs_are_sound(request.messages),
            "the model was shown a broken tool pair"
        );
        self.seen.lock().unwrap().push(request.messages.len());
        let reply = self.inner.complete(request);
        if let Ok(reply) = &reply {
            let mut last = request.messages.to_vec();
            last.push(reply.message.clone());
            *self.last.lock().unwrap() = last;
        }
        reply
    }
}

/// The messages of a session file in file order, without the fields a replay adds.
fn file_messages(path: &std::path::Path) -> Vec<Value> {
    let tree = SessionTree::read(path).unwrap();
    tree.entries
        .iter()
        .filter_map(|e| e.message())
        .map(|m| strip(&m))
        .collect()
}

fn strip(message: &Message) -> Value {
    let mut value = message.to_value();
    let map = value.as_object_mut().unwrap();
    map.remove("usage");
    map.remove("stopReason");
    value
}

/// A runtime over a fresh home and the staged plugins, and its resolved engine: `legacy`, or
/// with `config` (a `pincer.json`) the engine it selects, which must be `faulty`.
fn open_engine(home: &std::path::Path, config: Option<&str>) -> (Runtime, Arc<GuardedEngine>) {
    let mut options = RuntimeOptions::new(PincerHome::new(home.into()));
    if let Some(config) = config {
        std::fs::write(home.join("pincer.json"), config).unwrap();
        options.extra_plugin_dirs = vec![pincer_tests::staged_plugins_dir()];
    }
    let runtime = Runtime::open(options).unwrap();
    let resolved = runtime.resolve().unwrap();
    let expected = if config.is_some() { "faulty" } else { "legacy" };
    assert_eq!(resolved.resolution.resolved, expected);
    (runtime, Arc::new(resolved.engine))
}

/// A model that answers "ok" at once and records how many messages it was shown.
#[derive(Default)]
struct Answering {
    seen: Mutex<Vec<usize>>,
}

impl ModelProvider for Answering {
    fn name(&self) -> &str {
        "answering"
    }

    fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        self.seen.lock().unwrap().push(request.messages.len());
        Ok(ModelReply {
            message: Message::assistant("ok"),
        })
    }
}

/// Every τ-bench task replayed through `legacy`: the model is never shown a broken tool pair,
/// and the session file ends up holding every message of the transcript, in order.
#[test]
fn every_tau_bench_task_replays_through_legacy_into_a_complete_session() {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let home = tempfile::TempDir::new().unwrap();
    let (runtime, engine) = open_engine(home.path(), None);
    for (index, task) in tasks.as_array().unwrap().iter().enumerate() {
        let original = openai_chat_messages(task["traj"].as_array().unwrap());
        let replay = Arc::new(ReplayModel::new(&original));
        let model = Arc::new(Watching {
            inner: ReplayModelHandle(replay.clone()),
            seen: Mutex::new(Vec::new()),
            last: Mutex::new(Vec::new()),
        });
        let harness = Harness::new(
            engine.clone(),
            JsonlStore::new(home.path().join("agents")),
            model.clone(),
            Arc::new(ReplayTools::new(replay.clone())),
            HarnessOptions::new(128_000),
        );
        let mut session = harness
            .open_session(&format!("task:{index}").parse().unwrap())
            .unwrap();
        for message in replay.script(|s| s.preamble.clone()) {
            harness.append(&mut session, &message).unwrap();
        }
        while let Some(prompt) = replay.script(|s| s.next_turn()) {
            if !replay.script(|s| s.turn_has_answer()) {
                harness.append(&mut session, &prompt).unwrap();
                continue;
            }
            let report = harness.turn(&mut session, prompt).unwrap();
            assert_eq!(report.assembled.answered_by, "legacy");
            assert!(report.compactions.is_empty(), "128k holds a τ-bench task");
            // legacy passes the history through: what the model last saw, and its answer, is
            // the session's context as read back from the file.
            let on_file = pincer_host::session::build_session_context(
                &SessionTree::read(&session.summary.session_file).unwrap(),
                None,
            );
            // (A transcript may end its turn on tool results recorded after the last call.)
            let seen: Vec<Value> = model.last.lock().unwrap().iter().map(strip).collect();
            let on_file: Vec<Value> = on_file.messages.iter().map(strip).collect();
            assert_eq!(
                &on_file[..seen.len().min(on_file.len())],
                &seen[..],
                "task {index}: the harness's context is the file's"
            );
            assert!(on_file[seen.len()..]
                .iter()
                .all(|m| m["role"] == "toolResult"));
        }
        let path = session.summary.session_file.clone();
        drop(session);
        let expected: Vec<Value> = original.iter().map(strip).collect();
        assert_eq!(
            file_messages(&path),
            expected,
            "task {index}: every message, in order"
        );
        assert!(!model.seen.lock().unwrap().is_empty());
    }
    runtime.shutdown();
}

/// Forwards to a shared replay model.
struct ReplayModelHandle(Arc<ReplayModel>);

impl ModelProvider for ReplayModelHandle {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        self.0.complete(request)
    }
}

/// `pincer run --import` through the loaded `sliding-window` library at a 4096-token window:
/// every turn is answered by the library, one JSON line per turn, and the session keeps every
/// message of the transcript.
#[test]
fn pincer_run_replays_a_transcript_through_sliding_window() {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    let home = tempfile::TempDir::new().unwrap();
    let traj = home.path().join("task.json");
    // The longest transcript, to make the window matter.
    let task = tasks
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|t| t["traj"].as_array().unwrap().len())
        .unwrap();
    std::fs::write(&traj, task["traj"].to_string()).unwrap();
    let plugins = pincer_tests::staged_plugins_dir();
    let out = pincer_tests::run_pincer(
        home.path(),
        &[
            "run",
            "--import",
            traj.to_str().unwrap(),
            "--engine",
            "sliding-window",
            "--context-window",
            "4096",
            "--session",
            "tau:longest",
            "--plugins-dir",
            plugins.to_str().unwrap(),
            "--json",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let turns: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(turns.len() > 3, "one line per turn");
    for (i, turn) in turns.iter().enumerate() {
        assert_eq!(turn["turn"], i as u64 + 1);
        assert_eq!(turn["sessionKey"], "tau:longest");
        assert_eq!(turn["assembled"]["answeredBy"], "sliding-window", "{turn}");
        assert!(turn["precheck"]["route"].is_string());
        assert!(turn["compactions"].is_array());
    }
    let file = turns[0]["sessionFile"].as_str().unwrap();
    assert!(file.starts_with(home.path().join("agents/main/sessions").to_str().unwrap()));
    let original = openai_chat_messages(task["traj"].as_array().unwrap());
    let expected: Vec<Value> = original.iter().map(strip).collect();
    assert_eq!(
        file_messages(std::path::Path::new(file)),
        expected,
        "the session keeps every message"
    );
    // At 4096 tokens the conversation compacts, visibly, and each compaction shrinks it.
    let compactions: Vec<&Value> = turns
        .iter()
        .flat_map(|t| t["compactions"].as_array().unwrap())
        .collect();
    assert!(!compactions.is_empty(), "a 4096 window compacts");
    for c in &compactions {
        assert_eq!(c["compacted"], true, "{c}");
        assert!(c["tokensAfter"].as_u64().unwrap() < c["tokensBefore"].as_u64().unwrap());
    }
    let tree = SessionTree::read(std::path::Path::new(file)).unwrap();
    let entries = tree
        .entries
        .iter()
        .filter(|e| e.entry_type.as_str() == "compaction")
        .count();
    assert_eq!(entries, compactions.len(), "one compaction entry each");
    // The sliding window kept the model's view small: later turns saw fewer messages than
    // the session holds.
    let last = turns.last().unwrap();
    assert!(
        (last["assembled"]["count"].as_u64().unwrap() as usize) < expected.len(),
        "{last}"
    );
}

/// A home whose pincer.json names `server` as the model's server, with `more` (JSON5 members,
/// each ending in a comma) beside it.
fn home_with_model(server: &ChatServer, more: &str) -> tempfile::TempDir {
    let home = tempfile::TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        format!(
            r#"{{ {more} model: {{ baseUrl: "{}" }} }}"#,
            server.base_url
        ),
    )
    .unwrap();
    home
}

/// `pincer run --prompt … --model openai:NAME` talks to the server named in pincer.json's
/// `model.baseUrl`: the session gets the prompt and the answer, the index the usage.
#[test]
fn pincer_run_prompt_talks_to_an_openai_compatible_server() {
    let server = ChatServer::start();
    server.reply_completion(
        json!({"role": "assistant", "content": "Your flight is confirmed."}),
        "stop",
        json!({"prompt_tokens": 42, "completion_tokens": 6, "total_tokens": 48}),
    );
    let home = home_with_model(&server, "");
    let out = pincer_tests::run_pincer(
        home.path(),
        &[
            "run",
            "--prompt",
            "Confirm my flight, please.",
            "--model",
            "openai:test-model",
            "--system",
            "You are an airline agent.",
            "--session",
            "chat:1",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["usage"], json!([42, 6, 0]));
    let sent = &server.recorded()[0].body;
    assert_eq!(sent["model"], "test-model");
    assert_eq!(sent["messages"][0]["content"], "You are an airline agent.");
    assert_eq!(sent["messages"][1]["content"], "Confirm my flight, please.");
    let messages = file_messages(std::path::Path::new(
        report["sessionFile"].as_str().unwrap(),
    ));
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[1]["content"][0]["text"],
        "Your flight is confirmed."
    );
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("agents/main/sessions/sessions.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(index["chat:1"]["inputTokens"], 42);
}

/// A model configured in pincer.json writes the compaction summaries
/// (`agents.defaults.compaction.model`), and the run's model answers the engines'
/// `llmComplete`, both over real HTTP to a chat-completions server on 127.0.0.1.
#[test]
fn a_configured_model_writes_compaction_summaries_and_answers_engines_llm_complete() {
    let server = ChatServer::start();
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12});
    let home = home_with_model(
        &server,
        r#"agents: { defaults: { compaction: { model: "openai:summarizer" } } },
           plugins: { entries: { faulty: { config: { askModel: "Say hi." } } } },"#,
    );
    let plugins = pincer_tests::staged_plugins_dir();
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--model", "openai:chat", "--json"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--plugins-dir", plugins.to_str().unwrap()]);
        let out = pincer_tests::run_pincer(home.path(), &all);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };

    // `faulty` asks the host's model during `assemble`: the run's model answers it.
    server.reply_completion(
        json!({"role": "assistant", "content": "hi from the model"}),
        "stop",
        usage.clone(),
    );
    server.reply_completion(
        json!({"role": "assistant", "content": "answer"}),
        "stop",
        usage.clone(),
    );
    run(&[
        "--prompt",
        "hello",
        "--engine",
        "faulty",
        "--session",
        "llm",
    ]);
    let sent = server.recorded();
    assert_eq!(sent[0].body["model"], "chat");
    assert_eq!(sent[0].body["messages"][0]["content"], "Say hi.");
    let system = sent[1].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("the model says: hi from the model"),
        "{system}"
    );

    // Two turns on legacy, then `/compact` at a small window: the summary is the
    // summarising model's answer, to a request made from the conversation.
    let long = "I need to change my flight to Boston next Tuesday. ".repeat(160);
    server.reply_completion(
        json!({"role": "assistant", "content": "first answer"}),
        "stop",
        usage.clone(),
    );
    server.reply_completion(
        json!({"role": "assistant", "content": "second answer"}),
        "stop",
        usage.clone(),
    );
    server.reply_completion(
        json!({"role": "assistant", "content": "## Goal\nMove the Boston flight (written by the model)."}),
        "stop",
        usage,
    );
    run(&["--prompt", &long, "--session", "sum"]);
    // Larger than the keep-recent budget of a 4096-token window: the cut falls on it, a turn
    // boundary, and turn one is summarised whole.
    run(&[
        "--prompt",
        &"Is that done? ".repeat(350),
        "--session",
        "sum",
    ]);
    let report = run(&[
        "--prompt",
        "/compact",
        "--session",
        "sum",
        "--context-window",
        "4096",
    ]);
    assert_eq!(report["compactions"][0]["compacted"], true, "{report}");
    let sent = server.recorded();
    let summary_request = &sent.last().unwrap().body;
    assert_eq!(summary_request["model"], "summarizer");
    assert!(summary_request["max_tokens"].as_u64().unwrap() > 0);
    assert!(summary_request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("You summarise a conversation"));
    assert!(summary_request["messages"][1]["content"]
        .as_str()
        .unwrap()
        .contains("change my flight to Boston"));
    let tree = SessionTree::read(std::path::Path::new(
        report["sessionFile"].as_str().unwrap(),
    ))
    .unwrap();
    let summaries: Vec<String> = tree
        .entries
        .iter()
        .filter(|e| e.record()["type"] == "compaction")
        .map(|e| e.record()["summary"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(summaries.len(), 1);
    assert!(
        summaries[0].contains("Move the Boston flight (written by the model)."),
        "{}",
        summaries[0]
    );
}

/// `pincer tool` calls a tool the engine declared on an existing session and prints its JSON
/// result; an unknown tool, an unknown session and arguments that are not a JSON object are
/// refused with exit 2 and what to do.
#[test]
fn pincer_tool_calls_an_engine_tool_on_a_session() {
    let server = ChatServer::start();
    server.reply_completion(
        json!({"role": "assistant", "content": "hello"}),
        "stop",
        json!({"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}),
    );
    let home = home_with_model(&server, "");
    let plugins = pincer_tests::staged_plugins_dir();
    let pincer = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&[
            "--engine",
            "faulty",
            "--plugins-dir",
            plugins.to_str().unwrap(),
        ]);
        pincer_tests::run_pincer(home.path(), &all)
    };
    let out = pincer(&[
        "run",
        "--prompt",
        "hi",
        "--model",
        "openai:m",
        "--session",
        "t",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = pincer(&[
        "tool",
        "faulty_echo",
        "--session",
        "t",
        "--args",
        r#"{"x": [1, 2]}"#,
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed,
        json!({"engineId": "faulty", "answeredBy": "faulty", "tool": "faulty_echo",
               "isError": false, "result": {"x": [1, 2]}})
    );

    let refused = |args: &[&str], expected: &str| {
        let out = pincer(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    };
    refused(
        &["tool", "lcm_grep", "--session", "t"],
        "has no tool \"lcm_grep\"; it declares: faulty_calls, faulty_echo",
    );
    refused(
        &["tool", "faulty_echo", "--session", "nope"],
        "pincer run --session nope",
    );
    refused(
        &["tool", "faulty_echo", "--session", "t", "--args", "[1]"],
        "must be a JSON object",
    );
    refused(
        &["tool", "faulty_echo", "--session", "t", "--args", "{x"],
        "is not JSON",
    );
}

/// An embedder's `open_runtime` refuses a `model.llmComplete` no provider answers to, saying
/// what to write instead, and serves a configured one to engines.
#[test]
fn open_runtime_checks_the_configured_llm_complete_model() {
    use pincer_host::compaction::{open_runtime, OpenError};
    let home = tempfile::TempDir::new().unwrap();
    let open = |config: &str| {
        std::fs::write(home.path().join("pincer.json"), config).unwrap();
        open_runtime(RuntimeOptions::new(PincerHome::new(home.path().into())))
    };
    let err = open(r#"{ model: { llmComplete: "gpt-4o" } }"#).unwrap_err();
    assert!(matches!(err, OpenError::LlmComplete { .. }), "{err:?}");
    assert_eq!(err.code(), "model_unknown");
    assert!(err.to_string().contains("\"openai:NAME\""), "{err}");
    let err = open(r#"{ model: { llmComplete: "openai:m", apiKeyEnv: "PINCER_TEST_UNSET_KEY" } }"#)
        .unwrap_err();
    assert!(err.to_string().contains("PINCER_TEST_UNSET_KEY"), "{err}");
    let runtime =
        open(r#"{ model: { llmComplete: "openai:m", baseUrl: "http://127.0.0.1:9/v1" } }"#)
            .unwrap();
    runtime.shutdown();
}

/// A tool result over `plugins.resultLimits.maxToolResultBytes` breaks the contract: the engine
/// is quarantined, the caller gets legacy's error result instead of the oversized content, and
/// `health` names the cap.
#[test]
fn a_tool_result_over_its_cap_is_refused_and_quarantines_the_engine() {
    let server = ChatServer::start();
    server.reply_completion(
        json!({"role": "assistant", "content": "hello"}),
        "stop",
        json!({"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}),
    );
    let home = home_with_model(
        &server,
        "plugins: { resultLimits: { maxToolResultBytes: 100 } },",
    );
    let plugins = pincer_tests::staged_plugins_dir();
    let pincer = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--plugins-dir", plugins.to_str().unwrap()]);
        pincer_tests::run_pincer(home.path(), &all)
    };
    let out = pincer(&[
        "run",
        "--prompt",
        "hi",
        "--model",
        "openai:m",
        "--session",
        "t",
        "--engine",
        "faulty",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Within the cap: echoed.
    let out = pincer(&[
        "tool",
        "faulty_echo",
        "--session",
        "t",
        "--engine",
        "faulty",
        "--args",
        r#"{"x":1}"#,
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Over it: refused, quarantined, legacy's error result.
    let big = json!({ "x": "y".repeat(500) }).to_string();
    let out = pincer(&[
        "tool",
        "faulty_echo",
        "--session",
        "t",
        "--engine",
        "faulty",
        "--args",
        &big,
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["isError"], true, "{printed}");
    assert_eq!(printed["answeredBy"], "legacy", "{printed}");
    assert!(!printed.to_string().contains(&"y".repeat(500)), "{printed}");
    let health = pincer_tests::run_pincer(home.path(), &["health", "--json"]);
    let health = String::from_utf8_lossy(&health.stdout).into_owned();
    assert!(health.contains("maxToolResultBytes"), "{health}");
}

/// A model answering "prompt too long" makes the harness compact and retry, at most three
/// times; the turn succeeds when the model then answers, and fails with the overflow after a
/// fourth refusal.
#[test]
fn overflow_is_recovered_by_at_most_three_compactions() {
    struct Refusing {
        refusals: Mutex<usize>,
    }
    impl ModelProvider for Refusing {
        fn name(&self) -> &str {
            "refusing"
        }
        fn complete(&self, _: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
            let mut left = self.refusals.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return Err(ModelError::ContextOverflow {
                    observed_tokens: Some(9000),
                    message: "prompt is too long".into(),
                });
            }
            Ok(ModelReply {
                message: Message::assistant("done"),
            })
        }
    }
    let home = tempfile::TempDir::new().unwrap();
    let (runtime, engine) = open_engine(home.path(), None);
    for (refusals, succeeds) in [(2, true), (3, true), (4, false)] {
        let harness = Harness::new(
            engine.clone(),
            JsonlStore::new(home.path().join("agents")),
            Arc::new(Refusing {
                refusals: Mutex::new(refusals),
            }),
            Arc::new(NoTools),
            HarnessOptions::new(8192),
        );
        let mut session = harness
            .open_session(&format!("overflow:{refusals}").parse().unwrap())
            .unwrap();
        match harness.turn(&mut session, Message::user("hello")) {
            Ok(report) => {
                assert!(succeeds, "{refusals} refusals should fail the turn");
                let overflows = report
                    .compactions
                    .iter()
                    .filter(|c| c.reason == "overflow")
                    .count();
                assert_eq!(overflows, refusals, "one compaction per refusal");
                assert_eq!(report.model_calls, refusals + 1);
            }
            Err(err) => {
                assert!(!succeeds, "{refusals} refusals: {err}");
                assert_eq!(err.code(), "model_context_overflow");
            }
        }
    }
    runtime.shutdown();
}

/// The lifecycle of turns through the loaded `faulty` library (which logs every call): a new
/// session is not bootstrapped; a session whose file existed is bootstrapped once, then
/// `maintain("bootstrap")`; each turn assembles, answers the model's call of an engine tool
/// through `callTool` (its result reaches the model), finalizes with `afterTurn` (preferred over
/// `ingestBatch` and `ingest`) and maintains; `dispose` runs once at the end.
#[test]
fn turns_call_the_engine_in_openclaws_order_and_engine_tools_go_through_call_tool() {
    let server = ChatServer::start();
    let home = home_with_model(&server, "");
    let plugins = pincer_tests::staged_plugins_dir();
    let run = |prompt: &str| {
        server.reply_completion(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "faulty_echo", "arguments": "{\"x\":1}"}}]}),
            "tool_calls",
            json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
        );
        server.reply_completion(
            json!({"role": "assistant", "content": "done"}),
            "stop",
            json!({"prompt_tokens": 14, "completion_tokens": 1, "total_tokens": 15}),
        );
        let out = std::process::Command::new(pincer_tests::pincer_bin())
            .env("PINCER_LOG", "info")
            .args([
                "--home",
                home.path().to_str().unwrap(),
                "run",
                "--prompt",
                prompt,
            ])
            .args([
                "--model",
                "openai:m",
                "--engine",
                "faulty",
                "--session",
                "s",
            ])
            .args(["--plugins-dir", plugins.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        stderr
            .lines()
            .filter_map(|l| l.split("fields=method=").nth(1))
            .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
            .filter(|m| m != "info" && m != "factory")
            .collect::<Vec<_>>()
    };
    assert_eq!(
        run("hi"),
        ["assemble", "callTool", "afterTurn", "maintain", "dispose"],
        "a new session"
    );
    assert_eq!(
        run("again"),
        [
            "bootstrap",
            "maintain",
            "assemble",
            "callTool",
            "afterTurn",
            "maintain",
            "dispose"
        ],
        "a session whose file existed"
    );
    let sent = server.recorded();
    let tools: Vec<&str> = sent[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"faulty_echo"),
        "the engine's tools are offered: {tools:?}"
    );
    let second = sent[1].body["messages"].as_array().unwrap();
    let tool = second.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(
        tool["content"], "{\"x\":1}",
        "callTool's answer reaches the model"
    );
    assert!(
        sent[0].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("faulty engine was here"),
        "systemPromptAddition is prepended to the system prompt"
    );
}

/// `/new` and `/reset` append a `reset` entry with that reason: the next turn's model sees only
/// what came after it, and the file still holds everything; `/compact` runs the engine's
/// compaction (legacy without a summariser says why it did not compact).
#[test]
fn slash_commands_reset_and_compact_without_losing_history() {
    let home = tempfile::TempDir::new().unwrap();
    let (runtime, engine) = open_engine(home.path(), None);
    let model = Arc::new(Answering::default());
    let harness = Harness::new(
        engine.clone(),
        JsonlStore::new(home.path().join("agents")),
        model.clone(),
        Arc::new(NoTools),
        HarnessOptions::new(128_000),
    );
    let mut session = harness.open_session(&"cmd".parse().unwrap()).unwrap();
    harness.turn(&mut session, Message::user("first")).unwrap();
    harness.turn(&mut session, Message::user("second")).unwrap();
    let report = harness.turn(&mut session, Message::user("/new")).unwrap();
    assert_eq!(report.model_calls, 0);
    harness.turn(&mut session, Message::user("fresh")).unwrap();
    let compact = harness
        .turn(&mut session, Message::user("/compact keep names"))
        .unwrap();
    assert_eq!(compact.compactions.len(), 1);
    assert_eq!(compact.compactions[0].reason, "manual");
    assert_eq!(
        *model.seen.lock().unwrap(),
        vec![1, 3, 1],
        "after /new the model sees only the new prompt"
    );
    let path = session.summary.session_file.clone();
    drop(session);
    let tree = SessionTree::read(&path).unwrap();
    let resets: Vec<Value> = tree
        .entries
        .iter()
        .filter(|e| e.entry_type.as_str() == "reset")
        .map(|e| e.record()["reason"].clone())
        .collect();
    assert_eq!(resets, vec![json!("new")]);
    assert_eq!(
        file_messages(&path).len(),
        6,
        "nothing before the reset is lost"
    );
    runtime.shutdown();
}

/// The log lines of this test process (engines forward theirs into it).
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let make = move || Sink(sink.clone());
        let _ = tracing_subscriber::fmt()
            .with_writer(make)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .try_init();
        logs
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Subagents through the loaded `faulty` library: a child spawn is prepared (and not for a
/// light isolated child), a failed spawn rolls the preparation back, and the child's end
/// reaches the engine with its reason.
#[test]
fn subagent_spawns_are_prepared_rolled_back_on_failure_and_ended() {
    use pincer_host::harness::HarnessError;
    use pincer_plugin_api::abi::latest::{SubagentContextMode, SubagentEndReason};
    let logs = captured_logs();
    let home = tempfile::TempDir::new().unwrap();
    let (runtime, engine) = open_engine(
        home.path(),
        Some(r#"{ plugins: { slots: { contextEngine: "faulty" } } }"#),
    );
    let harness = Harness::new(
        engine.clone(),
        JsonlStore::new(home.path().join("agents")),
        Arc::new(ReplayModel::new(&[])),
        Arc::new(NoTools),
        HarnessOptions::new(128_000),
    );
    let parent = harness.open_session(&"parent".parse().unwrap()).unwrap();
    let count = |needle: &str| {
        String::from_utf8_lossy(&logs.lock().unwrap())
            .matches(needle)
            .count()
    };
    let (prepared, rolled_back) = (
        count("method=prepareSubagentSpawn"),
        count("faulty: rollback"),
    );

    let spawned =
        harness.spawn_subagent(&parent, "child-1", SubagentContextMode::Fork, false, || {
            Ok("spawned")
        });
    assert_eq!(spawned.unwrap(), "spawned");
    assert_eq!(count("method=prepareSubagentSpawn"), prepared + 1);
    assert_eq!(
        count("faulty: rollback"),
        rolled_back,
        "no rollback after a spawn that worked"
    );

    let failed: Result<(), HarnessError> = harness.spawn_subagent(
        &parent,
        "child-2",
        SubagentContextMode::Isolated,
        false,
        || Err(HarnessError::TooManyModelCalls),
    );
    assert!(failed.is_err());
    assert_eq!(count("method=prepareSubagentSpawn"), prepared + 2);
    assert_eq!(
        count("faulty: rollback"),
        rolled_back + 1,
        "the failed spawn is rolled back"
    );

    harness
        .spawn_subagent(
            &parent,
            "child-3",
            SubagentContextMode::Isolated,
            true,
            || Ok(()),
        )
        .unwrap();
    assert_eq!(
        count("method=prepareSubagentSpawn"),
        prepared + 2,
        "a light isolated child is not prepared"
    );

    let ended = count("method=onSubagentEnded");
    harness.end_subagent("child-1", SubagentEndReason::Completed);
    assert_eq!(count("method=onSubagentEnded"), ended + 1);
    drop(parent);
    runtime.shutdown();
}

/// An engine that declares `turnMaintenanceMode: "background"` gets its turn `maintain` off
/// the turn: a turn returns while a slow maintenance still runs, and the session's next engine
/// call waits for it (calls on one session stay in order).
#[test]
fn background_maintenance_does_not_block_the_turn() {
    let home = tempfile::TempDir::new().unwrap();
    // maintain sleeps 6 s; a turn that waited for it could not return within 3 s.
    let (runtime, engine) = open_engine(
        home.path(),
        Some(
            r#"{ plugins: { slots: { contextEngine: "faulty" },
             entries: { faulty: { config: { backgroundMaintenance: true, maintain: "hang", hangMs: 6000 } } },
             callTimeoutsMs: { maintain: 60000 } } }"#,
        ),
    );
    let harness = Arc::new(Harness::new(
        engine,
        JsonlStore::new(home.path().join("agents")),
        Arc::new(Answering::default()),
        Arc::new(NoTools),
        HarnessOptions::new(128_000),
    ));
    let (done, returned) = std::sync::mpsc::channel();
    let worker = {
        let harness = harness.clone();
        std::thread::spawn(move || {
            let mut session = harness.open_session(&"bg".parse().unwrap()).unwrap();
            harness.turn(&mut session, Message::user("hello")).unwrap();
            done.send(()).unwrap();
            // Dropping the session waits for its maintenance.
            drop(session);
        })
    };
    assert!(
        returned
            .recv_timeout(std::time::Duration::from_secs(3))
            .is_ok(),
        "the turn waited for background maintenance"
    );
    worker.join().unwrap();
    drop(harness);
    runtime.shutdown();
}

/// Every τ-bench task replayed at a 4096-token window, through `legacy` and through the loaded
/// `sliding-window` library, with the built-in compaction behind both: the model is never
/// shown a broken tool pair, conversations compact and go on to the end, and the file still
/// holds every message of the transcript, in order, beside well-formed compaction entries.
#[test]
fn every_tau_bench_task_runs_at_4096_tokens_through_legacy_and_sliding_window() {
    use pincer_host::compaction::open_runtime;
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        return;
    };
    for engine_id in ["legacy", "sliding-window"] {
        let home = tempfile::TempDir::new().unwrap();
        std::fs::write(
            home.path().join("pincer.json"),
            format!(r#"{{ plugins: {{ slots: {{ contextEngine: "{engine_id}" }} }} }}"#),
        )
        .unwrap();
        let store = JsonlStore::new(home.path().join("agents"));
        let mut options = RuntimeOptions::new(PincerHome::new(home.path().into()));
        options.extra_plugin_dirs = vec![pincer_tests::staged_plugins_dir()];
        // What an embedder does to get the built-in compaction.
        let runtime = open_runtime(options).unwrap();
        let resolved = runtime.resolve().unwrap();
        assert_eq!(resolved.resolution.resolved, engine_id);
        let engine = Arc::new(resolved.engine);
        let mut compactions = 0;
        for (index, task) in tasks.as_array().unwrap().iter().enumerate() {
            let original = openai_chat_messages(task["traj"].as_array().unwrap());
            let replay = Arc::new(ReplayModel::new(&original).with_context_window(4096));
            let model = Arc::new(Watching {
                inner: ReplayModelHandle(replay.clone()),
                seen: Mutex::new(Vec::new()),
                last: Mutex::new(Vec::new()),
            });
            let mut harness_options = HarnessOptions::new(4096);
            harness_options.durability = pincer_host::session::Durability::None;
            let harness = Harness::new(
                engine.clone(),
                store.clone(),
                model,
                Arc::new(ReplayTools::new(replay.clone())),
                harness_options,
            );
            let mut session = harness
                .open_session(&format!("task:{index}").parse().unwrap())
                .unwrap();
            while let Some(prompt) = replay.script(|s| s.next_turn()) {
                if !replay.script(|s| s.turn_has_answer()) {
                    harness.append(&mut session, &prompt).unwrap();
                    continue;
                }
                let report = harness
                    .turn(&mut session, prompt)
                    .unwrap_or_else(|err| panic!("{engine_id}, task {index}: {err}"));
                compactions += report.compactions.iter().filter(|c| c.compacted).count();
            }
            let path = session.summary.session_file.clone();
            drop(session);
            let expected: Vec<Value> = original.iter().map(strip).collect();
            assert_eq!(
                file_messages(&path),
                expected,
                "{engine_id}, task {index}: every message, in order"
            );
            let tree = SessionTree::read(&path).unwrap();
            for entry in tree
                .entries
                .iter()
                .filter(|e| e.entry_type.as_str() == "compaction")
            {
                let record = entry.record();
                let kept = record["firstKeptEntryId"].as_str().unwrap();
                assert!(
                    tree.get(kept).is_some(),
                    "{engine_id}, task {index}: firstKeptEntryId names an entry"
                );
                assert!(!record["summary"].as_str().unwrap().is_empty());
            }
            let context = pincer_host::session::build_session_context(&tree, None);
            if tree
                .entries
                .iter()
                .any(|e| e.entry_type.as_str() == "compaction")
            {
                assert_eq!(
                    context.messages[0].role_name(),
                    "compactionSummary",
                    "{engine_id}, task {index}: the context starts with the summary"
                );
            }
        }
        assert!(compactions > 0, "{engine_id}: a 4096 window compacts");
        eprintln!(
            "{engine_id}: {compactions} compactions over {} tasks",
            tasks.as_array().unwrap().len()
        );
        runtime.shutdown();
    }
}

/// A tool result far over its live cap is shortened in what the model sees when the precheck
/// says truncation is enough; the session keeps it whole.
#[test]
fn oversized_tool_results_are_truncated_in_the_models_view_only() {
    use pincer_plugin_api::abi::latest::ContentBlock;
    let home = tempfile::TempDir::new().unwrap();
    let (runtime, engine) = open_engine(home.path(), None);
    let model = Arc::new(Watching {
        inner: ReplayModelHandle(Arc::new(ReplayModel::new(&[
            Message::user("x"),
            Message::assistant("Your trip has 3 flights."),
        ]))),
        seen: Mutex::new(Vec::new()),
        last: Mutex::new(Vec::new()),
    });
    let replay_turn = model.inner.0.clone();
    replay_turn.script(|s| s.next_turn());
    let harness = Harness::new(
        engine,
        JsonlStore::new(home.path().join("agents")),
        model.clone(),
        Arc::new(NoTools),
        HarnessOptions::new(32_000),
    );
    let mut session = harness
        .open_session(&"big-result".parse().unwrap())
        .unwrap();
    let huge = "{\"flight\": \"HAT001\"} ".repeat(5_000);
    harness
        .append(&mut session, &Message::user("Show my reservation."))
        .unwrap();
    harness
        .append(
            &mut session,
            &Message::assistant_blocks(vec![ContentBlock::tool_call(
                "c1",
                "get_reservation_details",
                &json!({"reservation_id": "ABC"}),
            )]),
        )
        .unwrap();
    harness
        .append(
            &mut session,
            &Message::tool_result("c1", "get_reservation_details", huge.clone(), false),
        )
        .unwrap();
    let report = harness
        .turn(&mut session, Message::user("How many flights?"))
        .unwrap();
    let route = serde_json::to_value(report.precheck.route).unwrap();
    assert!(
        route == "truncate_tool_results_only" || route == "compact_then_truncate",
        "{route}"
    );
    let seen = model.last.lock().unwrap().clone();
    let shown = seen[2].plain_text();
    assert!(
        shown.len() < huge.len() / 4,
        "the model sees a shortened result"
    );
    assert!(shown.contains("more characters truncated"));
    let path = session.summary.session_file.clone();
    drop(session);
    let on_file = file_messages(&path);
    assert_eq!(
        on_file[2]["content"][0]["text"],
        huge.as_str(),
        "the session keeps it whole"
    );
    runtime.shutdown();
}
