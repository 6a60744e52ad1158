//! The host's own output kept apart from what in-process engines write: engine code holds the
//! process's descriptors 1 and 2 like the host does, so a `println!` in an engine would land
//! in the middle of `pincer assemble --json`. [`keep_host_output_apart`] — called before any
//! library opens (the `pincer` binary does, before it opens a runtime; an embedder may) —
//! duplicates the real stdout and stderr to new descriptors that only the host writes
//! ([`host_stdout`], [`host_stderr`]), and puts pipes on 1 and 2 instead. A drain thread
//! reads the pipes and forwards what arrives, capped and sanitized
//! (`output_cap::OutputCap`), to the host's log as "in-process engine code stdout:
//! …". The host's `tracing` writer, its `println!`s (the binary shadows the macros), its panic
//! message and the crash journal's abort message all go to the saved descriptors.
//!
//! Without the call, [`host_stdout`] and [`host_stderr`] are descriptors 1 and 2.

use std::io::Write;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use crate::engines::output_cap::{OutputCap, Stream};

static HOST_STDOUT: AtomicI32 = AtomicI32::new(1);
static HOST_STDERR: AtomicI32 = AtomicI32::new(2);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// The descriptor the host writes its stdout to. Async-signal-safe.
pub fn host_stdout_fd() -> RawFd {
    HOST_STDOUT.load(Ordering::Acquire)
}

/// The descriptor the host writes its stderr (its log) to. Async-signal-safe.
pub fn host_stderr_fd() -> RawFd {
    HOST_STDERR.load(Ordering::Acquire)
}

/// A writer to one of the host's own descriptors, unbuffered.
#[derive(Debug, Clone, Copy)]
pub struct HostWriter {
    fd: fn() -> RawFd,
}

/// The host's stdout.
pub fn host_stdout() -> HostWriter {
    HostWriter { fd: host_stdout_fd }
}

/// The host's stderr: the writer of its `tracing` subscriber.
pub fn host_stderr() -> HostWriter {
    HostWriter { fd: host_stderr_fd }
}

impl HostWriter {
    /// Whether the descriptor is a terminal.
    pub fn is_terminal(&self) -> bool {
        // SAFETY: isatty on a descriptor number has no memory effects.
        unsafe { libc::isatty((self.fd)()) == 1 }
    }
}

impl Write for HostWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            // SAFETY: writing a valid buffer of its length.
            let n = unsafe { libc::write((self.fd)(), buf.as_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the binary's `print!`/`println!` call: `args` written to the host's stdout at once. A
/// closed stdout ends the process quietly, as `SIGPIPE` would.
pub fn print(args: std::fmt::Arguments<'_>) {
    write_all_or_exit(host_stdout(), args);
}

/// What the binary's `eprint!`/`eprintln!` call: `args` written to the host's stderr.
pub fn eprint(args: std::fmt::Arguments<'_>) {
    let _ = host_stderr().write_all(args.to_string().as_bytes());
}

fn write_all_or_exit(mut writer: HostWriter, args: std::fmt::Arguments<'_>) {
    if let Err(err) = writer.write_all(args.to_string().as_bytes()) {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        panic!("failed printing to stdout: {err}");
    }
}

/// Moves descriptors 1 and 2 to drained pipes, once per process (see the module docs). Call
/// it before any library opens. Later calls return the first outcome.
///
/// # Errors
/// A descriptor could not be duplicated or a pipe made: the host's output is then not kept
/// apart (the caller logs it).
pub fn keep_host_output_apart() -> Result<(), String> {
    INSTALLED.get_or_init(install).clone()
}

fn install() -> Result<(), String> {
    let os = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain descriptor calls on descriptors this function owns from here on.
    unsafe {
        let saved_out = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if saved_out < 0 {
            return Err(os("dup of stdout"));
        }
        let saved_err = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
        if saved_err < 0 {
            libc::close(saved_out);
            return Err(os("dup of stderr"));
        }
        let mut out_pipe = [0; 2];
        let mut err_pipe = [0; 2];
        if libc::pipe2(out_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            libc::close(saved_out);
            libc::close(saved_err);
            return Err(os("pipe"));
        }
        if libc::pipe2(err_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            for fd in [saved_out, saved_err, out_pipe[0], out_pipe[1]] {
                libc::close(fd);
            }
            return Err(os("pipe"));
        }
        // The host writes to the saved descriptors before 1 and 2 change: nothing is lost.
        HOST_STDOUT.store(saved_out, Ordering::Release);
        HOST_STDERR.store(saved_err, Ordering::Release);
        if libc::dup2(out_pipe[1], 1) < 0 || libc::dup2(err_pipe[1], 2) < 0 {
            return Err(os("dup2"));
        }
        libc::close(out_pipe[1]);
        libc::close(err_pipe[1]);
        let (out_read, err_read) = (out_pipe[0], err_pipe[0]);
        std::thread::Builder::new()
            .name("engine-output-drain".into())
            .spawn(move || drain(out_read, err_read))
            .map_err(|e| format!("drain thread: {e}"))?;
    }
    install_panic_hook();
    Ok(())
}

/// Reads both pipes until they close (never, in practice: the process holds 1 and 2).
fn drain(out_read: RawFd, err_read: RawFd) {
    let mut cap = OutputCap::new("in-process engine code", None, Instant::now());
    let mut buf = [0u8; 8192];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: out_read,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: err_read,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: a valid array of two pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, 250) };
        let now = Instant::now();
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        cap.tick(now);
        for (pfd, stream) in fds.iter().zip([Stream::Stdout, Stream::Stderr]) {
            if pfd.revents == 0 {
                continue;
            }
            // SAFETY: reading into a buffer of its size from a descriptor this thread owns.
            let n = unsafe { libc::read(pfd.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return;
            }
            cap.feed(stream, &buf[..n as usize], None, now);
        }
    }
}

/// The host's panic message goes to its own stderr, not the pipe (an engine's panics are
/// written by its own copy of the standard library, to descriptor 2: the pipe).
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("<unnamed>");
        let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "Box<dyn Any>".to_owned()
        };
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        let backtrace = std::backtrace::Backtrace::capture();
        let backtrace = match backtrace.status() {
            std::backtrace::BacktraceStatus::Captured => format!("stack backtrace:\n{backtrace}\n"),
            _ => "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
                .to_owned(),
        };
        let _ = host_stderr().write_all(
            format!("\nthread '{name}' panicked at {location}:\n{message}\n{backtrace}").as_bytes(),
        );
    }));
}
