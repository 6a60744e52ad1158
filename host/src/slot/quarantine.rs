//! Runtime quarantine (docs/CONTRACT.md §4): the process-wide record of engines that failed, so the
//! rest of the process answers with `legacy` instead of calling them again.
//!
//! The first failure of an engine wins; aborts never quarantine (the guard decides that).
//! Records are mirrored, best effort, to `$PINCER_HOME/state/context-engine-quarantine.json`
//! (at most 64 records, keyed by engine id and process id, the earliest record winning) so
//! that `pincer health` in another process can see them. Clearing removes only this
//! process's rows; clearing when no mirror exists creates none. Every read-modify-write of
//! the mirror holds an exclusive lock on `context-engine-quarantine.json.lock`, so the CLI and
//! a running gateway never lose one another's records.
//!
//! A record is *active* while the process that wrote it runs, or when it is a crash record
//! (the process died in the middle of a call: the record stays until cleared or until the
//! library changes). A plain failure recorded by a process that has since exited is
//! *history*: shown, but no longer a warning. `pincer health --clear [ID]` removes the
//! records of processes that are gone ([`clear_exited`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::types::Owner;

/// The most records the disk mirror keeps.
pub const MIRROR_CAPACITY: usize = 64;

/// The mirror's file name inside the state folder.
pub const MIRROR_FILE_NAME: &str = "context-engine-quarantine.json";

/// One quarantined engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    /// The engine id.
    pub engine_id: String,
    /// Its registry owner (`plugin:<id>`, `public-sdk`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// The operation that failed (`assemble`, `factory`, `resolve`, …).
    pub operation: String,
    /// The failure's message.
    pub reason: String,
    /// When, in milliseconds since the Unix epoch.
    pub failed_at: u64,
    /// The process that recorded it.
    pub pid: u32,
    /// The process died in the middle of a call to the engine (a crash journal record):
    /// active until cleared, even after the process is gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crash: bool,
    /// For a crash record: the sha256 of the engine's library then. A process that finds
    /// another library under that engine id drops the record (the library changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_sha256: Option<String>,
}

impl QuarantineRecord {
    /// Whether the record still downgrades the engine: its process runs (or this platform
    /// cannot tell), or it records a crash.
    pub fn is_active(&self) -> bool {
        self.crash || process_alive(self.pid) != Some(false)
    }
}

/// The records that are active ([`QuarantineRecord::is_active`]) and those that are history.
pub fn split_active(
    records: Vec<QuarantineRecord>,
) -> (Vec<QuarantineRecord>, Vec<QuarantineRecord>) {
    records.into_iter().partition(QuarantineRecord::is_active)
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct MirrorFile {
    #[serde(default)]
    records: Vec<QuarantineRecord>,
}

/// Makes a value safe for a one-line log: escape sequences removed, control characters become
/// spaces, long values are cut (see [`crate::types::sanitize_text`]).
pub fn sanitize_for_log(value: &str) -> String {
    crate::types::sanitize_text(value, 500)
}

/// The quarantine of one process.
#[derive(Debug)]
pub struct Quarantine {
    records: Mutex<BTreeMap<String, QuarantineRecord>>,
    /// How many records `records` holds: lets the hot path skip the lock when none.
    count: AtomicUsize,
    mirror: Option<PathBuf>,
    /// Serialises this process's read-modify-write of the mirror.
    mirror_lock: Mutex<()>,
    default_engine_id: String,
}

impl Quarantine {
    /// A quarantine mirrored into `state_dir` (none when `None`).
    pub fn new(state_dir: Option<&Path>) -> Self {
        Quarantine {
            records: Mutex::new(BTreeMap::new()),
            count: AtomicUsize::new(0),
            mirror: state_dir.map(|d| d.join(MIRROR_FILE_NAME)),
            mirror_lock: Mutex::new(()),
            default_engine_id: crate::types::LEGACY_ENGINE_ID.to_owned(),
        }
    }

    /// Records a failure. Returns `false` (and changes nothing) when the engine is already
    /// quarantined: the first failure wins. Logs the contract's line once.
    pub fn record(
        &self,
        engine_id: &str,
        owner: Option<&Owner>,
        operation: &str,
        reason: &str,
    ) -> bool {
        let record = QuarantineRecord {
            engine_id: engine_id.to_owned(),
            owner: owner.cloned(),
            operation: operation.to_owned(),
            // The reason is often the engine's own words: cleaned and capped before it is
            // stored, logged, and printed by every later `health`.
            reason: crate::types::sanitize_text(reason, crate::types::MAX_ENGINE_TEXT_LEN),
            failed_at: now_ms(),
            pid: std::process::id(),
            crash: false,
            library_sha256: None,
        };
        {
            let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            if records.contains_key(engine_id) {
                return false;
            }
            records.insert(engine_id.to_owned(), record.clone());
            self.count.store(records.len(), Ordering::Release);
        }
        let owner_text = owner.map(Owner::to_string).unwrap_or_default();
        let owner_part = owner
            .map(|_| format!(" owner={}", sanitize_for_log(&owner_text)))
            .unwrap_or_default();
        tracing::warn!(
            target: "pincer::quarantine",
            engine_id,
            owner = owner_text.as_str(),
            operation,
            reason = %sanitize_for_log(reason),
            "[context-engine] Context engine \"{}\"{} failed during {}: {}; quarantining it for this process and falling back to default engine \"{}\".",
            sanitize_for_log(engine_id),
            owner_part,
            sanitize_for_log(operation),
            sanitize_for_log(reason),
            self.default_engine_id,
        );
        self.write_mirror(|rows| {
            if !rows
                .iter()
                .any(|r| r.engine_id == record.engine_id && r.pid == record.pid)
            {
                rows.push(record.clone());
            }
        });
        true
    }

    /// Recalls the crashes of earlier processes: first the crash journals of dead processes in
    /// `state_dir` become crash records in the mirror ([`harvest_crashes`]); then every crash
    /// record in the mirror quarantines its engine in this process too — unless
    /// `library_sha256(engine)` names another library than the one that crashed, in which case
    /// the record is dropped (the library changed). Run after plugins registered, since a
    /// registration clears its id's quarantine.
    pub fn recall_crashes(
        &self,
        state_dir: &Path,
        library_sha256: impl Fn(&str) -> Option<String>,
    ) {
        harvest_crashes(state_dir);
        let crashes: Vec<QuarantineRecord> =
            self.read_mirror().into_iter().filter(|r| r.crash).collect();
        let changed = |r: &QuarantineRecord| match (&r.library_sha256, library_sha256(&r.engine_id))
        {
            (Some(then), Some(now)) => *then != now,
            _ => false,
        };
        if crashes.iter().any(changed) {
            self.write_mirror(|rows| rows.retain(|r| !(r.crash && changed(r))));
        }
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        for record in crashes.into_iter().filter(|r| !changed(r)) {
            if library_sha256(&record.engine_id).is_none() {
                // Not loaded in this process: nothing to say here (`health` says it).
                records.entry(record.engine_id.clone()).or_insert(record);
                continue;
            }
            tracing::warn!(
                target: "pincer::quarantine",
                engine_id = %record.engine_id,
                pid = record.pid,
                "[context-engine] Context engine \"{}\" is quarantined: {}; `pincer health --clear` lifts it once the engine is fixed.",
                sanitize_for_log(&record.engine_id),
                sanitize_for_log(&record.reason),
            );
            records.entry(record.engine_id.clone()).or_insert(record);
        }
        self.count.store(records.len(), Ordering::Release);
    }

    /// The crash record that keeps the library whose sha256 is `sha256` from being opened:
    /// its own code took an earlier process down without any of its engines in use (while it
    /// was being opened, or during process exit), so opening it again would do it again.
    pub fn library_crash(&self, sha256: &str) -> Option<QuarantineRecord> {
        self.read_mirror().into_iter().find(|r| {
            r.crash
                && crate::engines::crash_journal::Window::library_wide(&r.operation)
                && r.library_sha256.as_deref() == Some(sha256)
        })
    }

    /// This process's record for `engine_id`.
    pub fn get(&self, engine_id: &str) -> Option<QuarantineRecord> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(engine_id)
            .cloned()
    }

    /// Whether `engine_id` is quarantined in this process. One atomic load when nothing is.
    pub fn is_quarantined(&self, engine_id: &str) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(engine_id)
    }

    /// Clears one engine (`Some`) or all (`None`) in this process.
    pub fn clear(&self, engine_id: Option<&str>) {
        {
            let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            match engine_id {
                Some(id) => {
                    records.remove(id);
                }
                None => records.clear(),
            }
            self.count.store(records.len(), Ordering::Release);
        }
        let pid = std::process::id();
        self.write_mirror(|rows| {
            rows.retain(|r| r.pid != pid || engine_id.is_some_and(|id| r.engine_id != id))
        });
    }

    /// This process's records, then other processes' records from the mirror, deduplicated by
    /// engine id (this process wins, then the earliest).
    pub fn list(&self) -> Vec<QuarantineRecord> {
        let mut out: Vec<QuarantineRecord> = self
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let mut mirrored = self.read_mirror();
        mirrored.sort_by_key(|r| r.failed_at);
        for record in mirrored {
            if !out.iter().any(|r| r.engine_id == record.engine_id) {
                out.push(record);
            }
        }
        out
    }

    fn read_mirror(&self) -> Vec<QuarantineRecord> {
        self.mirror.as_deref().map(read_mirror).unwrap_or_default()
    }

    fn write_mirror(&self, update: impl FnMut(&mut Vec<QuarantineRecord>)) {
        let Some(path) = &self.mirror else { return };
        let _guard = self.mirror_lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = update_mirror(path, update) {
            tracing::debug!(path = %path.display(), error = %err, "quarantine mirror not written");
        }
    }
}

fn read_mirror(path: &Path) -> Vec<QuarantineRecord> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<MirrorFile>(&text).ok())
        .map(|f| f.records)
        .unwrap_or_default()
}

/// One locked read-modify-write of the mirror at `path`: other processes wait for the lock
/// (`<mirror>.lock`), so no update is lost. A missing mirror is not created for an update that
/// leaves it empty (nor is its folder).
fn update_mirror(
    path: &Path,
    mut update: impl FnMut(&mut Vec<QuarantineRecord>),
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    if !path.exists() {
        // Nothing to lock for an update that would leave an absent mirror empty.
        let mut probe = Vec::new();
        update(&mut probe);
        if probe.is_empty() {
            return Ok(());
        }
        crate::disk::create_dir_all(dir)?;
    }
    let mut lock_name = path.file_name().unwrap_or_default().to_os_string();
    lock_name.push(".lock");
    let lock = crate::disk::open(
        &dir.join(lock_name),
        std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true),
    )?;
    lock.lock()?;
    let existed = path.exists();
    let mut rows = read_mirror(path);
    let before = rows.clone();
    update(&mut rows);
    if rows == before || (!existed && rows.is_empty()) {
        return Ok(());
    }
    rows.sort_by_key(|r| r.failed_at);
    // Keep the newest: a fresh failure must never be the one that falls off.
    let excess = rows.len().saturating_sub(MIRROR_CAPACITY);
    rows.drain(..excess);
    static WRITES: AtomicUsize = AtomicUsize::new(0);
    let tmp = path.with_extension(format!(
        "json.{}.{}.tmp",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    // Written beside, synced and renamed over: a failure leaves the mirror as it was.
    crate::disk::replace(
        path,
        &tmp,
        &serde_json::to_vec_pretty(&MirrorFile { records: rows })?,
    )
}

/// Removes from the mirror in `state_dir` the records of processes that have exited (crash
/// records included), for `engine_id` or every engine, under the mirror's lock. Records of
/// running processes stay: those processes still downgrade their engines. Returns the removed
/// records and the ones kept.
///
/// # Errors
/// The mirror could not be locked or written.
pub fn clear_exited(
    state_dir: &Path,
    engine_id: Option<&str>,
) -> std::io::Result<(Vec<QuarantineRecord>, Vec<QuarantineRecord>)> {
    let path = state_dir.join(MIRROR_FILE_NAME);
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    if !path.exists() {
        return Ok((removed, kept));
    }
    update_mirror(&path, |rows| {
        let (gone, stay): (Vec<_>, Vec<_>) = std::mem::take(rows).into_iter().partition(|r| {
            engine_id.is_none_or(|id| r.engine_id == id) && process_alive(r.pid) == Some(false)
        });
        kept = stay
            .iter()
            .filter(|r| engine_id.is_none_or(|id| r.engine_id == id))
            .cloned()
            .collect();
        *rows = stay;
        removed = gone;
    })?;
    Ok((removed, kept))
}

/// Turns the crash journals of dead processes in `state_dir` into crash records in the mirror:
/// `the host process died during <method> (pid N)`, or what it died of outside any call
/// (`crash_journal::Crash::reason`), active until cleared or until the library
/// changes. Returns how many crashes it found.
pub fn harvest_crashes(state_dir: &Path) -> usize {
    let crashes = crate::engines::crash_journal::harvest(state_dir);
    if crashes.is_empty() {
        return 0;
    }
    let path = state_dir.join(MIRROR_FILE_NAME);
    let result = update_mirror(&path, |rows| {
        for crash in &crashes {
            if rows
                .iter()
                .any(|r| r.engine_id == crash.engine_id && r.pid == crash.pid)
            {
                continue;
            }
            rows.push(QuarantineRecord {
                engine_id: crash.engine_id.clone(),
                owner: None,
                operation: crash.window.operation().to_owned(),
                reason: crash.reason(),
                failed_at: now_ms(),
                pid: crash.pid,
                crash: true,
                library_sha256: crash.library_sha256.clone(),
            });
        }
    });
    if let Err(err) = result {
        tracing::warn!(path = %path.display(), %err, "crash records not written to the quarantine mirror");
    }
    for crash in &crashes {
        tracing::error!(
            target: "pincer::quarantine",
            engine_id = %crash.engine_id,
            pid = crash.pid,
            operation = crash.window.operation(),
            "[context-engine] Context engine \"{}\" took the host process down: {}; it stays quarantined until `pincer health --clear` or until its library changes.",
            sanitize_for_log(&crash.engine_id),
            crash.reason(),
        );
    }
    crashes.len()
}

/// Whether process `pid` is still running, when this platform can tell (Linux: `/proc`).
pub fn process_alive(pid: u32) -> Option<bool> {
    if cfg!(target_os = "linux") {
        Some(Path::new("/proc").join(pid.to_string()).exists())
    } else {
        None
    }
}

/// The health line of docs/CONTRACT.md §12, or `None` when nothing is actively quarantined (records
/// of exited processes are history, not a warning; see [`QuarantineRecord::is_active`]).
pub fn health_line(records: &[QuarantineRecord]) -> Option<String> {
    let ids: Vec<&str> = records
        .iter()
        .filter(|r| r.is_active())
        .map(|r| r.engine_id.as_str())
        .collect();
    if ids.is_empty() {
        return None;
    }
    Some(format!(
        "Context engine: warning ({} quarantined; downgraded to legacy: {})",
        ids.len(),
        ids.join(", ")
    ))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_failure_wins_and_health_line_lists_ids() {
        let q = Quarantine::new(None);
        assert!(q.record("a", Some(&Owner::plugin("a")), "assemble", "boom"));
        assert!(!q.record("a", Some(&Owner::plugin("a")), "ingest", "later"));
        assert_eq!(q.get("a").unwrap().operation, "assemble");
        assert_eq!(
            health_line(&q.list()).unwrap(),
            "Context engine: warning (1 quarantined; downgraded to legacy: a)"
        );
    }

    #[test]
    fn the_mirror_keeps_the_newest_records() {
        let dir = tempfile::tempdir().unwrap();
        let old: Vec<QuarantineRecord> = (0..MIRROR_CAPACITY as u64)
            .map(|i| QuarantineRecord {
                engine_id: format!("old-{i}"),
                owner: None,
                operation: "assemble".into(),
                reason: "x".into(),
                failed_at: i + 1,
                pid: 1,
                crash: false,
                library_sha256: None,
            })
            .collect();
        std::fs::write(
            dir.path().join(MIRROR_FILE_NAME),
            serde_json::to_string(&MirrorFile { records: old }).unwrap(),
        )
        .unwrap();
        let q = Quarantine::new(Some(dir.path()));
        q.record("fresh", None, "compact", "boom");
        let listed = Quarantine::new(Some(dir.path())).list();
        assert_eq!(listed.len(), MIRROR_CAPACITY);
        assert!(
            listed.iter().any(|r| r.engine_id == "fresh"),
            "the newest record is kept"
        );
        assert!(
            !listed.iter().any(|r| r.engine_id == "old-0"),
            "the oldest one went"
        );
    }

    #[test]
    fn mirror_is_shared_and_clearing_removes_only_own_rows() {
        let dir = tempfile::tempdir().unwrap();
        let q = Quarantine::new(Some(dir.path()));
        q.clear(None);
        assert!(
            !dir.path().join(MIRROR_FILE_NAME).exists(),
            "clearing an absent mirror creates no state"
        );
        // A sibling process's record.
        let sibling = QuarantineRecord {
            engine_id: "other".into(),
            owner: None,
            operation: "compact".into(),
            reason: "x".into(),
            failed_at: 1,
            pid: std::process::id().wrapping_add(1),
            crash: false,
            library_sha256: None,
        };
        std::fs::write(
            dir.path().join(MIRROR_FILE_NAME),
            serde_json::to_string(&MirrorFile {
                records: vec![sibling],
            })
            .unwrap(),
        )
        .unwrap();
        let fresh = Quarantine::new(Some(dir.path()));
        assert_eq!(
            fresh.list().len(),
            1,
            "persisted records are listed when process state is empty"
        );
        fresh.record("mine", None, "assemble", "boom");
        assert_eq!(fresh.list().len(), 2);
        fresh.clear(None);
        let left = Quarantine::new(Some(dir.path())).list();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].engine_id, "other");
    }

    /// A pid of a process that has exited.
    fn exited_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    fn record_of(engine_id: &str, pid: u32, crash: bool) -> QuarantineRecord {
        QuarantineRecord {
            engine_id: engine_id.into(),
            owner: None,
            operation: "assemble".into(),
            reason: "boom".into(),
            failed_at: 1,
            pid,
            crash,
            library_sha256: None,
        }
    }

    #[test]
    fn records_of_exited_processes_are_history_unless_they_record_a_crash() {
        let gone = exited_pid();
        let plain = record_of("plain", gone, false);
        let crash = record_of("crashed", gone, true);
        let live = record_of("live", std::process::id(), false);
        assert!(!plain.is_active());
        assert!(crash.is_active(), "a crash stays until cleared");
        assert!(live.is_active());
        assert_eq!(
            health_line(&[plain.clone(), crash.clone(), live.clone()]).unwrap(),
            "Context engine: warning (2 quarantined; downgraded to legacy: crashed, live)"
        );
        assert_eq!(health_line(std::slice::from_ref(&plain)), None);

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(MIRROR_FILE_NAME),
            serde_json::to_string(&MirrorFile {
                records: vec![plain, crash, live],
            })
            .unwrap(),
        )
        .unwrap();
        let (removed, kept) = clear_exited(dir.path(), Some("plain")).unwrap();
        assert_eq!(removed.len(), 1);
        assert!(kept.is_empty());
        let (removed, kept) = clear_exited(dir.path(), None).unwrap();
        assert_eq!(
            removed
                .iter()
                .map(|r| r.engine_id.as_str())
                .collect::<Vec<_>>(),
            ["crashed"]
        );
        assert_eq!(kept.len(), 1, "a running process's record stays");
        assert_eq!(Quarantine::new(Some(dir.path())).list().len(), 1);
    }

    #[test]
    fn concurrent_writers_of_the_mirror_never_lose_a_record() {
        let dir = tempfile::tempdir().unwrap();
        // Separate `Quarantine`s share no in-process lock, as separate processes would not.
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let state = dir.path().to_owned();
                std::thread::spawn(move || {
                    let q = Quarantine::new(Some(&state));
                    for j in 0..4 {
                        q.record(&format!("e{i}-{j}"), None, "assemble", "boom");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(Quarantine::new(Some(dir.path())).list().len(), 32);
    }
}
