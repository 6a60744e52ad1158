//! Packaging an engine: `pincer plugins pack` turns a `cdylib` crate (built here with plain
//! `cargo build`) or an already built library into a plugin folder that `pincer plugins
//! install` takes — the library beside a `pincer.plugin.json` whose `id`, `version`,
//! `apiVersion` and `contextEngineIds` come from the manifest the library embeds
//! (`export_engine!` writes it), with `library` and `sha256` filled in. Authors outside this
//! repository need nothing else (no `cargo xtask`).
//!
//! The author's own `pincer.plugin.json` (beside `Cargo.toml` or the library, or `--manifest`)
//! supplies what the library cannot know — `name`, `description`, `configSchema`,
//! `hostRequirements` — and is kept field for field; an `id` there that is not the library's
//! is refused. The folder is checked like an install would check it before pack reports
//! success.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::plugins::loading::{read_embedded_manifest, EmbeddedManifest};
use serde_json::{Map, Value};

use crate::plugins::install::{verify_folder, InstallError};
use crate::plugins::manifest::{PluginManifest, MANIFEST_FILE_NAME};
use crate::plugins::verify::sha256_hex;

/// What to pack.
#[derive(Debug, Clone)]
pub enum PackSource {
    /// A crate folder (holding `Cargo.toml`), built with `cargo build --lib`.
    Crate {
        /// The crate folder.
        dir: PathBuf,
        /// Build with `--release`.
        release: bool,
    },
    /// An already built library file.
    Library(PathBuf),
}

/// A packed plugin folder.
#[derive(Debug)]
pub struct Packed {
    /// The folder written.
    pub dir: PathBuf,
    /// Its manifest, as the host reads it.
    pub manifest: PluginManifest,
    /// The library's sha256.
    pub sha256: String,
}

/// Why nothing was packed.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// `cargo build` failed or could not run.
    #[error("{0}")]
    Build(String),
    /// The library is not a pincer plugin.
    #[error("{} is not a pincer plugin library: {reason}", path.display())]
    NotAPlugin {
        /// The library.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The author's manifest cannot be used.
    #[error("{}: {reason}", path.display())]
    BaseManifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The packed folder does not pass the checks of an install.
    #[error("the packed folder does not pass the checks of `pincer plugins install`: {0}")]
    Check(#[from] InstallError),
    /// Reading or writing failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl PackError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            PackError::Build(_) => "pack_build_failed",
            PackError::NotAPlugin { .. } => "pack_not_a_plugin",
            PackError::BaseManifest { .. } => "pack_bad_manifest",
            PackError::Check(err) => err.code(),
            PackError::Io { .. } => "pack_io",
        }
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PackError {
    let path = path.to_owned();
    move |source| PackError::Io {
        action,
        path,
        source,
    }
}

/// Builds the crate in `dir` with cargo and returns its `cdylib`.
///
/// # Errors
/// [`PackError::Build`] when cargo fails or builds no `cdylib`.
pub fn build_crate(dir: &Path, release: bool) -> Result<PathBuf, PackError> {
    let manifest_path = dir.join("Cargo.toml");
    if !manifest_path.is_file() {
        return Err(PackError::Build(format!(
            "{} has no Cargo.toml: give the engine's crate folder, or --library FILE for a built library",
            dir.display()
        )));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--lib")
        .arg("--manifest-path")
        .arg(&manifest_path)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if release {
        command.arg("--release");
    }
    let mut child = command
        .spawn()
        .map_err(|e| PackError::Build(format!("cannot run cargo: {e}")))?;
    let wanted = std::fs::canonicalize(&manifest_path).unwrap_or(manifest_path.clone());
    let mut library = None;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message["reason"] != "compiler-artifact"
                || message["manifest_path"].as_str().map(PathBuf::from) != Some(wanted.clone())
                || !message["target"]["crate_types"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|k| k == "cdylib"))
            {
                continue;
            }
            library = message["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find(|f| f.ends_with(std::env::consts::DLL_SUFFIX))
                .map(PathBuf::from);
        }
    }
    let status = child
        .wait()
        .map_err(|e| PackError::Build(format!("cargo did not finish: {e}")))?;
    if !status.success() {
        return Err(PackError::Build(format!(
            "cargo build failed for {} (see its output above)",
            manifest_path.display()
        )));
    }
    library.ok_or_else(|| {
        PackError::Build(format!(
            "cargo built no cdylib for {}: set crate-type = [\"cdylib\"] under [lib]",
            manifest_path.display()
        ))
    })
}

/// The author's manifest to start from: `explicit`, else `pincer.plugin.json` in `near`.
fn base_manifest(explicit: Option<&Path>, near: &Path) -> Result<Map<String, Value>, PackError> {
    let path = match explicit {
        Some(path) => path.to_owned(),
        None => {
            let path = near.join(MANIFEST_FILE_NAME);
            if !path.is_file() {
                return Ok(Map::new());
            }
            path
        }
    };
    let text = std::fs::read_to_string(&path).map_err(io("read", &path))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(PackError::BaseManifest {
            path,
            reason: "must hold a JSON object".into(),
        }),
        Err(err) => Err(PackError::BaseManifest {
            path,
            reason: format!("is not valid JSON: {err}"),
        }),
    }
}

/// The manifest to write: the library's facts first, then what the author's manifest adds,
/// in a readable order.
fn manifest_for(
    embedded: &EmbeddedManifest,
    library_file: &str,
    sha256: &str,
    base: Map<String, Value>,
) -> Vec<(String, Value)> {
    let api = semver::Version::parse(&embedded.api_version)
        .map(|v| format!("^{}.{}", v.major, v.minor))
        .unwrap_or_else(|_| format!("^{}", embedded.api_version));
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut put = |key: &str, value: Value| out.push((key.to_owned(), value));
    if let Some(schema) = base.get("$schema") {
        put("$schema", schema.clone());
    }
    put("id", Value::from(embedded.plugin_id.clone()));
    put(
        "name",
        base.get("name")
            .cloned()
            .unwrap_or_else(|| Value::from(embedded.plugin_id.clone())),
    );
    put("version", Value::from(embedded.plugin_version.clone()));
    put(
        "kind",
        base.get("kind")
            .cloned()
            .unwrap_or_else(|| Value::from("context-engine")),
    );
    put("apiVersion", Value::from(api));
    put("contextEngineIds", Value::from(embedded.engine_ids.clone()));
    put("library", Value::from(library_file));
    put("sha256", Value::from(sha256));
    const SET: [&str; 9] = [
        "$schema",
        "id",
        "name",
        "version",
        "kind",
        "apiVersion",
        "contextEngineIds",
        "library",
        "sha256",
    ];
    for (key, value) in base {
        if !SET.contains(&key.as_str()) {
            out.push((key, value));
        }
    }
    out
}

/// Pretty JSON of an ordered object.
fn ordered_json(fields: &[(String, Value)]) -> String {
    let mut text = String::from("{\n");
    for (i, (key, value)) in fields.iter().enumerate() {
        let rendered = serde_json::to_string_pretty(value).expect("a JSON value serializes");
        let indented = rendered.replace('\n', "\n  ");
        text.push_str(&format!(
            "  {}: {indented}{}\n",
            Value::from(key.as_str()),
            if i + 1 < fields.len() { "," } else { "" }
        ));
    }
    text.push_str("}\n");
    text
}

/// Packs `source` into `out` (default: `<crate>/target/pincer-plugins/<id>` for a crate,
/// `./<id>` for a library), starting from the author's manifest `manifest` if given.
///
/// # Errors
/// See [`PackError`].
pub fn pack(
    source: &PackSource,
    manifest: Option<&Path>,
    out: Option<&Path>,
) -> Result<Packed, PackError> {
    let (library, near, default_parent) = match source {
        PackSource::Crate { dir, release } => (
            build_crate(dir, *release)?,
            dir.clone(),
            dir.join("target").join("pincer-plugins"),
        ),
        PackSource::Library(path) => (
            path.clone(),
            path.parent().map(Path::to_owned).unwrap_or_default(),
            PathBuf::from("."),
        ),
    };
    let bytes = std::fs::read(&library).map_err(io("read", &library))?;
    let embedded = read_embedded_manifest(&bytes).map_err(|err| PackError::NotAPlugin {
        path: library.clone(),
        reason: format!("{err} (build it with `pincer_plugin_api::export_engine!`)"),
    })?;
    if !embedded.panic_unwind {
        return Err(PackError::NotAPlugin {
            path: library.clone(),
            reason: "it was built with panic = \"abort\", which the host refuses; build it with panic = \"unwind\" (the default)".into(),
        });
    }
    let base = base_manifest(manifest, &near)?;
    if let Some(id) = base.get("id").and_then(Value::as_str) {
        if id != embedded.plugin_id {
            return Err(PackError::BaseManifest {
                path: manifest
                    .map(Path::to_owned)
                    .unwrap_or_else(|| near.join(MANIFEST_FILE_NAME)),
                reason: format!(
                    "its id is \"{id}\" but the library's is \"{}\" (the first engine's ID): make them equal",
                    embedded.plugin_id
                ),
            });
        }
    }
    let dir = out
        .map(Path::to_owned)
        .unwrap_or_else(|| default_parent.join(&embedded.plugin_id));
    crate::disk::create_dir_all(&dir).map_err(io("create", &dir))?;
    let file_name = library
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".to_owned());
    let sha256 = sha256_hex(&bytes);
    let library_out = dir.join(&file_name);
    // Replace, never rewrite in place: a host may have the old file mapped.
    let tmp = dir.join(format!(".{file_name}.tmp"));
    crate::disk::write(&tmp, &bytes).map_err(io("write", &tmp))?;
    crate::disk::rename(&tmp, &library_out).map_err(io("write", &library_out))?;
    let manifest_out = dir.join(MANIFEST_FILE_NAME);
    let text = ordered_json(&manifest_for(&embedded, &file_name, &sha256, base));
    crate::disk::write(&manifest_out, text.as_bytes()).map_err(io("write", &manifest_out))?;
    let checked = verify_folder(&dir)?;
    Ok(Packed {
        dir,
        manifest: checked.manifest,
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_puts_the_librarys_facts_first_and_keeps_the_authors_fields() {
        let embedded = EmbeddedManifest {
            plugin_id: "newest".into(),
            plugin_version: "0.2.0".into(),
            api_version: "1.3.1".into(),
            engine_ids: vec!["newest".into()],
            panic_unwind: true,
            abi_stable_version: "0.11".into(),
        };
        let base: Map<String, Value> = serde_json::from_str(
            r#"{"id": "newest", "version": "0.1.0", "configSchema": {"type": "object"}, "description": "d"}"#,
        )
        .unwrap();
        let fields = manifest_for(&embedded, "libnewest.so", &"a".repeat(64), base);
        let text = ordered_json(&fields);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["version"], "0.2.0", "the library's version wins");
        assert_eq!(value["apiVersion"], "^1.3");
        assert_eq!(value["contextEngineIds"], serde_json::json!(["newest"]));
        assert_eq!(value["configSchema"]["type"], "object");
        assert!(text.find("\"id\"").unwrap() < text.find("\"description\"").unwrap());
    }
}
