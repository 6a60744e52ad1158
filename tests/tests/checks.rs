//! The trust boundary's checks, through the real `pincer` binary: what an
//! engine returns is checked before use (`plugins/testing/hostile`'s ABI-level garbage), a
//! plugin the operator pinned keeps its engine ids, permissions are checked where a plugin's
//! files really are, and `doctor` without `--load` reports what the runtime does.

use std::path::{Path, PathBuf};
use std::process::Output;

use pincer_tests::*;
use serde_json::{json, Value};

/// A home whose `pincer.json` is `config`.
fn home_with(config: Value) -> TempDir {
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    home
}

fn assemble(home: &Path, plugins_dir: &Path) -> Output {
    let conversation = example_conversation().display().to_string();
    let plugins = plugins_dir.display().to_string();
    run_pincer(
        home,
        &[
            "assemble",
            "--json",
            "--conversation",
            &conversation,
            "--plugins-dir",
            &plugins,
        ],
    )
}

fn doctor_json(home: &Path, plugins_dir: &Path, load: bool) -> Value {
    let plugins = plugins_dir.display().to_string();
    let mut args = vec!["doctor", "--json", "--plugins-dir", &plugins];
    if load {
        args.push("--load");
    }
    stdout_json(&run_pincer(home, &args))
}

/// The sha256 a staged plugin's manifest records for its library.
fn staged_sha256(plugin_dir: &Path) -> String {
    read_manifest_json(plugin_dir)["sha256"]
        .as_str()
        .expect("staged manifests pin their library")
        .to_owned()
}

/// A plugins folder with the genuine `sliding-window` and the `impostor`, which also declares
/// `sliding-window` among its engine ids.
fn contested_plugins() -> (TempDir, PathBuf) {
    let plugins = TempDir::new().unwrap();
    let genuine = copy_plugin(
        &staged_plugin("sliding-window"),
        plugins.path(),
        "sliding-window",
    );
    copy_plugin(&staged_variant("impostor"), plugins.path(), "impostor");
    (plugins, genuine)
}

// Item 7: a pinned plugin keeps its engine ids; the newcomer alone is refused.
#[test]
fn a_pinned_plugin_keeps_its_engine_id_and_the_newcomer_alone_is_refused() {
    let (plugins, genuine) = contested_plugins();
    let home = home_with(json!({ "plugins": {
        "slots": { "contextEngine": "sliding-window" },
        "entries": { "sliding-window": { "sha256": staged_sha256(&genuine) } },
    } }));

    for load in [true, false] {
        let report = doctor_json(home.path(), plugins.path(), load);
        let held = find_by_id(&report["plugins"], "sliding-window");
        // Selected, it is opened with or without `--load`.
        assert_eq!(
            held["status"], "loaded",
            "--load {load}: the pinned plugin is not touched: {held}"
        );
        assert!(held["error"].is_null(), "{held}");
        let newcomer = find_by_id(&report["plugins"], "impostor");
        assert_eq!(newcomer["status"], "rejected", "{newcomer}");
        assert_eq!(newcomer["error"]["code"], "engine_id_held", "{newcomer}");
        let message = newcomer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(r#"plugin "impostor" is refused: engine id "sliding-window" belongs to plugin "sliding-window", installed and pinned by the operator (plugins.entries.sliding-window.sha256)"#),
            "names the id and the holder: {message}"
        );
        assert_eq!(report["ok"], false, "a planted claimant is a trust refusal");
    }
    let out = assemble(home.path(), plugins.path());
    assert_eq!(
        stdout_json(&out)["answeredBy"],
        "sliding-window",
        "{}",
        stderr_text(&out)
    );

    // Two pinned claimants: neither is the operator's one choice, so both are refused.
    let impostor = plugins.path().join("impostor");
    let home = home_with(json!({ "plugins": {
        "slots": { "contextEngine": "sliding-window" },
        "entries": {
            "sliding-window": { "sha256": staged_sha256(&genuine) },
            "impostor": { "sha256": staged_sha256(&impostor) },
        },
    } }));
    let report = doctor_json(home.path(), plugins.path(), false);
    for id in ["impostor", "sliding-window"] {
        let plugin = find_by_id(&report["plugins"], id);
        assert_eq!(plugin["error"]["code"], "engine_id_contested", "{plugin}");
    }
    let out = assemble(home.path(), plugins.path());
    assert_eq!(stdout_json(&out)["answeredBy"], "legacy");
}

// Item 9: two folders with one plugin id, as `doctor --load` reports them.
#[test]
fn doctor_without_load_reports_two_folders_with_one_plugin_id_as_the_runtime_does() {
    let plugins = TempDir::new().unwrap();
    let first = copy_plugin(&staged_plugin("faulty"), plugins.path(), "a-faulty");
    let second = copy_plugin(&staged_plugin("faulty"), plugins.path(), "b-faulty");
    let home = home_with(json!({}));
    for load in [true, false] {
        let report = doctor_json(home.path(), plugins.path(), load);
        let listed: Vec<&Value> = report["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["id"] == "faulty")
            .collect();
        assert_eq!(listed.len(), 2, "{report}");
        assert_eq!(
            listed[0]["status"],
            if load { "loaded" } else { "verified" },
            "--load {load}: the first folder is used: {}",
            listed[0]
        );
        assert_eq!(listed[0]["dir"], first.display().to_string());
        assert_eq!(
            listed[1]["status"], "rejected",
            "--load {load}: {}",
            listed[1]
        );
        assert_eq!(listed[1]["error"]["code"], "duplicate_plugin");
        let message = listed[1]["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&first.display().to_string())
                && message.contains(&second.display().to_string()),
            "names both folders: {message}"
        );
    }
}

// Item 8: a plugin folder that is a link into a folder others can write is refused there.
#[cfg(unix)]
#[test]
fn a_plugin_folder_linked_into_a_folder_others_can_write_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt as _;
    let work = TempDir::new().unwrap();
    let unsafe_dir = work.path().join("anyone-writes-here");
    std::fs::create_dir(&unsafe_dir).unwrap();
    let real = copy_plugin(&staged_plugin("faulty"), &unsafe_dir, "faulty");
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::os::unix::fs::symlink(&real, plugins.join("faulty")).unwrap();
    let home = home_with(json!({ "plugins": { "slots": { "contextEngine": "faulty" } } }));
    let set_mode = |mode: u32| {
        std::fs::set_permissions(&unsafe_dir, std::fs::Permissions::from_mode(mode)).unwrap();
    };

    // Safe where the files are: loaded through the link.
    set_mode(0o755);
    let out = assemble(home.path(), &plugins);
    assert_eq!(
        stdout_json(&out)["answeredBy"],
        "faulty",
        "{}",
        stderr_text(&out)
    );

    // World-writable, not sticky: anyone could swap the files the link leads to.
    set_mode(0o777);
    let out = assemble(home.path(), &plugins);
    assert_eq!(
        stdout_json(&out)["answeredBy"],
        "legacy",
        "{}",
        stderr_text(&out)
    );
    let report = doctor_json(home.path(), &plugins, false);
    let plugin = find_by_id(&report["plugins"], "faulty");
    assert_eq!(plugin["status"], "rejected", "{plugin}");
    assert_eq!(plugin["error"]["code"], "insecure_permissions", "{plugin}");
    let message = plugin["error"]["message"].as_str().unwrap();
    let shown = unsafe_dir.display().to_string();
    assert!(
        message.contains(&format!(
            "{shown} is writable by group and others (mode 0777), and it is a folder above the plugin's files ({})",
            real.display()
        )),
        "names the folder where the files are: {message}"
    );
    assert!(
        message.contains(&format!("Fix: chmod go-w {shown}")),
        "with the exact fix: {message}"
    );
    assert_eq!(report["ok"], false);

    // Sticky, as /tmp is: others cannot rename or replace what is not theirs, so it is
    // accepted (the folders below it are checked in turn).
    set_mode(0o1777);
    let out = assemble(home.path(), &plugins);
    assert_eq!(
        stdout_json(&out)["answeredBy"],
        "faulty",
        "{}",
        stderr_text(&out)
    );
    // … but not the plugin folder itself.
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = assemble(home.path(), &plugins);
    assert_eq!(stdout_json(&out)["answeredBy"], "legacy");
}

/// A home with `hostile` selected and `engine_config` as its config; `limits` as
/// `plugins.resultLimits` when given.
fn hostile_home(engine_config: Value, limits: Option<Value>) -> TempDir {
    let mut config = json!({ "plugins": {
        "slots": { "contextEngine": "hostile" },
        "entries": { "hostile": { "config": engine_config } },
    } });
    if let Some(limits) = limits {
        config["plugins"]["resultLimits"] = limits;
    }
    home_with(config)
}

/// The quarantine record of `hostile` in an `assemble --json` report.
fn hostile_quarantine(report: &Value) -> Value {
    report["quarantine"]
        .as_array()
        .and_then(|records| records.iter().find(|r| r["engineId"] == "hostile"))
        .cloned()
        .unwrap_or_else(|| panic!("hostile is not quarantined: {report}"))
}

/// `assemble --json` with `hostile` as `engine_config` wants: the host answers (with `legacy`),
/// its output is UTF-8 JSON, and the engine is quarantined with a reason that holds `reason`.
/// Three times in one home: not one run may crash or abort the host.
#[track_caller]
fn answered_by_legacy_with_hostile_quarantined(engine_config: Value, reason: &str) {
    let work = TempDir::new().unwrap();
    let hostile = copy_plugin(&staged_variant("hostile"), work.path(), "hostile");
    let home = hostile_home(engine_config.clone(), None);
    for run in 0..3 {
        let out = assemble(home.path(), &hostile);
        let stderr = stderr_text(&out);
        assert!(
            out.status.success(),
            "{engine_config} run {run}: the host ended with {:?}: {stderr}",
            out.status
        );
        assert!(
            std::str::from_utf8(&out.stdout).is_ok(),
            "{engine_config} run {run}: the output is UTF-8"
        );
        let report = stdout_json(&out);
        assert_eq!(
            report["answeredBy"], "legacy",
            "{engine_config} run {run}: {report}"
        );
        let record = hostile_quarantine(&report);
        let why = record["reason"].as_str().unwrap();
        assert!(
            why.contains(reason),
            "{engine_config} run {run}: {why:?} names {reason:?}"
        );
        if isolated_run() {
            continue;
        }
        assert!(
            !stderr.contains("panicked"),
            "{engine_config} run {run}: {stderr}"
        );
    }
}

// Item 6: a result holding text that is not UTF-8 is refused; an error's text is replaced.
#[test]
fn an_engine_result_with_text_that_is_not_utf8_is_refused_and_the_host_never_crashes() {
    answered_by_legacy_with_hostile_quarantined(
        json!({ "garbage": "addition" }),
        "the engine's assemble result holds text that is not UTF-8 (in systemPromptAddition); the result is refused",
    );
    answered_by_legacy_with_hostile_quarantined(
        json!({ "garbage": "summary" }),
        "the engine's assemble result holds text that is not UTF-8 (in items[",
    );
    // An error stays the engine's error, its bytes that are not UTF-8 replaced.
    answered_by_legacy_with_hostile_quarantined(
        json!({ "garbage": "error" }),
        "hostile: \u{fffd}\u{fffd}\u{fffd}error",
    );
}

// Item 6: `info` is checked too — its strings, and the caps of `plugins.resultLimits`.
#[test]
fn an_engine_info_with_bad_text_or_beyond_the_caps_is_refused_naming_the_limit() {
    answered_by_legacy_with_hostile_quarantined(
        json!({ "garbage": "info-name" }),
        "the engine's info result holds text that is not UTF-8 (in name)",
    );
    answered_by_legacy_with_hostile_quarantined(
        json!({ "garbage": "many-tools" }),
        "the engine's info is refused: it offers 100000 tools, more than plugins.resultLimits.maxTools (128)",
    );
    answered_by_legacy_with_hostile_quarantined(
        json!({ "garbage": "huge-schema" }),
        "the engine's info is refused: tool \"huge\"'s parameter schema is 10000034 bytes, more than plugins.resultLimits.maxToolSchemaBytes (65536)",
    );
    answered_by_legacy_with_hostile_quarantined(
        json!({ "garbage": "huge-name" }),
        "the engine's info is refused: info.name is 10000000 bytes, more than plugins.resultLimits.maxEngineNameBytes (256)",
    );

    // The caps are the operator's: raised in pincer.json, the same info is taken.
    let work = TempDir::new().unwrap();
    let hostile = copy_plugin(&staged_variant("hostile"), work.path(), "hostile");
    let home = hostile_home(
        json!({ "garbage": "many-tools", "times": 200 }),
        Some(json!({ "maxTools": 200 })),
    );
    let out = assemble(home.path(), &hostile);
    assert_eq!(
        stdout_json(&out)["answeredBy"],
        "hostile",
        "{}",
        stderr_text(&out)
    );
    let home = hostile_home(
        json!({ "garbage": "many-tools", "times": 200 }),
        Some(json!({ "maxTools": 199 })),
    );
    let report = stdout_json(&assemble(home.path(), &hostile));
    let why = hostile_quarantine(&report)["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        why.contains("it offers 200 tools, more than plugins.resultLimits.maxTools (199)"),
        "{why}"
    );
}
