//! The confinement an isolated engine's worker applies to itself
//! (`pincer_host::testing::engines::isolation::confine`), tried on a real separate process: the hidden
//! `pincer sandbox-try` confines itself, prints the protections in force, then tries what the
//! sandbox must refuse or allow. Never the test process itself.
//!
//! Where this machine lacks a protection, the test asserts that `available_protections()`
//! and `pincer doctor` say so, instead of passing silently.
//!
//! Also: the `faulty` engine's process-ending knobs, through the real binary.

#![cfg(target_os = "linux")]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use pincer_host::testing::engines::isolation::confine::{
    available_protections, Protection, SANDBOX_VIOLATION_PREFIX, SANDBOX_VIOLATION_STATUS,
};
use pincer_tests::*;
use serde_json::{json, Value};

/// Runs `pincer sandbox-try` with these writable directories and tries; returns the
/// protections it reported (its first stdout line) and its output.
fn sandbox_try(writable: &[&Path], extra: &[&str], tries: &[&str]) -> (Value, Output) {
    let mut cmd = Command::new(pincer_bin());
    cmd.arg("sandbox-try");
    for dir in writable {
        cmd.arg("--writable").arg(dir);
    }
    cmd.args(extra);
    for t in tries {
        cmd.arg("--try").arg(t);
    }
    let out = cmd.output().expect("pincer runs");
    let stdout = stdout_text(&out);
    let first = stdout.lines().next().unwrap_or_default();
    let protections: Value = serde_json::from_str(first).unwrap_or_else(|e| {
        panic!(
            "sandbox-try printed no protections ({e}): {stdout}\n{}",
            stderr_text(&out)
        )
    });
    (protections, out)
}

fn active(protections: &Value, name: &str) -> bool {
    protections[name]["state"] == "active"
}

/// The refusal line the worker writes for `call`.
fn refusal(call: &str) -> String {
    format!("{SANDBOX_VIOLATION_PREFIX}{call}\n")
}

/// When this machine lacks `name` (`seccomp`, `landlock`), the library's probe and `pincer
/// doctor` must say so plainly; returns whether it is available.
fn available_or_reported_missing(name: &str) -> bool {
    let probed = available_protections();
    let probed = match name {
        "seccomp" => probed.seccomp.clone(),
        "landlock" => probed.landlock.clone(),
        other => panic!("{other}"),
    };
    if probed.is_active() {
        return true;
    }
    let home = TempDir::new().unwrap();
    let report = stdout_json(&run_pincer(home.path(), &["doctor", "--json"]));
    let missing = report["isolation"]["missing"].to_string();
    assert!(
        missing.contains(&format!("{name}: ")),
        "doctor must name the missing {name}: {report}"
    );
    assert!(
        matches!(
            probed,
            Protection::Unavailable { .. } | Protection::Failed { .. }
        ),
        "{probed:?}"
    );
    eprintln!("{name} is not available on this machine: {probed}");
    false
}

#[test]
fn an_internet_socket_is_refused_by_name_and_a_unix_socket_pair_is_not() {
    let (protections, out) = sandbox_try(&[], &[], &["unix-socket", "socket"]);
    if !active(&protections, "seccomp") {
        assert!(!available_or_reported_missing("seccomp"), "{protections}");
        return;
    }
    assert!(
        stdout_text(&out).contains("ok: unix-socket"),
        "{}",
        stdout_text(&out)
    );
    assert_refused(&out, "socket");
    assert!(!stdout_text(&out).contains("ok: socket"));

    // A thread started before the sandbox was applied is filtered too (TSYNC).
    let (_, out) = sandbox_try(&[], &[], &["early:socket"]);
    assert_eq!(out.status.code(), Some(SANDBOX_VIOLATION_STATUS));
    assert!(stderr_text(&out).contains(&refusal("socket")));
}

/// `out` is a worker ended by its sandbox for `call`: status 121 and the call named.
fn assert_refused(out: &Output, call: &str) {
    assert_eq!(
        out.status.code(),
        Some(SANDBOX_VIOLATION_STATUS),
        "{}",
        stdout_text(out)
    );
    assert!(
        stderr_text(out).contains(&refusal(call)),
        "{}",
        stderr_text(out)
    );
}

#[test]
fn running_a_program_is_refused() {
    let (protections, out) = sandbox_try(&[], &[], &["exec"]);
    if !active(&protections, "seccomp") {
        assert!(!available_or_reported_missing("seccomp"), "{protections}");
        return;
    }
    assert_refused(&out, "execve");

    // std's Command: glibc blocks every signal around its clone, so the kernel forces SIGSYS
    // itself (no line): a violation all the same, and nothing ran.
    let (_, out) = sandbox_try(&[], &[], &["spawn"]);
    assert!(
        out.status.code() == Some(SANDBOX_VIOLATION_STATUS)
            || out.status.signal() == Some(libc::SIGSYS),
        "{:?} {}",
        out.status,
        stdout_text(&out)
    );
    assert!(!stdout_text(&out).contains("ok: spawn"));
}

#[test]
fn a_fork_is_refused_while_threads_still_start() {
    let (protections, out) = sandbox_try(&[], &[], &["thread", "fork"]);
    if !active(&protections, "seccomp") {
        assert!(!available_or_reported_missing("seccomp"), "{protections}");
        return;
    }
    let stdout = stdout_text(&out);
    assert!(stdout.contains("ok: thread: a thread ran"), "{stdout}");
    assert_eq!(
        out.status.code(),
        Some(SANDBOX_VIOLATION_STATUS),
        "{stdout}"
    );
    let stderr = stderr_text(&out);
    assert!(
        stderr.contains(&refusal("clone")) || stderr.contains(&refusal("fork")),
        "{stderr}"
    );
    assert!(!stdout.contains("ok: fork"), "{stdout}");

    // clone3 answers ENOSYS, which is what sends glibc back to clone for threads.
    let (_, out) = sandbox_try(&[], &[], &["clone3"]);
    assert!(
        stdout_text(&out).contains(&format!("[errno {}]", libc::ENOSYS)),
        "{}",
        stdout_text(&out)
    );
}

#[test]
fn writes_land_only_beneath_the_writable_directories() {
    let root = TempDir::new().unwrap();
    let state = root.path().join("state");
    let home = root.path().join("home");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let inside = state.join("engine.db");
    let outside = home.join("faulty-was-here");
    let (protections, out) = sandbox_try(
        &[&state],
        &[],
        &[
            &format!("write:{}", inside.display()),
            &format!("write:{}", outside.display()),
        ],
    );
    let stdout = stdout_text(&out);
    assert!(
        stdout.contains(&format!("ok: write:{}", inside.display())),
        "{stdout}"
    );
    assert!(inside.is_file());
    if !active(&protections, "landlock") {
        assert!(!available_or_reported_missing("landlock"), "{protections}");
        return;
    }
    assert!(
        protections["landlockAbi"].as_u64().unwrap_or(0) >= 1,
        "{protections}"
    );
    assert!(
        stdout.contains(&format!(
            "error: write:{}: Permission denied (os error {})",
            outside.display(),
            libc::EACCES
        )),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !outside.exists(),
        "the write outside must not have happened"
    );
}

#[test]
fn a_files_mode_cannot_be_changed_even_where_it_can_be_read() {
    let root = TempDir::new().unwrap();
    let file = root.path().join("secret");
    std::fs::write(&file, "s").unwrap();
    let (protections, out) = sandbox_try(&[], &[], &[&format!("chmod:{}", file.display())]);
    if !active(&protections, "seccomp") {
        assert!(!available_or_reported_missing("seccomp"), "{protections}");
        return;
    }
    assert!(
        stdout_text(&out).contains(&format!("[errno {}]", libc::EPERM)),
        "{}",
        stdout_text(&out)
    );
    use std::os::unix::fs::PermissionsExt;
    assert_ne!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o666
    );
}

#[test]
fn an_allocation_beyond_the_memory_limit_fails() {
    let limit = 1u64 << 30;
    let (protections, out) = sandbox_try(
        &[],
        &["--memory-bytes", &limit.to_string()],
        &["alloc:1048576", &format!("alloc:{}", 2 * limit)],
    );
    assert!(active(&protections, "limits"), "{protections}");
    assert!(
        protections["limits"]["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("RLIMIT_AS={limit}")),
        "{protections}"
    );
    let stdout = stdout_text(&out);
    assert!(stdout.contains("ok: alloc:1048576"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "error: alloc:{}: allocation of {} bytes failed",
            2 * limit,
            2 * limit
        )),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_plugin_library_still_loads_and_the_parent_cannot_be_signalled() {
    let library = library_path(&staged_plugin("faulty"));
    let library_arg = library.display().to_string();
    // Readable when granted (a worker is granted its library's private copy)…
    let (protections, out) = sandbox_try(
        &[],
        &["--readable", &library_arg],
        &[&format!("dlopen:{}", library.display())],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout_text(&out),
        stderr_text(&out)
    );
    if !active(&protections, "seccomp") && !active(&protections, "landlock") {
        return;
    }
    // …and not otherwise: reads are confined too.
    if active(&protections, "landlock") {
        let (_, out) = sandbox_try(&[], &[], &[&format!("dlopen:{}", library.display())]);
        assert_eq!(out.status.code(), Some(1), "{}", stdout_text(&out));
        assert!(
            stdout_text(&out).contains("Permission denied"),
            "{}",
            stdout_text(&out)
        );
    }
    // Even a signal-0 probe of the host: seccomp traps kill() of another process.
    let (_, out) = sandbox_try(&[], &[], &["kill-parent"]);
    assert_ne!(out.status.code(), Some(0), "{}", stdout_text(&out));
}

#[test]
fn doctor_reports_the_protections_this_machine_provides() {
    let home = TempDir::new().unwrap();
    let out = run_pincer(home.path(), &["doctor", "--json"]);
    let report = stdout_json(&out);
    let probed = serde_json::to_value(available_protections()).unwrap();
    for name in [
        "noNewPrivs",
        "seccomp",
        "landlock",
        "capabilities",
        "limits",
    ] {
        let state = report["isolation"]["protections"][name]["state"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {report}"));
        assert_eq!(state, probed[name]["state"], "{name}: {report} vs {probed}");
        let listed = report["isolation"]["missing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|line| {
                line.as_str().unwrap().starts_with(&format!(
                    "{}: ",
                    if name == "noNewPrivs" {
                        "no_new_privs"
                    } else {
                        name
                    }
                ))
            });
        assert_eq!(listed, state != "active", "{name}: {report}");
    }
    let text = stdout_text(&run_pincer(home.path(), &["doctor"]));
    assert!(text.contains("process isolation"), "{text}");
    assert!(text.contains("\n  landlock: "), "{text}");
}

#[test]
fn a_crash_under_the_sandbox_is_still_told_by_its_own_signal() {
    // abort() signals its own thread (tgkill of itself, allowed): SIGABRT, not a violation.
    let (_, out) = sandbox_try(&[], &[], &["thread", "abort"]);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{:?} {}",
        out.status,
        stderr_text(&out)
    );
    assert!(!stderr_text(&out).contains(SANDBOX_VIOLATION_PREFIX));
    // Rust's stack-overflow report (sigaltstack, its SIGSEGV handler, write) still works.
    let (_, out) = sandbox_try(&[], &[], &["stack-overflow"]);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{:?}", out.status);
    assert!(
        stderr_text(&out).contains("has overflowed its stack"),
        "{}",
        stderr_text(&out)
    );
}

/// A home whose selected engine is `faulty` with `config`.
fn faulty_home(config: Value) -> TempDir {
    engine_home("faulty", config)
}

/// A home whose selected engine is `engine` with `config`.
fn engine_home(engine: &str, config: Value) -> TempDir {
    let home = TempDir::new().unwrap();
    let text = json!({
        "plugins": {
            "slots": { "contextEngine": engine },
            "entries": { engine: { "config": config } },
        }
    });
    std::fs::write(home.path().join("pincer.json"), text.to_string()).unwrap();
    home
}

fn assemble_with_faulty(home: &Path, env: &[(&str, &str)]) -> Output {
    assemble_in(home, &staged_plugins_dir(), env)
}

/// `pincer assemble --json` in `home` over the plugins of `plugins_dir`, with `env` set.
fn assemble_in(home: &Path, plugins_dir: &Path, env: &[(&str, &str)]) -> Output {
    let conversation = example_conversation();
    let mut cmd = Command::new(pincer_bin());
    cmd.arg("--home")
        .arg(home)
        .args(["assemble", "--json", "--conversation"])
        .arg(&conversation)
        .arg("--plugins-dir")
        .arg(plugins_dir)
        .env_remove("PINCER_HOME")
        .env_remove("PINCER_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("pincer runs")
}

#[test]
fn faultys_process_ending_knobs_end_the_process() {
    // A null write (`hostile`'s: the one test engine that makes it) ends the process.
    let home = engine_home("hostile", json!({ "assemble": "segv" }));
    let out = assemble_in(home.path(), &staged_variant("hostile"), &[]);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{:?}: {}",
        out.status,
        stderr_text(&out)
    );

    // The constructor exits when the library is loaded, before any engine code: in the
    // throwaway worker that probes a library not seen before, which refuses it (the host lives)…
    // (A worker inherits no environment: the variable reaches it as the entry's grant.)
    let home = faulty_home(json!({}));
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("pincer.json")).unwrap())
            .unwrap();
    config["plugins"]["entries"]["faulty"]["sandbox"] =
        json!({ "env": { "PINCER_FAULTY_CONSTRUCTOR_EXIT": "42" } });
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    let out = assemble_with_faulty(home.path(), &[("PINCER_FAULTY_CONSTRUCTOR_EXIT", "42")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_text(&out));
    assert_eq!(stdout_json(&out)["answeredBy"], "legacy");
    assert!(
        stderr_text(&out).contains("engine worker exited with status 42 while starting"),
        "{}",
        stderr_text(&out)
    );
    // …and in the host itself when the probe is turned off.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("pincer.json")).unwrap())
            .unwrap();
    config["plugins"]["probeLibraries"] = json!(false);
    std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
    let out = assemble_with_faulty(home.path(), &[("PINCER_FAULTY_CONSTRUCTOR_EXIT", "42")]);
    assert_eq!(out.status.code(), Some(42), "{}", stderr_text(&out));
}

#[test]
fn probing_the_protections_leaves_the_calling_process_unconfined() {
    let before = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let probed = available_protections();
    let after = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let field = |status: &str, name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_owned())
    };
    for name in ["NoNewPrivs:", "Seccomp:", "Seccomp_filters:"] {
        assert_eq!(
            field(&before, name),
            field(&after, name),
            "{name} changed in the calling process ({probed})"
        );
    }
    // The calls the sandbox refuses still work here.
    std::net::UdpSocket::bind("127.0.0.1:0").expect("an Internet socket still opens");
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join("still-writable"), "x").unwrap();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    assert_eq!(
        // SAFETY: `limit` is a valid, writable `rlimit` for the call's out-pointer.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    assert_ne!(limit.rlim_max, 256, "the worker's open-files limit leaked");
}

#[test]
fn the_users_unix_sockets_cannot_be_reached_unless_the_policy_allows_it() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("gateway.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let connect = format!("unix-connect:{}", path.display());
    let (protections, out) = sandbox_try(&[], &[], &[&connect]);
    if !active(&protections, "seccomp") {
        assert!(!available_or_reported_missing("seccomp"), "{protections}");
        return;
    }
    assert!(
        stdout_text(&out).contains(&format!("error: {connect}: ")),
        "{}",
        stdout_text(&out)
    );
    assert!(
        stdout_text(&out).contains(&format!("[errno {}]", libc::EPERM)),
        "{}",
        stdout_text(&out)
    );
    let (_, out) = sandbox_try(&[], &["--allow-connect"], &[&connect]);
    assert!(
        stdout_text(&out).contains(&format!("ok: {connect}")),
        "{}",
        stdout_text(&out)
    );
}

#[test]
fn reads_are_confined_to_what_is_granted_and_the_processs_own_proc_entries() {
    let work = TempDir::new().unwrap();
    let canary = work.path().join("canary-secret.txt");
    std::fs::write(&canary, "PINCER_TEST_CANARY file\n").unwrap();
    let granted = work.path().join("granted");
    std::fs::create_dir(&granted).unwrap();
    std::fs::write(granted.join("data.txt"), "granted data\n").unwrap();
    let writable = work.path().join("state");
    std::fs::create_dir(&writable).unwrap();
    std::fs::write(writable.join("own.txt"), "own state\n").unwrap();
    let read = |path: &Path| format!("read:{}", path.display());
    let tries = [
        read(&canary),
        read(&granted.join("data.txt")),
        read(&writable.join("own.txt")),
        "read:/proc/self/status".to_owned(),
        "read:/proc/thread-self/status".to_owned(),
        "read:parent/environ".to_owned(),
        "read:parent/cmdline".to_owned(),
        "read:parent/maps".to_owned(),
        "read:parent/status".to_owned(),
    ];
    let granted_arg = granted.display().to_string();
    // One process per try (sandbox-try stops at the first error).
    let mut stdout = String::new();
    for t in &tries {
        let (protections, out) = sandbox_try(&[&writable], &["--readable", &granted_arg], &[t]);
        if !active(&protections, "landlock") {
            assert!(!available_or_reported_missing("landlock"), "{protections}");
            return;
        }
        stdout.push_str(&stdout_text(&out));
    }
    let outcome = |what: &str| {
        stdout
            .lines()
            .find(|l| l.contains(&format!(" {what}:")))
            .unwrap_or_else(|| panic!("no outcome for {what}: {stdout}"))
            .to_owned()
    };
    let denied = |what: &str| {
        let line = outcome(what);
        assert!(
            line.starts_with("error:") && line.contains("[errno 13]"),
            "{what} must be refused (EACCES): {line}"
        );
    };
    denied(&read(&canary));
    denied("read:parent/environ");
    denied("read:parent/cmdline");
    denied("read:parent/maps");
    denied("read:parent/status");
    for allowed in [
        read(&granted.join("data.txt")),
        read(&writable.join("own.txt")),
        "read:/proc/self/status".to_owned(),
        "read:/proc/thread-self/status".to_owned(),
    ] {
        assert!(outcome(&allowed).starts_with("ok:"), "{stdout}");
    }
    assert!(!stdout.contains("PINCER_TEST_CANARY"), "{stdout}");
}

#[test]
fn a_sandboxed_process_holds_no_capability() {
    let (protections, out) = sandbox_try(&[], &[], &["read:/proc/self/status"]);
    assert_eq!(
        protections["capabilities"]["state"],
        "active",
        "{protections} {}",
        stderr_text(&out)
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_text(&out));
    // The sets themselves, as the kernel reports them, read by the confined process.
    let mut cmd = Command::new(pincer_bin());
    cmd.args(["sandbox-try", "--try", "caps"]);
    let out = cmd.output().unwrap();
    let stdout = stdout_text(&out);
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert!(
            stdout.contains(&format!("{set}:\t0000000000000000")),
            "{set}: {stdout}"
        );
    }
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } == 0 {
        assert!(stdout.contains("CapBnd:\t0000000000000000"), "{stdout}");
    }
}
