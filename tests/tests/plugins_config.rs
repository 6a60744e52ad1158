//! `pincer plugins install` of an engine whose config schema requires keys, and
//! `pincer plugins config ID [KEY [VALUE]]`, through the real binary on a staged plugin: the
//! required keys and their types are named at install, `legacy` answers until they are set,
//! and the config is shown, set (checked against the schema) and written keeping the
//! operator's comments.

use std::path::{Path, PathBuf};
use std::process::Output;

use pincer_tests::*;
use serde_json::{json, Value};

const COMMENTED: &str = "// the operator's notes\n{\n  plugins: {}, // filled by pincer\n}\n";

/// A copy of the staged sliding-window plugin in `work` whose schema requires `tokenBudget`
/// (an integer) and `keepSystem` (a boolean).
fn demanding_plugin(work: &Path) -> PathBuf {
    let plugin = copy_plugin(&staged_plugin("sliding-window"), work, "sliding-window");
    let mut manifest = read_manifest_json(&plugin);
    manifest["configSchema"]["required"] = json!(["tokenBudget", "keepSystem"]);
    write_manifest_json(&plugin, &manifest);
    plugin
}

/// `pincer assemble --json` of the example conversation in `home`.
fn assemble(home: &Path) -> Value {
    let conversation = example_conversation();
    let out = run_pincer(
        home,
        &[
            "assemble",
            "--conversation",
            &conversation.display().to_string(),
            "--json",
        ],
    );
    ok(&out);
    stdout_json(&out)
}

fn config(home: &Path, args: &[&str]) -> Output {
    let mut all = vec!["plugins", "config"];
    all.extend_from_slice(args);
    run_pincer(home, &all)
}

#[test]
fn install_names_the_required_keys_and_legacy_answers_until_they_are_set() {
    let work = TempDir::new().unwrap();
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join("pincer.json"), COMMENTED).unwrap();
    let plugin = demanding_plugin(work.path());

    let text = ok(&run_pincer(
        home.path(),
        &["plugins", "install", &plugin.display().to_string()],
    ));
    assert!(
        text.contains(
            "Plugin \"sliding-window\" needs config before its engine answers (legacy answers until then): required keys tokenBudget (integer), keepSystem (boolean).\n"
        ),
        "{text}"
    );
    assert!(
        text.ends_with("Set each with: pincer plugins config sliding-window KEY VALUE\n"),
        "{text}"
    );
    assert_eq!(assemble(home.path())["answeredBy"], "legacy");

    let set = ok(&config(
        home.path(),
        &["sliding-window", "tokenBudget", "500"],
    ));
    assert_eq!(
        set,
        "Set plugins.entries.sliding-window.config.tokenBudget to 500.\nStill required before its engine answers: keepSystem (boolean).\n"
    );
    let set = ok(&config(
        home.path(),
        &["sliding-window", "keepSystem", "true"],
    ));
    assert_eq!(
        set,
        "Set plugins.entries.sliding-window.config.keepSystem to true.\n"
    );
    assert_eq!(assemble(home.path())["answeredBy"], "sliding-window");
}

#[test]
fn an_engine_without_required_config_is_installed_without_a_note() {
    let home = TempDir::new().unwrap();
    let text = ok(&run_pincer(
        home.path(),
        &[
            "plugins",
            "install",
            &staged_plugin("sliding-window").display().to_string(),
        ],
    ));
    assert!(!text.contains("needs config"), "{text}");
}

#[test]
fn config_is_shown_set_checked_against_the_schema_and_keeps_comments() {
    let work = TempDir::new().unwrap();
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join("pincer.json"), COMMENTED).unwrap();
    let plugin = demanding_plugin(work.path());
    ok(&run_pincer(
        home.path(),
        &["plugins", "install", &plugin.display().to_string()],
    ));
    let config_file = home.path().join("pincer.json");

    // Nothing set yet: an empty object.
    let shown = config(home.path(), &["sliding-window"]);
    assert_eq!(
        serde_json::from_str::<Value>(&ok(&shown)).unwrap(),
        json!({})
    );

    // A value of the wrong type, or a key the schema does not allow: refused, exit 2, the file
    // as it was.
    let before = std::fs::read_to_string(&config_file).unwrap();
    let wrong = config(home.path(), &["sliding-window", "tokenBudget", "many"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        stderr_text(&wrong).contains("/tokenBudget: \"many\" is not of type \"integer\""),
        "{}",
        stderr_text(&wrong)
    );
    let unknown = config(home.path(), &["sliding-window", "bogus", "1"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr_text(&unknown).contains("'bogus' was unexpected"),
        "{}",
        stderr_text(&unknown)
    );
    assert_eq!(std::fs::read_to_string(&config_file).unwrap(), before);

    // Set, then shown whole and by key; the operator's comments stay.
    ok(&config(
        home.path(),
        &["sliding-window", "tokenBudget", "700"],
    ));
    ok(&config(
        home.path(),
        &["sliding-window", "keepSystem", "false"],
    ));
    let shown = ok(&config(home.path(), &["sliding-window"]));
    assert_eq!(
        serde_json::from_str::<Value>(&shown).unwrap(),
        json!({"tokenBudget": 700, "keepSystem": false})
    );
    assert_eq!(
        ok(&config(home.path(), &["sliding-window", "tokenBudget"])),
        "700\n"
    );
    let text = std::fs::read_to_string(&config_file).unwrap();
    assert!(text.starts_with("// the operator's notes\n"), "{text}");
    assert!(text.contains("// filled by pincer"), "{text}");

    // A key not set, and a plugin not installed.
    let missing = config(home.path(), &["sliding-window", "minMessages"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr_text(&missing)
            .contains("plugins.entries.sliding-window.config has no key \"minMessages\""),
        "{}",
        stderr_text(&missing)
    );
    let nope = config(home.path(), &["nope"]);
    assert_eq!(nope.status.code(), Some(2));
    assert!(
        stderr_text(&nope).contains("no plugin \"nope\""),
        "{}",
        stderr_text(&nope)
    );
}
