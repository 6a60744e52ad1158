//! Private, content-addressed copies of verified libraries: the only files the host ever
//! `dlopen`s.
//!
//! A copy lives at `<cache_dir>/<first 16 hex of sha256>/<file_name>`. It is written once
//! (temp file in the same folder, read-only, then published with a hard link that can
//! never replace an existing file) and never overwritten afterwards: overwriting a mapped
//! library in place crashes the process that mapped it. An existing copy is re-hashed before
//! reuse (so a copy torn by a crash is caught without paying for fsync); a copy whose content
//! is wrong is left alone and a fresh one is written beside it as `<file_name>.<8 hex>`.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::plugins::verify::{sha256_hex, VerifiedLibrary};

/// How many fresh `<file_name>.<8 hex>` names are tried before giving up.
const MAX_ALTERNATE_TRIES: u32 = 16;

/// Why a library could not be copied into the cache.
///
/// Every message is one line that says what failed and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A cache folder could not be created.
    #[error("cannot create cache folder {}: {io}; check permissions of $PINCER_HOME/cache and free disk space", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// The underlying error.
        io: io::Error,
    },
    /// The temporary copy could not be written, synced or made read-only.
    #[error("cannot write library copy {}: {io}; free disk space or check permissions of $PINCER_HOME/cache", path.display())]
    Write {
        /// The temporary file.
        path: PathBuf,
        /// The underlying error.
        io: io::Error,
    },
    /// An existing cache entry could not be inspected.
    #[error("cannot inspect cached library {}: {io}; check permissions of $PINCER_HOME/cache, or delete that entry", path.display())]
    Read {
        /// The cached file or folder.
        path: PathBuf,
        /// The underlying error.
        io: io::Error,
    },
    /// The finished copy could not be moved into place.
    #[error("cannot publish library copy at {}: {io}; check permissions of $PINCER_HOME/cache", path.display())]
    Publish {
        /// The final path.
        path: PathBuf,
        /// The underlying error.
        io: io::Error,
    },
    /// The bytes to cache do not hash to the sha256 they were verified with.
    #[error("library bytes of {} hash to {found} but were verified as {expected}; this is a host bug: verify the library again and report it", source_path.display())]
    Inconsistent {
        /// Where the bytes came from.
        source_path: PathBuf,
        /// The sha256 recorded at verification.
        expected: String,
        /// The sha256 of the bytes now.
        found: String,
    },
    /// Every candidate file name was taken by a file with other content.
    #[error("no free file name for a library copy in {} after {MAX_ALTERNATE_TRIES} tries; delete that folder and try again", dir.display())]
    NoFreeName {
        /// The cache folder of this sha256.
        dir: PathBuf,
    },
}

impl CacheError {
    /// A stable snake_case code for this error, for JSON output (e.g. `"cache_write"`).
    pub fn code(&self) -> &'static str {
        match self {
            CacheError::CreateDir { .. } => "cache_create_dir",
            CacheError::Write { .. } => "cache_write",
            CacheError::Read { .. } => "cache_read",
            CacheError::Publish { .. } => "cache_publish",
            CacheError::Inconsistent { .. } => "cache_inconsistent",
            CacheError::NoFreeName { .. } => "cache_no_free_name",
        }
    }
}

/// Copies a verified library to `cache_dir/<sha16>/<file_name>` and returns the path to load.
///
/// Only the final component of `file_name` is used. An existing identical copy is reused and
/// never rewritten (it may be mapped by a running process); an existing copy with other content
/// is left untouched and the library is written beside it as `<file_name>.<8 hex>` (an earlier
/// such copy with the right content is reused). Folders are created with mode 0700 and copies
/// are made read-only (0500) on Unix.
pub fn cache_copy(
    cache_dir: &Path,
    lib: &VerifiedLibrary,
    file_name: &str,
) -> Result<PathBuf, CacheError> {
    let bytes = &lib.bytes;
    // `verify_library` hashed exactly these bytes; hashing them again would double the cost
    // of a load for nothing.
    let sha = lib.sha256_hex.to_ascii_lowercase();
    if sha.len() != 64 || bytes.len() as u64 != lib.size {
        return Err(CacheError::Inconsistent {
            source_path: lib.source_path.clone(),
            expected: format!("{} bytes, a 64-hex sha256", lib.size),
            found: format!("{} bytes, sha256 {:?}", bytes.len(), lib.sha256_hex),
        });
    }
    let name = sanitize_file_name(file_name, &lib.source_path);
    let dir = cache_dir.join(&sha[..16]);
    create_private_dir(&dir)?;

    let primary = dir.join(&name);
    match entry_state(&primary, bytes, &sha)? {
        EntryState::Same => return Ok(primary),
        EntryState::Absent => {
            if publish(&dir, &name, &primary, bytes)? {
                return Ok(primary);
            }
            // Someone else published it meanwhile: use theirs if it is right.
            if entry_state(&primary, bytes, &sha)? == EntryState::Same {
                return Ok(primary);
            }
        }
        EntryState::Differs => {}
    }

    // The primary name holds other content: never overwrite it.
    if let Some(existing) = find_alternate(&dir, &name, bytes, &sha)? {
        return Ok(existing);
    }
    for _ in 0..MAX_ALTERNATE_TRIES {
        let alternate = dir.join(format!("{name}.{}", random_hex8()));
        if publish(&dir, &name, &alternate, bytes)? {
            return Ok(alternate);
        }
        if entry_state(&alternate, bytes, &sha)? == EntryState::Same {
            return Ok(alternate);
        }
    }
    Err(CacheError::NoFreeName { dir })
}

/// The final component of `file_name`; falls back to the source file's name, then to
/// `plugin<DLL_SUFFIX>`.
fn sanitize_file_name(file_name: &str, source_path: &Path) -> String {
    fn last_component(name: &str) -> Option<&str> {
        let last = name.rsplit(['/', '\\']).next()?.trim();
        let ok = !last.is_empty() && last != "." && last != ".." && !last.contains('\0');
        ok.then_some(last)
    }
    if let Some(name) = last_component(file_name) {
        return name.to_string();
    }
    if let Some(name) = source_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(last_component)
    {
        return name.to_string();
    }
    format!("plugin{}", std::env::consts::DLL_SUFFIX)
}

/// What a cache path holds relative to the bytes we want there.
#[derive(Debug, PartialEq, Eq)]
enum EntryState {
    Absent,
    Same,
    Differs,
}

/// Looks at `path` without following symlinks and re-hashes a regular file of the right size.
fn entry_state(path: &Path, bytes: &[u8], sha: &str) -> Result<EntryState, CacheError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(io) if io.kind() == io::ErrorKind::NotFound => return Ok(EntryState::Absent),
        Err(io) => {
            return Err(CacheError::Read {
                path: path.to_path_buf(),
                io,
            })
        }
    };
    if !meta.is_file() || meta.len() != bytes.len() as u64 {
        return Ok(EntryState::Differs);
    }
    let mut content = Vec::with_capacity(bytes.len());
    let read = fs::File::open(path).and_then(|f| {
        f.take(bytes.len() as u64 + 1)
            .read_to_end(&mut content)
            .map(drop)
    });
    // A copy we cannot read back cannot be trusted; leave it alone.
    if read.is_err() || content.len() != bytes.len() || sha256_hex(&content) != sha {
        return Ok(EntryState::Differs);
    }
    Ok(EntryState::Same)
}

/// An earlier `<name>.<8 hex>` copy in `dir` with the right content, if any.
fn find_alternate(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    sha: &str,
) -> Result<Option<PathBuf>, CacheError> {
    let entries = fs::read_dir(dir).map_err(|io| CacheError::Read {
        path: dir.to_path_buf(),
        io,
    })?;
    let prefix = format!("{name}.");
    let mut candidates: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            entry.file_name().to_str().is_some_and(|n| {
                n.strip_prefix(&prefix).is_some_and(|suffix| {
                    suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit())
                })
            })
        })
        .map(|entry| entry.path())
        .collect();
    candidates.sort();
    for candidate in candidates {
        if entry_state(&candidate, bytes, sha)? == EntryState::Same {
            return Ok(Some(candidate));
        }
    }
    Ok(None)
}

/// Writes `bytes` to a temp file in `dir`, makes it read-only and publishes it at
/// `target` without ever replacing an existing file. Returns `false` if `target` already
/// existed (the temp file is removed).
fn publish(dir: &Path, name: &str, target: &Path, bytes: &[u8]) -> Result<bool, CacheError> {
    let temp = dir.join(format!(".{name}.{}.tmp", unique_suffix()));
    let result = write_temp(&temp, bytes).and_then(|()| link_into_place(&temp, target));
    // The temp name is ours alone; whatever happened, it must not linger.
    let _ = crate::disk::remove_file(&temp);
    let published = result?;
    if published {
        finish_read_only(target);
    }
    Ok(published)
}

fn write_temp(temp: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    let write_err = |io| CacheError::Write {
        path: temp.to_path_buf(),
        io,
    };
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = crate::disk::open(temp, &options).map_err(write_err)?;
    // No fsync: a copy torn by a crash is caught when the cache is next used (an existing
    // copy is reused only after its content hashes right), so durability costs nothing here.
    crate::disk::write_all(&file, temp, bytes).map_err(write_err)?;
    // On Unix the mode does not stop unlinking the temp name, so the copy is read-only before
    // it is published. Elsewhere a read-only file cannot be deleted, so `publish` marks the
    // final file read-only afterwards.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(0o500))
            .map_err(write_err)?;
    }
    Ok(())
}

/// Marks a published copy read-only where that could not be done before publishing.
fn finish_read_only(target: &Path) {
    #[cfg(not(unix))]
    if let Ok(meta) = fs::metadata(target) {
        let mut permissions = meta.permissions();
        permissions.set_readonly(true);
        let _ = fs::set_permissions(target, permissions);
    }
    #[cfg(unix)]
    let _ = target;
}

/// Publishes `temp` at `target` with a hard link, which fails rather than replace an existing
/// file. Where hard links are unsupported, falls back to a rename guarded by an existence
/// check (a rename only swaps the directory entry, so a mapped copy is still never written).
fn link_into_place(temp: &Path, target: &Path) -> Result<bool, CacheError> {
    match crate::disk::hard_link(temp, target) {
        Ok(()) => Ok(true),
        Err(io) if io.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(link_err) => {
            match fs::symlink_metadata(target) {
                Ok(_) => return Ok(false),
                Err(io) if io.kind() == io::ErrorKind::NotFound => {}
                Err(io) => {
                    return Err(CacheError::Read {
                        path: target.to_path_buf(),
                        io,
                    })
                }
            }
            crate::disk::rename(temp, target).map_err(|rename_err| CacheError::Publish {
                path: target.to_path_buf(),
                io: io::Error::new(
                    rename_err.kind(),
                    format!("hard link failed ({link_err}), then rename failed ({rename_err})"),
                ),
            })?;
            Ok(true)
        }
    }
}

/// Creates `dir` (and missing parents) with mode 0700 on Unix.
fn create_private_dir(dir: &Path) -> Result<(), CacheError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    crate::disk::create_dir_with(&builder, dir).map_err(|io| CacheError::CreateDir {
        path: dir.to_path_buf(),
        io,
    })
}

/// pid, nanoseconds and a process-wide counter: unique among concurrent writers.
fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos}-{count}", std::process::id())
}

/// 8 hex characters mixed from [`unique_suffix`]'s inputs.
fn random_hex8() -> String {
    let digest = sha256_hex(unique_suffix().as_bytes());
    digest[..8].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::verify::BinaryFormat;
    use std::sync::{Arc, Barrier};

    fn library(bytes: &[u8]) -> VerifiedLibrary {
        VerifiedLibrary {
            source_path: PathBuf::from("/plugins/x/libx.so"),
            bytes: bytes.to_vec(),
            sha256_hex: sha256_hex(bytes),
            size: bytes.len() as u64,
            format: BinaryFormat::native(),
        }
    }

    fn content_bytes() -> Vec<u8> {
        (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[cfg(unix)]
    fn identity(path: &Path) -> (u64, SystemTime) {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(path).unwrap();
        (meta.ino(), meta.modified().unwrap())
    }

    #[cfg(not(unix))]
    fn identity(path: &Path) -> (u64, SystemTime) {
        let meta = fs::metadata(path).unwrap();
        (meta.len(), meta.modified().unwrap())
    }

    fn make_writable(path: &Path) {
        let mut permissions = fs::metadata(path).unwrap().permissions();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            permissions.set_mode(0o600);
        }
        #[cfg(not(unix))]
        permissions.set_readonly(false);
        fs::set_permissions(path, permissions).unwrap();
    }

    fn no_temp_files(dir: &Path) {
        for entry in fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name();
            assert!(
                !name.to_string_lossy().ends_with(".tmp"),
                "temp file left: {name:?}"
            );
        }
    }

    #[test]
    fn copy_lands_at_content_address() {
        let cache = tempfile::tempdir().unwrap();
        let lib = library(&content_bytes());
        let path = cache_copy(cache.path(), &lib, "libx.so").unwrap();
        assert_eq!(
            path,
            cache.path().join(&lib.sha256_hex[..16]).join("libx.so")
        );
        assert_eq!(fs::read(&path).unwrap(), lib.bytes);
        no_temp_files(path.parent().unwrap());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o500);
            let dir_mode = fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(dir_mode, 0o700);
        }
    }

    #[test]
    fn second_copy_reuses_without_rewriting() {
        let cache = tempfile::tempdir().unwrap();
        let lib = library(&content_bytes());
        let first = cache_copy(cache.path(), &lib, "libx.so").unwrap();
        let before = identity(&first);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = cache_copy(cache.path(), &lib, "libx.so").unwrap();
        assert_eq!(first, second);
        assert_eq!(identity(&second), before);
        let entries = fs::read_dir(first.parent().unwrap()).unwrap().count();
        assert_eq!(entries, 1);
    }

    #[test]
    fn corrupted_copy_is_not_overwritten() {
        let cache = tempfile::tempdir().unwrap();
        let lib = library(&content_bytes());
        let primary = cache_copy(cache.path(), &lib, "libx.so").unwrap();
        // Corrupt it (same length, different content), as a broken disk or user might.
        make_writable(&primary);
        let mut corrupt = lib.bytes.clone();
        corrupt[500] ^= 0xff;
        fs::write(&primary, &corrupt).unwrap();
        let corrupt_identity = identity(&primary);

        let fresh = cache_copy(cache.path(), &lib, "libx.so").unwrap();
        assert_ne!(fresh, primary);
        let fresh_name = fresh.file_name().unwrap().to_str().unwrap().to_string();
        let suffix = fresh_name.strip_prefix("libx.so.").unwrap();
        assert_eq!(suffix.len(), 8);
        assert!(suffix.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(fs::read(&fresh).unwrap(), lib.bytes);
        // The corrupted file is untouched.
        assert_eq!(fs::read(&primary).unwrap(), corrupt);
        assert_eq!(identity(&primary), corrupt_identity);

        // Later calls reuse the good alternate instead of piling up new ones.
        let again = cache_copy(cache.path(), &lib, "libx.so").unwrap();
        assert_eq!(again, fresh);
        no_temp_files(primary.parent().unwrap());
        assert_eq!(fs::read_dir(primary.parent().unwrap()).unwrap().count(), 2);
    }

    #[test]
    fn wrong_sized_or_non_file_entries_are_left_alone() {
        let cache = tempfile::tempdir().unwrap();
        let lib = library(b"some library bytes");
        let dir = cache.path().join(&lib.sha256_hex[..16]);
        fs::create_dir_all(dir.join("liba.so")).unwrap();
        fs::write(dir.join("libb.so"), b"short").unwrap();
        let a = cache_copy(cache.path(), &lib, "liba.so").unwrap();
        let b = cache_copy(cache.path(), &lib, "libb.so").unwrap();
        assert_ne!(a, dir.join("liba.so"));
        assert_ne!(b, dir.join("libb.so"));
        assert!(dir.join("liba.so").is_dir());
        assert_eq!(fs::read(dir.join("libb.so")).unwrap(), b"short");
        assert_eq!(fs::read(a).unwrap(), lib.bytes);
        assert_eq!(fs::read(b).unwrap(), lib.bytes);
    }

    #[cfg(unix)]
    #[test]
    fn symlink_in_cache_is_not_followed_or_replaced() {
        let cache = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let lib = library(b"library content");
        let target = elsewhere.path().join("real.so");
        fs::write(&target, &lib.bytes).unwrap();
        let dir = cache.path().join(&lib.sha256_hex[..16]);
        fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&target, dir.join("libx.so")).unwrap();
        let path = cache_copy(cache.path(), &lib, "libx.so").unwrap();
        assert_ne!(path, dir.join("libx.so"));
        assert!(fs::symlink_metadata(dir.join("libx.so"))
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn concurrent_copies_agree() {
        let cache = tempfile::tempdir().unwrap();
        let lib = Arc::new(library(&content_bytes()));
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.path().to_path_buf();
                let lib = Arc::clone(&lib);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    cache_copy(&cache, &lib, "libx.so").unwrap()
                })
            })
            .collect();
        let paths: Vec<PathBuf> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for path in &paths {
            assert_eq!(sha256_hex(&fs::read(path).unwrap()), lib.sha256_hex);
            assert_eq!(path, &paths[0]);
        }
        no_temp_files(paths[0].parent().unwrap());
    }

    #[test]
    fn file_name_is_reduced_to_its_last_component() {
        let cache = tempfile::tempdir().unwrap();
        let lib = library(b"abc");
        let dir = cache.path().join(&lib.sha256_hex[..16]);
        let p = cache_copy(cache.path(), &lib, "../../evil.so").unwrap();
        assert_eq!(p, dir.join("evil.so"));
        let p = cache_copy(cache.path(), &lib, "C:\\x\\win.dll").unwrap();
        assert_eq!(p, dir.join("win.dll"));
        let p = cache_copy(cache.path(), &lib, "..").unwrap();
        assert_eq!(p, dir.join("libx.so"));
    }

    #[test]
    fn inconsistent_bytes_are_refused() {
        let cache = tempfile::tempdir().unwrap();
        let mut lib = library(b"abc");
        lib.bytes.push(b'd');
        let err = cache_copy(cache.path(), &lib, "libx.so").unwrap_err();
        assert!(matches!(err, CacheError::Inconsistent { .. }), "{err}");
        assert!(!err.to_string().contains('\n'));
        assert_eq!(fs::read_dir(cache.path()).unwrap().count(), 0);
    }

    #[test]
    fn unusable_cache_dir_is_reported() {
        let parent = tempfile::tempdir().unwrap();
        let not_a_dir = parent.path().join("cache");
        fs::write(&not_a_dir, b"file").unwrap();
        let err = cache_copy(&not_a_dir, &library(b"abc"), "libx.so").unwrap_err();
        assert!(matches!(err, CacheError::CreateDir { .. }), "{err}");
        assert_eq!(err.code(), "cache_create_dir");
        let text = err.to_string();
        assert!(text.contains("$PINCER_HOME/cache") && !text.contains('\n'));
    }
}
