//! The one I/O seam every durable write of the host goes through: session files,
//! `sessions.json`, `pincer.json` edits, plugin installs and the plugin cache, and `state/`
//! (the quarantine mirror, the crash journal, the gateway's token).
//!
//! Each function here is the `std` operation of the same name with the file's path beside it,
//! so that [`faults`] can fail it: a test arms a [`faults::FaultPlan`] for the paths under a
//! folder of its own, and every write, sync, truncation, rename, copy, link, creation or removal
//! below that folder asks the plan first — `ENOSPC`, `EIO`, a short write, a failed `fdatasync`
//! at any call. Nothing else changes: with no plan armed (always, outside tests) each function
//! costs one relaxed atomic load before the `std` call.
//!
//! What a caller must do after a failed call is its own business, but the rules the host keeps:
//!
//! - A failed **write** may have written a prefix of the bytes (a short write, then `ENOSPC`):
//!   an appender cuts the file back to where its last complete record ended
//!   ([`set_len`]) before it writes again, or writes nothing more.
//! - A failed **sync** (`fsync`/`fdatasync`) means what reached the disk is unknown: Linux may
//!   already have dropped the dirty pages and will not report the loss again on the same file
//!   (PostgreSQL's "fsyncgate", 2018). Nothing written since the last successful sync may be
//!   acknowledged, and a writer of an append-only file stops there; a reader that opens the file
//!   afresh reads what is really there.
//! - A file replaced as a whole goes through [`replace`]: written beside, synced, renamed over,
//!   so a failure at any step leaves the old file whole.

pub mod faults;

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;

use faults::{Fault, Op};

/// Opens `path` with `options` (a creation or a truncation is a write the plan may fail).
///
/// # Errors
/// The `open` error, or the fault injected.
pub fn open(path: &Path, options: &OpenOptions) -> io::Result<File> {
    faults::fail_if(Op::Open, path)?;
    options.open(path)
}

/// Writes the whole of `bytes` to `file` (at its offset, or at its end when it was opened to
/// append). On error a prefix of `bytes` may have been written.
///
/// # Errors
/// The first write error, or the fault injected (a [`Fault::Short`] write goes on).
pub fn write_all(file: &File, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = file;
    if !faults::armed() {
        return file.write_all(bytes);
    }
    let mut rest = bytes;
    while !rest.is_empty() {
        let attempt = match faults::fault(Op::Write, path) {
            Some(Fault::Fail(errno)) => return Err(io::Error::from_raw_os_error(errno)),
            Some(Fault::Short(at_most)) => &rest[..at_most.clamp(1, rest.len())],
            None => rest,
        };
        match file.write(attempt) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// `fdatasync`: `file`'s data (and the metadata needed to read it back) on the disk.
///
/// # Errors
/// The sync error, or the fault injected.
pub fn sync_data(file: &File, path: &Path) -> io::Result<()> {
    faults::fail_if(Op::Sync, path)?;
    file.sync_data()
}

/// `fsync`: `file`'s data and metadata on the disk.
///
/// # Errors
/// The sync error, or the fault injected.
pub fn sync_all(file: &File, path: &Path) -> io::Result<()> {
    faults::fail_if(Op::Sync, path)?;
    file.sync_all()
}

/// Truncates (or extends) `file` to `len` bytes.
///
/// # Errors
/// The `ftruncate` error, or the fault injected.
pub fn set_len(file: &File, path: &Path, len: u64) -> io::Result<()> {
    faults::fail_if(Op::Truncate, path)?;
    file.set_len(len)
}

/// Creates (or truncates) `path` and writes `bytes` into it, unsynced: `std::fs::write`.
///
/// # Errors
/// As [`open`] and [`write_all`].
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = open(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )?;
    write_all(&file, path, bytes)
}

/// Replaces `path` by a file holding `bytes`, atomically: written to `temp` (beside it, in the
/// same folder, created or truncated), synced, then renamed over `path`. On any error `temp`
/// is removed and `path` is as it was.
///
/// # Errors
/// The first step that failed.
pub fn replace(path: &Path, temp: &Path, bytes: &[u8]) -> io::Result<()> {
    let result = (|| {
        let file = open(
            temp,
            OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        write_all(&file, temp, bytes)?;
        sync_all(&file, temp)?;
        rename(temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    result
}

/// Renames `from` to `to`.
///
/// # Errors
/// The `rename` error, or the fault injected (asked for `to`, and for `from` when `to` is not
/// under an armed folder).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    faults::fail_if(Op::Rename, to)?;
    faults::fail_if(Op::Rename, from)?;
    std::fs::rename(from, to)
}

/// Copies the file `from` to `to`; the bytes copied.
///
/// # Errors
/// The copy error, or the fault injected (for `to`).
pub fn copy(from: &Path, to: &Path) -> io::Result<u64> {
    faults::fail_if(Op::Copy, to)?;
    std::fs::copy(from, to)
}

/// Makes `to` a hard link to `from`.
///
/// # Errors
/// The `link` error, or the fault injected (for `to`).
pub fn hard_link(from: &Path, to: &Path) -> io::Result<()> {
    faults::fail_if(Op::Link, to)?;
    std::fs::hard_link(from, to)
}

/// Creates `path` and its missing parents.
///
/// # Errors
/// The error, or the fault injected.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    faults::fail_if(Op::CreateDir, path)?;
    std::fs::create_dir_all(path)
}

/// Creates the folder `path` as `builder` says (its mode, whether recursively).
///
/// # Errors
/// The error, or the fault injected.
pub fn create_dir_with(builder: &std::fs::DirBuilder, path: &Path) -> io::Result<()> {
    faults::fail_if(Op::CreateDir, path)?;
    builder.create(path)
}

/// Removes the file `path`.
///
/// # Errors
/// The error, or the fault injected.
pub fn remove_file(path: &Path) -> io::Result<()> {
    faults::fail_if(Op::Remove, path)?;
    std::fs::remove_file(path)
}

/// Removes the empty folder `path`.
///
/// # Errors
/// The error (the folder is not empty, say), or the fault injected.
pub fn remove_dir(path: &Path) -> io::Result<()> {
    faults::fail_if(Op::Remove, path)?;
    std::fs::remove_dir(path)
}

/// Removes the folder `path` and everything in it.
///
/// # Errors
/// The error, or the fault injected.
pub fn remove_dir_all(path: &Path) -> io::Result<()> {
    faults::fail_if(Op::Remove, path)?;
    std::fs::remove_dir_all(path)
}
