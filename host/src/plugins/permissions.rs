//! Who may change a plugin's files: a library, manifest or plugin folder writable by group or
//! others, or owned by anyone but the host's user or root, is refused — as sshd refuses an
//! `authorized_keys` others can write, and for the same reason: whoever can change the file
//! runs code in the host. The plugins root (the folder holding the plugin folder) is checked
//! too, since whoever can write it can swap the whole plugin folder (unless it is sticky, as
//! `/tmp` is: then others cannot rename or replace what is not theirs). Each refusal names the
//! exact `chmod` or `chown` to run. `plugins.entries.<id>.trustInsecurePermissions: true`
//! overrides the check for one plugin (the runtime loads it and `doctor` says so).

use std::path::{Path, PathBuf};

/// One file or folder with permissions that let someone else change a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionProblem {
    /// The file or folder.
    pub path: PathBuf,
    /// What is wrong, e.g. `writable by group and others (mode 0666)`.
    pub problem: String,
    /// The command that fixes it.
    pub fix: String,
}

/// A plugin whose files someone other than the host's user (or root) can change.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "plugin \"{plugin_id}\" is refused: {}; whoever can change these files runs code in this host. Fix: {} (or, to accept the risk, set plugins.entries.{plugin_id}.trustInsecurePermissions: true)",
    problems.iter().map(|p| format!("{} is {}", p.path.display(), p.problem)).collect::<Vec<_>>().join("; "),
    problems.iter().map(|p| p.fix.clone()).collect::<Vec<_>>().join(" && ")
)]
pub struct InsecurePermissions {
    /// The plugin.
    pub plugin_id: String,
    /// Every problem found.
    pub problems: Vec<PermissionProblem>,
}

impl InsecurePermissions {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        "insecure_permissions"
    }
}

/// Checks the library, the manifest, the plugin folder and the plugins root of `plugin_dir`.
///
/// # Errors
/// Every problem found, as one [`InsecurePermissions`].
pub fn check_plugin_files(
    plugin_id: &str,
    plugin_dir: &Path,
    library: &Path,
    manifest: &Path,
) -> Result<(), InsecurePermissions> {
    let root = plugin_dir.parent().filter(|p| !p.as_os_str().is_empty());
    let mut problems: Vec<PermissionProblem> = [library, manifest, plugin_dir]
        .into_iter()
        .filter_map(|path| problem_of(path, false))
        .collect();
    // A sticky root (such as /tmp) lets others add folders beside this one, never rename or
    // replace it: only its owner matters.
    problems.extend(root.and_then(|root| problem_of(root, true)));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InsecurePermissions {
            plugin_id: plugin_id.to_owned(),
            problems,
        })
    }
}

/// [`check_plugin_files`] for the plugin `manifest` describes (its library path confined to
/// its folder; a library path that cannot be resolved is left to verification to report).
///
/// # Errors
/// Every problem found.
pub fn check_manifest_plugin(
    manifest: &crate::plugins::manifest::PluginManifest,
) -> Result<(), InsecurePermissions> {
    let manifest_path = manifest
        .dir
        .join(crate::plugins::manifest::MANIFEST_FILE_NAME);
    let library = crate::plugins::verify::resolve_library_path(&manifest.dir, &manifest.library)
        .unwrap_or_else(|_| manifest_path.clone());
    check_plugin_files(&manifest.id, &manifest.dir, &library, &manifest_path)
}

#[cfg(unix)]
fn problem_of(path: &Path, sticky_ok: bool) -> Option<PermissionProblem> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.mode() & 0o7777;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let shown = shell_quote(path);
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    if meta.uid() != me && meta.uid() != 0 {
        problems.push(format!(
            "owned by user {} (this host runs as user {me})",
            meta.uid()
        ));
        fixes.push(format!("chown {me} {shown}"));
    }
    let writable = mode & 0o022;
    if writable != 0 && !(sticky_ok && mode & 0o1000 != 0) {
        let who = match writable {
            0o020 => "group",
            0o002 => "others",
            _ => "group and others",
        };
        problems.push(format!("writable by {who} (mode {mode:04o})"));
        fixes.push(format!("chmod go-w {shown}"));
    }
    (!problems.is_empty()).then(|| PermissionProblem {
        path: path.to_owned(),
        problem: problems.join(" and "),
        fix: fixes.join(" && "),
    })
}

#[cfg(not(unix))]
fn problem_of(_path: &Path, _sticky_ok: bool) -> Option<PermissionProblem> {
    None
}

/// `path` as a shell word: bare when it is plain, single-quoted otherwise.
fn shell_quote(path: &Path) -> String {
    let text = path.display().to_string();
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%".contains(c))
    {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn writable_files_are_named_with_their_fix() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = dir.path().join("p");
        std::fs::create_dir(&plugin).unwrap();
        let lib = plugin.join("lib.so");
        let manifest = plugin.join("pincer.plugin.json");
        std::fs::write(&lib, b"x").unwrap();
        std::fs::write(&manifest, b"{}").unwrap();
        for path in [&lib, &manifest] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_plugin_files("p", &plugin, &lib, &manifest).is_ok());
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = check_plugin_files("p", &plugin, &lib, &manifest).unwrap_err();
        assert_eq!(err.problems.len(), 1);
        assert_eq!(
            err.problems[0].problem,
            "writable by group and others (mode 0666)"
        );
        assert_eq!(err.problems[0].fix, format!("chmod go-w {}", lib.display()));
    }
}
