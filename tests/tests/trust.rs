//! The trust boundary, through the real `pincer` binary with engines written the way
//! a hostile or sloppy stranger would write them (`plugins/testing/impostor`,
//! `plugins/testing/hostile`): one test per finding of the issue. An engine cannot take another
//! engine's name, cannot crash the host twice, cannot flood it through its results or its
//! errors, cannot lie in `info`, cannot be loaded from files others can change, and a sloppy
//! manifest is not silently half-read.

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

/// `hostile` selected, with `engine_config` as its config and `plugins` merged in.
fn hostile_home(engine_config: Value, plugins: Value) -> TempDir {
    let mut config = json!({
        "plugins": {
            "slots": { "contextEngine": "hostile" },
            "entries": { "hostile": { "config": engine_config } },
        }
    });
    if let Value::Object(extra) = plugins {
        for (key, value) in extra {
            config["plugins"][key] = value;
        }
    }
    home_with(config)
}

fn assemble(home: &Path, plugins_dir: &Path, extra: &[&str]) -> Output {
    let conversation = example_conversation().display().to_string();
    let plugins = plugins_dir.display().to_string();
    let mut args = vec![
        "assemble",
        "--json",
        "--conversation",
        &conversation,
        "--plugins-dir",
        &plugins,
    ];
    args.extend_from_slice(extra);
    run_pincer(home, &args)
}

fn doctor_json(home: &Path, plugins_dir: &Path) -> Value {
    let plugins = plugins_dir.display().to_string();
    stdout_json(&run_pincer(
        home,
        &["doctor", "--json", "--plugins-dir", &plugins],
    ))
}

/// A private copy of the staged `hostile` plugin under `root/hostile`.
fn hostile_copy(root: &Path) -> PathBuf {
    copy_plugin(&staged_variant("hostile"), root, "hostile")
}

/// The quarantine record of `engine` in an `assemble --json` or `doctor --json` report.
fn quarantined(report: &Value, engine: &str) -> Value {
    report["quarantine"]
        .as_array()
        .and_then(|records| records.iter().find(|r| r["engineId"] == engine))
        .cloned()
        .unwrap_or_else(|| panic!("{engine} is not quarantined: {report}"))
}

// 1. Engine-id hijack.
#[test]
fn an_engine_id_claimed_by_two_plugins_is_refused_for_both_and_legacy_is_reserved() {
    let plugins = TempDir::new().unwrap();
    copy_plugin(
        &staged_plugin("sliding-window"),
        plugins.path(),
        "sliding-window",
    );
    let home = home_with(json!({ "plugins": { "slots": { "contextEngine": "sliding-window" } } }));

    // Alone, the genuine plugin answers.
    let out = assemble(home.path(), plugins.path(), &[]);
    assert_eq!(stdout_json(&out)["answeredBy"], "sliding-window");

    // The impostor's folder sorts first and it honestly declares "sliding-window" too.
    copy_plugin(&staged_variant("impostor"), plugins.path(), "impostor");
    let report = doctor_json(home.path(), plugins.path());
    assert_eq!(report["ok"], false, "{report}");
    for id in ["impostor", "sliding-window"] {
        let plugin = find_by_id(&report["plugins"], id);
        assert_eq!(plugin["status"], "rejected", "{plugin}");
        assert_eq!(plugin["error"]["code"], "engine_id_contested", "{plugin}");
        let message = plugin["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(
                r#"engine id "sliding-window" (claimed by "impostor" and "sliding-window")"#
            ),
            "{message}"
        );
    }
    assert_eq!(report["engines"], json!(["legacy"]));
    let out = assemble(home.path(), plugins.path(), &[]);
    let answer = stdout_json(&out);
    assert_eq!(
        answer["answeredBy"], "legacy",
        "never the impostor: {answer}"
    );
    assert!(
        stderr_text(&out).contains("is claimed by more than one plugin"),
        "loudly at load: {}",
        stderr_text(&out)
    );

    // Disabling the impostor gives the id back to the genuine plugin.
    let home = home_with(json!({ "plugins": {
        "slots": { "contextEngine": "sliding-window" },
        "entries": { "impostor": { "enabled": false } },
    } }));
    assert_eq!(
        stdout_json(&assemble(home.path(), plugins.path(), &[]))["answeredBy"],
        "sliding-window"
    );

    // A library may register only what its manifest declares: the impostor's manifest
    // without the stolen id disagrees with its library's embedded record.
    let lone = TempDir::new().unwrap();
    let impostor = copy_plugin(&staged_variant("impostor"), lone.path(), "impostor");
    let mut manifest = read_manifest_json(&impostor);
    manifest["contextEngineIds"] = json!(["impostor"]);
    write_manifest_json(&impostor, &manifest);
    let fresh = home_with(json!({}));
    let plugin = find_by_id(
        &doctor_json(fresh.path(), lone.path())["plugins"],
        "impostor",
    );
    assert_eq!(plugin["status"], "rejected");
    assert_eq!(plugin["error"]["code"], "manifest_mismatch", "{plugin}");

    // The id `legacy` is refused, not shown as loaded.
    let reserved = TempDir::new().unwrap();
    let legacy = copy_plugin(&staged_plugin("sliding-window"), reserved.path(), "legacy");
    let mut manifest = read_manifest_json(&legacy);
    manifest["id"] = json!("legacy");
    manifest["contextEngineIds"] = json!(["legacy"]);
    write_manifest_json(&legacy, &manifest);
    let report = doctor_json(home.path(), reserved.path());
    let plugin = find_by_id(&report["plugins"], "legacy");
    assert_eq!(plugin["status"], "rejected", "{plugin}");
    assert_eq!(plugin["error"]["code"], "engine_id_reserved", "{plugin}");
    assert_eq!(report["ok"], false);
}

// 3. A crash kills the host once, not on every run; panics on every path out are contained.
#[test]
fn a_crash_inside_an_engine_is_remembered_and_panics_on_every_path_are_contained() {
    let plugins = TempDir::new().unwrap();
    let hostile = hostile_copy(plugins.path());
    for (mode, died) in [
        ("segv", "a null write"),
        ("exit", "exit(3)"),
        ("stack-overflow", "a stack overflow"),
    ] {
        let home = hostile_home(json!({ "assemble": mode }), json!({}));
        let first = assemble(home.path(), &hostile, &[]);
        assert!(
            !first.status.success(),
            "{died} ends the first run: {}",
            stderr_text(&first)
        );
        if mode == "stack-overflow" {
            assert!(
                stderr_text(&first).contains(
                    "pincer: the process is aborting inside context engine \"hostile\" during assemble"
                ),
                "the abort names the engine: {}",
                stderr_text(&first)
            );
        }
        let second = assemble(home.path(), &hostile, &[]);
        assert_eq!(
            second.status.code(),
            Some(0),
            "{died}: {}",
            stderr_text(&second)
        );
        let report = stdout_json(&second);
        assert_eq!(report["answeredBy"], "legacy", "{died}: {report}");
        let pid = first_pid(&report);
        let record = quarantined(&report, "hostile");
        assert_eq!(
            record["reason"],
            format!("the host process died during assemble (pid {pid})")
        );
        assert_eq!(record["crash"], true);
        let health = stdout_text(&run_pincer(home.path(), &["health"]));
        assert!(
            health.starts_with(
                "Context engine: warning (1 quarantined; downgraded to legacy: hostile)"
            ),
            "{health}"
        );
        // Still remembered by a third run; cleared on request.
        assert_eq!(
            stdout_json(&assemble(home.path(), &hostile, &[]))["answeredBy"],
            "legacy"
        );
        run_pincer(home.path(), &["health", "--clear"]);
        assert!(
            stdout_text(&run_pincer(home.path(), &["health"])).starts_with("Context engine: ok")
        );
    }

    // A crash in the factory is remembered the same way.
    let home = hostile_home(json!({ "segvInCreate": true }), json!({}));
    assert!(!assemble(home.path(), &hostile, &[]).status.success());
    let report = stdout_json(&assemble(home.path(), &hostile, &[]));
    assert_eq!(report["answeredBy"], "legacy", "{report}");
    let record = quarantined(&report, "hostile");
    assert_eq!(record["operation"], "factory");
    assert!(record["reason"]
        .as_str()
        .unwrap()
        .starts_with("the host process died during factory (pid "));

    // A crash record lapses when the library changes.
    let home = hostile_home(json!({ "assemble": "segv" }), json!({}));
    assert!(!assemble(home.path(), &hostile, &[]).status.success());
    let library = library_path(&hostile);
    let mut bytes = std::fs::read(&library).unwrap();
    bytes.push(0);
    std::fs::write(&library, bytes).unwrap();
    let mut manifest = read_manifest_json(&hostile);
    manifest.as_object_mut().unwrap().remove("sha256");
    write_manifest_json(&hostile, &manifest);
    std::fs::write(
        home.path().join("pincer.json"),
        json!({ "plugins": { "slots": { "contextEngine": "hostile" } } }).to_string(),
    )
    .unwrap();
    let report = stdout_json(&assemble(home.path(), &hostile, &[]));
    assert_eq!(
        report["answeredBy"], "hostile",
        "a new library is not the one that crashed: {report}"
    );

    // Panics the adapter must catch on the way out: a payload whose destructor panics, and an
    // engine whose Drop panics. The host goes on.
    let home = hostile_home(json!({ "assemble": "payload-panics" }), json!({}));
    let out = assemble(home.path(), &hostile, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "legacy");
    assert!(
        report["failure"]["message"]
            .as_str()
            .unwrap()
            .ends_with("(and its panic payload panicked when dropped)"),
        "{report}"
    );
    let home = hostile_home(json!({ "dropPanics": true }), json!({}));
    let out = assemble(home.path(), &hostile, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    assert!(stderr_text(&out)
        .contains("the engine panicked while it was dropped; the panic was contained"));
}

/// The pid in a crash record's reason.
/// Stopping the process (Ctrl-C, `kill`) while an engine's call is in flight is the operator's
/// doing, not the engine's crash: the next run does not quarantine the engine. A SIGKILL, which
/// nothing can mark, still counts as a death in the call.
#[test]
fn a_process_stopped_by_the_operator_mid_call_does_not_quarantine_the_engine() {
    let plugins = staged_plugins_dir();
    for (signal, quarantines) in [("INT", false), ("TERM", false), ("KILL", true)] {
        let home = home_with(json!({
            "plugins": {
                "slots": { "contextEngine": "faulty" },
                "entries": { "faulty": { "config": {
                    "assemble": "hang", "hangMs": 60_000, "hangMarker": true,
                } } },
                "callTimeoutsMs": { "assemble": 120_000 },
            }
        }));
        let conversation = example_conversation();
        let mut child = std::process::Command::new(pincer_bin())
            .arg("--home")
            .arg(home.path())
            .args(["assemble", "--conversation"])
            .arg(&conversation)
            .arg("--plugins-dir")
            .arg(&plugins)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // In the call once its journal holds a slot marked "in call" (the engine's tag alone
        // is there from the moment its library is opened, in the journal's library table).
        let journal = home
            .path()
            .join("state/crash-journal")
            .join(format!("{}.slots", child.id()));
        let in_call = 0x4341_4c4c_u32.to_ne_bytes();
        let start = std::time::Instant::now();
        while !std::fs::read(&journal)
            .map(|bytes| bytes.windows(4).any(|w| w == in_call))
            .unwrap_or(false)
        {
            assert!(start.elapsed().as_secs() < 30, "the call never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The tag is first written by the factory's call; the hanging `assemble` (60 s) is
        // in flight once the engine says so (its hang marker), not in the gap between the two.
        let marker = faulty_hang_marker(home.path(), "assemble");
        assert!(
            wait_for(std::time::Duration::from_secs(60), || marker.exists()),
            "assemble never started to hang"
        );
        let killed = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(killed.success());
        assert!(!child.wait().unwrap().success());
        let report = stdout_json(&run_pincer(
            home.path(),
            &[
                "doctor",
                "--json",
                "--plugins-dir",
                plugins.to_str().unwrap(),
            ],
        ));
        let crashed = report["quarantine"]
            .as_array()
            .is_some_and(|records| records.iter().any(|r| r["engineId"] == "faulty"));
        assert_eq!(crashed, quarantines, "SIG{signal}: {report}");
    }
}

fn first_pid(report: &Value) -> u64 {
    quarantined(report, "hostile")["pid"].as_u64().unwrap()
}

// 4. No unbounded results, manifests or error texts.
#[test]
fn results_manifests_and_error_texts_beyond_the_caps_are_refused() {
    let plugins = TempDir::new().unwrap();
    let hostile = hostile_copy(plugins.path());
    let refused = |config: Value, limits: Value, expected: &str| {
        let home = hostile_home(config.clone(), limits);
        let out = assemble(home.path(), &hostile, &["--token-budget", "1000"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
        let report = stdout_json(&out);
        assert_eq!(report["answeredBy"], "legacy", "{config}: {report}");
        assert_eq!(report["inputMessages"], 21);
        assert_eq!(
            report["keptMessages"].as_array().unwrap().len(),
            21,
            "legacy's pass-through, nothing more"
        );
        let record = quarantined(&report, "hostile");
        assert_eq!(record["operation"], "assemble");
        let reason = record["reason"].as_str().unwrap();
        assert!(reason.starts_with("broke the contract: "), "{reason}");
        assert!(reason.contains(expected), "{config}: {reason}");
    };
    refused(
        json!({ "assemble": "repeat", "times": 10000 }),
        json!({}),
        "each input message may be referenced at most once, in order",
    );
    refused(
        json!({ "assemble": "duplicate" }),
        json!({}),
        "each input message may be referenced at most once, in order",
    );
    refused(
        json!({ "assemble": "huge-addition", "bytes": 100 << 20 }),
        json!({}),
        "systemPromptAddition is 104857600 bytes, more than 262144",
    );
    refused(
        json!({ "assemble": "many-new", "times": 11 }),
        json!({ "resultLimits": { "maxNewMessages": 10 } }),
        "adds more than 10 new messages (plugins.resultLimits.maxNewMessages)",
    );
    // Within a raised cap the same result is accepted.
    let home = hostile_home(
        json!({ "assemble": "many-new", "times": 11 }),
        json!({ "resultLimits": { "maxNewMessages": 11 } }),
    );
    assert_eq!(
        stdout_json(&assemble(home.path(), &hostile, &[]))["answeredBy"],
        "hostile"
    );

    // An estimate of u64::MAX against a budget of 1000 is not trusted.
    let home = hostile_home(json!({ "assemble": "huge-estimate" }), json!({}));
    let out = assemble(home.path(), &hostile, &["--token-budget", "1000"]);
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "hostile");
    assert_ne!(report["estimatedTokens"], json!(u64::MAX), "{report}");
    assert!(
        report["estimatedTokens"].as_u64().unwrap() > 0,
        "the host's own estimate: {report}"
    );
    assert!(stderr_text(&out).contains(
        "estimatedTokens is above the budget and not what the context holds; it is not trusted"
    ));

    // A 50 MB error full of escape sequences: capped and cleaned before the state file, the
    // log and every later `health`.
    let home = hostile_home(
        json!({ "assemble": "huge-error", "bytes": 50 << 20 }),
        json!({}),
    );
    let out = assemble(home.path(), &hostile, &[]);
    let report = stdout_json(&out);
    let reason = quarantined(&report, "hostile")["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(reason.len() <= 2100, "capped: {} bytes", reason.len());
    assert!(reason.starts_with("hostile: red line"), "{reason}");
    assert!(!reason.chars().any(char::is_control), "{reason:?}");
    let state = std::fs::read_to_string(
        home.path()
            .join("state")
            .join("context-engine-quarantine.json"),
    )
    .unwrap();
    assert!(
        state.len() < 8192,
        "the state file stays small: {}",
        state.len()
    );
    assert!(!state.contains("\\u001b"), "no escape sequence stored");
    for text in [
        stderr_text(&out),
        stdout_text(&run_pincer(home.path(), &["health"])),
    ] {
        assert!(!text.contains('\u{1b}'), "no escape sequence printed");
        assert!(text.len() < 16384, "{} bytes", text.len());
    }

    // A manifest over the 1 MiB cap is refused unread.
    let big = TempDir::new().unwrap();
    let plugin = copy_plugin(
        &staged_plugin("sliding-window"),
        big.path(),
        "sliding-window",
    );
    let mut manifest = read_manifest_json(&plugin);
    manifest["description"] = json!("x".repeat(2 << 20));
    write_manifest_json(&plugin, &manifest);
    let home = home_with(json!({}));
    let plugin = find_by_id(
        &doctor_json(home.path(), big.path())["plugins"],
        "sliding-window",
    );
    assert_eq!(plugin["status"], "rejected");
    assert_eq!(plugin["error"]["code"], "manifest_too_large", "{plugin}");
}

// 5. `info()` that lies.
#[test]
fn an_engine_whose_info_lies_about_its_id_or_version_is_refused() {
    let plugins = TempDir::new().unwrap();
    let hostile = hostile_copy(plugins.path());
    for (config, expected) in [
        (
            json!({ "infoId": "sliding-window" }),
            r#"Context engine "hostile" factory returned an invalid ContextEngine: info.id "sliding-window" is not the id it was registered under."#,
        ),
        (
            json!({ "infoVersion": "banana" }),
            r#"Context engine "hostile" factory returned an invalid ContextEngine: info.version "banana" is not semver"#,
        ),
    ] {
        let home = hostile_home(config.clone(), json!({}));
        let report = stdout_json(&assemble(home.path(), &hostile, &[]));
        assert_eq!(report["answeredBy"], "legacy", "{config}: {report}");
        let record = quarantined(&report, "hostile");
        assert_eq!(record["operation"], "contract-validation");
        assert!(
            record["reason"].as_str().unwrap().starts_with(expected),
            "{config}: {record}"
        );
    }
    // Told the truth, the same engine answers.
    let home = hostile_home(json!({}), json!({}));
    assert_eq!(
        stdout_json(&assemble(home.path(), &hostile, &[]))["answeredBy"],
        "hostile"
    );
}

// 6. Plugin files anyone can change.
#[cfg(unix)]
#[test]
fn plugin_files_others_can_change_are_refused_with_the_fix() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let set_mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let root = TempDir::new().unwrap();
    let plugins = root.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    set_mode(&plugins, 0o755);
    let hostile = hostile_copy(&plugins);
    set_mode(&hostile, 0o755);
    let library = library_path(&hostile);
    let home = hostile_home(json!({}), json!({}));
    let status = |home: &Path| find_by_id(&doctor_json(home, &plugins)["plugins"], "hostile");
    assert_eq!(status(home.path())["status"], "loaded");

    let refused_with = |home: &Path, fix: String| {
        let plugin = status(home);
        assert_eq!(plugin["status"], "rejected", "{plugin}");
        assert_eq!(plugin["error"]["code"], "insecure_permissions");
        let message = plugin["error"]["message"].as_str().unwrap();
        assert!(message.contains(&fix), "{message} should say {fix}");
    };
    set_mode(&library, 0o666);
    refused_with(home.path(), format!("chmod go-w {}", library.display()));
    let out = assemble(home.path(), &plugins, &[]);
    assert_eq!(stdout_json(&out)["answeredBy"], "legacy");
    set_mode(&library, 0o644);

    set_mode(&hostile.join("pincer.plugin.json"), 0o664);
    refused_with(
        home.path(),
        format!(
            "chmod go-w {}",
            hostile.join("pincer.plugin.json").display()
        ),
    );
    set_mode(&hostile.join("pincer.plugin.json"), 0o644);

    set_mode(&hostile, 0o777);
    refused_with(home.path(), format!("chmod go-w {}", hostile.display()));
    set_mode(&hostile, 0o755);

    set_mode(&plugins, 0o775);
    refused_with(home.path(), format!("chmod go-w {}", plugins.display()));
    set_mode(&plugins, 0o755);
    assert_eq!(status(home.path())["status"], "loaded");

    // Running as root (as CI does): a library owned by `nobody` is refused with its chown.
    let me = std::fs::metadata(home.path()).unwrap().uid();
    if me == 0 {
        let chown = std::process::Command::new("chown")
            .arg("nobody")
            .arg(&library)
            .status()
            .unwrap();
        assert!(chown.success());
        refused_with(home.path(), format!("chown 0 {}", library.display()));
    } else {
        eprintln!("not running as root: the library-owned-by-nobody case is skipped");
        set_mode(&library, 0o666);
    }

    // The operator's override loads it, and doctor shows the override.
    let home = hostile_home(json!({}), json!({}));
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("pincer.json")).unwrap())
            .unwrap();
    config["plugins"]["entries"]["hostile"]["trustInsecurePermissions"] = json!(true);
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    let plugin = status(home.path());
    assert_eq!(plugin["status"], "loaded", "{plugin}");
    assert!(
        plugin["warnings"][0]
            .as_str()
            .unwrap()
            .contains("trustInsecurePermissions is true"),
        "{plugin}"
    );
    let plugins_arg = plugins.display().to_string();
    let text = stdout_text(&run_pincer(
        home.path(),
        &["doctor", "--plugins-dir", &plugins_arg],
    ));
    assert!(
        text.contains("warning: loaded although its files are unsafe"),
        "{text}"
    );
}

// 7. Sloppy manifests.
#[test]
fn misspelled_manifest_keys_are_reported_and_security_ones_refuse_the_plugin() {
    let home = home_with(json!({}));
    let with_key = |key: &str, value: Value| {
        let root = TempDir::new().unwrap();
        let plugin = copy_plugin(
            &staged_plugin("sliding-window"),
            root.path(),
            "sliding-window",
        );
        let mut manifest = read_manifest_json(&plugin);
        manifest[key] = value;
        write_manifest_json(&plugin, &manifest);
        let report = doctor_json(home.path(), root.path());
        find_by_id(&report["plugins"], "sliding-window")
    };
    for (key, meant) in [
        ("sha-256", "sha256"),
        ("libary", "library"),
        ("apiversion", "apiVersion"),
    ] {
        let plugin = with_key(key, json!("x"));
        assert_eq!(plugin["status"], "rejected", "{plugin}");
        assert_eq!(plugin["error"]["code"], "manifest_misspelled_key");
        let message = plugin["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "unknown key \"{key}\" looks like a misspelling of \"{meant}\""
            )),
            "{message}"
        );
    }
    let plugin = with_key("descripton", json!("typo"));
    assert_eq!(
        plugin["status"], "verified",
        "accepted (not selected, so not opened): {plugin}"
    );
    assert_eq!(
        plugin["warnings"],
        json!(["pincer.plugin.json: unknown key \"descripton\" is ignored; did you mean \"description\"?"])
    );
    let plugin = with_key("homepage", json!("https://example.invalid"));
    assert_eq!(
        plugin["warnings"],
        json!(["pincer.plugin.json: unknown key \"homepage\" is ignored"])
    );
}

// 8. A panic in a thread the engine spawned.
#[test]
fn a_panic_in_a_thread_the_engine_spawned_reaches_the_log_with_engine_and_thread() {
    let plugins = TempDir::new().unwrap();
    let hostile = hostile_copy(plugins.path());
    let home = hostile_home(json!({ "assemble": "thread-panic" }), json!({}));
    let out = assemble(home.path(), &hostile, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout_json(&out)["answeredBy"], "hostile");
    let log = stderr_text(&out);
    let line = log
        .lines()
        .find(|l| l.contains("panic in plugin code"))
        .unwrap_or_else(|| panic!("no trace of the panic: {log}"));
    assert!(
        line.contains(
            r#"(thread "hostile-worker"): hostile: a panic in a thread the engine spawned"#
        ),
        "{line}"
    );
    assert!(line.contains(r#"engine_id="hostile""#), "{line}");
}

/// `pincer <args…>` with the hostile library's constructor writing `marker` (and calling
/// `exit(7)` when `exit` is set).
fn pincer_watching_constructor(home: &Path, args: &[&str], marker: &Path, exit: bool) -> Output {
    let mut command = std::process::Command::new(pincer_bin());
    command
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("PINCER_HOME")
        .env_remove("PINCER_LOG")
        .env("HOSTILE_CONSTRUCTOR_MARKER", marker);
    if exit {
        command.env("HOSTILE_CONSTRUCTOR_EXIT", "1");
    }
    command.output().expect("pincer runs")
}

// 2. Code that never should run: a command opens only the selected engine's library, doctor
// opens libraries only with --load, and what can be checked without running code is.
#[test]
fn libraries_are_opened_only_when_needed_and_checked_before_their_constructor_runs() {
    let work = TempDir::new().unwrap();
    let marker = work.path().join("constructor-ran");
    let plugins = work.path().join("plugins");
    hostile_copy(&plugins);
    copy_plugin(&staged_plugin("sliding-window"), &plugins, "sliding-window");
    let plugins_arg = plugins.display().to_string();
    let conversation = example_conversation().display().to_string();

    // Another engine selected: hostile's library is verified, never opened — its constructor,
    // even one that calls exit(7), does not run.
    for selected in ["legacy", "sliding-window"] {
        let home = home_with(json!({ "plugins": { "slots": { "contextEngine": selected } } }));
        let assemble_args = [
            "assemble",
            "--json",
            "--conversation",
            &conversation,
            "--plugins-dir",
            &plugins_arg,
        ];
        let out = pincer_watching_constructor(home.path(), &assemble_args, &marker, true);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{selected}: {}",
            stderr_text(&out)
        );
        assert_eq!(stdout_json(&out)["answeredBy"], selected);
        let doctor_args = ["doctor", "--json", "--plugins-dir", &plugins_arg];
        let out = pincer_watching_constructor(home.path(), &doctor_args, &marker, true);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{selected}: {}",
            stderr_text(&out)
        );
        let plugin = find_by_id(&stdout_json(&out)["plugins"], "hostile");
        assert_eq!(plugin["status"], "verified", "{plugin}");
        assert!(plugin["sha256"].is_string(), "verified: {plugin}");
        assert!(
            !marker.exists(),
            "{selected}: hostile's constructor never ran"
        );
    }
    // `doctor --load` opens every library: now it runs.
    let home = home_with(json!({}));
    let out = pincer_watching_constructor(
        home.path(),
        &["doctor", "--json", "--load", "--plugins-dir", &plugins_arg],
        &marker,
        false,
    );
    let plugin = find_by_id(&stdout_json(&out)["plugins"], "hostile");
    assert_eq!(plugin["status"], "loaded", "{plugin}");
    assert!(marker.exists(), "opened, the constructor ran");
    std::fs::remove_file(&marker).unwrap();
}

// 2, continued: a library that disagrees with its manifest or with its install is refused
// before it is opened.
#[test]
fn a_library_that_disagrees_with_its_manifest_or_its_install_is_refused_before_its_constructor_runs(
) {
    let doctor_with_marker = |home: &Path, plugins: &Path, marker: &Path| -> Value {
        let plugins = plugins.display().to_string();
        stdout_json(&pincer_watching_constructor(
            home,
            &["doctor", "--json", "--load", "--plugins-dir", &plugins],
            marker,
            false,
        ))
    };
    let home = home_with(json!({}));
    let work = TempDir::new().unwrap();
    let marker = work.path().join("constructor-ran");
    let plugins = work.path().join("plugins");
    let hostile = hostile_copy(&plugins);

    // The manifest's version disagrees with the library's embedded one: refused, unopened.
    let original = read_manifest_json(&hostile);
    let mut manifest = original.clone();
    manifest["version"] = json!("0.2.0");
    write_manifest_json(&hostile, &manifest);
    let plugin = find_by_id(
        &doctor_with_marker(home.path(), &plugins, &marker)["plugins"],
        "hostile",
    );
    assert_eq!(plugin["error"]["code"], "manifest_mismatch", "{plugin}");
    assert!(!marker.exists(), "the library's constructor never ran");

    // The same library, honestly described, is opened: its constructor runs (the marker works).
    write_manifest_json(&hostile, &original);
    let plugin = find_by_id(
        &doctor_with_marker(home.path(), &plugins, &marker)["plugins"],
        "hostile",
    );
    assert_eq!(plugin["status"], "loaded", "{plugin}");
    assert!(marker.exists(), "opened, the constructor ran");
    std::fs::remove_file(&marker).unwrap();

    // `install` records the library's sha256 in the config; a library changed afterwards —
    // its manifest rewritten to match — is refused before it is opened.
    let out = run_pincer(
        home.path(),
        &["plugins", "install", &hostile.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    let config: Value = {
        let text = std::fs::read_to_string(home.path().join("pincer.json")).unwrap();
        json5_value(&text)
    };
    let pinned = config["plugins"]["entries"]["hostile"]["sha256"]
        .as_str()
        .unwrap_or_else(|| panic!("install records the sha256: {config}"))
        .to_owned();
    assert_eq!(Some(pinned.as_str()), original["sha256"].as_str());
    let installed = home.path().join("plugins").join("hostile");
    let library = library_path(&installed);
    let mut bytes = std::fs::read(&library).unwrap();
    bytes.push(0);
    std::fs::write(&library, bytes).unwrap();
    let mut manifest = read_manifest_json(&installed);
    manifest.as_object_mut().unwrap().remove("sha256");
    write_manifest_json(&installed, &manifest);
    let empty = work.path().join("none");
    std::fs::create_dir(&empty).unwrap();
    let plugin = find_by_id(
        &doctor_with_marker(home.path(), &empty, &marker)["plugins"],
        "hostile",
    );
    assert_eq!(plugin["status"], "rejected", "{plugin}");
    assert_eq!(
        plugin["error"]["code"], "installed_pin_mismatch",
        "{plugin}"
    );
    assert!(
        plugin["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!(
                "plugins.entries.hostile.sha256 (recorded by `pincer plugins install`) is {pinned}"
            )),
        "{plugin}"
    );
    assert!(!marker.exists(), "the changed library never ran");
}

/// `pincer.json` as JSON (the CLI writes JSON5-compatible JSON; comments are not used here).
fn json5_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}
