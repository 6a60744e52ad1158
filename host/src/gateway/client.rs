//! A small blocking client of the gateway over its Unix socket: one HTTP/1.1 `POST /v1/call`
//! per call on a fresh connection. What `pincer client`, `pincer plugins reload --socket` and
//! `pincer health --socket` use.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::protocol::{CallRequest, CALL_PATH};

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("cannot connect to the gateway at {path}: {source} (is `pincer serve --socket {path}` running?)", path = path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The call could not be encoded as JSON.
    #[error("the gateway's answer could not be read: {0}")]
    Encode(#[source] serde_json::Error),
    /// Writing the request or reading the answer failed.
    #[error("the gateway's answer could not be read: {0}")]
    Exchange(#[source] std::io::Error),
    /// The answer has no HTTP header.
    #[error("the gateway's answer could not be read: no HTTP header in the answer")]
    NoHeader,
    /// The answer's first line is not an HTTP status line.
    #[error("the gateway's answer could not be read: not an HTTP status line: {0:?}")]
    StatusLine(String),
    /// The answer's chunked body is malformed.
    #[error("the gateway's answer could not be read: a malformed chunked body")]
    Chunking,
    /// The answer's body is not JSON.
    #[error("the gateway's answer could not be read: the body is not JSON ({0})")]
    NotJson(#[source] serde_json::Error),
}

impl ClientError {
    /// A stable snake_case code for machines: `gateway_unreachable` (nothing answers at the
    /// socket) or `gateway_answer_unreadable` (the exchange failed, or something answered, not
    /// as the gateway does).
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::Connect { .. } => "gateway_unreachable",
            ClientError::Encode(_)
            | ClientError::Exchange(_)
            | ClientError::NoHeader
            | ClientError::StatusLine(_)
            | ClientError::Chunking
            | ClientError::NotJson(_) => "gateway_answer_unreadable",
        }
    }
}

/// Posts `call` to the gateway at `socket`; the HTTP status and the JSON answer.
///
/// # Errors
/// [`ClientError`].
pub fn call(socket: &Path, call: &CallRequest) -> Result<(u16, Value), ClientError> {
    let body = serde_json::to_vec(call).map_err(ClientError::Encode)?;
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.to_owned(),
        source,
    })?;
    let head = format!(
        "POST {CALL_PATH} HTTP/1.1\r\nHost: pincer\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .map_err(ClientError::Exchange)?;
    stream.write_all(&body).map_err(ClientError::Exchange)?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(ClientError::Exchange)?;
    parse_response(&raw)
}

/// The status and JSON body of an HTTP/1.1 response read to its end.
fn parse_response(raw: &[u8]) -> Result<(u16, Value), ClientError> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(ClientError::NoHeader)?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| ClientError::StatusLine(head.clone().into_owned()))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body)?;
    }
    let value = serde_json::from_slice(&body).map_err(ClientError::NotJson)?;
    Ok((status, value))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, ClientError> {
    let bad = || ClientError::Chunking;
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").ok_or_else(bad)?;
        let size_text = std::str::from_utf8(&data[..line_end]).map_err(|_| bad())?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad())?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(data.get(..size).ok_or_else(bad)?);
        data = data.get(size + 2..).ok_or_else(bad)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_error_has_a_stable_code() {
        let connect = ClientError::Connect {
            path: PathBuf::from("/nowhere"),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(connect.code(), "gateway_unreachable");
        let answer = parse_response(b"not http").unwrap_err();
        assert_eq!(answer.code(), "gateway_answer_unreadable");
        assert_eq!(
            answer.to_string(),
            "the gateway's answer could not be read: no HTTP header in the answer"
        );
        let chunked =
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .unwrap_err();
        assert_eq!(
            chunked.to_string(),
            "the gateway's answer could not be read: a malformed chunked body"
        );
        let status = parse_response(b"HTTP/1.1 OK\r\n\r\n{}").unwrap_err();
        assert_eq!(
            status.to_string(),
            "the gateway's answer could not be read: not an HTTP status line: \"HTTP/1.1 OK\""
        );
    }
}
