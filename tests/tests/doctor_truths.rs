//! `doctor`, `health`, `assemble` and `check-engine` tell the truth,
//! through the real binary: an engine the operator disabled or denied is a choice, not a
//! failure; a disabled plugin whose engine id is not its plugin id gives legacy silently; slot
//! `"none"` is legacy; an unregistered engine is recorded as `not registered` and the reason a
//! plugin was rejected is said.

use std::path::Path;
use std::process::Output;

use pincer_tests::*;
use serde_json::json;

fn write_config(home: &Path, text: &str) {
    std::fs::write(home.join("pincer.json"), text).unwrap();
}

fn assemble(home: &Path, plugins_dir: &Path) -> Output {
    run_pincer(
        home,
        &[
            "assemble",
            "--json",
            "--conversation",
            &example_conversation().display().to_string(),
            "--plugins-dir",
            &plugins_dir.display().to_string(),
        ],
    )
}

#[test]
fn doctor_exits_zero_when_the_selected_engine_is_denied_and_says_so() {
    let home = TempDir::new().unwrap();
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "sliding-window" }, deny: ["sliding-window"] } }"#,
    );
    let plugins = staged_plugins_dir().display().to_string();
    let out = run_pincer(home.path(), &["doctor", "--plugins-dir", &plugins]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_text(&out));
    let text = stdout_text(&out);
    assert!(
        text.contains("selected sliding-window -> legacy (plugin \"sliding-window\" denied by plugins.deny: the operator's choice; legacy answers and nothing is broken)"),
        "{text}"
    );
    let report = stdout_json(&run_pincer(
        home.path(),
        &["doctor", "--json", "--plugins-dir", &plugins],
    ));
    assert_eq!(report["ok"], true);
    assert_eq!(report["contextEngine"]["fallback"], "disabled");
    assert_eq!(report["quarantine"], json!([]));
}

#[test]
fn a_disabled_plugin_whose_engine_id_is_not_its_id_gives_legacy_silently() {
    let home = TempDir::new().unwrap();
    let twin = staged_variant("twin");
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "twin-echo" }, entries: { twin: { enabled: false } } } }"#,
    );
    let out = assemble(home.path(), &twin);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "legacy");
    assert_eq!(report["contextEngine"]["fallback"], "disabled");
    assert_eq!(report["quarantine"], json!([]), "not quarantined");
    assert!(
        !stderr_text(&out).contains("[context-engine]"),
        "silently: {}",
        stderr_text(&out)
    );
    let health = stdout_json(&run_pincer(home.path(), &["health", "--json"]));
    assert_eq!(health["status"], "ok");

    // Enabled, the same slot gives the engine.
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "twin-echo" } } }"#,
    );
    assert_eq!(
        stdout_json(&assemble(home.path(), &twin))["answeredBy"],
        "twin-echo"
    );
}

#[test]
fn slot_none_means_legacy_not_a_quarantine() {
    let home = TempDir::new().unwrap();
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "none" } } }"#,
    );
    let out = assemble(home.path(), &staged_plugins_dir());
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "legacy");
    assert_eq!(report["contextEngine"]["selected"], "legacy");
    assert_eq!(report["quarantine"], json!([]));
    let doctor = run_pincer(home.path(), &["doctor"]);
    assert_eq!(doctor.status.code(), Some(0), "{}", stdout_text(&doctor));
}

#[test]
fn an_unregistered_engine_is_recorded_as_not_registered_and_logged() {
    let home = TempDir::new().unwrap();
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "nope" } } }"#,
    );
    let out = assemble(home.path(), &staged_plugins_dir());
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "legacy");
    assert_eq!(report["quarantine"][0]["engineId"], "nope");
    assert_eq!(report["quarantine"][0]["operation"], "resolve");
    assert_eq!(report["quarantine"][0]["reason"], "not registered");
    assert_eq!(
        report["contextEngine"]["reason"],
        "Context engine \"nope\" is not registered. Available engines: faulty, legacy, lossless, sliding-window",
        "the available engines go to the diagnostic"
    );
    assert!(
        stderr_text(&out).contains(
            "[context-engine] Context engine \"nope\" is not registered; falling back to default engine \"legacy\"."
        ),
        "{}",
        stderr_text(&out)
    );
    let doctor = run_pincer(home.path(), &["doctor"]);
    assert_eq!(doctor.status.code(), Some(1), "a missing engine is broken");
}

#[test]
fn assemble_says_why_the_selected_plugin_was_rejected() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    let broken = copy_plugin(
        &staged_plugin("sliding-window"),
        work.path(),
        "sliding-window",
    );
    let mut manifest = read_manifest_json(&broken);
    manifest["sha256"] = json!("0".repeat(64));
    write_manifest_json(&broken, &manifest);
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "sliding-window" } } }"#,
    );
    let out = run_pincer(
        home.path(),
        &[
            "assemble",
            "--conversation",
            &example_conversation().display().to_string(),
            "--plugins-dir",
            &work.path().display().to_string(),
        ],
    );
    let text = stdout_text(&out);
    assert!(
        text.contains("selected sliding-window -> legacy (Context engine \"sliding-window\" is not registered: plugin \"sliding-window\" was rejected: "),
        "{text}"
    );
    assert!(text.contains("sha256"), "the rejection itself: {text}");
}

/// A copy of sliding-window whose manifest requires `thread-bootstrap-projection` for
/// `agent-run`, which only a harness declaring it offers.
fn demanding_plugin(work: &Path) -> std::path::PathBuf {
    let dir = copy_plugin(&staged_plugin("sliding-window"), work, "sliding-window");
    let mut manifest = read_manifest_json(&dir);
    manifest["hostRequirements"] = json!({
        "agent-run": {
            "requiredCapabilities": ["thread-bootstrap-projection"],
            "unsupportedMessage": "Use a harness that projects thread bootstrap."
        }
    });
    write_manifest_json(&dir, &manifest);
    dir
}

#[test]
fn doctor_fix_resets_a_slot_no_configured_host_can_run_and_says_so() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    demanding_plugin(work.path());
    let config = "// fleet\n{\n  plugins: { slots: { contextEngine: \"sliding-window\" } }, // chosen\n  hosts: { cliBackends: { \"claude-cli\": {} } },\n}\n";
    write_config(home.path(), config);
    let plugins = work.path().display().to_string();
    let out = run_pincer(home.path(), &["doctor", "--fix", "--plugins-dir", &plugins]);
    let text = stdout_text(&out);
    assert!(
        text.starts_with("doctor --fix: Context engine \"sliding-window\" cannot run operation \"agent-run\" on any configured host (pincer embedded runner, CLI backend \"claude-cli\"): Context engine \"sliding-window\" cannot run operation \"agent-run\" on pincer embedded runner. Missing host capabilities: thread-bootstrap-projection."),
        "{text}"
    );
    assert!(
        text.contains("doctor --fix: Exclusive slot \"contextEngine\" switched from \"sliding-window\" to \"legacy\".\n"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let written = std::fs::read_to_string(home.path().join("pincer.json")).unwrap();
    assert!(
        written.contains("// fleet") && written.contains("// chosen"),
        "{written}"
    );
    assert!(written.contains("contextEngine: \"legacy\""), "{written}");
    let again = run_pincer(home.path(), &["doctor", "--fix", "--plugins-dir", &plugins]);
    assert!(stdout_text(&again).starts_with("doctor --fix: nothing to repair\n"));
}

#[test]
fn doctor_fix_keeps_the_slot_of_a_mixed_fleet_and_warns() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    demanding_plugin(work.path());
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "sliding-window" } },
             hosts: { harnesses: { codex: { capabilities: ["thread-bootstrap-projection"] } } } }"#,
    );
    let plugins = work.path().display().to_string();
    let out = run_pincer(home.path(), &["doctor", "--fix", "--plugins-dir", &plugins]);
    assert!(
        stdout_text(&out).starts_with("doctor --fix: Context engine \"sliding-window\" cannot run operation \"agent-run\" on pincer embedded runner but can on agent harness \"codex\": the slot is kept (a mixed fleet)"),
        "{}",
        stdout_text(&out)
    );
    let written = std::fs::read_to_string(home.path().join("pincer.json")).unwrap();
    assert!(
        written.contains("contextEngine: \"sliding-window\""),
        "unchanged: {written}"
    );
}

#[test]
fn check_engine_reports_not_implemented_for_a_missing_dispose() {
    let home = TempDir::new().unwrap();
    let out = run_pincer(
        home.path(),
        &[
            "check-engine",
            "--json",
            "--engine",
            "twin",
            "--plugins-dir",
            &staged_variant("twin").display().to_string(),
            "--conversation",
            &example_conversation().display().to_string(),
        ],
    );
    let report = stdout_json(&out);
    let dispose = report["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == "dispose")
        .cloned()
        .expect("dispose is reported");
    assert_eq!(dispose["outcome"], "not-implemented", "{dispose}");
    assert_eq!(report["ok"], true);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn an_engine_whose_info_contradicts_its_manifests_host_requirements_is_not_used() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    demanding_plugin(work.path());
    write_config(
        home.path(),
        r#"{ plugins: { slots: { contextEngine: "sliding-window" } } }"#,
    );
    let report = stdout_json(&assemble(home.path(), work.path()));
    assert_eq!(report["answeredBy"], "legacy");
    let record = &report["quarantine"][0];
    assert_eq!(record["operation"], "contract-validation");
    assert!(
        record["reason"].as_str().unwrap().starts_with(
            "Context engine \"sliding-window\" reports hostRequirements {} but the manifest of plugin \"sliding-window\" declares {\"agent-run\""
        ),
        "{record}"
    );
}
