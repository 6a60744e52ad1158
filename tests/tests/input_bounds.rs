//! Bounded inputs and lone surrogates, through the real binary and the real gateway: a session
//! line longer than `sessions.maxLineBytes` is skipped without being held (the child's peak
//! resident memory is measured from `/proc`) and reported by `sessions context`/`show` and
//! `doctor`; the gateway refuses an append over the bound; a `pincer.json` over 1 MiB is
//! refused unread; a line holding a lone UTF-16 surrogate escape (as OpenClaw's
//! `JSON.stringify` writes a cut emoji) is kept, read with U+FFFD, counted as one UTF-16 unit,
//! and its bytes are never changed; the gateway accepts such strings; progress is never drawn
//! on a pipe.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pincer_tests::{pincer_bin, run_pincer, stderr_text, stdout_json, stdout_text};
use serde_json::{json, Value};

const HEADER: &str =
    r#"{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}"#;

/// A message record line: `id` under `parent`, a user message with `content` (JSON text).
fn message_line(id: &str, parent: Option<&str>, content_json: &str) -> String {
    let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":{content_json},"timestamp":1}}}}"#
    )
}

/// A home whose `pincer.json` is `config`.
fn home_with_config(config: Value) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    home
}

/// Writes a session file: the header, `a1` ("before"), `a2` whose content is a string of
/// `long` bytes, and `a3` ("after", a child of `a1`); `a2`'s line ends without a newline when
/// it is the last (`tail` false). The length of `a2`'s line.
fn write_session_with_long_line(path: &Path, long: usize, tail: bool) -> u64 {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(file, "{HEADER}").unwrap();
    writeln!(file, "{}", message_line("a1", None, "\"before\"")).unwrap();
    let head = message_line("a2", Some("a1"), "\"@\"");
    let (start, end) = head.split_once('@').unwrap();
    file.write_all(start.as_bytes()).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut left = long;
    while left > 0 {
        let n = left.min(chunk.len());
        file.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    file.write_all(end.as_bytes()).unwrap();
    if tail {
        writeln!(file).unwrap();
        writeln!(file, "{}", message_line("a3", Some("a1"), "\"after\"")).unwrap();
    }
    file.flush().unwrap();
    (head.len() - 1 + long) as u64
}

/// What a child printed and the most memory it held.
struct Measured {
    code: i32,
    stdout: String,
    stderr: String,
    /// Peak resident set size, bytes: the last `VmHWM` of `/proc/<pid>/status` read before it
    /// exited (polled every 2 ms; the high-water mark only grows). `wait4`'s `ru_maxrss` would
    /// count the test process's own memory, which a spawned child shares until its `exec`.
    peak_rss: u64,
    elapsed: Duration,
}

/// Runs `pincer --home home args…`, its output into files, watching its peak resident memory.
fn run_measured(home: &Path, args: &[&str]) -> Measured {
    let out = home.join("measured.out");
    let err = home.join("measured.err");
    let start = Instant::now();
    let mut child = Command::new(pincer_bin())
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("PINCER_HOME")
        .env_remove("PINCER_LOG")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_rss = 0;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            if let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak_rss = peak_rss.max(kib * 1024);
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Measured {
        code: status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
        peak_rss,
        elapsed: start.elapsed(),
    }
}

fn texts(context: &Value) -> Vec<String> {
    context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other[0]["text"].as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

#[test]
fn a_session_line_over_max_line_bytes_is_skipped_unheld_and_reported() {
    let home = home_with_config(json!({"sessions": {"maxLineBytes": 4096}}));
    let session = home.path().join("long.jsonl");
    // A 256 MiB line: reading it whole would hold at least that much.
    let long = 256 << 20;
    let line = write_session_with_long_line(&session, long, true);
    let before = std::fs::metadata(&session).unwrap().len();
    let session_arg = session.to_str().unwrap();

    let run = run_measured(home.path(), &["sessions", "context", session_arg]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.peak_rss < 64 << 20,
        "the long line is never held: peak RSS {} MiB for a {} MiB line",
        run.peak_rss >> 20,
        long >> 20
    );
    let context: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(texts(&context), ["before", "after"], "{context}");
    assert!(
        run.stderr.contains(&format!(
            "line 3 is 256.0 MiB ({line} bytes), longer than sessions.maxLineBytes (4.0 KiB): skipped"
        )),
        "the skip is said where the user looks: {}",
        run.stderr
    );
    eprintln!(
        "sessions context over a 256 MiB line: {:?}, peak RSS {} KiB",
        run.elapsed,
        run.peak_rss >> 10
    );

    let shown = run_pincer(home.path(), &["sessions", "show", session_arg]);
    assert!(shown.status.success(), "{}", stderr_text(&shown));
    let shown = stdout_json(&shown);
    assert_eq!(
        shown["longLinesSkipped"],
        json!([{"line": 3, "bytes": line, "maxLineBytes": 4096}]),
        "{shown}"
    );
    assert_eq!(shown["contextMessages"], 2);
    assert_eq!(
        std::fs::metadata(&session).unwrap().len(),
        before,
        "the file is not changed"
    );
}

#[test]
fn doctor_names_the_session_files_holding_lines_over_the_bound() {
    let home = home_with_config(json!({"sessions": {"maxLineBytes": 4096}}));
    let sessions = home.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let long = sessions.join("long.jsonl");
    let line = write_session_with_long_line(&long, 10_000, true);
    write_session_with_long_line(&sessions.join("fine.jsonl"), 100, true);
    let plugins = tempfile::tempdir().unwrap();
    let plugins_arg = plugins.path().to_str().unwrap();

    let out = run_pincer(
        home.path(),
        &["doctor", "--json", "--plugins-dir", plugins_arg],
    );
    let report = stdout_json(&out);
    assert_eq!(
        report["sessionLongLines"],
        json!([{"file": long, "lines": [{"line": 3, "bytes": line, "maxLineBytes": 4096}]}]),
        "{report}"
    );
    let text = run_pincer(home.path(), &["doctor", "--plugins-dir", plugins_arg]);
    let text = stdout_text(&text);
    assert!(
        text.contains(&format!(
            "warning: {}: line 3 is 9.9 KiB ({line} bytes), longer than sessions.maxLineBytes (4.0 KiB)",
            long.display()
        )),
        "{text}"
    );
}

#[test]
fn a_long_last_line_without_newline_is_ended_before_the_next_append() {
    // The gateway continues a session whose last line is over the bound and torn (no newline):
    // its append starts a line of its own, and the long line's bytes stay as they were.
    let home = home_with_config(json!({"sessions": {"maxLineBytes": 4096}}));
    let sessions = home.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let file = sessions.join("s1.jsonl");
    write_session_with_long_line(&file, 8000, false);
    std::fs::write(
        sessions.join("sessions.json"),
        json!({"k1": {"sessionId": "s1"}}).to_string(),
    )
    .unwrap();
    let before = std::fs::read(&file).unwrap();
    let gw = Gateway::start(home.path());
    let (status, answer) = gw.call(json!({"method": "ingest", "session": "k1",
        "params": {"message": {"role": "user", "content": "next"}}}));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = gw.call(json!({"method": "assemble", "session": "k1",
        "params": {"full": true}}));
    assert_eq!(status, 200, "{answer}");
    drop(gw);
    let after = std::fs::read(&file).unwrap();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "nothing written is changed"
    );
    assert_eq!(
        after[before.len()],
        b'\n',
        "the torn long line is ended first"
    );
    let tail: Value = serde_json::from_slice(after[before.len() + 1..].trim_ascii_end()).unwrap();
    assert_eq!(tail["message"]["content"], "next");
}

#[test]
fn the_gateway_refuses_an_append_whose_line_would_exceed_max_line_bytes() {
    let home = home_with_config(json!({"sessions": {"maxLineBytes": 4096}}));
    let gw = Gateway::start(home.path());
    let ok = |content: &str| {
        json!({"method": "ingest", "session": "k",
            "params": {"message": {"role": "user", "content": content}}})
    };
    let (status, answer) = gw.call(ok("small"));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = gw.call(ok(&"y".repeat(5000)));
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["code"], "session_line_too_long", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("longer than sessions.maxLineBytes (4096); nothing was written"),
        "{message}"
    );
    let (status, answer) = gw.call(ok("still served"));
    assert_eq!(status, 200, "{answer}");
    drop(gw);
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("agents/main/sessions/sessions.json")).unwrap(),
    )
    .unwrap();
    let id = index["k"]["sessionId"].as_str().unwrap();
    let text =
        std::fs::read_to_string(home.path().join(format!("agents/main/sessions/{id}.jsonl")))
            .unwrap();
    assert!(
        text.lines().all(|l| l.len() <= 4096),
        "no line over the bound"
    );
    let contents: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["type"] == "message")
        .map(|r| r["message"]["content"].clone())
        .collect();
    assert_eq!(contents, ["small", "still served"]);
}

#[test]
fn a_reload_gives_the_gateway_the_new_max_line_bytes() {
    let home = home_with_config(json!({"sessions": {"maxLineBytes": 4096}}));
    let gw = Gateway::start(home.path());
    let long = json!({"method": "ingest", "session": "k",
        "params": {"message": {"role": "user", "content": "y".repeat(5000)}}});
    assert_eq!(gw.call(long.clone()).0, 413);
    std::fs::write(
        home.path().join("pincer.json"),
        json!({"sessions": {"maxLineBytes": 100_000}}).to_string(),
    )
    .unwrap();
    let (status, answer) = gw.call(json!({"method": "reload"}));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = gw.call(long);
    assert_eq!(status, 200, "the reloaded bound: {answer}");
}

#[test]
fn a_max_line_bytes_below_the_minimum_is_refused_with_the_rule() {
    let home = home_with_config(json!({"sessions": {"maxLineBytes": 10}}));
    let out = run_pincer(home.path(), &["plugins", "list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_text(&out);
    assert!(
        err.contains("`sessions.maxLineBytes` must be at least 1024 bytes (found 10)"),
        "{err}"
    );
}

#[test]
fn a_pincer_json_over_one_mib_is_refused_unread_with_its_size_and_the_limit() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("pincer.json");
    // Valid JSON5 (a long comment), one byte over the bound.
    let mut text = String::from("{}\n//");
    text.push_str(&"c".repeat((1 << 20) + 1 - text.len()));
    std::fs::write(&config, &text).unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let plugins_arg = plugins.path().to_str().unwrap();
    for args in [
        &["doctor", "--plugins-dir", plugins_arg][..],
        &["plugins", "list"][..],
        &["plugins", "select", "legacy"][..],
    ] {
        let out = run_pincer(home.path(), args);
        assert!(!out.status.success(), "{args:?}: {}", stderr_text(&out));
        let err = stderr_text(&out);
        assert!(
            err.contains(&format!(
                "{} is 1048577 bytes, larger than the 1048576 bytes (1 MiB) a pincer.json may be",
                config.display()
            )),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        text,
        "not rewritten"
    );
    // At the bound it is read.
    text.truncate(1 << 20);
    std::fs::write(&config, &text).unwrap();
    let out = run_pincer(home.path(), &["plugins", "list"]);
    assert!(out.status.success(), "{}", stderr_text(&out));
}

/// A tool result cut in the middle of 😀, as OpenClaw's `JSON.stringify` writes it.
const LONE: &str = r#""cut \ud83d""#;

#[test]
fn a_line_with_a_lone_surrogate_is_kept_read_as_u_fffd_and_never_changed() {
    let home = home_with_config(json!({}));
    let sessions = home.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let file = sessions.join("s1.jsonl");
    let text = format!(
        "{HEADER}\n{}\n{}\n",
        message_line("a1", None, "\"before\""),
        message_line("a2", Some("a1"), LONE)
    );
    std::fs::write(&file, &text).unwrap();
    std::fs::write(
        sessions.join("sessions.json"),
        json!({"k1": {"sessionId": "s1"}}).to_string(),
    )
    .unwrap();
    let file_arg = file.to_str().unwrap();

    let out = run_pincer(home.path(), &["sessions", "context", file_arg]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert_eq!(texts(&stdout_json(&out)), ["before", "cut \u{fffd}"]);
    let shown = stdout_json(&run_pincer(home.path(), &["sessions", "show", file_arg]));
    assert_eq!(shown["skippedLines"], 0, "{shown}");
    assert_eq!(shown["leafId"], "a2");

    // Counted as OpenClaw counts it: "cut " and one UTF-16 unit are 5 chars, 2 tokens (the
    // escape's 6 characters would make 3, U+FFFD's 3 UTF-8 bytes 2 as well; so "abc" + the
    // surrogate, 4 chars, 1 token, tells them apart).
    let transcript = home.path().join("t.json");
    std::fs::write(&transcript, r#"[{"role":"user","content":"abc\udc00"}]"#).unwrap();
    let estimate = stdout_json(&run_pincer(
        home.path(),
        &["estimate", transcript.to_str().unwrap()],
    ));
    assert_eq!(estimate["perMessage"], json!([1]), "{estimate}");

    // The gateway continues the session: the line's bytes stay, the engine sees U+FFFD.
    let gw = Gateway::start(home.path());
    let (status, answer) = gw.call(json!({"method": "ingest", "session": "k1",
        "params": {"message": {"role": "user", "content": "next"}}}));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = gw.call(json!({"method": "assemble", "session": "k1",
        "params": {"full": true}}));
    assert_eq!(status, 200, "{answer}");
    let seen: Vec<Value> = answer["result"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["message"]["content"].clone())
        .collect();
    assert_eq!(
        seen,
        [json!("before"), json!("cut \u{fffd}"), json!("next")],
        "{answer}"
    );
    drop(gw);
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(
        after.starts_with(&text),
        "the file's bytes are kept: {after}"
    );
}

#[test]
fn the_gateway_accepts_a_lone_surrogate_in_a_request() {
    let home = home_with_config(json!({}));
    let gw = Gateway::start(home.path());
    let body = format!(
        r#"{{"method":"ingest","session":"k","params":{{"message":{{"role":"user","content":{LONE}}}}}}}"#
    );
    let (status, answer) = gw.call_raw(body.as_bytes());
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = gw.call(json!({"method": "assemble", "session": "k",
        "params": {"full": true}}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["items"][0]["message"]["content"], "cut \u{fffd}",
        "{answer}"
    );
}

#[test]
fn no_progress_is_drawn_on_a_pipe() {
    // Work that takes over a second (a 512 MiB line to scan) while stdout and stderr are
    // pipes: only the output and the warning, no spinner or terminal control.
    let home = home_with_config(json!({"sessions": {"maxLineBytes": 4096}}));
    let session = home.path().join("long.jsonl");
    write_session_with_long_line(&session, 512 << 20, true);
    let start = Instant::now();
    let out = run_pincer(
        home.path(),
        &["sessions", "context", session.to_str().unwrap()],
    );
    let took = start.elapsed();
    assert!(out.status.success(), "{}", stderr_text(&out));
    let err = stderr_text(&out);
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    assert!(!err.contains("reading session"), "{err:?} after {took:?}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("pincer: ")).count(),
        1,
        "{err}"
    );
    let _ = stdout_json(&out);
}

/// A running `pincer serve` on a socket in the home, with no plugins (the built-in engine).
struct Gateway {
    child: Child,
    socket: PathBuf,
    _plugins: tempfile::TempDir,
}

impl Gateway {
    fn start(home: &Path) -> Gateway {
        let plugins = tempfile::tempdir().unwrap();
        let socket = home.join("gw.sock");
        let child = Command::new(pincer_bin())
            .arg("--home")
            .arg(home)
            .args(["serve", "--socket"])
            .arg(&socket)
            .arg("--plugins-dir")
            .arg(plugins.path())
            .env_remove("PINCER_HOME")
            .env_remove("PINCER_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut gateway = Gateway {
            child,
            socket,
            _plugins: plugins,
        };
        let start = Instant::now();
        while UnixStream::connect(&gateway.socket).is_err() {
            assert!(
                gateway.child.try_wait().unwrap().is_none(),
                "pincer serve exited"
            );
            assert!(start.elapsed() < Duration::from_secs(60), "no gateway");
            std::thread::sleep(Duration::from_millis(20));
        }
        gateway
    }

    fn call(&self, body: Value) -> (u16, Value) {
        self.call_raw(body.to_string().as_bytes())
    }

    /// Posts `body` as it is and reads the answer: status and JSON body.
    fn call_raw(&self, body: &[u8]) -> (u16, Value) {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        let head = format!(
            "POST /v1/call HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let text = String::from_utf8_lossy(&raw);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("an HTTP answer: {text:?}"));
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // SIGTERM: the gateway saves its sessions and exits.
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
