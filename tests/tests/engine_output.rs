//! What an engine writes to stdout and stderr is bounded and kept apart from the host's own
//! output, through the real `pincer` binary with the `hostile` engine: in
//! process, its writes to descriptor 1 cannot corrupt `assemble --json` and reach the log
//! instead, sanitized; isolated, a worker flooding its stderr is forwarded within the caps,
//! each line naming the engine, the rest dropped and counted, and a worker that keeps flooding
//! is killed and its engine quarantined.

use std::path::Path;
use std::process::Output;

use pincer_tests::*;
use serde_json::{json, Value};

/// `pincer assemble --json` over the example conversation in a home where `hostile` is
/// selected with `entry` as its `plugins.entries.hostile`.
fn assemble_with(entry: Value, plugins: &Path) -> (TempDir, Output) {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({
            "plugins": {
                "slots": { "contextEngine": "hostile" },
                "entries": { "hostile": entry },
            }
        })
        .to_string(),
    )
    .unwrap();
    let out = run_pincer(
        home.path(),
        &[
            "assemble",
            "--json",
            "--conversation",
            example_conversation().to_str().unwrap(),
            "--plugins-dir",
            plugins.to_str().unwrap(),
        ],
    );
    (home, out)
}

fn hostile() -> (TempDir, std::path::PathBuf) {
    let plugins = TempDir::new().unwrap();
    let dir = copy_plugin(&staged_variant("hostile"), plugins.path(), "hostile");
    (plugins, dir)
}

#[test]
fn an_in_process_engine_printing_to_stdout_cannot_corrupt_json_output() {
    let (_plugins, dir) = hostile();
    let (_home, out) = assemble_with(json!({ "config": { "printStdout": true } }), &dir);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    // stdout is the host's one JSON document, nothing else.
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is not one JSON document ({err}): {}",
            stdout_text(&out)
        )
    });
    assert_eq!(report["answeredBy"], "hostile", "{report}");
    // What the engine printed is in the log, sanitized, as in-process engine output.
    let log = stderr_text(&out);
    assert!(
        log.contains(
            r#"in-process engine code stdout: }{"answeredBy":"hostile-on-stdout"} not json"#
        ),
        "{log}"
    );
    assert!(
        log.contains("in-process engine code stdout: hostile raw write to fd 1"),
        "{log}"
    );
    assert!(
        log.contains("in-process engine code stderr: hostile: a line on stderr"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "no escape sequence reaches the log"
    );
}

#[test]
fn an_isolated_engine_flooding_its_stderr_is_capped_named_and_sanitized() {
    let (_plugins, dir) = hostile();
    let (_home, out) = assemble_with(
        json!({ "isolation": "process", "config": { "floodStderrMs": 1_500 } }),
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    assert_eq!(stdout_json(&out)["answeredBy"], "hostile");
    let log = stderr_text(&out);
    // Megabytes written in 1.5 s; the host forwarded at most two seconds' worth of lines.
    assert!(
        out.stderr.len() < 64 << 10,
        "{} bytes of log",
        out.stderr.len()
    );
    let forwarded: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("engine worker \"hostile\" stderr: hostile flood"))
        .collect();
    assert!(!forwarded.is_empty(), "{log}");
    assert!(forwarded.len() <= 2 * 50 + 50, "{} lines", forwarded.len());
    for line in &forwarded {
        assert!(line.contains("engine_id=hostile"), "{line}");
    }
    assert!(
        !log.contains('\u{1b}') && !log.contains('\u{7}'),
        "sanitized"
    );
    let dropped = log
        .lines()
        .find(|l| l.contains("engine worker \"hostile\": dropped "))
        .unwrap_or_else(|| panic!("the drop is counted: {log}"));
    assert!(
        dropped.contains("beyond the caps (50 lines or 16 KiB per second, 200 lines or 64 KiB per call; docs/ISOLATION.md)"),
        "{dropped}"
    );
}

#[test]
fn an_isolated_engine_that_keeps_flooding_is_killed_and_quarantined() {
    let (_plugins, dir) = hostile();
    let started = std::time::Instant::now();
    let (_home, out) = assemble_with(
        json!({ "isolation": "process", "config": { "floodStderrMs": 30_000 } }),
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "killed after a few seconds, not after its 30 s of flooding"
    );
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "legacy", "{report}");
    let message = report["failure"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "engine worker killed: it kept writing beyond its output caps for 3 s in a row"
        ),
        "{message}"
    );
    assert!(
        out.stderr.len() < 128 << 10,
        "{} bytes of log",
        out.stderr.len()
    );
}
