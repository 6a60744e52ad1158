//! The plugin manifest, `pincer.plugin.json`: its Rust shape, the reader that checks it field by
//! field without running any plugin code, and validation of an entry's `config` against the
//! manifest's `configSchema`.
//!
//! A plugin folder holds the manifest next to the plugin's shared library. The manifest is read
//! first, before any `dlopen`, so that a broken plugin is reported with a precise, actionable
//! message instead of being loaded.
//!
//! ```json
//! {
//!   "id": "sliding-window",
//!   "version": "0.1.0",
//!   "kind": "context-engine",
//!   "apiVersion": "^1.0",
//!   "configSchema": { "type": "object", "properties": { "maxMessages": { "type": "integer" } } }
//! }
//! ```

use crate::types::json_kind;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::types::{validate_plugin_id, HostOperation, HostRequirement, HostRequirements};

/// File name of the manifest inside a plugin folder.
pub const MANIFEST_FILE_NAME: &str = "pincer.plugin.json";

/// Top-level manifest keys this host understands; any other key is reported in
/// [`PluginManifest::unknown_keys`].
const KNOWN_KEYS: [&str; 12] = [
    "$schema",
    "id",
    "contextEngineIds",
    "name",
    "version",
    "kind",
    "apiVersion",
    "library",
    "sha256",
    "configSchema",
    "hostRequirements",
    "description",
];

/// The keys whose misspelling would silently weaken a plugin's checks (its pin, which file is
/// loaded, which API it needs): a near miss of one of them refuses the plugin.
const SECURITY_KEYS: [&str; 3] = ["sha256", "library", "apiVersion"];

/// The largest manifest read, in bytes: a manifest is a few hundred bytes; a 200 MB one is an
/// attack on the host's memory, refused before it is read.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Longest rendering of an offending value kept in an error message.
const MAX_FOUND_LEN: usize = 80;

/// Longest single config violation kept in [`ManifestError::ConfigRejected`].
const MAX_VIOLATION_LEN: usize = 300;

/// A parsed and checked `pincer.plugin.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginManifest {
    /// Plugin id: non-empty, characters `[a-z0-9._-]`, starting with `[a-z0-9]`.
    pub id: String,
    /// Display name; defaults to [`PluginManifest::id`] when the file has none.
    pub name: String,
    /// The plugin's own version.
    pub version: semver::Version,
    /// What kind of plugin this is; only context engines exist today.
    pub kind: PluginKind,
    /// Requirement on the `pincer-plugin-api` version the plugin was built against (`apiVersion`).
    pub api_version: semver::VersionReq,
    /// Library file name, relative to the plugin folder; defaults to
    /// [`default_library_file_name`] of the id.
    pub library: String,
    /// Optional sha256 pin of the library, 64 lowercase hex characters.
    pub sha256: Option<String>,
    /// JSON Schema (an object or a boolean) for the entry's `config` (`configSchema`);
    /// defaults to `{"type":"object"}`. It is known to compile.
    pub config_schema: Value,
    /// The engine ids the library registers (`contextEngineIds`); defaults to `[id]`. Known
    /// without opening the library, and checked against the library's own manifest at load.
    pub context_engine_ids: Vec<String>,
    /// Requirements per host operation (`hostRequirements`).
    pub host_requirements: HostRequirements,
    /// Whether the manifest declares `hostRequirements` at all. When it does, what each
    /// engine's `info()` reports must equal it (checked when the engine is created).
    #[serde(skip)]
    pub host_requirements_declared: bool,
    /// Optional one-line description.
    pub description: Option<String>,
    /// Top-level keys this host does not know, sorted. Not an error (newer manifests may add
    /// keys); `doctor` reports them as a warning.
    #[serde(skip)]
    pub unknown_keys: Vec<String>,
    /// The plugin folder the manifest was read from.
    #[serde(skip)]
    pub dir: PathBuf,
}

/// The kind of a plugin, from the manifest's `kind` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PluginKind {
    /// A context engine (`"context-engine"`).
    #[serde(rename = "context-engine")]
    ContextEngine,
}

impl PluginKind {
    /// The manifest spelling of this kind, e.g. `"context-engine"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::ContextEngine => "context-engine",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a manifest could not be read, or why a config does not match its schema.
///
/// Every message is one line that says what was expected, what was found and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The plugin folder has no `pincer.plugin.json`.
    #[error("no {MANIFEST_FILE_NAME} in {}: a plugin folder needs one next to its library; add it, or point at the right folder", dir.display())]
    Missing {
        /// The plugin folder that was searched.
        dir: PathBuf,
    },
    /// The manifest exists but could not be read.
    #[error("cannot read {}: {io}; check that it is a readable file", path.display())]
    Unreadable {
        /// Path of the manifest.
        path: PathBuf,
        /// The underlying error.
        io: io::Error,
    },
    /// The manifest is not valid JSON.
    #[error("{} is not valid JSON at line {line}, column {column}: {message}; fix the syntax there", path.display())]
    Malformed {
        /// Path of the manifest.
        path: PathBuf,
        /// 1-based line of the error, as reported by serde_json.
        line: usize,
        /// 1-based column of the error, as reported by serde_json.
        column: usize,
        /// What serde_json found wrong.
        message: String,
    },
    /// The manifest is valid JSON but not an object.
    #[error("{} must hold a JSON object, found {found}; put the manifest fields inside {{ … }}", path.display())]
    NotAnObject {
        /// Path of the manifest.
        path: PathBuf,
        /// What the top-level value was, e.g. `an array`.
        found: String,
    },
    /// A required field is absent (or `null`).
    #[error("{} has no \"{field}\" field, which is required; add it to the manifest", path.display())]
    MissingField {
        /// Path of the manifest.
        path: PathBuf,
        /// The JSON key of the missing field.
        field: String,
    },
    /// A field has the wrong type or a value outside what is allowed.
    #[error("{}: \"{field}\" must be {expected}, found {found}; fix it in the manifest", path.display())]
    InvalidField {
        /// Path of the manifest.
        path: PathBuf,
        /// The JSON key (or dotted path, e.g. `hostRequirements.agent-run`) of the field.
        field: String,
        /// The offending value, rendered briefly.
        found: String,
        /// What the field must be.
        expected: String,
    },
    /// `kind` names a plugin kind this host does not load.
    #[error("{}: \"kind\" is {found} but this host loads only \"context-engine\" plugins; set \"kind\": \"context-engine\" or use a host that supports that kind", path.display())]
    WrongKind {
        /// Path of the manifest.
        path: PathBuf,
        /// The `kind` found, JSON-quoted.
        found: String,
    },
    /// `version` is not a semver version.
    #[error("{}: \"version\" {found} is not semver ({message}); use a version such as \"1.2.3\"", path.display())]
    InvalidVersion {
        /// Path of the manifest.
        path: PathBuf,
        /// The version found, JSON-quoted.
        found: String,
        /// Why semver rejected it.
        message: String,
    },
    /// `apiVersion` is not a semver requirement.
    #[error("{}: \"apiVersion\" {found} is not a semver requirement ({message}); use a requirement on pincer-plugin-api such as \"^1.0\"", path.display())]
    InvalidApiVersion {
        /// Path of the manifest.
        path: PathBuf,
        /// The requirement found, JSON-quoted.
        found: String,
        /// Why semver rejected it.
        message: String,
    },
    /// `configSchema` does not compile as a JSON Schema.
    #[error("{}: \"configSchema\" is not a valid JSON Schema: {message}; fix the schema (an object such as {{\"type\":\"object\"}}, or true)", path.display())]
    InvalidConfigSchema {
        /// Path of the manifest.
        path: PathBuf,
        /// What the schema compiler reported.
        message: String,
    },
    /// The manifest is larger than [`MAX_MANIFEST_BYTES`].
    #[error("{} is {size} bytes, more than the {max} a manifest may have: it is refused unread; a manifest holds a few fields, not data", path.display())]
    TooLarge {
        /// Path of the manifest.
        path: PathBuf,
        /// Its size (at least; reading stops past the cap).
        size: u64,
        /// The cap.
        max: u64,
    },
    /// An unknown key is a near miss of a security-relevant key (`sha256`, `library`,
    /// `apiVersion`): the author meant to set it and did not.
    #[error("{}: unknown key \"{found}\" looks like a misspelling of \"{meant}\", which this host would otherwise ignore (leaving the plugin {consequence}): it is refused; rename the key to \"{meant}\"", path.display())]
    MisspelledKey {
        /// Path of the manifest.
        path: PathBuf,
        /// The key found.
        found: String,
        /// The known key it resembles.
        meant: &'static str,
        /// What ignoring it would have meant.
        consequence: &'static str,
    },
    /// An entry's `config` does not match the plugin's `configSchema`.
    #[error("config of plugin \"{plugin_id}\" does not match its configSchema: {}; fix plugins.entries.{plugin_id}.config in pincer.json", violations.join("; "))]
    ConfigRejected {
        /// The plugin whose config was rejected.
        plugin_id: String,
        /// Every violation, as `"<instance path>: <message>"`.
        violations: Vec<String>,
    },
}

impl ManifestError {
    /// A stable snake_case code for this error, for JSON output (e.g. `"manifest_missing"`).
    pub fn code(&self) -> &'static str {
        match self {
            ManifestError::Missing { .. } => "manifest_missing",
            ManifestError::Unreadable { .. } => "manifest_unreadable",
            ManifestError::Malformed { .. } => "manifest_malformed",
            ManifestError::NotAnObject { .. } => "manifest_not_an_object",
            ManifestError::MissingField { .. } => "manifest_missing_field",
            ManifestError::InvalidField { .. } => "manifest_invalid_field",
            ManifestError::WrongKind { .. } => "manifest_wrong_kind",
            ManifestError::InvalidVersion { .. } => "manifest_invalid_version",
            ManifestError::InvalidApiVersion { .. } => "manifest_invalid_api_version",
            ManifestError::InvalidConfigSchema { .. } => "manifest_invalid_config_schema",
            ManifestError::ConfigRejected { .. } => "config_rejected",
            ManifestError::TooLarge { .. } => "manifest_too_large",
            ManifestError::MisspelledKey { .. } => "manifest_misspelled_key",
        }
    }

    /// The manifest file (or, for [`ManifestError::Missing`], the plugin folder) this error is
    /// about, when there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ManifestError::Missing { dir } => Some(dir),
            ManifestError::Unreadable { path, .. }
            | ManifestError::Malformed { path, .. }
            | ManifestError::NotAnObject { path, .. }
            | ManifestError::MissingField { path, .. }
            | ManifestError::InvalidField { path, .. }
            | ManifestError::WrongKind { path, .. }
            | ManifestError::InvalidVersion { path, .. }
            | ManifestError::InvalidApiVersion { path, .. }
            | ManifestError::InvalidConfigSchema { path, .. }
            | ManifestError::TooLarge { path, .. }
            | ManifestError::MisspelledKey { path, .. } => Some(path),
            ManifestError::ConfigRejected { .. } => None,
        }
    }
}

/// The platform's `cdylib` file name for a crate whose lib name is `id` with `-` and `.`
/// replaced by `_`: `lib<x>.so` on Linux, `lib<x>.dylib` on macOS, `<x>.dll` on Windows
/// (e.g. `sliding-window` gives `libsliding_window.so` on Linux).
pub fn default_library_file_name(id: &str) -> String {
    format!(
        "{}{}{}",
        std::env::consts::DLL_PREFIX,
        id.replace(['-', '.'], "_"),
        std::env::consts::DLL_SUFFIX
    )
}

/// Reads and checks `plugin_dir/pincer.plugin.json` without running any plugin code.
///
/// Every field is checked by name, so an error says exactly which field is wrong and how.
/// Unknown top-level keys are not an error; they are listed in
/// [`PluginManifest::unknown_keys`].
pub fn read_manifest(plugin_dir: &Path) -> Result<PluginManifest, ManifestError> {
    let path = plugin_dir.join(MANIFEST_FILE_NAME);
    let read = std::fs::File::open(&path).and_then(|file| {
        use std::io::Read as _;
        let mut bytes = Vec::new();
        file.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut bytes)?;
        Ok(bytes)
    });
    let bytes = match read {
        Ok(bytes) if bytes.len() as u64 > MAX_MANIFEST_BYTES => {
            let size = std::fs::metadata(&path).map_or(bytes.len() as u64, |m| m.len());
            return Err(ManifestError::TooLarge {
                path,
                size,
                max: MAX_MANIFEST_BYTES,
            });
        }
        Ok(bytes) => bytes,
        Err(io) if io.kind() == io::ErrorKind::NotFound => {
            return Err(ManifestError::Missing {
                dir: plugin_dir.to_path_buf(),
            })
        }
        Err(io) => return Err(ManifestError::Unreadable { path, io }),
    };
    let mut manifest = parse_manifest(&bytes, &path)?;
    manifest.dir = plugin_dir.to_path_buf();
    Ok(manifest)
}

/// Parses manifest bytes; `path` is used only in error messages. `dir` is left empty.
fn parse_manifest(bytes: &[u8], path: &Path) -> Result<PluginManifest, ManifestError> {
    // Tolerate a UTF-8 byte order mark, which some editors add.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: serde_message(&e),
    })?;
    let obj = match value {
        Value::Object(obj) => obj,
        other => {
            return Err(ManifestError::NotAnObject {
                path: path.to_path_buf(),
                found: json_kind(&other).to_string(),
            })
        }
    };
    let fields = Fields { obj: &obj, path };

    let id = fields.required_str("id")?;
    validate_plugin_id(id)
        .map_err(|expected| fields.invalid("id", &Value::String(id.into()), expected))?;
    let id = id.to_string();

    let name = match fields.optional_str("name")? {
        Some(name) if name.trim().is_empty() => {
            return Err(fields.invalid(
                "name",
                &Value::String(name.into()),
                "a non-empty display name (or leave it out to use the id)",
            ))
        }
        Some(name) => name.to_string(),
        None => id.clone(),
    };

    let version_str = fields.required_str("version")?;
    let version =
        semver::Version::parse(version_str).map_err(|e| ManifestError::InvalidVersion {
            path: path.to_path_buf(),
            found: render_found(&Value::String(version_str.into())),
            message: e.to_string(),
        })?;

    let kind_str = fields.required_str("kind")?;
    let kind = match kind_str {
        "context-engine" => PluginKind::ContextEngine,
        other => {
            return Err(ManifestError::WrongKind {
                path: path.to_path_buf(),
                found: render_found(&Value::String(other.into())),
            })
        }
    };

    let api_str = fields.required_str("apiVersion")?;
    let api_version =
        semver::VersionReq::parse(api_str).map_err(|e| ManifestError::InvalidApiVersion {
            path: path.to_path_buf(),
            found: render_found(&Value::String(api_str.into())),
            message: e.to_string(),
        })?;

    let library = match fields.optional_str("library")? {
        Some(lib) if lib.trim().is_empty() => return Err(fields.invalid(
            "library",
            &Value::String(lib.into()),
            "a non-empty file name relative to the plugin folder (or leave it out for the default)",
        )),
        Some(lib) => lib.to_string(),
        None => default_library_file_name(&id),
    };

    let sha256 = match fields.optional_str("sha256")? {
        Some(s) if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(s.to_ascii_lowercase())
        }
        Some(s) => {
            return Err(fields.invalid(
                "sha256",
                &Value::String(s.into()),
                "64 hex characters (the library's sha256; `sha256sum <library>` prints it)",
            ))
        }
        None => None,
    };

    let config_schema = match fields.get("configSchema") {
        None => serde_json::json!({ "type": "object" }),
        Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
            compile_schema(schema).map_err(|message| ManifestError::InvalidConfigSchema {
                path: path.to_path_buf(),
                message,
            })?;
            schema.clone()
        }
        Some(other) => {
            return Err(fields.invalid(
                "configSchema",
                other,
                "a JSON Schema: an object or a boolean",
            ))
        }
    };

    let context_engine_ids = parse_engine_ids(&fields, &id)?;
    let host_requirements = parse_host_requirements(&fields)?;

    let description = fields.optional_str("description")?.map(str::to_string);

    let mut unknown_keys: Vec<String> = obj
        .keys()
        .filter(|k| !KNOWN_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    unknown_keys.sort();
    for key in &unknown_keys {
        if let Some(meant) = nearest_known_key(key).filter(|k| SECURITY_KEYS.contains(k)) {
            return Err(ManifestError::MisspelledKey {
                path: path.to_path_buf(),
                found: one_line(key, MAX_FOUND_LEN),
                meant,
                consequence: match meant {
                    "sha256" => "unpinned: any library in its folder would load",
                    "library" => "loading the default library file instead of the one named",
                    _ => "without the API requirement its author meant",
                },
            });
        }
    }

    Ok(PluginManifest {
        id,
        name,
        version,
        kind,
        api_version,
        library,
        sha256,
        config_schema,
        context_engine_ids,
        host_requirements_declared: fields.get("hostRequirements").is_some(),
        host_requirements,
        description,
        unknown_keys,
        dir: PathBuf::new(),
    })
}

/// The known key `key` is a near miss of, if any: the same letters once case and `-`/`_` are
/// ignored, or at most two edits away (one for keys of up to five letters).
pub fn nearest_known_key(key: &str) -> Option<&'static str> {
    let fold = |k: &str| -> String {
        k.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let folded = fold(key);
    KNOWN_KEYS
        .iter()
        .filter(|known| **known != "$schema")
        .map(|known| (*known, edit_distance(&folded, &fold(known))))
        .filter(|(known, d)| *d <= if fold(known).len() <= 5 { 1 } else { 2 })
        .min_by_key(|(_, d)| *d)
        .map(|(known, _)| known)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// `contextEngineIds`: a non-empty array of distinct ids, each valid as an id; `[id]` when
/// absent.
fn parse_engine_ids(fields: &Fields<'_>, plugin_id: &str) -> Result<Vec<String>, ManifestError> {
    const EXPECTED: &str =
        "a non-empty array of distinct engine ids such as [\"sliding-window\"] (or leave it out for [<id>])";
    let list = match fields.get("contextEngineIds") {
        None => return Ok(vec![plugin_id.to_owned()]),
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(other) => return Err(fields.invalid("contextEngineIds", other, EXPECTED)),
    };
    let mut ids: Vec<String> = Vec::with_capacity(list.len());
    for item in list {
        match item {
            Value::String(id) if validate_plugin_id(id).is_ok() && !ids.contains(id) => {
                ids.push(id.clone())
            }
            Value::String(id) if ids.contains(id) => {
                return Err(fields.invalid("contextEngineIds", item, "distinct engine ids"))
            }
            Value::String(id) => {
                let expected = validate_plugin_id(id).err().unwrap_or(EXPECTED);
                return Err(fields.invalid("contextEngineIds", item, expected));
            }
            other => return Err(fields.invalid("contextEngineIds", other, EXPECTED)),
        }
    }
    Ok(ids)
}

fn parse_host_requirements(fields: &Fields<'_>) -> Result<HostRequirements, ManifestError> {
    let mut out = HostRequirements::default();
    let map = match fields.get("hostRequirements") {
        None => return Ok(out),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(fields.invalid(
                "hostRequirements",
                other,
                "an object keyed by operation (agent-run, manual-compact, subagent-spawn)",
            ))
        }
    };
    for (op, req) in map {
        let Some(operation) = HostOperation::parse(op) else {
            return Err(fields.invalid(
                "hostRequirements",
                &Value::String(op.clone()),
                "keyed only by the operations agent-run, manual-compact or subagent-spawn",
            ));
        };
        let field = format!("hostRequirements.{op}");
        let parsed: HostRequirement = serde_json::from_value(req.clone()).map_err(|e| {
            fields.invalid(
                &field,
                req,
                &format!(
                    "{{\"requiredCapabilities\": [strings], \"unsupportedMessage\"?: string}} ({})",
                    serde_message(&e)
                ),
            )
        })?;
        out.0.insert(operation, parsed);
    }
    Ok(out)
}

impl PluginManifest {
    /// One warning per unknown key, with the known key it resembles when there is one: the
    /// author's intent is not silently dropped.
    pub fn unknown_key_warnings(&self) -> Vec<String> {
        self.unknown_keys
            .iter()
            .map(|key| {
                let key = one_line(key, MAX_FOUND_LEN);
                match nearest_known_key(&key) {
                    Some(meant) => format!(
                        "{MANIFEST_FILE_NAME}: unknown key \"{key}\" is ignored; did you mean \"{meant}\"?"
                    ),
                    None => format!("{MANIFEST_FILE_NAME}: unknown key \"{key}\" is ignored"),
                }
            })
            .collect()
    }

    /// Validates an entry's `config` against [`PluginManifest::config_schema`].
    ///
    /// On failure returns [`ManifestError::ConfigRejected`] listing every violation as
    /// `"<instance path>: <message>"`.
    pub fn validate_config(&self, config: &Value) -> Result<(), ManifestError> {
        let validator = build_validator(&self.config_schema).map_err(|message| {
            ManifestError::InvalidConfigSchema {
                path: self.dir.join(MANIFEST_FILE_NAME),
                message,
            }
        })?;
        let violations: Vec<String> = validator
            .iter_errors(config)
            .map(|err| {
                let at = err.instance_path.as_str();
                let at = if at.is_empty() { "(root)" } else { at };
                one_line(&format!("{at}: {err}"), MAX_VIOLATION_LEN)
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(ManifestError::ConfigRejected {
                plugin_id: self.id.clone(),
                violations,
            })
        }
    }
}

/// Compiles `schema` (draft auto-detected), turning any failure, even a panic inside the
/// schema compiler, into a one-line message.
fn build_validator(schema: &Value) -> Result<jsonschema::Validator, String> {
    let compile = || {
        jsonschema::validator_for(schema).map_err(|err| {
            let at = err.instance_path.as_str();
            let message = if at.is_empty() {
                err.to_string()
            } else {
                format!("at {at}: {err}")
            };
            one_line(&message, MAX_VIOLATION_LEN)
        })
    };
    std::panic::catch_unwind(compile)
        .unwrap_or_else(|_| Err("the schema compiler failed on this schema".to_string()))
}

fn compile_schema(schema: &Value) -> Result<(), String> {
    build_validator(schema).map(drop)
}

/// Typed access to the manifest's top-level fields with precise errors.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    path: &'a Path,
}

impl<'a> Fields<'a> {
    /// The field's value; `null` counts as absent.
    fn get(&self, field: &str) -> Option<&'a Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    fn required_str(&self, field: &str) -> Result<&'a str, ManifestError> {
        match self.get(field) {
            None => Err(ManifestError::MissingField {
                path: self.path.to_path_buf(),
                field: field.to_string(),
            }),
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(self.invalid(field, other, "a string")),
        }
    }

    fn optional_str(&self, field: &str) -> Result<Option<&'a str>, ManifestError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.invalid(field, other, "a string")),
        }
    }

    fn invalid(&self, field: &str, found: &Value, expected: &str) -> ManifestError {
        ManifestError::InvalidField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            found: render_found(found),
            expected: expected.to_string(),
        }
    }
}

/// Renders a found value briefly: strings JSON-quoted, other values with their type.
fn render_found(value: &Value) -> String {
    let json = value.to_string();
    match value {
        Value::String(_) => one_line(&json, MAX_FOUND_LEN),
        Value::Object(_) | Value::Array(_) => {
            format!("{} {}", json_kind(value), one_line(&json, MAX_FOUND_LEN))
        }
        _ => format!("{} ({})", json_kind(value), one_line(&json, MAX_FOUND_LEN)),
    }
}

/// serde_json's message without its trailing " at line L column C".
fn serde_message(err: &serde_json::Error) -> String {
    let full = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    one_line(
        full.strip_suffix(&suffix).unwrap_or(&full),
        MAX_VIOLATION_LEN,
    )
}

/// Collapses line breaks and cuts `text` to at most `max` characters (adding `…`).
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, text: &str) {
        std::fs::write(dir.join(MANIFEST_FILE_NAME), text).unwrap();
    }

    fn read_json(value: Value) -> Result<PluginManifest, ManifestError> {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &value.to_string());
        read_manifest(dir.path())
    }

    fn minimal() -> Value {
        json!({
            "id": "sliding-window",
            "version": "0.1.0",
            "kind": "context-engine",
            "apiVersion": "^1.0"
        })
    }

    fn with(key: &str, value: Value) -> Value {
        let mut m = minimal();
        m[key] = value;
        m
    }

    fn without(key: &str) -> Value {
        let mut m = minimal();
        m.as_object_mut().unwrap().remove(key);
        m
    }

    fn assert_one_line(err: &ManifestError) {
        let text = err.to_string();
        assert!(!text.contains('\n'), "multi-line message: {text}");
        assert!(!text.ends_with('.'), "trailing period: {text}");
    }

    #[test]
    fn minimal_manifest_gets_defaults() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &minimal().to_string());
        let m = read_manifest(dir.path()).unwrap();
        assert_eq!(m.id, "sliding-window");
        assert_eq!(m.name, "sliding-window");
        assert_eq!(m.version, semver::Version::new(0, 1, 0));
        assert_eq!(m.kind, PluginKind::ContextEngine);
        assert!(m.api_version.matches(&semver::Version::new(1, 3, 0)));
        assert_eq!(m.library, default_library_file_name("sliding-window"));
        assert_eq!(m.sha256, None);
        assert_eq!(m.config_schema, json!({"type": "object"}));
        assert!(m.host_requirements.is_empty());
        assert_eq!(
            m.context_engine_ids,
            ["sliding-window"],
            "defaults to the plugin id"
        );
        assert!(m.unknown_keys.is_empty());
        assert_eq!(m.dir, dir.path());
    }

    #[test]
    fn full_manifest_round_trips_to_camel_case_json() {
        let sha = "AB".repeat(32);
        let mut m = minimal();
        m["name"] = json!("Sliding window");
        m["library"] = json!("lib/custom.so");
        m["sha256"] = json!(sha);
        m["description"] = json!("keeps the last N messages");
        m["configSchema"] =
            json!({"type": "object", "properties": {"maxMessages": {"type": "integer"}}});
        m["hostRequirements"] = json!({
            "agent-run": {"requiredCapabilities": ["assemble-before-prompt"], "unsupportedMessage": "use the embedded runner"},
            "manual-compact": {"requiredCapabilities": []}
        });
        m["zeta"] = json!(1);
        m["alpha"] = json!(true);
        let parsed = read_json(m).unwrap();
        assert_eq!(parsed.name, "Sliding window");
        assert_eq!(parsed.library, "lib/custom.so");
        assert_eq!(parsed.sha256.as_deref(), Some("ab".repeat(32).as_str()));
        assert_eq!(parsed.unknown_keys, vec!["alpha", "zeta"]);
        assert_eq!(
            parsed.host_requirements[&HostOperation::AgentRun],
            HostRequirement {
                required_capabilities: vec!["assemble-before-prompt".into()],
                unsupported_message: Some("use the embedded runner".into()),
            }
        );
        let out = serde_json::to_value(&parsed).unwrap();
        assert_eq!(out["apiVersion"], json!("^1.0"));
        assert_eq!(out["kind"], json!("context-engine"));
        assert_eq!(out["version"], json!("0.1.0"));
        assert_eq!(
            out["hostRequirements"]["agent-run"]["requiredCapabilities"],
            json!(["assemble-before-prompt"])
        );
        assert!(out["configSchema"].is_object());
        assert!(out.get("unknownKeys").is_none() && out.get("dir").is_none());
    }

    #[test]
    fn default_library_name_follows_platform() {
        let name = default_library_file_name("my.plugin-x");
        let stem = "my_plugin_x";
        if cfg!(target_os = "windows") {
            assert_eq!(name, format!("{stem}.dll"));
        } else if cfg!(target_os = "macos") {
            assert_eq!(name, format!("lib{stem}.dylib"));
        } else {
            assert_eq!(name, format!("lib{stem}.so"));
        }
    }

    #[test]
    fn missing_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_manifest(dir.path()).unwrap_err();
        assert!(matches!(err, ManifestError::Missing { .. }), "{err}");
        assert_eq!(err.code(), "manifest_missing");
        assert!(err.to_string().contains(MANIFEST_FILE_NAME));
        assert_one_line(&err);
    }

    #[test]
    fn unreadable_manifest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(MANIFEST_FILE_NAME)).unwrap();
        let err = read_manifest(dir.path()).unwrap_err();
        assert!(matches!(err, ManifestError::Unreadable { .. }), "{err}");
        assert_one_line(&err);
    }

    #[test]
    fn malformed_reports_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "{\n  \"id\": \"x\",\n  \"version\": }\n");
        let err = read_manifest(dir.path()).unwrap_err();
        match &err {
            ManifestError::Malformed { line, column, .. } => {
                assert_eq!(*line, 3);
                assert!(*column > 0);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("line 3"));
        assert_one_line(&err);
    }

    #[test]
    fn byte_order_mark_is_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("\u{feff}");
        text.push_str(&minimal().to_string());
        write(dir.path(), &text);
        assert!(read_manifest(dir.path()).is_ok());
    }

    #[test]
    fn not_an_object() {
        let err = read_json(json!([1, 2])).unwrap_err();
        assert!(matches!(err, ManifestError::NotAnObject { .. }), "{err}");
        assert!(err.to_string().contains("an array"));
        assert_one_line(&err);
    }

    #[test]
    fn missing_required_fields() {
        for field in ["id", "version", "kind", "apiVersion"] {
            let err = read_json(without(field)).unwrap_err();
            match &err {
                ManifestError::MissingField { field: f, .. } => assert_eq!(f, field),
                other => panic!("{field}: unexpected {other:?}"),
            }
            assert_one_line(&err);
            // null counts as missing
            let err = read_json(with(field, Value::Null)).unwrap_err();
            assert!(matches!(err, ManifestError::MissingField { .. }), "{err}");
        }
    }

    #[test]
    fn wrong_types_name_the_field() {
        for (field, value) in [
            ("id", json!(5)),
            ("name", json!(["x"])),
            ("version", json!(1.0)),
            ("kind", json!({"a": 1})),
            ("apiVersion", json!(1)),
            ("library", json!(false)),
            ("sha256", json!(3)),
            ("description", json!(2)),
            ("configSchema", json!("object")),
            ("hostRequirements", json!([])),
        ] {
            let err = read_json(with(field, value)).unwrap_err();
            match &err {
                ManifestError::InvalidField { field: f, .. } => assert_eq!(f, field),
                other => panic!("{field}: unexpected {other:?}"),
            }
            assert_eq!(err.code(), "manifest_invalid_field");
            assert_one_line(&err);
        }
    }

    #[test]
    fn id_rules() {
        for good in ["a", "0x", "sliding-window", "my.plugin_2"] {
            assert!(read_json(with("id", json!(good))).is_ok(), "{good}");
        }
        for bad in [
            "", "   ", "Sliding", "-lead", ".hidden", "_x", "a b", "a/b", "é", " sliding",
        ] {
            let err = read_json(with("id", json!(bad))).unwrap_err();
            assert!(
                matches!(&err, ManifestError::InvalidField { field, .. } if field == "id"),
                "{bad}: {err}"
            );
            assert_one_line(&err);
        }
        let long = "a".repeat(crate::types::MAX_PLUGIN_ID_LEN + 1);
        assert!(read_json(with("id", json!(long))).is_err());
    }

    #[test]
    fn version_and_api_version() {
        let err = read_json(with("version", json!("1.0"))).unwrap_err();
        assert!(matches!(err, ManifestError::InvalidVersion { .. }), "{err}");
        assert!(err.to_string().contains("not semver"));
        assert_one_line(&err);

        for good in ["^1.0", "1", ">=1.2, <2", "*"] {
            assert!(read_json(with("apiVersion", json!(good))).is_ok(), "{good}");
        }
        let err = read_json(with("apiVersion", json!("one"))).unwrap_err();
        assert!(
            matches!(err, ManifestError::InvalidApiVersion { .. }),
            "{err}"
        );
        assert_one_line(&err);
    }

    #[test]
    fn wrong_kind() {
        let err = read_json(with("kind", json!("memory"))).unwrap_err();
        assert!(matches!(err, ManifestError::WrongKind { .. }), "{err}");
        assert!(err.to_string().contains("\"memory\""));
        assert!(err.to_string().contains("context-engine"));
        assert_eq!(err.code(), "manifest_wrong_kind");
    }

    #[test]
    fn sha256_rules() {
        for bad in ["abc", &"g".repeat(64), &"a".repeat(65)] {
            let err = read_json(with("sha256", json!(bad))).unwrap_err();
            assert!(
                matches!(&err, ManifestError::InvalidField { field, .. } if field == "sha256"),
                "{err}"
            );
        }
    }

    #[test]
    fn empty_library_and_name_rejected() {
        assert!(read_json(with("library", json!(""))).is_err());
        assert!(read_json(with("name", json!(" "))).is_err());
    }

    #[test]
    fn config_schema_rules() {
        let m = read_json(with("configSchema", json!(true))).unwrap();
        assert_eq!(m.config_schema, json!(true));
        let err = read_json(with("configSchema", json!({"type": "nonsense"}))).unwrap_err();
        assert!(
            matches!(err, ManifestError::InvalidConfigSchema { .. }),
            "{err}"
        );
        assert_one_line(&err);
        // A remote $ref cannot be fetched: rejected, no network.
        let err = read_json(with(
            "configSchema",
            json!({"$ref": "https://example.invalid/schema.json"}),
        ))
        .unwrap_err();
        assert!(
            matches!(err, ManifestError::InvalidConfigSchema { .. }),
            "{err}"
        );
        // Unknown $schema dialect.
        let err = read_json(with(
            "configSchema",
            json!({"$schema": "https://example.invalid/dialect"}),
        ))
        .unwrap_err();
        assert!(
            matches!(err, ManifestError::InvalidConfigSchema { .. }),
            "{err}"
        );
    }

    #[test]
    fn host_requirements_rules() {
        let err = read_json(with(
            "hostRequirements",
            json!({"agent-runs": {"requiredCapabilities": []}}),
        ))
        .unwrap_err();
        assert!(
            matches!(&err, ManifestError::InvalidField { field, found, .. }
                if field == "hostRequirements" && found.contains("agent-runs")),
            "{err}"
        );
        assert_one_line(&err);
        for bad in [
            json!({"agent-run": {"requiredCapabilities": [], "extra": 1}}),
            json!({"agent-run": {}}),
            json!({"agent-run": {"requiredCapabilities": "compact"}}),
            json!({"agent-run": []}),
        ] {
            let err = read_json(with("hostRequirements", bad)).unwrap_err();
            assert!(
                matches!(&err, ManifestError::InvalidField { field, .. } if field == "hostRequirements.agent-run"),
                "{err}"
            );
            assert_one_line(&err);
        }
    }

    /// `docs/pincer.plugin.schema.json` (the schema editors use) accepts every manifest in the
    /// repository and the example of `docs/MANIFEST.md`, and refuses what the reader refuses.
    #[test]
    fn the_published_json_schema_agrees_with_the_reader() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let schema: Value = serde_json::from_str(
            &std::fs::read_to_string(root.join("docs/pincer.plugin.schema.json")).unwrap(),
        )
        .unwrap();
        let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
        let doc = std::fs::read_to_string(root.join("docs/MANIFEST.md")).unwrap();
        let example = doc
            .split("```json")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap();
        let mut manifests: Vec<(String, String)> = vec![("MANIFEST.md".into(), example.into())];
        for dir in ["plugins", "plugins/testing"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path().join(MANIFEST_FILE_NAME);
                if let Ok(text) = std::fs::read_to_string(&path) {
                    manifests.push((path.display().to_string(), text));
                }
            }
        }
        assert!(manifests.len() >= 4, "{manifests:?}");
        for (name, text) in &manifests {
            let value: Value = serde_json::from_str(text).unwrap();
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{name}: {errors:?}");
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), text);
            read_manifest(dir.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        for bad in [
            with("kind", json!("memory")),
            with("contextEngineIds", json!([])),
            with("sha256", json!("abc")),
            without("apiVersion"),
            with(
                "hostRequirements",
                json!({"agent-runs": {"requiredCapabilities": []}}),
            ),
        ] {
            assert!(!validator.is_valid(&bad), "the schema accepts {bad}");
            assert!(read_json(bad.clone()).is_err(), "the reader accepts {bad}");
        }
    }

    #[test]
    fn context_engine_ids_rules() {
        let parsed = read_json(with("contextEngineIds", json!(["a", "b.c"]))).unwrap();
        assert_eq!(parsed.context_engine_ids, ["a", "b.c"]);
        for bad in [
            json!([]),
            json!("a"),
            json!(["A"]),
            json!(["a", "a"]),
            json!([1]),
        ] {
            let err = read_json(with("contextEngineIds", bad.clone())).unwrap_err();
            assert!(
                matches!(&err, ManifestError::InvalidField { field, .. } if field == "contextEngineIds"),
                "{bad}: {err}"
            );
            assert_one_line(&err);
        }
    }

    #[test]
    fn validate_config_lists_every_violation() {
        let m = read_json(with(
            "configSchema",
            json!({
                "type": "object",
                "properties": {
                    "maxMessages": {"type": "integer", "minimum": 1},
                    "mode": {"enum": ["a", "b"]}
                },
                "required": ["maxMessages"],
                "additionalProperties": false
            }),
        ))
        .unwrap();
        assert!(m.validate_config(&json!({"maxMessages": 5})).is_ok());
        let err = m
            .validate_config(&json!({"maxMessages": 0, "mode": "c", "bogus": 1}))
            .unwrap_err();
        match &err {
            ManifestError::ConfigRejected {
                plugin_id,
                violations,
            } => {
                assert_eq!(plugin_id, "sliding-window");
                assert_eq!(violations.len(), 3, "{violations:?}");
                assert!(violations.iter().any(|v| v.starts_with("/maxMessages: ")));
                assert!(violations.iter().any(|v| v.starts_with("/mode: ")));
            }
            other => panic!("unexpected {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains("; "));
        assert!(text.contains("fix plugins.entries.sliding-window.config in pincer.json"));
        assert_eq!(err.code(), "config_rejected");
        assert_one_line(&err);

        let err = m.validate_config(&json!([1])).unwrap_err();
        assert!(err.to_string().contains("(root): "), "{err}");
    }

    #[test]
    fn default_schema_requires_an_object() {
        let m = read_json(minimal()).unwrap();
        assert!(m.validate_config(&json!({})).is_ok());
        assert!(m.validate_config(&json!(3)).is_err());
    }

    #[test]
    fn long_found_values_are_cut() {
        let err = read_json(with("id", json!("A".repeat(10_000)))).unwrap_err();
        assert!(err.to_string().len() < 600, "{}", err.to_string().len());
    }
}
