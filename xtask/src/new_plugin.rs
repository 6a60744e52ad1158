//! `cargo xtask new-plugin <id>`: starts a new context engine in `plugins/<id>/` from a
//! template — a `cdylib` crate with a minimal working engine (keeps the newest messages that fit
//! a budget, delegates compaction to the runtime), its `pincer.plugin.json` with a config schema,
//! and its docs. It adds the crate to the workspace's `members` (one line, above the test-only
//! engines), and `build-plugins` stages it with the others.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};

use crate::workspace::Workspace;

pub(crate) fn run(ws: &Workspace, id: &str) -> Result<ExitCode> {
    let cargo_toml = ws.root.join("Cargo.toml");
    let workspace_text = fs::read_to_string(&cargo_toml)
        .with_context(|| format!("cannot read {}", cargo_toml.display()))?;
    let updated = add_member(&workspace_text, id)?;
    let dir = create(&ws.root.join("plugins"), id)?;
    fs::write(&cargo_toml, updated)
        .with_context(|| format!("cannot write {}", cargo_toml.display()))?;
    println!("created {}", dir.display());
    println!("next: cargo xtask build-plugins, then: pincer check-engine --plugins-dir target/plugins --engine {id} --conversation examples/airline-conversation.json");
    Ok(ExitCode::SUCCESS)
}

/// `cargo xtask new-plugin <id> --out-of-tree DIR`: a standalone crate in `DIR` that builds
/// outside this workspace — its own `[workspace]`, `pincer-plugin-api` as a path dependency on
/// this checkout (the way to depend on it before it is on crates.io) — with the same engine
/// and manifest as an in-tree plugin. `pincer plugins pack DIR` packages it.
pub(crate) fn run_out_of_tree(ws: &Workspace, id: &str, dir: &Path) -> Result<ExitCode> {
    let api = ws.root.join("plugin-api");
    create_out_of_tree(dir, id, &api)?;
    println!("created {}", dir.display());
    println!(
        "next: cargo test --manifest-path {0}/Cargo.toml, then: pincer plugins pack {0} && pincer plugins install {0}/target/pincer-plugins/{id}",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the standalone crate for `id` into `dir`, depending on the API crate at `api`.
fn create_out_of_tree(dir: &Path, id: &str, api: &Path) -> Result<()> {
    check_id(id)?;
    if dir.exists()
        && fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{} exists and is not empty: pick a new folder",
            dir.display()
        );
    }
    let api_path = api.display().to_string().replace('\\', "/");
    write_crate(
        dir,
        id,
        &[("{{api_path}}", &api_path)],
        &[
            ("Cargo.toml", OUT_OF_TREE_CARGO_TOML),
            ("pincer.plugin.json", MANIFEST),
            ("src/lib.rs", LIB_RS),
            (".gitignore", "/target\n/Cargo.lock\n"),
        ],
    )?;
    Ok(())
}

/// Writes `files` (path, template) into `dir` with the template's names replaced by those of
/// `id`, and each `(placeholder, value)` of `extra` filled in.
fn write_crate(dir: &Path, id: &str, extra: &[(&str, &str)], files: &[(&str, &str)]) -> Result<()> {
    let (lib_name, type_name) = names(id);
    let render = |template: &str| {
        let named = template
            .replace("{{id}}", id)
            .replace("{{lib}}", &lib_name)
            .replace("{{Type}}", &type_name)
            .replace("NewEngine", &type_name)
            .replace("new-engine", id)
            .replace("new_engine", &lib_name);
        extra.iter().fold(named, |text, (placeholder, value)| {
            text.replace(placeholder, value)
        })
    };
    fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    for (path, template) in files {
        let file = dir.join(path);
        fs::write(&file, render(template))
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}

/// The library name (`my_engine`) and type name (`MyEngine`) of an id.
fn names(id: &str) -> (String, String) {
    let lib_name = id.replace('-', "_");
    let type_name: String = id
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    (lib_name, type_name)
}

/// Checks that `id` can name a plugin, a crate and a library.
fn check_id(id: &str) -> Result<()> {
    let ok_chars = id
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let starts_with_letter = id.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    if !ok_chars || !starts_with_letter || id.ends_with('-') || id.len() > 64 {
        bail!(
            "plugin id {id:?} is not usable: use lowercase letters, digits and '-', starting with a letter (e.g. \"my-engine\")"
        );
    }
    if matches!(id, "legacy" | "testing") {
        bail!("plugin id {id:?} is reserved: choose another");
    }
    Ok(())
}

/// The workspace manifest with `plugins/<id>` added to `members`, above the test-only engines.
fn add_member(workspace_toml: &str, id: &str) -> Result<String> {
    let anchor = "    \"plugins/testing/*\",";
    if !workspace_toml.contains(anchor) {
        bail!("cannot find the line `{}` in the workspace Cargo.toml: add \"plugins/{id}\" to `members` yourself", anchor.trim());
    }
    Ok(workspace_toml.replacen(anchor, &format!("    \"plugins/{id}\",\n{anchor}"), 1))
}

/// Writes the template for `id` into `plugins_dir/<id>` and returns that folder.
fn create(plugins_dir: &Path, id: &str) -> Result<PathBuf> {
    check_id(id)?;
    let dir = plugins_dir.join(id);
    if dir.exists() {
        bail!(
            "{} already exists: pick another id or remove it",
            dir.display()
        );
    }
    write_crate(
        &dir,
        id,
        &[],
        &[
            ("Cargo.toml", CARGO_TOML),
            ("pincer.plugin.json", MANIFEST),
            ("src/lib.rs", LIB_RS),
        ],
    )?;
    Ok(dir)
}

const CARGO_TOML: &str = r#"[package]
name = "{{id}}"
version = "0.1.0"
description = "A pincer context engine"
edition.workspace = true
rust-version.workspace = true
license.workspace = true
publish = false

[lib]
name = "{{lib}}"
crate-type = ["cdylib", "rlib"]

[dependencies]
pincer-plugin-api = { workspace = true }
serde = { workspace = true }
tracing = { workspace = true }

[dev-dependencies]
# `pincer_plugin_api::testing`: drive the engine through its exported entry point.
pincer-plugin-api = { workspace = true, features = ["testing"] }
serde_json = { workspace = true }

[lints]
workspace = true
"#;

const OUT_OF_TREE_CARGO_TOML: &str = r#"[package]
name = "{{id}}"
version = "0.1.0"
description = "A pincer context engine"
edition = "2021"
publish = false

[lib]
name = "{{lib}}"
crate-type = ["cdylib", "rlib"]

[dependencies]
# Until pincer-plugin-api is on crates.io: a path to a pincer checkout (or a git dependency,
# `pincer-plugin-api = { git = "<pincer repository>", tag = "<release>" }`). Once published:
# pincer-plugin-api = "1"
pincer-plugin-api = { path = "{{api_path}}" }
serde = { version = "1", features = ["derive"] }
tracing = "0.1"

[dev-dependencies]
# `pincer_plugin_api::testing`: drive the engine through its exported entry point.
pincer-plugin-api = { path = "{{api_path}}", features = ["testing"] }
serde_json = "1"

# Its own workspace: it builds wherever it is, inside another workspace's folder or not.
[workspace]
"#;

const MANIFEST: &str = r#"{
  "id": "{{id}}",
  "name": "{{Type}}",
  "version": "0.1.0",
  "kind": "context-engine",
  "apiVersion": "^1.0",
  "description": "A pincer context engine.",
  "configSchema": {
    "type": "object",
    "properties": {
      "keepTokens": { "type": "integer", "minimum": 1, "description": "Keep the newest messages that fit this many tokens." }
    },
    "additionalProperties": false
  }
}
"#;

/// The engine's source. It is a real Rust file, compiled and tested as it is by
/// `plugin-api/tests/new_plugin_template.rs` under the id `new-engine` (type `NewEngine`),
/// which [`create`] replaces.
const LIB_RS: &str = include_str!("templates/engine.rs");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_crate_a_manifest_and_an_engine_named_after_the_id() {
        let tmp = std::env::temp_dir().join(format!("xtask-new-plugin-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let dir = create(&tmp, "my-engine").unwrap();
        let cargo = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"my-engine\"") && cargo.contains("name = \"my_engine\""));
        let manifest: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("pincer.plugin.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["id"], "my-engine");
        let lib = fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains("pub struct MyEngine") && lib.contains("export_engine!(MyEngine)"));
        assert!(!lib.contains("{{"), "every placeholder filled");
        assert!(
            !lib.contains("NewEngine") && !lib.contains("new-engine"),
            "the template's own names are all replaced"
        );
        assert!(lib.contains("const ID: &'static str = \"my-engine\";"));
        assert!(create(&tmp, "my-engine").is_err(), "never overwrites");
        let _ = fs::remove_dir_all(&tmp);
    }

    #[test]
    fn out_of_tree_is_a_workspace_of_its_own_with_the_api_by_path() {
        let tmp = std::env::temp_dir().join(format!("xtask-out-of-tree-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let dir = tmp.join("my-engine");
        create_out_of_tree(&dir, "my-engine", Path::new("/src/pincer/plugin-api")).unwrap();
        let cargo = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("pincer-plugin-api = { path = \"/src/pincer/plugin-api\" }"));
        assert!(cargo.contains("\n[workspace]\n") && !cargo.contains(".workspace = true"));
        assert!(!cargo.contains("{{"), "every placeholder filled");
        let lib = fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains("export_engine!(MyEngine)"));
        assert!(
            create_out_of_tree(&dir, "my-engine", Path::new("/x")).is_err(),
            "never writes into a folder that is not empty"
        );
        let _ = fs::remove_dir_all(&tmp);
    }

    #[test]
    fn adds_the_member_above_the_test_only_engines() {
        let toml = "members = [\n    \"host\",\n    \"plugins/testing/*\",\n]\n";
        assert_eq!(
            add_member(toml, "my-engine").unwrap(),
            "members = [\n    \"host\",\n    \"plugins/my-engine\",\n    \"plugins/testing/*\",\n]\n"
        );
        assert!(add_member("members = []", "x").is_err());
    }

    #[test]
    fn refuses_ids_that_cannot_name_a_plugin() {
        for id in ["", "My", "1x", "a_b", "x-", "legacy", "../x"] {
            assert!(check_id(id).is_err(), "{id:?}");
        }
        assert!(check_id("sliding-window2").is_ok());
    }
}
