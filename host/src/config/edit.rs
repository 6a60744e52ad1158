//! Editing `pincer.json` without losing what the operator wrote.
//!
//! `pincer plugins install|enable|disable|select|remove` and `pincer doctor --fix` change the
//! config the way an operator would by hand: comments, key order, quoting and indentation all
//! stay as they were; only the values named by an [`Edit`] change. The file is edited as a
//! concrete syntax tree (`jsonc-parser`, which reads every JSON5 construct), and every edit is
//! checked before anything is written: the edited text, read back by the same JSON5 reader the
//! host uses, must hold exactly the old values with the edits applied. When it would not (a
//! construct the editor cannot rewrite in place, duplicate keys, …) the edit is refused with a
//! message saying what to change by hand, and the file is left untouched.
//!
//! Writes are atomic (a temporary file renamed over the config) and the previous file is kept
//! as `pincer.json.bak`. A [`ConfigEditor`] holds an exclusive lock on `pincer.json.lock` from
//! the moment it reads the file until it is dropped, so two editors — two `pincer` commands,
//! or a command and a gateway — never lose one another's changes.

use std::fs::File;
use std::path::{Path, PathBuf};

use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use jsonc_parser::ParseOptions;
use serde_json::Value;

use super::{ConfigError, LoadedConfig};
use crate::disk;

/// One change to the config, by dotted path of object keys.
#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    /// Sets the value at `path`, creating the objects on the way.
    Set {
        /// Object keys from the root.
        path: Vec<String>,
        /// The new value.
        value: Value,
    },
    /// Removes the key at `path` (nothing when it is absent).
    Remove {
        /// Object keys from the root.
        path: Vec<String>,
    },
    /// Appends `value` to the array at `path` unless it already holds it.
    AddToList {
        /// Object keys from the root.
        path: Vec<String>,
        /// The element.
        value: Value,
    },
    /// Removes every element equal to `value` from the array at `path`.
    RemoveFromList {
        /// Object keys from the root.
        path: Vec<String>,
        /// The element.
        value: Value,
    },
}

impl Edit {
    /// [`Edit::Set`] of `value` at the dotted `path` segments.
    pub fn set(path: &[&str], value: impl Into<Value>) -> Self {
        Edit::Set {
            path: owned(path),
            value: value.into(),
        }
    }

    /// [`Edit::Remove`] of `path`.
    pub fn remove(path: &[&str]) -> Self {
        Edit::Remove { path: owned(path) }
    }

    /// [`Edit::AddToList`].
    pub fn add_to_list(path: &[&str], value: impl Into<Value>) -> Self {
        Edit::AddToList {
            path: owned(path),
            value: value.into(),
        }
    }

    /// [`Edit::RemoveFromList`].
    pub fn remove_from_list(path: &[&str], value: impl Into<Value>) -> Self {
        Edit::RemoveFromList {
            path: owned(path),
            value: value.into(),
        }
    }
}

fn owned(path: &[&str]) -> Vec<String> {
    path.iter().map(|s| (*s).to_owned()).collect()
}

/// Why the config could not be edited. The file is unchanged in every case.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The current file cannot be read as a config.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The file uses something the in-place editor cannot rewrite without losing it.
    #[error(
        "{} cannot be edited in place without changing what it says ({detail}); it was left \
         untouched: make this change by hand ({what}), or rewrite that part of the file as plain JSON5",
        path.display()
    )]
    CannotPreserve {
        /// The config file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
        /// The change that was asked for, for the operator to make by hand.
        what: String,
    },
    /// Locking, reading or writing failed.
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

impl EditError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            EditError::Config(err) => err.code(),
            EditError::CannotPreserve { .. } => "config_not_editable",
            EditError::Io { .. } => "config_io",
        }
    }
}

/// The config file, locked for a read-modify-write until dropped.
#[derive(Debug)]
pub struct ConfigEditor {
    path: PathBuf,
    text: Option<String>,
    _lock: File,
}

impl ConfigEditor {
    /// Takes the config lock (waiting for another editor to finish) and reads `path`.
    ///
    /// # Errors
    /// [`EditError::Io`] when the lock or the file cannot be had.
    pub fn open(path: &Path) -> Result<Self, EditError> {
        let io = |action, source| EditError::Io {
            action,
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            disk::create_dir_all(dir).map_err(|e| io("create the folder of", e))?;
        }
        let lock_path = sibling(path, "lock");
        let lock = disk::open(
            &lock_path,
            File::options().create(true).truncate(false).write(true),
        )
        .map_err(|e| io("open the lock beside", e))?;
        lock.lock().map_err(|e| io("lock", e))?;
        let text = super::read_config_text(path)?;
        Ok(ConfigEditor {
            path: path.to_owned(),
            text,
            _lock: lock,
        })
    }

    /// The config as it is now (read under the lock).
    ///
    /// # Errors
    /// The file is not a valid config.
    pub fn config(&self) -> Result<LoadedConfig, ConfigError> {
        match &self.text {
            Some(text) => LoadedConfig::from_text(&self.path, text),
            None => LoadedConfig::load(&self.path),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies `edits` in order and writes the file (atomically, keeping the previous one as
    /// `pincer.json.bak`). Returns whether anything changed; nothing is written otherwise.
    ///
    /// # Errors
    /// [`EditError::CannotPreserve`] when the edited file would not say exactly the old values
    /// with the edits applied; I/O errors. The file is unchanged on error.
    pub fn apply(&mut self, edits: &[Edit]) -> Result<bool, EditError> {
        let Some(edited) = self.edited(edits)? else {
            return Ok(false);
        };
        self.write(&edited)?;
        self.text = Some(edited);
        Ok(true)
    }

    /// Checks that `edits` can be applied, without writing: what [`ConfigEditor::apply`]
    /// would refuse, this refuses. Returns whether anything would change.
    ///
    /// # Errors
    /// As [`ConfigEditor::apply`].
    pub fn check(&self, edits: &[Edit]) -> Result<bool, EditError> {
        Ok(self.edited(edits)?.is_some())
    }

    /// The file's text with `edits` applied, verified; `None` when nothing changes.
    fn edited(&self, edits: &[Edit]) -> Result<Option<String>, EditError> {
        // The current file must be a valid config: an edit never makes a broken file worse.
        self.config()?;
        let original = self.text.clone().unwrap_or_default();
        // A byte-order mark (editors on Windows write one) is kept: the edit is of what
        // follows it.
        let (bom, original) = match original.strip_prefix('\u{feff}') {
            Some(rest) => ("\u{feff}", rest.to_owned()),
            None => ("", original),
        };
        let base = if original.trim().is_empty() {
            "{\n}\n".to_owned()
        } else {
            original
        };
        let what = describe(edits);
        let refuse = |detail: String| EditError::CannotPreserve {
            path: self.path.clone(),
            detail,
            what: what.clone(),
        };
        let before = read_json5(&base).map_err(refuse)?;
        let mut expected = before.clone();
        for edit in edits {
            apply_to_value(&mut expected, edit);
        }
        if expected == before {
            return Ok(None);
        }
        let root = CstRootNode::parse(&base, &ParseOptions::default())
            .map_err(|e| refuse(format!("its syntax is not understood by the editor: {e}")))?;
        if root.value().is_some() && root.object_value().is_none() {
            return Err(refuse("its top level is not an object".into()));
        }
        let object = root.object_value_or_set();
        for edit in edits {
            apply_to_cst(&object, edit);
        }
        let mut edited = root.to_string();
        if !edited.ends_with('\n') {
            edited.push('\n');
        }
        let after = read_json5(&edited)
            .map_err(|e| refuse(format!("the edited file would not parse: {e}")))?;
        if after != expected {
            return Err(refuse(
                "the edited file would not say what was asked (duplicate keys?)".into(),
            ));
        }
        LoadedConfig::from_text(&self.path, &edited)?;
        Ok(Some(format!("{bom}{edited}")))
    }

    fn write(&self, text: &str) -> Result<(), EditError> {
        let io = |action, path: &Path, source| EditError::Io {
            action,
            path: path.to_owned(),
            source,
        };
        if self.text.is_some() {
            let backup = sibling(&self.path, "bak");
            disk::copy(&self.path, &backup).map_err(|e| io("back up", &backup, e))?;
        }
        let tmp = sibling(&self.path, &format!("{}.tmp", std::process::id()));
        disk::replace(&self.path, &tmp, text.as_bytes()).map_err(|e| io("write", &self.path, e))
    }
}

/// `pincer.json` → `pincer.json.<ext>`.
fn sibling(path: &Path, ext: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(ext);
    path.with_file_name(name)
}

fn read_json5(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    json5::from_str::<Value>(text).map_err(|e| e.to_string())
}

/// Each edit in a line an operator can follow by hand.
fn describe(edits: &[Edit]) -> String {
    edits
        .iter()
        .map(|edit| match edit {
            Edit::Set { path, value } => format!("set {} to {value}", path.join(".")),
            Edit::Remove { path } => format!("remove {}", path.join(".")),
            Edit::AddToList { path, value } => format!("add {value} to {}", path.join(".")),
            Edit::RemoveFromList { path, value } => {
                format!("remove {value} from {}", path.join("."))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The parent object of `path`'s last key, created (or replacing a non-object) on the way.
fn value_parent_mut<'a>(
    root: &'a mut Value,
    path: &[String],
) -> Option<&'a mut serde_json::Map<String, Value>> {
    let (_, parents) = path.split_last()?;
    let mut at = root;
    for key in parents {
        if !at.is_object() {
            *at = Value::Object(Default::default());
        }
        at = at
            .as_object_mut()?
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    if !at.is_object() {
        *at = Value::Object(Default::default());
    }
    at.as_object_mut()
}

/// The value at `path`, without creating anything.
fn value_at_mut<'a>(root: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(root, |at, key| at.as_object_mut()?.get_mut(key))
}

fn apply_to_value(root: &mut Value, edit: &Edit) {
    match edit {
        Edit::Set { path, value } => {
            if let (Some(map), Some(last)) = (value_parent_mut(root, path), path.last()) {
                map.insert(last.clone(), value.clone());
            }
        }
        Edit::Remove { path } => {
            if let Some((last, parents)) = path.split_last() {
                if let Some(Value::Object(map)) = value_at_mut(root, parents) {
                    map.remove(last);
                }
            }
        }
        Edit::AddToList { path, value } => {
            if let (Some(map), Some(last)) = (value_parent_mut(root, path), path.last()) {
                let list = map
                    .entry(last.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if !list.is_array() {
                    *list = Value::Array(Vec::new());
                }
                if let Value::Array(items) = list {
                    if !items.contains(value) {
                        items.push(value.clone());
                    }
                }
            }
        }
        Edit::RemoveFromList { path, value } => {
            if let Some(Value::Array(items)) = value_at_mut(root, path) {
                items.retain(|item| item != value);
            }
        }
    }
}

/// The object holding `path`'s last key: created on the way when `create`, else `None` when
/// any part is missing.
fn cst_parent(root: &CstObject, path: &[String], create: bool) -> Option<CstObject> {
    let (_, parents) = path.split_last()?;
    let mut at = root.clone();
    for key in parents {
        at = if create {
            at.object_value_or_set(key)
        } else {
            at.object_value(key)?
        };
    }
    Some(at)
}

fn apply_to_cst(root: &CstObject, edit: &Edit) {
    match edit {
        Edit::Set { path, value } => {
            let (Some(parent), Some(last)) = (cst_parent(root, path, true), path.last()) else {
                return;
            };
            match parent.get(last) {
                Some(prop) => prop.set_value(input(value)),
                None => {
                    parent.append(last, input(value));
                }
            }
        }
        Edit::Remove { path } => {
            if let (Some(parent), Some(last)) = (cst_parent(root, path, false), path.last()) {
                if let Some(prop) = parent.get(last) {
                    prop.remove();
                }
            }
        }
        Edit::AddToList { path, value } => {
            let (Some(parent), Some(last)) = (cst_parent(root, path, true), path.last()) else {
                return;
            };
            let list = parent.array_value_or_set(last);
            let present = list
                .elements()
                .iter()
                .any(|e| e.to_serde_value().as_ref() == Some(value));
            if !present {
                list.append(input(value));
            }
        }
        Edit::RemoveFromList { path, value } => {
            let Some(parent) = cst_parent(root, path, false) else {
                return;
            };
            let Some(list) = path.last().and_then(|last| parent.array_value(last)) else {
                return;
            };
            for element in list.elements() {
                if element.to_serde_value().as_ref() == Some(value) {
                    element.remove();
                }
            }
        }
    }
}

/// A JSON value as the CST editor's input.
fn input(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(items) => CstInputValue::Array(items.iter().map(input).collect()),
        Value::Object(map) => {
            CstInputValue::Object(map.iter().map(|(k, v)| (k.clone(), input(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn edit(text: &str, edits: &[Edit]) -> Result<String, EditError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pincer.json");
        std::fs::write(&path, text).unwrap();
        let mut editor = ConfigEditor::open(&path)?;
        editor.apply(edits)?;
        Ok(std::fs::read_to_string(&path).unwrap())
    }

    #[test]
    fn comments_order_and_json5_survive_an_edit() {
        let text = "// my config\n{\n  agents: { defaults: { compaction: { timeoutSeconds: 90 } } }, // keep\n  plugins: {\n    /* the engine */\n    slots: { contextEngine: 'legacy' },\n    deny: [],\n  },\n}\n";
        let out = edit(
            text,
            &[
                Edit::set(&["plugins", "slots", "contextEngine"], "sliding-window"),
                Edit::set(&["plugins", "entries", "faulty", "enabled"], false),
            ],
        )
        .unwrap();
        assert!(out.starts_with("// my config\n{\n  agents:"), "{out}");
        assert!(out.contains("// keep"), "{out}");
        assert!(out.contains("/* the engine */"), "{out}");
        assert!(out.contains("contextEngine: \"sliding-window\""), "{out}");
        assert!(out.find("agents").unwrap() < out.find("plugins").unwrap());
        let value: Value = json5::from_str(&out).unwrap();
        assert_eq!(
            value["plugins"]["entries"]["faulty"]["enabled"],
            json!(false)
        );
        assert_eq!(
            value["agents"]["defaults"]["compaction"]["timeoutSeconds"],
            json!(90)
        );
    }

    #[test]
    fn json5_the_editor_cannot_read_is_refused_and_the_file_kept() {
        // An escaped identifier is JSON5 that the in-place editor does not read.
        let text = "{ agents: { \\u0064efaults: {} } }";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pincer.json");
        std::fs::write(&path, text).unwrap();
        let editor = ConfigEditor::open(&path).unwrap();
        assert!(editor.config().is_ok(), "pincer reads it");
        let err = editor
            .check(&[Edit::set(&["plugins", "slots", "contextEngine"], "b")])
            .unwrap_err();
        assert_eq!(err.code(), "config_not_editable", "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn lists_add_once_and_remove() {
        let out = edit(
            "{ plugins: { load: { paths: ['/a'] } } }",
            &[
                Edit::add_to_list(&["plugins", "load", "paths"], "/b"),
                Edit::add_to_list(&["plugins", "load", "paths"], "/b"),
                Edit::remove_from_list(&["plugins", "load", "paths"], "/a"),
            ],
        )
        .unwrap();
        let value: Value = json5::from_str(&out).unwrap();
        assert_eq!(value["plugins"]["load"]["paths"], json!(["/b"]));
    }

    #[test]
    fn duplicate_keys_are_refused_and_the_file_kept() {
        let text = "{ plugins: { entries: { x: { config: { keep: 1, keep: 2 } } } } }";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pincer.json");
        std::fs::write(&path, text).unwrap();
        let err = ConfigEditor::open(&path)
            .unwrap()
            .apply(&[Edit::set(&["plugins", "entries", "x", "config", "keep"], 3)])
            .unwrap_err();
        assert_eq!(err.code(), "config_not_editable", "{err}");
        assert!(
            err.to_string()
                .contains("set plugins.entries.x.config.keep to 3"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn a_missing_file_is_created_and_a_backup_kept_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pincer.json");
        let mut editor = ConfigEditor::open(&path).unwrap();
        assert!(editor
            .apply(&[Edit::set(&["plugins", "slots", "contextEngine"], "x")])
            .unwrap());
        drop(editor);
        assert!(!sibling(&path, "bak").exists(), "nothing to back up");
        let mut editor = ConfigEditor::open(&path).unwrap();
        assert!(editor
            .apply(&[Edit::set(&["plugins", "slots", "contextEngine"], "y")])
            .unwrap());
        let backup: Value =
            json5::from_str(&std::fs::read_to_string(sibling(&path, "bak")).unwrap()).unwrap();
        assert_eq!(backup["plugins"]["slots"]["contextEngine"], json!("x"));
        assert!(
            !editor
                .apply(&[Edit::set(&["plugins", "slots", "contextEngine"], "y")])
                .unwrap(),
            "no change, no write"
        );
    }

    #[test]
    fn concurrent_editors_never_lose_an_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pincer.json");
        std::fs::write(&path, "{\n  // shared\n}\n").unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut editor = ConfigEditor::open(&path).unwrap();
                    editor
                        .apply(&[Edit::add_to_list(&["plugins", "deny"], format!("p{i}"))])
                        .unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let value: Value = json5::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(value["plugins"]["deny"].as_array().unwrap().len(), 8);
    }
}
