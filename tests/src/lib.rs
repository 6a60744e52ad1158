//! Support for pincer's black-box tests: where the staged plugins and the `pincer` binary are,
//! throwaway homes and plugin folders, and the shared τ-bench transcripts.
//!
//! The plugins are staged by `cargo xtask build-plugins` (which `cargo xtask test` runs
//! first). A test that needs them fails with a message saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use tempfile::TempDir;

pub mod chat_server;
pub mod served;

/// Polls `condition` every 10 ms until it holds or `timeout` passes; whether it held. The way
/// a test waits for an observable state instead of sleeping: the timeout is generous and only
/// ends a test that would otherwise hang.
pub fn wait_for(timeout: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        if condition() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The file `faulty` (configured with `hangMarker: true`) writes when it starts to hang in
/// `method`, in its state directory under `home`.
pub fn faulty_hang_marker(home: &Path, method: &str) -> PathBuf {
    home.join("state")
        .join("engines")
        .join("faulty")
        .join(format!("hanging-{method}"))
}

/// Fires `abort` once `faulty` hangs in `method` (its [`faulty_hang_marker`] exists), on a
/// thread of its own; join the thread to learn whether the hang was seen within a minute (it
/// fires the abort either way, so that the call ends).
pub fn abort_once_faulty_hangs(
    home: &Path,
    method: &str,
    abort: std::sync::Arc<pincer_plugin_api::abi::latest::AbortController>,
) -> std::thread::JoinHandle<()> {
    let marker = faulty_hang_marker(home, method);
    std::thread::spawn(move || {
        let seen = wait_for(std::time::Duration::from_secs(60), || marker.exists());
        abort.abort();
        assert!(
            seen,
            "faulty never started to hang: no {}",
            marker.display()
        );
    })
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_owned()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Names the built `pincer` binary as this test process's worker program
/// (`pincer_host::isolation::set_worker_program`): a libtest `main` cannot call
/// `serve_worker_if_requested`, so runtimes opened in the test process start their isolated
/// engines and library probes from it. Called by the staged-plugin helpers below.
pub fn use_pincer_as_worker() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let bin = std::fs::canonicalize(pincer_bin()).unwrap_or_else(|_| pincer_bin());
        if let Err(err) = pincer_host::isolation::set_worker_program(&bin) {
            panic!("{err}");
        }
    });
}

/// The folder `cargo xtask build-plugins` stages normal plugins into (and the built `pincer`
/// named as this process's worker program: [`use_pincer_as_worker`]).
pub fn staged_plugins_dir() -> PathBuf {
    use_pincer_as_worker();
    staged_plugins_path()
}

/// [`staged_plugins_dir`] without naming a worker program.
pub fn staged_plugins_path() -> PathBuf {
    let dir = std::env::var_os("PINCER_STAGED_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("plugins"));
    assert!(
        dir.join("sliding-window")
            .join("pincer.plugin.json")
            .is_file(),
        "staged plugins not found in {}: run `cargo xtask build-plugins` (or `cargo xtask test`)",
        dir.display()
    );
    dir
}

/// The folder of one staged normal plugin (`sliding-window`, `faulty`).
pub fn staged_plugin(id: &str) -> PathBuf {
    staged_plugins_dir().join(id)
}

/// The folder of one staged variant (`faulty-abort`, `future-api`).
pub fn staged_variant(name: &str) -> PathBuf {
    use_pincer_as_worker();
    let dir = std::env::var_os("PINCER_PLUGIN_VARIANTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("plugin-variants"));
    let path = dir.join(name);
    assert!(
        path.join("pincer.plugin.json").is_file(),
        "staged variant {} not found: run `cargo xtask build-plugins`",
        path.display()
    );
    path
}

/// Copies a plugin folder (manifest + library) into `dest/<name>` and returns it.
pub fn copy_plugin(from: &Path, dest: &Path, name: &str) -> PathBuf {
    let to = dest.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    to
}

/// A copy of staged plugin `id` in `dest/<id>` whose manifest pins no sha256, so that its
/// library can be replaced by a new build (as a reload test or bench does).
pub fn unpinned_plugin_copy(id: &str, dest: &Path) -> PathBuf {
    std::fs::create_dir_all(dest).unwrap();
    let plugin = copy_plugin(&staged_plugin(id), dest, id);
    let mut manifest = read_manifest_json(&plugin);
    manifest.as_object_mut().unwrap().remove("sha256");
    write_manifest_json(&plugin, &manifest);
    plugin
}

/// Reads a plugin folder's manifest as JSON.
pub fn read_manifest_json(plugin_dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(plugin_dir.join("pincer.plugin.json")).unwrap())
        .unwrap()
}

/// Writes a plugin folder's manifest.
pub fn write_manifest_json(plugin_dir: &Path, value: &serde_json::Value) {
    std::fs::write(
        plugin_dir.join("pincer.plugin.json"),
        serde_json::to_string_pretty(value).unwrap(),
    )
    .unwrap();
}

/// The staged library file of a plugin folder.
pub fn library_path(plugin_dir: &Path) -> PathBuf {
    let manifest = read_manifest_json(plugin_dir);
    plugin_dir.join(
        manifest["library"]
            .as_str()
            .expect("staged manifests name their library"),
    )
}

/// The `pincer` binary next to the test executable (`target/<profile>/pincer`).
pub fn pincer_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("PINCER_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join(format!("pincer{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} not found: build it with `cargo build -p pincer-host` (cargo xtask test does)",
        bin.display()
    );
    bin
}

/// Runs `pincer --home <home> <args…>` and returns its output.
pub fn run_pincer(home: &Path, args: &[&str]) -> Output {
    Command::new(pincer_bin())
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("PINCER_HOME")
        .env_remove("PINCER_LOG")
        .output()
        .expect("pincer runs")
}

/// The bundled example conversation.
pub fn example_conversation() -> PathBuf {
    workspace_root()
        .join("examples")
        .join("airline-conversation.json")
}

/// The τ-bench airline transcripts in `../shared/data`, or `None` (with a printed notice)
/// when they are absent outside CI. In CI (`CI` set) their absence fails the test.
pub fn tau_bench_transcripts() -> Option<serde_json::Value> {
    let path = workspace_root()
        .join("..")
        .join("shared")
        .join("data")
        .join("tau-bench-airline")
        .join("gpt-4o-airline.shared.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(serde_json::from_str(&text).expect("the shared transcripts are JSON")),
        Err(err) => {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "CI is set but the shared transcripts are missing at {}: {err}",
                    path.display()
                );
            }
            eprintln!(
                "notice: skipping: shared transcripts not found at {} ({err})",
                path.display()
            );
            None
        }
    }
}

/// Writes a session of `entries` entries to `path` the way OpenClaw users' sessions look and
/// the sessions OpenClaw 2026.9.6 was measured on were built (`docs/BENCHMARKS.md`): the
/// τ-bench transcripts' messages in order (repeated), a branch back every `entries / 10`
/// entries (every third with a branch summary) and a compaction every `entries / 8` entries
/// keeping the context from a recent user message. Returns the number of context messages at
/// the leaf.
pub fn generate_session(tasks: &serde_json::Value, entries: usize, path: &Path) -> usize {
    use pincer_host::session::{build_session_context, Durability, SessionTree, SessionWriter};
    use pincer_plugin_api::abi::latest::Role;
    let messages: Vec<_> = tasks
        .as_array()
        .expect("an array of tasks")
        .iter()
        .flat_map(|task| {
            let traj = task["traj"].as_array().cloned().unwrap_or_default();
            pincer_plugin_api::interop::openai_chat_messages(&traj)
        })
        .collect();
    let _ = std::fs::remove_file(path);
    let mut writer = SessionWriter::create(path, "/srv/agent", Durability::None).expect("create");
    let (branch_every, compact_every) = ((entries / 10).max(1), (entries / 8).max(1));
    let mut ids: Vec<String> = Vec::with_capacity(entries);
    let mut last_user: Option<String> = None;
    let mut branches = 0;
    for i in 0..entries {
        let id = if i > 0 && i % branch_every == 0 {
            branches += 1;
            let back = ids[ids.len() - (branch_every / 2).max(1)].clone();
            if branches % 3 == 0 {
                writer
                    .branch_with_summary(Some(&back), "The user explored another option.", None)
                    .expect("branch")
            } else {
                writer.branch(&back).expect("branch");
                let message = &messages[i % messages.len()];
                writer.append_message(message).expect("append")
            }
        } else if i > 0 && i % compact_every == 0 {
            let first_kept = last_user
                .clone()
                .unwrap_or_else(|| ids[ids.len() - 1].clone());
            writer
                .append_compaction(
                    "Summary of the conversation so far.",
                    &first_kept,
                    12_000,
                    None,
                )
                .expect("compaction")
        } else {
            let message = &messages[i % messages.len()];
            let id = writer.append_message(message).expect("append");
            if message.role() == Role::User {
                last_user = Some(id.clone());
            }
            id
        };
        ids.push(id);
    }
    drop(writer);
    let tree = SessionTree::read(path).expect("readable");
    build_session_context(&tree, None).messages.len()
}

/// A process's standard output, as text.
pub fn stdout_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The standard output of a command that must have exited 0; otherwise the test fails showing
/// both streams.
#[track_caller]
pub fn ok(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        stdout_text(out),
        stderr_text(out)
    );
    stdout_text(out)
}

/// A path as a command-line argument.
pub fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

/// A process's standard error, as text.
pub fn stderr_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The entry ids of the `message` records of session `key` (agent `main`) in `home`, in file
/// order; a line that does not parse (a torn last line after a kill) is skipped, as readers
/// skip it.
pub fn session_message_ids(home: &Path, key: &str) -> Vec<String> {
    use serde_json::Value;
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("agents/main/sessions/sessions.json")).unwrap(),
    )
    .unwrap();
    let id = index[key]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session {key} is indexed: {index}"));
    std::fs::read_to_string(home.join(format!("agents/main/sessions/{id}.jsonl")))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["type"] == "message")
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A process's standard output as JSON; panics with both streams when it is not.
#[track_caller]
pub fn stdout_json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            stdout_text(out),
            stderr_text(out)
        )
    })
}

/// The element of `list` (a JSON array of objects) whose `"id"` is `id`.
#[track_caller]
pub fn find_by_id(list: &serde_json::Value, id: &str) -> serde_json::Value {
    list.as_array()
        .expect("an array")
        .iter()
        .find(|item| item["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no \"{id}\" in {list}"))
}

/// Asserts that `failure` is `method`'s per-call timeout and that it quarantined `engine_id`
/// under that operation.
pub fn assert_timed_out_and_quarantined(
    quarantine: &pincer_host::runtime::Quarantine,
    engine_id: &str,
    failure: &pincer_host::EngineCallError,
    method: &str,
) {
    assert_eq!(
        failure.kind,
        pincer_host::testing::engines::instance::CallErrorKind::TimedOut
    );
    assert!(
        failure
            .message
            .starts_with(&format!("{method} timed out after")),
        "{}",
        failure.message
    );
    let record = quarantine
        .get(engine_id)
        .unwrap_or_else(|| panic!("{engine_id} quarantined"));
    assert_eq!(record.operation, method);
}

/// An `assemble` request over all of `t` for `session`, without a budget or host parameters.
pub fn assemble_request(
    t: &pincer_host::session::Transcript,
    session: &str,
) -> std::sync::Arc<pincer_host::testing::engines::request::AssembleRequest> {
    std::sync::Arc::new(pincer_host::testing::engines::request::AssembleRequest {
        session_id: std::sync::Arc::from(session),
        messages: t.shared_messages(),
        entry_ids: t.entry_ids(),
        token_budget: None,
        host: pincer_host::testing::engines::request::HostInputs::default(),
    })
}

/// An `ingest` of the first message of `t` for `session`.
pub fn ingest_request(
    t: &pincer_host::session::Transcript,
    session: &str,
) -> std::sync::Arc<pincer_host::testing::engines::request::IngestRequest> {
    std::sync::Arc::new(pincer_host::testing::engines::request::IngestRequest {
        session_id: std::sync::Arc::from(session),
        messages: t.shared_messages(),
        entry_ids: t.entry_ids(),
        index: 0,
        is_heartbeat: false,
        host: pincer_host::testing::engines::request::HostInputs::default(),
    })
}

/// Whether this run isolates every plugin (`PINCER_ISOLATION=process`, the CI's second pass
/// over the engine suites): a test whose outcome differs there says so.
pub fn isolated_run() -> bool {
    std::env::var("PINCER_ISOLATION").as_deref() == Ok("process")
}
