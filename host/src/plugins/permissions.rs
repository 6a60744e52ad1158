//! Who may change a plugin's files: a library, manifest or plugin folder writable by group or
//! others, or owned by anyone but the host's user or root, is refused — as sshd refuses an
//! `authorized_keys` others can write, and for the same reason: whoever can change the file
//! runs code in the host. Each refusal names the exact `chmod` or `chown` to run.
//! `plugins.entries.<id>.trustInsecurePermissions: true` overrides the check for one plugin
//! (the runtime loads it and `doctor` says so).
//!
//! **Checked where the files are**, as sshd's `StrictModes` does: the plugin folder's real
//! path is resolved (symbolic links followed), and every folder above it, up to `/`, is
//! checked too — as is every folder above the plugins root that names it (whoever can write
//! there can swap the link). A folder above a plugin may be writable by others only when it is
//! sticky (`/tmp`, mode 1777): then no one but an entry's owner can rename or replace the entry,
//! and the entry below it is checked in turn; its owner must still be the host's user or root.
//! A folder that is not sticky and that others can write — for instance one a symbolic link
//! in the plugins folder points into — is refused with its `chmod go-w`.

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

/// Checks the library, the manifest and the plugin folder where they really are, and every
/// folder above the plugin folder's real path and above its plugins root, up to `/`.
///
/// # Errors
/// Every problem found, as one [`InsecurePermissions`].
pub fn check_plugin_files(
    plugin_id: &str,
    plugin_dir: &Path,
    library: &Path,
    manifest: &Path,
) -> Result<(), InsecurePermissions> {
    let real = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let real_dir = real(plugin_dir);
    let mut problems: Vec<PermissionProblem> = [real(library), real(manifest), real_dir.clone()]
        .iter()
        .filter_map(|path| problem_of(path, false))
        .collect();
    // Where a link led elsewhere, say so beside the real path.
    if real_dir != plugin_dir {
        for problem in &mut problems {
            problem.problem = format!(
                "{} (the plugin folder {} is a link to {})",
                problem.problem,
                plugin_dir.display(),
                real_dir.display()
            );
        }
    }
    // Every folder above the real plugin folder, and above the plugins root it is named in
    // (the root included): a sticky one (such as /tmp) lets others add entries beside ours,
    // never rename or replace ours, so only its owner matters.
    let mut above: Vec<PathBuf> = real_dir.ancestors().skip(1).map(Path::to_owned).collect();
    if let Some(root) = plugin_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        above.extend(real(root).ancestors().map(Path::to_owned));
    }
    let mut seen = std::collections::BTreeSet::new();
    for folder in above {
        if !seen.insert(folder.clone()) {
            continue;
        }
        if let Some(mut problem) = problem_of(&folder, true) {
            problem.problem = format!(
                "{}, and it is a folder above the plugin's files ({})",
                problem.problem,
                real_dir.display()
            );
            problems.push(problem);
        }
    }
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
