//! Crashes outside any call: engine code that runs where the host marks no
//! call. Read from the engine's config (`plugins.entries.hostile.config`):
//!
//! - `atexitSegv: true` — the factory registers an `atexit` handler that writes through a
//!   null pointer, after the answer is printed;
//! - `timerSegvMs: N` — the factory starts a timer thread that writes through a null pointer
//!   `N` ms after the engine is created;
//! - `afterCallSegv: true` — `assemble` starts a thread that writes through a null pointer
//!   just after the call returned (and an `atexit` handler holds the exit back until it has,
//!   so the crash always comes after the call, never before, never not at all).
//!
//! (A constructor calling `exit(7)` is the library's `HOSTILE_CONSTRUCTOR_EXIT`, in `lib.rs`.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What this module reads of the engine's config.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outside {
    atexit_segv: bool,
    timer_segv_ms: Option<u64>,
    after_call_segv: bool,
}

impl Outside {
    /// The behaviours `config_json` asks for.
    pub fn from_config(config_json: &str) -> Self {
        let config: serde_json::Value = serde_json::from_str(config_json).unwrap_or_default();
        Outside {
            atexit_segv: config["atexitSegv"].as_bool().unwrap_or(false),
            timer_segv_ms: config["timerSegvMs"].as_u64(),
            after_call_segv: config["afterCallSegv"].as_bool().unwrap_or(false),
        }
    }

    /// At the end of the factory.
    pub fn on_create(&self) {
        if self.atexit_segv {
            // SAFETY: registering a handler; what it does is the point.
            unsafe { libc::atexit(segv_at_exit) };
        }
        if let Some(ms) = self.timer_segv_ms {
            let _ = std::thread::Builder::new()
                .name("hostile-timer".into())
                .spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    null_write();
                });
        }
    }

    /// Just before `assemble` returns.
    pub fn on_assemble_return(&self) {
        if !self.after_call_segv {
            return;
        }
        // SAFETY: registering a handler that waits at most 5 s.
        unsafe { libc::atexit(wait_for_after_call) };
        let _ = std::thread::Builder::new()
            .name("hostile-after-call".into())
            .spawn(|| {
                // The call has returned by then: the host prints, disposes, or exits.
                std::thread::sleep(Duration::from_millis(20));
                CRASHING.store(true, Ordering::Release);
                null_write();
            });
    }
}

static CRASHING: AtomicBool = AtomicBool::new(false);

fn null_write() {
    // SAFETY: none; this is the point.
    unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) };
}

extern "C" fn segv_at_exit() {
    null_write();
}

extern "C" fn wait_for_after_call() {
    for _ in 0..500 {
        if CRASHING.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_secs(5));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
