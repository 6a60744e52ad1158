//! The gateway's transports: one axum router served over a Unix domain socket (mode `0600`)
//! and, optionally, over loopback HTTP that requires `Authorization: Bearer <token>`.
//!
//! Both listeners are bound, and every address checked, by [`bind`] before anything is
//! announced. Connections are served by [`connections`](super::connections): deadlines for
//! headers, bodies and idle connections, a cap on connections, the token checked before
//! routing. The router reads each body itself, up to the body limit (a larger one is answered
//! 413 before it is read) and within the body deadline (408), so every refusal — too large,
//! too slow, not JSON, unknown method, wrong types, another HTTP method than `POST` (405) — is
//! a JSON error with a stable `code`, and a client that goes away mid-request only drops its
//! own connection. Shutdown (SIGTERM, SIGINT, or the `shutdown` future) stops accepting,
//! lets calls in flight finish, flushes the sessions, disposes every engine once and removes
//! the socket. SIGHUP reloads the config and every plugin.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::Serialize;
use serde_json::value::RawValue;

use super::connections::{serve_connections, ConnectionLimits, Shared};
use super::protocol::{parse_call, GatewayError, CALL_PATH};
use super::service::{reload_everything, Gateway};

/// The largest request body read by default (16 MiB).
pub const DEFAULT_BODY_LIMIT: usize = 16 << 20;

/// Where and how the gateway listens.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The Unix socket path.
    pub socket: PathBuf,
    /// A loopback address for HTTP, when wanted.
    pub http: Option<SocketAddr>,
    /// The bearer token HTTP requires.
    pub token: Option<String>,
    /// The largest request body.
    pub body_limit: usize,
    /// Deadlines and the connection cap (`gateway.*` in `pincer.json`).
    pub limits: ConnectionLimits,
}

/// The listeners of a gateway, bound and checked, not yet serving.
#[derive(Debug)]
pub struct Listeners {
    unix: tokio::net::UnixListener,
    http: Option<tokio::net::TcpListener>,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Another gateway answers on the socket.
    #[error("a gateway is already serving on {0}: stop it first, or choose another --socket")]
    SocketInUse(PathBuf),
    /// The path exists and is not a socket.
    #[error("{0} exists and is not a socket; refusing to replace it (choose another --socket)")]
    NotASocket(PathBuf),
    /// HTTP must stay on loopback.
    #[error(
        "--http {0} is not a loopback address: the gateway serves HTTP on 127.0.0.1 or ::1 only"
    )]
    NotLoopback(SocketAddr),
    /// HTTP without a token.
    #[error("--http needs a bearer token")]
    NoToken,
    /// Binding or serving failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl ServeError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::SocketInUse(_) => "socket_in_use",
            ServeError::NotASocket(_) => "not_a_socket",
            ServeError::NotLoopback(_) => "not_loopback",
            ServeError::NoToken => "no_token",
            ServeError::Io { .. } => "io",
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// Binds the Unix socket at `path` with mode `0600`; a stale socket (nothing answers) is
/// replaced, a live one or any other file refused.
///
/// # Errors
/// [`ServeError`].
pub fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener, ServeError> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(ServeError::NotASocket(path.to_owned()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ServeError::SocketInUse(path.to_owned()));
        }
        crate::disk::remove_file(path).map_err(io(format!("removing stale {}", path.display())))?;
    }
    // Created under a umask that leaves only the owner's bits, then made 0600 for certain,
    // before anything is accepted.
    // SAFETY: umask only swaps the process's file-creation mask.
    let old = unsafe { libc::umask(0o177) };
    let bound = std::os::unix::net::UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener = bound.map_err(io(format!("binding {}", path.display())))?;
    // A chmod of the socket's inode, no data: outside the seam, which has no such operation.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io(format!("chmod 0600 {}", path.display())))?;
    listener
        .set_nonblocking(true)
        .map_err(io("setting the socket non-blocking"))?;
    tokio::net::UnixListener::from_std(listener).map_err(io("registering the socket"))
}

/// The bearer token in `state_dir/gateway.token`, generated (mode `0600`) on first use.
///
/// # Errors
/// The file cannot be read or written.
pub fn gateway_token(state_dir: &Path) -> Result<String, ServeError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = state_dir.join("gateway.token");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let token = text.trim().to_owned();
        if token.len() >= 32 {
            return Ok(token);
        }
    }
    crate::disk::create_dir_all(state_dir)
        .map_err(io(format!("creating {}", state_dir.display())))?;
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let tmp = state_dir.join(format!(".gateway.token.{}", std::process::id()));
    let file = crate::disk::open(
        &tmp,
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600),
    )
    .map_err(io(format!("writing {}", tmp.display())))?;
    crate::disk::write_all(&file, &tmp, format!("{token}\n").as_bytes())
        .and_then(|()| crate::disk::sync_all(&file, &tmp))
        .map_err(io(format!("writing {}", tmp.display())))?;
    crate::disk::rename(&tmp, &path).map_err(io(format!("writing {}", path.display())))?;
    Ok(token)
}

#[derive(Clone)]
struct AppState {
    gateway: Arc<Gateway>,
    body_limit: usize,
    body_timeout: std::time::Duration,
}

/// The envelope of a successful answer, written without re-parsing the result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    ok: bool,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a str>,
    engine_id: &'a str,
    generation: u64,
    result: &'a RawValue,
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `err` as a JSON answer with its status.
pub(super) fn error_response(err: &GatewayError) -> Response {
    let body = serde_json::to_vec(&err.body()).expect("an error serializes");
    let status = StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, body)
}

async fn call_handler(State(state): State<AppState>, request: Request) -> Response {
    // The bearer token, on HTTP, was checked before routing (`connections.rs`).
    let body = match tokio::time::timeout(
        state.body_timeout,
        read_body(request.into_body(), state.body_limit),
    )
    .await
    {
        Ok(Ok(body)) => body,
        Ok(Err(err)) => return error_response(&err),
        Err(_) => {
            let mut response = error_response(&GatewayError::new(
                408,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} s (gateway.bodyTimeoutSeconds); \
                     send the whole body at once",
                    state.body_timeout.as_secs_f64()
                ),
            ));
            response.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            return response;
        }
    };
    let (method, call) = match parse_call(&body) {
        Ok(parsed) => parsed,
        Err(err) => return error_response(&err),
    };
    let session = call.session.clone();
    match state.gateway.call(method, call).await {
        Ok(served) => {
            let body = serde_json::to_vec(&Envelope {
                ok: true,
                method: method.as_str(),
                session: session.as_deref(),
                engine_id: &served.engine_id,
                generation: served.generation,
                result: &served.result,
            })
            .expect("an answer serializes");
            json_response(StatusCode::OK, body)
        }
        Err(err) => error_response(&err),
    }
}

async fn read_body(body: Body, limit: usize) -> Result<Bytes, GatewayError> {
    axum::body::to_bytes(body, limit).await.map_err(|err| {
        let too_large = std::error::Error::source(&err)
            .is_some_and(|s| s.to_string().contains("length limit"))
            || err.to_string().contains("length limit");
        if too_large {
            GatewayError::new(
                413,
                "body_too_large",
                format!(
                    "the request body is larger than the gateway's limit of {limit} bytes; send \
                     less (a held session's messages stay in the gateway: assemble needs none)"
                ),
            )
        } else {
            GatewayError::bad_request(
                "bad_body",
                format!("the request body could not be read: {err}"),
            )
        }
    })
}

async fn not_found() -> Response {
    error_response(&GatewayError::new(
        404,
        "not_found",
        format!("the gateway answers POST {CALL_PATH} only"),
    ))
}

async fn method_not_allowed() -> Response {
    let mut response = error_response(&GatewayError::new(
        405,
        "method_not_allowed",
        format!("{CALL_PATH} answers POST only: send the call as a POST with a JSON body"),
    ));
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    response
}

fn router(state: AppState) -> Router {
    Router::new()
        .route(CALL_PATH, post(call_handler).fallback(method_not_allowed))
        .fallback(not_found)
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// Checks every address and binds every listener of `options` — HTTP first (loopback only,
/// with a token), then the Unix socket — so that nothing is announced, and no socket file is
/// left, when any of them cannot be served.
///
/// # Errors
/// [`ServeError`]: not loopback, no token, an address taken, a socket in use.
pub async fn bind(options: &ServeOptions) -> Result<Listeners, ServeError> {
    let http = match options.http {
        None => None,
        Some(addr) if !addr.ip().is_loopback() => return Err(ServeError::NotLoopback(addr)),
        Some(_) if options.token.is_none() => return Err(ServeError::NoToken),
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(io(format!("binding {addr}")))?,
        ),
    };
    let unix = bind_socket(&options.socket)?;
    Ok(Listeners { unix, http })
}

/// Serves `gateway` on `listeners` (from [`bind`]) until `shutdown` completes (or
/// SIGTERM/SIGINT), then shuts down gracefully: no new connections, calls in flight
/// answered, `on_stop` run (e.g. a file watcher dropped), sessions flushed, every engine
/// disposed once, the socket removed. SIGHUP reloads the config and every plugin meanwhile.
///
/// # Errors
/// None today: the listeners are bound already.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use pincer_host::gateway::{bind, serve, ConnectionLimits, Gateway, GatewayParts, ServeOptions};
/// use pincer_host::harness::{Harness, HarnessOptions};
/// use pincer_host::model::replay::ReplayModel;
/// use pincer_host::model::NoTools;
/// use pincer_host::session::JsonlStore;
/// use pincer_host::{PincerHome, Runtime, RuntimeOptions};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let home = PincerHome::resolve(None);
/// let runtime = Arc::new(Runtime::open(RuntimeOptions::new(home.clone()))?);
/// let engine = Arc::new(runtime.resolve()?.engine);
/// let harness = Arc::new(Harness::new(
///     Arc::clone(&engine),
///     JsonlStore::new(home.root().join("agents")),
///     Arc::new(ReplayModel::new(&[])),
///     Arc::new(NoTools),
///     HarnessOptions::new(128_000),
/// ));
/// let gateway = Arc::new(Gateway::new(GatewayParts {
///     runtime: Arc::clone(&runtime),
///     source: Arc::new(pincer_host::FixedEngine(engine)),
///     harness,
///     has_model: false,
///     call_timeout: Duration::from_secs(60),
/// }));
/// let options = ServeOptions {
///     socket: home.state_dir().join("gateway.sock"),
///     http: None,
///     token: None,
///     body_limit: pincer_host::gateway::DEFAULT_BODY_LIMIT,
///     limits: ConnectionLimits::default(),
/// };
/// tokio::runtime::Runtime::new()?.block_on(async {
///     let listeners = bind(&options).await?;
///     serve(gateway, options, listeners, std::future::pending(), Box::new(|| {})).await
/// })?;
/// # Ok(()) }
/// ```
pub async fn serve(
    gateway: Arc<Gateway>,
    options: ServeOptions,
    listeners: Listeners,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_stop: Box<dyn FnOnce() + Send>,
) -> Result<(), ServeError> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let app = router(AppState {
        gateway: Arc::clone(&gateway),
        body_limit: options.body_limit,
        body_timeout: options.limits.body_timeout,
    });
    let shared = Shared {
        router: app,
        limits: options.limits,
        slots: Arc::new(tokio::sync::Semaphore::new(options.limits.max_connections)),
        token: None,
    };
    let unix_server = tokio::spawn(serve_connections(
        listeners.unix,
        shared.clone(),
        stop_rx.clone(),
    ));
    let http_server = match (listeners.http, options.token.clone()) {
        (Some(listener), Some(token)) => Some(tokio::spawn(serve_connections(
            listener,
            Shared {
                token: Some(Arc::from(token)),
                ..shared
            },
            stop_rx.clone(),
        ))),
        _ => None,
    };
    let runtime = Arc::clone(gateway.runtime());
    let hangups = tokio::spawn(async move {
        let Ok(mut hangup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            tracing::warn!("cannot listen for SIGHUP: reload with `pincer plugins reload`");
            return;
        };
        while hangup.recv().await.is_some() {
            let runtime = Arc::clone(&runtime);
            let outcome = tokio::task::spawn_blocking(move || reload_everything(&runtime)).await;
            match outcome {
                Ok(Ok(reloaded)) => tracing::info!(
                    plugins = reloaded.len(),
                    "SIGHUP: config and plugins reloaded"
                ),
                Ok(Err(err)) => tracing::warn!(error = %err, "SIGHUP: reload refused"),
                Err(err) => tracing::warn!(error = %err, "SIGHUP: reload failed"),
            }
        }
    });
    tokio::select! {
        () = shutdown => {}
        () = signal(tokio::signal::unix::SignalKind::terminate()) => {}
        () = signal(tokio::signal::unix::SignalKind::interrupt()) => {}
    }
    tracing::info!("gateway stopping: finishing calls in flight");
    let _ = stop_tx.send(true);
    // The socket goes first: no new client can connect while the calls in flight finish.
    let _ = crate::disk::remove_file(&options.socket);
    if let Err(err) = unix_server.await {
        tracing::warn!(%err, "the socket server ended abnormally");
    }
    if let Some(server) = http_server {
        if let Err(err) = server.await {
            tracing::warn!(%err, "the HTTP server ended abnormally");
        }
    }
    hangups.abort();
    on_stop();
    gateway.flush_sessions().await;
    let runtime = Arc::clone(gateway.runtime());
    let _ = tokio::task::spawn_blocking(move || runtime.shutdown()).await;
    Ok(())
}

async fn signal(kind: tokio::signal::unix::SignalKind) {
    match tokio::signal::unix::signal(kind) {
        Ok(mut stream) => {
            stream.recv().await;
        }
        Err(err) => {
            tracing::warn!(%err, "cannot listen for a signal");
            std::future::pending::<()>().await;
        }
    }
}
