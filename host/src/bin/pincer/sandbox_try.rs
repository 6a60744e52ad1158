//! `pincer sandbox-try` (hidden): confines this process as an isolated engine's worker
//! confines itself ([`apply_sandbox`]), prints the protections in force as one JSON line,
//! then tries each `--try` in order and prints `ok: …` or `error: …` per try. A try the
//! sandbox refuses with a trap ends the process with status 121 and the
//! `pincer-sandbox: refused system call <name>` line on stderr. For the confinement tests;
//! never confine a test process itself.
//!
//! Exit status: 0 every try worked; 1 a try failed with an error (printed); 2 bad usage or the
//! sandbox could not be applied; 121 a refused system call.

use std::ffi::CString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

use pincer_host::operator::{apply_sandbox, SandboxPolicy, WorkerLimits};

/// `pincer sandbox-try`'s arguments.
#[derive(clap::Args, Debug)]
pub struct SandboxTryArgs {
    /// A directory the sandbox lets the process write beneath (repeatable).
    #[arg(long, value_name = "DIR")]
    writable: Vec<PathBuf>,
    /// A path the sandbox lets the process read (repeatable).
    #[arg(long, value_name = "PATH")]
    readable: Vec<PathBuf>,
    /// What to try, in order (repeatable): socket | unix-socket | unix-connect:PATH | write:PATH | read:PATH |
    /// read:parent/NAME (`/proc/<parent>/NAME`) | caps (the capability sets) | chmod:PATH |
    /// exec | spawn |
    /// fork | thread | clone3 | alloc:BYTES | dlopen:PATH | kill-parent | abort |
    /// stack-overflow; prefixed with
    /// `early:`, on a thread started before the sandbox was applied.
    #[arg(long = "try", value_name = "ACTION")]
    tries: Vec<String>,
    /// RLIMIT_AS in bytes (default: the worker's default, 4 GiB).
    #[arg(long, value_name = "BYTES")]
    memory_bytes: Option<u64>,
    /// Leave `connect(2)` allowed (`SandboxPolicy::allow_connect`).
    #[arg(long)]
    allow_connect: bool,
}

/// Runs `pincer sandbox-try`.
pub fn run(args: SandboxTryArgs) -> ExitCode {
    // A thread started before confinement, as a worker may have: seccomp must cover it too.
    let (to_early, early_inbox) = mpsc::channel::<String>();
    let (early_done, from_early) = mpsc::channel::<Result<String, String>>();
    let early = std::thread::Builder::new()
        .name("early".into())
        .spawn(move || {
            for action in early_inbox {
                let _ = early_done.send(attempt(&action));
            }
        })
        .expect("a thread starts before confinement");
    let mut limits = WorkerLimits::default();
    if args.memory_bytes.is_some() {
        limits.memory_bytes = args.memory_bytes;
    }
    let policy = SandboxPolicy {
        writable_dirs: args.writable,
        readable_paths: args.readable,
        limits,
        allow_connect: args.allow_connect,
    };
    let protections = match apply_sandbox(&policy) {
        Ok(p) => p,
        Err(err) => {
            eprintln!("pincer sandbox-try: {err}");
            return ExitCode::from(2);
        }
    };
    println!(
        "{}",
        serde_json::to_string(&protections).expect("protections serialize")
    );
    for action in &args.tries {
        let outcome = match action.strip_prefix("early:") {
            Some(action) => {
                let _ = to_early.send(action.to_owned());
                from_early
                    .recv()
                    .unwrap_or_else(|_| Err("the early thread is gone".into()))
            }
            None => attempt(action),
        };
        match outcome {
            Ok(message) => println!("ok: {action}: {message}"),
            Err(message) => {
                println!("error: {action}: {message}");
                return ExitCode::from(1);
            }
        }
    }
    drop(to_early);
    let _ = early.join();
    ExitCode::SUCCESS
}

fn os_error(err: std::io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => format!("{err} [errno {code}]"),
        None => err.to_string(),
    }
}

fn attempt(action: &str) -> Result<String, String> {
    let (verb, arg) = action.split_once(':').unwrap_or((action, ""));
    match verb {
        "socket" => std::net::UdpSocket::bind("127.0.0.1:0")
            .map(|s| format!("bound {:?}", s.local_addr()))
            .map_err(os_error),
        "unix-connect" => std::os::unix::net::UnixStream::connect(arg)
            .map(|_| format!("connected to {arg}"))
            .map_err(os_error),
        "unix-socket" => std::os::unix::net::UnixDatagram::pair()
            .map(|_| "a Unix socket pair".to_owned())
            .map_err(os_error),
        "write" => std::fs::write(arg, b"pincer sandbox-try\n")
            .map(|()| format!("wrote {arg}"))
            .map_err(os_error),
        "chmod" => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(arg, std::fs::Permissions::from_mode(0o666))
                .map(|()| format!("made {arg} writable by everyone"))
                .map_err(os_error)
        }
        "exec" => {
            // execv directly (no fork): success replaces this process with the shell.
            let sh = CString::new("/bin/sh").unwrap();
            let dash_c = CString::new("-c").unwrap();
            let script = CString::new("exit 0").unwrap();
            let argv = [
                sh.as_ptr(),
                dash_c.as_ptr(),
                script.as_ptr(),
                std::ptr::null(),
            ];
            // SAFETY: NUL-terminated strings and a null-terminated argv.
            unsafe { libc::execv(sh.as_ptr(), argv.as_ptr()) };
            Err(os_error(std::io::Error::last_os_error()))
        }
        "spawn" => std::process::Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .map(|s| format!("ran /bin/sh: {s}"))
            .map_err(os_error),
        "fork" => {
            // SAFETY: the child exits at once without touching anything.
            let pid = unsafe { libc::fork() };
            match pid {
                // SAFETY: in the forked child, `_exit` ends it at once without running any of the parent's atexit code.
                0 => unsafe { libc::_exit(0) },
                pid if pid > 0 => {
                    let mut status = 0;
                    // SAFETY: our own child.
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                    Ok(format!("forked pid {pid}"))
                }
                _ => Err(os_error(std::io::Error::last_os_error())),
            }
        }
        "thread" => std::thread::Builder::new()
            .name("tried".into())
            .spawn(|| 6 * 7)
            .map_err(os_error)?
            .join()
            .map(|n| format!("a thread ran and returned {n}"))
            .map_err(|_| "the thread panicked".to_owned()),
        #[cfg(target_os = "linux")]
        "clone3" => {
            // SAFETY: a null argument block of size 0: the kernel checks the size first.
            let rc = unsafe {
                libc::syscall(libc::SYS_clone3, std::ptr::null::<libc::c_void>(), 0usize)
            };
            let err = std::io::Error::last_os_error();
            if rc == -1 {
                Err(os_error(err))
            } else {
                Ok(format!("clone3 returned {rc}"))
            }
        }
        "alloc" => {
            let bytes: usize = arg.parse().map_err(|e| format!("alloc:{arg}: {e}"))?;
            if bytes == 0 {
                return Ok("nothing to allocate".into());
            }
            let mut v: Vec<u8> = Vec::new();
            v.try_reserve_exact(bytes)
                .map_err(|e| format!("allocation of {bytes} bytes failed: {e}"))?;
            // Touch the first and the last page only: the limit is on the reservation.
            v.push(1);
            // SAFETY: within the reserved capacity.
            unsafe {
                std::ptr::write_volatile(v.as_mut_ptr().add(bytes - 1), 1);
            }
            Ok(format!("allocated {bytes} bytes"))
        }
        "caps" => std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .filter(|l| l.starts_with("Cap"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .map_err(os_error),
        "read" => {
            // `read:parent/NAME` reads /proc/<parent pid>/NAME.
            let path = match arg.strip_prefix("parent/") {
                // SAFETY: no arguments.
                Some(name) => format!("/proc/{}/{name}", unsafe { libc::getppid() }),
                None => arg.to_owned(),
            };
            std::fs::read(&path)
                .map(|bytes| format!("read {} bytes of {path}", bytes.len()))
                .map_err(os_error)
        }
        "dlopen" => {
            let path = CString::new(arg).map_err(|e| e.to_string())?;
            // SAFETY: loading a library the test chose; its constructors run.
            let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                // SAFETY: dlerror returns a valid C string after a failure.
                let msg = unsafe { std::ffi::CStr::from_ptr(libc::dlerror()) };
                Err(msg.to_string_lossy().into_owned())
            } else {
                Ok(format!("loaded {arg}"))
            }
        }
        "kill-parent" => {
            // SAFETY: a signal 0 probe: nothing is delivered, only permission is checked.
            let rc = unsafe { libc::kill(libc::getppid(), 0) };
            if rc == 0 {
                Ok("may signal the parent".into())
            } else {
                Err(os_error(std::io::Error::last_os_error()))
            }
        }
        "abort" => std::process::abort(),
        "stack-overflow" => {
            std::hint::black_box(recurse(0));
            Ok("unreachable".into())
        }
        _ => Err(format!("unknown action {action:?}")),
    }
}

#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    recurse(depth + 1) + std::hint::black_box(frame)[3]
}
