//! The fatal-signal handler: a crash in an engine's code outside any call (a thread or timer
//! of its own, a thread still running after its call returned, an `atexit` handler or a
//! destructor) is attributed to the library whose code was running, in the crash journal,
//! before the process dies of the signal as it would have.
//!
//! When a library is opened in this process, [`watch_library`] reads `/proc/self/maps` once
//! and records the address ranges of its executable mappings in a fixed table. On `SIGSEGV`,
//! `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGABRT` or `SIGSYS` the handler (on the thread's alternate
//! signal stack when it has one) looks for a library that owns the interrupted instruction
//! pointer, and failing that, the first return address on the interrupted stack (a bounded
//! scan of at most [`STACK_SCAN_BYTES`], each word read with `process_vm_readv(2)` so that an
//! unmapped page ends the scan instead of faulting again) that falls inside one. The match is
//! recorded in the journal ([`CrashJournal::record_signal`]) with plain stores. No allocation,
//! no lock: only async-signal-safe calls. Then the handler that was installed before (Rust's
//! stack-overflow handler) runs, or the default action.
//!
//! `SIGABRT` also names the engines in flight on stderr, as before.
//!
//! The journal reaches the handler as a [`SignalJournal`] handed to [`install`] (the crash
//! journal installs the handler when it opens), so this file names no other engine module.
//!
//! [`CrashJournal::record_signal`]: SignalJournal::record_signal

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};

/// What the handler writes a fatal signal into (the crash journal). Every method is called
/// from the signal handler: plain stores, reads and `write(2)` only.
pub trait SignalJournal: Sync {
    /// Records fatal signal `number`, attributed to library `library` (an index of the
    /// library table), whose code was running (`in_library_code`) or on the stack.
    fn record_signal(&self, number: i32, library: usize, in_library_code: bool, address: u64);
    /// Whether the journal is this process's (not a parent's inherited mapping).
    fn owned_by_this_process(&self) -> bool;
    /// Names on stderr every engine this process is calling (the process is aborting).
    fn name_engines_in_flight(&self);
}

/// The journal the handler records into (set once, by [`install`]).
static JOURNAL: OnceLock<&'static dyn SignalJournal> = OnceLock::new();

/// How much of the interrupted stack is scanned for return addresses.
pub const STACK_SCAN_BYTES: usize = 64 * 1024;
/// Executable ranges recorded (libraries × their text mappings).
const RANGES: usize = 128;
const SIGNALS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGSYS,
];

struct Range {
    start: AtomicUsize,
    end: AtomicUsize,
    library: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Range = Range {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    library: AtomicUsize::new(0),
};

static TABLE: [Range; RANGES] = [EMPTY; RANGES];
/// Entries of [`TABLE`] published (written before the count is raised).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Serializes writers of [`TABLE`] (never taken by the handler).
static WRITERS: Mutex<()> = Mutex::new(());
/// The first fatal signal is recorded; one raised while handling it is not.
static HANDLING: AtomicBool = AtomicBool::new(false);

/// The actions installed before ours, one per [`SIGNALS`] entry, written once before ours are
/// installed and only read afterwards.
struct Previous(UnsafeCell<[MaybeUninit<libc::sigaction>; SIGNALS.len()]>);
// SAFETY: written by `install` (under `Once`) before any handler of ours can run; read-only
// afterwards.
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(UnsafeCell::new([MaybeUninit::uninit(); SIGNALS.len()]));
static INSTALL: Once = Once::new();

/// Records the executable mappings of the library opened from `copy_path` as library
/// `library` of the crash journal's table. Reads `/proc/self/maps` (Linux; elsewhere nothing is
/// recorded). Returns how many ranges were recorded.
pub fn watch_library(copy_path: &Path, library: usize) -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let Some(wanted) = copy_path.to_str() else {
        return 0;
    };
    let _writer = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    let mut recorded = 0;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(span), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = fields.nth(3).unwrap_or("");
        if path != wanted || perms.as_bytes().get(2) != Some(&b'x') {
            continue;
        }
        let Some((start, end)) = span.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let index = COUNT.load(Ordering::Acquire);
        if index >= RANGES {
            tracing::warn!(
                "{RANGES} executable ranges are watched already; a crash in a later library is not attributed to it"
            );
            break;
        }
        TABLE[index].start.store(start, Ordering::Relaxed);
        TABLE[index].end.store(end, Ordering::Relaxed);
        TABLE[index].library.store(library, Ordering::Relaxed);
        COUNT.store(index + 1, Ordering::Release);
        recorded += 1;
    }
    recorded
}

/// The library whose code holds `address`. Async-signal-safe.
fn library_of(address: usize) -> Option<usize> {
    let count = COUNT.load(Ordering::Acquire).min(RANGES);
    TABLE[..count].iter().find_map(|range| {
        let start = range.start.load(Ordering::Relaxed);
        let end = range.end.load(Ordering::Relaxed);
        (start <= address && address < end).then(|| range.library.load(Ordering::Relaxed))
    })
}

/// The interrupted thread's instruction pointer, stack pointer and (where the architecture has
/// one) link register.
///
/// # Safety
/// `context` is the `ucontext_t` the kernel passed to an `SA_SIGINFO` handler.
unsafe fn registers(context: *mut libc::c_void) -> (usize, usize, usize) {
    if context.is_null() {
        return (0, 0, 0);
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        // SAFETY: the caller's contract.
        let context = unsafe { &*context.cast::<libc::ucontext_t>() };
        let gregs = &context.uc_mcontext.gregs;
        (
            gregs[libc::REG_RIP as usize] as usize,
            gregs[libc::REG_RSP as usize] as usize,
            0,
        )
    }
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    {
        // SAFETY: the caller's contract.
        let context = unsafe { &*context.cast::<libc::ucontext_t>() };
        let m = &context.uc_mcontext;
        (m.pc as usize, m.sp as usize, m.regs[30] as usize)
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        (0, 0, 0)
    }
}

/// The first word of the stack from `sp` up that points into a watched library's code, read
/// through `process_vm_readv(2)` (an unreadable page ends the scan). Async-signal-safe.
fn scan_stack(sp: usize) -> Option<usize> {
    const WORDS: usize = 64;
    let word = std::mem::size_of::<usize>();
    let mut buffer = [0usize; WORDS];
    let mut at = sp & !(word - 1);
    let end = at.saturating_add(STACK_SCAN_BYTES);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    while at < end {
        let local = libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: WORDS * word,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: WORDS * word,
        };
        // SAFETY: reads this process's memory into a local buffer of the given size; a bad
        // remote address is an error return, not a fault.
        let read = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if read <= 0 {
            return None;
        }
        let words = usize::try_from(read).unwrap_or(0) / word;
        if let Some(library) = buffer[..words].iter().find_map(|&w| library_of(w)) {
            return Some(library);
        }
        at += words * word;
        if words < WORDS {
            return None;
        }
    }
    None
}

extern "C" fn on_fatal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    if let Some(journal) = JOURNAL.get() {
        if !HANDLING.swap(true, Ordering::AcqRel) {
            // SAFETY: the kernel's ucontext for this SA_SIGINFO handler.
            let (ip, sp, lr) = unsafe { registers(context) };
            let attributed = library_of(ip).map(|library| (library, true)).or_else(|| {
                library_of(lr)
                    .or_else(|| (sp != 0).then(|| scan_stack(sp)).flatten())
                    .map(|library| (library, false))
            });
            if let Some((library, in_code)) = attributed {
                let address = if info.is_null() {
                    0
                } else {
                    // SAFETY: the kernel's siginfo for this handler.
                    unsafe { (*info).si_addr() as u64 }
                };
                journal.record_signal(signal, library, in_code, address);
            }
        }
        if signal == libc::SIGABRT && journal.owned_by_this_process() {
            journal.name_engines_in_flight();
        }
    }
    chain(signal, info, context);
}

/// Hands the signal to the action installed before ours, or dies of it by default.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let Some(index) = SIGNALS.iter().position(|&s| s == signal) else {
        return;
    };
    // SAFETY: written before our handler was installed, read-only since.
    let previous = unsafe { (*PREVIOUS.0.get())[index].assume_init_ref() };
    let handler = previous.sa_sigaction;
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the previous handler, called as it was installed to be.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(signal, info, context);
        } else {
            // SAFETY: as above.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(signal);
        }
        return;
    }
    // SAFETY: restore the default action and raise: the signal is blocked while this handler
    // runs, so the process dies of it as soon as the handler returns (a fault would also
    // recur on return).
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// Installs the handler for every fatal signal, once per process, recording into `journal`
/// and keeping the actions installed before (Rust's stack-overflow handler) to chain to.
pub fn install(journal: &'static dyn SignalJournal) {
    let _ = JOURNAL.set(journal);
    INSTALL.call_once(|| {
        for (index, &signal) in SIGNALS.iter().enumerate() {
            // SAFETY: reading the current action into our storage, then installing a handler
            // that does only async-signal-safe work. Nothing else writes PREVIOUS.
            unsafe {
                let slot = (*PREVIOUS.0.get())[index].as_mut_ptr();
                if libc::sigaction(signal, std::ptr::null(), slot) != 0 {
                    let mut default: libc::sigaction = std::mem::zeroed();
                    default.sa_sigaction = libc::SIG_DFL;
                    slot.write(default);
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_fatal
                    as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                    as usize;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_inside_a_watched_library_is_found_on_a_stack_read_safely() {
        // The test binary's own code stands in for a library: its executable mapping.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(watch_library(&exe, 5) >= 1);
        let here = an_address_inside_a_watched_library_is_found_on_a_stack_read_safely as *const ()
            as usize;
        assert_eq!(library_of(here), Some(5));
        let on_stack = std::hint::black_box([0usize, 1, here, 3]);
        assert_eq!(scan_stack(on_stack.as_ptr() as usize), Some(5));
        // An unmapped stack pointer ends the scan without a fault.
        assert_eq!(scan_stack(8), None);
    }
}
