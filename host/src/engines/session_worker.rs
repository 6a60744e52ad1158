//! Session workers: engine calls made inline, bounded by one watchdog.
//!
//! A [`SessionWorker`] is a thread that runs one session's work — a turn, or any closure an
//! embedder submits with [`SessionWorker::submit`] — one job at a time, in order. The submitter
//! waits for the job's [`WorkHandle`]: blocking ([`WorkHandle::wait`]) or from async code, since
//! the handle is a [`Future`] that never blocks a runtime thread.
//!
//! On such a thread a guarded engine call does not hand off to a pooled worker (see
//! [`crate::engines::bounded`]): it runs **inline**, after registering itself in the worker's
//! call slot — a sequence number, a pointer to a record on the caller's stack (method, window,
//! the call's abort controller) and two atomic stores, no clock read and no allocation — and
//! clears the slot when it returns (one compare-and-swap).
//!
//! One **watchdog** thread scans the slots of every live session worker each [`TICK`]. It
//! starts a call's clock when it first sees it (so a deadline can be late by at most one tick,
//! never early), and:
//! - at the deadline it fires the call's abort signal and marks the call timed out: an engine
//!   that honours the signal returns, and the guard reports the timeout as the hand-off does;
//! - when the call's abort fired (at the deadline, or by the caller) and the call still runs
//!   [`GRACE`] later, the worker is **stuck**: the watchdog asks the call's [`OnStuck`] for the
//!   error (the guard applies its quarantine rules there), fails the job with
//!   [`WorkError::Stuck`] so the submitter gets its answer now, and abandons the thread — it
//!   owns everything the call borrows, so nothing is freed under it. If the engine ever
//!   returns, the thread parks for good instead of returning into its job: the job is over
//!   for its submitter, and whatever state the job was using (a session, see
//!   `harness::runner`) may already belong to the session's next job, on a fresh worker.
//!
//! A call that is not on a session worker (or is nested inside another inline call) keeps the
//! hand-off. The watchdog parks while no session worker exists; while some do, it wakes every
//! tick (a few microseconds of CPU, 100 times a second).

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use pincer_plugin_abi::latest::AbortController;

use crate::engines::deadline::{Overrun, MAX_WINDOW, MAX_WINDOWS};
use crate::engines::error::EngineCallError;
use crate::types::Method;

/// How often the watchdog looks at the session workers' calls.
pub const TICK: Duration = Duration::from_millis(10);

/// How long a call whose abort fired may take to return before its worker is abandoned.
pub const GRACE: Duration = Duration::from_millis(100);

/// How long a session worker that ran out of work keeps looking for the next job before it
/// sleeps on its condition variable, and how long [`WorkHandle::spin`] looks for a result
/// before its caller parks: a job or a result that arrives within it costs no thread wake-up
/// (a futex wake and, on a virtual machine, an idle core's exit from halt — tens of
/// microseconds). Bounded, and yielding the core between looks, so an idle session costs
/// nothing after it.
pub const SPIN: Duration = Duration::from_micros(50);

/// Looks at `ready` until it says so or `limit` has passed, yielding the core every few
/// looks (a thread waiting for a core gets it); whether `ready` said so.
pub fn spin_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut looks = 0u32;
    loop {
        if ready() {
            return true;
        }
        looks = looks.wrapping_add(1);
        if looks.is_multiple_of(16) {
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Why submitted work produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkError {
    /// An engine call ran past its deadline (or its caller's abort) and ignored the abort
    /// signal: the worker was abandoned and the work's result will never come.
    #[error("context engine \"{engine_id}\" {operation} failed: {error}")]
    Stuck {
        /// The engine whose call is stuck.
        engine_id: String,
        /// The operation.
        operation: Method,
        /// `TimedOut` (or `Aborted` when the caller's abort fired first).
        error: EngineCallError,
    },
    /// No worker thread could be started.
    #[error("cannot start a session worker: {0}")]
    Unavailable(String),
}

impl WorkError {
    /// A stable snake_case code for machines (`engine_call_stuck`,
    /// `session_worker_unavailable`).
    pub const fn code(&self) -> &'static str {
        match self {
            WorkError::Stuck { .. } => "engine_call_stuck",
            WorkError::Unavailable(_) => "session_worker_unavailable",
        }
    }
}

/// What the watchdog asks of a call whose worker is stuck: the error the submitter gets. The
/// guard applies its quarantine rules here (it runs on the watchdog thread).
pub trait OnStuck: Sync {
    /// The error for `method`'s `overrun`; `primary`: the call was the configured engine's,
    /// not its fallback's.
    fn on_stuck(&self, method: Method, primary: bool, overrun: &Overrun) -> WorkError;
}

// ---------------------------------------------------------------------------------------------
// The call slot and inline calls
// ---------------------------------------------------------------------------------------------

/// A call is registered in its worker's slot.
const ACTIVE: u64 = 1;
/// The watchdog is reading the call's record: the call may not return from its frame yet.
const CLAIMED: u64 = 2;

/// One inline call, on its caller's stack, reachable by the watchdog while the slot says so.
struct InlineCall<'a> {
    method: Method,
    primary: bool,
    window: Duration,
    abort: &'a AbortController,
    on_stuck: &'a dyn OnStuck,
    /// 0 while in time; else the milliseconds waited + 1 when the deadline fired.
    timed_out: AtomicU64,
    /// Set by [`refresh_inline_deadline`]: the watchdog re-arms the window.
    refresh: AtomicBool,
}

/// A worker's call slot: `state` is `seq << 2 | ACTIVE | CLAIMED`.
struct CallSlot {
    state: AtomicU64,
    call: AtomicPtr<InlineCall<'static>>,
}

/// One session worker thread, as the watchdog and its session see it.
struct Worker {
    slot: CallSlot,
    /// The current job's failure hook (set per job, not per call).
    job: Mutex<Option<Arc<dyn Fail>>>,
    /// Declared stuck: the session no longer uses it; if its engine call ever returns, it parks
    /// for good (it never returns into its job).
    abandoned: AtomicBool,
    session: Arc<Session>,
}

struct Local {
    worker: Cell<*const Worker>,
    call: Cell<*const InlineCall<'static>>,
    seq: Cell<u64>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            worker: Cell::new(std::ptr::null()),
            call: Cell::new(std::ptr::null()),
            seq: Cell::new(0),
        }
    };
}

#[cfg(test)]
/// Whether this thread is a session worker.
pub fn on_session_worker() -> bool {
    LOCAL.with(|l| !l.worker.get().is_null())
}

/// Ends an inline call, also on unwind: waits out a watchdog claim, then clears the slot; on
/// an abandoned worker, parks for good.
struct EndCall<'a> {
    worker: &'a Worker,
    local: &'a Local,
    seq: u64,
}

impl Drop for EndCall<'_> {
    fn drop(&mut self) {
        let active = self.seq << 2 | ACTIVE;
        while self
            .worker
            .slot
            .state
            .compare_exchange_weak(active, self.seq << 2, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            // Claimed: the watchdog is reading the record for a few nanoseconds.
            std::hint::spin_loop();
        }
        self.local.call.set(std::ptr::null());
        if self.worker.abandoned.load(Ordering::Acquire) {
            // Declared stuck while the engine ran: the work's submitter has its error, and the
            // session's state may already be in use by its next work on a fresh worker. This
            // thread must never go back into the work it was running — not by returning, not
            // by unwinding.
            park_for_good();
        }
    }
}

/// Runs `call` inline when this thread is a session worker not already inside an inline call;
/// else gives `call` back (`Err`) for the hand-off.
///
/// `Ok(Err(TimedOut))` when the watchdog fired the deadline before the call returned, whatever
/// the engine answered (a late answer is a timeout, as with the hand-off).
///
/// # Errors
/// `Err(call)` when the call cannot run inline.
pub fn run_inline<T, F: FnOnce() -> T>(
    method: Method,
    primary: bool,
    window: Duration,
    abort: &AbortController,
    on_stuck: &dyn OnStuck,
    call: F,
) -> Result<Result<T, Overrun>, F> {
    LOCAL.with(|local| {
        let worker = local.worker.get();
        if worker.is_null() || !local.call.get().is_null() {
            return Err(call);
        }
        // SAFETY: `worker` is set by `worker_loop` on this thread to a `Worker` that the loop's
        // own `Arc` keeps alive until after it is cleared.
        let worker = unsafe { &*worker };
        let record = InlineCall {
            method,
            primary,
            window: window.min(MAX_WINDOW),
            abort,
            on_stuck,
            timed_out: AtomicU64::new(0),
            refresh: AtomicBool::new(false),
        };
        let seq = local.seq.get() + 1;
        local.seq.set(seq);
        let ptr = std::ptr::from_ref(&record).cast::<InlineCall<'static>>();
        worker.slot.call.store(ptr.cast_mut(), Ordering::Relaxed);
        worker
            .slot
            .state
            .store(seq << 2 | ACTIVE, Ordering::Release);
        local.call.set(ptr);
        let end = EndCall { worker, local, seq };
        let value = call();
        // After this the watchdog cannot reach `record` any more (and an abandoned worker
        // parks here for good).
        drop(end);
        match record.timed_out.load(Ordering::Acquire) {
            0 => Ok(Ok(value)),
            ms => Ok(Err(Overrun::TimedOut {
                waited: Duration::from_millis(ms - 1),
            })),
        }
    })
}

/// Parks the calling thread for the rest of the process's life.
fn park_for_good() -> ! {
    loop {
        std::thread::park();
    }
}

/// Re-arms the window of the inline call running on this thread, if any (never past
/// [`MAX_WINDOWS`] windows from its start); whether there was one.
pub fn refresh_inline_deadline() -> bool {
    LOCAL.with(|local| {
        let call = local.call.get();
        if call.is_null() {
            return false;
        }
        // SAFETY: `call` points at the record of the inline call this thread is inside of
        // (cleared by `EndCall` before the record goes away).
        unsafe { &*call }.refresh.store(true, Ordering::Release);
        true
    })
}

// ---------------------------------------------------------------------------------------------
// The watchdog
// ---------------------------------------------------------------------------------------------

fn registry() -> &'static Mutex<Vec<Arc<Worker>>> {
    static WORKERS: Mutex<Vec<Arc<Worker>>> = Mutex::new(Vec::new());
    &WORKERS
}

/// The watchdog thread, started on first use; `Err` when it could not be (then no session
/// worker starts either: an inline call must never run unwatched).
fn watchdog() -> Result<&'static Thread, &'static str> {
    static WATCHDOG: OnceLock<Result<Thread, String>> = OnceLock::new();
    WATCHDOG
        .get_or_init(|| {
            std::thread::Builder::new()
                .name("pincer-watchdog".to_owned())
                .spawn(watchdog_loop)
                .map(|handle| handle.thread().clone())
                .map_err(|err| format!("cannot start the engine-call watchdog: {err}"))
        })
        .as_ref()
        .map_err(String::as_str)
}

fn register(worker: &Arc<Worker>, watchdog: &Thread) {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::clone(worker));
    watchdog.unpark();
}

fn unregister(worker: &Arc<Worker>) {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|w| !Arc::ptr_eq(w, worker));
}

/// What the watchdog knows of one call.
struct Watch {
    seq: u64,
    first_seen: Instant,
    deadline: Instant,
    ceiling: Instant,
    /// When the call's abort fired, and why.
    fired: Option<(Instant, Overrun)>,
}

fn watchdog_loop() {
    let mut watches: HashMap<usize, Watch> = HashMap::new();
    loop {
        let workers: Vec<Arc<Worker>> =
            registry().lock().unwrap_or_else(|e| e.into_inner()).clone();
        if workers.is_empty() {
            watches.clear();
            std::thread::park();
            continue;
        }
        // Forget workers gone since the last tick (a new one may reuse an address).
        let live: HashSet<usize> = workers.iter().map(|w| Arc::as_ptr(w) as usize).collect();
        watches.retain(|key, _| live.contains(key));
        let now = Instant::now();
        for worker in &workers {
            scan(worker, &mut watches, now);
        }
        drop(workers);
        std::thread::sleep(TICK);
    }
}

fn scan(worker: &Arc<Worker>, watches: &mut HashMap<usize, Watch>, now: Instant) {
    let key = Arc::as_ptr(worker) as usize;
    let state = worker.slot.state.load(Ordering::Acquire);
    if state & ACTIVE == 0 {
        watches.remove(&key);
        return;
    }
    let seq = state >> 2;
    // Claim the record: the call cannot leave its frame until we put the state back.
    if worker
        .slot
        .state
        .compare_exchange(state, state | CLAIMED, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return; // it just returned
    }
    // SAFETY: the slot is ACTIVE with this `seq` and claimed by us: its call is inside
    // `run_inline`, whose `EndCall` spins until we release the claim below, so the record
    // (and the controller and hook it borrows) is alive.
    let call = unsafe { &*worker.slot.call.load(Ordering::Relaxed) };
    let watch = watches
        .entry(key)
        .and_modify(|w| {
            if w.seq != seq {
                *w = Watch::new(seq, now, call.window);
            }
        })
        .or_insert_with(|| Watch::new(seq, now, call.window));
    if call.refresh.swap(false, Ordering::AcqRel) {
        let next = (now + call.window).min(watch.ceiling);
        watch.deadline = watch.deadline.max(next);
    }
    let mut stuck = None;
    match &watch.fired {
        None if call.abort.fired() => watch.fired = Some((now, Overrun::Aborted)),
        None if now >= watch.deadline => {
            let waited = now - watch.first_seen;
            call.abort.abort();
            let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX - 1);
            call.timed_out.store(ms + 1, Ordering::Release);
            watch.fired = Some((now, Overrun::TimedOut { waited }));
        }
        None => {}
        Some((at, overrun)) if now >= *at + GRACE => {
            stuck = Some(call.on_stuck.on_stuck(call.method, call.primary, overrun));
        }
        Some(_) => {}
    }
    if stuck.is_some() {
        worker.abandoned.store(true, Ordering::Release);
    }
    worker.slot.state.store(state, Ordering::Release);
    if let Some(error) = stuck {
        watches.remove(&key);
        abandon(worker, error);
    }
}

impl Watch {
    fn new(seq: u64, now: Instant, window: Duration) -> Self {
        Watch {
            seq,
            first_seen: now,
            deadline: now + window,
            ceiling: now + window * MAX_WINDOWS,
            fired: None,
        }
    }
}

/// Fails `worker`'s job with `error`, detaches it from its session (which gets a fresh worker
/// for what is queued), and stops watching it.
fn abandon(worker: &Arc<Worker>, error: WorkError) {
    tracing::warn!(%error, "session worker stuck in an engine call; abandoned");
    unregister(worker);
    let job = worker.job.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(job) = job {
        job.fail(error);
    }
    let session = &worker.session;
    let mut queue = session.queue.lock().unwrap_or_else(|e| e.into_inner());
    if queue
        .worker
        .as_ref()
        .is_some_and(|w| Arc::ptr_eq(w, worker))
    {
        queue.worker = None;
        if !queue.jobs.is_empty() {
            spawn_worker(session, &mut queue);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sessions, jobs and their results
// ---------------------------------------------------------------------------------------------

struct Job {
    run: Box<dyn FnOnce() + Send>,
    fail: Arc<dyn Fail>,
    /// When it was queued.
    queued_at: Instant,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The live worker (abandoned ones are not here).
    worker: Option<Arc<Worker>>,
    closed: bool,
    /// The worker sleeps on `ready` (else it is running or spinning: no wake-up needed).
    sleeping: bool,
}

struct Session {
    name: String,
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Jobs queued, as a spinning worker reads it without the lock.
    queued: AtomicU64,
}

/// Starts a worker for `session` (its queue locked by the caller). On failure every queued job
/// fails with [`WorkError::Unavailable`].
fn spawn_worker(session: &Arc<Session>, queue: &mut Queue) {
    let watchdog = match watchdog() {
        Ok(watchdog) => watchdog,
        Err(err) => {
            session.queued.store(0, Ordering::Relaxed);
            for job in queue.jobs.drain(..) {
                job.fail.fail(WorkError::Unavailable(err.to_owned()));
            }
            return;
        }
    };
    let worker = Arc::new(Worker {
        slot: CallSlot {
            state: AtomicU64::new(0),
            call: AtomicPtr::new(std::ptr::null_mut()),
        },
        job: Mutex::new(None),
        abandoned: AtomicBool::new(false),
        session: Arc::clone(session),
    });
    let runner = Arc::clone(&worker);
    match std::thread::Builder::new()
        .name(format!("pincer-session-{}", session.name))
        .spawn(move || worker_loop(runner))
    {
        Ok(_) => {
            register(&worker, watchdog);
            queue.worker = Some(worker);
        }
        Err(err) => {
            session.queued.store(0, Ordering::Relaxed);
            for job in queue.jobs.drain(..) {
                job.fail.fail(WorkError::Unavailable(err.to_string()));
            }
        }
    }
}

fn worker_loop(me: Arc<Worker>) {
    LOCAL.with(|l| l.worker.set(Arc::as_ptr(&me)));
    let session = Arc::clone(&me.session);
    // Whether looking for the next job before sleeping pays: the last gap between two jobs
    // was short (adaptive: a session whose jobs come far apart never spins for nothing).
    let mut spin_pays = true;
    loop {
        let job = {
            let idle_since = Instant::now();
            let mut queue = session.queue.lock().unwrap_or_else(|e| e.into_inner());
            let mut spun = !spin_pays;
            loop {
                if me.abandoned.load(Ordering::Acquire) {
                    break None;
                }
                if let Some(job) = queue.jobs.pop_front() {
                    session.queued.fetch_sub(1, Ordering::Relaxed);
                    // The gap as the submitter saw it (not when this thread woke up).
                    spin_pays = job.queued_at.saturating_duration_since(idle_since) <= SPIN;
                    break Some(job);
                }
                if queue.closed {
                    queue.worker = None;
                    break None;
                }
                if !spun {
                    // The next job often follows closely (a client's next call): look for it
                    // a little before sleeping.
                    spun = true;
                    drop(queue);
                    spin_until(SPIN, || {
                        session.queued.load(Ordering::Acquire) > 0
                            || me.abandoned.load(Ordering::Relaxed)
                    });
                    queue = session.queue.lock().unwrap_or_else(|e| e.into_inner());
                    continue;
                }
                queue.sleeping = true;
                queue = session.ready.wait(queue).unwrap_or_else(|e| e.into_inner());
                queue.sleeping = false;
            }
        };
        let Some(job) = job else { break };
        *me.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&job.fail));
        (job.run)();
        me.job.lock().unwrap_or_else(|e| e.into_inner()).take();
        if me.abandoned.load(Ordering::Acquire) {
            break; // the session has moved on to a fresh worker
        }
    }
    LOCAL.with(|l| l.worker.set(std::ptr::null()));
    unregister(&me);
}

type Outcome<T> = Result<std::thread::Result<T>, WorkError>;

/// A job's result, delivered once: by the job, or by the watchdog when the job is stuck.
struct Oneshot<T> {
    state: Mutex<OneshotState<T>>,
    /// `state.done`, readable without the lock (for [`WorkHandle::spin`]).
    done: AtomicBool,
}

struct OneshotState<T> {
    value: Option<Outcome<T>>,
    done: bool,
    waker: Option<Waker>,
    thread: Option<Thread>,
}

impl<T> Oneshot<T> {
    /// Delivers `value` unless a value was delivered already (the first one wins).
    fn complete(&self, value: Outcome<T>) {
        let (waker, thread) = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.done {
                return;
            }
            state.value = Some(value);
            state.done = true;
            self.done.store(true, Ordering::Release);
            (state.waker.take(), state.thread.take())
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        if let Some(thread) = thread {
            thread.unpark();
        }
    }
}

trait Fail: Send + Sync {
    fn fail(&self, error: WorkError);
}

impl<T: Send> Fail for Oneshot<T> {
    fn fail(&self, error: WorkError) {
        self.complete(Err(error));
    }
}

/// The result of work submitted to a [`SessionWorker`]: wait for it, or `.await` it.
///
/// A panic in the work is resumed on the thread that takes the result.
#[must_use = "the work runs anyway; the handle is how its result is read"]
pub struct WorkHandle<T> {
    shared: Arc<Oneshot<T>>,
}

impl<T> std::fmt::Debug for WorkHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkHandle").finish_non_exhaustive()
    }
}

fn finish<T>(outcome: Outcome<T>) -> Result<T, WorkError> {
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(payload)) => std::panic::resume_unwind(payload),
        Err(error) => Err(error),
    }
}

impl<T> WorkHandle<T> {
    /// Blocks this thread until the work's result (or its failure) is there.
    ///
    /// # Errors
    /// [`WorkError::Stuck`] when an engine call of the work overran and ignored its abort.
    pub fn wait(self) -> Result<T, WorkError> {
        self.spin(SPIN);
        loop {
            {
                let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(outcome) = state.value.take() {
                    return finish(outcome);
                }
                state.thread = Some(std::thread::current());
            }
            std::thread::park();
        }
    }

    /// Looks for the result for up to `limit` (see `SPIN`) without parking or registering a
    /// waker; whether it is there. Work expected to finish within microseconds is then taken
    /// without a thread wake-up; `wait` or `.await` it afterwards either way.
    pub fn spin(&self, limit: Duration) -> bool {
        spin_until(limit, || self.shared.done.load(Ordering::Acquire))
    }

    /// Whether the result is there (a wait would not block).
    pub fn is_finished(&self) -> bool {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .done
    }
}

impl<T> Future for WorkHandle<T> {
    type Output = Result<T, WorkError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.value.take() {
            Some(outcome) => {
                drop(state);
                Poll::Ready(finish(outcome))
            }
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A thread that runs one session's work in order; engine calls made there run inline, bounded
/// by the watchdog (see the module docs). Dropping it lets its worker finish what is queued
/// and exit.
pub struct SessionWorker {
    session: Arc<Session>,
}

impl std::fmt::Debug for SessionWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWorker")
            .field("name", &self.session.name)
            .finish()
    }
}

impl SessionWorker {
    /// A session worker named `name` (the thread is `pincer-session-<name>`); its thread starts
    /// with the first job.
    pub fn new(name: &str) -> Self {
        SessionWorker {
            session: Arc::new(Session {
                // A thread name cannot hold NUL (a session key could).
                name: name.replace('\0', ""),
                queue: Mutex::new(Queue::default()),
                ready: Condvar::new(),
                queued: AtomicU64::new(0),
            }),
        }
    }

    /// Queues `work` behind the session's earlier work; its handle.
    pub fn submit<T, F>(&self, work: F) -> WorkHandle<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let shared = Arc::new(Oneshot {
            state: Mutex::new(OneshotState {
                value: None,
                done: false,
                waker: None,
                thread: None,
            }),
            done: AtomicBool::new(false),
        });
        let result = Arc::clone(&shared);
        let job = Job {
            run: Box::new(move || {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                result.complete(Ok(outcome));
            }),
            fail: Arc::clone(&shared) as Arc<dyn Fail>,
            queued_at: Instant::now(),
        };
        let mut queue = self.session.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.jobs.push_back(job);
        self.session.queued.fetch_add(1, Ordering::Release);
        if queue.worker.is_none() {
            spawn_worker(&self.session, &mut queue);
        } else if queue.sleeping {
            // A running or spinning worker finds the job by itself.
            self.session.ready.notify_all();
        }
        WorkHandle { shared }
    }

    /// Runs `work` on the session's worker and waits for it.
    ///
    /// # Errors
    /// As [`WorkHandle::wait`].
    pub fn run<T, F>(&self, work: F) -> Result<T, WorkError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.submit(work).wait()
    }
}

impl Drop for SessionWorker {
    fn drop(&mut self) {
        let mut queue = self.session.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.closed = true;
        self.session.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named;

    impl OnStuck for Named {
        fn on_stuck(&self, method: Method, _primary: bool, overrun: &Overrun) -> WorkError {
            WorkError::Stuck {
                engine_id: "test".into(),
                operation: method,
                error: EngineCallError::new(
                    crate::engines::error::CallErrorKind::TimedOut,
                    format!("{overrun:?}"),
                ),
            }
        }
    }

    fn inline_call(
        window: Duration,
        abort: &AbortController,
        body: impl FnOnce() -> u32,
    ) -> Result<u32, Overrun> {
        run_inline(Method::Assemble, true, window, abort, &Named, body)
            .unwrap_or_else(|_| panic!("runs inline on a session worker"))
    }

    #[test]
    fn work_runs_in_order_and_calls_run_inline_only_on_the_worker() {
        let worker = SessionWorker::new("order");
        assert!(!on_session_worker());
        let abort = AbortController::new();
        assert!(run_inline(Method::Assemble, true, TICK, &abort, &Named, || 1).is_err());
        let first = worker.submit(|| {
            let abort = AbortController::new();
            inline_call(Duration::from_secs(5), &abort, || 1)
        });
        let second = worker.submit(on_session_worker);
        assert_eq!(first.wait(), Ok(Ok(1)));
        assert_eq!(second.wait(), Ok(true));
    }

    #[test]
    fn a_call_that_ignores_its_deadline_abandons_the_worker_and_the_next_job_gets_a_fresh_one() {
        let worker = SessionWorker::new("stuck");
        let (tx, rx) = std::sync::mpsc::channel();
        let stuck = worker.submit(move || {
            let abort = AbortController::new();
            let _ = inline_call(Duration::from_millis(50), &abort, || {
                tx.send(std::thread::current().id()).unwrap();
                std::thread::sleep(Duration::from_secs(3600));
                1
            });
        });
        let first_thread = rx.recv().unwrap();
        let err = stuck.wait().expect_err("stuck");
        assert!(matches!(err, WorkError::Stuck { .. }), "{err:?}");
        let next = worker.run(|| std::thread::current().id()).unwrap();
        assert_ne!(next, first_thread, "a fresh worker");
    }

    #[test]
    fn a_call_that_honours_its_abort_returns_as_timed_out() {
        let worker = SessionWorker::new("honours");
        let result = worker
            .run(|| {
                let abort = AbortController::new();
                inline_call(Duration::from_millis(50), &abort, || {
                    while !abort.signal().is_aborted() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    2
                })
            })
            .unwrap();
        assert!(
            matches!(result, Err(Overrun::TimedOut { .. })),
            "{result:?}"
        );
    }

    #[test]
    fn a_refreshed_window_keeps_a_call_alive_up_to_ten_windows() {
        let worker = SessionWorker::new("refresh");
        // Wide enough that a loaded machine (a test run on 2 busy cores) never oversleeps a
        // whole window between two re-arms.
        let window = Duration::from_millis(300);
        // Re-armed every 30 ms for about a second (three windows and more): in time.
        let in_time = worker
            .run(move || {
                let abort = AbortController::new();
                inline_call(window, &abort, || {
                    for _ in 0..33 {
                        assert!(refresh_inline_deadline());
                        std::thread::sleep(Duration::from_millis(30));
                    }
                    3
                })
            })
            .unwrap();
        assert_eq!(in_time, Ok(3));
        // Re-armed for ever: the ceiling of ten windows ends it.
        let capped = worker
            .run(move || {
                let abort = AbortController::new();
                inline_call(window, &abort, || {
                    // Bounded, so that a missing ceiling fails instead of hanging.
                    for _ in 0..1_200 {
                        if abort.signal().is_aborted() {
                            break;
                        }
                        refresh_inline_deadline();
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    4
                })
            })
            .unwrap();
        match capped {
            Err(Overrun::TimedOut { waited }) => {
                assert!(waited >= window * MAX_WINDOWS, "{waited:?}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!refresh_inline_deadline(), "no inline call on this thread");
    }

    #[test]
    fn the_handle_is_a_future() {
        let worker = SessionWorker::new("future");
        let mut handle = worker.submit(|| 5);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let value = loop {
            if let Poll::Ready(v) = Pin::new(&mut handle).poll(&mut cx) {
                break v;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(value, Ok(5));
    }
}
