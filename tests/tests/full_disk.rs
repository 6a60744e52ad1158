//! A real full file system under the real gateway's long-lived session writer:
//! a small tmpfs mounted in a private mount namespace holds `$PINCER_HOME`; `pincer
//! serve` appends to a session there, the disk is filled, appends fail with a clear error and
//! leave no fragment, space is freed, appends go on, and after a restart every acknowledged
//! append is in the session file, in order, each line parsing, every parent present, and all of
//! them in the context the gateway assembles.
//!
//! Mounting needs root (and a kernel that allows a mount namespace): the test re-runs itself
//! under `unshare --mount`; where that is impossible it is skipped with a notice — except when
//! `CI` is set (CI runs as root), where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use pincer_host::session::SessionTree;
use pincer_tests::served::{Serve, Served};
use serde_json::{json, Value};

/// Set in the re-run child, inside its own mount namespace.
const CHILD: &str = "PINCER_FULL_DISK_CHILD";
/// The child's exit status when it cannot mount the tmpfs.
const CANNOT_MOUNT: i32 = 77;
const TEST: &str = "a_full_disk_fails_appends_clearly_and_never_costs_an_acknowledged_one";
const KEY: &str = "agent:main:full-disk";

#[test]
fn a_full_disk_fails_appends_clearly_and_never_costs_an_acknowledged_one() {
    if std::env::var_os(CHILD).is_some() {
        in_private_namespace();
        return;
    }
    let skip = |why: String| {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set, so this test must run, but {why}"
        );
        eprintln!("notice: skipping the full-disk test: {why}");
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("it needs root to mount a tmpfs".into());
    }
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output();
    let out = match out {
        Ok(out) => out,
        Err(err) => return skip(format!("`unshare` cannot be run ({err})")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(CANNOT_MOUNT) || stderr.starts_with("unshare:") {
        return skip(format!("no private tmpfs could be mounted: {stderr}"));
    }
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the full-disk run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    eprintln!("{stderr}");
}

/// `pincer --log info serve` with no plugins, its home on the tmpfs and its socket and log in
/// `outside`, once its socket answers.
fn serve(home: &Path, outside: &Path) -> Served {
    let plugins = outside.join("no-plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    Served::start(
        home,
        Serve {
            socket: outside.join("gw.sock"),
            log: outside.join("serve.log"),
            plugins_dir: plugins,
            global: &["--log", "info"],
            args: &[],
        },
    )
}

/// Ingests a user message of `text` into the session `KEY`: its entry id, or the error answer.
fn ingest(gateway: &Served, text: &str) -> Result<String, (u16, Value)> {
    let (status, answer) = gateway.call(
        "ingest",
        Some(KEY),
        json!({"message": {"role": "user", "content": text}}),
    );
    if status == 200 && answer["ok"] == true {
        Ok(answer["result"]["entryIds"][0].as_str().unwrap().to_owned())
    } else {
        Err((status, answer))
    }
}

/// A message big enough that appending it needs pages the full disk does not have.
fn big(n: usize) -> String {
    format!("message {n} ") + &"x".repeat(24 * 1024)
}

/// Writes zeros into `filler` until the file system is full.
fn fill(filler: &Path) {
    use std::io::Write as _;
    let mut file = std::fs::File::create(filler).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(err) => panic!("filling the disk: {err}"),
        }
    }
    // What is left is less than a page.
    assert!(
        file.write(&chunk).is_err() || file.write(&chunk).is_err(),
        "the disk is full"
    );
}

fn session_file(home: &Path) -> PathBuf {
    let dir = home.join("agents/main/sessions");
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .expect("the session file")
}

fn in_private_namespace() {
    let outside = tempfile::tempdir().unwrap();
    let mount_point = outside.path().join("disk");
    std::fs::create_dir(&mount_point).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "pincer-full-disk"])
        .arg(&mount_point)
        .output()
        .unwrap();
    if !mounted.status.success() {
        eprintln!(
            "cannot mount a tmpfs: {}",
            String::from_utf8_lossy(&mounted.stderr)
        );
        std::process::exit(CANNOT_MOUNT);
    }
    let home = mount_point.join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("pincer.json"), "{}\n").unwrap();

    let gateway = serve(&home, outside.path());
    let mut acked = Vec::new();
    for n in 0..10 {
        acked.push(ingest(&gateway, &format!("before {n}")).unwrap());
    }
    let file = session_file(&home);

    fill(&mount_point.join("filler"));
    let mut failures = 0;
    for n in 0..3 {
        match ingest(&gateway, &big(n)) {
            Ok(id) => acked.push(id),
            Err((status, answer)) => {
                failures += 1;
                let message = answer["error"]["message"].as_str().unwrap_or_default();
                assert_eq!(status, 500, "{answer}");
                assert_eq!(answer["error"]["code"], "session_append_failed", "{answer}");
                assert!(
                    message.contains("No space left on device")
                        && message.contains("free disk space"),
                    "the error says what happened and what to do: {answer}"
                );
                let text = std::fs::read_to_string(&file).unwrap();
                assert!(text.ends_with('\n'), "no fragment is left behind");
            }
        }
    }
    assert!(failures >= 2, "appends failed on the full disk");
    eprintln!("full disk: {failures} of 3 appends refused, each with no fragment left");

    std::fs::remove_file(mount_point.join("filler")).unwrap();
    for n in 0..10 {
        acked.push(ingest(&gateway, &format!("after {n}")).unwrap());
    }
    let _ = gateway.stop();

    // Reopened: every acknowledged append, in order, every line whole, every parent there.
    let text = std::fs::read_to_string(&file).unwrap();
    for (n, line) in text.lines().enumerate() {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "line {} parses: {line:.80}",
            n + 1
        );
    }
    let tree = SessionTree::read(&file).unwrap();
    assert_eq!(tree.skipped_lines, 0);
    let path: Vec<&str> = tree.path(None).iter().map(|e| e.id()).collect();
    let acked_on_path: Vec<&str> = path
        .iter()
        .copied()
        .filter(|id| acked.iter().any(|a| a == id))
        .collect();
    assert_eq!(acked_on_path, acked, "every acknowledged append, in order");
    for entry in &tree.entries {
        if let Some(parent) = entry.parent_id() {
            assert!(tree.get(parent).is_some(), "{} has its parent", entry.id());
        }
    }

    // The gateway, started again, serves the whole context.
    let gateway = serve(&home, outside.path());
    let (status, answer) =
        gateway.call("assemble", Some(KEY), json!({"full": true, "refs": "each"}));
    assert_eq!(status, 200, "{answer}");
    let ids: Vec<&str> = answer["result"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["entryId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, acked, "the context holds every acknowledged message");
    let _ = gateway.stop();
    eprintln!(
        "full disk: {} acknowledged appends all present after reopening",
        acked.len()
    );
}
