//! Checks run on a plugin library before any `dlopen`: confinement of the manifest's `library`
//! path to the plugin folder, then — on bytes read once into memory — size, the optional sha256
//! pin, and binary sanity with the `object` crate (format, shared-library kind, architecture, and
//! that every loadable segment lies inside the file).
//!
//! The segment bounds check is what keeps the host alive: `dlopen` of a `.so` truncated inside
//! one of its `PT_LOAD` segments kills the process with SIGBUS on first touch. The same bytes
//! that pass these checks are the ones later written to the private cache copy and loaded, so
//! a file swapped on disk between check and load can never be loaded.
//!
//! Nothing here panics on any input, however malformed: all header arithmetic is checked.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use object::read::elf::{FileHeader, ProgramHeader};
use object::read::macho::FatArch;
use object::{Architecture, Endianness, FileKind, Object, ObjectKind, ObjectSegment};
use sha2::{Digest, Sha256};

/// Default largest library accepted by [`verify_library`]: 256 MiB.
pub const DEFAULT_MAX_LIBRARY_SIZE: u64 = 256 * 1024 * 1024;

/// The binary container format of a shared library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryFormat {
    /// ELF (Linux and other Unix systems): `.so`.
    Elf,
    /// Mach-O (macOS): `.dylib`.
    MachO,
    /// PE/COFF (Windows): `.dll`.
    Pe,
}

impl BinaryFormat {
    /// The format this platform's dynamic loader loads.
    pub fn native() -> BinaryFormat {
        if cfg!(target_vendor = "apple") {
            BinaryFormat::MachO
        } else if cfg!(windows) {
            BinaryFormat::Pe
        } else {
            BinaryFormat::Elf
        }
    }
}

impl fmt::Display for BinaryFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BinaryFormat::Elf => "ELF",
            BinaryFormat::MachO => "Mach-O",
            BinaryFormat::Pe => "PE",
        })
    }
}

/// A library that passed every check, with the exact bytes that were checked.
///
/// Load only a copy written from [`VerifiedLibrary::bytes`] (see `crate::plugins::cache`), never
/// [`VerifiedLibrary::source_path`] itself.
#[derive(Clone)]
pub struct VerifiedLibrary {
    /// The file the bytes were read from.
    pub source_path: PathBuf,
    /// The whole file content, read once.
    pub bytes: Vec<u8>,
    /// sha256 of [`VerifiedLibrary::bytes`], 64 lowercase hex characters.
    pub sha256_hex: String,
    /// Length of [`VerifiedLibrary::bytes`].
    pub size: u64,
    /// The binary format (always [`BinaryFormat::native`] after a successful check).
    pub format: BinaryFormat,
}

impl fmt::Debug for VerifiedLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedLibrary")
            .field("source_path", &self.source_path)
            .field("bytes", &format_args!("<{} bytes>", self.bytes.len()))
            .field("sha256_hex", &self.sha256_hex)
            .field("size", &self.size)
            .field("format", &self.format)
            .finish()
    }
}

/// Limits applied by [`verify_library`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyLimits {
    /// Largest accepted library, in bytes (default [`DEFAULT_MAX_LIBRARY_SIZE`], 256 MiB).
    pub max_size: u64,
}

impl Default for VerifyLimits {
    fn default() -> Self {
        VerifyLimits {
            max_size: DEFAULT_MAX_LIBRARY_SIZE,
        }
    }
}

/// Why a library path was refused or a library failed its checks.
///
/// Every message is one line that says what was expected, what was found and what to do.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The manifest's `library` is empty, absolute or climbs out with `..`.
    #[error("\"library\" {library:?} {reason}; set it to a file path inside the plugin folder, such as \"libmy_engine.so\"")]
    InvalidLibraryPath {
        /// The `library` value from the manifest.
        library: String,
        /// What is wrong with it, e.g. `is absolute`.
        reason: &'static str,
    },
    /// The library path resolves (through a symlink) to a file outside the plugin folder.
    #[error("\"library\" {library:?} resolves to {}, outside the plugin folder {}; put the library file itself inside the plugin folder instead of a symlink", resolved.display(), plugin_dir.display())]
    LibraryOutsidePluginDir {
        /// The `library` value from the manifest.
        library: String,
        /// Where it really points.
        resolved: PathBuf,
        /// The canonical plugin folder.
        plugin_dir: PathBuf,
    },
    /// The plugin folder itself cannot be resolved.
    #[error("cannot open plugin folder {}: {io}; check that it exists and is readable", dir.display())]
    PluginDirUnreadable {
        /// The plugin folder.
        dir: PathBuf,
        /// The underlying error.
        io: io::Error,
    },
    /// The library file does not exist.
    #[error("library {} does not exist; build the plugin and package it with `pincer plugins pack`, or check \"library\" in the plugin's pincer.plugin.json", path.display())]
    LibraryMissing {
        /// The path that was looked for.
        path: PathBuf,
    },
    /// The library exists but cannot be read.
    #[error("cannot read library {}: {io}; check that it is a readable file", path.display())]
    LibraryUnreadable {
        /// The library path.
        path: PathBuf,
        /// The underlying error.
        io: io::Error,
    },
    /// The library path is a directory, device or other non-regular file.
    #[error("library {} is not a regular file; point \"library\" in pincer.plugin.json at the built shared library", path.display())]
    NotAFile {
        /// The library path.
        path: PathBuf,
    },
    /// The library file is empty.
    #[error("library {} is empty (0 bytes); rebuild the plugin and package it with `pincer plugins pack`", path.display())]
    Empty {
        /// The library path.
        path: PathBuf,
    },
    /// The library is larger than [`VerifyLimits::max_size`].
    #[error("library {} is {size} bytes, over the {max}-byte limit; check that \"library\" names the right file", path.display())]
    TooLarge {
        /// The library path.
        path: PathBuf,
        /// Its size (at least this many bytes).
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The library's sha256 differs from the manifest's pin.
    #[error("library {} has sha256 {found} but the manifest pins {expected}: the library changed since the manifest was written; rebuild/re-stage it or update sha256", path.display())]
    Sha256Mismatch {
        /// The library path.
        path: PathBuf,
        /// The pinned hash, lowercase.
        expected: String,
        /// The hash of the bytes read.
        found: String,
    },
    /// The file is not a parseable ELF, Mach-O or PE library.
    #[error("{} is not a loadable library ({reason}); rebuild the plugin as a cdylib and package it with `pincer plugins pack`", path.display())]
    NotALibrary {
        /// The library path.
        path: PathBuf,
        /// What the parser found wrong.
        reason: String,
    },
    /// The file is a library of another platform's format.
    #[error("{} is a {found} file but this platform loads {expected} libraries; build the plugin for this platform", path.display())]
    WrongFormat {
        /// The library path.
        path: PathBuf,
        /// The format found.
        found: BinaryFormat,
        /// The format this platform loads.
        expected: BinaryFormat,
    },
    /// The file is an executable, object file or core dump rather than a shared library.
    #[error("{} is {found}, not a shared library; build the plugin with crate-type = [\"cdylib\"] and package it with `pincer plugins pack`", path.display())]
    NotSharedLibrary {
        /// The library path.
        path: PathBuf,
        /// What it is, e.g. `an executable`.
        found: String,
    },
    /// The library was built for another CPU architecture.
    #[error("{} is built for {found} but this host runs on {expected}; build the plugin for {expected}", path.display())]
    WrongArchitecture {
        /// The library path.
        path: PathBuf,
        /// The library's architecture.
        found: String,
        /// The host's architecture (`std::env::consts::ARCH`).
        expected: String,
    },
    /// The file ends before its headers or loadable segments do.
    #[error("the library {} is truncated ({size} bytes, segments need {needed}): re-copy or rebuild it", path.display())]
    Truncated {
        /// The library path.
        path: PathBuf,
        /// The file's length.
        size: u64,
        /// The length its headers and segments need.
        needed: u64,
    },
}

impl VerifyError {
    /// A stable snake_case code for this error, for JSON output (e.g. `"library_truncated"`).
    pub fn code(&self) -> &'static str {
        match self {
            VerifyError::InvalidLibraryPath { .. } => "library_path_invalid",
            VerifyError::LibraryOutsidePluginDir { .. } => "library_outside_plugin_dir",
            VerifyError::PluginDirUnreadable { .. } => "plugin_dir_unreadable",
            VerifyError::LibraryMissing { .. } => "library_missing",
            VerifyError::LibraryUnreadable { .. } => "library_unreadable",
            VerifyError::NotAFile { .. } => "library_not_a_file",
            VerifyError::Empty { .. } => "library_empty",
            VerifyError::TooLarge { .. } => "library_too_large",
            VerifyError::Sha256Mismatch { .. } => "library_sha256_mismatch",
            VerifyError::NotALibrary { .. } => "library_not_a_library",
            VerifyError::WrongFormat { .. } => "library_wrong_format",
            VerifyError::NotSharedLibrary { .. } => "library_not_shared",
            VerifyError::WrongArchitecture { .. } => "library_wrong_architecture",
            VerifyError::Truncated { .. } => "library_truncated",
        }
    }
}

/// Resolves the manifest's `library` inside `plugin_dir` and returns its canonical path.
///
/// Refuses an empty path, an absolute one (including Windows forms such as `C:\x.dll` or
/// `\x.dll`), any `..` component, and a path that — after following symlinks — lies outside
/// the canonical plugin folder. A file that does not exist gives
/// [`VerifyError::LibraryMissing`].
pub fn resolve_library_path(plugin_dir: &Path, library: &str) -> Result<PathBuf, VerifyError> {
    let invalid = |reason| VerifyError::InvalidLibraryPath {
        library: library.to_string(),
        reason,
    };
    if library.trim().is_empty() {
        return Err(invalid("is empty"));
    }
    if library.contains('\0') {
        return Err(invalid("contains a NUL character"));
    }
    let b = library.as_bytes();
    let windows_drive = b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':';
    let rel = Path::new(library);
    if library.starts_with(['/', '\\']) || windows_drive || rel.is_absolute() || rel.has_root() {
        return Err(invalid("is absolute"));
    }
    if library.split(['/', '\\']).any(|part| part == "..") {
        return Err(invalid("contains a '..' component"));
    }

    let dir = plugin_dir
        .canonicalize()
        .map_err(|io| VerifyError::PluginDirUnreadable {
            dir: plugin_dir.to_path_buf(),
            io,
        })?;
    let candidate = dir.join(rel);
    let resolved = match candidate.canonicalize() {
        Ok(path) => path,
        Err(io) if io.kind() == io::ErrorKind::NotFound => {
            return Err(VerifyError::LibraryMissing { path: candidate })
        }
        Err(io) => {
            return Err(VerifyError::LibraryUnreadable {
                path: candidate,
                io,
            })
        }
    };
    if !resolved.starts_with(&dir) || resolved == dir {
        return Err(VerifyError::LibraryOutsidePluginDir {
            library: library.to_string(),
            resolved,
            plugin_dir: dir,
        });
    }
    Ok(resolved)
}

/// Reads the library at `path` once and checks it: size, then the optional sha256 pin
/// (compared case-insensitively), then binary sanity — it must parse as the platform's format,
/// be a shared library (not an executable or object file), match the host architecture, and
/// have every loadable segment (and, for ELF, the program and section header tables) inside
/// the file.
///
/// The returned [`VerifiedLibrary::bytes`] are the exact bytes checked.
pub fn verify_library(
    path: &Path,
    expected_sha256: Option<&str>,
    limits: &VerifyLimits,
) -> Result<VerifiedLibrary, VerifyError> {
    let bytes = read_once(path, limits)?;
    verify_bytes(path, bytes, expected_sha256, limits)
}

/// sha256 of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Reads the whole file, refusing non-regular files and anything over the size limit without
/// reading more than `max_size + 1` bytes.
fn read_once(path: &Path, limits: &VerifyLimits) -> Result<Vec<u8>, VerifyError> {
    let unreadable = |io: io::Error| {
        if io.kind() == io::ErrorKind::NotFound {
            VerifyError::LibraryMissing {
                path: path.to_path_buf(),
            }
        } else {
            VerifyError::LibraryUnreadable {
                path: path.to_path_buf(),
                io,
            }
        }
    };
    let not_a_file = || VerifyError::NotAFile {
        path: path.to_path_buf(),
    };
    let too_large = |size| VerifyError::TooLarge {
        path: path.to_path_buf(),
        size,
        max: limits.max_size,
    };
    // Check before opening: opening a FIFO would block.
    if !std::fs::metadata(path).map_err(unreadable)?.is_file() {
        return Err(not_a_file());
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(not_a_file());
    }
    if meta.len() > limits.max_size {
        return Err(too_large(meta.len()));
    }
    let capacity = usize::try_from(meta.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    file.take(limits.max_size.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let size = bytes.len() as u64;
    if size > limits.max_size {
        return Err(too_large(size));
    }
    Ok(bytes)
}

/// Checks bytes already in memory; `path` is used in errors and as the source path.
pub(crate) fn verify_bytes(
    path: &Path,
    bytes: Vec<u8>,
    expected_sha256: Option<&str>,
    limits: &VerifyLimits,
) -> Result<VerifiedLibrary, VerifyError> {
    let size = bytes.len() as u64;
    if size == 0 {
        return Err(VerifyError::Empty {
            path: path.to_path_buf(),
        });
    }
    if size > limits.max_size {
        return Err(VerifyError::TooLarge {
            path: path.to_path_buf(),
            size,
            max: limits.max_size,
        });
    }
    let sha256_hex = sha256_hex(&bytes);
    if let Some(expected) = expected_sha256 {
        let expected = expected.trim();
        if !expected.eq_ignore_ascii_case(&sha256_hex) {
            return Err(VerifyError::Sha256Mismatch {
                path: path.to_path_buf(),
                expected: expected.to_ascii_lowercase(),
                found: sha256_hex,
            });
        }
    }
    let format = check_binary(&bytes).map_err(|problem| problem.into_error(path, size))?;
    Ok(VerifiedLibrary {
        source_path: path.to_path_buf(),
        bytes,
        sha256_hex,
        size,
        format,
    })
}

/// A binary-sanity failure, before the path is attached.
#[derive(Debug)]
enum Problem {
    NotALibrary(String),
    WrongFormat(BinaryFormat),
    NotShared(&'static str),
    WrongArch { found: String, expected: String },
    Truncated { needed: u64 },
}

impl Problem {
    fn into_error(self, path: &Path, size: u64) -> VerifyError {
        let path = path.to_path_buf();
        match self {
            Problem::NotALibrary(reason) => VerifyError::NotALibrary { path, reason },
            Problem::WrongFormat(found) => VerifyError::WrongFormat {
                path,
                found,
                expected: BinaryFormat::native(),
            },
            Problem::NotShared(found) => VerifyError::NotSharedLibrary {
                path,
                found: found.to_string(),
            },
            Problem::WrongArch { found, expected } => VerifyError::WrongArchitecture {
                path,
                found,
                expected,
            },
            Problem::Truncated { needed } => VerifyError::Truncated { path, size, needed },
        }
    }
}

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

/// Size of the ELF file header for the class byte in `data` (64-bit when unknown).
fn elf_header_size(data: &[u8]) -> u64 {
    match data.get(4) {
        Some(1) => 52,
        _ => 64,
    }
}

fn check_binary(data: &[u8]) -> Result<BinaryFormat, Problem> {
    let len = data.len() as u64;
    let kind = match FileKind::parse(data) {
        Ok(kind) => kind,
        Err(err) => {
            if data.starts_with(ELF_MAGIC) && len < elf_header_size(data) {
                return Err(Problem::Truncated {
                    needed: elf_header_size(data),
                });
            }
            return Err(Problem::NotALibrary(err.to_string()));
        }
    };
    match kind {
        FileKind::Elf32 => check_elf::<object::elf::FileHeader32<Endianness>>(data),
        FileKind::Elf64 => check_elf::<object::elf::FileHeader64<Endianness>>(data),
        FileKind::MachO32 | FileKind::MachO64 => check_object(data, 0, BinaryFormat::MachO),
        FileKind::MachOFat32 => {
            let fat = object::read::macho::MachOFatFile32::parse(data)
                .map_err(|e| Problem::NotALibrary(e.to_string()))?;
            check_fat_slice(data, fat.arches())
        }
        FileKind::MachOFat64 => {
            let fat = object::read::macho::MachOFatFile64::parse(data)
                .map_err(|e| Problem::NotALibrary(e.to_string()))?;
            check_fat_slice(data, fat.arches())
        }
        FileKind::Pe32 | FileKind::Pe64 => check_object(data, 0, BinaryFormat::Pe),
        other => Err(Problem::NotALibrary(format!(
            "it is a {other:?} file, not an ELF, Mach-O or PE shared library"
        ))),
    }
}

/// Checks an ELF file: table and segment bounds first (so nothing below reads past the end),
/// then the generic checks, then that it is not a position-independent executable.
fn check_elf<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<BinaryFormat, Problem> {
    elf_bounds::<Elf>(data)?;
    let format = check_object(data, 0, BinaryFormat::Elf)?;
    if elf_is_pie::<Elf>(data) {
        return Err(Problem::NotShared("a position-independent executable"));
    }
    Ok(format)
}

/// Does the dynamic section carry `DF_1_PIE`? (A PIE is `ET_DYN` too, but cannot be
/// `dlopen`ed.) Unreadable dynamic data counts as "no".
fn elf_is_pie<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> bool {
    use object::read::elf::Dyn;
    let Ok(header) = Elf::parse(data) else {
        return false;
    };
    let Ok(endian) = header.endian() else {
        return false;
    };
    let Ok(phdrs) = header.program_headers(endian, data) else {
        return false;
    };
    phdrs
        .iter()
        .filter_map(|ph| ph.dynamic(endian, data).ok().flatten())
        .flatten()
        .any(|d| {
            d.d_tag(endian).into() == u64::from(object::elf::DT_FLAGS_1)
                && d.d_val(endian).into() & u64::from(object::elf::DF_1_PIE) != 0
        })
}

/// Checks that the ELF program-header table, section-header table and every `PT_LOAD`
/// segment's file range lie inside `data`, with checked arithmetic throughout.
fn elf_bounds<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<(), Problem> {
    let len = data.len() as u64;
    let header_size = std::mem::size_of::<Elf>() as u64;
    if len < header_size {
        return Err(Problem::Truncated {
            needed: header_size,
        });
    }
    let bad = |what: &str| Problem::NotALibrary(what.to_string());
    let header = Elf::parse(data).map_err(|e| Problem::NotALibrary(e.to_string()))?;
    let endian = header
        .endian()
        .map_err(|e| Problem::NotALibrary(e.to_string()))?;
    let mut needed = header_size;

    // Section-header table. With more than 0xff00 sections the count lives in section 0.
    let shoff: u64 = header.e_shoff(endian).into();
    let sh_size = std::mem::size_of::<Elf::SectionHeader>() as u64;
    if shoff != 0 {
        if u64::from(header.e_shentsize(endian)) != sh_size {
            return Err(bad("its section header entry size is wrong"));
        }
        let shnum = match header.e_shnum(endian) {
            0 => {
                let sh0_end = shoff
                    .checked_add(sh_size)
                    .ok_or_else(|| bad("its section header offset overflows"))?;
                if sh0_end > len {
                    return Err(Problem::Truncated {
                        needed: sh0_end.max(needed),
                    });
                }
                header
                    .shnum(endian, data)
                    .map_err(|e| Problem::NotALibrary(e.to_string()))? as u64
            }
            n => u64::from(n),
        };
        let end = sh_size
            .checked_mul(shnum)
            .and_then(|table| table.checked_add(shoff))
            .ok_or_else(|| bad("its section header table size overflows"))?;
        needed = needed.max(end);
    }
    if needed > len {
        return Err(Problem::Truncated { needed });
    }

    // Program-header table.
    let phoff: u64 = header.e_phoff(endian).into();
    let ph_size = std::mem::size_of::<Elf::ProgramHeader>() as u64;
    let phnum = header
        .phnum(endian, data)
        .map_err(|e| Problem::NotALibrary(e.to_string()))? as u64;
    if phnum != 0 && u64::from(header.e_phentsize(endian)) != ph_size {
        return Err(bad("its program header entry size is wrong"));
    }
    let ph_end = ph_size
        .checked_mul(phnum)
        .and_then(|table| table.checked_add(phoff))
        .ok_or_else(|| bad("its program header table size overflows"))?;
    needed = needed.max(ph_end);
    if needed > len {
        return Err(Problem::Truncated { needed });
    }

    // Every PT_LOAD segment.
    let phdrs = header
        .program_headers(endian, data)
        .map_err(|e| Problem::NotALibrary(e.to_string()))?;
    for ph in phdrs {
        if ph.p_type(endian) != object::elf::PT_LOAD {
            continue;
        }
        let (offset, filesz) = ph.file_range(endian);
        let end = offset
            .checked_add(filesz)
            .ok_or_else(|| bad("a loadable segment's file range overflows"))?;
        needed = needed.max(end);
    }
    if needed > len {
        return Err(Problem::Truncated { needed });
    }
    Ok(())
}

/// Picks the slice of a universal Mach-O for the host architecture and checks it.
fn check_fat_slice<Fat: FatArch>(data: &[u8], arches: &[Fat]) -> Result<BinaryFormat, Problem> {
    let expected = host_arch_name();
    let found: Vec<String> = arches.iter().map(|a| arch_name(a.architecture())).collect();
    let Some(arch) = arches
        .iter()
        .find(|a| arch_name(a.architecture()) == expected)
    else {
        return Err(Problem::WrongArch {
            found: format!("universal [{}]", found.join(", ")),
            expected,
        });
    };
    let (offset, size) = arch.file_range();
    let end = offset
        .checked_add(size)
        .ok_or_else(|| Problem::NotALibrary("a universal slice's range overflows".into()))?;
    if end > data.len() as u64 {
        return Err(Problem::Truncated { needed: end });
    }
    let slice = arch
        .data(data)
        .map_err(|e| Problem::NotALibrary(e.to_string()))?;
    match FileKind::parse(slice) {
        Ok(FileKind::MachO32 | FileKind::MachO64) => {
            check_object(slice, offset, BinaryFormat::MachO)
        }
        Ok(other) => Err(Problem::NotALibrary(format!(
            "its {expected} slice is a {other:?} file, not Mach-O"
        ))),
        Err(e) => Err(Problem::NotALibrary(e.to_string())),
    }
}

/// Parses `data` (which starts `base` bytes into the file) with `object` and checks format,
/// kind, architecture and that every segment's file range lies inside `data`.
fn check_object(data: &[u8], base: u64, format: BinaryFormat) -> Result<BinaryFormat, Problem> {
    let file = object::File::parse(data).map_err(|e| Problem::NotALibrary(e.to_string()))?;
    if format != BinaryFormat::native() {
        return Err(Problem::WrongFormat(format));
    }
    match file.kind() {
        ObjectKind::Dynamic => {}
        ObjectKind::Executable => return Err(Problem::NotShared("an executable")),
        ObjectKind::Relocatable => return Err(Problem::NotShared("a relocatable object file")),
        ObjectKind::Core => return Err(Problem::NotShared("a core dump")),
        _ => return Err(Problem::NotShared("an object of unknown type")),
    }
    let expected = host_arch_name();
    let found = arch_name(file.architecture());
    if found != expected {
        return Err(Problem::WrongArch { found, expected });
    }
    let host_little = cfg!(target_endian = "little");
    if file.is_little_endian() != host_little {
        let end = |little: bool| {
            if little {
                "little-endian"
            } else {
                "big-endian"
            }
        };
        return Err(Problem::WrongArch {
            found: format!("{found} {}", end(file.is_little_endian())),
            expected: format!("{expected} {}", end(host_little)),
        });
    }
    if file.segments().next().is_none() {
        return Err(Problem::NotALibrary(
            "it has no loadable segments".to_string(),
        ));
    }
    let len = data.len() as u64;
    let mut needed = 0u64;
    for segment in file.segments() {
        let (offset, size) = segment.file_range();
        let end = offset.checked_add(size).ok_or_else(|| {
            Problem::NotALibrary("a loadable segment's file range overflows".into())
        })?;
        needed = needed.max(end);
    }
    if needed > len {
        return Err(Problem::Truncated {
            needed: needed.saturating_add(base),
        });
    }
    Ok(format)
}

/// `object`'s architecture in `std::env::consts::ARCH` spelling.
fn arch_name(arch: Architecture) -> String {
    match arch {
        Architecture::I386 => "x86".to_string(),
        Architecture::X86_64_X32 => "x86_64 (x32)".to_string(),
        Architecture::Aarch64_Ilp32 => "aarch64 (ilp32)".to_string(),
        Architecture::Unknown => "an unknown architecture".to_string(),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

/// The host's architecture, spelled like [`arch_name`].
fn host_arch_name() -> String {
    let arch = std::env::consts::ARCH;
    if cfg!(target_pointer_width = "32") && arch == "x86_64" {
        "x86_64 (x32)".to_string()
    } else if cfg!(target_pointer_width = "32") && arch == "aarch64" {
        "aarch64 (ilp32)".to_string()
    } else {
        arch.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift64* generator for the mutation test.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.0 = x;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            if n == 0 {
                0
            } else {
                (self.next() % n as u64) as usize
            }
        }
    }

    /// A real shared library of this platform that passes verification, if one can be found.
    fn real_library() -> Option<(PathBuf, Vec<u8>)> {
        let fixed = [
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
            "/lib/aarch64-linux-gnu/libm.so.6",
            "/usr/lib/aarch64-linux-gnu/libm.so.6",
            "/lib64/libm.so.6",
            "/usr/lib64/libm.so.6",
        ];
        let mut candidates: Vec<PathBuf> = fixed.iter().map(PathBuf::from).collect();
        for dir in ["/usr/lib", "/lib", "/usr/lib64"] {
            let mut dirs = vec![PathBuf::from(dir)];
            if let Ok(entries) = std::fs::read_dir(dir) {
                dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
            for d in dirs {
                if let Ok(entries) = std::fs::read_dir(&d) {
                    let mut found: Vec<PathBuf> = entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| n.contains(".so"))
                        })
                        .collect();
                    found.sort();
                    candidates.extend(found);
                }
            }
        }
        for path in candidates {
            if let Ok(lib) = verify_library(&path, None, &VerifyLimits::default()) {
                if lib.size < 8 * 1024 * 1024 {
                    return Some((path, lib.bytes));
                }
            }
        }
        eprintln!("no usable shared library found on this machine: skipping");
        None
    }

    fn check(bytes: Vec<u8>) -> Result<VerifiedLibrary, VerifyError> {
        verify_bytes(Path::new("test.so"), bytes, None, &VerifyLimits::default())
    }

    fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn assert_one_line(err: &VerifyError) {
        let text = err.to_string();
        assert!(!text.contains('\n'), "multi-line: {text}");
        assert!(!text.ends_with('.'), "trailing period: {text}");
    }

    /// End of the last PT_LOAD segment of a 64-bit little-endian ELF.
    fn last_load_end(bytes: &[u8]) -> u64 {
        let header = object::elf::FileHeader64::<Endianness>::parse(bytes).unwrap();
        let endian = header.endian().unwrap();
        header
            .program_headers(endian, bytes)
            .unwrap()
            .iter()
            .filter(|ph| ph.p_type(endian) == object::elf::PT_LOAD)
            .map(|ph| {
                let (o, s) = ph.file_range(endian);
                o + s
            })
            .max()
            .unwrap()
    }

    fn is_elf64_le(bytes: &[u8]) -> bool {
        bytes.starts_with(ELF_MAGIC) && bytes.get(4) == Some(&2) && bytes.get(5) == Some(&1)
    }

    #[test]
    fn real_library_passes() {
        let Some((path, bytes)) = real_library() else {
            return;
        };
        let lib = verify_library(&path, None, &VerifyLimits::default()).unwrap();
        assert_eq!(lib.bytes, bytes);
        assert_eq!(lib.size, bytes.len() as u64);
        assert_eq!(lib.format, BinaryFormat::native());
        assert_eq!(lib.sha256_hex, sha256_hex(&bytes));
        assert_eq!(lib.sha256_hex.len(), 64);
        // Pinned, in upper case: still accepted.
        let upper = lib.sha256_hex.to_ascii_uppercase();
        assert!(verify_library(&path, Some(&upper), &VerifyLimits::default()).is_ok());
        assert!(!format!("{lib:?}").contains(", 0, "));
    }

    #[test]
    fn targeted_truncations_are_rejected() {
        let Some((_, bytes)) = real_library() else {
            return;
        };
        for cut in [100, 4096, 65536, bytes.len() / 2, 10, 1] {
            if cut >= bytes.len() {
                continue;
            }
            let err = check(bytes[..cut].to_vec()).unwrap_err();
            assert!(
                matches!(
                    err,
                    VerifyError::Truncated { .. } | VerifyError::NotALibrary { .. }
                ),
                "cut at {cut}: {err}"
            );
            if let VerifyError::Truncated { size, needed, .. } = err {
                assert_eq!(size, cut as u64);
                assert!(needed > size);
            }
        }
    }

    #[test]
    fn truncation_inside_last_segment_reports_needed() {
        let Some((_, bytes)) = real_library() else {
            return;
        };
        if !is_elf64_le(&bytes) {
            return;
        }
        let end = last_load_end(&bytes);
        let mut stripped = bytes.clone();
        strip_section_headers(&mut stripped);
        let err = check(stripped[..end as usize - 1].to_vec()).unwrap_err();
        match err {
            VerifyError::Truncated { needed, .. } => assert_eq!(needed, end),
            other => panic!("unexpected {other}"),
        }
    }

    /// Zero e_shoff, e_shnum and e_shstrndx of a 64-bit little-endian ELF: the loader does not
    /// need section headers.
    fn strip_section_headers(bytes: &mut [u8]) {
        bytes[0x28..0x30].fill(0); // e_shoff
        bytes[0x3c..0x40].fill(0); // e_shnum, e_shstrndx
    }

    #[test]
    fn losing_only_bytes_past_the_segments_still_passes() {
        let Some((_, bytes)) = real_library() else {
            return;
        };
        // size-1 of a file with trailing padding after everything the loader needs.
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0u8; 64]);
        let cut = padded.len() - 1;
        assert!(check(padded[..cut].to_vec()).is_ok());

        if !is_elf64_le(&bytes) {
            return;
        }
        // Without a section-header table, anything past the last PT_LOAD may go.
        let end = last_load_end(&bytes) as usize;
        let mut stripped = bytes.clone();
        strip_section_headers(&mut stripped);
        assert!(end < stripped.len(), "last segment ends at EOF");
        assert!(check(stripped[..stripped.len() - 1].to_vec()).is_ok());
        assert!(check(stripped[..end].to_vec()).is_ok());
    }

    #[test]
    fn real_size_minus_one_cuts_the_section_header_table() {
        let Some((_, bytes)) = real_library() else {
            return;
        };
        if !is_elf64_le(&bytes) {
            return;
        }
        let header = object::elf::FileHeader64::<Endianness>::parse(&*bytes).unwrap();
        let endian = header.endian().unwrap();
        let sh_end = header.e_shoff(endian) + 64 * u64::from(header.e_shnum(endian));
        if sh_end != bytes.len() as u64 {
            return;
        }
        let err = check(bytes[..bytes.len() - 1].to_vec()).unwrap_err();
        assert!(
            matches!(err, VerifyError::Truncated { needed, .. } if needed == sh_end),
            "{err}"
        );
        assert_one_line(&err);
    }

    #[test]
    fn mutations_never_panic() {
        let Some((_, bytes)) = real_library() else {
            return;
        };
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut ok, mut err) = (0, 0);
        for round in 0..400 {
            let mut m = bytes.clone();
            match round % 6 {
                // Truncate anywhere.
                0 => m.truncate(rng.below(bytes.len())),
                // Flip random bytes in the headers.
                1 => {
                    for _ in 0..1 + rng.below(16) {
                        let i = rng.below(m.len().min(4096));
                        m[i] ^= 1 << rng.below(8);
                    }
                }
                // Overwrite 8 header bytes with an extreme or random value.
                2 => {
                    let i = rng.below(m.len().min(1024).saturating_sub(8));
                    let value = match rng.below(3) {
                        0 => u64::MAX,
                        1 => u64::MAX / 2 + 1,
                        _ => rng.next(),
                    };
                    m[i..i + 8].copy_from_slice(&value.to_le_bytes());
                }
                // Overwrite a 2-byte header count/size field.
                3 => {
                    let i = 0x30 + 2 * rng.below(8);
                    if i + 2 <= m.len() {
                        m[i..i + 2].copy_from_slice(&(rng.next() as u16).to_le_bytes());
                    }
                }
                // Random bytes anywhere in the file, then truncate.
                4 => {
                    for _ in 0..1 + rng.below(64) {
                        let i = rng.below(m.len());
                        m[i] = rng.next() as u8;
                    }
                    let len = m.len();
                    m.truncate(len - rng.below(len / 4 + 1));
                }
                // Corrupt program headers' offsets and sizes.
                _ => {
                    if is_elf64_le(&m) {
                        let phoff = u64::from_le_bytes(m[0x20..0x28].try_into().unwrap()) as usize;
                        let phnum = u16::from_le_bytes([m[0x38], m[0x39]]) as usize;
                        if phnum > 0 {
                            let ph = phoff + 56 * rng.below(phnum);
                            let field = ph + 8 + 8 * rng.below(6);
                            if field + 8 <= m.len() {
                                let value = if rng.below(2) == 0 {
                                    u64::MAX - rng.below(4096) as u64
                                } else {
                                    rng.next() >> rng.below(64)
                                };
                                m[field..field + 8].copy_from_slice(&value.to_le_bytes());
                            }
                        }
                    }
                }
            }
            match check(m) {
                Ok(_) => ok += 1,
                Err(e) => {
                    assert_one_line(&e);
                    err += 1
                }
            }
        }
        assert_eq!(ok + err, 400);
        assert!(err > 0);
        // A few mutations through real files too.
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            let mut m = bytes.clone();
            m.truncate(rng.below(bytes.len()));
            let path = write_file(dir.path(), &format!("m{i}.so"), &m);
            let _ = verify_library(&path, None, &VerifyLimits::default());
        }
    }

    #[test]
    fn random_bytes_are_not_a_library() {
        let mut rng = Rng(42);
        let bytes: Vec<u8> = (0..630_000).map(|_| rng.next() as u8).collect();
        let err = check(bytes).unwrap_err();
        assert!(matches!(err, VerifyError::NotALibrary { .. }), "{err}");
        assert_eq!(err.code(), "library_not_a_library");
        assert_one_line(&err);
        // ELF magic and nothing else.
        let err = check(ELF_MAGIC.to_vec()).unwrap_err();
        assert!(matches!(err, VerifyError::Truncated { .. }), "{err}");
    }

    #[test]
    fn empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), "empty.so", b"");
        let err = verify_library(&path, None, &VerifyLimits::default()).unwrap_err();
        assert!(matches!(err, VerifyError::Empty { .. }), "{err}");
        assert_one_line(&err);
    }

    #[test]
    fn too_large() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), "big.so", &[0u8; 2048]);
        let err = verify_library(&path, None, &VerifyLimits { max_size: 1024 }).unwrap_err();
        assert!(
            matches!(
                err,
                VerifyError::TooLarge {
                    size: 2048,
                    max: 1024,
                    ..
                }
            ),
            "{err}"
        );
        assert_one_line(&err);
    }

    #[test]
    fn sha_mismatch_is_checked_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), "x.so", b"not a library at all");
        let wrong = "0".repeat(64);
        let err = verify_library(&path, Some(&wrong), &VerifyLimits::default()).unwrap_err();
        match &err {
            VerifyError::Sha256Mismatch {
                expected, found, ..
            } => {
                assert_eq!(expected, &wrong);
                assert_eq!(found, &sha256_hex(b"not a library at all"));
            }
            other => panic!("unexpected {other}"),
        }
        assert!(err.to_string().contains("update sha256"));
        assert_one_line(&err);
    }

    #[test]
    fn not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = verify_library(dir.path(), None, &VerifyLimits::default()).unwrap_err();
        assert!(matches!(err, VerifyError::NotAFile { .. }), "{err}");
        let err = verify_library(&dir.path().join("nope.so"), None, &VerifyLimits::default())
            .unwrap_err();
        assert!(matches!(err, VerifyError::LibraryMissing { .. }), "{err}");
    }

    #[test]
    fn executables_and_object_files_are_rejected() {
        let Some((_, bytes)) = real_library() else {
            return;
        };
        if !bytes.starts_with(ELF_MAGIC) || bytes.get(5) != Some(&1) {
            return;
        }
        for (e_type, found) in [(2u16, "an executable"), (1, "a relocatable object file")] {
            let mut m = bytes.clone();
            m[0x10..0x12].copy_from_slice(&e_type.to_le_bytes());
            let err = check(m).unwrap_err();
            assert!(
                matches!(&err, VerifyError::NotSharedLibrary { found: f, .. } if f == found),
                "{err}"
            );
            assert_one_line(&err);
        }
    }

    #[test]
    fn position_independent_executables_are_rejected() {
        for exe in ["/bin/ls", "/usr/bin/ls", "/bin/sh", "/usr/bin/env"] {
            let Ok(bytes) = std::fs::read(exe) else {
                continue;
            };
            let pie = FileKind::parse(&*bytes) == Ok(FileKind::Elf64)
                && elf_is_pie::<object::elf::FileHeader64<Endianness>>(&bytes);
            if !pie {
                continue;
            }
            let err = verify_library(Path::new(exe), None, &VerifyLimits::default()).unwrap_err();
            assert!(
                matches!(&err, VerifyError::NotSharedLibrary { found, .. } if found == "a position-independent executable"),
                "{exe}: {err}"
            );
            return;
        }
        eprintln!("no PIE executable found: skipping");
    }

    #[test]
    fn wrong_architecture() {
        let Some((_, bytes)) = real_library() else {
            return;
        };
        if !bytes.starts_with(ELF_MAGIC) || bytes.get(5) != Some(&1) {
            return;
        }
        let mut m = bytes.clone();
        // EM_AARCH64 unless we are on aarch64, then EM_X86_64.
        let machine: u16 = if cfg!(target_arch = "aarch64") {
            62
        } else {
            183
        };
        m[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
        let err = check(m).unwrap_err();
        match &err {
            VerifyError::WrongArchitecture {
                found, expected, ..
            } => {
                assert_eq!(expected, std::env::consts::ARCH);
                assert_ne!(found, expected);
            }
            other => panic!("unexpected {other}"),
        }
        assert_one_line(&err);
    }

    #[test]
    fn resolve_accepts_files_inside() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        write_file(dir.path(), "lib/libx.so", b"x");
        write_file(dir.path(), "liby.so", b"y");
        let p = resolve_library_path(dir.path(), "lib/libx.so").unwrap();
        assert_eq!(p, dir.path().canonicalize().unwrap().join("lib/libx.so"));
        let p = resolve_library_path(dir.path(), "./liby.so").unwrap();
        assert!(p.ends_with("liby.so"));
    }

    #[test]
    fn resolve_rejects_bad_paths() {
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), "x.so", b"x");
        for (library, reason) in [
            ("", "is empty"),
            ("  ", "is empty"),
            ("/etc/passwd", "is absolute"),
            ("\\x.dll", "is absolute"),
            ("C:\\plugins\\x.dll", "is absolute"),
            ("c:x.dll", "is absolute"),
            ("../x.so", "contains a '..' component"),
            ("lib/../x.so", "contains a '..' component"),
            ("lib\\..\\x.so", "contains a '..' component"),
        ] {
            let err = resolve_library_path(dir.path(), library).unwrap_err();
            assert!(
                matches!(&err, VerifyError::InvalidLibraryPath { reason: r, .. } if *r == reason),
                "{library:?}: {err}"
            );
            assert_eq!(err.code(), "library_path_invalid");
            assert_one_line(&err);
        }
    }

    #[test]
    fn resolve_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_library_path(dir.path(), "libnope.so").unwrap_err();
        assert!(matches!(err, VerifyError::LibraryMissing { .. }), "{err}");
        assert!(err.to_string().contains("pincer plugins pack"));
        assert_one_line(&err);
        let err = resolve_library_path(&dir.path().join("gone"), "x.so").unwrap_err();
        assert!(
            matches!(err, VerifyError::PluginDirUnreadable { .. }),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn resolve_rejects_symlink_out_of_plugin_dir() {
        let outside = tempfile::tempdir().unwrap();
        let target = write_file(outside.path(), "evil.so", b"x");
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("libx.so")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
        for library in ["libx.so", "sub/evil.so"] {
            let err = resolve_library_path(dir.path(), library).unwrap_err();
            assert!(
                matches!(err, VerifyError::LibraryOutsidePluginDir { .. }),
                "{library}: {err}"
            );
            assert_one_line(&err);
        }
        // A symlink that stays inside is fine.
        write_file(dir.path(), "real.so", b"x");
        std::os::unix::fs::symlink("real.so", dir.path().join("alias.so")).unwrap();
        let p = resolve_library_path(dir.path(), "alias.so").unwrap();
        assert!(p.ends_with("real.so"));
    }
}
