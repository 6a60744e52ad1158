//! `pincer plugins`: installs, lists, inspects, enables, disables, selects, removes, packs
//! and reloads plugins.

use std::path::PathBuf;
use std::process::ExitCode;

use pincer_host::config::{LoadedConfig, PincerHome};

use pincer_host::admin::ManageError;
use pincer_host::config::edit::{ConfigEditor, Edit};
use pincer_host::operator::Catalog;
use pincer_host::operator::{required_config_keys, RequiredKey};

use crate::common::{fail, print_pretty};

/// Plugin folders to see besides `$PINCER_HOME/plugins` and `plugins.load.paths`.
#[derive(clap::Args, Debug)]
pub struct PluginsDirs {
    /// Another folder to discover plugins in (repeatable).
    #[arg(long = "plugins-dir", value_name = "DIR")]
    plugins_dirs: Vec<PathBuf>,
}

/// `pincer plugins`' subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum PluginsCommand {
    /// Reloads plugin ID in the gateway on --socket: its new build is loaded beside the old
    /// one and serves new calls; calls in flight finish on the old one.
    Reload {
        /// The plugin id.
        id: String,
        /// The gateway's socket.
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
    },
    /// Verifies a plugin folder or a .tar.gz of one (nothing is copied unless every check
    /// passes), copies it into $PINCER_HOME/plugins/<id>/, and selects its engine.
    Install {
        /// The plugin folder or .tar.gz archive.
        path: PathBuf,
        /// Register the folder in plugins.load.paths instead of copying it.
        #[arg(long, short = 'l')]
        link: bool,
        /// Replace an installed plugin of the same id.
        #[arg(long)]
        force: bool,
    },
    /// Lists the plugins (installed, linked, --plugins-dir), from their manifests.
    List {
        #[command(flatten)]
        dirs: PluginsDirs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows one plugin: manifest, status, engines, host compatibility, sha256, quarantine.
    Inspect {
        /// The plugin id.
        id: String,
        #[command(flatten)]
        dirs: PluginsDirs,
        /// Print JSON (`{plugin: {id, name, status, contextEngineIds, ...}}`).
        #[arg(long)]
        json: bool,
    },
    /// Enables a plugin (plugins.entries.<id>.enabled).
    Enable {
        /// The plugin id.
        id: String,
        #[command(flatten)]
        dirs: PluginsDirs,
    },
    /// Disables a plugin; the slot keeps naming its engine and legacy answers meanwhile.
    Disable {
        /// The plugin id.
        id: String,
        #[command(flatten)]
        dirs: PluginsDirs,
    },
    /// Selects a context engine for the slot and disables the other context-engine plugins.
    Select {
        /// The engine id (or `legacy`).
        engine: String,
        #[command(flatten)]
        dirs: PluginsDirs,
    },
    /// Shows a plugin's engine config (plugins.entries.<id>.config), one KEY of it, or sets
    /// KEY to VALUE (JSON, else a string), checked against the plugin's configSchema and
    /// written keeping the file's comments.
    Config {
        /// The plugin id.
        id: String,
        /// A top-level key of the config.
        key: Option<String>,
        /// The key's new value: JSON (`2`, `true`, `"text"`, `[1]`), else taken as a string.
        value: Option<String>,
        #[command(flatten)]
        dirs: PluginsDirs,
    },
    /// Removes an installed plugin (or unlinks a linked one); the slot goes back to legacy
    /// if it selected its engine.
    Remove {
        /// The plugin id.
        id: String,
    },
    /// Builds an engine crate (plain `cargo build --lib`), or takes a built library, and
    /// writes a plugin folder ready for `pincer plugins install`: the library and a
    /// pincer.plugin.json with id, version, apiVersion and contextEngineIds from the
    /// library, library and sha256 filled in, other fields from the crate's own manifest.
    Pack {
        /// The engine's crate folder (default: the current folder).
        #[arg(default_value = ".", conflicts_with = "library")]
        crate_dir: PathBuf,
        /// Pack this built library instead of building a crate.
        #[arg(long, value_name = "FILE")]
        library: Option<PathBuf>,
        /// The manifest to start from (default: pincer.plugin.json beside Cargo.toml or the
        /// library).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// Where to write the plugin folder (default: <crate>/target/pincer-plugins/<id>,
        /// or ./<id> for --library).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Build with --release.
        #[arg(long)]
        release: bool,
    },
}

/// Runs `pincer plugins`.
pub fn run(home: PincerHome, command: PluginsCommand) -> ExitCode {
    use pincer_host::admin::{InstallMode, PluginCommands};
    use pincer_host::operator::plugin_roots;
    use pincer_host::report::plugins::{inspect, list};
    let read = |extra: &[PathBuf]| -> Result<(LoadedConfig, Catalog), ExitCode> {
        let config = LoadedConfig::load(&home.config_path()).map_err(|err| fail(err, 2))?;
        let catalog = Catalog::read(&plugin_roots(&home, &config.config, extra));
        Ok((config, catalog))
    };
    let outcome = match command {
        PluginsCommand::Reload { id, socket } => {
            return crate::serve::call_and_print(
                &socket,
                "reload",
                None,
                Some(serde_json::json!({ "pluginId": id })),
                true,
            )
        }
        PluginsCommand::List { dirs, json } => {
            let (config, catalog) = match read(&dirs.plugins_dirs) {
                Ok(it) => it,
                Err(code) => return code,
            };
            let report = list(&catalog, &config.config);
            if json {
                print_pretty(&report);
            } else {
                print!("{}", report.render_text());
            }
            return ExitCode::SUCCESS;
        }
        PluginsCommand::Inspect { id, dirs, json } => {
            let (config, catalog) = match read(&dirs.plugins_dirs) {
                Ok(it) => it,
                Err(code) => return code,
            };
            let Some(entry) = catalog.plugin(&id) else {
                let known: Vec<String> = catalog.entries.iter().map(|e| e.id()).collect();
                return fail(ManageError::UnknownPlugin { id, known }, 2);
            };
            let report = inspect(entry, &config.config, &home);
            if json {
                print_pretty(&report);
            } else {
                print!("{}", report.render_text());
            }
            return ExitCode::SUCCESS;
        }
        PluginsCommand::Install { path, link, force } => {
            let mode = if link {
                InstallMode::Link
            } else {
                InstallMode::Copy { replace: force }
            };
            // What the plugin's schema requires, known before it is installed.
            let needs = pincer_host::operator::prepare(&path).ok().map(|prepared| {
                let manifest = prepared.manifest();
                (manifest.id.clone(), required_config_keys(manifest))
            });
            let installed = PluginCommands::new(home.clone(), Vec::new()).install(&path, mode);
            if let (Ok(outcome), Some((id, required))) = (&installed, needs) {
                for message in &outcome.messages {
                    println!("{message}");
                }
                say_missing_config(&home, &id, &required);
                return ExitCode::SUCCESS;
            }
            installed
        }
        PluginsCommand::Config {
            id,
            key,
            value,
            dirs,
        } => {
            let (config, catalog) = match read(&dirs.plugins_dirs) {
                Ok(it) => it,
                Err(code) => return code,
            };
            return configure(&home, &config, &catalog, &id, key, value);
        }
        PluginsCommand::Enable { id, dirs } => {
            PluginCommands::new(home, dirs.plugins_dirs).enable(&id)
        }
        PluginsCommand::Disable { id, dirs } => {
            PluginCommands::new(home, dirs.plugins_dirs).disable(&id)
        }
        PluginsCommand::Select { engine, dirs } => {
            PluginCommands::new(home, dirs.plugins_dirs).select(&engine)
        }
        PluginsCommand::Remove { id } => PluginCommands::new(home, Vec::new()).remove(&id),
        PluginsCommand::Pack {
            crate_dir,
            library,
            manifest,
            out,
            release,
        } => {
            use pincer_host::operator::{pack, PackSource};
            let source = match library {
                Some(path) => PackSource::Library(path),
                None => PackSource::Crate {
                    dir: crate_dir,
                    release,
                },
            };
            return match pack(&source, manifest.as_deref(), out.as_deref()) {
                Ok(packed) => {
                    println!(
                        "Packed plugin \"{}\" {} (engines: {}) into {}.",
                        packed.manifest.id,
                        packed.manifest.version,
                        packed.manifest.context_engine_ids.join(", "),
                        packed.dir.display()
                    );
                    println!(
                        "Install it with: pincer plugins install {}",
                        packed.dir.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(err) => fail(err, 1),
            };
        }
    };
    match outcome {
        Ok(outcome) => {
            for message in outcome.messages {
                println!("{message}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            let code = match &err {
                ManageError::Config(_)
                | ManageError::UnknownPlugin { .. }
                | ManageError::UnknownEngine { .. } => 2,
                _ => 1,
            };
            fail(err, code)
        }
    }
}

/// After an install: when the plugin's schema requires config keys its entry lacks, says
/// which (with their types) and how to set them — until then its engine answers as `legacy`.
fn say_missing_config(home: &PincerHome, id: &str, required: &[RequiredKey]) {
    let current = LoadedConfig::load(&home.config_path())
        .map(|config| config.config.entry_config(id))
        .unwrap_or_else(|_| serde_json::json!({}));
    let missing: Vec<String> = required
        .iter()
        .filter(|key| current.get(&key.name).is_none())
        .map(ToString::to_string)
        .collect();
    if missing.is_empty() {
        return;
    }
    println!(
        "Plugin \"{id}\" needs config before its engine answers (legacy answers until then): required keys {}.",
        missing.join(", ")
    );
    println!("Set each with: pincer plugins config {id} KEY VALUE");
}

/// `pincer plugins config ID [KEY [VALUE]]`.
fn configure(
    home: &PincerHome,
    config: &LoadedConfig,
    catalog: &Catalog,
    id: &str,
    key: Option<String>,
    value: Option<String>,
) -> ExitCode {
    let Some(entry) = catalog.plugin(id) else {
        let known: Vec<String> = catalog.entries.iter().map(|e| e.id()).collect();
        return fail(
            ManageError::UnknownPlugin {
                id: id.to_owned(),
                known,
            },
            2,
        );
    };
    let manifest = match &entry.manifest {
        Ok(manifest) => manifest,
        Err(err) => return fail(err, 1),
    };
    let current = config.config.entry_config(id);
    let (key, value) = match (key, value) {
        (None, _) => {
            print_pretty(&current);
            return ExitCode::SUCCESS;
        }
        (Some(key), None) => {
            return match current.get(&key) {
                Some(value) => {
                    print_pretty(value);
                    ExitCode::SUCCESS
                }
                None => fail(
                    format!("plugins.entries.{id}.config has no key \"{key}\""),
                    1,
                ),
            }
        }
        (Some(key), Some(value)) => (key, value),
    };
    let value: serde_json::Value =
        serde_json::from_str(&value).unwrap_or(serde_json::Value::String(value));
    let mut next = match current {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    next.insert(key.clone(), value.clone());
    let next = serde_json::Value::Object(next);
    // Checked against the schema with its `required` left out: keys are set one at a time.
    let mut partial = manifest.clone();
    if let Some(schema) = partial.config_schema.as_object_mut() {
        schema.remove("required");
    }
    if let Err(err) = partial.validate_config(&next) {
        return fail(err, 2);
    }
    let mut editor = match ConfigEditor::open(&home.config_path()) {
        Ok(editor) => editor,
        Err(err) => return fail(err, 1),
    };
    if let Err(err) = editor.apply(&[Edit::set(
        &["plugins", "entries", id, "config", &key],
        value.clone(),
    )]) {
        return fail(err, 1);
    }
    println!("Set plugins.entries.{id}.config.{key} to {value}.");
    let missing: Vec<String> = required_config_keys(manifest)
        .iter()
        .filter(|required| next.get(&required.name).is_none())
        .map(ToString::to_string)
        .collect();
    if !missing.is_empty() {
        println!(
            "Still required before its engine answers: {}.",
            missing.join(", ")
        );
    }
    ExitCode::SUCCESS
}
