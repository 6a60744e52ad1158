//! What every task needs to know about the workspace: where it is, how to call cargo, and which packages are plugins.
//!
//! A plugin package is found, not listed: any workspace package whose folder holds a `pincer.plugin.json`
//! and that has a `cdylib` target.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};

use anyhow::{bail, format_err, Context as _, Result};

use crate::ordered_json::Json;

/// The file name of a plugin's manifest, both in its source folder and where it is staged.
pub(crate) const PLUGIN_MANIFEST: &str = "pincer.plugin.json";

/// The root of the repository: the parent of this crate's folder.
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

/// The workspace as `cargo metadata` describes it.
pub(crate) struct Workspace {
    pub(crate) root: PathBuf,
    /// Cargo's target directory (honours `CARGO_TARGET_DIR` and `build.target-dir`).
    pub(crate) target_dir: PathBuf,
    /// Plugin packages, in the order `cargo metadata` lists them.
    pub(crate) plugins: Vec<PluginPackage>,
}

/// A workspace package that builds a context-engine plugin.
pub(crate) struct PluginPackage {
    /// The cargo package name, for `-p`.
    pub(crate) name: String,
    /// Cargo's package id, as it appears in `compiler-artifact` messages.
    pub(crate) package_id: String,
    /// The folder that holds the package's `Cargo.toml`.
    pub(crate) dir: PathBuf,
    /// The source manifest, keys in the order they were written.
    pub(crate) manifest: Json,
    /// The manifest's `id`, already checked to be a safe folder name.
    pub(crate) plugin_id: String,
}

impl Workspace {
    /// Asks `cargo metadata` about the workspace at `root` and reads every plugin's manifest.
    pub(crate) fn load(root: &Path) -> Result<Workspace> {
        let output = cargo(root)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .stderr(Stdio::inherit())
            .output()
            .context("cannot run `cargo metadata`")?;
        if !output.status.success() {
            bail!("`cargo metadata` {}", describe_status(output.status));
        }
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
            .context("`cargo metadata` printed invalid JSON")?;
        Workspace::from_metadata(root, &metadata)
    }

    fn from_metadata(root: &Path, metadata: &serde_json::Value) -> Result<Workspace> {
        let target_dir = metadata["target_directory"]
            .as_str()
            .ok_or_else(|| format_err!("`cargo metadata` gave no target_directory"))?;
        let packages = metadata["packages"]
            .as_array()
            .ok_or_else(|| format_err!("`cargo metadata` gave no packages"))?;

        let mut plugins = Vec::new();
        let mut ids: BTreeMap<String, String> = BTreeMap::new();
        for package in packages {
            let (Some(name), Some(package_id), Some(manifest_path)) = (
                package["name"].as_str(),
                package["id"].as_str(),
                package["manifest_path"].as_str(),
            ) else {
                bail!("`cargo metadata` gave a package without name, id or manifest_path");
            };
            let dir = Path::new(manifest_path)
                .parent()
                .ok_or_else(|| format_err!("odd manifest path {manifest_path}"))?;
            let manifest_file = dir.join(PLUGIN_MANIFEST);
            if !manifest_file.is_file() || !has_cdylib_target(package) {
                continue;
            }
            let manifest = read_plugin_manifest(&manifest_file)?;
            let plugin_id = manifest_id(&manifest)
                .with_context(|| format!("in {}", manifest_file.display()))?
                .to_owned();
            if let Some(other) = ids.insert(plugin_id.clone(), name.to_owned()) {
                bail!("packages `{other}` and `{name}` both declare plugin id `{plugin_id}`");
            }
            plugins.push(PluginPackage {
                name: name.to_owned(),
                package_id: package_id.to_owned(),
                dir: dir.to_path_buf(),
                manifest,
                plugin_id,
            });
        }
        Ok(Workspace {
            root: root.to_path_buf(),
            target_dir: PathBuf::from(target_dir),
            plugins,
        })
    }

    /// Builds the `pincer` binary (debug) and returns its path.
    pub(crate) fn build_pincer(&self) -> Result<PathBuf> {
        self.build_binary("pincer-host", "pincer", false)
    }

    /// Builds binary `bin` of `package` (release or debug) and returns its path.
    pub(crate) fn build_binary(&self, package: &str, bin: &str, release: bool) -> Result<PathBuf> {
        let mut build_args: Vec<OsString> = vec!["build".into()];
        if release {
            build_args.push("--release".into());
        }
        build_args.extend(["-p", package, "--bin", bin].map(OsString::from));
        let line = shell_line("cargo", &build_args);
        eprintln!("$ {line}");
        let status = self
            .cargo()
            .args(&build_args)
            .status()
            .context("cannot run `cargo build`")?;
        if !status.success() {
            bail!("`{line}` {}", describe_status(status));
        }
        Ok(self
            .target_dir
            .join(if release { "release" } else { "debug" })
            .join(format!("{bin}{}", std::env::consts::EXE_SUFFIX)))
    }

    /// A cargo command that runs in the workspace root.
    pub(crate) fn cargo(&self) -> Command {
        cargo(&self.root)
    }

    /// Where `build-plugins` stages the normal plugins, one folder per plugin id.
    pub(crate) fn staged_plugins_dir(&self) -> PathBuf {
        self.target_dir.join("plugins")
    }

    /// Where `build-plugins` stages the test-only variants, one folder per variant name.
    pub(crate) fn plugin_variants_dir(&self) -> PathBuf {
        self.target_dir.join("plugin-variants")
    }
}

fn cargo(root: &Path) -> Command {
    let mut command =
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")));
    command.current_dir(root);
    command
}

fn has_cdylib_target(package: &serde_json::Value) -> bool {
    let Some(targets) = package["targets"].as_array() else {
        return false;
    };
    targets.iter().any(|target| {
        target["crate_types"]
            .as_array()
            .is_some_and(|types| types.iter().any(|it| it.as_str() == Some("cdylib")))
    })
}

fn read_plugin_manifest(path: &Path) -> Result<Json> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Json::parse(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

/// The manifest's `id`, which must be usable as a folder name.
fn manifest_id(manifest: &Json) -> Result<&str> {
    let id = manifest
        .get("id")
        .and_then(Json::as_str)
        .ok_or_else(|| format_err!("the manifest has no string `id`"))?;
    let safe = !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !safe {
        bail!("plugin id {id:?} is not a plain folder name");
    }
    Ok(id)
}

/// Says how a child process ended, e.g. `exited with status 101`.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("ended with {status}")
}

/// The exit code that passes a child's status on: its own code, or 128 + the signal that killed it.
pub(crate) fn exit_code_of(status: ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return ExitCode::from(u8::try_from(128 + signal).unwrap_or(1));
        }
    }
    ExitCode::FAILURE
}

/// Prints a command line the way a person would type it, arguments quoted for a POSIX shell where needed.
pub(crate) fn shell_line(program: &str, args: &[OsString]) -> String {
    let mut line = program.to_owned();
    for arg in args {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    line
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_ids_must_be_folder_names() {
        for good in ["sliding-window", "faulty", "a.b_c"] {
            let manifest = Json::parse(&format!(r#"{{"id":"{good}"}}"#)).unwrap();
            assert_eq!(manifest_id(&manifest).unwrap(), good);
        }
        for bad in [
            r#"{"id":""}"#,
            r#"{"id":"../x"}"#,
            r#"{"id":".hidden"}"#,
            r#"{"id":3}"#,
            r#"{}"#,
        ] {
            assert!(manifest_id(&Json::parse(bad).unwrap()).is_err(), "{bad}");
        }
    }

    #[test]
    fn shell_lines_quote_only_what_needs_it() {
        let args = [
            "--home",
            "/tmp/demo home",
            "--config",
            r#"{"tokenBudget":400}"#,
            "it's",
        ]
        .map(OsString::from);
        assert_eq!(
            shell_line("pincer", &args),
            r#"pincer --home '/tmp/demo home' --config '{"tokenBudget":400}' 'it'\''s'"#
        );
    }

    #[test]
    fn finds_cdylib_targets() {
        let package: serde_json::Value = serde_json::from_str(
            r#"{"targets":[{"kind":["cdylib","rlib"],"crate_types":["cdylib","rlib"],"name":"sliding_window"}]}"#,
        )
        .unwrap();
        assert!(has_cdylib_target(&package));
        let package: serde_json::Value = serde_json::from_str(
            r#"{"targets":[{"kind":["lib"],"crate_types":["lib"],"name":"x"}]}"#,
        )
        .unwrap();
        assert!(!has_cdylib_target(&package));
    }
}
