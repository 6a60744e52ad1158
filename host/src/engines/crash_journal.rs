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
//! Engine code also runs where no call is marked, and the journal covers those windows too:
//! - **loading**: `dlopen` and the library's constructors, marked in the loading thread's slot
//!   like a call ([`CrashJournal::enter_loading`]);
//! - **its lifetime**: every library opened in this process is listed in the journal's
//!   library table ([`CrashJournal::library_loaded`]), and a fatal signal is attributed to the
//!   library whose code was running by [`crate::engines::fatal_signal`] — a thread or timer of
//!   the engine's own, a thread still running after its call returned;
//! - **process exit** (`atexit` handlers, destructors): with [`install_exit_watch`] (the
//!   binary calls it; embedders may), the host says when it is finishing
//!   ([`FinishingGuard`]), and its own `atexit` handler, registered before any library opens
//!   and so run after theirs, says the exit got that far. A process that died between the two
//!   died in the libraries' exit code; an `exit()` while the host was not finishing and no call
//!   was in flight was a library's.
//!
//! The child-process backend (its own issue) fits the same records: the host that loses a child
//! in the middle of a call writes the same [`Crash`] itself instead of a later process finding it.

use std::cell::Cell;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::types::Method;

/// Slots in one process's journal: threads calling engines at the same moment.
pub const SLOTS: usize = 64;
/// Libraries one process's journal lists (opened in process; later ones are not listed).
pub const LIBRARY_SLOTS: usize = 32;
const SLOT_BYTES: usize = 128;
const HEADER_BYTES: usize = 64;
/// The first format: header and call slots only (still read, from an older host).
const V1_FILE_BYTES: usize = HEADER_BYTES + SLOTS * SLOT_BYTES;
const LIBRARIES_AT: usize = V1_FILE_BYTES;
const FILE_BYTES: usize = LIBRARIES_AT + LIBRARY_SLOTS * SLOT_BYTES;
const MAGIC_V1: &[u8; 8] = b"PINCERJ1";
const MAGIC: &[u8; 8] = b"PINCERJ2";
/// Header offset of the signal that stopped the process (0: none): a process the operator
/// stopped (Ctrl-C, `kill`, a service manager) did not crash, whatever engine was running.
const STOPPED_BY: usize = 8;
/// Header offset of the exit state (`EXIT_*`).
const EXIT_STATE: usize = 12;
/// Header offsets of the fatal signal record: mark, number, library index, how it was
/// attributed, the faulting address, and the exit state when it came.
const SIG_MARK: usize = 16;
const SIG_NUMBER: usize = 20;
const SIG_LIBRARY: usize = 24;
const SIG_HOW: usize = 28;
const SIG_ADDRESS: usize = 32;
const SIG_PHASE: usize = 40;
const SIGNAL_MARK: u32 = 0x5349_474e;
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
/// A library table entry in use.
const LOADED: u32 = 0x4c4f_4144;
/// The state of a slot marking a library being opened (not a call).
const OPENING: u32 = 0x4f50_454e;
/// The "method" byte of such a slot.
const LOADING: u8 = 0x80;

/// Exit states: nobody watches (an embedder that did not call [`install_exit_watch`]).
const EXIT_UNWATCHED: u32 = 0;
/// Watched, and the host is not finishing.
const EXIT_RUNNING: u32 = 1;
/// The host is finishing: whatever runs now is process exit (`atexit`, destructors).
const EXIT_FINISHING: u32 = 2;
/// The host's own `atexit` handler ran after the libraries' ones.
const EXIT_CLEAN: u32 = 3;
/// `exit()` was called while the host was not finishing.
const EXIT_OUTSIDE: u32 = 4;

/// The exit state, also for the time before the journal is open.
static EXIT: AtomicU32 = AtomicU32::new(EXIT_UNWATCHED);

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

/// Where engine code was running when the process died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// A marked call (or the factory).
    Call(Method),
    /// Its library being opened: `dlopen` and the library's constructors.
    Loading,
    /// Outside any call while its library was loaded: a thread or timer of its own, or a
    /// thread still running after its call returned.
    Lifetime,
    /// Process exit: `atexit` handlers and destructors.
    Exit,
}

impl Window {
    /// The quarantine record's operation: the method's contract name, or `load`, `lifetime`,
    /// `exit`.
    pub fn operation(&self) -> &'static str {
        match self {
            Window::Call(method) => method.as_str(),
            Window::Loading => "load",
            Window::Lifetime => "lifetime",
            Window::Exit => "exit",
        }
    }

    /// Whether the library's code crashed without any of its engines being used (its
    /// constructors, its exit code): such a library is not opened again until cleared.
    pub fn library_wide(operation: &str) -> bool {
        matches!(operation, "load" | "exit")
    }
}

/// The fatal signal a process died of, as its handler attributed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatalSignal {
    /// The signal number.
    pub number: i32,
    /// The faulting address (`si_addr`).
    pub address: u64,
    /// The instruction pointer was in the library's code (otherwise a return address on the
    /// stack was).
    pub in_library_code: bool,
}

impl FatalSignal {
    /// `SIGSEGV`, `SIGBUS`, …, or `signal N`.
    pub fn name(&self) -> String {
        let known = [
            (libc::SIGSEGV, "SIGSEGV"),
            (libc::SIGBUS, "SIGBUS"),
            (libc::SIGILL, "SIGILL"),
            (libc::SIGFPE, "SIGFPE"),
            (libc::SIGABRT, "SIGABRT"),
            (libc::SIGSYS, "SIGSYS"),
        ];
        known.iter().find(|(n, _)| *n == self.number).map_or_else(
            || format!("signal {}", self.number),
            |(_, name)| (*name).to_owned(),
        )
    }
}

/// One engine whose code was running when its process died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// The engine.
    pub engine_id: String,
    /// What it was doing.
    pub window: Window,
    /// The fatal signal attributed to its library, when one was.
    pub signal: Option<FatalSignal>,
    /// The process that died.
    pub pid: u32,
    /// The sha256 (hex) of the library the engine came from, when known.
    pub library_sha256: Option<String>,
}

impl Crash {
    /// What happened, for the quarantine record (a call's reason is
    /// `the host process died during <method> (pid N)`).
    pub fn reason(&self) -> String {
        let pid = self.pid;
        let signal = self.signal.map(|s| {
            let whose = if s.in_library_code {
                "in the engine's own code"
            } else {
                "with the engine's code on the stack"
            };
            format!("of {} {whose}", s.name())
        });
        match (self.window, signal) {
            (Window::Call(method), _) => {
                format!("the host process died during {method} (pid {pid})")
            }
            (Window::Loading, _) => format!(
                "the host process died while the engine's library was being opened (dlopen and its constructors) (pid {pid})"
            ),
            (Window::Lifetime, Some(signal)) => format!(
                "the host process died {signal} outside any call (a thread or timer of its own, or one still running after its call returned) (pid {pid})"
            ),
            (Window::Lifetime, None) => format!(
                "the host process was ended by exit() outside any call while the engine's library was loaded (pid {pid})"
            ),
            (Window::Exit, Some(signal)) => format!(
                "the host process died {signal} during process exit (atexit handlers, destructors) (pid {pid})"
            ),
            (Window::Exit, None) => format!(
                "the host process died during process exit (atexit handlers, destructors) with the engine's library loaded (pid {pid})"
            ),
        }
    }
}

/// This process's journal: a shared mapping of its slot file.
pub struct CrashJournal {
    base: *mut u8,
    path: PathBuf,
    /// The process the journal belongs to: a forked child shares the mapping and must not
    /// write in it.
    pid: u32,
    /// Bit `i` set: slot `i` belongs to a live thread.
    claimed: AtomicU64,
    /// Entries of the library table in use.
    libraries: AtomicUsize,
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
/// first one, whatever their folder) and installs the fatal-signal handler
/// ([`crate::engines::fatal_signal`]). `None` when the file cannot be made (logged): calls
/// then run unjournaled.
pub fn open_global(state_dir: &Path) -> Option<&'static CrashJournal> {
    GLOBAL
        .get_or_init(|| match CrashJournal::open(&journal_dir(state_dir)) {
            Ok(journal) => {
                journal.write_u32(EXIT_STATE, EXIT.load(Ordering::Acquire));
                Some(journal)
            }
            Err(err) => {
                tracing::warn!(dir = %journal_dir(state_dir).display(), %err, "crash journal unavailable; a crash inside an engine will not be remembered");
                None
            }
        })
        .as_ref()
        .inspect(|journal| crate::engines::fatal_signal::install(*journal))
}

impl crate::engines::fatal_signal::SignalJournal for CrashJournal {
    fn record_signal(&self, number: i32, library: usize, in_library_code: bool, address: u64) {
        CrashJournal::record_signal(self, number, library, in_library_code, address);
    }

    fn owned_by_this_process(&self) -> bool {
        CrashJournal::owned_by_this_process(self)
    }

    fn name_engines_in_flight(&self) {
        CrashJournal::name_engines_in_flight(self);
    }
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
            pid: std::process::id(),
            claimed: AtomicU64::new(0),
            libraries: AtomicUsize::new(0),
        })
    }

    #[cfg(any(test, feature = "test-support"))]
    /// The slot file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn slot(&self, index: usize) -> *mut u8 {
        // SAFETY: index < SLOTS, so the slot lies inside the mapping.
        unsafe { self.base.add(HEADER_BYTES + index * SLOT_BYTES) }
    }

    fn library_slot(&self, index: usize) -> *mut u8 {
        // SAFETY: index < LIBRARY_SLOTS, so the entry lies inside the mapping.
        unsafe { self.base.add(LIBRARIES_AT + index * SLOT_BYTES) }
    }

    /// A plain store of a header word. Async-signal-safe.
    fn write_u32(&self, offset: usize, value: u32) {
        // SAFETY: a header offset inside the mapping, 4-aligned.
        unsafe { std::ptr::write_volatile(self.base.add(offset).cast::<u32>(), value) };
    }

    /// Whether this is the process the journal belongs to (not a forked child sharing its
    /// mapping). Async-signal-safe: `getpid(2)`.
    pub(crate) fn owned_by_this_process(&self) -> bool {
        // SAFETY: getpid has no preconditions.
        u32::try_from(unsafe { libc::getpid() }).ok() == Some(self.pid)
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
        self.mark(tag, method as u8, IN_CALL)
    }

    /// Marks `tag`'s library as being opened on this thread (`dlopen` and its constructors)
    /// until the returned guard drops.
    pub fn enter_loading(&'static self, tag: &JournalTag) -> InCall {
        self.mark(tag, LOADING, OPENING)
    }

    #[inline]
    fn mark(&'static self, tag: &JournalTag, what: u8, state: u32) -> InCall {
        let Some(index) = thread_slot(self) else {
            return InCall { slot: None };
        };
        let slot = self.slot(index);
        // SAFETY: this thread owns slot `index`; all offsets are inside it. The state is written
        // last, after a compiler fence, so a reader after death never sees a half tag "in call".
        unsafe {
            std::ptr::copy_nonoverlapping(tag.bytes.as_ptr(), slot.add(METHOD), TAG_BYTES);
            std::ptr::write_volatile(slot.add(METHOD), what);
            std::sync::atomic::compiler_fence(Ordering::Release);
            std::ptr::write_volatile(slot.add(STATE).cast::<u32>(), state);
        }
        InCall { slot: Some(slot) }
    }

    /// Lists `tag`'s library as opened in this process, for good (a crash in its code outside
    /// any call is then attributed to it): its index in the library table, `None` when the
    /// table is full (logged).
    pub fn library_loaded(&self, tag: &JournalTag) -> Option<usize> {
        let index = self.libraries.fetch_add(1, Ordering::AcqRel);
        if index >= LIBRARY_SLOTS {
            tracing::warn!(
                "the crash journal lists {LIBRARY_SLOTS} libraries already; a crash outside a call in a later one is not attributed"
            );
            return None;
        }
        let entry = self.library_slot(index);
        // SAFETY: a fresh entry only this call writes; inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(tag.bytes.as_ptr(), entry.add(METHOD), TAG_BYTES);
            std::sync::atomic::compiler_fence(Ordering::Release);
            std::ptr::write_volatile(entry.add(STATE).cast::<u32>(), LOADED);
        }
        Some(index)
    }

    /// Records the fatal signal `number`, attributed to library `library` (an index of the
    /// library table), into the header. Only plain stores: called from the signal handler.
    pub(crate) fn record_signal(
        &self,
        number: i32,
        library: usize,
        in_library_code: bool,
        address: u64,
    ) {
        if !self.owned_by_this_process() {
            return;
        }
        self.write_u32(SIG_NUMBER, u32::try_from(number).unwrap_or(0));
        self.write_u32(SIG_LIBRARY, u32::try_from(library).unwrap_or(u32::MAX));
        self.write_u32(SIG_HOW, u32::from(in_library_code));
        // SAFETY: an 8-aligned header offset inside the mapping.
        unsafe { std::ptr::write_volatile(self.base.add(SIG_ADDRESS).cast::<u64>(), address) };
        self.write_u32(SIG_PHASE, EXIT.load(Ordering::Relaxed));
        std::sync::atomic::compiler_fence(Ordering::Release);
        self.write_u32(SIG_MARK, SIGNAL_MARK);
    }

    /// Names on stderr every engine this process is calling (the process is aborting). Only
    /// reads of the mapping and `write(2)`: called from the signal handler.
    pub(crate) fn name_engines_in_flight(&self) {
        for index in 0..SLOTS {
            let slot = self.slot(index);
            // SAFETY: inside the mapping; a racy read is harmless here.
            let (state, method, len) = unsafe {
                (
                    std::ptr::read_volatile(slot.add(STATE).cast::<u32>()),
                    std::ptr::read_volatile(slot.add(METHOD)),
                    usize::from(std::ptr::read_volatile(slot.add(ID_LEN))).min(ID_BYTES),
                )
            };
            if state != IN_CALL && state != OPENING {
                continue;
            }
            let method = match Method::ALL.get(usize::from(method)) {
                Some(m) => m.as_str(),
                None if method == LOADING => "the opening of its library",
                None => "a call",
            };
            // SAFETY: inside the mapping.
            let id = unsafe { std::slice::from_raw_parts(slot.add(ID), len) };
            let parts: [&[u8]; 5] = [
                b"pincer: the process is aborting inside context engine \"",
                id,
                b"\" during ",
                method.as_bytes(),
                b"; the crash journal quarantines it for the next run (`pincer health` shows it)\n",
            ];
            // One line in one writev(2): written in pieces, it could be interleaved with the
            // engine's own output drained to the same stream. No buffer is assembled: this may
            // run on a nearly exhausted alternate signal stack (after a stack overflow).
            let iovec = |part: &[u8]| libc::iovec {
                iov_base: part.as_ptr() as *mut libc::c_void,
                iov_len: part.len(),
            };
            let iov = [
                iovec(parts[0]),
                iovec(parts[1]),
                iovec(parts[2]),
                iovec(parts[3]),
                iovec(parts[4]),
            ];
            // SAFETY: writev(2) of valid buffers that outlive the call; errors are ignored on
            // the way down.
            unsafe {
                libc::writev(
                    crate::engines::stdio::host_stderr_fd(),
                    iov.as_ptr(),
                    iov.len() as libc::c_int,
                )
            };
        }
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

fn set_exit_state(state: u32) {
    EXIT.store(state, Ordering::Release);
    if let Some(journal) = global() {
        if journal.owned_by_this_process() {
            journal.write_u32(EXIT_STATE, state);
        }
    }
}

/// Watches how this process exits, for a program that owns its `main` (the `pincer` binary;
/// an embedder may): call it first in `main`, before any library opens, and keep the returned
/// guard alive until `main` returns. It registers the host's own `atexit` handler — run after
/// every handler a library registers later — that tells a finished exit from an `exit()` some
/// library called while the host was not finishing. See the module docs.
pub fn install_exit_watch() -> FinishingGuard {
    extern "C" fn at_exit() {
        if global().is_some_and(|j| !j.owned_by_this_process()) {
            return;
        }
        match EXIT.load(Ordering::Acquire) {
            EXIT_FINISHING => set_exit_state(EXIT_CLEAN),
            EXIT_RUNNING => set_exit_state(EXIT_OUTSIDE),
            _ => {}
        }
    }
    if EXIT
        .compare_exchange(
            EXIT_UNWATCHED,
            EXIT_RUNNING,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    {
        // SAFETY: registering a handler that only stores into memory.
        unsafe { libc::atexit(at_exit) };
    }
    FinishingGuard { _private: () }
}

/// Dropped when `main` returns (or unwinds): from then on, what runs is process exit.
#[must_use = "the host is finishing when this guard drops: keep it until `main` returns"]
pub struct FinishingGuard {
    _private: (),
}

impl Drop for FinishingGuard {
    fn drop(&mut self) {
        if EXIT.load(Ordering::Acquire) == EXIT_RUNNING {
            set_exit_state(EXIT_FINISHING);
        }
    }
}

/// Reads and removes the journals in `state_dir` of processes that are gone: every engine
/// whose code was running when they died. Journals of live processes (this one included) are
/// left alone; on platforms that cannot tell whether a process runs, nothing is harvested.
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
            crashes.extend(read_journal(&bytes, pid));
        }
        let _ = crate::disk::remove_file(&path);
    }
    crashes
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes(bytes[offset..offset + 4].try_into().expect("four bytes"))
}

/// The engine id and library sha256 of a slot or library entry.
fn tag_of(slot: &[u8]) -> (String, Option<String>) {
    let len = usize::from(slot[ID_LEN]).min(ID_BYTES);
    let engine_id = String::from_utf8_lossy(&slot[ID..ID + len]).into_owned();
    let library_sha256 = (slot[HAS_SHA] == 1).then(|| {
        slot[SHA..SHA + 32]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    });
    (engine_id, library_sha256)
}

/// What one dead process's journal says. A fatal signal attributed to a library names that
/// library's engine alone (with its marked calls, when it had any); otherwise every marked
/// call and opening; with none, the exit state says whether the libraries' exit code or an
/// `exit()` outside any call ended the process.
fn read_journal(bytes: &[u8], pid: u32) -> Vec<Crash> {
    let magic = bytes.get(..MAGIC.len());
    let v2 = bytes.len() >= FILE_BYTES && magic == Some(MAGIC.as_slice());
    let v1 = bytes.len() >= V1_FILE_BYTES && magic == Some(MAGIC_V1.as_slice());
    if !v1 && !v2 {
        return Vec::new();
    }
    let stopped_by = u32_at(bytes, STOPPED_BY);
    if stopped_by != 0 {
        tracing::debug!(
            pid,
            signal = stopped_by,
            "a process stopped by a signal did not crash"
        );
        return Vec::new();
    }
    let marked: Vec<Crash> = (0..SLOTS)
        .filter_map(|i| {
            let slot = &bytes[HEADER_BYTES + i * SLOT_BYTES..][..SLOT_BYTES];
            let window = match (
                u32_at(slot, STATE),
                Method::ALL.get(usize::from(slot[METHOD])),
            ) {
                (IN_CALL, Some(method)) => Window::Call(*method),
                (OPENING, None) if slot[METHOD] == LOADING => Window::Loading,
                _ => return None,
            };
            let (engine_id, library_sha256) = tag_of(slot);
            Some(Crash {
                engine_id,
                window,
                signal: None,
                pid,
                library_sha256,
            })
        })
        .collect();
    if v1 {
        return marked;
    }
    let libraries: Vec<(String, Option<String>)> = (0..LIBRARY_SLOTS)
        .map(|i| &bytes[LIBRARIES_AT + i * SLOT_BYTES..][..SLOT_BYTES])
        .take_while(|entry| u32_at(entry, STATE) == LOADED)
        .map(tag_of)
        .collect();
    let library_crash = |(engine_id, library_sha256): &(String, Option<String>),
                         window: Window,
                         signal: Option<FatalSignal>| Crash {
        engine_id: engine_id.clone(),
        window,
        signal,
        pid,
        library_sha256: library_sha256.clone(),
    };
    if u32_at(bytes, SIG_MARK) == SIGNAL_MARK {
        let signal = FatalSignal {
            number: i32::try_from(u32_at(bytes, SIG_NUMBER)).unwrap_or(0),
            address: u64::from_ne_bytes(
                bytes[SIG_ADDRESS..SIG_ADDRESS + 8]
                    .try_into()
                    .expect("eight bytes"),
            ),
            in_library_code: u32_at(bytes, SIG_HOW) == 1,
        };
        let library = usize::try_from(u32_at(bytes, SIG_LIBRARY)).unwrap_or(usize::MAX);
        if let Some(owner) = libraries.get(library) {
            let own: Vec<Crash> = marked
                .iter()
                .filter(|c| c.engine_id == owner.0 && c.library_sha256 == owner.1)
                .map(|c| Crash {
                    signal: Some(signal),
                    ..c.clone()
                })
                .collect();
            if !own.is_empty() {
                return own;
            }
            let window = match u32_at(bytes, SIG_PHASE) {
                EXIT_FINISHING | EXIT_CLEAN => Window::Exit,
                _ => Window::Lifetime,
            };
            return vec![library_crash(owner, window, Some(signal))];
        }
    }
    if !marked.is_empty() {
        return marked;
    }
    let window = match u32_at(bytes, EXIT_STATE) {
        EXIT_FINISHING => Window::Exit,
        EXIT_OUTSIDE => Window::Lifetime,
        _ => return Vec::new(),
    };
    libraries
        .iter()
        .map(|library| library_crash(library, window, None))
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
            if journal.owned_by_this_process() {
                journal.write_u32(STOPPED_BY, u32::try_from(signal).unwrap_or(u32::MAX));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_in(dir: &Path) -> &'static CrashJournal {
        Box::leak(Box::new(CrashJournal::open(&journal_dir(dir)).unwrap()))
    }

    #[test]
    fn a_slot_in_call_reads_back_as_a_crash_and_a_finished_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal_in(dir.path());
        let sha = "ab".repeat(32);
        let tag = JournalTag::new("hostile", Some(&sha));
        {
            let _done = journal.enter(&tag, Method::Ingest);
        }
        let in_call = journal.enter(&tag, Method::Assemble);
        let bytes = std::fs::read(journal.path()).unwrap();
        assert_eq!(
            read_journal(&bytes, 7),
            vec![Crash {
                engine_id: "hostile".into(),
                window: Window::Call(Method::Assemble),
                signal: None,
                pid: 7,
                library_sha256: Some(sha),
            }]
        );
        drop(in_call);
        let bytes = std::fs::read(journal.path()).unwrap();
        assert!(read_journal(&bytes, 7).is_empty());
    }

    #[test]
    fn windows_outside_a_call_read_back_as_what_the_process_was_doing() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal_in(dir.path());
        let sha = "cd".repeat(32);
        let tag = JournalTag::new("hostile", Some(&sha));
        let read = || read_journal(&std::fs::read(journal.path()).unwrap(), 9);

        // Opening the library.
        let loading = journal.enter_loading(&tag);
        assert_eq!(read()[0].window, Window::Loading);
        drop(loading);
        assert!(read().is_empty(), "opened: nothing to say");

        // Loaded, then `exit()` outside any call, then during process exit.
        let index = journal.library_loaded(&tag).unwrap();
        assert!(read().is_empty(), "loaded and running: nothing to say");
        journal.write_u32(EXIT_STATE, EXIT_OUTSIDE);
        assert_eq!(read()[0].window, Window::Lifetime);
        journal.write_u32(EXIT_STATE, EXIT_FINISHING);
        assert_eq!(read()[0].window, Window::Exit);
        journal.write_u32(EXIT_STATE, EXIT_CLEAN);
        assert!(read().is_empty(), "a clean exit");

        // A signal in the library's code outside any call, during the run.
        journal.record_signal(libc::SIGSEGV, index, true, 0);
        journal.write_u32(SIG_PHASE, EXIT_RUNNING);
        let crash = read().remove(0);
        assert_eq!(crash.window, Window::Lifetime);
        assert_eq!(crash.library_sha256.as_deref(), Some(sha.as_str()));
        assert!(
            crash.reason().starts_with(
                "the host process died of SIGSEGV in the engine's own code outside any call"
            ),
            "{}",
            crash.reason()
        );
        // … and with a call of the same engine marked: the call's reason, as before.
        let _in_call = journal.enter(&tag, Method::Assemble);
        let crash = read().remove(0);
        assert_eq!(crash.window, Window::Call(Method::Assemble));
        assert_eq!(
            crash.reason(),
            "the host process died during assemble (pid 9)"
        );
    }

    #[test]
    fn a_signal_in_one_library_does_not_blame_a_bystander_in_call() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal_in(dir.path());
        let culprit = JournalTag::new("culprit", None);
        let bystander = JournalTag::new("bystander", None);
        journal.library_loaded(&bystander).unwrap();
        let index = journal.library_loaded(&culprit).unwrap();
        let _in_call = journal.enter(&bystander, Method::Assemble);
        journal.record_signal(libc::SIGBUS, index, false, 0x10);
        let crashes = read_journal(&std::fs::read(journal.path()).unwrap(), 3);
        assert_eq!(crashes.len(), 1, "{crashes:?}");
        assert_eq!(crashes[0].engine_id, "culprit");
        assert!(crashes[0]
            .reason()
            .contains("of SIGBUS with the engine's code on the stack"));
    }
}
