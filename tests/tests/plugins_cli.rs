//! `pincer plugins …` through the real binary, on the staged plugins: OpenClaw's quick start in
//! pincer's words (install, doctor, assemble on the selected engine, remove back to legacy),
//! the §11 slot rules and their exact messages, refusals that leave the home untouched,
//! archives, links, and config edits that keep the operator's file.

use std::path::Path;
use std::process::Output;

use pincer_tests::*;
use serde_json::{json, Value};

fn json_of(out: &Output) -> Value {
    ok(out);
    stdout_json(out)
}

fn config_value(home: &Path) -> Value {
    pincer_host::config::LoadedConfig::load(&home.join("pincer.json"))
        .map(|c| serde_json::to_value(c.config).unwrap())
        .expect("the config stays valid")
}

/// `pincer plugins install` of a staged plugin into `home`.
fn install_staged(home: &Path, id: &str) -> Output {
    run_pincer(home, &["plugins", "install", &path_arg(&staged_plugin(id))])
}

const COMMENTED: &str = "// the operator's notes\n{\n  plugins: {\n    // never used here\n    deny: ['nothing'],\n  },\n  agents: { defaults: { compaction: { timeoutSeconds: 90 } } }, // tuned\n}\n";

#[test]
fn quick_start_install_doctor_assemble_remove() {
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join("pincer.json"), COMMENTED).unwrap();
    let source = staged_plugin("sliding-window");

    let out = run_pincer(home.path(), &["plugins", "install", &path_arg(&source)]);
    let text = ok(&out);
    let installed = home.path().join("plugins").join("sliding-window");
    assert_eq!(
        text,
        format!(
            "Installed plugin \"sliding-window\" 0.1.0 in {}.\nExclusive slot \"contextEngine\" switched from \"legacy\" to \"sliding-window\".\n",
            installed.display()
        )
    );
    assert!(installed.join("pincer.plugin.json").is_file());
    assert_eq!(
        std::fs::read(library_path(&installed)).unwrap(),
        std::fs::read(library_path(&source)).unwrap()
    );
    // The operator's file: comments, order and values kept; the slot bound.
    let written = std::fs::read_to_string(home.path().join("pincer.json")).unwrap();
    for kept in [
        "// the operator's notes",
        "// never used here",
        "// tuned",
        "deny: ['nothing']",
    ] {
        assert!(written.contains(kept), "{kept} lost:\n{written}");
    }
    assert!(written.find("plugins").unwrap() < written.find("agents").unwrap());
    assert_eq!(
        config_value(home.path())["plugins"]["slots"]["contextEngine"],
        "sliding-window"
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join("pincer.json.bak")).unwrap(),
        COMMENTED,
        "the previous file is kept"
    );

    let doctor = run_pincer(home.path(), &["doctor", "--json"]);
    let report = json_of(&doctor);
    assert_eq!(report["contextEngine"]["resolved"], "sliding-window");

    let conversation = path_arg(&example_conversation());
    let assembled = json_of(&run_pincer(
        home.path(),
        &["assemble", "--json", "--conversation", &conversation],
    ));
    assert_eq!(assembled["answeredBy"], "sliding-window");

    let out = run_pincer(home.path(), &["plugins", "remove", "sliding-window"]);
    assert_eq!(
        ok(&out),
        format!(
            "Removed plugin \"sliding-window\" ({}).\nExclusive slot \"contextEngine\" switched from \"sliding-window\" to \"legacy\".\n",
            installed.display()
        )
    );
    assert!(!installed.exists());
    let report = json_of(&run_pincer(home.path(), &["doctor", "--json"]));
    assert_eq!(report["contextEngine"]["selected"], "legacy");
    assert_eq!(report["contextEngine"]["resolved"], "legacy");
    assert_eq!(report["plugins"], json!([]));
}

#[test]
fn installing_or_selecting_disables_the_other_context_engine_plugins() {
    let home = TempDir::new().unwrap();
    ok(&install_staged(home.path(), "faulty"));
    let out = install_staged(home.path(), "sliding-window");
    let text = ok(&out);
    assert!(
        text.ends_with("Exclusive slot \"contextEngine\" switched from \"faulty\" to \"sliding-window\".\nDisabled other \"contextEngine\" slot plugins: faulty.\n"),
        "{text}"
    );
    let listed = json_of(&run_pincer(home.path(), &["plugins", "list", "--json"]));
    let by_id = |id: &str| find_by_id(&listed["plugins"], id);
    assert_eq!(by_id("faulty")["status"], "disabled");
    assert_eq!(by_id("faulty")["disabledBy"], "entry");
    assert_eq!(by_id("sliding-window")["status"], "enabled");
    assert_eq!(by_id("sliding-window")["selected"], true);
    assert_eq!(listed["contextEngine"]["selected"], "sliding-window");

    let out = run_pincer(home.path(), &["plugins", "select", "faulty"]);
    assert_eq!(
        ok(&out),
        "Enabled plugin \"faulty\".\nExclusive slot \"contextEngine\" switched from \"sliding-window\" to \"faulty\".\nDisabled other \"contextEngine\" slot plugins: sliding-window.\n"
    );
    let config = config_value(home.path());
    assert_eq!(config["plugins"]["entries"]["faulty"]["enabled"], true);
    assert_eq!(
        config["plugins"]["entries"]["sliding-window"]["enabled"],
        false
    );

    let out = run_pincer(home.path(), &["plugins", "select", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_text(&out).contains("no plugin declares a context engine \"nope\" (engines: legacy, faulty, sliding-window)"),
        "{}",
        stderr_text(&out)
    );
}

#[test]
fn disabling_keeps_the_slot_and_doctor_says_it_was_the_operators_choice() {
    let home = TempDir::new().unwrap();
    ok(&install_staged(home.path(), "sliding-window"));
    let out = run_pincer(home.path(), &["plugins", "disable", "sliding-window"]);
    assert_eq!(
        ok(&out),
        "Disabled plugin \"sliding-window\".\nThe \"contextEngine\" slot still selects \"sliding-window\": legacy answers until `pincer plugins enable sliding-window`.\n"
    );
    assert_eq!(
        config_value(home.path())["plugins"]["slots"]["contextEngine"],
        "sliding-window"
    );
    let conversation = path_arg(&example_conversation());
    let assembled = json_of(&run_pincer(
        home.path(),
        &["assemble", "--json", "--conversation", &conversation],
    ));
    assert_eq!(assembled["answeredBy"], "legacy");
    assert_eq!(
        assembled["quarantine"],
        json!([]),
        "a choice, not a failure"
    );

    let doctor = run_pincer(home.path(), &["doctor"]);
    let text = ok(&doctor);
    assert!(text.contains("selected sliding-window -> legacy"), "{text}");
    assert!(text.contains("the operator's choice"), "{text}");

    let out = run_pincer(home.path(), &["plugins", "enable", "sliding-window"]);
    assert_eq!(
        ok(&out),
        "Enabled plugin \"sliding-window\".\nThe \"contextEngine\" slot selects \"sliding-window\": that engine answers again.\n"
    );
    let assembled = json_of(&run_pincer(
        home.path(),
        &["assemble", "--json", "--conversation", &conversation],
    ));
    assert_eq!(assembled["answeredBy"], "sliding-window");
}

#[test]
fn a_plugin_that_fails_verification_is_not_installed_and_nothing_changes() {
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join("pincer.json"), COMMENTED).unwrap();
    let work = TempDir::new().unwrap();
    let bad = copy_plugin(
        &staged_plugin("sliding-window"),
        work.path(),
        "sliding-window",
    );
    // A truncated library: `dlopen` of it would kill the host with SIGBUS.
    let lib = library_path(&bad);
    let bytes = std::fs::read(&lib).unwrap();
    std::fs::write(&lib, &bytes[..bytes.len() / 2]).unwrap();
    let mut manifest = read_manifest_json(&bad);
    manifest.as_object_mut().unwrap().remove("sha256");
    write_manifest_json(&bad, &manifest);

    let out = run_pincer(home.path(), &["plugins", "install", &path_arg(&bad)]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout_text(&out));
    let err = stderr_text(&out);
    assert!(
        err.starts_with("pincer: refused ") && err.contains("nothing was installed"),
        "{err}"
    );
    assert!(!home.path().join("plugins").join("sliding-window").exists());
    assert_eq!(
        std::fs::read_to_string(home.path().join("pincer.json")).unwrap(),
        COMMENTED
    );

    // A library whose engines are not the ones its manifest declares.
    let lying = copy_plugin(&staged_plugin("sliding-window"), work.path(), "lying");
    let mut manifest = read_manifest_json(&lying);
    manifest["contextEngineIds"] = json!(["sliding-window", "other"]);
    write_manifest_json(&lying, &manifest);
    let out = run_pincer(home.path(), &["plugins", "install", &path_arg(&lying)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_text(&out)
            .contains("the library says its contextEngineIds is \"sliding-window\" but"),
        "{}",
        stderr_text(&out)
    );
    assert!(
        !home.path().join("plugins").exists()
            || std::fs::read_dir(home.path().join("plugins"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn a_tar_gz_installs_like_a_folder() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    copy_plugin(
        &staged_plugin("sliding-window"),
        work.path(),
        "sliding-window",
    );
    let archive = work.path().join("sliding-window.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(work.path())
        .arg("sliding-window")
        .status()
        .expect("tar runs");
    assert!(status.success());
    let out = run_pincer(home.path(), &["plugins", "install", &path_arg(&archive)]);
    let text = ok(&out);
    assert!(
        text.starts_with("Installed plugin \"sliding-window\" 0.1.0 in "),
        "{text}"
    );
    let report = json_of(&run_pincer(home.path(), &["doctor", "--json"]));
    assert_eq!(report["contextEngine"]["resolved"], "sliding-window");

    // Installing it again is refused with what to do.
    let out = run_pincer(home.path(), &["plugins", "install", &path_arg(&archive)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_text(&out).contains("is already installed") && stderr_text(&out).contains("--force"),
        "{}",
        stderr_text(&out)
    );
    let out = run_pincer(
        home.path(),
        &["plugins", "install", "--force", &path_arg(&archive)],
    );
    assert!(ok(&out).starts_with("Replaced plugin \"sliding-window\""));
}

#[test]
fn a_linked_plugin_is_loaded_from_its_folder_and_unlinked_on_remove() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    let dir = copy_plugin(&staged_plugin("sliding-window"), work.path(), "sw");
    let canonical = std::fs::canonicalize(&dir).unwrap();
    let out = run_pincer(
        home.path(),
        &["plugins", "install", "--link", &path_arg(&dir)],
    );
    assert!(ok(&out).starts_with(&format!(
        "Linked plugin \"sliding-window\" 0.1.0 from {} (plugins.load.paths).\n",
        canonical.display()
    )));
    assert!(
        !home.path().join("plugins").join("sliding-window").exists(),
        "not copied"
    );
    let config = config_value(home.path());
    assert_eq!(
        config["plugins"]["load"]["paths"],
        json!([path_arg(&canonical)])
    );
    let inspected = json_of(&run_pincer(
        home.path(),
        &["plugins", "inspect", "sliding-window", "--json"],
    ));
    let plugin = &inspected["plugin"];
    assert_eq!(plugin["id"], "sliding-window");
    assert_eq!(plugin["status"], "enabled");
    assert_eq!(plugin["source"], "linked");
    assert_eq!(plugin["contextEngineIds"], json!(["sliding-window"]));
    assert_eq!(plugin["selected"], true);
    assert_eq!(
        plugin["sha256"],
        read_manifest_json(&dir)["sha256"],
        "the library on disk, hashed"
    );
    assert!(plugin["configSchema"]["properties"]["tokenBudget"].is_object());

    let out = run_pincer(home.path(), &["plugins", "remove", "sliding-window"]);
    assert!(ok(&out).starts_with("Unlinked plugin \"sliding-window\""));
    assert!(dir.join("pincer.plugin.json").is_file(), "its files stay");
    let config = config_value(home.path());
    assert_eq!(config["plugins"]["load"]["paths"], json!([]));
    assert_eq!(config["plugins"]["slots"]["contextEngine"], "legacy");
}

#[test]
fn an_edit_that_cannot_keep_the_file_is_refused_and_the_file_kept() {
    let home = TempDir::new().unwrap();
    // An escaped identifier: valid JSON5 (pincer reads it), but not something the in-place
    // editor can rewrite.
    let text = "// mine\n{ agents: { \\u0064efaults: {} } }\n";
    std::fs::write(home.path().join("pincer.json"), text).unwrap();
    let plugins = path_arg(&staged_plugins_dir());
    let out = run_pincer(
        home.path(),
        &["plugins", "disable", "faulty", "--plugins-dir", &plugins],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout_text(&out));
    let err = stderr_text(&out);
    assert!(
        err.contains("cannot be edited in place")
            && err
                .contains("make this change by hand (set plugins.entries.faulty.enabled to false)"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join("pincer.json")).unwrap(),
        text
    );
}

#[test]
fn concurrent_commands_never_lose_one_anothers_edits() {
    let home = TempDir::new().unwrap();
    let plugins = path_arg(&staged_plugins_dir());
    for round in 0..4 {
        let verb = if round % 2 == 0 { "disable" } else { "enable" };
        let children: Vec<_> = ["faulty", "sliding-window"]
            .iter()
            .map(|id| {
                std::process::Command::new(pincer_bin())
                    .arg("--home")
                    .arg(home.path())
                    .args(["plugins", verb, id, "--plugins-dir", &plugins])
                    .env_remove("PINCER_HOME")
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let entries = &config_value(home.path())["plugins"]["entries"];
        for id in ["faulty", "sliding-window"] {
            assert_eq!(
                entries[id]["enabled"],
                json!(verb == "enable"),
                "round {round}: {entries}"
            );
        }
    }
}

#[test]
fn a_plugin_with_several_engines_is_installed_without_binding_then_selected() {
    let home = TempDir::new().unwrap();
    let out = run_pincer(
        home.path(),
        &["plugins", "install", &path_arg(&staged_variant("twin"))],
    );
    let text = ok(&out);
    assert!(
        text.ends_with("Plugin \"twin\" provides several context engines (twin, twin-echo): the \"contextEngine\" slot is unchanged; run `pincer plugins select ENGINE_ID` to use one.\n"),
        "{text}"
    );
    assert_eq!(
        config_value(home.path())["plugins"]["slots"]["contextEngine"],
        Value::Null,
        "not bound"
    );
    let out = run_pincer(home.path(), &["plugins", "select", "twin-echo"]);
    assert_eq!(
        ok(&out),
        "Exclusive slot \"contextEngine\" switched from \"legacy\" to \"twin-echo\".\n"
    );
    let conversation = path_arg(&example_conversation());
    let assembled = json_of(&run_pincer(
        home.path(),
        &["assemble", "--json", "--conversation", &conversation],
    ));
    assert_eq!(assembled["answeredBy"], "twin-echo");
    // Removing the plugin resets the slot although the engine id is not the plugin id.
    let out = run_pincer(home.path(), &["plugins", "remove", "twin"]);
    assert!(ok(&out).ends_with(
        "Exclusive slot \"contextEngine\" switched from \"twin-echo\" to \"legacy\".\n"
    ));
}

/// How many times the faulty engine's factory ran in one `pincer` process (its own log line).
fn factory_calls(home: &Path) -> usize {
    let out = run_pincer(
        home,
        &[
            "--log",
            "info",
            "assemble",
            "--conversation",
            &path_arg(&example_conversation()),
        ],
    );
    ok(&out);
    stderr_text(&out).matches("fields=method=factory ").count()
}

#[test]
fn a_disabled_engines_factory_never_runs_and_runs_once_when_enabled_again() {
    let home = TempDir::new().unwrap();
    ok(&install_staged(home.path(), "faulty"));
    assert_eq!(factory_calls(home.path()), 1, "selected and enabled");
    ok(&run_pincer(home.path(), &["plugins", "disable", "faulty"]));
    assert_eq!(
        factory_calls(home.path()),
        0,
        "disabled: legacy, no factory call"
    );
    ok(&run_pincer(home.path(), &["plugins", "enable", "faulty"]));
    assert_eq!(factory_calls(home.path()), 1, "enabled again: once");
}

#[test]
fn pack_turns_a_built_library_into_a_plugin_folder_install_takes() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    let staged = staged_plugin("sliding-window");
    // The author's manifest: only what the library cannot say.
    let authored = work.path().join("authored.json");
    std::fs::write(
        &authored,
        r#"{ "id": "sliding-window", "name": "My window", "configSchema": { "type": "object" } }"#,
    )
    .unwrap();
    let out_dir = work.path().join("packed");
    let out = run_pincer(
        home.path(),
        &[
            "plugins",
            "pack",
            "--library",
            &path_arg(&library_path(&staged)),
            "--manifest",
            &path_arg(&authored),
            "--out",
            &path_arg(&out_dir),
        ],
    );
    assert!(ok(&out)
        .starts_with("Packed plugin \"sliding-window\" 0.1.0 (engines: sliding-window) into "));
    let manifest = read_manifest_json(&out_dir);
    assert_eq!(manifest["name"], "My window");
    assert_eq!(manifest["sha256"], read_manifest_json(&staged)["sha256"]);
    assert_eq!(manifest["contextEngineIds"], json!(["sliding-window"]));
    ok(&run_pincer(
        home.path(),
        &["plugins", "install", &path_arg(&out_dir)],
    ));

    // An author's manifest that names another plugin is refused, with what to do.
    std::fs::write(&authored, r#"{ "id": "other" }"#).unwrap();
    let out = run_pincer(
        home.path(),
        &[
            "plugins",
            "pack",
            "--library",
            &path_arg(&library_path(&staged)),
            "--manifest",
            &path_arg(&authored),
            "--out",
            &path_arg(&work.path().join("again")),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_text(&out).contains("its id is \"other\" but the library's is \"sliding-window\""),
        "{}",
        stderr_text(&out)
    );
    assert!(!work.path().join("again").exists(), "nothing written");
}

#[test]
fn installing_a_denied_plugin_leaves_the_slot_and_says_why() {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        "{ plugins: { deny: ['sliding-window'] } }\n",
    )
    .unwrap();
    let out = install_staged(home.path(), "sliding-window");
    let text = ok(&out);
    assert!(
        text.ends_with("The slot is unchanged: plugin \"sliding-window\" is denied by plugins.deny: remove it from that list first.\n"),
        "{text}"
    );
    assert_eq!(
        config_value(home.path())["plugins"]["slots"]["contextEngine"],
        Value::Null
    );
    let out = run_pincer(home.path(), &["plugins", "select", "sliding-window"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_text(&out).contains("is denied by plugins.deny: remove it from that list first"),
        "{}",
        stderr_text(&out)
    );
}
