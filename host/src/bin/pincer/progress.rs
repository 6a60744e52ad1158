//! Work that can take more than a second on real input, shown on a terminal: a spinner with
//! what is being done and for how long, drawn on stderr only when stderr is a terminal, the
//! command was not asked for `--json`, and the work is still running after a second (quick work
//! draws nothing). On a pipe, or with `--json`, nothing is ever drawn.

use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before it is shown.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Whether progress may be drawn: stderr is a terminal and the output is not `--json`.
pub fn drawable(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// A piece of work shown while it runs (from a second on); cleared when dropped.
pub struct Working {
    bar: ProgressBar,
    /// Set when the work is done: the delayed start then draws nothing.
    done: Arc<Mutex<bool>>,
}

impl Working {
    /// Starts showing `message` (after [`SHOW_AFTER`]) when `visible`.
    pub fn start(message: String, visible: bool) -> Working {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        let done = Arc::new(Mutex::new(false));
        if visible {
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(message);
            let (bar, done) = (bar.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                std::thread::sleep(SHOW_AFTER);
                let done = done.lock().unwrap_or_else(|e| e.into_inner());
                if !*done {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(Duration::from_millis(100));
                }
            });
        }
        Working { bar, done }
    }

    /// Runs `f` (which prints) with the spinner out of the way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        *done = true;
        self.bar.finish_and_clear();
    }
}
