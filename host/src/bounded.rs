//! Bounded engine calls: every call runs on a worker thread and the caller waits at most until
//! the call's deadline. When it passes, the call's abort signal fires and the caller gets
//! [`TimedOut`] at once — even if the engine ignores the signal and never returns. The stuck
//! worker is abandoned (it owns everything the call borrows, so nothing it touches can be
//! freed under it) and a new worker takes its place, so other sessions keep being served and a
//! hung plugin thread never blocks shutdown (workers are detached).
//!
//! A deadline is a window that can be re-armed while work makes progress (the runtime's own
//! compaction does), never past a ceiling of ten windows from the start (reference §9.1).
//!
//! Cost: a call pays one hand-off to a parked worker and back (a few microseconds; see
//! `docs/BENCHMARKS.md`), negligible beside a model turn, and nothing else.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pincer_plugin_api::abi::v1::AbortSignal;

/// The most windows a deadline can be stretched to.
pub const MAX_WINDOWS: u32 = 10;

/// A call's deadline: a window from the start, re-armable up to [`MAX_WINDOWS`] windows.
#[derive(Debug)]
pub struct Deadline {
    start: Instant,
    window: Duration,
    until: Mutex<Instant>,
}

impl Deadline {
    /// A deadline `window` from now.
    pub fn new(window: Duration) -> Arc<Self> {
        let start = Instant::now();
        Arc::new(Deadline {
            start,
            window,
            until: Mutex::new(start + window),
        })
    }

    /// Re-arms the window from now, never past the ceiling.
    pub fn refresh(&self) {
        let ceiling = self.start + self.window * MAX_WINDOWS;
        let next = (Instant::now() + self.window).min(ceiling);
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if next > *until {
            *until = next;
        }
    }

    /// When the call must be over.
    pub fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }
}

thread_local! {
    static CURRENT_DEADLINE: RefCell<Option<Arc<Deadline>>> = const { RefCell::new(None) };
}

/// The deadline of the bounded call running on this thread, if any. The host services use it
/// to re-arm the window while the runtime's compaction makes progress.
pub fn current_deadline() -> Option<Arc<Deadline>> {
    CURRENT_DEADLINE.with(|d| d.borrow().clone())
}

/// A call ran past its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// How long the caller waited.
    pub waited: Duration,
}

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    idle: AtomicUsize,
    spawned: AtomicUsize,
}

fn pool() -> &'static Arc<Pool> {
    static POOL: OnceLock<Arc<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        Arc::new(Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            idle: AtomicUsize::new(0),
            spawned: AtomicUsize::new(0),
        })
    })
}

/// Workers that stay parked waiting for calls; more are spawned on demand.
const IDLE_KEEP: Duration = Duration::from_secs(30);

fn worker(pool: Arc<Pool>) {
    loop {
        let job = {
            let mut queue = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = queue.pop_front() {
                    break Some(job);
                }
                pool.idle.fetch_add(1, Ordering::AcqRel);
                let (q, timeout) = pool
                    .ready
                    .wait_timeout(queue, IDLE_KEEP)
                    .unwrap_or_else(|e| e.into_inner());
                queue = q;
                pool.idle.fetch_sub(1, Ordering::AcqRel);
                if timeout.timed_out() && queue.is_empty() {
                    break None;
                }
            }
        };
        match job {
            Some(job) => job(),
            None => {
                pool.spawned.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        }
    }
}

fn submit(job: Job) {
    let pool = pool();
    let needs_worker = {
        let mut queue = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.push_back(job);
        pool.idle.load(Ordering::Acquire) < queue.len()
    };
    if needs_worker {
        pool.spawned.fetch_add(1, Ordering::AcqRel);
        let p = Arc::clone(pool);
        let spawned = std::thread::Builder::new()
            .name("pincer-engine-call".to_owned())
            .spawn(move || worker(p));
        if spawned.is_err() {
            pool.spawned.fetch_sub(1, Ordering::AcqRel);
        }
    }
    pool.ready.notify_one();
}

/// Runs `call` on a worker and waits for it until `deadline`; on timeout fires `abort` and
/// returns [`TimedOut`] without waiting for the worker.
///
/// # Errors
/// [`TimedOut`] when the deadline passes first.
pub fn run<T: Send + 'static>(
    deadline: Arc<Deadline>,
    abort: Arc<AbortSignal>,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TimedOut> {
    let (tx, rx) = mpsc::sync_channel::<T>(1);
    let job_deadline = Arc::clone(&deadline);
    submit(Box::new(move || {
        CURRENT_DEADLINE.with(|d| *d.borrow_mut() = Some(job_deadline));
        let result = call();
        CURRENT_DEADLINE.with(|d| *d.borrow_mut() = None);
        // The caller may have given up; then the result is dropped here, on the worker.
        let _ = tx.send(result);
    }));
    let started = Instant::now();
    loop {
        let now = Instant::now();
        let until = deadline.until();
        if now >= until {
            abort.abort();
            return Err(TimedOut {
                waited: started.elapsed(),
            });
        }
        match rx.recv_timeout(until - now) {
            Ok(value) => return Ok(value),
            // The window may have been re-armed meanwhile: look again.
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The worker died without sending: only possible if `call` unwound on the host
                // side, which the adapter prevents. Treat as a timeout-equivalent failure.
                abort.abort();
                return Err(TimedOut {
                    waited: started.elapsed(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_never_returns_is_abandoned_on_time() {
        let abort = Arc::new(AbortSignal::new());
        let started = Instant::now();
        let result = run(
            Deadline::new(Duration::from_millis(100)),
            Arc::clone(&abort),
            || {
                std::thread::sleep(Duration::from_secs(3600));
            },
        );
        assert!(result.is_err());
        assert!(abort.is_aborted(), "the signal fired");
        assert!(started.elapsed() < Duration::from_secs(5));
        // Other calls are still served.
        let ok = run(
            Deadline::new(Duration::from_secs(5)),
            Arc::new(AbortSignal::new()),
            || 42,
        );
        assert_eq!(ok, Ok(42));
    }

    #[test]
    fn refresh_extends_but_never_past_ten_windows() {
        let d = Deadline::new(Duration::from_millis(10));
        let first = d.until();
        std::thread::sleep(Duration::from_millis(5));
        d.refresh();
        assert!(d.until() > first);
        let d = Deadline::new(Duration::from_millis(1));
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(1));
            d.refresh();
        }
        assert!(d.until() <= d.start + Duration::from_millis(10));
    }
}
