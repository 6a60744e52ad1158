//! Bounded engine calls handed off: the call runs on a pooled worker thread and the caller waits
//! at most until the call's deadline. This is the path of every call made on a thread that is
//! not a session worker (and of the factory, `dispose` and rollbacks); on a session worker a
//! guarded call runs inline instead, bounded by one watchdog (see
//! [`crate::engines::session_worker`]). When the deadline passes, the call's abort signal fires and the caller gets
//! [`Overrun::TimedOut`] at once — even if the engine ignores the signal and never returns. The stuck
//! worker is abandoned (it owns everything the call borrows, so nothing it touches can be
//! freed under it) and a new worker takes its place, so other sessions keep being served and a
//! hung plugin thread never blocks shutdown (workers are detached).
//!
//! A deadline is a window that can be re-armed while work makes progress (the runtime's own
//! compaction does), never past a ceiling of ten windows from the start (docs/CONTRACT.md §9.1).
//!
//! Cost: a call pays a hand-off to a worker and back. Workers and callers spin briefly
//! (50 µs) before parking, so a burst of calls costs two cache-line hand-offs each (well under
//! a microsecond) and an isolated call two thread wake-ups (tens of microseconds on a small VM,
//! negligible beside a model turn). Figures: `docs/BENCHMARKS.md`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use pincer_plugin_abi::latest::AbortController;

pub use super::deadline::{Deadline, Overrun};

thread_local! {
    static CURRENT_DEADLINE: RefCell<Option<Arc<Deadline>>> = const { RefCell::new(None) };
}

/// The deadline of the bounded call running on this thread, if any. The host services use it
/// to re-arm the window while the runtime's compaction makes progress.
pub fn current_deadline() -> Option<Arc<Deadline>> {
    CURRENT_DEADLINE.with(|d| d.borrow().clone())
}

/// Re-arms the window of the bounded call running on this thread — handed off or inline on a
/// session worker — if there is one (never past [`MAX_WINDOWS`](super::deadline::MAX_WINDOWS) windows from its start).
pub fn refresh_current_deadline() {
    if let Some(deadline) = current_deadline() {
        deadline.refresh();
    } else {
        crate::engines::session_worker::refresh_inline_deadline();
    }
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long an idle worker spins for the next call before it parks, and how long a caller
/// spins for its result before it parks. A hot loop of calls then costs two cache-line
/// hand-offs instead of two futex sleeps; an isolated call pays at most this much CPU.
const SPIN: Duration = Duration::from_micros(50);

/// How long a parked worker waits for work before its thread exits.
const IDLE_KEEP: Duration = Duration::from_secs(30);

const IDLE_SPINNING: u8 = 0;
const IDLE_PARKED: u8 = 1;
const BUSY: u8 = 2;
const EXITED: u8 = 3;

/// One worker thread and its hand-off slot.
struct Worker {
    state: AtomicU8,
    job: Mutex<Option<Job>>,
    thread: OnceLock<Thread>,
}

fn workers() -> &'static Mutex<Vec<Arc<Worker>>> {
    static WORKERS: Mutex<Vec<Arc<Worker>>> = Mutex::new(Vec::new());
    &WORKERS
}

/// Spins until `ready()` or `SPIN` passes; true if ready.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return ready();
        }
    }
}

fn worker_loop(me: Arc<Worker>) {
    loop {
        let job = me.job.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(job) = job {
            job();
            me.state.store(IDLE_SPINNING, Ordering::Release);
            // Stay hot for a moment: the next call of a burst is picked up without a wake-up.
            spin_until(|| me.state.load(Ordering::Acquire) == BUSY);
        }
        if me.state.load(Ordering::Acquire) == BUSY {
            // A submitter claimed us; its job is in the slot (or about to be).
            spin_until(|| me.job.lock().map(|j| j.is_some()).unwrap_or(true));
            continue;
        }
        if me
            .state
            .compare_exchange(
                IDLE_SPINNING,
                IDLE_PARKED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            continue; // claimed while we were about to park
        }
        let parked_at = Instant::now();
        while me.state.load(Ordering::Acquire) == IDLE_PARKED {
            if parked_at.elapsed() >= IDLE_KEEP {
                if me
                    .state
                    .compare_exchange(IDLE_PARKED, EXITED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    workers()
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .retain(|w| !Arc::ptr_eq(w, &me));
                    return;
                }
                break;
            }
            std::thread::park_timeout(IDLE_KEEP);
        }
    }
}

/// Hands `job` to an idle worker (a spinning one first, then a parked one), or to a new one.
fn submit(job: Job) {
    let mut job = Some(job);
    {
        let pool = workers().lock().unwrap_or_else(|e| e.into_inner());
        for wanted in [IDLE_SPINNING, IDLE_PARKED] {
            for worker in pool.iter() {
                if worker
                    .state
                    .compare_exchange(wanted, BUSY, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    *worker.job.lock().unwrap_or_else(|e| e.into_inner()) = job.take();
                    if wanted == IDLE_PARKED {
                        if let Some(thread) = worker.thread.get() {
                            thread.unpark();
                        }
                    }
                    return;
                }
            }
        }
    }
    let worker = Arc::new(Worker {
        state: AtomicU8::new(BUSY),
        job: Mutex::new(job.take()),
        thread: OnceLock::new(),
    });
    let runner = Arc::clone(&worker);
    match std::thread::Builder::new()
        .name("pincer-engine-call".to_owned())
        .spawn(move || worker_loop(runner))
    {
        Ok(handle) => {
            let _ = worker.thread.set(handle.thread().clone());
            workers()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(worker);
        }
        Err(err) => {
            // No thread: run the job on this one rather than lose it (unbounded, logged).
            tracing::error!(error = %err, "cannot spawn an engine-call worker; calling inline");
            if let Some(job) = worker.job.lock().unwrap_or_else(|e| e.into_inner()).take() {
                job();
            }
        }
    }
}

type Outcome<T> = std::thread::Result<T>;

/// Where a worker leaves a call's result (or the host-side panic it raised) for its caller.
struct Slot<T> {
    done: AtomicBool,
    value: Mutex<Option<Outcome<T>>>,
    caller: Thread,
}

/// How often a waiting caller looks at its abort signal.
const ABORT_POLL: Duration = Duration::from_millis(10);

/// Runs `call` on a worker and waits for it until `deadline`. On timeout it fires `abort`
/// and returns at once, without waiting for the worker; if `abort` fires while it waits (the
/// caller gave up), it returns [`Overrun::Aborted`].
///
/// A panic raised by `call` itself (host code: the engine's own panics are caught inside the
/// plugin) is resumed on the caller's thread, and the worker stays usable.
///
/// # Errors
/// [`Overrun`] when the call did not finish in time or was aborted.
pub fn run<T: Send + 'static>(
    deadline: Arc<Deadline>,
    abort: Arc<AbortController>,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Overrun> {
    run_via(submit, deadline, abort, call)
}

/// [`run`], but on a thread of its own that ends with the call, instead of a pooled worker:
/// the path of every call into a library that is closed after a reload (`unloadOnReload`),
/// so that whatever thread-exit work its code left on the thread (thread-local destructors,
/// `std`'s exit hook) runs while the library is still mapped — never on a host thread that
/// outlives the library. `keep` (the library's handle) is dropped only once that thread has
/// exited: here when the call returned in time, else by a helper thread that waits for it.
/// Costs a thread spawn per call (tens of microseconds).
///
/// # Errors
/// As [`run`].
pub fn run_on_own_thread<T: Send + 'static, K: Send + 'static>(
    deadline: Arc<Deadline>,
    abort: Arc<AbortController>,
    keep: K,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Overrun> {
    let spawned: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::new(Mutex::new(None));
    let into = Arc::clone(&spawned);
    // A host panic raised by `call` is resumed only after the thread was joined.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_via(
            move |job| *into.lock().unwrap_or_else(|e| e.into_inner()) = spawn_once(job),
            deadline,
            abort,
            call,
        )
    }));
    let handle = spawned.lock().unwrap_or_else(|e| e.into_inner()).take();
    let finished = !matches!(result, Ok(Err(_)));
    match handle {
        // `join` returns once the thread has exited, its exit work done.
        Some(handle) if finished => {
            let _ = handle.join();
            drop(keep);
        }
        Some(handle) => {
            // If no thread can wait for the abandoned call, the closure is dropped unrun and
            // `keep` with it, unreleased: what the call runs is never let go of.
            let keep = std::mem::ManuallyDrop::new(keep);
            let _ = std::thread::Builder::new()
                .name("pincer-engine-call-join".to_owned())
                .spawn(move || {
                    let _ = handle.join();
                    drop(std::mem::ManuallyDrop::into_inner(keep));
                });
        }
        // The call ran on this thread (no thread could start).
        None => drop(keep),
    }
    result.unwrap_or_else(|payload| std::panic::resume_unwind(payload))
}

/// Runs `job` on a new thread that ends with it (on the caller's thread if none can start).
fn spawn_once(job: Job) -> Option<std::thread::JoinHandle<()>> {
    let cell = Arc::new(Mutex::new(Some(job)));
    let on_thread = Arc::clone(&cell);
    let spawned = std::thread::Builder::new()
        .name("pincer-engine-call-once".to_owned())
        .spawn(move || {
            let job = on_thread.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(job) = job {
                job();
            }
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(err) => {
            tracing::error!(error = %err, "cannot spawn an engine-call thread; calling inline");
            let job = cell.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(job) = job {
                job();
            }
            None
        }
    }
}

fn run_via<T: Send + 'static>(
    submit: impl FnOnce(Job),
    deadline: Arc<Deadline>,
    abort: Arc<AbortController>,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Overrun> {
    let slot = Arc::new(Slot {
        done: AtomicBool::new(false),
        value: Mutex::new(None),
        caller: std::thread::current(),
    });
    let job_slot = Arc::clone(&slot);
    let job_deadline = Arc::clone(&deadline);
    submit(Box::new(move || {
        CURRENT_DEADLINE.with(|d| *d.borrow_mut() = Some(job_deadline));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
        CURRENT_DEADLINE.with(|d| *d.borrow_mut() = None);
        // The caller may have given up; then the result is dropped with the slot.
        *job_slot.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        job_slot.done.store(true, Ordering::Release);
        job_slot.caller.unpark();
    }));
    let started = Instant::now();
    let take = || slot.value.lock().unwrap_or_else(|e| e.into_inner()).take();
    let finish = |outcome: Outcome<T>| match outcome {
        Ok(value) => Ok(value),
        Err(payload) => std::panic::resume_unwind(payload),
    };
    if spin_until(|| slot.done.load(Ordering::Acquire)) {
        if let Some(outcome) = take() {
            return finish(outcome);
        }
    }
    loop {
        if slot.done.load(Ordering::Acquire) {
            if let Some(outcome) = take() {
                return finish(outcome);
            }
        }
        if abort.fired() {
            return Err(Overrun::Aborted);
        }
        let now = Instant::now();
        // Read the deadline each time: the window may have been re-armed meanwhile.
        let until = deadline.until();
        if now >= until {
            abort.abort();
            return Err(Overrun::TimedOut {
                waited: started.elapsed(),
            });
        }
        std::thread::park_timeout((until - now).min(ABORT_POLL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_never_returns_is_abandoned_at_its_deadline() {
        let abort = Arc::new(AbortController::new());
        let returned = Arc::new(AtomicBool::new(false));
        let call_returned = Arc::clone(&returned);
        let result = run(
            Deadline::new(Duration::from_millis(100)),
            Arc::clone(&abort),
            move || {
                std::thread::sleep(Duration::from_secs(3600));
                call_returned.store(true, Ordering::SeqCst);
            },
        );
        assert!(
            matches!(result, Err(Overrun::TimedOut { .. })),
            "{result:?}"
        );
        assert!(
            abort.fired() && abort.signal().is_aborted(),
            "the signal fired"
        );
        assert!(
            !returned.load(Ordering::SeqCst),
            "the caller got its answer while the call still runs: the worker was abandoned"
        );
        // Other calls are still served.
        let ok = run(
            Deadline::new(Duration::from_secs(5)),
            Arc::new(AbortController::new()),
            || 42,
        );
        assert_eq!(ok, Ok(42));
    }

    #[test]
    fn a_caller_abort_ends_the_wait_and_a_host_panic_reaches_the_caller() {
        let abort = Arc::new(AbortController::new());
        let trigger = Arc::clone(&abort);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            trigger.abort();
        });
        let result = run(Deadline::new(Duration::from_secs(60)), abort, || {
            std::thread::sleep(Duration::from_secs(3600));
        });
        assert_eq!(result, Err(Overrun::Aborted));
        let panicked = std::panic::catch_unwind(|| {
            run(
                Deadline::new(Duration::from_secs(60)),
                Arc::new(AbortController::new()),
                || {
                    let v: Vec<u8> = Vec::new();
                    v[3]
                },
            )
        });
        assert!(panicked.is_err(), "the host bug surfaces where it belongs");
        // The worker that caught it keeps working.
        let ok = run(
            Deadline::new(Duration::from_secs(5)),
            Arc::new(AbortController::new()),
            || 7,
        );
        assert_eq!(ok, Ok(7));
    }

    #[test]
    fn a_call_on_its_own_thread_ends_with_its_thread_and_is_bounded_the_same() {
        let caller = std::thread::current().id();
        let keep = Arc::new(());
        let (id, name) = run_on_own_thread(
            Deadline::new(Duration::from_secs(5)),
            Arc::new(AbortController::new()),
            Arc::clone(&keep),
            || {
                let me = std::thread::current();
                (me.id(), me.name().map(str::to_owned))
            },
        )
        .unwrap();
        assert_ne!(id, caller);
        assert_eq!(name.as_deref(), Some("pincer-engine-call-once"));
        assert_eq!(
            Arc::strong_count(&keep),
            1,
            "released once the thread was joined"
        );
        let result = run_on_own_thread(
            Deadline::new(Duration::from_millis(50)),
            Arc::new(AbortController::new()),
            Arc::clone(&keep),
            move || std::thread::sleep(Duration::from_millis(300)),
        );
        assert!(
            matches!(result, Err(Overrun::TimedOut { .. })),
            "{result:?}"
        );
        assert_eq!(
            Arc::strong_count(&keep),
            2,
            "held while the abandoned call runs"
        );
        let start = Instant::now();
        while Arc::strong_count(&keep) > 1 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "released after it ended"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let held = Arc::clone(&keep);
        let panicked = std::panic::catch_unwind(move || {
            run_on_own_thread(
                Deadline::new(Duration::from_secs(5)),
                Arc::new(AbortController::new()),
                held,
                || -> u8 { panic!("a host bug") },
            )
        });
        assert!(panicked.is_err(), "the host bug surfaces where it belongs");
        assert_eq!(Arc::strong_count(&keep), 1, "released after the join");
    }
}
