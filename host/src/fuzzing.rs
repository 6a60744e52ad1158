//! Unstable: the fuzzing seam (the `fuzzing` cargo feature). One `fn(&[u8])` entry per parser
//! at a trust boundary, so that fuzz targets reach the crate-private parsers without the
//! crate widening its API. Every entry takes arbitrary bytes, must never panic, and ignores
//! the parser's answer. Not part of the public API and free to change in any release.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::edit::{ConfigEditor, Edit};
use crate::config::LoadedConfig;
use crate::engines::isolation::protocol::{decode, HostFrame, WorkerFrame};
use crate::plugins::loading::read_embedded_manifest;
use crate::plugins::manifest::{read_manifest, MANIFEST_FILE_NAME};
use crate::plugins::verify::{verify_bytes, VerifyLimits};
use crate::session::{import_openai, SessionTree};
use crate::types::Durability;

/// A plugin's `openclaw.plugin.json` (the manifest JSON and its validation), read from a
/// plugin folder holding `data`.
pub fn plugin_manifest(data: &[u8]) {
    with_scratch(|dir| {
        if std::fs::write(dir.join(MANIFEST_FILE_NAME), data).is_ok() {
            let _ = read_manifest(dir);
        }
    });
}

/// The embedded-manifest reader over a library's bytes.
pub fn embedded_manifest(data: &[u8]) {
    let _ = read_embedded_manifest(data);
}

/// The ELF/PE/Mach-O verifier (size, segment bounds, format) over a library's bytes.
pub fn library_verifier(data: &[u8]) {
    let _ = verify_bytes(
        Path::new("fuzz-library"),
        data.to_vec(),
        None,
        &VerifyLimits::default(),
    );
}

/// `pincer.json` (JSON5) into the typed config.
pub fn config_json5(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = LoadedConfig::from_text(Path::new("pincer.json"), text);
    }
}

/// The comment-keeping config editor: `data` as `pincer.json`, then one edit checked on it.
pub fn config_editor(data: &[u8]) {
    with_scratch(|dir| {
        let path = dir.join("pincer.json");
        if std::fs::write(&path, data).is_ok() {
            if let Ok(editor) = ConfigEditor::open(&path) {
                let _ = editor.config();
                let _ =
                    editor.check(&[Edit::set(&["plugins", "slots", "contextEngine"], "legacy")]);
            }
        }
    });
}

/// The session file's line parser and tree builder.
pub fn session_lines(data: &[u8]) {
    let tree = SessionTree::parse(&String::from_utf8_lossy(data));
    let _ = tree.tips();
}

/// The OpenAI chat transcript import (a JSON array of messages) into a new session file.
pub fn openai_transcript(data: &[u8]) {
    let Ok(serde_json::Value::Array(messages)) = serde_json::from_slice(data) else {
        return;
    };
    with_scratch(|dir| {
        let _ = import_openai(&messages, &dir.join("session.jsonl"), "/", Durability::None);
    });
}

/// A gateway request body, parsed as the gateway's router parses a call.
pub fn gateway_request(data: &[u8]) {
    let _ = crate::gateway::protocol::parse_call(data);
}

/// The isolated worker's frames: `data` decoded as a frame of either direction.
pub fn worker_frames(data: &[u8]) {
    let _ = decode::<HostFrame>(data);
    let _ = decode::<WorkerFrame>(data);
}

/// One entry: arbitrary bytes in, nothing out.
pub type Entry = fn(&[u8]);

/// Every entry, by name, for a fuzz driver that picks one.
pub const ENTRIES: &[(&str, Entry)] = &[
    ("plugin_manifest", plugin_manifest),
    ("embedded_manifest", embedded_manifest),
    ("library_verifier", library_verifier),
    ("config_json5", config_json5),
    ("config_editor", config_editor),
    ("session_lines", session_lines),
    ("openai_transcript", openai_transcript),
    ("gateway_request", gateway_request),
    ("worker_frames", worker_frames),
];

/// Runs `f` on a fresh scratch folder, removed afterwards.
fn with_scratch(f: impl FnOnce(&Path)) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "pincer-fuzz-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::create_dir_all(&dir).is_ok() {
        f(&dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_entry_takes_garbage() {
        let garbage: &[u8] = b"\x7fELF\x00\xff{\"id\":[\xc3\x28\n{}\n\x00\x01\x02";
        for (name, entry) in super::ENTRIES {
            entry(garbage);
            entry(b"");
            eprintln!("{name}: ok");
        }
    }
}
