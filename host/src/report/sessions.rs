//! The sessions part of `pincer doctor`: session files holding lines longer than
//! `sessions.maxLineBytes`, which every read skips (so what they hold is missing from the
//! context). Only files larger than the bound can hold one, so only those are scanned (for
//! newlines; nothing is parsed).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::PincerHome;
use crate::session::tree::{long_lines, LongLine};

/// A session file with lines every read skips.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLongLines {
    /// The session file.
    pub file: PathBuf,
    /// Its lines over the bound, in file order.
    pub lines: Vec<LongLine>,
}

/// Every session file under `$PINCER_HOME/agents/*/sessions/` with lines longer than
/// `sessions.maxLineBytes`, sorted by path. Files that cannot be read are left to the commands
/// that read them.
pub fn sessions_with_long_lines(home: &PincerHome) -> Vec<SessionLongLines> {
    let mut out = Vec::new();
    for agent in read_dir_sorted(&home.root().join("agents")) {
        for file in read_dir_sorted(&agent.join("sessions")) {
            if file.extension().is_none_or(|e| e != "jsonl") || !file.is_file() {
                continue;
            }
            if let Ok(lines) = long_lines(&file) {
                if !lines.is_empty() {
                    out.push(SessionLongLines { file, lines });
                }
            }
        }
    }
    out
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
}
