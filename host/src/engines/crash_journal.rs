//! The crash journal: what survives when an engine takes the whole process down (`exit`, a
//! null write, a stack overflow, an allocation failure), so that the crash happens once, not on
//! every run.
//!
//! While a call into a plugin engine is in flight, the thread making it marks its own slot in a
//! per-process file, `$PINCER_HOME/state/crash-journal/<pid>.slots`, memory-mapped shared: the
//! mark is a copy of a precomputed tag (engine id, library sha256) and the method into the
//! mapping, then a plain store of "in call" (nanoseconds; no system call, no lock, no
//! allocation), and the end of the call is one more plain store. The kernel owns the mapped
//! pages, so whatever the process died of, the file says which engine was running which method.
//!
//! A later process [`harvest`]s the journals of dead processes: every slot still "in call" is a
//! crash, returned as a [`Crash`] (the quarantine turns it into a record that stays active until
//! `pincer health --clear` or until the library's sha256 changes), and the file is removed.
//!
//! When the process aborts (a stack overflow, an allocation failure), a `SIGABRT` handler
//! names the engines in flight on stderr before the process dies.
//!
//! The child-process backend (its own issue) fits the same records: the host that loses a child
//! in the middle of a call writes the same [`Crash`] itself instead of a later process finding it.

use std::cell::Cell;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::types::Method;

/// Slots in one process's journal: threads calling engines at the same moment.
pub const SLOTS: usize = 64;
const SLOT_BYTES: usize = 128;
const HEADER_BYTES: usize = 64;
const FILE_BYTES: usize = HEADER_BYTES + SLOTS * SLOT_BYTES;
const MAGIC: &[u8; 8] = b"PINCERJ1";
/// Header offset of the signal that stopped the process (0: none): a process the operator
/// stopped (Ctrl-C, `kill`, a service manager) did not crash, whatever engine was running.
const STOPPED_BY: usize = 8;
/// The longest engine id kept (plugin and engine ids are at most 128 characters; a longer one
/// is kept cut, which still names it).
const ID_BYTES: usize = 80;
/// Offsets inside a slot.
const STATE: usize = 0;
const METHOD: usize = 4;
const ID_LEN: usize = 5;
const HAS_SHA: usize = 6;
const ID: usize = 8;
const SHA: usize = ID + ID_BYTES;
const TAG_BYTES: usize = SLOT_BYTES - METHOD;
const IN_CALL: u32 = 0x4341_4c4c;

/// What a slot says about the engine in flight: id and library sha256, laid out as the slot
/// holds them from byte [`METHOD`] on, so a mark is one copy.
#[derive(Clone)]
pub struct JournalTag {
    bytes: [u8; TAG_BYTES],
}

impl std::fmt::Debug for JournalTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalTag").finish_non_exhaustive()
    }
}

impl JournalTag {
    /// The tag of engine `engine_id` from the library whose sha256 (hex) is `sha256`.
    pub fn new(engine_id: &str, sha256: Option<&str>) -> Self {
        let mut bytes = [0u8; TAG_BYTES];
        let mut len = engine_id.len().min(ID_BYTES);
        while !engine_id.is_char_boundary(len) {
            len -= 1;
        }
        bytes[ID_LEN - METHOD] = len as u8;
        bytes[ID - METHOD..ID - METHOD + len].copy_from_slice(&engine_id.as_bytes()[..len]);
        if let Some(raw) = sha256.and_then(decode_hex32) {
            bytes[HAS_SHA - METHOD] = 1;
            bytes[SHA - METHOD..SHA - METHOD + 32].copy_from_slice(&raw);
        }
        JournalTag { bytes }
    }
}

/// One call that was in flight when its process died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// The engine.
    pub engine_id: String,
    /// The method it was in.
    pub method: Method,
    /// The process that died.
    pub pid: u32,
    /// The sha256 (hex) of the library the engine came from, when known.
    pub library_sha256: Option<String>,
}

/// This process's journal: a shared mapping of its slot file.
pub struct CrashJournal {
    base: *mut u8,
    path: PathBuf,
    /// Bit `i` set: slot `i` belongs to a live thread.
    claimed: AtomicU64,
}

// SAFETY: the mapping lives as long as the process (never unmapped); each slot is written only
// by the thread that claimed it, and read by others only after the process died (or, in the
// abort handler, racily and read-only, which is what it is for).
unsafe impl Send for CrashJournal {}
// SAFETY: as above.
unsafe impl Sync for CrashJournal {}

impl std::fmt::Debug for CrashJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashJournal")
            .field("path", &self.path)
            .finish()
    }
}

static GLOBAL: OnceLock<Option<CrashJournal>> = OnceLock::new();

/// The folder of journals inside a state folder.
pub fn journal_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("crash-journal")
}

/// Opens this process's journal in `state_dir` (once per process; later calls return the
/// first one, whatever their folder) and installs the abort handler. `None` when the file
/// cannot be made (logged): calls then run unjournaled.
pub fn open_global(state_dir: &Path) -> Option<&'static CrashJournal> {
    GLOBAL
        .get_or_init(|| match CrashJournal::open(&journal_dir(state_dir)) {
            Ok(journal) => {
                install_abort_handler();
                Some(journal)
            }
            Err(err) => {
                tracing::warn!(dir = %journal_dir(state_dir).display(), %err, "crash journal unavailable; a crash inside an engine will not be remembered");
                None
            }
        })
        .as_ref()
}

/// This process's journal, if one was opened.
pub fn global() -> Option<&'static CrashJournal> {
    GLOBAL.get().and_then(Option::as_ref)
}

impl CrashJournal {
    fn open(dir: &Path) -> std::io::Result<Self> {
        crate::disk::create_dir_all(dir)?;
        let path = dir.join(format!("{}.slots", std::process::id()));
        let file = crate::disk::open(
            &path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true),
        )?;
        // The slots themselves are written through the shared mapping, which no seam sees.
        crate::disk::set_len(&file, &path, FILE_BYTES as u64)?;
        use std::os::fd::AsRawFd as _;
        // SAFETY: a fresh shared mapping of a file of FILE_BYTES bytes we own; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        // SAFETY: inside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), base, MAGIC.len()) };
        Ok(CrashJournal {
            base,
            path,
            claimed: AtomicU64::new(0),
        })
    }

    /// The slot file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn slot(&self, index: usize) -> *mut u8 {
        // SAFETY: index < SLOTS, so the slot lies inside the mapping.
        unsafe { self.base.add(HEADER_BYTES + index * SLOT_BYTES) }
    }

    fn claim(&'static self) -> Option<usize> {
        let mut bits = self.claimed.load(Ordering::Relaxed);
        loop {
            let free = (!bits).trailing_zeros() as usize;
            if free >= SLOTS {
                return None;
            }
            match self.claimed.compare_exchange_weak(
                bits,
                bits | (1 << free),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(free),
                Err(now) => bits = now,
            }
        }
    }

    /// Gives slot `index` back when its thread ends. The state is left as it is: `exit()`
    /// runs the calling thread's thread-local destructors, and an engine that calls `exit`
    /// in the middle of a call must still be found "in call" afterwards.
    fn release(&self, index: usize) {
        self.claimed.fetch_and(!(1 << index), Ordering::AcqRel);
    }

    /// Ends the marks of calls the host gave up on (timed out and abandoned, already
    /// quarantined in this process): called at a clean shutdown, when no call is in flight
    /// that the host still waits for, so that a normal exit is never taken for a crash.
    pub fn retire_abandoned(&self) {
        for index in 0..SLOTS {
            // SAFETY: inside the mapping; an abandoned thread's slot is written by no one else.
            unsafe { std::ptr::write_volatile(self.slot(index).add(STATE).cast::<u32>(), 0) };
        }
    }

    /// Marks `tag`'s engine as in `method` on this thread until the returned guard drops.
    /// Plain stores into this thread's slot: nanoseconds.
    #[inline]
    pub fn enter(&'static self, tag: &JournalTag, method: Method) -> InCall {
        let Some(index) = thread_slot(self) else {
            return InCall { slot: None };
        };
        let slot = self.slot(index);
        // SAFETY: this thread owns slot `index`; all offsets are inside it. The state is written
        // last, after a compiler fence, so a reader after death never sees a half tag "in call".
        unsafe {
            std::ptr::copy_nonoverlapping(tag.bytes.as_ptr(), slot.add(METHOD), TAG_BYTES);
            std::ptr::write_volatile(slot.add(METHOD), method as u8);
            std::sync::atomic::compiler_fence(Ordering::Release);
            std::ptr::write_volatile(slot.add(STATE).cast::<u32>(), IN_CALL);
        }
        InCall { slot: Some(slot) }
    }
}

/// The mark of one call in flight; dropping it ends the mark.
#[must_use = "the mark ends when this guard drops"]
pub struct InCall {
    slot: Option<*mut u8>,
}

impl Drop for InCall {
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            // SAFETY: the slot is this thread's (the guard is not Send).
            unsafe { std::ptr::write_volatile(slot.add(STATE).cast::<u32>(), 0) };
        }
    }
}

/// A thread's claim on one slot, released when the thread ends.
struct SlotClaim {
    index: Cell<Option<usize>>,
    journal: Cell<Option<&'static CrashJournal>>,
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        if let (Some(index), Some(journal)) = (self.index.get(), self.journal.get()) {
            journal.release(index);
        }
    }
}

thread_local! {
    static THREAD_SLOT: SlotClaim = const {
        SlotClaim { index: Cell::new(None), journal: Cell::new(None) }
    };
}

#[inline]
fn thread_slot(journal: &'static CrashJournal) -> Option<usize> {
    THREAD_SLOT
        .try_with(|claim| {
            if let Some(index) = claim.index.get() {
                return Some(index);
            }
            let index = journal.claim()?;
            claim.index.set(Some(index));
            claim.journal.set(Some(journal));
            Some(index)
        })
        .ok()
        .flatten()
}

/// Reads and removes the journals in `state_dir` of processes that are gone: every call they
/// had in flight. Journals of live processes (this one included) are left alone; on platforms
/// that cannot tell whether a process runs, nothing is harvested.
pub fn harvest(state_dir: &Path) -> Vec<Crash> {
    let dir = journal_dir(state_dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut crashes = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".slots"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || process_alive(pid) != Some(false) {
            continue;
        }
        if let Ok(bytes) = std::fs::read(&path) {
            crashes.extend(read_slots(&bytes, pid));
        }
        let _ = crate::disk::remove_file(&path);
    }
    crashes
}

fn read_slots(bytes: &[u8], pid: u32) -> Vec<Crash> {
    if bytes.len() < FILE_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Vec::new();
    }
    let stopped_by = u32::from_ne_bytes(
        bytes[STOPPED_BY..STOPPED_BY + 4]
            .try_into()
            .expect("four bytes"),
    );
    if stopped_by != 0 {
        tracing::debug!(
            pid,
            signal = stopped_by,
            "a process stopped by a signal did not crash"
        );
        return Vec::new();
    }
    (0..SLOTS)
        .filter_map(|i| {
            let slot = &bytes[HEADER_BYTES + i * SLOT_BYTES..][..SLOT_BYTES];
            let state = u32::from_ne_bytes(slot[STATE..STATE + 4].try_into().ok()?);
            if state != IN_CALL {
                return None;
            }
            let method = *Method::ALL.get(usize::from(slot[METHOD]))?;
            let len = usize::from(slot[ID_LEN]).min(ID_BYTES);
            let engine_id = String::from_utf8_lossy(&slot[ID..ID + len]).into_owned();
            let library_sha256 = (slot[HAS_SHA] == 1).then(|| {
                slot[SHA..SHA + 32]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            });
            Some(Crash {
                engine_id,
                method,
                pid,
                library_sha256,
            })
        })
        .collect()
}

/// Whether process `pid` runs, when this platform can tell (Linux: `/proc`).
fn process_alive(pid: u32) -> Option<bool> {
    cfg!(target_os = "linux").then(|| Path::new("/proc").join(pid.to_string()).exists())
}

fn decode_hex32(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

/// Makes `SIGINT`, `SIGTERM` and `SIGHUP` leave a mark in this process's journal before the
/// process dies of them as it would have: a later process then knows the engine in flight was
/// stopped by the operator (Ctrl-C, `kill`, a service manager), not crashed, and does not
/// quarantine it. For processes that do not handle these signals themselves (the CLI's
/// commands; `pincer serve` shuts down gracefully instead). Only async-signal-safe work: one
/// store into the mapping, then the default action.
pub fn install_stop_handlers() {
    extern "C" fn on_stop(signal: libc::c_int) {
        if let Some(journal) = global() {
            // SAFETY: inside the mapping (the header); a plain store.
            unsafe {
                std::ptr::write_volatile(
                    journal.base.add(STOPPED_BY).cast::<u32>(),
                    u32::try_from(signal).unwrap_or(u32::MAX),
                );
            }
        }
        // SAFETY: restore the default action and re-raise: the process dies of the signal.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that does only async-signal-safe work.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = libc::SA_ONSTACK;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// On `SIGABRT` (Rust's stack-overflow handler and allocation-failure path both abort), names
/// on stderr every engine this process is calling, then dies of the signal as it would have.
/// Only async-signal-safe work: reads of the mapping and `write(2)`.
fn install_abort_handler() {
    extern "C" fn on_abort(_signal: libc::c_int) {
        if let Some(journal) = global() {
            for index in 0..SLOTS {
                let slot = journal.slot(index);
                // SAFETY: inside the mapping; a racy read is harmless here.
                let (state, method, len) = unsafe {
                    (
                        std::ptr::read_volatile(slot.add(STATE).cast::<u32>()),
                        std::ptr::read_volatile(slot.add(METHOD)),
                        usize::from(std::ptr::read_volatile(slot.add(ID_LEN))).min(ID_BYTES),
                    )
                };
                if state != IN_CALL {
                    continue;
                }
                let method = Method::ALL
                    .get(usize::from(method))
                    .map_or("a call", |m| m.as_str());
                // SAFETY: inside the mapping.
                let id = unsafe { std::slice::from_raw_parts(slot.add(ID), len) };
                let parts: [&[u8]; 5] = [
                    b"pincer: the process is aborting inside context engine \"",
                    id,
                    b"\" during ",
                    method.as_bytes(),
                    b"; the crash journal quarantines it for the next run (`pincer health` shows it)\n",
                ];
                for part in parts {
                    // SAFETY: write(2) of a valid buffer; errors are ignored on the way down.
                    unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
                }
            }
        }
        // SAFETY: restore the default action and re-raise: the process dies of SIGABRT.
        unsafe {
            libc::signal(libc::SIGABRT, libc::SIG_DFL);
            libc::raise(libc::SIGABRT);
        }
    }
    // SAFETY: installing a handler that does only async-signal-safe work.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_abort as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        action.sa_flags = libc::SA_ONSTACK;
        libc::sigaction(libc::SIGABRT, &action, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_in_call_reads_back_as_a_crash_and_a_finished_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let journal: &'static CrashJournal = Box::leak(Box::new(
            CrashJournal::open(&journal_dir(dir.path())).unwrap(),
        ));
        let sha = "ab".repeat(32);
        let tag = JournalTag::new("hostile", Some(&sha));
        {
            let _done = journal.enter(&tag, Method::Ingest);
        }
        let in_call = journal.enter(&tag, Method::Assemble);
        let bytes = std::fs::read(journal.path()).unwrap();
        assert_eq!(
            read_slots(&bytes, 7),
            vec![Crash {
                engine_id: "hostile".into(),
                method: Method::Assemble,
                pid: 7,
                library_sha256: Some(sha),
            }]
        );
        drop(in_call);
        let bytes = std::fs::read(journal.path()).unwrap();
        assert!(read_slots(&bytes, 7).is_empty());
    }
}
