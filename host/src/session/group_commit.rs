//! Group commit: one session written by many threads or async tasks at once (the subagents and
//! tools of one turn, a gateway's connections), sharing fsyncs.
//!
//! An append formats its line in order under a lock and stages it in memory. One leader at a
//! time gathers the appends of the others (up to as many as its previous batch held, for at most
//! [`GATHER_LIMIT`]), writes the batch with one `write` and makes it durable with one
//! `fdatasync`; then it wakes the appenders it covered.
//!
//! - **Blocking appends** ([`SharedSessionWriter::append_message`]) lead themselves when no one
//!   leads, else park until their batch ends. A lone appender never waits to gather.
//! - **Async appends** ([`SharedSessionWriter::append_message_async`]) stage at once (the call
//!   order is the file order) and give a future that resolves once durable; a flusher thread,
//!   started on first use, leads for them, so no task ever blocks its executor on an fsync, and
//!   waking a task costs a task switch instead of a thread switch.
//! - Durability: with `entry`, every append returns durable; with `turn`, batches are written
//!   unsynced and [`SharedSessionWriter::commit`] syncs once for the turn; with `none`, nothing
//!   is synced. Batches without a sync are written at once (there is nothing to share).
//! - A failed write or sync fails every append it covered and every append after it (the
//!   writer is poisoned, [`SessionWriteError::Poisoned`]): the appends staged behind it are
//!   already in the writer's view, and after a failed `fsync` what reached the disk is unknown
//!   (Linux may drop the dirty pages), so the session must be reopened, which reads what is
//!   really there, or recovered ([`SharedSessionWriter::recover`]: cut back to what the last
//!   successful sync covered). A failed write is first cut back to the end of the last batch
//!   written, so the file holds no fragment of it.

use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use pincer_plugin_abi::latest::Message;

use super::writer::{Durability, SessionWriteError, SessionWriter};
use crate::disk;

/// How long a leader waits for the appenders of its previous batch to stage again: a small part
/// of the fsync they then share (about 180 µs on this kind of machine).
pub const GATHER_LIMIT: Duration = Duration::from_micros(100);

/// A session writer shared by threads and tasks, with group commit (see the module docs).
#[derive(Debug)]
pub struct SharedSessionWriter {
    shared: Arc<Shared>,
    /// The flusher thread of async appends, once started.
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<GroupState>,
    /// Appends written, and synced where the durability asks (numbered from 1 in file order).
    durable: AtomicU64,
    /// The file, written and synced by the leader outside the lock.
    file: File,
    path: PathBuf,
}

#[derive(Debug)]
struct GroupState {
    writer: SessionWriter,
    /// Appends staged so far.
    staged: u64,
    /// Whether a batch is being led now.
    leading: bool,
    /// The leader, while it waits for appenders to stage.
    gathering: Option<Thread>,
    /// Blocking appenders waiting for a batch to end.
    waiting: Vec<Thread>,
    /// Async appends waiting for a batch to end.
    wakers: Vec<Waker>,
    /// The flusher thread, when it is parked with nothing to do.
    idle_flusher: Option<Thread>,
    /// The writer is being dropped: the flusher finishes what is staged and ends.
    closing: bool,
    /// The size of the last batch: how many appends the next leader waits for.
    last_batch: u64,
    /// A commit asked the next batch to be synced (durability `turn`).
    sync_asked: bool,
    /// fsyncs done.
    syncs: u64,
    /// The error that ended group commit, reported to every append from then on.
    failed: Option<String>,
}

impl SharedSessionWriter {
    /// Shares `writer`, keeping its durability setting.
    ///
    /// # Errors
    /// When the file handle cannot be duplicated for the leader.
    pub fn new(mut writer: SessionWriter) -> Result<Self, SessionWriteError> {
        writer.staged = Some(Vec::new());
        let file = writer
            .file
            .try_clone()
            .map_err(|source| SessionWriteError::Io {
                path: writer.path.clone(),
                source,
            })?;
        Ok(SharedSessionWriter {
            shared: Arc::new(Shared {
                path: writer.path.clone(),
                state: Mutex::new(GroupState {
                    writer,
                    staged: 0,
                    leading: false,
                    gathering: None,
                    waiting: Vec::new(),
                    wakers: Vec::new(),
                    idle_flusher: None,
                    closing: false,
                    last_batch: 1,
                    sync_asked: false,
                    syncs: 0,
                    failed: None,
                }),
                durable: AtomicU64::new(0),
                file,
            }),
            flusher: Mutex::new(None),
        })
    }

    /// Appends `message` as a child of the active leaf; returns its id once it is on disk.
    ///
    /// # Errors
    /// I/O errors, of the write or of the sync that was to cover it, or of an earlier one.
    pub fn append_message(&self, message: &Message) -> Result<String, SessionWriteError> {
        self.append_with(|writer| writer.append_message(message))
    }

    /// Runs `append` on the writer (under its lock; its lines are staged), then waits until
    /// they are written (and durable, with durability `entry`).
    ///
    /// # Errors
    /// `append`'s errors, or the write's or sync's that was to cover it.
    pub fn append_with<T>(
        &self,
        append: impl FnOnce(&mut SessionWriter) -> Result<T, SessionWriteError>,
    ) -> Result<T, SessionWriteError> {
        let (value, number) = self.shared.stage(append, false)?;
        self.shared.wait(number)?;
        Ok(value)
    }

    /// Appends `message` at once (before any later call's append) and resolves to its id once
    /// it is on disk, without blocking the caller's executor: a flusher thread writes and syncs.
    pub fn append_message_async(&self, message: &Message) -> DurableAppend<'_, String> {
        self.append_with_async(|writer| writer.append_message(message))
    }

    /// Runs `append` on the writer now (its lines are staged in call order) and resolves once
    /// they are written (and durable, with durability `entry`).
    pub fn append_with_async<T>(
        &self,
        append: impl FnOnce(&mut SessionWriter) -> Result<T, SessionWriteError>,
    ) -> DurableAppend<'_, T> {
        self.start_flusher();
        let staged = self.shared.stage(append, false);
        DurableAppend {
            shared: &self.shared,
            staged: Some(staged),
        }
    }

    /// Ends a turn: writes a `leaf` record if the active leaf moved, and with durability `entry`
    /// or `turn` returns once everything appended before it is durable.
    ///
    /// # Errors
    /// I/O errors, of this write or sync or of an earlier one.
    pub fn commit(&self) -> Result<(), SessionWriteError> {
        let ((), number) = self.shared.stage(SessionWriter::save, true)?;
        self.shared.wait(number)
    }

    /// The fsyncs done so far (fewer than the appends when appenders shared them).
    pub fn syncs(&self) -> u64 {
        self.shared.lock().syncs
    }

    /// The writer back, once the last appender is done.
    ///
    /// # Errors
    /// When a write or sync failed: the writer's view may hold entries that are not on disk;
    /// reopen the file instead.
    pub fn into_inner(self) -> Result<SessionWriter, SessionWriteError> {
        let shared = Arc::clone(&self.shared);
        // Stops the flusher, which holds the only other reference.
        drop(self);
        let shared = Arc::into_inner(shared).expect("the flusher has ended");
        let state = shared.state.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(cause) = state.failed {
            return Err(SessionWriteError::Poisoned {
                path: shared.path,
                cause,
            });
        }
        let mut writer = state.writer;
        writer.staged = None;
        Ok(writer)
    }

    /// The writer back after a failed write or sync, made to write again: the file cut back to
    /// what the last successful sync covered (the end of the last batch with durability
    /// `none`) and read again, as [`SessionWriter::recover`] does. A writer that did not fail
    /// is given back as [`SharedSessionWriter::into_inner`] gives it.
    ///
    /// # Errors
    /// When the file cannot be cut back, synced or read.
    pub fn recover(self) -> Result<SessionWriter, SessionWriteError> {
        let shared = Arc::clone(&self.shared);
        drop(self);
        let shared = Arc::into_inner(shared).expect("the flusher has ended");
        let state = shared.state.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut writer = state.writer;
        writer.staged = None;
        writer.recover()?;
        Ok(writer)
    }

    fn start_flusher(&self) {
        let mut flusher = self.flusher.lock().unwrap_or_else(|e| e.into_inner());
        if flusher.is_none() {
            let shared = Arc::clone(&self.shared);
            *flusher = Some(
                std::thread::Builder::new()
                    .name("pincer-session-flusher".into())
                    .spawn(move || shared.flush_until_closed())
                    .expect("a thread can be started"),
            );
        }
    }

    fn stop_flusher(&mut self) {
        let handle = self
            .flusher
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle {
            {
                let mut state = self.shared.lock();
                state.closing = true;
                if let Some(flusher) = state.idle_flusher.take() {
                    flusher.unpark();
                }
            }
            let _ = handle.join();
        }
    }
}

impl Drop for SharedSessionWriter {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error that ended group commit (`cause`), for one more append.
    fn poisoned(&self, cause: &str) -> SessionWriteError {
        SessionWriteError::Poisoned {
            path: self.path.clone(),
            cause: cause.to_owned(),
        }
    }

    /// Stages `append`'s lines; their number (appends are numbered from 1 in file order).
    fn stage<T>(
        &self,
        append: impl FnOnce(&mut SessionWriter) -> Result<T, SessionWriteError>,
        ask_sync: bool,
    ) -> Result<(T, u64), SessionWriteError> {
        let mut state = self.lock();
        if let Some(cause) = &state.failed {
            return Err(self.poisoned(cause));
        }
        let value = append(&mut state.writer)?;
        if ask_sync && state.writer.durability != Durability::None {
            state.sync_asked = true;
        }
        state.staged += 1;
        let number = state.staged;
        if let Some(leader) = &state.gathering {
            if number - self.durable.load(Ordering::Acquire) >= state.last_batch {
                leader.unpark();
            }
        }
        if let Some(flusher) = state.idle_flusher.take() {
            flusher.unpark();
        }
        Ok((value, number))
    }

    /// Blocks until append `number` is done: leads a batch when no one leads, else parks.
    fn wait(&self, number: u64) -> Result<(), SessionWriteError> {
        let mut state = self.lock();
        loop {
            if self.durable.load(Ordering::Acquire) >= number {
                return Ok(());
            }
            if let Some(cause) = &state.failed {
                return Err(self.poisoned(cause));
            }
            if !state.leading {
                state.leading = true;
                self.lead(state);
            } else {
                state.waiting.push(std::thread::current());
                drop(state);
                // Woken when a batch ends (or spuriously): done if it covered this append.
                std::thread::park();
            }
            state = self.lock();
        }
    }

    /// The flusher thread: leads whenever appends are staged and no one leads.
    fn flush_until_closed(&self) {
        loop {
            let mut state = self.lock();
            let pending = state.staged > self.durable.load(Ordering::Acquire);
            if state.failed.is_some() || (state.closing && !pending) {
                return;
            }
            if pending && !state.leading {
                state.leading = true;
                self.lead(state);
            } else {
                state.idle_flusher = Some(std::thread::current());
                drop(state);
                std::thread::park();
            }
        }
    }

    /// Gathers, writes and syncs one batch, then wakes the appenders waiting.
    fn lead<'a>(&'a self, mut state: MutexGuard<'a, GroupState>) {
        let deadline = Instant::now() + GATHER_LIMIT;
        let sync =
            state.writer.durability == Durability::Entry || std::mem::take(&mut state.sync_asked);
        // Let the appenders of the last batch, woken by its end, stage again first: they share
        // the sync (a batch without one is written at once).
        state.gathering = sync.then(std::thread::current);
        while sync && state.staged - self.durable.load(Ordering::Acquire) < state.last_batch {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            drop(state);
            std::thread::park_timeout(deadline - now);
            state = self.lock();
        }
        state.gathering = None;
        let batch = std::mem::take(state.writer.staged.get_or_insert_with(Vec::new));
        let end = state.staged;
        let sync = sync || std::mem::take(&mut state.sync_asked);
        // Only the leader writes, so the file ends here until it is done.
        let written = state.writer.end;
        drop(state);
        let result = match disk::write_all(&self.file, &self.path, &batch) {
            // Cut the batch's fragment off, so that the file ends with a complete line.
            Err(err) => Err(match disk::set_len(&self.file, &self.path, written) {
                Ok(()) => format!("a batched append failed ({err}); its fragment was cut off"),
                Err(cut) => format!(
                    "a batched append failed ({err}) and its fragment could not be cut off ({cut})"
                ),
            }),
            Ok(()) if sync => disk::sync_data(&self.file, &self.path)
                .map_err(|err| format!("fdatasync failed ({err})")),
            Ok(()) => Ok(()),
        };
        let mut state = self.lock();
        state.leading = false;
        state.syncs += u64::from(sync);
        match result {
            Ok(()) => {
                let durable = self.durable.load(Ordering::Acquire);
                state.last_batch = (end - durable).max(1);
                state.writer.end = written + batch.len() as u64;
                if sync {
                    state.writer.synced = state.writer.end;
                }
                self.durable.store(end, Ordering::Release);
            }
            Err(cause) => {
                let _ = state.writer.poison(cause.clone());
                state.failed = Some(cause);
            }
        }
        let waiting = std::mem::take(&mut state.waiting);
        let wakers = std::mem::take(&mut state.wakers);
        // Appends staged during this batch have no leader yet unless their appender leads.
        let flusher = (state.staged > end)
            .then(|| state.idle_flusher.take())
            .flatten();
        drop(state);
        for appender in waiting {
            appender.unpark();
        }
        for waker in wakers {
            waker.wake();
        }
        if let Some(flusher) = flusher {
            flusher.unpark();
        }
    }
}

/// An async append: staged when made, resolved once written (and durable, with durability
/// `entry`). Dropping it does not undo the append.
#[derive(Debug)]
#[must_use = "the append is staged; await it to know that it is durable"]
pub struct DurableAppend<'a, T> {
    shared: &'a Shared,
    /// The staged value and its number, or the staging error; `None` once resolved.
    staged: Option<Result<(T, u64), SessionWriteError>>,
}

impl<T: Unpin> Future for DurableAppend<'_, T> {
    type Output = Result<T, SessionWriteError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let number = match &self.staged {
            Some(Ok((_, number))) => *number,
            Some(Err(_)) => {
                let Some(Err(err)) = self.staged.take() else {
                    unreachable!()
                };
                return Poll::Ready(Err(err));
            }
            None => panic!("DurableAppend polled after it resolved"),
        };
        let done = |this: &mut Self| {
            let Some(Ok((value, _))) = this.staged.take() else {
                unreachable!()
            };
            Poll::Ready(Ok(value))
        };
        if self.shared.durable.load(Ordering::Acquire) >= number {
            return done(&mut self);
        }
        let mut state = self.shared.lock();
        if self.shared.durable.load(Ordering::Acquire) >= number {
            drop(state);
            return done(&mut self);
        }
        if let Some(cause) = &state.failed {
            let err = self.shared.poisoned(cause);
            drop(state);
            self.staged = None;
            return Poll::Ready(Err(err));
        }
        state.wakers.push(cx.waker().clone());
        if let Some(flusher) = state.idle_flusher.take() {
            flusher.unpark();
        }
        Poll::Pending
    }
}
