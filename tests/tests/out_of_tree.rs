//! An engine author outside this repository, end to end: `cargo xtask new-plugin --out-of-tree`
//! writes a standalone crate, `pincer plugins pack` builds it with plain cargo and writes a
//! plugin folder, `pincer plugins install` installs it, and `pincer assemble` runs it. The
//! README's engine example goes the same way and builds without warnings.
//!
//! The builds use their own target folder (`target/out-of-tree`), kept between runs, so only
//! the generated crates are compiled again.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pincer_tests::*;
use serde_json::Value;

fn out_of_tree_target() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("out-of-tree")
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.env("CARGO_TARGET_DIR", out_of_tree_target());
    command
}

#[track_caller]
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `pincer plugins pack DIR` with the out-of-tree target folder.
fn pack(home: &Path, crate_dir: &Path) -> Output {
    Command::new(pincer_bin())
        .arg("--home")
        .arg(home)
        .args(["plugins", "pack"])
        .arg(crate_dir)
        .env("CARGO_TARGET_DIR", out_of_tree_target())
        .env_remove("PINCER_HOME")
        .output()
        .expect("pincer runs")
}

fn assemble(home: &Path) -> Value {
    let out = run_pincer(
        home,
        &[
            "assemble",
            "--json",
            "--conversation",
            &example_conversation().display().to_string(),
        ],
    );
    serde_json::from_str(&ok(&out)).expect("JSON")
}

#[test]
fn a_crate_generated_out_of_tree_is_packed_installed_and_run() {
    let work = TempDir::new().unwrap();
    let crate_dir = work.path().join("my-engine");
    let out = cargo()
        .current_dir(workspace_root())
        .args([
            "run",
            "--quiet",
            "--package",
            "xtask",
            "--",
            "new-plugin",
            "my-engine",
            "--out-of-tree",
        ])
        .arg(&crate_dir)
        .output()
        .expect("cargo runs");
    ok(&out);
    let cargo_toml = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    assert!(cargo_toml.contains("[workspace]"), "{cargo_toml}");
    assert!(
        !cargo_toml.contains(".workspace = true"),
        "nothing from this workspace: {cargo_toml}"
    );

    let home = TempDir::new().unwrap();
    let out = pack(home.path(), &crate_dir);
    let text = ok(&out);
    let packed = crate_dir
        .join("target")
        .join("pincer-plugins")
        .join("my-engine");
    assert_eq!(
        text,
        format!(
            "Packed plugin \"my-engine\" 0.1.0 (engines: my-engine) into {0}.\nInstall it with: pincer plugins install {0}\n",
            packed.display()
        )
    );
    let manifest = read_manifest_json(&packed);
    assert_eq!(manifest["id"], "my-engine");
    assert_eq!(
        manifest["contextEngineIds"],
        serde_json::json!(["my-engine"])
    );
    assert!(manifest["apiVersion"].as_str().unwrap().starts_with("^1."));
    assert_eq!(manifest["sha256"].as_str().unwrap().len(), 64);
    assert!(
        manifest["configSchema"]["properties"]["keepTokens"].is_object(),
        "the author's fields kept"
    );

    let out = run_pincer(
        home.path(),
        &["plugins", "install", &packed.display().to_string()],
    );
    assert!(
        ok(&out).contains(
            "Exclusive slot \"contextEngine\" switched from \"legacy\" to \"my-engine\"."
        ),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(assemble(home.path())["answeredBy"], "my-engine");
}

#[test]
fn the_readme_engine_builds_without_warnings_and_delegates_compaction() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let example = readme
        .split("```rust")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has an engine example");
    assert!(example.contains("self.host.delegate_compaction_to_runtime(params)"));
    let work = TempDir::new().unwrap();
    let dir = work.path().join("newest");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src").join("lib.rs"), example).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"newest\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\npincer-plugin-api = {{ path = {:?} }}\nserde = {{ version = \"1\", features = [\"derive\"] }}\n\n[workspace]\n",
            workspace_root().join("plugin-api").display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("pincer.plugin.json"),
        r#"{ "id": "newest", "kind": "context-engine", "configSchema": { "type": "object", "properties": { "keep": { "type": "integer", "minimum": 1 } }, "required": ["keep"] } }"#,
    )
    .unwrap();
    let home = TempDir::new().unwrap();
    let out = pack(home.path(), &dir);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("warning"),
        "the README's example warns:\n{stderr}"
    );
    let packed = dir.join("target").join("pincer-plugins").join("newest");
    ok(&run_pincer(
        home.path(),
        &["plugins", "install", &packed.display().to_string()],
    ));
    // Its config (`keep` is required).
    std::fs::write(
        home.path().join("pincer.json"),
        r#"{ plugins: { slots: { contextEngine: "newest" }, entries: { newest: { config: { keep: 2 } } } } }"#,
    )
    .unwrap();
    let assembled = assemble(home.path());
    assert_eq!(assembled["answeredBy"], "newest", "{assembled}");
    assert_eq!(assembled["keptMessages"].as_array().unwrap().len(), 2);
}
