//! The gateway, `pincer serve`: a long-running process that holds the engines and the sessions
//! and serves every lifecycle operation per session to agents written in any language, over a
//! Unix domain socket and optionally loopback HTTP with a bearer token.
//!
//! - `protocol` — the wire format: methods, the call, the answer envelope (`engineId`,
//!   `generation`), errors with stable codes, parameter reading.
//! - `messages` — every message a client hands in, checked against OpenClaw's message model
//!   before anything is stored (`invalid_message`, naming the message and the field).
//! - `service` — [`Gateway`]: sessions held per key, each behind its own
//!   [`SessionWorker`](crate::SessionWorker) (calls of one session in
//!   order, sessions in parallel), and the methods.
//! - `server` — the transports (one axum router over the socket and HTTP), binding and
//!   checking every address before anything is announced, the token, the body limit and
//!   deadline, graceful shutdown.
//! - `connections` — each connection's header and idle deadlines, the connection cap, the
//!   token checked before routing.
//! - [`client`] — a blocking client over the socket (the CLI's `client`, `health --socket`).
//!
//! The protocol is documented in `docs/GATEWAY.md`, with its JSON Schema
//! `docs/gateway.schema.json`.

pub mod client;
pub(crate) mod connections;
pub(crate) mod messages;
pub(crate) mod protocol;
pub(crate) mod server;
pub(crate) mod service;

pub use connections::ConnectionLimits;
pub use protocol::{CallAnswer, CallRequest, GatewayError, GatewayMethod};
pub use server::{bind, serve, Listeners, ServeOptions};
pub use server::{gateway_token, ServeError, DEFAULT_BODY_LIMIT};
pub use service::{Gateway, GatewayParts};
