//! A crash outside any call is remembered too, through the real `pincer`
//! binary (and `pincer serve`) with the `hostile` engine in process: a constructor calling
//! `exit` with the probe off, an `atexit` handler that segfaults after the answer is printed,
//! a thread that crashes just after its call returned, and a timer thread that takes the
//! gateway down after its engine was created. Each time the first run dies, the next start
//! quarantines the engine with what happened, and the agent keeps answering on `legacy`.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use pincer_tests::served::{Serve, Served};
use pincer_tests::*;
use serde_json::{json, Value};

/// A home with `hostile` selected, `engine_config` as its config, and `plugins` merged into
/// the `plugins` object.
fn hostile_home(engine_config: Value, plugins: Value) -> TempDir {
    let home = TempDir::new().unwrap();
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
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    home
}

/// `pincer assemble --json` over the example conversation with the plugins of `plugins`, with
/// `env` set.
fn assemble(home: &Path, plugins: &Path, env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(pincer_bin());
    command
        .arg("--home")
        .arg(home)
        .args(["assemble", "--json", "--conversation"])
        .arg(example_conversation())
        .arg("--plugins-dir")
        .arg(plugins)
        .env_remove("PINCER_HOME")
        .env_remove("PINCER_LOG");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("pincer runs")
}

/// The quarantine record of `hostile` in an `assemble --json` or `doctor --json` report.
fn hostile_record(report: &Value) -> Value {
    report["quarantine"]
        .as_array()
        .and_then(|records| records.iter().find(|r| r["engineId"] == "hostile"))
        .cloned()
        .unwrap_or_else(|| panic!("hostile is not quarantined: {report}"))
}

/// The run after a crash: answered by legacy, `hostile` quarantined by a crash record whose
/// operation is one of `operations` and whose reason contains `reason`; `health` says so.
/// Returns the record.
fn assert_remembered(home: &Path, plugins: &Path, operations: &[&str], reason: &str) -> Value {
    let out = assemble(home, plugins, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "legacy", "{report}");
    let record = hostile_record(&report);
    assert_eq!(record["crash"], true, "{record}");
    assert!(
        operations.contains(&record["operation"].as_str().unwrap()),
        "{operations:?}: {record}"
    );
    assert!(
        record["reason"].as_str().unwrap().contains(reason),
        "{reason}: {record}"
    );
    let health = stdout_text(&run_pincer(home, &["health"]));
    assert!(
        health
            .starts_with("Context engine: warning (1 quarantined; downgraded to legacy: hostile)"),
        "{health}"
    );
    record
}

#[test]
fn a_constructor_calling_exit_with_the_probe_off_happens_once_and_then_its_library_stays_closed() {
    let work = TempDir::new().unwrap();
    let plugins = work.path().join("plugins");
    copy_plugin(&staged_variant("hostile"), &plugins, "hostile");
    let hostile = plugins.join("hostile");
    let marker = work.path().join("constructor-ran");
    let exit = Path::new("1");
    let env = [
        ("HOSTILE_CONSTRUCTOR_MARKER", marker.as_path()),
        ("HOSTILE_CONSTRUCTOR_EXIT", exit),
    ];
    let home = hostile_home(json!({}), json!({ "probeLibraries": false }));

    let first = assemble(home.path(), &hostile, &env);
    assert_eq!(first.status.code(), Some(7), "{}", stderr_text(&first));
    assert!(marker.exists(), "the constructor ran in the host");
    std::fs::remove_file(&marker).unwrap();

    // The constructor would exit again: the library is not opened.
    let second = assemble(home.path(), &hostile, &env);
    assert_eq!(second.status.code(), Some(0), "{}", stderr_text(&second));
    let report = stdout_json(&second);
    assert_eq!(report["answeredBy"], "legacy", "{report}");
    assert!(!marker.exists(), "the library was not opened again");
    let record = hostile_record(&report);
    assert_eq!(record["operation"], "load", "{record}");
    let pid = record["pid"].as_u64().unwrap();
    assert_eq!(
        record["reason"],
        format!("the host process died while the engine's library was being opened (dlopen and its constructors) (pid {pid})")
    );
    assert!(
        stderr_text(&second).contains("library_crashed_host")
            || stderr_text(&second).contains("is not opened"),
        "{}",
        stderr_text(&second)
    );
    // doctor says why the plugin is not loaded, and health names it.
    let doctor = stdout_json(&run_pincer(
        home.path(),
        &[
            "doctor",
            "--json",
            "--plugins-dir",
            hostile.to_str().unwrap(),
        ],
    ));
    let plugin = find_by_id(&doctor["plugins"], "hostile");
    assert_eq!(plugin["error"]["code"], "library_crashed_host", "{plugin}");
    assert_eq!(hostile_record(&doctor)["operation"], "load");
    assert!(!marker.exists(), "doctor did not open it either");
    let health = stdout_text(&run_pincer(home.path(), &["health"]));
    assert!(health.contains("hostile"), "{health}");

    // Cleared, and with a constructor that no longer exits, the engine answers again.
    run_pincer(home.path(), &["health", "--clear"]);
    let fixed = assemble(home.path(), &hostile, &[]);
    assert_eq!(
        stdout_json(&fixed)["answeredBy"],
        "hostile",
        "{}",
        stderr_text(&fixed)
    );
}

#[test]
fn an_atexit_handler_that_segfaults_after_the_answer_is_printed_is_remembered() {
    let plugins = TempDir::new().unwrap();
    let hostile = copy_plugin(&staged_variant("hostile"), plugins.path(), "hostile");
    let home = hostile_home(json!({ "atexitSegv": true }), json!({}));
    let first = assemble(home.path(), &hostile, &[]);
    assert_eq!(
        first.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        stderr_text(&first)
    );
    assert_eq!(
        stdout_json(&first)["answeredBy"],
        "hostile",
        "the answer was printed before the exit"
    );
    assert_remembered(
        home.path(),
        &hostile,
        &["exit"],
        "died of SIGSEGV in the engine's own code during process exit (atexit handlers, destructors)",
    );
    // Its library is not opened again: the handler would be registered again.
    let out = assemble(home.path(), &hostile, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    assert_eq!(stdout_json(&out)["answeredBy"], "legacy");
}

#[test]
fn a_thread_that_crashes_just_after_its_call_returned_is_remembered_every_time() {
    let plugins = TempDir::new().unwrap();
    let hostile = copy_plugin(&staged_variant("hostile"), plugins.path(), "hostile");
    for trial in 0..3 {
        let home = hostile_home(json!({ "afterCallSegv": true }), json!({}));
        let first = assemble(home.path(), &hostile, &[]);
        assert_eq!(
            first.status.signal(),
            Some(libc::SIGSEGV),
            "trial {trial}: {}",
            stderr_text(&first)
        );
        assert_remembered(
            home.path(),
            &hostile,
            &["lifetime", "exit"],
            "died of SIGSEGV in the engine's own code",
        );
    }
}

/// `pincer --log info serve --no-watch` over `plugins`, its log in `home/<name>.log`, once its
/// socket answers.
fn serve(home: &Path, plugins: &Path, name: &str) -> Served {
    Served::start(
        home,
        Serve {
            socket: home.join("gw.sock"),
            log: home.join(format!("{name}.log")),
            plugins_dir: plugins.to_owned(),
            global: &["--log", "info"],
            args: &["--no-watch"],
        },
    )
}

#[test]
fn a_timer_thread_that_segfaults_after_its_engine_was_created_takes_the_gateway_down_once() {
    let plugins = TempDir::new().unwrap();
    let hostile = copy_plugin(&staged_variant("hostile"), plugins.path(), "hostile");
    let home = hostile_home(json!({ "timerSegvMs": 300 }), json!({}));

    let mut first = serve(home.path(), &hostile, "first");
    // The engine is created (at the latest) by the first call; its timer fires 300 ms later.
    let _ = first.try_call("assemble", Some("agent:main:t"), json!({}));
    let status = first
        .wait_for_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the timer did not take the gateway down: {}", first.log()));
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{}", first.log());

    // The next start in the same home: hostile is quarantined, the gateway stays up and
    // answers on legacy.
    let mut second = serve(home.path(), &hostile, "second");
    let (_, answer) = second.call("assemble", Some("agent:main:t"), json!({}));
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["result"]["answeredBy"], "legacy", "{answer}");
    assert!(
        second.wait_for_exit(Duration::from_millis(1_500)).is_none(),
        "the second gateway died too: {}",
        second.log()
    );
    let (_, health) = second.call("health", None, Value::Null);
    let engine = health["result"]["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["engineId"] == "hostile")
        .cloned()
        .unwrap_or_else(|| panic!("hostile in {health}"));
    assert_eq!(engine["quarantined"], true, "{engine}");
    let records = stdout_json(&run_pincer(home.path(), &["health", "--json"]));
    let record = records["contextEngines"]["quarantined"]
        .as_array()
        .and_then(|records| records.iter().find(|r| r["engineId"] == "hostile"))
        .cloned()
        .unwrap_or_else(|| panic!("hostile in {records}"));
    assert_eq!(record["operation"], "lifetime", "{record}");
    assert!(
        record["reason"].as_str().unwrap().starts_with(
            "the host process died of SIGSEGV in the engine's own code outside any call"
        ),
        "{record}"
    );
}
