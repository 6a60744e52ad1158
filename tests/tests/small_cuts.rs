//! The operator's small cuts, each through the real binary (or the real gateway): what
//! `pincer` prints must say the truth in the operator's words — paths as they are, ids filled
//! in, no internal names, no false warnings, no advice that does not apply — and an edit of a
//! `pincer.json` with a byte-order mark keeps it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pincer_tests::chat_server::ChatServer;
use pincer_tests::{
    ok, path_arg, pincer_bin, run_pincer, staged_plugin, staged_plugins_dir, stderr_text,
};
use serde_json::{json, Value};
use tempfile::TempDir;

/// A copy of the staged plugin `id` in `<dir>/<folder>/<id>`; the plugins folder.
fn plugin_in(dir: &Path, folder: &str, id: &str) -> PathBuf {
    let plugins = dir.join(folder);
    let to = plugins.join(id);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(staged_plugin(id)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    plugins
}

/// A short transcript of OpenAI chat messages (two turns).
fn transcript(dir: &Path) -> PathBuf {
    let path = dir.join("chat.json");
    std::fs::write(
        &path,
        json!([
            {"role": "system", "content": "You are an airline agent."},
            {"role": "user", "content": "I want to change my flight."},
            {"role": "assistant", "content": "Sure, what is your reservation id?"},
            {"role": "user", "content": "It is ABC123."},
            {"role": "assistant", "content": "Thanks, changing it now."},
        ])
        .to_string(),
    )
    .unwrap();
    path
}

#[test]
fn plugins_inspect_prints_the_source_folder_as_it_is_on_disk() {
    let home = TempDir::new().unwrap();
    let plugins = plugin_in(home.path(), "My Plugins-DIR", "sliding-window");
    let text = ok(&run_pincer(
        home.path(),
        &[
            "plugins",
            "inspect",
            "sliding-window",
            "--plugins-dir",
            &path_arg(&plugins),
        ],
    ));
    let source = text
        .lines()
        .find(|l| l.starts_with("source"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        source.ends_with(&format!("{}", plugins.join("sliding-window").display())),
        "{source}"
    );
}

#[test]
fn a_plugin_disabled_by_its_entry_is_named_by_its_own_key() {
    let home = TempDir::new().unwrap();
    let plugins = plugin_in(home.path(), "plugins-dir", "sliding-window");
    std::fs::write(
        home.path().join("pincer.json"),
        json!({"plugins": {"entries": {"sliding-window": {"enabled": false}}}}).to_string(),
    )
    .unwrap();
    let dir = path_arg(&plugins);
    for args in [
        vec!["plugins", "list", "--plugins-dir", &dir],
        vec![
            "plugins",
            "inspect",
            "sliding-window",
            "--plugins-dir",
            &dir,
        ],
    ] {
        let text = ok(&run_pincer(home.path(), &args));
        assert!(
            text.contains("plugins.entries.sliding-window.enabled"),
            "{args:?}: {text}"
        );
        assert!(!text.contains("<id>"), "{args:?}: {text}");
    }
}

#[test]
fn turn_lines_name_the_precheck_route_as_the_report_does() {
    let home = TempDir::new().unwrap();
    let chat = transcript(home.path());
    for (engine, route) in [("legacy", "fits"), ("lossless", "skipped")] {
        let out = run_pincer(
            home.path(),
            &[
                "run",
                "--import",
                &path_arg(&chat),
                "--session",
                &format!("routes-{engine}"),
                "--engine",
                engine,
                "--plugins-dir",
                &path_arg(&staged_plugins_dir()),
            ],
        );
        let text = ok(&out);
        let turns: Vec<&str> = text.lines().filter(|l| l.starts_with("turn ")).collect();
        assert!(!turns.is_empty(), "{text}");
        for line in turns {
            assert!(line.contains(&format!("precheck {route}")), "{line}");
            for internal in ["Fits", "Skipped", "CompactOnly", "Truncate"] {
                assert!(!line.contains(internal), "{line}");
            }
        }
    }
}

#[test]
fn lossless_compaction_says_what_it_kept_and_compact_shares_run_s_default_window() {
    let home = TempDir::new().unwrap();
    let plugins = plugin_in(home.path(), "lossless-only", "lossless");
    let dir = path_arg(&plugins);
    // A long conversation, imported (not run): the engine has no budget of its own for it.
    let mut chat = vec![json!({"role": "system", "content": "You are an airline agent."})];
    for i in 0..40 {
        chat.push(json!({"role": "user", "content": format!("Question {i}: {}", "please look at my booking and the flights of the week ".repeat(8))}));
        chat.push(json!({"role": "assistant", "content": format!("Answer {i}: {}", "here is what I found about the booking and the flights ".repeat(8))}));
    }
    let file = home.path().join("long.json");
    std::fs::write(&file, Value::Array(chat).to_string()).unwrap();
    for key in ["default-window", "small-window"] {
        ok(&run_pincer(
            home.path(),
            &["sessions", "import", &path_arg(&file), "--key", key],
        ));
    }
    // Without --context-window, as `run`: 128,000 tokens, which this session fits.
    let out = run_pincer(
        home.path(),
        &[
            "compact",
            "default-window",
            "--engine",
            "lossless",
            "--plugins-dir",
            &dir,
        ],
    );
    let text = ok(&out);
    assert!(!text.contains("no token budget known"), "{text}");
    assert!(text.contains("not compacted: budget_met"), "{text}");
    // A small window: compacted, and the line says what happened to the file.
    let out = run_pincer(
        home.path(),
        &[
            "compact",
            "small-window",
            "--engine",
            "lossless",
            "--plugins-dir",
            &dir,
            "--context-window",
            "2048",
        ],
    );
    let text = ok(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("compacted "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!line.contains('?'), "{line}");
    assert!(
        line.ends_with("nothing cut from the session file (the engine keeps its own summaries)"),
        "{line}"
    );
}

#[test]
fn enabling_an_enabled_engine_does_not_say_it_answers_again() {
    let home = TempDir::new().unwrap();
    ok(&run_pincer(
        home.path(),
        &[
            "plugins",
            "install",
            &path_arg(&staged_plugin("sliding-window")),
        ],
    ));
    let text = ok(&run_pincer(
        home.path(),
        &["plugins", "enable", "sliding-window"],
    ));
    assert_eq!(
        text,
        "Plugin \"sliding-window\" is already enabled.\nThe \"contextEngine\" slot selects \"sliding-window\": that engine answers.\n"
    );
}

#[test]
fn a_pincer_json_that_is_not_utf8_is_named_so_not_as_a_permission_problem() {
    let home = TempDir::new().unwrap();
    let config = home.path().join("pincer.json");
    std::fs::write(&config, b"{\n  plugins: { deny: ['caf\xe9'] },\n}\n").unwrap();
    for args in [
        vec!["plugins", "list"],
        vec!["plugins", "disable", "sliding-window"],
    ] {
        let out = run_pincer(home.path(), &args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        let err = stderr_text(&out);
        assert!(!err.contains("permissions"), "{args:?}: {err}");
        assert!(err.contains("not UTF-8"), "{args:?}: {err}");
        assert!(
            err.contains("pincer.json:2:"),
            "{args:?}: names the line: {err}"
        );
    }
    assert_eq!(
        std::fs::read(&config).unwrap(),
        b"{\n  plugins: { deny: ['caf\xe9'] },\n}\n",
        "nothing rewritten"
    );
}

#[test]
fn a_pincer_json_with_a_byte_order_mark_is_edited_and_keeps_it() {
    let home = TempDir::new().unwrap();
    let config = home.path().join("pincer.json");
    std::fs::write(
        &config,
        "\u{feff}// notes\n{\n  plugins: { deny: ['nothing'] },\n}\n",
    )
    .unwrap();
    ok(&run_pincer(
        home.path(),
        &[
            "plugins",
            "install",
            &path_arg(&staged_plugin("sliding-window")),
        ],
    ));
    ok(&run_pincer(
        home.path(),
        &["plugins", "disable", "sliding-window"],
    ));
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.starts_with("\u{feff}// notes\n"), "{text:?}");
    let listed: Value = serde_json::from_str(&ok(&run_pincer(
        home.path(),
        &["plugins", "list", "--json"],
    )))
    .unwrap();
    let plugin = &listed["plugins"][0];
    assert_eq!(plugin["id"], "sliding-window");
    assert_eq!(plugin["status"], "disabled");
}

#[test]
fn sessions_tree_indents_only_where_the_history_branches() {
    let home = TempDir::new().unwrap();
    let chat = transcript(home.path());
    ok(&run_pincer(
        home.path(),
        &["sessions", "import", &path_arg(&chat), "--key", "linear"],
    ));
    let text = ok(&run_pincer(home.path(), &["sessions", "tree", "linear"]));
    assert!(text.lines().count() >= 5, "{text}");
    for line in text.lines() {
        let after_mark = &line[2..];
        assert!(
            !after_mark.starts_with(' '),
            "a linear session is not indented: {text}"
        );
    }
    // A branch: the second child of an entry starts one column in, its own line continues.
    let file = home.path().join("branched.jsonl");
    let record = |id: &str, parent: Option<&str>, role: &str, text: &str| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z",
               "message": {"role": role, "content": text, "timestamp": 1}})
        .to_string()
    };
    let lines = [
        json!({"type": "session", "version": 3, "id": "b", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}).to_string(),
        record("a1", None, "user", "one"),
        record("a2", Some("a1"), "assistant", "two"),
        record("a3", Some("a2"), "user", "three"),
        record("b3", Some("a2"), "user", "three again"),
        record("b4", Some("b3"), "assistant", "four"),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let text = ok(&run_pincer(
        home.path(),
        &["sessions", "tree", &path_arg(&file)],
    ));
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(
        rows,
        [
            "* a1 message",
            "* a2 message",
            "  a3 message",
            "*   b3 message",
            "*   b4 message"
        ],
        "{text}"
    );
}

/// A home whose config names the chat server.
fn home_with_model(server: &ChatServer) -> TempDir {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({"model": {"baseUrl": server.base_url}}).to_string(),
    )
    .unwrap();
    home
}

fn reply(server: &ChatServer, text: &str) {
    server.reply_completion(
        json!({"role": "assistant", "content": text}),
        "stop",
        json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
    );
}

#[test]
fn run_on_a_session_named_by_its_file_warns_of_nothing_when_it_succeeds() {
    let server = ChatServer::start();
    reply(&server, "first");
    reply(&server, "second");
    let home = home_with_model(&server);
    let out = run_pincer(
        home.path(),
        &[
            "run",
            "--session",
            "by-file",
            "--prompt",
            "hello",
            "--model",
            "openai:m",
        ],
    );
    ok(&out);
    let listed: Value = serde_json::from_str(&ok(&run_pincer(
        home.path(),
        &["sessions", "list", "--json"],
    )))
    .unwrap();
    let file = listed[0]["sessionFile"].as_str().unwrap().to_owned();
    let out = run_pincer(
        home.path(),
        &[
            "run",
            "--session",
            &file,
            "--prompt",
            "again",
            "--model",
            "openai:m",
        ],
    );
    ok(&out);
    let err = stderr_text(&out);
    assert!(!err.contains("not updated"), "{err}");
    assert!(!err.to_lowercase().contains("warn"), "{err}");
    // The counters of the session the file is indexed under were updated.
    let listed: Value = serde_json::from_str(&ok(&run_pincer(
        home.path(),
        &["sessions", "list", "--json"],
    )))
    .unwrap();
    assert_eq!(listed[0]["sessionKey"], "by-file");
    assert!(
        listed[0]["totalTokens"].as_u64().unwrap_or(0) > 0,
        "{listed}"
    );
}

/// A running `pincer serve` on `home`; killed when dropped.
struct Gateway {
    child: std::process::Child,
    socket: PathBuf,
}

impl Gateway {
    fn start(home: &Path, args: &[&str]) -> Gateway {
        let socket = home.join("gw.sock");
        let child = Command::new(pincer_bin())
            .arg("--home")
            .arg(home)
            .args(["serve", "--no-watch", "--socket"])
            .arg(&socket)
            .args(args)
            .env_remove("PINCER_HOME")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(start.elapsed() < Duration::from_secs(60), "no gateway");
            std::thread::sleep(Duration::from_millis(20));
        }
        Gateway { child, socket }
    }

    fn call(&self, method: &str, session: &str, params: Value) -> Value {
        let (status, answer) = pincer_host::gateway::client::call(
            &self.socket,
            &pincer_host::gateway::CallRequest {
                method: method.to_owned(),
                session: Some(session.to_owned()),
                params: Some(params),
            },
        )
        .unwrap();
        assert_eq!(status, 200, "{method}: {answer}");
        answer
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_session_a_gateway_holds_is_refused_naming_the_gateway_and_no_mode_run_lacks() {
    let server = ChatServer::start();
    let home = home_with_model(&server);
    let gw = Gateway::start(home.path(), &[]);
    gw.call(
        "ingest",
        "held",
        json!({"message": {"role": "user", "content": "hi"}}),
    );
    let out = run_pincer(
        home.path(),
        &[
            "run",
            "--session",
            "held",
            "--prompt",
            "again",
            "--model",
            "openai:m",
        ],
    );
    assert_ne!(out.status.code(), Some(0));
    let err = stderr_text(&out);
    assert!(
        err.contains("a gateway holds it") && err.contains(&format!("pid {}", gw.child.id())),
        "{err}"
    );
    assert!(!err.contains("read-only"), "{err}");
    assert!(err.contains("pincer sessions context"), "{err}");
}

#[test]
fn the_gateway_s_turn_answer_carries_the_entry_ids_of_what_it_added() {
    let server = ChatServer::start();
    reply(&server, "the answer");
    let home = home_with_model(&server);
    let gw = Gateway::start(home.path(), &["--model", "openai:m"]);
    let answer = gw.call("turn", "ids", json!({"prompt": "a question"}));
    let result = &answer["result"];
    let ids: Vec<String> = result["entryIds"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len() as u64, result["messagesAdded"].as_u64().unwrap());
    assert_eq!(ids.len(), 2);
    // They are the session's context's last entries, in order.
    let each = gw.call("assemble", "ids", json!({"refs": "each"}));
    let listed: Vec<String> = each["result"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["entryId"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(listed[listed.len() - 2..], ids[..], "{each}");
}
