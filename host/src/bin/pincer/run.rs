//! `pincer run`: one turn with `--prompt`, or a whole transcript replayed turn by turn with
//! `--import` (its system message becomes the system prompt; the replay model answers), through
//! the selected engine, into a session under `$PINCER_HOME/agents/<agent>/sessions/`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use pincer_host::config::{LoadedConfig, PincerHome};
use pincer_host::harness::{
    Harness, HarnessError, HarnessOptions, HarnessSession, SessionRunner, TurnReport,
};
use pincer_host::model::openai::{model_for_spec, OPENAI_PREFIX};
use pincer_host::model::replay::{ReplayModel, ReplayTools};
use pincer_host::model::{ModelProvider, NoTools, ToolExecutor};
use pincer_host::session::{
    ChatDialect, ChatList, JsonlStore, OnExisting, SessionFile, SessionKey, SessionSummary,
    StoreError,
};
use pincer_plugin_api::interop::openai_chat_messages;
use pincer_plugin_api::Message;

/// `pincer run`'s arguments.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// One turn with this user message.
    #[arg(
        long,
        value_name = "TEXT",
        conflicts_with = "import",
        required_unless_present = "import"
    )]
    prompt: Option<String>,
    /// Replay a transcript (a JSON array of OpenAI chat messages or of OpenClaw messages, or an
    /// object with `messages` or `traj`) turn by turn.
    #[arg(long, value_name = "FILE")]
    import: Option<PathBuf>,
    /// The session key (created when new; generated and printed when omitted), or the path
    /// of a session file. `--import` makes a new session: a key that names one already is
    /// refused unless `--force`.
    #[arg(long, value_name = "KEY")]
    session: Option<String>,
    /// Point `--session`'s key at a new session when it names one already (`--import`) or
    /// names a file that cannot be used (a directory …); the old file stays, and what was
    /// replaced is printed.
    #[arg(long)]
    force: bool,
    /// Use this engine instead of plugins.slots.contextEngine.
    #[arg(long, value_name = "ID")]
    engine: Option<String>,
    /// The model's context window, in tokens.
    #[arg(long, value_name = "TOKENS", default_value_t = 128_000)]
    context_window: u64,
    /// `replay` (the default with --import) or `openai:MODEL` (an OpenAI-compatible server:
    /// `model.baseUrl` and `model.apiKeyEnv` in pincer.json, or PINCER_MODEL_BASE_URL).
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// The system prompt (with --prompt; --import takes the transcript's).
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
    /// Print one JSON object per turn.
    #[arg(long)]
    json: bool,
}

/// Runs `pincer run`.
pub fn run(home: PincerHome, args: RunArgs) -> ExitCode {
    let plan = match Plan::new(&home, &args) {
        Ok(plan) => plan,
        Err(message) => return crate::common::fail(message, 2),
    };
    // A model the run talks to also serves the engines' `llmComplete`; a replay does not
    // (its answers belong to the transcript).
    let llm = plan.replay.is_none().then(|| Arc::clone(&plan.model));
    let runtime = match crate::common::open_with(
        home.clone(),
        args.plugins_dirs.clone(),
        Some((args.engine.clone(), None)),
        pincer_host::runtime::OpenLibraries::Selected,
        llm,
    ) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let resolved = match runtime.resolve() {
        Ok(resolved) => resolved,
        Err(err) => {
            runtime.shutdown();
            return crate::common::fail(err, 1);
        }
    };
    let mut options = HarnessOptions::new(args.context_window);
    options.system_prompt = plan.system_prompt.clone();
    options.durability = runtime.config().config.sessions.durability;
    let harness = Arc::new(Harness::new(
        Arc::new(resolved.engine),
        JsonlStore::new(home.root().join("agents")),
        Arc::clone(&plan.model),
        Arc::clone(&plan.tools),
        options,
    ));
    // The session's work runs on a worker of its own, where engine calls run inline.
    let working = crate::progress::Working::start(
        format!(
            "opening session {}",
            args.session.as_deref().unwrap_or("(a new one)")
        ),
        crate::progress::drawable(args.json),
    );
    let opened = open_session(&harness, &args);
    drop(working);
    let code = match opened {
        Ok(session) => {
            let runner = SessionRunner::with_session(harness, session);
            if args.session.is_none() {
                eprintln!("session key: {}", runner.key());
            }
            drive(&runner, &plan, args.json)
        }
        Err(code) => code,
    };
    runtime.shutdown();
    code
}

/// The session the run plays into: `--session`'s session file, else its key's session (a new
/// one for `--import`), else a new key's.
fn open_session(harness: &Harness, args: &RunArgs) -> Result<HarnessSession, ExitCode> {
    let Some(reference) = args.session.as_deref() else {
        let key = SessionKey::parse(&format!("run:{}", uuid_like())).expect("a run key is a key");
        return harness
            .create_session(&key, OnExisting::Refuse)
            .map(|(session, _)| session)
            .map_err(|err| crate::common::fail(err, 1));
    };
    let key = SessionKey::parse(reference);
    let path = std::path::Path::new(reference);
    if path.is_file() {
        let known = key
            .as_ref()
            .ok()
            .filter(|key| harness.store().find(key).ok().flatten().is_some());
        if known.is_none() {
            let file = SessionFile::check(path).map_err(|err| crate::common::fail(err, 2))?;
            return harness
                .open_session_file(&file)
                .map_err(|err| crate::common::fail(err, 2));
        }
    }
    let key =
        key.map_err(|err| crate::common::fail(format!("{err}; or name a session file's path"), 2))?;
    let existing = if args.force {
        OnExisting::Replace
    } else {
        OnExisting::Refuse
    };
    let replaced = |(session, old): (HarnessSession, Option<SessionSummary>)| {
        if let Some(old) = old {
            eprintln!(
                "replaced: key \"{key}\" named session {} ({}), which is kept",
                old.session_id,
                old.session_file.display()
            );
        }
        session
    };
    let refused = |err: HarnessError| {
        let code = match &err {
            HarnessError::Unusable { .. } | HarnessError::Store(StoreError::KeyExists { .. }) => 2,
            _ => 1,
        };
        crate::common::fail(err, code)
    };
    if args.import.is_some() {
        // An import makes a new session: never silently over a key's history.
        return harness
            .create_session(&key, existing)
            .map(replaced)
            .map_err(refused);
    }
    match harness.open_session(&key) {
        Err(HarnessError::Unusable { .. }) if args.force => harness
            .create_session(&key, OnExisting::Replace)
            .map(replaced)
            .map_err(refused),
        other => other.map_err(refused),
    }
}

/// What the run plays: its model, tools, system prompt and prompts.
struct Plan {
    model: Arc<dyn ModelProvider>,
    tools: Arc<dyn ToolExecutor>,
    replay: Option<Arc<ReplayModel>>,
    prompt: Option<String>,
    system_prompt: String,
}

impl Plan {
    fn new(home: &PincerHome, args: &RunArgs) -> Result<Plan, String> {
        let model_name = args.model.as_deref();
        if let Some(file) = &args.import {
            let list = ChatList::read(file).map_err(|err| err.to_string())?;
            let system_prompt = list.system_prompt().to_owned();
            let messages: Vec<Message> = match list.dialect() {
                ChatDialect::OpenClaw => list
                    .messages()
                    .iter()
                    .filter(|m| m["role"] != "system")
                    .map(|m| {
                        Message::from_value(m.clone())
                            .map_err(|err| format!("{}: {err}", file.display()))
                    })
                    .collect::<Result<_, _>>()?,
                ChatDialect::OpenAi => openai_chat_messages(list.messages()),
            };
            if !matches!(model_name, None | Some("replay")) {
                return Err(format!(
                    "--import replays the transcript's own answers: --model must be \"replay\", not {:?}",
                    model_name.unwrap_or_default()
                ));
            }
            // The replay answers as a model with the given window would: too large a prompt is
            // an overflow.
            let replay =
                Arc::new(ReplayModel::new(&messages).with_context_window(args.context_window));
            return Ok(Plan {
                model: replay.clone(),
                tools: Arc::new(ReplayTools::new(replay.clone())),
                replay: Some(replay),
                prompt: None,
                system_prompt,
            });
        }
        let model: Arc<dyn ModelProvider> = match model_name {
            Some(name) if name.starts_with(OPENAI_PREFIX) => {
                let config = LoadedConfig::load(&home.config_path()).map_err(|e| e.to_string())?;
                Arc::new(model_for_spec(name, &config.config.model).map_err(|e| e.to_string())?)
            }
            Some("replay") | None => {
                return Err(
                    "--prompt needs a model: --model openai:MODEL (an OpenAI-compatible server); \
                     the replay model only plays an --import transcript"
                        .into(),
                )
            }
            Some(other) => {
                return Err(format!(
                    "unknown --model {other:?}: use \"replay\" (with --import) or \"openai:MODEL\""
                ))
            }
        };
        Ok(Plan {
            model,
            tools: Arc::new(NoTools),
            replay: None,
            prompt: args.prompt.clone(),
            system_prompt: args.system.clone().unwrap_or_default(),
        })
    }
}

fn drive(runner: &SessionRunner, plan: &Plan, json: bool) -> ExitCode {
    let report = |report: &TurnReport| {
        if json {
            println!(
                "{}",
                serde_json::to_string(report).expect("a report serializes")
            );
        } else {
            let compacted: Vec<String> = report
                .compactions
                .iter()
                .map(|c| {
                    if c.compacted {
                        format!(
                            "{} {}→{} tokens",
                            c.reason,
                            c.tokens_before,
                            c.tokens_after.map_or("?".into(), |t| t.to_string())
                        )
                    } else {
                        format!(
                            "{} not compacted ({})",
                            c.reason,
                            c.detail.as_deref().unwrap_or("no reason given")
                        )
                    }
                })
                .collect();
            println!(
                "turn {}: {} messages assembled by {}, {} added, precheck {}{}",
                report.turn,
                report.assembled.count,
                report.assembled.answered_by,
                report.messages_added,
                report.precheck.route,
                if compacted.is_empty() {
                    String::new()
                } else {
                    format!(", compacted: {}", compacted.join(", "))
                }
            );
        }
    };
    let append = |message: Message| runner.run(move |h, s| h.append(s, &message));
    if !plan.system_prompt.is_empty() {
        let system_prompt = plan.system_prompt.clone();
        if let Err(err) = runner.run(move |h, s| h.keep_system_prompt(s, &system_prompt)) {
            return crate::common::fail(err, 1);
        }
    }
    if let Some(prompt) = &plan.prompt {
        return match runner.run_turn(Message::user(prompt.clone())) {
            Ok(r) => {
                report(&r);
                ExitCode::SUCCESS
            }
            Err(err) => crate::common::fail(err, 1),
        };
    }
    let replay = plan.replay.as_ref().expect("an import has a replay");
    // A progress bar on the host's stderr, drawn only when it is a terminal (and not with --json).
    let progress = indicatif::ProgressBar::with_draw_target(
        Some(replay.script(|s| s.remaining_turns()) as u64),
        if crate::progress::drawable(json) {
            crate::progress::draw_target()
        } else {
            indicatif::ProgressDrawTarget::hidden()
        },
    );
    for message in replay.script(|s| s.preamble.clone()) {
        if let Err(err) = append(message) {
            return crate::common::fail(err, 1);
        }
    }
    while let Some(prompt) = replay.script(|s| s.next_turn()) {
        if !replay.script(|s| s.turn_has_answer()) {
            // The transcript ends on a user message nothing answered: kept, no model call —
            // and said so.
            let entry_id = match append(prompt) {
                Ok(id) => id,
                Err(err) => return crate::common::fail(err, 1),
            };
            progress.inc(1);
            // On stderr: stdout (with `--json`) holds one object per turn, and this is none.
            progress.suspend(|| {
                eprintln!(
                    "note: the transcript ends on a user message with no answer: kept in the \
                     session (entry {entry_id}), no model call"
                );
            });
            continue;
        }
        progress.inc(1);
        match runner.run_turn(prompt) {
            Ok(r) => progress.suspend(|| report(&r)),
            Err(err) => {
                progress.abandon();
                return crate::common::fail(err, 1);
            }
        }
    }
    progress.finish_and_clear();
    ExitCode::SUCCESS
}

/// A fresh, time-ordered id for a generated session key.
fn uuid_like() -> String {
    pincer_host::session::new_session_id()
}
