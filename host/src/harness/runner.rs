//! A session bound to its own worker: [`SessionRunner`].
//!
//! A [`SessionRunner`] owns one session of a [`Harness`] and a
//! [`SessionWorker`]: every piece of work on the session — a turn, an append, any closure given
//! to [`SessionRunner::submit`] — runs on the worker, one at a time and in submission order, so
//! its engine calls take the guard's inline path (no hand-off, no thread wake-up per call). The
//! caller waits for the returned [`WorkHandle`] or `.await`s it from async code.
//!
//! **A stuck engine call.** When an engine call overruns its deadline and ignores its abort
//! signal, the watchdog fails the work with [`WorkError::Stuck`] (quarantining the engine as
//! the guard's rules say) and abandons the worker thread, which never returns into the work
//! (see [`crate::engines::session_worker`]). The session itself is not lost: its state lives in
//! a cell shared with the work, and an engine call never holds the session's writer or its
//! cached context — the harness is between two of its own steps whenever it calls an engine. The
//! next work finds the previous one unfinished and recovers the session before it runs: the
//! cached context and the pinned engine are dropped (the next turn re-reads the file and takes
//! the engine — `legacy`, for a quarantined one — from the harness's source), and the writer,
//! with its lock on the file, carries on. What the stuck work had appended is in the file.
//! A session whose stuck call was a compaction may find the file still locked by the
//! compaction's own writer until the engine returns; that work fails with the writer's
//! "locked" error and the one after it tries again.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pincer_plugin_abi::latest::Message;

use crate::engines::session_worker::{SessionWorker, WorkHandle};
use crate::session::key::SessionKey;

use super::{Harness, HarnessError, HarnessSession, TurnReport};

/// One session of a harness, run on its own worker (see the module docs).
pub struct SessionRunner {
    harness: Arc<Harness>,
    cell: Arc<SessionCell>,
    worker: SessionWorker,
    key: SessionKey,
}

impl std::fmt::Debug for SessionRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRunner")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The session's state, shared by the runner and the work running on its worker.
struct SessionCell {
    session: UnsafeCell<HarnessSession>,
    /// Set while a piece of work runs; still set when the next one starts, the previous one
    /// never finished (stuck or panicked), and the session is recovered first.
    in_work: AtomicBool,
}

// SAFETY: `session` is only reached through `SessionCell::with`, called only from work running
// on the runner's worker; a worker runs one piece of work at a time, and work whose worker was
// abandoned never touches the cell again (its thread parks for good when its engine call
// returns: `session_worker::run_inline`), so at most one `&mut HarnessSession` is ever in use.
unsafe impl Sync for SessionCell {}

impl SessionCell {
    /// Runs `work` with the session, recovering it first when the previous work never finished.
    ///
    /// Only called from work on the runner's worker (see the `Sync` impl).
    fn with<T>(&self, work: impl FnOnce(&mut HarnessSession) -> T) -> T {
        // SAFETY: see the `Sync` impl: this is the only live use of the session.
        let session = unsafe { &mut *self.session.get() };
        if self.in_work.swap(true, Ordering::AcqRel) {
            session.recover_after_unfinished_work();
        }
        let value = work(session);
        self.in_work.store(false, Ordering::Release);
        value
    }
}

impl SessionRunner {
    /// Opens the session indexed under `key` (created when new) and binds it to a worker of
    /// its own.
    ///
    /// # Errors
    /// As [`Harness::open_session`].
    pub fn open(harness: Arc<Harness>, key: &SessionKey) -> Result<Self, HarnessError> {
        let session = harness.open_session(key)?;
        Ok(SessionRunner::with_session(harness, session))
    }

    /// Binds `session` (opened or created by `harness`) to a worker of its own.
    pub fn with_session(harness: Arc<Harness>, session: HarnessSession) -> Self {
        let key = session.key.clone();
        SessionRunner {
            harness,
            cell: Arc::new(SessionCell {
                session: UnsafeCell::new(session),
                in_work: AtomicBool::new(false),
            }),
            worker: SessionWorker::new(key.as_str()),
            key,
        }
    }

    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The harness.
    pub fn harness(&self) -> &Arc<Harness> {
        &self.harness
    }

    /// Queues `work` on the session's worker, behind earlier work; its handle. A stuck engine
    /// call fails the handle with [`WorkError::Stuck`](crate::WorkError::Stuck); a panic in `work` is resumed on the
    /// thread that takes the result.
    pub fn submit<T, F>(&self, work: F) -> WorkHandle<T>
    where
        T: Send + 'static,
        F: FnOnce(&Harness, &mut HarnessSession) -> T + Send + 'static,
    {
        let harness = Arc::clone(&self.harness);
        let cell = Arc::clone(&self.cell);
        self.worker
            .submit(move || cell.with(|session| work(&harness, session)))
    }

    /// Runs `work` on the session's worker and waits for it.
    ///
    /// # Errors
    /// `work`'s own error, or [`HarnessError::Work`] when it did not finish.
    pub fn run<T, F>(&self, work: F) -> Result<T, HarnessError>
    where
        T: Send + 'static,
        F: FnOnce(&Harness, &mut HarnessSession) -> Result<T, HarnessError> + Send + 'static,
    {
        self.submit(work).wait()?
    }

    /// Queues one turn with the user message `prompt` (see [`Harness::turn`]).
    pub fn turn(&self, prompt: Message) -> WorkHandle<Result<TurnReport, HarnessError>> {
        self.submit(move |harness, session| harness.turn(session, prompt))
    }

    /// Runs one turn and waits for it.
    ///
    /// # Errors
    /// As [`Harness::turn`], or [`HarnessError::Work`] when an engine call got stuck.
    pub fn run_turn(&self, prompt: Message) -> Result<TurnReport, HarnessError> {
        self.turn(prompt).wait()?
    }
}
