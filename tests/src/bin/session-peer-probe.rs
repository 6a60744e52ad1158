//! pincer's side of `cargo xtask bench --peer openclaw`: generates the sessions and measures one
//! open + context run per process, so that each run starts as cold as OpenClaw's does.
//!
//! Usage:
//! - `session-peer-probe generate ENTRIES FILE`: writes a session of ENTRIES entries with
//!   [`pincer_tests::generate_session`] from the shared τ-bench transcripts and prints
//!   `{"entries":…,"bytes":…,"context_messages":…}`. Exit code 3 when the transcripts are absent.
//! - `session-peer-probe measure FILE`: `SessionTree::read` + `build_session_context(&tree, None)`
//!   timed, then the token estimate over the context's messages, and prints one JSON object:
//!   `read_ms`, `context_ms`, `total_ms`, `context_messages`, `tokens`, `estimate_ns_per_message`,
//!   `estimate_passes`, `max_rss_kib` (VmHWM) and `rss_kib` (VmRSS with the tree and the context
//!   still held).
//!
//! Errors go to stderr with exit code 2 (usage) or 1 (a failed read).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pincer_host::session::{build_session_context, SessionTree};
use pincer_plugin_api::tokens::estimate_tokens;
use serde_json::json;

/// The estimate is repeated over the context messages until at least this much time has passed,
/// after one warm-up pass (the same rule as the OpenClaw script).
const ESTIMATE_MIN_TIME: Duration = Duration::from_millis(100);
/// …and at least this many passes.
const ESTIMATE_MIN_PASSES: u32 = 3;

const USAGE: &str =
    "usage: session-peer-probe generate ENTRIES FILE | session-peer-probe measure FILE";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["generate", entries, file] => {
            let Ok(entries) = entries.parse::<usize>() else {
                fail(
                    2,
                    &format!("ENTRIES must be a whole number, not {entries:?}\n{USAGE}"),
                );
            };
            generate(entries, Path::new(file));
        }
        ["measure", file] => measure(Path::new(file)),
        _ => fail(2, USAGE),
    }
}

fn fail(code: i32, message: &str) -> ! {
    eprintln!("session-peer-probe: {message}");
    std::process::exit(code)
}

fn generate(entries: usize, path: &Path) {
    let Some(tasks) = pincer_tests::tau_bench_transcripts() else {
        fail(
            3,
            "the shared τ-bench transcripts are missing (see the notice above); they are needed to generate the sessions",
        );
    };
    let context_messages = pincer_tests::generate_session(&tasks, entries, path);
    let bytes = match std::fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(err) => fail(1, &format!("cannot stat {}: {err}", path.display())),
    };
    println!(
        "{}",
        json!({"entries": entries, "bytes": bytes, "context_messages": context_messages})
    );
}

fn measure(path: &Path) {
    let path: PathBuf = path.to_owned();
    let start = Instant::now();
    let tree = match SessionTree::read(&path) {
        Ok(tree) => tree,
        Err(err) => fail(1, &format!("cannot read the session: {err}")),
    };
    let read = start.elapsed();
    let context = build_session_context(&tree, None);
    let total = start.elapsed();
    let messages = &context.messages;

    let tokens = estimate_tokens(black_box(messages));
    let mut passes = 0u32;
    let estimate_start = Instant::now();
    while passes < ESTIMATE_MIN_PASSES || estimate_start.elapsed() < ESTIMATE_MIN_TIME {
        black_box(estimate_tokens(black_box(messages)));
        passes += 1;
    }
    let estimate = estimate_start.elapsed();
    let estimate_ns_per_message = if messages.is_empty() {
        0.0
    } else {
        estimate.as_nanos() as f64 / (f64::from(passes) * messages.len() as f64)
    };

    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let report = json!({
        "read_ms": millis(read),
        "context_ms": millis(total - read),
        "total_ms": millis(total),
        "context_messages": messages.len(),
        "tokens": tokens,
        "estimate_ns_per_message": estimate_ns_per_message,
        "estimate_passes": passes,
        "max_rss_kib": status_kib(&status, "VmHWM:"),
        "rss_kib": status_kib(&status, "VmRSS:"),
    });
    println!("{report}");
    drop(black_box(context));
    drop(black_box(tree));
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// A `kB` field of `/proc/self/status`, or `None` where there is no such file (not Linux).
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}
