//! The real `pincer` binary: `doctor` (text and JSON), `assemble`, `check-engine`, and what it
//! does with bad input. A panic in any engine method comes back as an error and the process
//! finishes normally with a meaningful exit status (an uncaught panic across the boundary
//! would end it with status 1 from abi_stable, or a signal).

use std::os::unix::process::ExitStatusExt;

use pincer_tests::*;
use serde_json::{json, Value};

fn plugins_arg() -> String {
    staged_plugins_dir().display().to_string()
}

#[test]
fn doctor_json_lists_the_staged_plugins_as_loaded() {
    let home = TempDir::new().unwrap();
    let out = run_pincer(
        home.path(),
        &["doctor", "--json", "--plugins-dir", &plugins_arg()],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = stdout_json(&out);
    let plugins = report["plugins"].as_array().unwrap();
    let sw = plugins
        .iter()
        .find(|p| p["id"] == "sliding-window")
        .expect("listed");
    assert_eq!(sw["status"], "loaded");
    assert_eq!(sw["error"], Value::Null);
    assert_eq!(report["contextEngine"]["selected"], "legacy");
    assert_eq!(report["contextEngine"]["resolved"], "legacy");
    let engines: Vec<&str> = report["engines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        engines,
        ["faulty", "legacy", "lossless", "sliding-window"],
        "sorted"
    );
}

#[test]
fn doctor_reports_rejected_plugins_with_reasons_and_survives() {
    let home = TempDir::new().unwrap();
    let out = run_pincer(
        home.path(),
        &[
            "doctor",
            "--json",
            "--plugins-dir",
            &staged_variant("faulty-abort")
                .parent()
                .unwrap()
                .display()
                .to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "legacy still resolves");
    let report = stdout_json(&out);
    let by_id = |id: &str| find_by_id(&report["plugins"], id);
    assert_eq!(by_id("faulty")["status"], "rejected");
    assert_eq!(by_id("faulty")["error"]["code"], "panic_abort");
    assert_eq!(by_id("future-api")["error"]["code"], "api_major_mismatch");
}

#[test]
fn doctor_exits_non_zero_when_the_selected_engine_does_not_resolve() {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        r#"{ plugins: { slots: { contextEngine: "nope" } } }"#,
    )
    .unwrap();
    let out = run_pincer(home.path(), &["doctor", "--plugins-dir", &plugins_arg()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("selected nope -> legacy"), "{text}");
    assert!(text.contains("is not registered"), "{text}");
}

#[test]
fn malformed_config_is_reported_with_line_and_column() {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        "{\n  plugins: {\n    slots: [,\n}",
    )
    .unwrap();
    let out = run_pincer(home.path(), &["doctor"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("pincer: ") && err.contains("pincer.json:3:"),
        "{err}"
    );
}

#[test]
fn doctor_warns_about_unknown_config_keys() {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        r#"{ plugins: { slot: { contextEngine: "sliding-window" } } }"#,
    )
    .unwrap();
    let out = run_pincer(home.path(), &["doctor", "--json"]);
    let report = stdout_json(&out);
    assert_eq!(report["config"]["unknownKeys"], json!(["plugins.slot"]));
}

#[test]
fn assemble_with_sliding_window_keeps_a_window_that_starts_on_a_user_turn() {
    let home = TempDir::new().unwrap();
    let conversation = example_conversation().display().to_string();
    let out = run_pincer(
        home.path(),
        &[
            "assemble",
            "--json",
            "--plugins-dir",
            &plugins_arg(),
            "--engine",
            "sliding-window",
            "--config",
            r#"{"tokenBudget":400}"#,
            "--conversation",
            &conversation,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = stdout_json(&out);
    assert_eq!(result["answeredBy"], "sliding-window");
    let kept = result["keptMessages"].as_array().unwrap();
    assert!(kept.len() < 21, "a 400-token budget drops something");
    assert_eq!(kept[0]["message"]["role"], "system");
    assert_eq!(
        kept[1]["message"]["role"], "user",
        "the window starts on a user turn"
    );
    let tokens = result["estimatedTokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens <= 400, "{tokens}");
    // Each kept message is the input's, in OpenClaw's JSON, unchanged by the trip through the
    // engine library and back (no entry id, no key lost or added).
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&conversation).unwrap()).unwrap();
    for item in kept {
        let index = item["index"].as_u64().expect("sliding-window only keeps") as usize;
        assert_eq!(item["message"], input[index], "message {index}");
    }
}

#[test]
fn assemble_with_a_panicking_engine_is_answered_by_legacy_and_quarantines_it() {
    let home = TempDir::new().unwrap();
    let conversation = example_conversation().display().to_string();
    let out = run_pincer(
        home.path(),
        &[
            "assemble",
            "--plugins-dir",
            &plugins_arg(),
            "--engine",
            "faulty",
            "--config",
            r#"{"assemble":"panic"}"#,
            "--conversation",
            &conversation,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("panicked in assemble"), "{text}");
    assert!(text.contains("answered by legacy"), "{text}");
    assert!(
        text.contains("Context engine: warning (1 quarantined; downgraded to legacy: faulty)"),
        "{text}"
    );
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(
        logs.contains(
            "[context-engine] Context engine \"faulty\" owner=plugin:faulty failed during assemble"
        ),
        "{logs}"
    );
}

#[test]
fn check_engine_survives_a_panic_in_every_method_at_once() {
    let home = TempDir::new().unwrap();
    let conversation = example_conversation().display().to_string();
    let all_panic = json!({
        "bootstrap": "panic", "ingest": "panic", "ingestBatch": "panic", "assemble": "panic",
        "afterTurn": "panic", "maintain": "panic", "compact": "panic",
        "prepareSubagentSpawn": "panic", "onSubagentEnded": "panic", "dispose": "panic"
    })
    .to_string();
    let out = run_pincer(
        home.path(),
        &[
            "check-engine",
            "--json",
            "--plugins-dir",
            &plugins_arg(),
            "--engine",
            "faulty",
            "--config",
            &all_panic,
            "--conversation",
            &conversation,
        ],
    );
    assert_eq!(out.status.signal(), None, "not killed by a signal");
    assert_eq!(
        out.status.code(),
        Some(1),
        "some methods failed: exit 1, reported"
    );
    let report = stdout_json(&out);
    let methods = report["methods"].as_array().unwrap();
    assert_eq!(methods.len(), 10);
    for m in methods {
        assert_eq!(m["error"]["kind"], "panicked", "{m}");
        let expected = match m["method"].as_str().unwrap() {
            "compact" | "prepareSubagentSpawn" | "dispose" => "failed",
            _ => "fallback",
        };
        assert_eq!(m["outcome"], expected, "{m}");
    }
}

#[test]
fn doctor_warns_about_a_plugins_dir_that_does_not_exist() {
    let home = TempDir::new().unwrap();
    let out = run_pincer(
        home.path(),
        &[
            "doctor",
            "--json",
            "--plugins-dir",
            "/nonexistent/pincer-plugins",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let report = stdout_json(&out);
    assert_eq!(
        report["missingPluginDirs"],
        json!(["/nonexistent/pincer-plugins"])
    );
}

#[test]
fn an_unusable_config_value_is_refused_by_its_key() {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        r#"{ plugins: { callTimeoutsMs: { assemble: 0 } } }"#,
    )
    .unwrap();
    let out = run_pincer(home.path(), &["doctor"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`plugins.callTimeoutsMs.assemble` must be at least 1"),
        "{err}"
    );
}

/// `pincer … | head`: when the reader closes the pipe, pincer ends quietly (SIGPIPE, as `cat`
/// does) instead of panicking on its next print.
#[test]
fn a_closed_stdout_pipe_ends_pincer_quietly() {
    use std::io::Read as _;
    let home = TempDir::new().unwrap();
    // Far more output than a pipe holds (64 KiB), so pincer is still printing when the pipe
    // closes.
    let conversation = home.path().join("long.json");
    let messages: Vec<Value> = (0..4000)
        .map(|i| json!({"role": "user", "content": format!("message {i}: {}", "word ".repeat(20))}))
        .collect();
    std::fs::write(&conversation, Value::from(messages).to_string()).unwrap();
    let mut child = std::process::Command::new(pincer_bin())
        .args(["--home", home.path().to_str().unwrap()])
        .args(["assemble", "--conversation", conversation.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read one byte, then close the pipe, as `head -c 1` does.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.status.success() || out.status.signal() == Some(13),
        "ends by SIGPIPE or normally: {:?}",
        out.status
    );
}
