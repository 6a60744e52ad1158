//! What an isolated engine can read and know, through the real `pincer` binary and the
//! `hostile` engine as a snoop (`plugins/testing/hostile/src/snoop.rs`): it reads what its
//! config names and hands it to the model in `systemPromptAddition`. Every target is a canary
//! this test created in its own temporary folders (a file under the test's `$PINCER_HOME`,
//! another session's transcript, a variable of the host's environment) or the host process
//! that test started — never a real system file.
//!
//! Also: the worker program is the running host itself, never a file found by name, and a
//! host of any name still probes.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Output};

use pincer_tests::*;
use serde_json::{json, Value};

const CANARY: &str = "PINCER_TEST_CANARY_SECRET=sk-canary-4242";

/// Whether this machine confines reads (Landlock); where it does not, an isolated worker
/// refuses to start unless its entry accepts a weaker sandbox (`sandbox.allowWeak`; the
/// decision is unit-tested in `pincer_host::testing::engines::isolation`).
fn reads_confined() -> bool {
    pincer_host::testing::engines::isolation::confine::available_protections()
        .landlock
        .is_active()
}

/// `home/pincer.json` selecting an isolated `hostile` that snoops on `snoop`, with `entry`'s
/// extra keys.
fn snooping_home(home: &Path, snoop: &str, entry: Value) {
    let mut e = json!({ "isolation": "process", "config": { "snoop": snoop } });
    if let Value::Object(extra) = entry {
        for (k, v) in extra {
            e[k] = v;
        }
    }
    let config = json!({ "plugins": { "slots": { "contextEngine": "hostile" }, "entries": { "hostile": e } } });
    std::fs::write(home.join("pincer.json"), config.to_string()).unwrap();
}

/// `program --home home assemble --json …` with the hostile plugin and the canary variables in
/// the host's environment.
fn assemble_with(program: &Path, home: &Path) -> Output {
    Command::new(program)
        .arg("--home")
        .arg(home)
        .args(["assemble", "--json", "--conversation"])
        .arg(example_conversation())
        .arg("--plugins-dir")
        .arg(staged_variant("hostile"))
        .env_remove("PINCER_HOME")
        .env("PINCER_TEST_CANARY_SECRET", "sk-canary-4242")
        .env("OPENAI_API_KEY", "sk-canary-openai")
        .env("HOME", home)
        .output()
        .expect("pincer runs")
}

/// What the snoop got: `Ok(systemPromptAddition)` when the engine answered, `Err(failure)`
/// when it was refused (and `legacy` answered). Asserts that no canary leaked anywhere in the
/// output either way.
fn snoop(home: &Path, snoop: &str, entry: Value) -> Result<String, String> {
    snooping_home(home, snoop, entry);
    let out = assemble_with(&pincer_bin(), home);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    let report = stdout_json(&out);
    match report["answeredBy"].as_str() {
        Some("hostile") => Ok(report["systemPromptAddition"]
            .as_str()
            .unwrap_or_default()
            .to_owned()),
        _ => Err(report["failure"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{report}"))
            .to_owned()),
    }
}

#[test]
fn an_isolated_engine_reads_neither_the_home_nor_other_sessions_nor_the_hosts_proc_entries() {
    let home = TempDir::new().unwrap();
    if !reads_confined() {
        // No Landlock here: the worker refuses to start rather than run with reads open.
        let failure = snoop(home.path(), "read:/proc/self/status", json!({})).unwrap_err();
        assert!(failure.contains("the worker refuses to start"), "{failure}");
        return;
    }
    let canary = home.path().join("canary-secret.txt");
    std::fs::write(&canary, CANARY).unwrap();
    let sessions = home.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let transcript = sessions.join("another-session.jsonl");
    std::fs::write(
        &transcript,
        format!(
            "{}\n",
            json!({ "type": "message", "message": { "role": "user", "content": CANARY } })
        ),
    )
    .unwrap();
    let config = home.path().join("pincer.json");
    for target in [
        format!("read:{}", canary.display()),
        format!("read:{}", transcript.display()),
        format!("read:{}", config.display()),
        format!("list:{}", home.path().display()),
        "parent:environ".to_owned(),
        "parent:cmdline".to_owned(),
        "parent:maps".to_owned(),
        "parent:fd".to_owned(),
        "parent:status".to_owned(),
        "list:/proc".to_owned(),
    ] {
        let got = snoop(home.path(), &target, json!({}));
        let failure = got.expect_err(&format!("{target} must be refused"));
        assert!(
            failure.contains("Permission denied (os error 13)"),
            "{target}: {failure}"
        );
        assert!(!failure.contains("sk-canary"), "{target}: {failure}");
    }
    // Its own process is its own to read, and an operator's grant is honoured: the snoop
    // works, so the refusals above are the sandbox's.
    let own = snoop(home.path(), "read:/proc/self/status", json!({})).unwrap();
    assert!(own.contains("NoNewPrivs:\t1"), "{own}");
    let granted = snoop(
        home.path(),
        &format!("read:{}", canary.display()),
        json!({ "sandbox": { "readPaths": [canary] } }),
    )
    .unwrap();
    assert!(granted.contains(CANARY), "{granted}");
    // doctor shows the grant.
    let doctor = stdout_json(&run_pincer(home.path(), &["doctor", "--json"]));
    let grants = &doctor["isolation"]["grants"];
    assert_eq!(grants[0]["plugin"], "hostile", "{doctor}");
    assert_eq!(
        grants[0]["readPaths"][0],
        canary.display().to_string(),
        "{doctor}"
    );
    let text = stdout_text(&run_pincer(home.path(), &["doctor"]));
    assert!(
        text.contains(&format!("hostile: may also read {}", canary.display())),
        "{text}"
    );
}

#[test]
fn an_isolated_engine_of_a_root_host_holds_no_capability() {
    if !reads_confined() {
        return;
    }
    let home = TempDir::new().unwrap();
    let status = snoop(home.path(), "read:/proc/self/status", json!({})).unwrap();
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert!(
            status.contains(&format!("{set}:\t0000000000000000")),
            "{set}: {status}"
        );
    }
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } == 0 {
        assert!(status.contains("CapBnd:\t0000000000000000"), "{status}");
    }
}

#[test]
fn an_isolated_engine_starts_with_a_minimal_environment_and_only_what_is_granted() {
    let home = TempDir::new().unwrap();
    let env = snoop(home.path(), "env", json!({})).unwrap();
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(!env.contains("sk-canary"), "{env}");
    for absent in [
        "PINCER_TEST_CANARY_SECRET",
        "OPENAI_API_KEY",
        "HOME",
        "PATH",
        "USER",
    ] {
        assert!(!names.contains(&absent), "{absent} crossed: {env}");
    }
    assert!(names.contains(&"PINCER_WORKER_LANES"), "{env}");
    // A grant is explicit, and is all that is added.
    let env = snoop(
        home.path(),
        "env",
        json!({ "sandbox": { "env": { "LANG": "C.UTF-8" } } }),
    )
    .unwrap();
    assert!(env.lines().any(|l| l == "LANG=C.UTF-8"), "{env}");
    assert!(!env.contains("sk-canary"), "{env}");
    // doctor names the granted variables, not their values.
    let doctor = stdout_text(&run_pincer(home.path(), &["doctor"]));
    assert!(
        doctor.contains("hostile: worker environment sets LANG"),
        "{doctor}"
    );
    assert!(!doctor.contains("C.UTF-8"), "{doctor}");
}

/// A folder holding a copy of the `pincer` binary under another name, a planted `pincer`
/// script beside it that records being run, and the marker it would write.
struct RenamedHost {
    dir: TempDir,
}

impl RenamedHost {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new().unwrap();
        let host = dir.path().join("renamed-host");
        std::fs::copy(pincer_bin(), &host).unwrap();
        std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
        let planted = dir.path().join("pincer");
        std::fs::write(
            &planted,
            format!(
                "#!/bin/sh\necho \"$@\" >> {}\nexit 0\n",
                dir.path().join("planted-ran").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
        RenamedHost { dir }
    }

    fn host(&self) -> std::path::PathBuf {
        self.dir.path().join("renamed-host")
    }

    fn assert_planted_never_ran(&self) {
        let marker = self.dir.path().join("planted-ran");
        assert!(
            !marker.exists(),
            "the planted pincer ran: {}",
            std::fs::read_to_string(&marker).unwrap_or_default()
        );
    }
}

#[test]
fn the_worker_is_the_running_host_never_a_file_found_by_name() {
    let renamed = RenamedHost::new();
    let home = TempDir::new().unwrap();
    // An isolated engine runs in a worker started from the renamed host itself.
    snooping_home(home.path(), "read:/proc/self/status", json!({}));
    let out = Command::new(renamed.host())
        .arg("--home")
        .arg(home.path())
        .args(["assemble", "--json", "--conversation"])
        .arg(example_conversation())
        .arg("--plugins-dir")
        .arg(staged_variant("hostile"))
        .env_remove("PINCER_HOME")
        .env(
            "PATH",
            format!(
                "{}:{}",
                renamed.dir.path().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "hostile", "{report}");
    renamed.assert_planted_never_ran();

    // In process, a host of any name still probes a library before opening it: a
    // constructor that calls exit(7) ends the probe's worker, not the host.
    std::fs::write(
        home.path().join("pincer.json"),
        json!({ "plugins": {
            "slots": { "contextEngine": "hostile" },
            "entries": { "hostile": { "sandbox": { "env": { "HOSTILE_CONSTRUCTOR_EXIT": "1" } } } },
        } })
        .to_string(),
    )
    .unwrap();
    let out = Command::new(renamed.host())
        .arg("--home")
        .arg(home.path())
        .args(["assemble", "--json", "--conversation"])
        .arg(example_conversation())
        .arg("--plugins-dir")
        .arg(staged_variant("hostile"))
        .env_remove("PINCER_HOME")
        .env_remove("PINCER_ISOLATION")
        .env("HOSTILE_CONSTRUCTOR_EXIT", "1")
        .env("PATH", renamed.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    let report = stdout_json(&out);
    assert_eq!(report["answeredBy"], "legacy", "{report}");
    assert!(
        stderr_text(&out).contains("engine worker exited with status 7 while starting"),
        "{}",
        stderr_text(&out)
    );
    renamed.assert_planted_never_ran();

    // doctor names the worker program: this executable.
    let doctor = stdout_json(
        &Command::new(renamed.host())
            .arg("--home")
            .arg(home.path())
            .args(["doctor", "--json"])
            .env_remove("PINCER_HOME")
            .output()
            .unwrap(),
    );
    let program = doctor["isolation"]["workerProgram"].as_str().unwrap();
    assert!(
        program.starts_with(&format!("this executable ({}", renamed.host().display())),
        "{program}"
    );
    assert_eq!(doctor["isolation"]["probeLibraries"], true);
}

#[test]
fn doctor_shows_that_libraries_are_opened_unprobed_when_the_operator_turns_probes_off() {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({ "plugins": { "probeLibraries": false } }).to_string(),
    )
    .unwrap();
    let doctor = stdout_json(&run_pincer(home.path(), &["doctor", "--json"]));
    assert_eq!(doctor["isolation"]["probeLibraries"], false, "{doctor}");
    let text = stdout_text(&run_pincer(home.path(), &["doctor"]));
    assert!(
        text.contains(
            "plugins.probeLibraries is false: libraries are opened in this process without a probe"
        ),
        "{text}"
    );
}
