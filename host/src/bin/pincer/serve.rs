//! `pincer serve` (the gateway) and its clients: `pincer client`, and the `--socket` forms of
//! `pincer health` and `pincer plugins reload`. Parsing and output only: the gateway is
//! `pincer_host::gateway`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use pincer_host::config::{LoadedConfig, PincerHome};
use pincer_host::gateway::ConnectionLimits;
use pincer_host::gateway::{
    bind, client, serve, CallRequest, Gateway, GatewayMethod, GatewayParts, ServeOptions,
};
use pincer_host::gateway::{gateway_token, DEFAULT_BODY_LIMIT};
use pincer_host::harness::{Harness, HarnessOptions};
use pincer_host::model::openai::model_for_spec;
use pincer_host::model::{ModelError, ModelProvider, ModelReply, ModelRequest, NoTools};
use pincer_host::runtime::OpenLibraries;
use pincer_host::runtime::{OnReload, PluginWatcher, WatchEvent, WatchOptions};
use pincer_host::session::JsonlStore;

/// `pincer serve`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The Unix socket to serve on (created 0600; a live one is never replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Also serve HTTP on this loopback address (e.g. 127.0.0.1:7777); every request needs
    /// `Authorization: Bearer <token>`, the token in $PINCER_HOME/state/gateway.token.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// The model behind `turn`: `openai:MODEL` (an OpenAI-compatible server: `model.baseUrl`
    /// and `model.apiKeyEnv` in pincer.json, or PINCER_MODEL_BASE_URL). Without it, `turn` is
    /// refused and every other method works.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Use this engine instead of plugins.slots.contextEngine.
    #[arg(long, value_name = "ID")]
    engine: Option<String>,
    /// The model's context window, in tokens.
    #[arg(long, value_name = "TOKENS", default_value_t = 128_000)]
    context_window: u64,
    /// The system prompt of turns.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// The largest request body, in bytes (larger ones get 413).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_BODY_LIMIT)]
    max_body: usize,
    /// How long a call may take before its client gets a `timeout` error, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    call_timeout: u64,
    /// Do not watch plugin files and pincer.json (reload with `pincer plugins reload` or
    /// SIGHUP only).
    #[arg(long)]
    no_watch: bool,
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
}

/// `pincer client`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    /// The gateway's socket.
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    // The method: its help lists what the gateway answers (`method_help`).
    #[arg(help = method_help())]
    method: String,
    /// The session key (created on first use).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// The parameters, a JSON object.
    #[arg(long, value_name = "JSON")]
    params: Option<String>,
}

/// `pincer client`'s help for its method: "The method (`turn`, `ingest`, …, `reload`)", every
/// method the gateway answers in its order ([`GatewayMethod::ALL`]).
fn method_help() -> String {
    let names: Vec<String> = GatewayMethod::ALL
        .iter()
        .map(|method| format!("`{method}`"))
        .collect();
    format!("The method ({})", names.join(", "))
}

/// The model of a gateway started without `--model` (never called: `turn` is refused first).
struct NoModel;

impl ModelProvider for NoModel {
    fn name(&self) -> &str {
        "none"
    }

    fn complete(&self, _request: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        Err(ModelError::Protocol {
            message: "the gateway was started without --model".into(),
        })
    }
}

/// Runs `pincer serve` until SIGTERM or SIGINT.
pub fn run_serve(home: PincerHome, args: ServeArgs) -> ExitCode {
    let model: Option<Arc<dyn ModelProvider>> = match args.model.as_deref() {
        None => None,
        Some(spec) => {
            let config = match LoadedConfig::load(&home.config_path()) {
                Ok(config) => config,
                Err(err) => return crate::common::fail(err, 2),
            };
            match model_for_spec(spec, &config.config.model) {
                Ok(model) => Some(Arc::new(model)),
                Err(err) => return crate::common::fail(err, 2),
            }
        }
    };
    let token = match args.http {
        Some(_) => match gateway_token(&home.state_dir()) {
            Ok(token) => Some(token),
            Err(err) => return crate::common::fail(err, 1),
        },
        None => None,
    };
    // The gateway's model also serves the engines' `llmComplete`. A gateway serves for weeks
    // and the slot may change under it: every plugin's library is opened.
    let runtime = match crate::common::open_with(
        home.clone(),
        args.plugins_dirs.clone(),
        Some((args.engine.clone(), None)),
        OpenLibraries::All,
        model.clone(),
    ) {
        Ok(runtime) => Arc::new(runtime),
        Err(code) => return code,
    };
    if let Err(err) = runtime.resolve() {
        runtime.shutdown();
        return crate::common::fail(err, 1);
    }
    let mut options = HarnessOptions::new(args.context_window);
    options.system_prompt = args.system.clone().unwrap_or_default();
    options.durability = runtime.config().config.sessions.durability;
    // Each call and turn takes the slot's newest generation (an --engine stays pinned).
    let source = runtime.slot_source(args.engine.as_deref());
    let harness = Arc::new(Harness::with_source(
        Arc::clone(&source),
        JsonlStore::new(home.root().join("agents")),
        model.clone().unwrap_or_else(|| Arc::new(NoModel)),
        Arc::new(NoTools),
        options,
    ));
    let gateway = Arc::new(Gateway::new(GatewayParts {
        runtime: Arc::clone(&runtime),
        source,
        harness,
        has_model: model.is_some(),
        call_timeout: Duration::from_secs(args.call_timeout.max(1)),
    }));
    // A client that disconnects must cost the gateway only that connection: writes to a closed
    // socket fail with EPIPE instead of killing the process (main restores SIGPIPE's default
    // for the other commands' `| head`).
    // SAFETY: setting the disposition of SIGPIPE before the gateway's threads start.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let tokio = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pincer-gateway")
        .build()
    {
        Ok(tokio) => tokio,
        Err(err) => {
            runtime.shutdown();
            return crate::common::fail(format!("cannot start the gateway's runtime: {err}"), 1);
        }
    };
    let options = ServeOptions {
        socket: args.socket.clone(),
        http: args.http,
        token,
        body_limit: args.max_body,
        limits: ConnectionLimits::from_config(&runtime.config().config.gateway),
    };
    let watcher = if args.no_watch {
        None
    } else {
        let on_reload: OnReload = Arc::new(|event: &WatchEvent| match event {
            WatchEvent::Plugin(Ok(outcome)) if !outcome.unchanged => eprintln!(
                "pincer serve: reloaded plugin {} ({})",
                outcome.plugin_id,
                outcome
                    .engines
                    .iter()
                    .map(|(id, generation)| format!("{id} generation {generation}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            WatchEvent::Plugin(Err(err)) => eprintln!("pincer serve: reload refused: {err}"),
            WatchEvent::Config(Err(err)) => {
                eprintln!("pincer serve: pincer.json not reloaded: {err}")
            }
            _ => {}
        });
        match PluginWatcher::start(
            Arc::clone(&runtime),
            WatchOptions {
                on_reload: Some(on_reload),
                ..WatchOptions::default()
            },
        ) {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                runtime.shutdown();
                return crate::common::fail(err, 1);
            }
        }
    };
    let outcome = tokio.block_on(async {
        // Every address bound and checked before anything is announced.
        let listeners = bind(&options).await?;
        eprintln!(
            "pincer serve: engine {} on {}{}",
            gateway
                .runtime()
                .resolve()
                .map_or_else(|_| "?".to_owned(), |r| r.resolution.resolved.clone()),
            options.socket.display(),
            options.http.map_or(String::new(), |addr| format!(
                ", http://{addr} (bearer token in {})",
                home.state_dir().join("gateway.token").display()
            )),
        );
        let on_stop = Box::new(move || drop(watcher));
        serve(
            Arc::clone(&gateway),
            options,
            listeners,
            std::future::pending(),
            on_stop,
        )
        .await
    });
    match outcome {
        Ok(()) => {
            eprintln!("pincer serve: stopped");
            ExitCode::SUCCESS
        }
        Err(err) => {
            runtime.shutdown();
            crate::common::fail(err, 1)
        }
    }
}

/// Runs `pincer client`: one call, its answer printed as JSON.
pub fn run_client(args: ClientArgs) -> ExitCode {
    let params = match args.params.as_deref().map(serde_json::from_str) {
        None => None,
        Some(Ok(value)) => Some(value),
        Some(Err(err)) => return crate::common::fail(format!("--params is not JSON: {err}"), 2),
    };
    call_and_print(&args.socket, &args.method, args.session, params, true)
}

/// One call to the gateway at `socket`; prints the answer (as JSON, or its result as text) and
/// exits 0 when it succeeded, 1 when the gateway refused it.
pub fn call_and_print(
    socket: &Path,
    method: &str,
    session: Option<String>,
    params: Option<serde_json::Value>,
    json: bool,
) -> ExitCode {
    let request = CallRequest {
        method: method.to_owned(),
        session,
        params,
    };
    match client::call(socket, &request) {
        Ok((_, answer)) => {
            let ok = answer["ok"] == true;
            if json || !ok {
                println!("{answer}");
            } else {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&answer["result"]).expect("JSON prints")
                );
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "pincer: {} ({})",
                    answer["error"]["message"]
                        .as_str()
                        .unwrap_or("the call failed"),
                    answer["error"]["code"].as_str().unwrap_or("error")
                );
                ExitCode::from(1)
            }
        }
        Err(err) => crate::common::fail(err, 1),
    }
}
