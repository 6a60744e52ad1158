//! The confinement an isolated engine's worker process applies to **itself**, before it loads
//! the plugin library: resource limits, `no_new_privs`, a Landlock file-system policy and a
//! seccomp filter. And, for `pincer doctor`, which of these this machine provides, found
//! without confining the calling process.
//!
//! # Order
//!
//! [`apply_sandbox`] does everything in this order: `PR_SET_NO_NEW_PRIVS`; the limits of
//! [`SandboxPolicy::limits`] ([`apply_limits`]); dropping every capability; Landlock; the `SIGSYS` handler; seccomp (with
//! `SECCOMP_FILTER_FLAG_TSYNC`, so every thread of the process is filtered, including threads
//! the worker started before). It is irreversible and meant to be called once per process.
//! Connect to the host (or inherit the connection's file descriptor) **before**: descriptors
//! already open keep working, whatever the policy says about opening new ones.
//!
//! # Resource limits ([`WorkerLimits`], defaults)
//!
//! Set as `setrlimit` soft **and** hard limits, so the engine cannot raise them again (and the
//! seccomp filter refuses `setrlimit`/`prlimit64` with a new limit, which root could otherwise
//! use to raise a hard limit). A limit is only ever lowered: when the inherited hard limit is
//! already lower than the configured one, the inherited one stays. `null` in JSON leaves a
//! limit as inherited.
//!
//! | field (`pincer.json`: `plugins.entries.<id>.limits`) | resource | default |
//! |---|---|---|
//! | `memoryBytes` | `RLIMIT_AS` (address space: every mapping, thread stacks and malloc arenas included) | 4 GiB |
//! | `openFiles` | `RLIMIT_NOFILE` | 256 |
//! | `stackBytes` | `RLIMIT_STACK`, and the stack of the thread that runs engine calls ([`WorkerLimits::engine_thread_stack_bytes`]) | 8 MiB |
//! | `coreBytes` | `RLIMIT_CORE` (a crashing engine must not write gigabytes of core dump) | 0 |
//! | `fileSizeBytes` | `RLIMIT_FSIZE` (the largest file the engine may write; beyond, `SIGXFSZ`) | unset (inherited) |
//!
//! A CPU-time limit is deliberately absent: a worker lives as long as its engine, and every
//! call is already bounded in time by the host.
//!
//! # The sandbox ([`SandboxPolicy`])
//!
//! - **Read** (Landlock): only beneath [`SandboxPolicy::readable_paths`] (the worker's library
//!   copy, its plugin folder, the operator's `sandbox.readPaths`), the writable directories,
//!   [`ALWAYS_READABLE`] (shared libraries and the loader's cache, `/etc/localtime` and the
//!   zone file it names, `/dev/null`, `/dev/zero`, `/dev/random`, `/dev/urandom`,
//!   `/sys/devices/system/cpu`), its own cgroup folder, and its own `/proc/self` — the rule
//!   names the folder `/proc/self` resolves to when it is applied, kept open for the life of
//!   the process, so no other process's `/proc/<pid>` (the host's `environ`, `cmdline`,
//!   `fd/`, `maps`) and no listing of `/proc`. Refused reads fail with `EACCES`.
//! - **Capabilities**: none. The ambient and bounding sets are cleared and the effective,
//!   permitted and inheritable sets emptied (`capset`), checked from `/proc/self/status`: a
//!   worker of a root host keeps uid 0 but none of root's powers (`CAP_DAC_OVERRIDE` would
//!   otherwise read any file the mode bits deny; Landlock binds root too).
//! - **Write** (Landlock): only beneath [`SandboxPolicy::writable_dirs`] (the engine's state
//!   directory and its workspace), plus `/dev/null`. **Not `/tmp`**: it is shared with every
//!   other process of the user, so an engine could plant files there for others; a worker
//!   sets `TMPDIR` (and `SQLITE_TMPDIR`) to a directory beneath its state directory instead.
//!   Refused writes fail with `EACCES` (the engine sees an ordinary I/O error; nothing dies).
//!   On kernels with Landlock ABI 9, connecting to a path-name Unix socket is allowed only
//!   beneath the writable directories too (no `docker.sock`, no gateway socket).
//! - **Network**: never. seccomp refuses `socket` for every family but `AF_UNIX`
//!   (`socketpair` is allowed), and Landlock (ABI 4+) refuses TCP `bind`/`connect`
//!   besides. Landlock ABI 6+ also scopes abstract Unix sockets and signals: the worker can
//!   neither reach an abstract socket created outside its sandbox nor signal a process
//!   outside it (the host included).
//! - **Exec**: never (`execve`, `execveat`; Landlock also handles the execute right and
//!   grants it nowhere). Loading libraries (`dlopen` = `open` + `mmap`) keeps working.
//! - **New processes**: never. `fork`, `vfork`, and `clone` without `CLONE_THREAD` are
//!   refused (as root `RLIMIT_NPROC` does not bind, so this is what stops a fork bomb);
//!   `clone3` answers `ENOSYS`, so glibc falls back to `clone` for threads, which keep working.
//! - **Also refused**: `ptrace`, `process_vm_readv`/`writev`, `pidfd_open`/`getfd`/
//!   `send_signal`, `kill`/`tgkill`/`rt_sigqueueinfo`/`rt_tgsigqueueinfo` aimed at another
//!   process, `tkill`, the mount family, `chroot`, `pivot_root`, `unshare`, `setns`, `bpf`,
//!   `perf_event_open`, `userfaultfd`, `io_uring_*` (its operations bypass seccomp),
//!   `keyctl`/`add_key`/`request_key`, module loading, `kexec_*`, `reboot`, `swapon`/`off`,
//!   setting the clock, `acct`, `quotactl`, `open_by_handle_at`, `personality` changes,
//!   `setrlimit`/`prlimit64` with a new limit, `iopl`/`ioperm`, and the terminal-injection
//!   `ioctl`s `TIOCSTI`/`TIOCLINUX`.
//! - **Refused softly** (`EPERM`, the engine goes on): changing a file's mode, owner or
//!   extended attributes (`chmod`, `chown`, `setxattr` and their kin; Landlock does not cover
//!   them), since SQLite does it to its own journal files as root and ignores the failure; and
//!   `connect` (unless [`SandboxPolicy::allow_connect`]), since glibc's user lookups try the
//!   `nscd` socket and fall back to the files.
//! - On x86-64, a system call of another ABI (i386 through `int 0x80`, x32) kills the process
//!   outright.
//!
//! # A refused system call
//!
//! seccomp answers a refused call with `SECCOMP_RET_TRAP`; the `SIGSYS` handler
//! [`apply_sandbox`] installs writes, with `write(2)` only (async-signal-safe),
//! `pincer-sandbox: refused system call <name>` ([`SANDBOX_VIOLATION_PREFIX`]; `nr=<n>` for a
//! call outside its table) to file descriptor 2, and ends the process with
//! `_exit(`[`SANDBOX_VIOLATION_STATUS`]`)`. A host seeing status 121 with that line knows why
//! its worker died. A call made while `SIGSYS` is blocked is killed by the signal itself
//! instead (the kernel forces it) — glibc blocks every signal around the `clone` of
//! `posix_spawn`, which `std::process::Command` uses, so a refused spawn usually ends this way:
//! a worker killed by `SIGSYS` is a violation too.
//! The refused call never runs, whatever happens to the report: an engine that replaces the
//! handler only loses the line and the status.
//!
//! # Degrading honestly
//!
//! Each protection is reported as [`Protection::Active`], [`Protection::Unavailable`] (this
//! kernel or OS lacks it) or [`Protection::Failed`] (it should work and did not).
//! [`apply_sandbox`] does not refuse to continue when one is missing: the worker (and the
//! operator, through `pincer doctor`) decides — a worker refuses to start when Landlock or the
//! capability drop is not in force, unless its entry sets `sandbox.allowWeak`. Landlock before ABI 8 confines only the
//! calling thread and the threads it starts afterwards; the report says so when other threads
//! were already running. Process-count control by a cgroup `pids` controller is not used:
//! `clone` filtering covers it without needing a delegated cgroup.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The exit status of a worker whose engine made a system call the sandbox refuses.
pub const SANDBOX_VIOLATION_STATUS: i32 = 121;

/// The start of the line the worker writes to its standard error before it exits with
/// [`SANDBOX_VIOLATION_STATUS`]; the call's name (or `nr=<n>`) and a newline follow.
pub const SANDBOX_VIOLATION_PREFIX: &str = "pincer-sandbox: refused system call ";

/// Resource limits a worker applies to itself. The defaults are documented in the
/// module docs; serde camelCase, so they can sit in `pincer.json` under
/// `plugins.entries.<id>.limits`. A missing field takes its default; `null` leaves the
/// inherited limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkerLimits {
    /// `RLIMIT_AS`, in bytes (default 4 GiB).
    pub memory_bytes: Option<u64>,
    /// `RLIMIT_NOFILE` (default 256).
    pub open_files: Option<u64>,
    /// `RLIMIT_STACK` and the stack of the thread that runs engine calls, in bytes
    /// (default 8 MiB).
    pub stack_bytes: Option<u64>,
    /// `RLIMIT_CORE`, in bytes (default 0: no core dumps).
    pub core_bytes: Option<u64>,
    /// `RLIMIT_FSIZE`, in bytes (default unset: inherited).
    pub file_size_bytes: Option<u64>,
}

impl WorkerLimits {
    /// The default of [`WorkerLimits::memory_bytes`]: 4 GiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 4 << 30;
    /// The default of [`WorkerLimits::open_files`]: 256.
    pub const DEFAULT_OPEN_FILES: u64 = 256;
    /// The default of [`WorkerLimits::stack_bytes`]: 8 MiB.
    pub const DEFAULT_STACK_BYTES: u64 = 8 << 20;

    /// No limit set: every resource stays as inherited.
    pub fn none() -> Self {
        WorkerLimits {
            memory_bytes: None,
            open_files: None,
            stack_bytes: None,
            core_bytes: None,
            file_size_bytes: None,
        }
    }

    /// The stack size to give the thread that runs engine calls
    /// (`std::thread::Builder::stack_size`): `stack_bytes`, or 8 MiB when unset.
    pub fn engine_thread_stack_bytes(&self) -> usize {
        usize::try_from(self.stack_bytes.unwrap_or(Self::DEFAULT_STACK_BYTES)).unwrap_or(usize::MAX)
    }
}

impl Default for WorkerLimits {
    fn default() -> Self {
        WorkerLimits {
            memory_bytes: Some(Self::DEFAULT_MEMORY_BYTES),
            open_files: Some(Self::DEFAULT_OPEN_FILES),
            stack_bytes: Some(Self::DEFAULT_STACK_BYTES),
            core_bytes: Some(0),
            file_size_bytes: None,
        }
    }
}

/// What every confined process may read (when it exists here), besides its own `/proc/self`,
/// the zone file `/etc/localtime` names and its own cgroup folder: the shared libraries and
/// the loader's cache (a library's dependencies load), the devices that hold nothing, and the
/// CPU topology the Rust runtime reads for the CPU count. Nothing else of `/etc`, `/proc`,
/// `/sys` or `/dev`.
pub const ALWAYS_READABLE: &[&str] = &[
    "/lib",
    "/lib64",
    "/lib32",
    "/usr/lib",
    "/usr/lib64",
    "/usr/lib32",
    "/usr/local/lib",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/sys/devices/system/cpu",
];

/// What the sandbox allows. Reading only beneath `readable_paths`, `writable_dirs` and
/// `ALWAYS_READABLE`; writing only beneath `writable_dirs` (and `/dev/null`); network, exec
/// and new processes never (threads are allowed); no capabilities. See the
/// module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Directories the engine may write beneath: its state directory, its workspace. Each must
    /// exist.
    pub writable_dirs: Vec<PathBuf>,
    /// Paths the engine may read (a folder: everything beneath it): its library, its plugin
    /// folder, the operator's `sandbox.readPaths`. A path that does not exist is skipped.
    pub readable_paths: Vec<PathBuf>,
    /// The limits [`apply_sandbox`] applies (reported as `Protections::limits`).
    pub limits: WorkerLimits,
    /// Whether `connect(2)` stays allowed (only Unix sockets can be created, so this is about
    /// the user's Unix sockets: a gateway, D-Bus, `docker.sock` as root). Default `false`:
    /// `connect` answers `EPERM`, and the worker connects to the host before confining itself
    /// or inherits the connection.
    pub allow_connect: bool,
}

/// The state of one protection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Protection {
    /// In force (from [`available_protections`]: a probe process put it in force).
    Active {
        /// What exactly is in force (empty when nothing more is to be said).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        detail: String,
    },
    /// This kernel or OS does not provide it.
    Unavailable {
        /// Why, for people.
        reason: String,
    },
    /// It should have worked and did not.
    Failed {
        /// The error.
        error: String,
    },
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Protection {
    fn active(detail: impl Into<String>) -> Self {
        Protection::Active {
            detail: detail.into(),
        }
    }

    fn unavailable(reason: impl Into<String>) -> Self {
        Protection::Unavailable {
            reason: reason.into(),
        }
    }

    fn failed(error: impl fmt::Display) -> Self {
        Protection::Failed {
            error: error.to_string(),
        }
    }

    fn not_reported() -> Self {
        Protection::unavailable("not reported")
    }

    /// Whether it is in force.
    pub fn is_active(&self) -> bool {
        matches!(self, Protection::Active { .. })
    }
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protection::Active { detail } if detail.is_empty() => f.write_str("active"),
            Protection::Active { detail } => write!(f, "active ({detail})"),
            Protection::Unavailable { reason } => write!(f, "unavailable — {reason}"),
            Protection::Failed { error } => write!(f, "failed — {error}"),
        }
    }
}

/// Which protections are in force (from [`apply_sandbox`]) or available (from
/// [`available_protections`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protections {
    /// `PR_SET_NO_NEW_PRIVS`: no set-uid/file-capability gain, a precondition of the others.
    pub no_new_privs: Protection,
    /// The seccomp filter (network, exec, new processes and the rest refused).
    pub seccomp: Protection,
    /// Landlock (reads only beneath the readable paths, writes only beneath the writable
    /// directories).
    pub landlock: Protection,
    /// Every capability dropped: bounding, ambient, effective, permitted and inheritable sets
    /// (a worker of a root host keeps root's uid, not its powers).
    #[serde(default = "Protection::not_reported")]
    pub capabilities: Protection,
    /// The Landlock ABI version enforced, when Landlock is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
    /// The resource limits.
    pub limits: Protection,
}

impl Protections {
    fn all(protection: Protection) -> Self {
        Protections {
            no_new_privs: protection.clone(),
            seccomp: protection.clone(),
            landlock: protection.clone(),
            landlock_abi: None,
            capabilities: protection.clone(),
            limits: protection,
        }
    }

    /// Each protection with its name (`no_new_privs`, `seccomp`, `landlock`, `capabilities`,
    /// `limits`).
    pub fn entries(&self) -> [(&'static str, &Protection); 5] {
        [
            ("no_new_privs", &self.no_new_privs),
            ("seccomp", &self.seccomp),
            ("landlock", &self.landlock),
            ("capabilities", &self.capabilities),
            ("limits", &self.limits),
        ]
    }

    /// Whether every protection is in force.
    pub fn all_active(&self) -> bool {
        self.entries().iter().all(|(_, p)| p.is_active())
    }

    /// One line per protection that is not in force, saying what an isolated engine can then
    /// do: `landlock: unavailable — kernel lacks it; isolated engines can write anywhere the
    /// user can`.
    pub fn missing(&self) -> Vec<String> {
        self.entries()
            .iter()
            .filter(|(_, p)| !p.is_active())
            .map(|(name, p)| {
                let consequence = match *name {
                    "no_new_privs" => "isolated engines may gain privileges through set-uid programs",
                    "seccomp" => "isolated engines can open network sockets, run programs and start processes",
                    "landlock" => "isolated engines can read and write anywhere the user can (a worker refuses to start unless its entry sets sandbox.allowWeak)",
                    "capabilities" => "an isolated engine of a root host keeps root's capabilities",
                    _ => "isolated engines can use as much memory and as many files as the user can",
                };
                format!("{name}: {p}; {consequence}")
            })
            .collect()
    }
}

impl fmt::Display for Protections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, protection)) in self.entries().iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{name}: {protection}")?;
            if *name == "landlock" {
                if let Some(abi) = self.landlock_abi {
                    write!(f, " [ABI {abi}]")?;
                }
            }
        }
        Ok(())
    }
}

/// Why confinement could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// This OS has none of these mechanisms.
    #[error(
        "process confinement is unsupported on this OS ({0}); isolated engines run unconfined"
    )]
    Unsupported(&'static str),
    /// A resource limit could not be set.
    #[error("could not set {resource} to {value}: {source}")]
    Limit {
        /// The resource (`RLIMIT_AS`, …).
        resource: &'static str,
        /// The value asked for.
        value: u64,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The policy names a writable directory that is not one.
    #[error("the sandbox's writable directory {path} is not a directory: {reason}; create it before confining the worker")]
    NotADirectory {
        /// The path.
        path: PathBuf,
        /// What was found.
        reason: String,
    },
}

impl ConfineError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            ConfineError::Unsupported(_) => "confinement_unsupported",
            ConfineError::Limit { .. } => "limit_failed",
            ConfineError::NotADirectory { .. } => "writable_dir_missing",
        }
    }
}

/// Applies `limits` to the calling process (soft and hard limit, never raising one). On an OS
/// other than Linux: [`ConfineError::Unsupported`].
pub fn apply_limits(limits: &WorkerLimits) -> Result<(), ConfineError> {
    imp::apply_limits(limits).map(|_| ())
}

/// Confines the calling process (irreversibly), following `policy`; see the
/// module docs for what it allows and in which order it is applied. Called once in
/// the worker, possibly after it started threads of its own (seccomp covers them all).
///
/// Returns which protections are now in force; a protection this kernel lacks is reported
/// `Protection::Unavailable`, not an error. `Err` only for a policy that cannot be applied
/// as written (a writable directory that does not exist), before anything is changed. On an
/// OS other than Linux every protection is unavailable.
pub fn apply_sandbox(policy: &SandboxPolicy) -> Result<Protections, ConfineError> {
    imp::apply_sandbox(policy)
}

/// Which protections [`apply_sandbox`] would put in force on this machine, for `pincer
/// doctor`, **without** confining the calling process: a short-lived child process (`fork`)
/// applies the whole sandbox, reports, then makes a refused call to prove the filter traps.
pub fn available_protections() -> Protections {
    imp::available_protections()
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    const REASON: &str = "unsupported on this OS (Linux only)";

    pub(super) fn apply_limits(_: &WorkerLimits) -> Result<Protection, ConfineError> {
        Err(ConfineError::Unsupported(std::env::consts::OS))
    }

    pub(super) fn apply_sandbox(_: &SandboxPolicy) -> Result<Protections, ConfineError> {
        Ok(Protections::all(Protection::unavailable(REASON)))
    }

    pub(super) fn available_protections() -> Protections {
        Protections::all(Protection::unavailable(REASON))
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::time::{Duration, Instant};

    pub(super) fn apply_limits(limits: &WorkerLimits) -> Result<Protection, ConfineError> {
        let mut set = Vec::new();
        for (resource, name, value) in [
            (libc::RLIMIT_AS, "RLIMIT_AS", limits.memory_bytes),
            (libc::RLIMIT_NOFILE, "RLIMIT_NOFILE", limits.open_files),
            (libc::RLIMIT_STACK, "RLIMIT_STACK", limits.stack_bytes),
            (libc::RLIMIT_CORE, "RLIMIT_CORE", limits.core_bytes),
            (libc::RLIMIT_FSIZE, "RLIMIT_FSIZE", limits.file_size_bytes),
        ] {
            let Some(value) = value else { continue };
            let mut current = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: a valid out-pointer.
            if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
                return Err(ConfineError::Limit {
                    resource: name,
                    value,
                    source: std::io::Error::last_os_error(),
                });
            }
            // Only ever lower: an inherited hard limit below ours stays.
            let new = (value as libc::rlim_t).min(current.rlim_max);
            let limit = libc::rlimit {
                rlim_cur: new,
                rlim_max: new,
            };
            // SAFETY: a valid in-pointer.
            if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                return Err(ConfineError::Limit {
                    resource: name,
                    value,
                    source: std::io::Error::last_os_error(),
                });
            }
            set.push(format!("{name}={new}"));
        }
        Ok(Protection::active(if set.is_empty() {
            "none configured".to_owned()
        } else {
            set.join(" ")
        }))
    }

    pub(super) fn apply_sandbox(policy: &SandboxPolicy) -> Result<Protections, ConfineError> {
        for dir in &policy.writable_dirs {
            match std::fs::metadata(dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(ConfineError::NotADirectory {
                        path: dir.clone(),
                        reason: "not a directory".into(),
                    })
                }
                Err(err) => {
                    return Err(ConfineError::NotADirectory {
                        path: dir.clone(),
                        reason: err.to_string(),
                    })
                }
            }
        }
        // SAFETY: plain prctl.
        let no_new_privs = if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0 {
            Protection::active("")
        } else {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                Protection::unavailable("the kernel lacks PR_SET_NO_NEW_PRIVS (before Linux 3.5)")
            } else {
                Protection::failed(err)
            }
        };
        let limits = match apply_limits(&policy.limits) {
            Ok(p) => p,
            Err(err) => Protection::failed(err),
        };
        let capabilities = drop_capabilities();
        let (landlock, landlock_abi) = landlock_restrict(policy);
        let seccomp = seccomp_install(policy);
        Ok(Protections {
            no_new_privs,
            seccomp,
            landlock,
            landlock_abi,
            capabilities,
            limits,
        })
    }

    // ---- capabilities ------------------------------------------------------------------

    /// The capability sets of this process from `/proc/self/status`: `CapInh`, `CapPrm`,
    /// `CapEff`, `CapBnd`, `CapAmb`, as hexadecimal masks.
    fn capability_sets() -> Result<Vec<(String, u64)>, String> {
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|e| format!("/proc/self/status: {e}"))?;
        Ok(status
            .lines()
            .filter_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.starts_with("Cap")
                    .then(|| u64::from_str_radix(value.trim(), 16).ok())
                    .flatten()
                    .map(|v| (name.to_owned(), v))
            })
            .collect())
    }

    /// Drops every capability: the ambient set, the bounding set (needs `CAP_SETPCAP`, which
    /// only a privileged process has — an unprivileged one holds nothing to drop), then the
    /// effective, permitted and inheritable sets. Verified from `/proc/self/status`.
    fn drop_capabilities() -> Protection {
        #[repr(C)]
        struct CapHeader {
            version: u32,
            pid: libc::c_int,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct CapData {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
        // SAFETY: plain prctl calls.
        unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            );
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) == 1 {
                    libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
                }
            }
        }
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        // SAFETY: a version-3 header and two data words, as capset(2) reads them.
        if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
            return Protection::failed(format!("capset: {}", std::io::Error::last_os_error()));
        }
        let sets = match capability_sets() {
            Ok(sets) => sets,
            Err(err) => return Protection::failed(err),
        };
        let held: Vec<String> = sets
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(name, v)| format!("{name} {v:016x}"))
            .collect();
        // SAFETY: no arguments.
        let privileged = unsafe { libc::geteuid() } == 0;
        match held.as_slice() {
            [] => Protection::active("none held, bounding set empty"),
            [only] if only.starts_with("CapBnd") && !privileged => Protection::active(
                "none held (the bounding set stays: an unprivileged process cannot shrink it, and exec is refused)",
            ),
            _ => Protection::failed(format!("still held: {}", held.join(", "))),
        }
    }

    // ---- Landlock ----------------------------------------------------------------------

    /// The kernel's Landlock ABI version, asked without creating anything.
    fn landlock_kernel_abi() -> Result<i64, std::io::Error> {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: with this flag the kernel reads no pointer and returns the ABI version.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        if abi < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(abi)
        }
    }

    fn landlock_missing_reason(err: &std::io::Error) -> String {
        match err.raw_os_error() {
            Some(libc::ENOSYS) => {
                "kernel lacks it (not built with CONFIG_SECURITY_LANDLOCK)".into()
            }
            Some(libc::EOPNOTSUPP) => {
                "kernel lacks it (built in but not enabled at boot: add landlock to lsm=)".into()
            }
            _ => format!("kernel lacks it ({err})"),
        }
    }

    fn thread_count() -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|d| d.count())
            .unwrap_or(1)
    }

    /// The path of this process's own cgroup beneath `/sys/fs/cgroup` (cgroup v2), whose
    /// `cpu.max` the Rust runtime reads for the CPU count.
    fn own_cgroup_dir() -> Option<PathBuf> {
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
        Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')))
    }

    /// What every confined worker may read: see [`ALWAYS_READABLE`]; the zone file
    /// `/etc/localtime` points to; this process's own cgroup folder; and `/proc/self` (the
    /// folder of this process: Landlock resolves the link, so no other process's entries).
    fn always_readable() -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = ALWAYS_READABLE.iter().map(PathBuf::from).collect();
        if let Ok(zone) = std::fs::canonicalize("/etc/localtime") {
            paths.push(zone);
        }
        paths.extend(own_cgroup_dir());
        paths
    }

    fn landlock_restrict(policy: &SandboxPolicy) -> (Protection, Option<u32>) {
        use landlock::{
            Access, AccessFs, AccessNet, BitFlags, LandlockStatus, PathBeneath, PathFd,
            RestrictSelfAttr, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
        };
        if let Err(err) = landlock_kernel_abi() {
            return (Protection::unavailable(landlock_missing_reason(&err)), None);
        }
        let threads = thread_count();
        // The newest ABI this crate knows; best effort drops what the kernel lacks.
        let abi = ABI::V9;
        // Every file-system right is handled: what no rule grants is refused, reads included.
        let handled = AccessFs::from_all(abi);
        let write = AccessFs::from_all(abi) & !AccessFs::Execute;
        let read = AccessFs::ReadFile | AccessFs::ReadDir;
        let mut granted = 0usize;
        let result = (|| -> Result<landlock::RestrictionStatus, String> {
            let text = |e: landlock::RulesetError| e.to_string();
            let mut ruleset = Ruleset::default()
                .handle_access(handled)
                .map_err(text)?
                .handle_access(AccessNet::from_all(abi))
                .map_err(text)?
                .scope(Scope::from_all(abi))
                .map_err(text)?
                .create()
                .map_err(text)?;
            // A rule on a file carries the rights a file can have only (else the crate
            // reports the ruleset as partly enforced).
            let rule = |fd: PathFd, rights: BitFlags<AccessFs>| {
                let is_dir = {
                    use std::os::fd::AsFd;
                    let dup = fd.as_fd().try_clone_to_owned();
                    dup.ok()
                        .map(std::fs::File::from)
                        .and_then(|f| f.metadata().ok())
                        .is_some_and(|m| m.is_dir())
                };
                let rights = if is_dir {
                    rights
                } else {
                    rights & AccessFs::from_file(abi)
                };
                PathBeneath::new(fd, rights)
            };
            for dir in &policy.writable_dirs {
                let fd = PathFd::new(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                ruleset = ruleset.add_rule(rule(fd, write)).map_err(text)?;
                granted += 1;
            }
            // /proc/self: the descriptor stays open for the life of the process, so the
            // folder the rule names stays the one in use (procfs makes a new one for a
            // lookup once the old one is dropped from the cache).
            if let Ok(fd) = PathFd::new("/proc/self") {
                use std::os::fd::AsFd;
                if let Ok(pinned) = fd.as_fd().try_clone_to_owned() {
                    std::mem::forget(pinned);
                }
                ruleset = ruleset.add_rule(rule(fd, read)).map_err(text)?;
                granted += 1;
            }
            for path in always_readable().iter().chain(&policy.readable_paths) {
                // A path that does not exist here is nothing to grant.
                let Ok(fd) = PathFd::new(path) else { continue };
                let rights = if path == Path::new("/dev/null") {
                    read | AccessFs::WriteFile | AccessFs::Truncate
                } else {
                    read
                };
                ruleset = ruleset.add_rule(rule(fd, rights)).map_err(text)?;
                granted += 1;
            }
            ruleset
                .all_threads(true)
                .map_err(text)?
                .restrict_self()
                .map_err(text)
        })();
        match result {
            Err(err) => (Protection::failed(err), None),
            Ok(status) => {
                let effective = match status.landlock {
                    LandlockStatus::Available { effective_abi, .. } => Some(effective_abi as u32),
                    _ => None,
                };
                match status.ruleset {
                    RulesetStatus::NotEnforced => (
                        Protection::unavailable(
                            "kernel lacks it (Landlock reports nothing enforced)",
                        ),
                        None,
                    ),
                    enforced => {
                        let mut detail = match enforced {
                            RulesetStatus::FullyEnforced => "fully enforced".to_owned(),
                            _ => {
                                let abi = effective.unwrap_or(0);
                                let lacking: Vec<&str> = [
                                    (2, "renames across directories"),
                                    (3, "truncation"),
                                    (4, "TCP (seccomp still refuses sockets)"),
                                    (5, "device ioctls"),
                                    (6, "signal and abstract-socket scoping"),
                                    (9, "path-name Unix socket connections"),
                                ]
                                .into_iter()
                                .filter(|(needs, _)| abi < *needs)
                                .map(|(_, what)| what)
                                .collect();
                                format!(
                                    "partially enforced: this kernel's ABI {abi} does not confine {}",
                                    lacking.join(", ")
                                )
                            }
                        };
                        detail.push_str(&format!(
                            "; reads and writes confined to {granted} granted paths"
                        ));
                        if !status.all_threads && threads > 1 {
                            detail.push_str(&format!(
                                "; {} thread(s) started before confinement are not confined by Landlock",
                                threads - 1
                            ));
                        }
                        (Protection::active(detail), effective)
                    }
                }
            }
        }
    }

    // ---- seccomp -----------------------------------------------------------------------

    /// A refused call: its number, its name, and when only some uses are refused, the
    /// condition under which it is (the call is refused when the condition holds).
    struct Refusal {
        nr: libc::c_long,
        name: &'static str,
        when: When,
    }

    enum When {
        Always,
        /// Argument `index` (32 bits) differs from `value`.
        ArgNe(u8, u64),
        /// Argument `index` (32 bits) equals `value`.
        ArgEq(u8, u64),
        /// Argument `index` (64 bits) has none of the bits of `mask`.
        ArgLacks(u8, u64),
        /// Argument `index` (64 bits) is not zero.
        ArgNonZero(u8),
        /// Argument `index` (32 bits) is not this process's id (filled in at install time).
        ArgNotSelf(u8),
    }

    macro_rules! refusals {
        ($($nr:ident $(if $when:expr)?),* $(,)?) => {
            &[$(Refusal {
                nr: libc::$nr,
                name: refusal_name(stringify!($nr)),
                when: refusals!(@when $($when)?),
            }),*]
        };
        (@when) => { When::Always };
        (@when $when:expr) => { $when };
    }

    const fn refusal_name(constant: &'static str) -> &'static str {
        // "SYS_execve" -> "execve"
        let (_, name) = constant.as_bytes().split_at(4);
        match std::str::from_utf8(name) {
            Ok(name) => name,
            Err(_) => constant,
        }
    }

    #[cfg(target_arch = "x86_64")]
    const ARCH_REFUSALS: &[Refusal] = refusals![
        SYS_fork,
        SYS_vfork,
        SYS_iopl,
        SYS_ioperm,
        SYS_setrlimit if When::Always,
        SYS_umount2,
    ];
    #[cfg(target_arch = "aarch64")]
    const ARCH_REFUSALS: &[Refusal] = refusals![SYS_setrlimit, SYS_umount2];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const ARCH_REFUSALS: &[Refusal] = &[];

    /// Calls answered `EPERM` (the engine goes on): changes of a file's mode, owner or extended
    /// attributes, which Landlock does not cover — as root, `fchmod` through a read-only
    /// descriptor of `/etc/shadow`, or a `security.capability` attribute on a program, would be
    /// escapes. Refused softly because SQLite `fchown`s and `fchmod`s its journal files as root
    /// and ignores a failure.
    fn denied_softly(policy: &SandboxPolicy) -> Vec<libc::c_long> {
        // New calls share one number on every architecture.
        const SYS_FCHMODAT2: libc::c_long = 452;
        const SYS_SETXATTRAT: libc::c_long = 463;
        const SYS_REMOVEXATTRAT: libc::c_long = 466;
        let mut calls = vec![
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            SYS_FCHMODAT2,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            SYS_SETXATTRAT,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            SYS_REMOVEXATTRAT,
        ];
        #[cfg(target_arch = "x86_64")]
        calls.extend([libc::SYS_chmod, libc::SYS_chown, libc::SYS_lchown]);
        if !policy.allow_connect {
            calls.push(libc::SYS_connect);
        }
        calls
    }

    // The casts are no-ops on 64-bit targets only.
    #[allow(clippy::unnecessary_cast)]
    const REFUSALS: &[Refusal] = refusals![
        SYS_socket if When::ArgNe(0, libc::AF_UNIX as u64),
        SYS_execve,
        SYS_execveat,
        SYS_clone if When::ArgLacks(0, libc::CLONE_THREAD as u64),
        SYS_ptrace,
        SYS_process_vm_readv,
        SYS_process_vm_writev,
        SYS_pidfd_open,
        SYS_pidfd_getfd,
        SYS_pidfd_send_signal,
        SYS_kill if When::ArgNotSelf(0),
        SYS_tgkill if When::ArgNotSelf(0),
        SYS_rt_sigqueueinfo if When::ArgNotSelf(0),
        SYS_rt_tgsigqueueinfo if When::ArgNotSelf(0),
        SYS_tkill,
        SYS_mount,
        SYS_move_mount,
        SYS_open_tree,
        SYS_fsopen,
        SYS_fsconfig,
        SYS_fsmount,
        SYS_fspick,
        SYS_mount_setattr,
        SYS_pivot_root,
        SYS_chroot,
        SYS_unshare,
        SYS_setns,
        SYS_bpf,
        SYS_perf_event_open,
        SYS_userfaultfd,
        SYS_io_uring_setup,
        SYS_io_uring_enter,
        SYS_io_uring_register,
        SYS_keyctl,
        SYS_add_key,
        SYS_request_key,
        SYS_init_module,
        SYS_finit_module,
        SYS_delete_module,
        SYS_kexec_load,
        SYS_kexec_file_load,
        SYS_reboot,
        SYS_swapon,
        SYS_swapoff,
        SYS_settimeofday,
        SYS_clock_settime,
        SYS_clock_adjtime,
        SYS_acct,
        SYS_quotactl,
        SYS_open_by_handle_at,
        SYS_personality if When::ArgNe(0, 0xffff_ffff),
        SYS_prlimit64 if When::ArgNonZero(2),
        SYS_ioctl if When::ArgEq(1, libc::TIOCSTI as u64),
        SYS_ioctl if When::ArgEq(1, libc::TIOCLINUX as u64),
    ];

    /// The name of a refused call, for the `SIGSYS` handler (no allocation).
    fn refused_name(nr: libc::c_long) -> Option<&'static str> {
        if nr == libc::SYS_clone3 {
            return Some("clone3");
        }
        REFUSALS
            .iter()
            .chain(ARCH_REFUSALS)
            .find(|r| r.nr == nr)
            .map(|r| r.name)
    }

    #[cfg(target_arch = "x86_64")]
    const TARGET: Option<seccompiler::TargetArch> = Some(seccompiler::TargetArch::x86_64);
    #[cfg(target_arch = "aarch64")]
    const TARGET: Option<seccompiler::TargetArch> = Some(seccompiler::TargetArch::aarch64);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const TARGET: Option<seccompiler::TargetArch> = None;

    /// The programs to install, in order.
    #[allow(clippy::unnecessary_cast)] // no-ops on 64-bit targets only
    fn seccomp_programs(policy: &SandboxPolicy) -> Result<Vec<seccompiler::BpfProgram>, String> {
        use seccompiler::{
            SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond,
            SeccompFilter, SeccompRule,
        };
        let Some(arch) = TARGET else {
            return Err(format!(
                "no filter is written for this architecture ({})",
                std::env::consts::ARCH
            ));
        };
        let own_pid = std::process::id() as u64;
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for refusal in REFUSALS.iter().chain(ARCH_REFUSALS) {
            let condition = match refusal.when {
                When::Always => None,
                When::ArgNe(i, v) => Some(Cond::new(i, Len::Dword, Op::Ne, v)),
                When::ArgEq(i, v) => Some(Cond::new(i, Len::Dword, Op::Eq, v)),
                When::ArgLacks(i, mask) => Some(Cond::new(i, Len::Qword, Op::MaskedEq(mask), 0)),
                When::ArgNonZero(i) => Some(Cond::new(i, Len::Qword, Op::Ne, 0)),
                When::ArgNotSelf(i) => Some(Cond::new(i, Len::Dword, Op::Ne, own_pid)),
            };
            let entry = rules.entry(refusal.nr as i64).or_default();
            match condition {
                None => entry.clear(), // unconditional: an empty chain matches always
                Some(condition) => {
                    let rule = SeccompRule::new(vec![condition.map_err(|e| e.to_string())?])
                        .map_err(|e| e.to_string())?;
                    entry.push(rule);
                }
            }
        }
        let trap: seccompiler::BpfProgram =
            SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Trap, arch)
                .map_err(|e| e.to_string())?
                .try_into()
                .map_err(|e: seccompiler::BackendError| e.to_string())?;
        // clone3 passes its flags in a struct seccomp cannot read: answer ENOSYS, and glibc
        // falls back to clone (whose flags the filter above checks).
        let clone3: seccompiler::BpfProgram = SeccompFilter::new(
            [(libc::SYS_clone3 as i64, vec![])].into_iter().collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .map_err(|e| e.to_string())?
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
        let soft: seccompiler::BpfProgram = SeccompFilter::new(
            denied_softly(policy)
                .into_iter()
                .map(|nr| (nr as i64, vec![]))
                .collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .map_err(|e| e.to_string())?
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
        let mut programs = vec![clone3, soft, trap];
        #[cfg(target_arch = "x86_64")]
        programs.push(x32_killer());
        Ok(programs)
    }

    /// On x86-64 the x32 ABI shares the architecture value and sets bit 30 of the call
    /// number; numbers from it would slip past the table above, so they kill the process.
    #[cfg(target_arch = "x86_64")]
    fn x32_killer() -> seccompiler::BpfProgram {
        use seccompiler::sock_filter;
        const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
        const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
        const BPF_RET_K: u16 = 0x06;
        vec![
            // A = seccomp_data.nr (offset 0)
            sock_filter {
                code: BPF_LD_W_ABS,
                jt: 0,
                jf: 0,
                k: 0,
            },
            sock_filter {
                code: BPF_JMP_JGE_K,
                jt: 0,
                jf: 1,
                k: 0x4000_0000,
            },
            sock_filter {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_KILL_PROCESS,
            },
            sock_filter {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ALLOW,
            },
        ]
    }

    /// The `siginfo_t` of a `SIGSYS` on a 64-bit Linux: the `_sigsys` member of the union.
    #[repr(C)]
    struct SigsysInfo {
        signo: libc::c_int,
        errno: libc::c_int,
        code: libc::c_int,
        _pad: libc::c_int,
        call_addr: *mut libc::c_void,
        syscall: libc::c_int,
        arch: libc::c_uint,
    }

    /// Async-signal-safe: stack buffer, `write(2)`, `_exit(2)`.
    extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        let nr = if info.is_null() {
            -1
        } else {
            // SAFETY: the kernel hands a SIGSYS siginfo whose union is `_sigsys`.
            unsafe { (*(info as *const SigsysInfo)).syscall as libc::c_long }
        };
        let mut buf = [0u8; 128];
        let mut len = 0;
        let mut push = |bytes: &[u8]| {
            let n = bytes.len().min(buf.len() - len);
            buf[len..len + n].copy_from_slice(&bytes[..n]);
            len += n;
        };
        push(SANDBOX_VIOLATION_PREFIX.as_bytes());
        match refused_name(nr) {
            Some(name) => push(name.as_bytes()),
            None => {
                push(b"nr=");
                let mut digits = [0u8; 20];
                let mut i = digits.len();
                let negative = nr < 0;
                let mut n = nr.unsigned_abs();
                loop {
                    i -= 1;
                    digits[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                if negative {
                    push(b"-");
                }
                push(&digits[i..]);
            }
        }
        push(b"\n");
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, buf.as_ptr().cast(), len);
            libc::_exit(SANDBOX_VIOLATION_STATUS);
        }
    }

    fn install_sigsys_handler() -> std::io::Result<()> {
        // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigsys as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Whether this kernel has seccomp filters with the trap action, asked without installing
    /// anything.
    fn seccomp_trap_supported() -> Result<(), String> {
        const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
        let action: u32 = libc::SECCOMP_RET_TRAP;
        // SAFETY: the kernel reads one u32.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_GET_ACTION_AVAIL,
                0,
                &action as *const u32,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        Err(match err.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EINVAL) => {
                "kernel lacks it (built without CONFIG_SECCOMP_FILTER)".to_owned()
            }
            Some(libc::EOPNOTSUPP) => "kernel lacks the trap action".to_owned(),
            _ => format!("kernel lacks it ({err})"),
        })
    }

    fn seccomp_install(policy: &SandboxPolicy) -> Protection {
        if let Err(reason) = seccomp_trap_supported() {
            return Protection::unavailable(reason);
        }
        let programs = match seccomp_programs(policy) {
            Ok(p) => p,
            Err(reason) => return Protection::unavailable(reason),
        };
        if let Err(err) = install_sigsys_handler() {
            return Protection::failed(format!("installing the SIGSYS handler: {err}"));
        }
        for program in &programs {
            if let Err(err) = seccompiler::apply_filter_all_threads(program) {
                return Protection::failed(err);
            }
        }
        Protection::active(format!(
            "on every thread ({} now); {} trap rules, {} calls answered EPERM, clone3 ENOSYS",
            thread_count(),
            REFUSALS.len() + ARCH_REFUSALS.len(),
            denied_softly(policy).len()
        ))
    }

    // ---- the probe ---------------------------------------------------------------------

    /// The probe child's status when its own code panicked.
    const PROBE_PANICKED: i32 = 3;

    /// How long `doctor` waits for the probe process.
    const PROBE_DEADLINE: Duration = Duration::from_secs(10);

    pub(super) fn available_protections() -> Protections {
        match probe() {
            Ok(p) => p,
            Err(err) => Protections::all(Protection::failed(format!("the probe process: {err}"))),
        }
    }

    fn probe() -> Result<Protections, String> {
        let mut fds = [0; 2];
        // SAFETY: a valid two-int array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fresh descriptors we own.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let dev_null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .map_err(|e| format!("/dev/null: {e}"))?;
        let policy = SandboxPolicy::default();
        // Built before fork: the child only applies and reports.
        // SAFETY: the child runs only our code below and ends in _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            use std::os::fd::AsRawFd;
            // The child: its stderr goes nowhere (the refused call's line is expected).
            // SAFETY: plain descriptor calls.
            unsafe { libc::dup2(dev_null.as_raw_fd(), 2) };
            drop(read_end);
            // Never unwind out of here: that would run the rest of the caller a second time,
            // in this copy of the process.
            let reported = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let report = match apply_sandbox(&policy) {
                    Ok(p) => serde_json::to_vec(&p).unwrap_or_default(),
                    Err(err) => format!("!{err}").into_bytes(),
                };
                let mut pipe = std::fs::File::from(write_end);
                let _ = pipe.write_all(&report);
            }));
            // SAFETY: a plain system call, then _exit (no destructors, no atexit of the
            // parent's copy).
            unsafe {
                if reported.is_err() {
                    libc::_exit(PROBE_PANICKED);
                }
                // The filter must trap this: the handler ends the process with status 121.
                libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                libc::_exit(0);
            }
        }
        drop(write_end);
        drop(dev_null);
        let deadline = Instant::now() + PROBE_DEADLINE;
        let mut report = Vec::new();
        let mut pipe = std::fs::File::from(read_end);
        let read = read_until(&mut pipe, &mut report, deadline);
        let status = wait_until(pid, deadline);
        read?;
        // `None`: the child was reaped elsewhere (SIGCHLD ignored); the trap goes unverified.
        let status = status?;
        if let Some(message) = report.strip_prefix(b"!") {
            return Err(String::from_utf8_lossy(message).into_owned());
        }
        let mut protections: Protections = serde_json::from_slice(&report).map_err(|e| {
            format!(
                "it ended ({}) without a report ({e})",
                status.map_or_else(|| "status unknown".to_owned(), describe_status)
            )
        })?;
        match status {
            Some(status)
                if protections.seccomp.is_active()
                    && !(libc::WIFEXITED(status)
                        && libc::WEXITSTATUS(status) == SANDBOX_VIOLATION_STATUS) =>
            {
                protections.seccomp = Protection::failed(format!(
                    "the filter was installed but socket(AF_INET) was not refused as expected (probe {})",
                    describe_status(status)
                ));
            }
            None => {
                if let Protection::Active { detail } = &mut protections.seccomp {
                    detail.push_str("; the trap itself was not verified (SIGCHLD is ignored)");
                }
            }
            Some(_) => {}
        }
        Ok(protections)
    }

    fn describe_status(status: libc::c_int) -> String {
        if libc::WIFEXITED(status) {
            format!("exited with status {}", libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            format!("killed by signal {}", libc::WTERMSIG(status))
        } else {
            format!("wait status {status}")
        }
    }

    fn read_until(
        pipe: &mut std::fs::File,
        out: &mut Vec<u8>,
        deadline: Instant,
    ) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("no answer in time".into());
            }
            let mut poll = libc::pollfd {
                fd: pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut poll, 1, left.as_millis().min(1000) as libc::c_int) };
            if rc < 0 {
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("poll: {err}"));
            }
            if rc == 0 {
                continue;
            }
            match pipe.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(format!("read: {err}")),
            }
        }
    }

    fn wait_until(pid: libc::pid_t, deadline: Instant) -> Result<Option<libc::c_int>, String> {
        let mut status = 0;
        loop {
            // SAFETY: our own child.
            let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if rc == pid {
                return Ok(Some(status));
            }
            if rc < 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::ECHILD) {
                    return Ok(None);
                }
                return Err(format!("waitpid: {err}"));
            }
            if Instant::now() >= deadline {
                // SAFETY: our own child, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return Err("it did not finish in time".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_refused_call_has_its_name() {
            for r in REFUSALS.iter().chain(ARCH_REFUSALS) {
                assert!(!r.name.starts_with("SYS_"), "{}", r.name);
                assert_eq!(refused_name(r.nr), Some(r.name));
            }
            assert_eq!(refused_name(libc::SYS_socket), Some("socket"));
            assert_eq!(refused_name(libc::SYS_read), None);
        }

        #[test]
        fn the_filters_compile() {
            let programs = seccomp_programs(&SandboxPolicy::default()).unwrap();
            assert!(programs.iter().all(|p| !p.is_empty()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_from_config_with_defaults_and_null() {
        let limits: WorkerLimits =
            serde_json::from_str(r#"{"openFiles": 64, "memoryBytes": null}"#).unwrap();
        assert_eq!(limits.open_files, Some(64));
        assert_eq!(limits.memory_bytes, None);
        assert_eq!(limits.stack_bytes, Some(8 << 20));
        assert_eq!(limits.core_bytes, Some(0));
        assert_eq!(WorkerLimits::default().memory_bytes, Some(4 << 30));
    }

    #[test]
    fn protections_serialize_and_say_what_is_missing() {
        let p = Protections {
            no_new_privs: Protection::active(""),
            seccomp: Protection::active("x"),
            landlock: Protection::unavailable("kernel lacks it"),
            landlock_abi: None,
            capabilities: Protection::active(""),
            limits: Protection::failed("boom"),
        };
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["landlock"]["state"], "unavailable");
        assert_eq!(json["noNewPrivs"]["state"], "active");
        assert_eq!(json["limits"]["error"], "boom");
        let missing = p.missing();
        assert_eq!(
            missing[0],
            "landlock: unavailable — kernel lacks it; isolated engines can read and write anywhere the user can (a worker refuses to start unless its entry sets sandbox.allowWeak)"
        );
        assert_eq!(missing.len(), 2);
        assert_eq!(
            serde_json::from_value::<Protections>(json).unwrap(),
            p,
            "round trip"
        );
    }
}
