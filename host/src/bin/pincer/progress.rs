//! Work that can take more than a second on real input, shown on a terminal: a spinner with
//! what is being done and for how long, drawn on stderr only when stderr is a terminal, the
//! command was not asked for `--json`, and the work is still running after a second (quick work
//! draws nothing). On a pipe, or with `--json`, nothing is ever drawn.
//!
//! "stderr" is the host's own: descriptor 2 is a pipe that in-process engines may write to
//! (`pincer_host::operator::stdio`), so progress is drawn on the saved descriptor through
//! [`HostTerm`].

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use pincer_host::operator::stdio;

/// How long work runs before it is shown.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Whether progress may be drawn: the host's stderr is a terminal and the output is not
/// `--json`.
pub fn drawable(json: bool) -> bool {
    !json && stdio::host_stderr().is_terminal()
}

/// Where progress is drawn: the host's own stderr.
pub fn draw_target() -> ProgressDrawTarget {
    ProgressDrawTarget::term_like(Box::new(HostTerm))
}

/// The host's own stderr as the terminal indicatif draws on (ANSI cursor movements).
#[derive(Debug)]
struct HostTerm;

impl HostTerm {
    fn write(&self, text: &str) -> std::io::Result<()> {
        stdio::host_stderr().write_all(text.as_bytes())
    }

    fn csi(&self, n: usize, code: char) -> std::io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.write(&format!("\x1b[{n}{code}"))
    }
}

impl TermLike for HostTerm {
    fn width(&self) -> u16 {
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which is valid.
        let ok = unsafe { libc::ioctl(stdio::host_stderr_fd(), libc::TIOCGWINSZ, &mut size) } == 0;
        if ok && size.ws_col > 0 {
            size.ws_col
        } else {
            80
        }
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'A')
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'B')
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'C')
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'D')
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write(&format!("{s}\n"))
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.write(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.write("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
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
                    bar.set_draw_target(draw_target());
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
