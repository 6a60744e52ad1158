//! Failure injection for the [`disk`](super) seam (reached by tests as
//! `pincer_host::testing::disk::faults`, behind the `test-support` feature): a test arms a
//! [`FaultPlan`] for a folder of its own, and every operation of the seam on a path below it
//! asks the plan whether to fail.
//!
//! ```
//! # #[cfg(feature = "test-support")] {
//! use pincer_host::testing::disk::faults::{self, Fault, Op};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let file = dir.path().join("f");
//! // Every sync under `dir` fails with EIO while `armed` lives.
//! let armed = faults::arm(dir.path(), |op: Op, _: &std::path::Path| {
//!     (op == Op::Sync).then_some(Fault::IO)
//! });
//! pincer_host::testing::disk::write(&file, b"x").unwrap();
//! let handle = std::fs::File::open(&file).unwrap();
//! assert!(pincer_host::testing::disk::sync_data(&handle, &file).is_err());
//! drop(armed);
//! assert!(pincer_host::testing::disk::sync_data(&handle, &file).is_ok());
//! # }
//! ```
//!
//! Plans are scoped by folder so that tests running in parallel in one process never see each
//! other's faults. With nothing armed, [`armed`] is one relaxed atomic load and the seam goes
//! straight to `std`.

// Without test support nothing arms a plan: the seam keeps its checks (a cheap atomic load)
// and the arming API below is used by the black-box tests only.
#![cfg_attr(not(feature = "test-support"), allow(dead_code))]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// An operation of the seam, as a plan sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// An `open` (to create, truncate or write a file).
    Open,
    /// One `write` call (a write of many bytes may take several).
    Write,
    /// `fsync` or `fdatasync`.
    Sync,
    /// `ftruncate`.
    Truncate,
    /// `rename`.
    Rename,
    /// A file copy.
    Copy,
    /// A hard link.
    Link,
    /// A folder created.
    CreateDir,
    /// A file or folder removed.
    Remove,
}

/// What a plan makes an operation do instead of running it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail with this `errno`, having done nothing.
    Fail(i32),
    /// (a [`Op::Write`] only) write at most this many bytes (at least one) and report the short
    /// count, as a write interrupted by a full disk does; the caller's loop goes on.
    Short(usize),
}

impl Fault {
    /// `ENOSPC`: no space left on the device.
    pub const NO_SPACE: Fault = Fault::Fail(libc::ENOSPC);
    /// `EIO`: an input/output error (what a failed `fsync` reports).
    pub const IO: Fault = Fault::Fail(libc::EIO);
}

/// Decides, for each operation on a path below its folder, whether it fails.
pub trait FaultPlan: Send + Sync + 'static {
    /// The fault for `op` on `path`, or `None` to run it.
    fn fault(&self, op: Op, path: &Path) -> Option<Fault>;
}

impl<F> FaultPlan for F
where
    F: Fn(Op, &Path) -> Option<Fault> + Send + Sync + 'static,
{
    fn fault(&self, op: Op, path: &Path) -> Option<Fault> {
        self(op, path)
    }
}

/// A plan armed for a folder; disarmed when dropped.
#[derive(Debug)]
#[must_use = "the plan is disarmed when this is dropped"]
pub struct Armed {
    id: u64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut plans = plans();
        plans.retain(|armed| armed.id != self.id);
        ARMED.store(plans.len(), Ordering::Relaxed);
    }
}

struct ArmedPlan {
    id: u64,
    folder: PathBuf,
    plan: Arc<dyn FaultPlan>,
}

/// How many plans are armed (the seam's fast path reads only this).
static ARMED: AtomicUsize = AtomicUsize::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static PLANS: Mutex<Vec<ArmedPlan>> = Mutex::new(Vec::new());

fn plans() -> std::sync::MutexGuard<'static, Vec<ArmedPlan>> {
    PLANS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Arms `plan` for every path below `folder` (as the host names it: give the absolute path
/// the host is given) until the returned guard is dropped. Plans of nested folders are all
/// asked, the first armed first; the first fault wins.
pub fn arm(folder: &Path, plan: impl FaultPlan) -> Armed {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut plans = plans();
    plans.push(ArmedPlan {
        id,
        folder: folder.to_owned(),
        plan: Arc::new(plan),
    });
    ARMED.store(plans.len(), Ordering::Relaxed);
    Armed { id }
}

/// Whether any plan is armed.
#[inline]
pub(super) fn armed() -> bool {
    ARMED.load(Ordering::Relaxed) != 0
}

/// The fault the armed plans give `op` on `path`.
pub(super) fn fault(op: Op, path: &Path) -> Option<Fault> {
    if !armed() {
        return None;
    }
    let matching: Vec<Arc<dyn FaultPlan>> = plans()
        .iter()
        .filter(|armed| path.starts_with(&armed.folder))
        .map(|armed| Arc::clone(&armed.plan))
        .collect();
    // Asked outside the lock: a plan may take its time, or use the seam itself.
    matching.iter().find_map(|plan| plan.fault(op, path))
}

/// Fails `op` on `path` when a plan says so (a [`Fault::Short`] is for writes; here it runs).
#[inline]
pub(super) fn fail_if(op: Op, path: &Path) -> io::Result<()> {
    match fault(op, path) {
        Some(Fault::Fail(errno)) => Err(io::Error::from_raw_os_error(errno)),
        Some(Fault::Short(_)) | None => Ok(()),
    }
}
