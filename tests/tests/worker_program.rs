//! A process that serves no workers — this test binary, whose libtest `main` cannot call
//! `pincer_host::isolation::serve_worker_if_requested()`, and which names no worker program —
//! cannot probe a library: the library is refused, never opened unprobed, and the refusal
//! says what to do. (Alone in its file: every other test process names the built `pincer` as
//! its worker program through the staged-plugin helpers.)

use pincer_host::config::PincerHome;
use pincer_host::{Runtime, RuntimeOptions};
use pincer_tests::*;
use serde_json::json;

#[test]
fn a_library_whose_probe_cannot_run_is_refused_with_what_to_do() {
    assert!(pincer_host::isolation::worker_program().is_err());
    let home = TempDir::new().unwrap();
    let open = |config: serde_json::Value| {
        std::fs::write(home.path().join("pincer.json"), config.to_string()).unwrap();
        let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
        options.extra_plugin_dirs = vec![staged_plugins_path()];
        Runtime::open(options).unwrap()
    };
    let runtime = open(json!({ "plugins": { "slots": { "contextEngine": "sliding-window" } } }));
    let plugin = runtime
        .plugins()
        .iter()
        .find(|p| p.id == "sliding-window")
        .cloned()
        .unwrap();
    let error = plugin.error.expect("refused");
    assert!(
        error.message.contains("its probe could not run (this program cannot start engine workers: its main must call pincer_host::isolation::serve_worker_if_requested() first"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("plugins.probeLibraries: false"),
        "{}",
        error.message
    );
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "legacy");
    drop(resolved);
    runtime.shutdown();

    // The operator's explicit opt-out opens it unprobed.
    let runtime = open(json!({ "plugins": {
        "slots": { "contextEngine": "sliding-window" },
        "probeLibraries": false,
    } }));
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "sliding-window");
    drop(resolved);
    runtime.shutdown();
}
