//! Who holds a session file's lock: the process `/proc/locks` names for the file's inode, and
//! whether it is a gateway (`pincer serve`), so that a refused writer can say what to do.
//! Linux only; elsewhere, and when the holder cannot be seen, nothing is known.

use std::path::Path;

/// The process holding a file's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// Its process id.
    pub pid: u32,
    /// Its command line, arguments joined with spaces.
    pub command: String,
    /// Whether it is a gateway (`pincer serve`).
    pub gateway: bool,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.gateway {
            write!(
                f,
                "a gateway holds it while it serves the session (pid {}: {}): send the \
                 session's calls to that gateway (`pincer client --socket …`), or stop it first",
                self.pid, self.command
            )
        } else {
            write!(f, "pid {}: {}", self.pid, self.command)
        }
    }
}

/// The process holding an `flock` on `path`, when `/proc/locks` shows one.
pub fn lock_holder(path: &Path) -> Option<LockHolder> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    let dev = meta.dev();
    let wanted = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid: u32 = locks.lines().find_map(|line| {
        // `1: FLOCK  ADVISORY  WRITE 14126 fe:00:6152270 0 EOF`
        let fields: Vec<&str> = line.split_whitespace().collect();
        let at = fields.iter().position(|f| *f == wanted)?;
        fields.get(at.checked_sub(1)?)?.parse().ok()
    })?;
    if pid == 0 || pid == std::process::id() {
        return None;
    }
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let gateway = args.first().is_some_and(|program| {
        Path::new(program)
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("pincer"))
    }) && args.iter().skip(1).any(|a| a == "serve");
    Some(LockHolder {
        pid,
        command: args.join(" "),
        gateway,
    })
}
