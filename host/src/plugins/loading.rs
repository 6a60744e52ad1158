//! The host's unsafe loader: opening a verified library copy, checking it against the ABI
//! crate's (`pincer-plugin-abi`) layouts and version, reading the manifest a library embeds as
//! data, and the constructors of the shared objects the host hands engines. The rest of the
//! host uses this module so that it never names `abi_stable` itself.
//!
//! This module does **no** file verification: the host must only pass paths it has verified
//! and copied to a private location (pincer-host's `loader` does). It never uses
//! `RootModule::load_from_file`, which caches one module per type for the whole process and
//! never unloads; each call here opens its own handle.
//!
//! A library is kept mapped for the life of the process by default ([`open_library`]). A host
//! that can prove nothing from a library is alive any more may open it with
//! [`open_closable_library`]: dropping that [`OpenedLibrary`] closes its handle (`dlclose`).

use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

use pincer_plugin_abi::abi_stable::library::{
    lib_header_from_raw_library, LibraryError, RawLibrary, RootModuleError,
};
use pincer_plugin_abi::v1::{
    EngineBox, EngineError, FactoryParams, HostServicesArc, LibraryManifest, PluginModuleRef,
};
use pincer_plugin_abi::API_VERSION;

pub use pincer_plugin_abi::objects::{host_services, host_spawn_rollback};

/// Why a library could not be opened as a pincer plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// The dynamic loader refused the file.
    Dlopen {
        /// The loader's message.
        message: String,
    },
    /// The file is a shared library but exports no pincer root module.
    NotAPlugin {
        /// The loader's message.
        message: String,
    },
    /// The library was built against another major of `pincer-plugin-api`.
    ApiMajorMismatch {
        /// The version the library was built against.
        found: String,
        /// This host's version.
        host: String,
    },
    /// The library was built with another abi_stable ABI version.
    AbiStableMismatch {
        /// What the check said.
        message: String,
    },
    /// The library's types do not have the layouts this host expects.
    LayoutMismatch {
        /// The one useful line of abi_stable's report.
        summary: String,
        /// The whole report (often 20 KB), for the debug log.
        full: String,
    },
    /// The library's root-module constructor panicked or failed.
    RootModuleFailed {
        /// What happened.
        message: String,
    },
}

impl OpenError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            OpenError::Dlopen { .. } => "dlopen_failed",
            OpenError::NotAPlugin { .. } => "not_a_plugin",
            OpenError::ApiMajorMismatch { .. } => "api_major_mismatch",
            OpenError::AbiStableMismatch { .. } => "abi_stable_mismatch",
            OpenError::LayoutMismatch { .. } => "layout_mismatch",
            OpenError::RootModuleFailed { .. } => "root_module_failed",
        }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Dlopen { message } => {
                write!(f, "the dynamic loader refused the library: {message}")
            }
            OpenError::NotAPlugin { message } => write!(
                f,
                "not a pincer plugin: the library exports no pincer root module ({message}); \
                 a plugin must call `pincer_plugin_api::export_engine!`"
            ),
            OpenError::ApiMajorMismatch { found, host } => write!(
                f,
                "built against pincer-plugin-api {found}, but this host speaks {host}: \
                 rebuild the plugin against pincer-plugin-api {}.x",
                host.split('.').next().unwrap_or("1")
            ),
            OpenError::AbiStableMismatch { message } => write!(
                f,
                "built with an incompatible abi_stable ({message}): rebuild the plugin against \
                 pincer-plugin-api {}",
                API_VERSION
            ),
            OpenError::LayoutMismatch { summary, .. } => write!(
                f,
                "ABI layout mismatch ({summary}): the plugin was built against a different \
                 pincer-plugin-api; rebuild it against {}",
                API_VERSION
            ),
            OpenError::RootModuleFailed { message } => {
                write!(
                    f,
                    "the library's root module failed to initialise: {message}"
                )
            }
        }
    }
}

impl std::error::Error for OpenError {}

/// A plugin library opened and checked against this crate's v1 ABI.
///
/// **Kept mapped by default.** Opened with [`open_library`], dropping it does not `dlclose`:
/// objects from the library (engines, vtables, strings, thread-local destructors) may outlive
/// any bookkeeping the host can do, and touching one after an unmap crashes the process. Each
/// kept copy costs about 0.4 MiB. Opened with [`open_closable_library`], dropping it closes
/// the handle: see that function's safety contract.
pub struct OpenedLibrary {
    // `ManuallyDrop` makes the default leak explicit; `Drop` closes it only when `closable`.
    raw: ManuallyDrop<RawLibrary>,
    closable: bool,
    module: PluginModuleRef,
    path: PathBuf,
}

impl Drop for OpenedLibrary {
    fn drop(&mut self) {
        if self.closable {
            // SAFETY: `raw` is never used again; the caller of `open_closable_library`
            // promised that nothing from the library is alive when this value is dropped.
            unsafe { ManuallyDrop::drop(&mut self.raw) }
        }
    }
}

impl std::fmt::Debug for OpenedLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedLibrary")
            .field("path", &self.path)
            .finish()
    }
}

fn api_major(version: &str) -> &str {
    version.split('.').next().unwrap_or(version)
}

/// The useful line of abi_stable's layout report (often 20 KB): its first `Error:` with the
/// expected and found values that follow it, e.g.
/// `mismatched type: expected PluginModule, found BadLayoutModule`.
fn summarize_layout_error(full: &str) -> String {
    let lines: Vec<&str> = full.lines().map(str::trim).collect();
    let value_after = |from: usize, label: &str| -> Option<String> {
        let at = (from..lines.len()).find(|&i| lines[i].starts_with(label))?;
        let rest = lines[at][label.len()..].trim();
        if !rest.is_empty() {
            return Some(rest.to_owned());
        }
        lines[at + 1..]
            .iter()
            .find(|l| !l.is_empty())
            .map(|l| (*l).to_owned())
    };
    let mut line = match lines.iter().position(|l| l.starts_with("Error:")) {
        Some(at) => {
            let what = lines[at]["Error:".len()..].trim().to_owned();
            match (value_after(at, "Expected:"), value_after(at, "Found:")) {
                (Some(expected), Some(found)) => {
                    format!("{what}: expected {expected}, found {found}")
                }
                _ => what,
            }
        }
        None => lines
            .iter()
            .find(|l| l.contains("mismatch") || l.contains("too many"))
            .or_else(|| lines.iter().find(|l| !l.is_empty()))
            .map(|l| (*l).to_owned())
            .unwrap_or_else(|| "layouts differ".to_owned()),
    };
    if line.chars().count() > 200 {
        line = line.chars().take(200).collect::<String>() + "…";
    }
    line
}

fn map_library_error(err: LibraryError) -> OpenError {
    match err {
        LibraryError::OpenError { err, .. } => OpenError::Dlopen {
            message: err.to_string(),
        },
        LibraryError::GetSymbolError { err, .. } => OpenError::NotAPlugin {
            message: err.to_string(),
        },
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
            OpenError::ApiMajorMismatch {
                found: actual_version.to_string(),
                host: API_VERSION.to_owned(),
            }
        }
        LibraryError::ParseVersionError(e) => OpenError::AbiStableMismatch {
            message: format!("unreadable version string: {e}"),
        },
        LibraryError::InvalidAbiHeader(header) => OpenError::AbiStableMismatch {
            message: format!("abi_stable header {header:?}"),
        },
        LibraryError::InvalidCAbi { expected, found } => OpenError::AbiStableMismatch {
            message: format!("C ABI self-test expected {expected}, found {found}"),
        },
        LibraryError::AbiInstability(report) => {
            let full = report.to_string();
            OpenError::LayoutMismatch {
                summary: summarize_layout_error(&full),
                full,
            }
        }
        LibraryError::RootModule { err, .. } => OpenError::RootModuleFailed {
            message: match err {
                RootModuleError::Unwound => "it panicked".to_owned(),
                RootModuleError::Returned(e) => e.to_string(),
            },
        },
        LibraryError::Many(errors) => {
            let mut mapped: Vec<OpenError> = errors.into_iter().map(map_library_error).collect();
            mapped.pop().unwrap_or(OpenError::RootModuleFailed {
                message: "unknown failure".to_owned(),
            })
        }
    }
}

/// Opens the library at `path` and checks it against this crate's v1 ABI: the abi_stable
/// header, the `pincer-plugin-api` major, and the layout of every type reachable from the
/// root module.
///
/// # Safety
/// Opening a library runs its static initialisers. `path` must be a file the host verified
/// (format, segment bounds, optional hash) and copied to a private location no one else can
/// rewrite.
///
/// # Errors
/// [`OpenError`] saying which check failed and what to do.
pub unsafe fn open_library(path: &Path) -> Result<OpenedLibrary, OpenError> {
    // SAFETY: the caller's promise about `path`; the library is never closed.
    unsafe { open(path, false) }
}

/// Opens and checks the library at `path` as [`open_library`] does, but so that dropping the
/// returned [`OpenedLibrary`] closes its handle (`dlclose`). The dynamic loader unmaps the
/// code once every handle on the file is closed — and, with glibc, only when no thread-local
/// destructor the library registered (a `thread_local!` holding a `Drop` type, touched by
/// library code) is pending on a thread that is still running: then it stays mapped until
/// such a thread exits and a later `dlclose` runs. `std`'s own thread-exit hook, which the
/// library's `std` registers as a `pthread` key on a thread it did not start (through
/// `std::thread::current()`, or a blocking `std::sync::mpsc` receive), does **not** keep it
/// mapped: that thread's exit after the unmap crashes the process. So the host must run the
/// library's code only on threads that have exited before it drops this value. A library that
/// fails a check is never closed.
///
/// # Safety
/// As [`open_library`]; and when the returned value is dropped nothing from the library may
/// be alive or running: no engine or other object it created (their vtables and drop code
/// live in it), no `RString`/`RVec`/`RBox` it allocated, no call in progress, no thread it
/// started, and no thread still running that ran its code (see above). Touching any of them
/// after the unmap crashes the process.
///
/// # Errors
/// As [`open_library`].
pub unsafe fn open_closable_library(path: &Path) -> Result<OpenedLibrary, OpenError> {
    // SAFETY: the caller's promises about `path` and about what outlives the value.
    unsafe { open(path, true) }
}

/// # Safety
/// See [`open_library`] and [`open_closable_library`].
unsafe fn open(path: &Path, closable: bool) -> Result<OpenedLibrary, OpenError> {
    // Never `dlclose` on the error paths below, even for a closable library: the library's
    // initialisers have run and nothing here tracks what they left behind.
    let raw = ManuallyDrop::new(RawLibrary::load_at(path).map_err(map_library_error)?);
    // SAFETY: the header is tied to `raw`, which outlives every use of it here; the module
    // returned points into the library and is kept beside its handle.
    let header = unsafe { lib_header_from_raw_library(&raw) }.map_err(map_library_error)?;

    // Say "wrong major" in our words before abi_stable's check does it in its own.
    let found = header.version_strings().version.as_str().to_owned();
    if api_major(&found) != api_major(API_VERSION) {
        return Err(OpenError::ApiMajorMismatch {
            found,
            host: API_VERSION.to_owned(),
        });
    }
    let module = header
        .init_root_module::<PluginModuleRef>()
        .map_err(map_library_error)?;
    Ok(OpenedLibrary {
        raw,
        closable,
        module,
        path: path.to_owned(),
    })
}

impl OpenedLibrary {
    /// The path the library was opened from (the private copy).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The library's own manifest.
    pub fn manifest(&self) -> LibraryManifest {
        (self.module.manifest())()
    }

    /// Whether dropping this value closes the library ([`open_closable_library`]).
    pub fn is_closable(&self) -> bool {
        self.closable
    }

    /// Creates an engine. The returned object must not outlive this library (it cannot while
    /// the library is kept mapped, the default; a closable library's owner must drop it first).
    ///
    /// # Errors
    /// What the factory returned, or [`EngineError::Panicked`] if it panicked.
    pub fn new_engine(
        &self,
        params: &FactoryParams<'_>,
        host: HostServicesArc,
    ) -> Result<EngineBox, EngineError> {
        (self.module.new_engine())(params, host).into_result()
    }
}

/// The manifest a library embeds as data (see `pincer_plugin_api::export_engine!`): what the host can
/// know about a library file before running any of its code.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedManifest {
    /// The plugin id (the first engine's id).
    pub plugin_id: String,
    /// The plugin crate's version.
    pub plugin_version: String,
    /// The `pincer-plugin-api` version the library was built against.
    pub api_version: String,
    /// The engine ids the library can create.
    pub engine_ids: Vec<String>,
    /// Whether the library was built with `panic = "unwind"`.
    pub panic_unwind: bool,
    /// The abi_stable version it was built against.
    pub abi_stable_version: String,
}

/// Why a file's embedded manifest could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmbeddedManifestError {
    /// No manifest record in the file: not a pincer plugin, or one built before 1.0's final
    /// API (rebuild it against `pincer-plugin-api` 1.x).
    Missing,
    /// More than one valid record, or more candidate markers than any library has: the file
    /// was tampered with or is not one library.
    Several(usize),
}

impl EmbeddedManifestError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            EmbeddedManifestError::Missing => "not_a_plugin",
            EmbeddedManifestError::Several(_) => "embedded_manifest_ambiguous",
        }
    }
}

impl std::fmt::Display for EmbeddedManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbeddedManifestError::Missing => f.write_str(
                "the library embeds no pincer manifest; rebuild the plugin against \
                 pincer-plugin-api 1.x with `export_engine!`",
            ),
            EmbeddedManifestError::Several(n) => write!(
                f,
                "the library embeds {n} pincer manifests where there must be one; the file is \
                 damaged or was tampered with: rebuild it"
            ),
        }
    }
}

impl std::error::Error for EmbeddedManifestError {}

/// Reads the manifest a library embeds from the file's bytes, without loading it: finds the
/// record that `export_engine!` places in its own section (`.pincer_manifest` on ELF), however
/// the file is laid out. Bytes that merely look like the record's start (this crate's own copy
/// of the magic, in any binary that links this function) count only when a well-formed
/// manifest follows them.
///
/// The record is data the plugin's author controls: it tells the host, before any code runs,
/// what an honest library is (and catches mismatched or mis-built ones); it proves nothing
/// about a hostile one, which the host must contain by other means.
///
/// Linear in the file's size: at most [`MAX_MANIFEST_MARKERS`] candidates are examined, each
/// over at most [`MAX_MANIFEST_LEN`] bytes.
///
/// # Errors
/// [`EmbeddedManifestError`] when there is no record, more than one, or more markers than a
/// library can have.
pub fn read_embedded_manifest(bytes: &[u8]) -> Result<EmbeddedManifest, EmbeddedManifestError> {
    let magic = pincer_plugin_abi::MANIFEST_MAGIC.as_bytes();
    let mut found = Vec::new();
    let mut markers = 0;
    let mut at = 0;
    while let Some(offset) = find(&bytes[at..], magic) {
        markers += 1;
        if markers > MAX_MANIFEST_MARKERS {
            return Err(EmbeddedManifestError::Several(markers));
        }
        let start = at + offset + magic.len();
        at = start;
        let window = &bytes[start..bytes.len().min(start + MAX_MANIFEST_LEN)];
        let Some(len) = window.iter().position(|b| *b == 0) else {
            continue;
        };
        if let Ok(manifest) = serde_json::from_slice::<EmbeddedManifest>(&window[..len]) {
            found.push(manifest);
        }
    }
    match found.len() {
        0 => Err(EmbeddedManifestError::Missing),
        1 => Ok(found.remove(0)),
        n => Err(EmbeddedManifestError::Several(n)),
    }
}

/// The most places that may look like a manifest record's start (a real library has one, two
/// when it also links this crate's reader).
pub const MAX_MANIFEST_MARKERS: usize = 16;

/// The longest manifest record read, in bytes.
pub const MAX_MANIFEST_LEN: usize = 64 * 1024;

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle[0];
    let mut from = 0;
    while let Some(pos) = haystack[from..].iter().position(|b| *b == first) {
        let at = from + pos;
        if haystack[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_embedded_manifest_is_found_among_other_bytes() {
        let magic = pincer_plugin_abi::MANIFEST_MAGIC;
        let json = r#"{"pluginId":"p","pluginVersion":"1.0.0","apiVersion":"1.0.0","engineIds":["p"],"panicUnwind":true,"abiStableVersion":"0.11.3"}"#;
        let mut file = b"\x7fELF junk".to_vec();
        file.extend_from_slice(magic.as_bytes());
        file.extend_from_slice(b"not json\0");
        file.extend_from_slice(magic.as_bytes());
        file.extend_from_slice(json.as_bytes());
        file.extend_from_slice(b"\0more junk");
        let manifest = read_embedded_manifest(&file).unwrap();
        assert_eq!(manifest.engine_ids, ["p"]);
        assert!(manifest.panic_unwind);
        assert_eq!(
            read_embedded_manifest(b"no manifest"),
            Err(EmbeddedManifestError::Missing)
        );
        let mut twice = file.clone();
        twice.extend_from_slice(&file);
        assert_eq!(
            read_embedded_manifest(&twice),
            Err(EmbeddedManifestError::Several(2))
        );
        // A file made of markers and no manifest is refused quickly, not scanned 64 KiB a time.
        let flood = magic.repeat(1_000_000);
        assert!(matches!(
            read_embedded_manifest(flood.as_bytes()),
            Err(EmbeddedManifestError::Several(n)) if n == MAX_MANIFEST_MARKERS + 1
        ));
    }

    #[test]
    fn layout_report_is_summarized_to_its_useful_line() {
        let full = format!(
            "{}\nError:mismatched type\nExpected:\n    u64\nFound:\n    u32\n",
            "Compared <this>:\n    fields: ...\n".repeat(500)
        );
        assert_eq!(
            summarize_layout_error(&full),
            "mismatched type: expected u64, found u32"
        );
        assert_eq!(
            summarize_layout_error("too many fields\n"),
            "too many fields"
        );
    }

    #[test]
    fn a_missing_file_is_a_dlopen_error_not_a_crash() {
        // SAFETY: the file does not exist; nothing is loaded.
        let err = unsafe { open_library(Path::new("/nonexistent/libx.so")) }.unwrap_err();
        assert_eq!(err.code(), "dlopen_failed");
    }
}
