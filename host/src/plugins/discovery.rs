//! Discovery: which folders hold plugins. Reads directory listings only; no manifest is
//! parsed and no library is touched here.

use std::path::PathBuf;

use crate::plugins::manifest::MANIFEST_FILE_NAME;

/// The plugin folders under `roots`, sorted within each root and in root order: a root that
/// itself holds a `pincer.plugin.json` is one plugin; otherwise each immediate subfolder that
/// holds one is. Roots that do not exist are skipped.
pub fn discover_plugin_dirs(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for root in roots {
        if root.join(MANIFEST_FILE_NAME).is_file() {
            found.push(root.clone());
            continue;
        }
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.join(MANIFEST_FILE_NAME).is_file())
            .collect();
        dirs.sort();
        found.extend(dirs);
    }
    found
}
