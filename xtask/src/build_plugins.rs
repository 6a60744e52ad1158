//! `cargo xtask build-plugins`: build every plugin `cdylib` in one cargo call and stage it beside its manifest.
//!
//! A staged plugin is a folder `<target>/plugins/<id>/` holding a copy of the library and a `pincer.plugin.json`:
//! the source manifest with `library` set to the copy's file name and `sha256` to the copy's digest,
//! which is what the host expects of an installed engine.
//! Files are replaced by writing a temporary file, removing the old one, and renaming the new one in,
//! so a host that has the old library mapped never sees it change under it.
//!
//! Test fixtures that must not be loaded as ordinary engines are staged as *variants* under
//! `<target>/plugin-variants/<name>/`; [`VARIANTS`] lists them.
//! Tests find both folders through `PINCER_STAGED_PLUGINS` and `PINCER_PLUGIN_VARIANTS` (see `test.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, format_err, Context as _, Result};
use sha2::{Digest as _, Sha256};

use crate::ordered_json::Json;
use crate::workspace::{describe_status, PluginPackage, Workspace, PLUGIN_MANIFEST};

/// Options of one `build-plugins` run.
pub(crate) struct Config {
    /// Build with `--release` instead of the dev profile; variants that name their own profile ignore it.
    pub(crate) release: bool,
}

/// A test-only build of a plugin package, staged under `plugin-variants/<name>/`.
struct Variant {
    /// The folder name under `plugin-variants/`.
    name: &'static str,
    /// The cargo package; it must be a plugin package (manifest and `cdylib`).
    package: &'static str,
    /// A cargo profile of its own, or `None` for the run's dev or release build.
    ///
    /// A package under `plugins/testing/` with a `None` variant is staged only as that variant,
    /// never as a normal plugin: it exists to be refused.
    profile: Option<&'static str>,
}

const VARIANTS: &[Variant] = &[
    // `faulty` with `panic = "abort"`: the host must refuse it at load, before any call.
    Variant {
        name: "faulty-abort",
        package: "faulty",
        profile: Some("abort-test"),
    },
    // A library that claims an incompatible API major.
    Variant {
        name: "future-api",
        package: "future-api",
        profile: None,
    },
    // A library that claims API 1.0 with another ABI layout.
    Variant {
        name: "bad-layout",
        package: "bad-layout",
        profile: None,
    },
    // Two engines in one library, one whose id is not the plugin id (slot rules).
    Variant {
        name: "twin",
        package: "twin",
        profile: None,
    },
    // A library that also exports an engine under another plugin's id (`sliding-window`).
    Variant {
        name: "impostor",
        package: "impostor",
        profile: None,
    },
    // An engine that lies in `info`, returns oversized results and crashes, per its config.
    Variant {
        name: "hostile",
        package: "hostile",
        profile: None,
    },
];

/// The two folders a run staged into.
pub(crate) struct Staged {
    pub(crate) plugins_dir: PathBuf,
    pub(crate) variants_dir: PathBuf,
}

impl Staged {
    /// Runs `cargo <args>` (echoed) with `PINCER_STAGED_PLUGINS` and `PINCER_PLUGIN_VARIANTS`
    /// pointing at these folders, and returns cargo's exit code.
    pub(crate) fn run_cargo(
        &self,
        ws: &Workspace,
        args: &[OsString],
    ) -> Result<std::process::ExitCode> {
        self.run_cargo_with(ws, args, &[])
    }

    /// [`Staged::run_cargo`] with extra environment variables.
    pub(crate) fn run_cargo_with(
        &self,
        ws: &Workspace,
        args: &[OsString],
        env: &[(&str, &str)],
    ) -> Result<std::process::ExitCode> {
        let shown: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        eprintln!("$ {shown}{}", crate::workspace::shell_line("cargo", args));
        let status = ws
            .cargo()
            .args(args)
            .envs(env.iter().copied())
            .env("PINCER_STAGED_PLUGINS", &self.plugins_dir)
            .env("PINCER_PLUGIN_VARIANTS", &self.variants_dir)
            .status()
            .with_context(|| format!("cannot run `cargo {}`", args[0].to_string_lossy()))?;
        Ok(crate::workspace::exit_code_of(status))
    }
}

pub(crate) fn run(ws: &Workspace, config: Config) -> Result<Staged> {
    let base_profile = if config.release {
        Profile::Release
    } else {
        Profile::Dev
    };
    if ws.plugins.is_empty() {
        bail!("no plugin packages found: no workspace package has both {PLUGIN_MANIFEST} and a cdylib target");
    }
    let variants: Vec<(&Variant, &PluginPackage)> = VARIANTS
        .iter()
        .map(|variant| {
            let package = ws.plugins.iter().find(|it| it.name == variant.package).ok_or_else(|| {
                format_err!(
                    "variant `{}` names package `{}`, which is not a plugin package (no {PLUGIN_MANIFEST} or no cdylib)",
                    variant.name,
                    variant.package
                )
            })?;
            Ok((variant, package))
        })
        .collect::<Result<_>>()?;

    let testing_dir = ws.root.join("plugins").join("testing");
    let variant_only = |plugin: &PluginPackage| {
        plugin.dir.starts_with(&testing_dir)
            && variants
                .iter()
                .any(|(variant, package)| variant.profile.is_none() && package.name == plugin.name)
    };

    let all: Vec<&PluginPackage> = ws.plugins.iter().collect();
    let base_libraries = cargo_build(ws, &base_profile, &all)?;

    let plugins_dir = ws.staged_plugins_dir();
    let mut staged_ids = BTreeSet::new();
    for plugin in ws.plugins.iter().filter(|it| !variant_only(it)) {
        stage(
            plugin,
            &base_libraries[&plugin.package_id],
            &plugins_dir.join(&plugin.plugin_id),
        )?;
        staged_ids.insert(plugin.plugin_id.clone());
    }
    prune(&plugins_dir, &staged_ids)?;

    // One more cargo call per distinct profile that variants ask for.
    let mut by_profile: BTreeMap<&str, Vec<&PluginPackage>> = BTreeMap::new();
    for (variant, package) in &variants {
        if let Some(profile) = variant.profile {
            by_profile.entry(profile).or_default().push(package);
        }
    }
    let mut profile_libraries = BTreeMap::new();
    for (profile, packages) in by_profile {
        profile_libraries.insert(
            profile,
            cargo_build(ws, &Profile::Named(profile), &packages)?,
        );
    }

    let variants_dir = ws.plugin_variants_dir();
    let mut staged_variants = BTreeSet::new();
    for (variant, package) in &variants {
        let libraries = match variant.profile {
            Some(profile) => &profile_libraries[profile],
            None => &base_libraries,
        };
        stage(
            package,
            &libraries[&package.package_id],
            &variants_dir.join(variant.name),
        )?;
        staged_variants.insert(variant.name.to_owned());
    }
    prune(&variants_dir, &staged_variants)?;

    Ok(Staged {
        plugins_dir,
        variants_dir,
    })
}

enum Profile {
    Dev,
    Release,
    Named(&'static str),
}

/// Runs one `cargo build` for `packages` and returns each package's `cdylib`, keyed by package id.
///
/// Cargo renders its diagnostics to stderr itself (`json-render-diagnostics`);
/// stdout carries the JSON messages, of which only `compiler-artifact` matters here.
fn cargo_build(
    ws: &Workspace,
    profile: &Profile,
    packages: &[&PluginPackage],
) -> Result<BTreeMap<String, PathBuf>> {
    let mut args: Vec<OsString> = vec!["build".into()];
    match profile {
        Profile::Dev => {}
        Profile::Release => args.push("--release".into()),
        Profile::Named(name) => args.extend(["--profile".into(), OsString::from(name)]),
    }
    for package in packages {
        args.extend(["-p".into(), OsString::from(&package.name)]);
    }
    args.push("--message-format=json-render-diagnostics".into());
    eprintln!("$ {}", crate::workspace::shell_line("cargo", &args));

    let mut child = ws
        .cargo()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot run `cargo build`")?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut libraries = BTreeMap::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("cannot read the output of `cargo build`")?;
        match parse_message(&line) {
            Message::Artifact(artifact) => {
                libraries.insert(artifact.package_id, artifact.cdylib);
            }
            Message::Other => {}
            // Not JSON: a build script or proc macro printed to stdout; pass it on.
            Message::Text => println!("{line}"),
        }
    }
    let status = child.wait().context("cannot wait for `cargo build`")?;
    if !status.success() {
        bail!("`cargo build` {}", describe_status(status));
    }
    for package in packages {
        if !libraries.contains_key(&package.package_id) {
            bail!(
                "`cargo build` reported no {} library for package `{}`",
                dll_description(),
                package.name
            );
        }
    }
    Ok(libraries)
}

#[derive(Debug, PartialEq)]
enum Message {
    /// A `compiler-artifact` message of a target with a `cdylib` file.
    Artifact(Artifact),
    /// Any other JSON message.
    Other,
    /// A line that is not JSON.
    Text,
}

#[derive(Debug, PartialEq)]
struct Artifact {
    package_id: String,
    cdylib: PathBuf,
}

fn parse_message(line: &str) -> Message {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
        return Message::Text;
    };
    if message["reason"] != "compiler-artifact" {
        return Message::Other;
    }
    let Some(package_id) = message["package_id"].as_str() else {
        return Message::Other;
    };
    let cdylib = message["filenames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .find(|it| is_dll(it));
    match cdylib {
        Some(path) => Message::Artifact(Artifact {
            package_id: package_id.to_owned(),
            cdylib: PathBuf::from(path),
        }),
        None => Message::Other,
    }
}

fn is_dll(file_name: &str) -> bool {
    file_name.ends_with(std::env::consts::DLL_SUFFIX)
}

fn dll_description() -> String {
    format!("cdylib ({})", std::env::consts::DLL_SUFFIX)
}

/// Copies `library` into `dest_dir` and writes the manifest that pins it.
fn stage(plugin: &PluginPackage, library: &Path, dest_dir: &Path) -> Result<()> {
    let Json::Object(_) = plugin.manifest else {
        bail!(
            "{} in {} is not a JSON object",
            PLUGIN_MANIFEST,
            plugin.dir.display()
        );
    };
    let file_name = library
        .file_name()
        .and_then(|it| it.to_str())
        .ok_or_else(|| format_err!("odd library path {}", library.display()))?;
    fs::create_dir_all(dest_dir)
        .with_context(|| format!("cannot create {}", dest_dir.display()))?;

    let bytes = fs::read(library).with_context(|| format!("cannot read {}", library.display()))?;
    let sha256 = hex(&Sha256::digest(&bytes));
    replace_file(&dest_dir.join(file_name), &bytes)?;

    let mut manifest = plugin.manifest.clone();
    manifest.set("library", Json::String(file_name.to_owned()));
    manifest.set("sha256", Json::String(sha256.clone()));
    replace_file(
        &dest_dir.join(PLUGIN_MANIFEST),
        manifest.to_pretty_string().as_bytes(),
    )?;

    // Anything else in the folder is left over from an older build (a renamed library, a temporary file).
    for entry in
        fs::read_dir(dest_dir).with_context(|| format!("cannot list {}", dest_dir.display()))?
    {
        let entry = entry?;
        let name = entry.file_name();
        if name != file_name && name != PLUGIN_MANIFEST {
            remove_path(&entry.path())?;
        }
    }

    println!(
        "staged {} ({:.1} KiB, sha256 {}) -> {}",
        plugin.plugin_id,
        bytes.len() as f64 / 1024.0,
        &sha256[..12],
        dest_dir.display()
    );
    Ok(())
}

/// Writes `bytes` to `path` without ever writing into an existing file: temporary file, remove, rename.
fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let file_name = path
        .file_name()
        .expect("a staged path has a file name")
        .to_string_lossy();
    let temp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    let mut file =
        fs::File::create(&temp).with_context(|| format!("cannot create {}", temp.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temp.display()))?;
    drop(file);
    if path.exists() {
        fs::remove_file(path)
            .with_context(|| format!("cannot remove the old {}", path.display()))?;
    }
    fs::rename(&temp, path)
        .with_context(|| format!("cannot move {} to {}", temp.display(), path.display()))
}

/// Removes every entry of `dir` whose name is not in `keep`: plugins that are gone, or staged elsewhere now.
fn prune(dir: &Path, keep: &BTreeSet<String>) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let stale = entry
            .file_name()
            .to_str()
            .is_none_or(|name| !keep.contains(name));
        if stale {
            remove_path(&entry.path())?;
        }
    }
    Ok(())
}

fn remove_path(path: &Path) -> Result<()> {
    let res = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    res.with_context(|| format!("cannot remove stale {}", path.display()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `compiler-artifact` line as cargo 1.95 prints it for `sliding-window` (paths shortened).
    const SLIDING_WINDOW_ARTIFACT: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///work/main/plugins/sliding-window#0.1.0","manifest_path":"/work/main/plugins/sliding-window/Cargo.toml","target":{"kind":["cdylib","rlib"],"crate_types":["cdylib","rlib"],"name":"sliding_window","src_path":"/work/main/plugins/sliding-window/src/lib.rs","edition":"2021","doc":true,"doctest":false,"test":true},"profile":{"opt_level":"0","debuginfo":1,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/work/main/target/debug/libsliding_window.rlib","/work/main/target/debug/libsliding_window.so"],"executable":null,"fresh":false}"#;

    #[test]
    fn finds_the_cdylib_of_an_artifact() {
        let line = SLIDING_WINDOW_ARTIFACT.replace(
            "libsliding_window.so",
            &format!("libsliding_window{}", std::env::consts::DLL_SUFFIX),
        );
        let Message::Artifact(artifact) = parse_message(&line) else {
            panic!("not an artifact: {line}");
        };
        assert_eq!(
            artifact.package_id,
            "path+file:///work/main/plugins/sliding-window#0.1.0"
        );
        assert!(is_dll(artifact.cdylib.to_str().unwrap()));
        assert!(artifact.cdylib.starts_with("/work/main/target/debug"));
    }

    #[test]
    fn ignores_other_messages_and_passes_text_on() {
        let rlib_only = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#serde@1.0.229","filenames":["/t/debug/deps/libserde-1.rlib","/t/debug/deps/libserde-1.rmeta"]}"#;
        assert_eq!(parse_message(rlib_only), Message::Other);
        assert_eq!(
            parse_message(r#"{"reason":"build-finished","success":true}"#),
            Message::Other
        );
        assert_eq!(parse_message("warning: not json"), Message::Text);
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn every_variant_has_a_distinct_plain_name() {
        let names: BTreeSet<&str> = VARIANTS.iter().map(|it| it.name).collect();
        assert_eq!(names.len(), VARIANTS.len());
        assert!(names
            .iter()
            .all(|it| it.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')));
    }
}
