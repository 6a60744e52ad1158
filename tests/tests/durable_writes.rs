//! No acknowledged append is ever lost or corrupted, whatever the disk does.
//!
//! Faults are injected through the host's one I/O seam (`pincer_host::testing::disk::faults`), armed for
//! each case's own temporary folder: short writes that go on, `ENOSPC` before anything is
//! written, a short write then `ENOSPC` (the fragment a full disk leaves), a failed `fdatasync`
//! (`EIO`), and a failed `ftruncate` on top of a torn write. For any sequence of appends, commits and faults, after
//! recovery every acknowledged append is in the file, in order, every line parses, and every
//! parent link resolves — for the single writer (what the gateway's sessions use) and for group
//! commit. The real full disk is `full_disk.rs`.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pincer_host::session::{
    Durability, OnExisting, SessionKey, SessionTree, SessionWriteError, SessionWriter,
    SharedSessionWriter,
};
use pincer_host::testing::disk::faults::{self, Fault, Op};
use pincer_plugin_api::Message;
use proptest::prelude::*;

/// Faults queued per operation, each used by the next call of its kind.
#[derive(Default)]
struct Script {
    queued: Mutex<HashMap<Op, VecDeque<Fault>>>,
}

impl Script {
    fn arm(dir: &Path) -> (Arc<Script>, faults::Armed) {
        let script = Arc::new(Script::default());
        let plan = Arc::clone(&script);
        let armed = faults::arm(dir, move |op: Op, _: &Path| plan.next(op));
        (script, armed)
    }

    fn queue(&self, op: Op, faults: &[Fault]) {
        let mut queued = self.queued.lock().unwrap();
        queued.entry(op).or_default().extend(faults.iter().copied());
    }

    fn next(&self, op: Op) -> Option<Fault> {
        self.queued.lock().unwrap().get_mut(&op)?.pop_front()
    }

    fn clear(&self) {
        self.queued.lock().unwrap().clear();
    }
}

/// What the disk does to the next step.
#[derive(Debug, Clone, Copy)]
enum Disk {
    Fine,
    /// Writes come back short (`n` bytes at a time, three times), then go on: the append
    /// succeeds whole.
    Short(usize),
    /// The write fails before writing anything.
    NoSpace,
    /// The write writes `n` bytes of the line, then the disk is full.
    Torn(usize),
    /// The `fdatasync` fails.
    SyncFails,
    /// Torn, and cutting the fragment off fails too.
    TornUncut(usize),
}

impl Disk {
    fn queue(self, script: &Script) {
        match self {
            Disk::Fine => {}
            Disk::Short(n) => script.queue(Op::Write, &[Fault::Short(n); 3]),
            Disk::NoSpace => script.queue(Op::Write, &[Fault::NO_SPACE]),
            Disk::Torn(n) => script.queue(Op::Write, &[Fault::Short(n), Fault::NO_SPACE]),
            Disk::SyncFails => script.queue(Op::Sync, &[Fault::IO]),
            Disk::TornUncut(n) => {
                script.queue(Op::Write, &[Fault::Short(n), Fault::NO_SPACE]);
                script.queue(Op::Truncate, &[Fault::IO]);
            }
        }
    }
}

fn disk() -> impl Strategy<Value = Disk> {
    prop_oneof![
        5 => Just(Disk::Fine),
        1 => (1usize..40).prop_map(Disk::Short),
        1 => Just(Disk::NoSpace),
        2 => (1usize..120).prop_map(Disk::Torn),
        2 => Just(Disk::SyncFails),
        1 => (1usize..120).prop_map(Disk::TornUncut),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Append(Disk),
    Commit(Disk),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => disk().prop_map(Step::Append),
        1 => disk().prop_map(Step::Commit),
    ]
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::Entry),
        Just(Durability::Turn),
        Just(Durability::None)
    ]
}

/// The checks after recovery: every line parses, every parent resolves, the entries form one
/// path, and `acked` is on it in order.
fn check_file(path: &Path, acked: &[String], attempts: usize) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'), "the file ends with a complete line");
    for (n, line) in text.lines().enumerate() {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {} does not parse ({e}): {line:?}", n + 1));
        assert!(value.is_object(), "line {} is an object", n + 1);
    }
    let tree = SessionTree::read(path).unwrap();
    assert_eq!(tree.skipped_lines, 0, "no line was dropped:\n{text}");
    assert!(tree.entries.len() <= attempts, "no entry was made up");
    for entry in &tree.entries {
        if let Some(parent) = entry.parent_id() {
            assert!(
                tree.get(parent).is_some(),
                "entry {} has a parent {parent} that exists",
                entry.id()
            );
        }
    }
    let on_path: Vec<&str> = tree.path(None).iter().map(|e| e.id()).collect();
    assert_eq!(
        on_path.len(),
        tree.entries.len(),
        "every entry is on the active path (nothing orphaned)"
    );
    let acked_on_path: Vec<&str> = on_path
        .iter()
        .copied()
        .filter(|id| acked.iter().any(|a| a == id))
        .collect();
    assert_eq!(
        acked_on_path, acked,
        "every acknowledged append is there, in order"
    );
}

fn assert_clear(err: &SessionWriteError) {
    let text = err.to_string();
    match err.code() {
        "session_append_failed" => assert!(
            text.contains("nothing of this append was kept") && text.contains("free disk space"),
            "{text}"
        ),
        "session_write_poisoned" => assert!(
            text.contains("what reached the disk is unknown")
                && text.contains("open the session again"),
            "{text}"
        ),
        other => panic!("unexpected error {other}: {text}"),
    }
}

fn run_single_writer(durability: Durability, steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let (script, _armed) = Script::arm(dir.path());
    let mut writer = SessionWriter::create(&path, "/", durability).unwrap();
    let mut acked: Vec<String> = Vec::new();
    // Appended, not yet durable (durability `turn` until a commit).
    let mut pending: Vec<String> = Vec::new();
    let mut attempts = 0;
    for (n, step) in steps.iter().enumerate() {
        let result = match *step {
            Step::Append(disk) => {
                disk.queue(&script);
                attempts += 1;
                let result = writer.append_message(&Message::user(format!("message {n}")));
                script.clear();
                result.map(|id| match durability {
                    Durability::Turn => pending.push(id),
                    _ => acked.push(id),
                })
            }
            Step::Commit(disk) => {
                disk.queue(&script);
                let result = writer.commit();
                script.clear();
                result.map(|()| acked.append(&mut pending))
            }
        };
        if let Err(err) = result {
            assert_clear(&err);
            if writer.is_poisoned().is_some() {
                assert_eq!(err.code(), "session_write_poisoned");
                // Refused until recovered, and nothing written meanwhile.
                let again = writer.append_message(&Message::user("refused"));
                assert_eq!(again.unwrap_err().code(), "session_write_poisoned");
                writer.recover().unwrap();
                // What was not durable is cut off.
                pending.clear();
            }
        }
    }
    if durability != Durability::None {
        writer.commit().unwrap();
        acked.append(&mut pending);
    }
    drop(writer);
    check_file(&path, &acked, attempts);
    // Reopening (as the CLI does) continues the same path.
    let mut writer = SessionWriter::open(&path, durability).unwrap();
    acked.push(writer.append_message(&Message::user("after")).unwrap());
    writer.commit().unwrap();
    drop(writer);
    check_file(&path, &acked, attempts + 1);
}

fn run_group_commit(durability: Durability, steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let (script, _armed) = Script::arm(dir.path());
    let writer = SessionWriter::create(&path, "/", durability).unwrap();
    let mut shared = Some(SharedSessionWriter::new(writer).unwrap());
    let mut acked: Vec<String> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    let mut attempts = 0;
    for (n, step) in steps.iter().enumerate() {
        let current = shared.as_ref().unwrap();
        let result = match *step {
            Step::Append(disk) => {
                disk.queue(&script);
                attempts += 1;
                let message = Message::user(format!("message {n}"));
                // Blocking and async appends take the same write path (the flusher's, for
                // async ones).
                let result = if n % 2 == 0 {
                    current.append_message(&message)
                } else {
                    futures_lite_block_on(current.append_message_async(&message))
                };
                script.clear();
                result.map(|id| match durability {
                    Durability::Turn => pending.push(id),
                    _ => acked.push(id),
                })
            }
            Step::Commit(disk) => {
                disk.queue(&script);
                let result = current.commit();
                script.clear();
                result.map(|()| acked.append(&mut pending))
            }
        };
        if let Err(err) = result {
            let disk = match *step {
                Step::Append(disk) | Step::Commit(disk) => disk,
            };
            if !matches!(disk, Disk::TornUncut(_)) {
                // Before any recovery: the failed batch left no fragment.
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(text.ends_with('\n'), "no fragment is left: {text:?}");
            }
            assert_eq!(err.code(), "session_write_poisoned", "{err}");
            assert_clear(&err);
            let refused = current.append_message(&Message::user("refused"));
            assert_eq!(refused.unwrap_err().code(), "session_write_poisoned");
            // Group commit stays failed: the writer is recovered (cut back to what is durable).
            let recovered = shared.take().unwrap().recover().unwrap();
            shared = Some(SharedSessionWriter::new(recovered).unwrap());
            pending.clear();
        }
    }
    let current = shared.take().unwrap();
    current.commit().unwrap();
    acked.append(&mut pending);
    drop(current.into_inner().unwrap());
    check_file(&path, &acked, attempts);
}

/// Polls `future` to its end on this thread (the flusher thread wakes it).
fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        std::thread::park();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn single_writer_never_loses_an_acknowledged_append(
        durability in durability(),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        run_single_writer(durability, &steps);
    }

    #[test]
    fn group_commit_never_loses_an_acknowledged_append(
        durability in durability(),
        steps in proptest::collection::vec(step(), 1..30),
    ) {
        run_group_commit(durability, &steps);
    }
}

/// The bug this guards against: a torn append on a full disk, then space again. The next append
/// starts a line of its own and is the child of the last acknowledged one.
#[test]
fn a_torn_append_is_cut_off_before_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let (script, _armed) = Script::arm(dir.path());
    let mut writer = SessionWriter::create(&path, "/", Durability::Entry).unwrap();
    let first = writer.append_message(&Message::user("first")).unwrap();
    let before = std::fs::read(&path).unwrap();
    Disk::Torn(12).queue(&script);
    let err = writer
        .append_message(&Message::user("lost"))
        .expect_err("the disk is full");
    assert_eq!(err.code(), "session_append_failed");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the fragment is cut off"
    );
    let second = writer.append_message(&Message::user("second")).unwrap();
    drop(writer);
    let tree = SessionTree::read(&path).unwrap();
    assert_eq!(tree.skipped_lines, 0);
    assert_eq!(tree.get(&second).unwrap().parent_id(), Some(first.as_str()));
}

/// Every durable write outside the session files goes through the seam too: a failed sync of
/// a file written beside and renamed over fails a `pincer.json` edit and the `sessions.json`
/// index, and leaves each file as it was.
#[test]
fn the_other_durable_writes_go_through_the_seam() {
    use pincer_host::config::edit::{ConfigEditor, Edit};
    use pincer_host::session::{JsonlStore, SessionStore as _};

    let home = tempfile::tempdir().unwrap();
    let seen: Arc<Mutex<Vec<(Op, PathBuf)>>> = Arc::default();
    let record = Arc::clone(&seen);
    let _armed = faults::arm(home.path(), move |op: Op, path: &Path| {
        record.lock().unwrap().push((op, path.to_owned()));
        let temporary = path.to_string_lossy().ends_with(".tmp");
        (op == Op::Sync && temporary).then_some(Fault::IO)
    });

    // pincer.json: the edit is refused and the file unchanged.
    let config = home.path().join("pincer.json");
    std::fs::write(&config, "{\n  // kept\n}\n").unwrap();
    let mut editor = ConfigEditor::open(&config).unwrap();
    let err = editor
        .apply(&[Edit::set(&["plugins", "enabled"], true)])
        .expect_err("the sync fails");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "{\n  // kept\n}\n"
    );
    drop(editor);

    // sessions.json: the session's file is written, its index entry is refused.
    let store = JsonlStore::new(home.path().join("agents"));
    let err = store
        .create(
            &SessionKey::parse("k").unwrap(),
            "/",
            Durability::Entry,
            OnExisting::Refuse,
        )
        .expect_err("the sync fails");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    let index = home.path().join("agents/main/sessions/sessions.json");
    assert!(!index.exists(), "no index is left half-written");

    let seen = seen.lock().unwrap();
    for (what, suffix) in [
        ("pincer.json", ".tmp"),
        ("the session file", ".jsonl"),
        ("the backup of pincer.json", "pincer.json.bak"),
    ] {
        assert!(
            seen.iter()
                .any(|(_, p)| p.to_string_lossy().ends_with(suffix)),
            "{what} was written through the seam: {seen:?}"
        );
    }
    let listing: Vec<_> = std::fs::read_dir(home.path().join("agents/main/sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !listing.iter().any(|name| name.ends_with(".tmp")),
        "no temporary file is left: {listing:?}"
    );
}

/// The writes the merged branches added go through the seam too, each shown by failing it once
/// on purpose: the store's removal of a session it could not index, an engine's state folder,
/// the gateway's removal of a stale socket, and an uninstall's removal of its staging folder.
#[test]
fn the_merged_branches_writes_go_through_the_seam() {
    use pincer_host::session::{JsonlStore, SessionStore as _};
    use pincer_host::testing::plugins::library::EngineDirs;

    let home = tempfile::tempdir().unwrap();
    let sessions = home.path().join("agents/main/sessions");
    let engines = home.path().join("state/engines");
    let socket = home.path().join("gateway.sock");
    let plugins = home.path().join("plugins");
    let staging = plugins.join(".staging");
    let plan = {
        let (sessions, engines, socket, staging) = (
            sessions.clone(),
            engines.clone(),
            socket.clone(),
            staging.clone(),
        );
        move |op: Op, path: &Path| {
            let fail = match op {
                // The index's write fails, then so does the removal of the unindexed session.
                Op::Sync => path.starts_with(&sessions) && path.to_string_lossy().ends_with(".tmp"),
                Op::Remove => {
                    (path.starts_with(&sessions) && path.extension() == Some("jsonl".as_ref()))
                        || path == socket
                        || path == staging
                }
                Op::CreateDir => path.starts_with(&engines),
                _ => false,
            };
            fail.then_some(Fault::IO)
        }
    };
    let armed = faults::arm(home.path(), plan);

    // The store: the index is refused and the session's removal fails, so the file stays.
    let store = JsonlStore::new(home.path().join("agents"));
    let err = store
        .create(
            &SessionKey::parse("k").unwrap(),
            "/",
            Durability::Entry,
            OnExisting::Refuse,
        )
        .expect_err("the sync fails");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".jsonl"))
        .collect();
    assert_eq!(left.len(), 1, "the removal asked the seam: {left:?}");

    // An engine's state folder: not made, and the engine gets none.
    let dirs = EngineDirs {
        engine_state_root: Some(engines.clone()),
        ..EngineDirs::default()
    };
    assert_eq!(dirs.engine_state_dir("e"), None);
    assert!(!engines.exists());

    // The gateway's stale socket (nothing listens on it): its removal fails, and binding says so.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let err = pincer_host::testing::gateway::bind_socket(&socket).expect_err("the removal fails");
    assert!(err.to_string().contains("removing stale"), "{err}");
    assert!(socket.exists());

    // An uninstall: the plugin goes, the emptied staging folder's removal fails, so it stays.
    let plugin = plugins.join("p");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.json"), "{}").unwrap();
    pincer_host::testing::plugins::install::uninstall(&plugin, &plugins).unwrap();
    assert!(!plugin.exists());
    assert!(
        staging.is_dir(),
        "the staging folder's removal asked the seam"
    );

    // Unarmed, the same calls succeed.
    drop(armed);
    assert_eq!(dirs.engine_state_dir("e"), Some(engines.join("e")));
    std::fs::remove_dir(&staging).unwrap();
    let plugin = plugins.join("q");
    std::fs::create_dir_all(&plugin).unwrap();
    pincer_host::testing::plugins::install::uninstall(&plugin, &plugins).unwrap();
    assert!(!staging.exists());
}

/// The gateway's long-lived writer after a failed `fdatasync`: the call is refused as
/// poisoned, saying what to do; the gateway's next call on the session cuts the file back to
/// its last durable entry and goes on — nothing acknowledged is lost, nothing unacknowledged
/// is kept, and the context is whole. After `ENOSPC` the writer goes on at once.
#[test]
fn the_gateways_session_goes_on_after_failed_writes_and_syncs() {
    use pincer_host::config::PincerHome;
    use pincer_host::gateway::{Gateway, GatewayParts};
    use pincer_host::harness::{Harness, HarnessOptions};
    use pincer_host::model::{ModelError, ModelProvider, ModelReply, ModelRequest, NoTools};
    use pincer_host::session::JsonlStore;
    use pincer_host::testing::gateway::parse_call;
    use pincer_host::{Runtime, RuntimeOptions};

    struct NoModel;
    impl ModelProvider for NoModel {
        fn name(&self) -> &str {
            "none"
        }
        fn complete(&self, _: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
            Err(ModelError::Protocol {
                message: "not used".into(),
            })
        }
    }

    let home = tempfile::tempdir().unwrap();
    let runtime =
        Arc::new(Runtime::open(RuntimeOptions::new(PincerHome::new(home.path().into()))).unwrap());
    let source = runtime.slot_source(None);
    let harness = Arc::new(Harness::with_source(
        Arc::clone(&source),
        JsonlStore::new(home.path().join("agents")),
        Arc::new(NoModel),
        Arc::new(NoTools),
        HarnessOptions::new(1_000_000),
    ));
    let gateway = Gateway::new(GatewayParts {
        runtime: Arc::clone(&runtime),
        source,
        harness,
        has_model: false,
        call_timeout: std::time::Duration::from_secs(60),
    });
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (script, _armed) = Script::arm(home.path());
    let call = |method: &str, params: serde_json::Value| {
        let body =
            serde_json::json!({"method": method, "session": "agent:main:disk", "params": params});
        let (method, request) = parse_call(body.to_string().as_bytes()).unwrap();
        tokio.block_on(gateway.call(method, request))
    };
    let ingest = |text: &str| {
        call(
            "ingest",
            serde_json::json!({"message": {"role": "user", "content": text}}),
        )
        .map(|served| {
            let result: serde_json::Value = serde_json::from_str(served.result.get()).unwrap();
            result["entryIds"][0].as_str().unwrap().to_owned()
        })
    };

    let mut acked = vec![ingest("one").unwrap(), ingest("two").unwrap()];
    let sessions = home.path().join("agents/main/sessions");
    let file = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let durable = std::fs::read(&file).unwrap();

    // A failed fdatasync: refused, and the writer stops.
    script.queue(Op::Sync, &[Fault::IO]);
    let err = ingest("three, never durable").expect_err("the sync fails");
    assert_eq!(
        (err.status, err.code),
        (500, "session_write_poisoned"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("fdatasync failed") && err.message.contains("open the session again"),
        "{}",
        err.message
    );
    script.clear();
    // The next call cuts the unacknowledged line off and goes on.
    acked.push(ingest("four").unwrap());
    let text = std::fs::read(&file).unwrap();
    assert!(text.starts_with(&durable));
    assert!(!String::from_utf8_lossy(&text).contains("never durable"));

    // A torn write on a full disk: refused, cut off, and the very next append goes on.
    Disk::Torn(20).queue(&script);
    let err = ingest("five, torn").expect_err("the disk is full");
    assert_eq!(err.code, "session_append_failed", "{}", err.message);
    script.clear();
    acked.push(ingest("six").unwrap());

    let assembled = call(
        "assemble",
        serde_json::json!({"full": true, "refs": "each"}),
    )
    .unwrap();
    let assembled: serde_json::Value = serde_json::from_str(assembled.result.get()).unwrap();
    let ids: Vec<&str> = assembled["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["entryId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids, acked,
        "the context holds every acknowledged message, in order"
    );
    drop(gateway);
    runtime.shutdown();
    check_file(&file, &acked, 6);
}

/// A plugin install on a disk that fills up mid-copy fails with the disk's error and leaves
/// the plugins folder as it was: no half-copied plugin, nothing left in `.staging`.
#[test]
fn a_plugin_install_on_a_full_disk_leaves_the_plugins_folder_as_it_was() {
    let home = tempfile::tempdir().unwrap();
    let plugins = home.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let (script, _armed) = Script::arm(&plugins);
    // The library's bytes are written from the verified copy: the disk fills up there.
    script.queue(Op::Write, &[Fault::Short(4096), Fault::NO_SPACE]);
    let source = pincer_tests::staged_plugin("sliding-window");
    let err = pincer_host::testing::plugins::install::install(&source, &plugins, false)
        .expect_err("the disk is full");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    let left: Vec<_> = walk(&plugins);
    assert!(left.is_empty(), "nothing is left behind: {left:?}");
    // With space again the same install goes through.
    script.clear();
    pincer_host::testing::plugins::install::install(&source, &plugins, false).unwrap();
    assert!(plugins.join("sliding-window").is_dir());
}

/// Every file and folder below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

/// The quarantine mirror in `state/`: a write that fails on the disk leaves the mirror as it
/// was (and no temporary file); the next write goes through.
#[test]
fn a_failed_quarantine_mirror_write_leaves_the_mirror_whole() {
    use pincer_host::runtime::Quarantine;

    let state = tempfile::tempdir().unwrap();
    let quarantine = Quarantine::new(Some(state.path()));
    assert!(quarantine.record("first", None, "assemble", "boom"));
    let files = walk(state.path());
    let mirror = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("the mirror")
        .clone();
    let before = std::fs::read(&mirror).unwrap();
    let (script, _armed) = Script::arm(state.path());
    script.queue(Op::Write, &[Fault::Short(10), Fault::NO_SPACE]);
    assert!(quarantine.record("second", None, "assemble", "boom"));
    assert_eq!(
        std::fs::read(&mirror).unwrap(),
        before,
        "the mirror is whole"
    );
    let left: Vec<_> = walk(state.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "no temporary file is left: {left:?}");
    script.clear();
    assert!(quarantine.record("third", None, "assemble", "boom"));
    let text = std::fs::read_to_string(&mirror).unwrap();
    assert!(text.contains("\"third\""), "{text}");
}
