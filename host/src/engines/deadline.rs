//! A call's deadline and how a call can end without a result: the types both ways of bounding
//! a call share (a hand-off to a pooled worker, [`super::bounded`], and an inline call on a
//! session worker, [`super::session_worker`]). A leaf: it names no other engine module.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most windows a deadline can be stretched to.
pub const MAX_WINDOWS: u32 = 10;

/// The longest window a deadline accepts; longer ones are cut to it (a week is no bound a
/// person would wait for, and it keeps `Instant` arithmetic far from overflowing).
pub const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

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
        let window = window.min(MAX_WINDOW);
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

    #[cfg(test)]
    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }
}

/// Why a bounded call produced no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overrun {
    /// The deadline passed first; the call's abort signal was fired.
    TimedOut {
        /// How long the caller waited.
        waited: Duration,
    },
    /// The caller's abort signal fired while it waited.
    Aborted,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_windows_are_capped_instead_of_overflowing() {
        let d = Deadline::new(Duration::from_secs(u64::MAX));
        d.refresh();
        assert_eq!(d.window(), MAX_WINDOW);
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
