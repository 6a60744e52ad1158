//! The gateway's connections, served as a public server would serve them though they come
//! from the socket or loopback: each connection has a deadline for the headers of a request
//! (from its first byte), one for the body (from the end of the headers, in the router), and
//! an idle deadline while no request is on it (before the first one and between kept-alive
//! ones); past a deadline the connection is closed and its file descriptor freed. At most
//! `maxConnections` are served at once, over the socket and HTTP together: one more is
//! answered `503 too_many_connections` (a JSON body) and closed. On HTTP, the bearer token is
//! checked before the request reaches the router, so no path — known or not — answers
//! anything but `401` without it.
//!
//! The limits are `gateway.*` in `pincer.json` ([`ConnectionLimits::from_config`]); graceful
//! shutdown stops accepting, lets every call in flight finish, then closes each connection.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt as _;

use super::protocol::GatewayError;
use crate::config::GatewayConfig;

/// How long the gateway waits for a client, and how many it serves at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From a request's first byte to the end of its headers.
    pub header_timeout: Duration,
    /// From the end of the headers to the end of the body.
    pub body_timeout: Duration,
    /// A connection with no request on it (before the first, between kept-alive ones).
    pub idle_timeout: Duration,
    /// Connections served at once, socket and HTTP together.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The limits `gateway.*` of `pincer.json` set.
    pub fn from_config(config: &GatewayConfig) -> Self {
        let seconds = |s: f64| Duration::from_secs_f64(s.clamp(0.001, 86_400.0));
        ConnectionLimits {
            header_timeout: seconds(config.header_timeout_seconds),
            body_timeout: seconds(config.body_timeout_seconds),
            idle_timeout: seconds(config.idle_timeout_seconds),
            max_connections: usize::try_from(config.max_connections)
                .unwrap_or(usize::MAX)
                .clamp(1, Semaphore::MAX_PERMITS),
        }
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self::from_config(&GatewayConfig::default())
    }
}

/// A listener the gateway accepts connections from.
pub trait Accept: Send + Sync + 'static {
    /// One accepted connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Polls for the next connection.
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<Self::Stream>>;
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<Self::Stream>> {
        self.poll_accept(cx).map_ok(|(stream, _)| stream)
    }
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<Self::Stream>> {
        self.poll_accept(cx).map_ok(|(stream, _)| {
            let _ = stream.set_nodelay(true);
            stream
        })
    }
}

/// What a listener's connections share.
#[derive(Clone)]
pub(super) struct Shared {
    pub router: Router,
    pub limits: ConnectionLimits,
    /// One permit per connection served (shared by every listener).
    pub slots: Arc<Semaphore>,
    /// `Some` on HTTP: the token every request must carry.
    pub token: Option<Arc<str>>,
}

/// Accepts from `listener` until `stop` turns true, then waits for every connection it
/// accepted to finish (calls in flight answered, idle connections closed at once).
pub(super) async fn serve_connections<L: Accept>(
    listener: L,
    shared: Shared,
    mut stop: watch::Receiver<bool>,
) {
    // Each connection holds a sender; `recv` answers `None` once every one is gone.
    let (alive, mut all_done) = mpsc::channel::<()>(1);
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            accepted = std::future::poll_fn(|cx| listener.poll_next(cx)) => accepted,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(err) => {
                // Out of file descriptors, or a connection reset before it was accepted: the
                // listener stays; a short pause lets connections close.
                tracing::warn!(%err, "the gateway could not accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&shared.slots).try_acquire_owned() else {
            tokio::spawn(refuse_busy(stream, shared.limits.max_connections));
            continue;
        };
        let shared = shared.clone();
        let stop = stop.clone();
        let alive = alive.clone();
        tokio::spawn(async move {
            connection(stream, shared, stop).await;
            drop(permit);
            drop(alive);
        });
    }
    drop(listener);
    drop(alive);
    let _ = all_done.recv().await;
}

/// Answers one connection over the cap `503 too_many_connections` and closes it.
async fn refuse_busy<S: AsyncWrite + Unpin>(mut stream: S, max: usize) {
    let err = GatewayError::new(
        503,
        "too_many_connections",
        format!(
            "the gateway already serves {max} connections (gateway.maxConnections): retry \
             later, or reuse a kept-alive connection"
        ),
    );
    let body = serde_json::to_vec(&err.body()).expect("an error serializes");
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    })
    .await;
}

/// Where a connection is: waiting for a request, reading one's headers, or serving one.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No request on it since this instant (accepted, or the last byte written).
    Idle(Instant),
    /// A request's first byte arrived at this instant; its headers are not complete.
    Head(Instant),
    /// A request is in the router (its body deadline is the router's).
    Busy,
}

struct Watch {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Watch {
    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, phase: Phase) {
        *self.phase() = phase;
        self.changed.notify_one();
    }

    /// When the connection is to be closed if nothing changes.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match *self.phase() {
            Phase::Idle(since) => Some(since + limits.idle_timeout),
            Phase::Head(since) => Some(since + limits.header_timeout),
            Phase::Busy => None,
        }
    }
}

/// The connection's stream, telling its [`Watch`] when bytes come and go.
struct Watched<S> {
    inner: S,
    watch: Arc<Watch>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let mut phase = self.watch.phase();
            if let Phase::Idle(_) = *phase {
                *phase = Phase::Head(Instant::now());
                drop(phase);
                self.watch.changed.notify_one();
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                // A slow reader of a long answer is not idle while it reads.
                let mut phase = self.watch.phase();
                if let Phase::Idle(_) = *phase {
                    *phase = Phase::Idle(Instant::now());
                }
            }
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves one connection until the client closes it, a deadline passes, or the gateway stops.
async fn connection<S>(stream: S, shared: Shared, mut stop: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let watch = Arc::new(Watch {
        phase: Mutex::new(Phase::Idle(Instant::now())),
        changed: Notify::new(),
    });
    let io = TokioIo::new(Watched {
        inner: stream,
        watch: Arc::clone(&watch),
    });
    let service = {
        let watch = Arc::clone(&watch);
        let Shared { router, token, .. } = shared.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            watch.set(Phase::Busy);
            let refused = token
                .as_deref()
                .filter(|token| !authorized(request.headers(), token))
                .map(|_| unauthorized());
            let call = router.clone().oneshot(request.map(Body::new));
            let watch = Arc::clone(&watch);
            async move {
                let response = match refused {
                    Some(response) => response,
                    None => call
                        .await
                        .unwrap_or_else(|never: Infallible| match never {}),
                };
                watch.set(Phase::Idle(Instant::now()));
                Ok::<_, Infallible>(response)
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let deadline = watch.deadline(&shared.limits);
        tokio::select! {
            _ = conn.as_mut() => return,
            () = watch.changed.notified() => {}
            () = sleep_until(deadline) => {
                if watch.deadline(&shared.limits).is_some_and(|d| d <= Instant::now()) {
                    // Past its deadline with no request in the router: dropping the
                    // connection closes it.
                    return;
                }
            }
            _ = stop.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Whether `headers` carry `Authorization: Bearer <token>`: the scheme in any case (RFC 9110
/// §11.1), the token compared in constant time.
pub(super) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some((scheme, given)) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
    else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return false;
    }
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn unauthorized() -> Response {
    super::server::error_response(&GatewayError::new(
        StatusCode::UNAUTHORIZED.as_u16(),
        "unauthorized",
        "missing or wrong bearer token: send `Authorization: Bearer <token>` with the token in \
         $PINCER_HOME/state/gateway.token",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        for value in ["Bearer tok", "bearer tok", "BEARER tok", "bEaReR  tok "] {
            assert!(authorized(&headers(value), "tok"), "{value}");
        }
        for value in ["Basic tok", "Bearer", "Bearertok", "Bearer tok2", "tok"] {
            assert!(!authorized(&headers(value), "tok"), "{value}");
        }
    }
}
