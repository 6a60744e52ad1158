//! A small blocking client of the gateway over its Unix socket: one HTTP/1.1 `POST /v1/call`
//! per call on a fresh connection. What `pincer client`, `pincer plugins reload --socket` and
//! `pincer health --socket` use.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde_json::Value;

use super::protocol::{CallRequest, CALL_PATH};

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("cannot connect to the gateway at {path}: {source} (is `pincer serve --socket {path}` running?)")]
    Connect {
        /// The socket.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The exchange failed or the answer is not the gateway's.
    #[error("the gateway's answer could not be read: {0}")]
    Answer(String),
}

impl ClientError {
    /// A stable snake_case code for machines: `gateway_unreachable` (nothing answers at the
    /// socket) or `gateway_answer_unreadable` (something answered, not as the gateway does).
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::Connect { .. } => "gateway_unreachable",
            ClientError::Answer(_) => "gateway_answer_unreadable",
        }
    }
}

/// Posts `call` to the gateway at `socket`; the HTTP status and the JSON answer.
///
/// # Errors
/// [`ClientError`].
pub fn call(socket: &Path, call: &CallRequest) -> Result<(u16, Value), ClientError> {
    let body = serde_json::to_vec(call).map_err(|e| ClientError::Answer(e.to_string()))?;
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.display().to_string(),
        source,
    })?;
    let head = format!(
        "POST {CALL_PATH} HTTP/1.1\r\nHost: pincer\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let answer = |e: std::io::Error| ClientError::Answer(e.to_string());
    stream.write_all(head.as_bytes()).map_err(answer)?;
    stream.write_all(&body).map_err(answer)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(answer)?;
    parse_response(&raw)
}

/// The status and JSON body of an HTTP/1.1 response read to its end.
fn parse_response(raw: &[u8]) -> Result<(u16, Value), ClientError> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| ClientError::Answer("no HTTP header in the answer".into()))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Answer(format!("not an HTTP status line: {head:?}")))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body)?;
    }
    let value = serde_json::from_slice(&body)
        .map_err(|e| ClientError::Answer(format!("the body is not JSON ({e})")))?;
    Ok((status, value))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, ClientError> {
    let bad = || ClientError::Answer("a malformed chunked body".into());
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
            path: "/nowhere".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(connect.code(), "gateway_unreachable");
        let answer = parse_response(b"not http").unwrap_err();
        assert_eq!(answer.code(), "gateway_answer_unreadable");
    }
}
