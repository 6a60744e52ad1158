//! Installing a plugin: a plugin folder, or a `.tar.gz` of one, copied into
//! `$PINCER_HOME/plugins/<id>/` — `pincer plugins install`.
//!
//! Nothing is copied until the plugin passed every check verified loading makes without
//! running plugin code ([`Loader::verify`]: manifest, API requirement, library confinement,
//! size, sha256, segment bounds, the library's embedded manifest against the sidecar). The
//! copy is made in `$PINCER_HOME/plugins/.staging/` (which discovery never reads), with the
//! library written from the very bytes that were verified, checked again there, and only then
//! renamed into place; a failure at any step leaves the home as it was.
//!
//! An archive is unpacked into a private temporary folder first; entries that are links,
//! devices, absolute paths or paths leaving the folder are refused, as are archives larger
//! than [`MAX_ARCHIVE_BYTES`] unpacked.

use std::fs::File;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use crate::plugins::library::{LoadError, Loader, VerifiedPlugin};
use crate::plugins::manifest::{PluginManifest, MANIFEST_FILE_NAME};

/// The most an archive may unpack to.
pub const MAX_ARCHIVE_BYTES: u64 = 1 << 30;

/// The most entries an archive may hold.
pub const MAX_ARCHIVE_ENTRIES: usize = 10_000;

/// A plugin now in `$PINCER_HOME/plugins/<id>/`.
#[derive(Debug)]
pub struct InstalledPlugin {
    /// Its manifest (read from the installed copy).
    pub manifest: PluginManifest,
    /// The installed folder.
    pub dir: PathBuf,
    /// The installed library's sha256.
    pub sha256: String,
    /// Whether an installed plugin of the same id was replaced.
    pub replaced: bool,
}

/// Why a plugin was not installed. The home is unchanged in every case.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The source does not exist.
    #[error("{} does not exist: give a plugin folder (with {MANIFEST_FILE_NAME}) or a .tar.gz of one", path.display())]
    NotFound {
        /// The source.
        path: PathBuf,
    },
    /// The source is neither a plugin folder nor an archive of one.
    #[error("{} is not a plugin: {reason}", path.display())]
    NotAPlugin {
        /// The source.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// The archive is damaged or holds something that may not be unpacked.
    #[error("{} cannot be unpacked safely: {reason}; nothing was installed", path.display())]
    Archive {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The plugin failed verification.
    #[error("refused {}: {source}; nothing was installed", path.display())]
    Verify {
        /// The plugin folder that was checked.
        path: PathBuf,
        /// The failed check.
        source: LoadError,
    },
    /// A plugin of this id is already installed.
    #[error("plugin \"{id}\" is already installed in {}: run `pincer plugins remove {id}` first, or install with --force to replace it", dir.display())]
    AlreadyInstalled {
        /// The plugin id.
        id: String,
        /// Its folder.
        dir: PathBuf,
    },
    /// A file operation failed.
    #[error("cannot {action} {}: {source}; nothing was installed", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl InstallError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            InstallError::NotFound { .. } => "install_source_missing",
            InstallError::NotAPlugin { .. } => "install_not_a_plugin",
            InstallError::Archive { .. } => "install_bad_archive",
            InstallError::Verify { source, .. } => source.code(),
            InstallError::AlreadyInstalled { .. } => "already_installed",
            InstallError::Io { .. } => "install_io",
        }
    }
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> InstallError {
    let path = path.to_owned();
    move |source| InstallError::Io {
        action,
        path,
        source,
    }
}

/// A folder removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = crate::disk::remove_dir_all(&self.0);
    }
}

/// Whether `path` names a gzip archive (by its magic bytes).
fn is_gzip(path: &Path) -> bool {
    let mut magic = [0u8; 2];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == [0x1f, 0x8b]
}

/// Checks the plugin folder `dir` without copying or running anything.
///
/// # Errors
/// [`InstallError::Verify`], or [`InstallError::NotAPlugin`] when `dir` holds no manifest.
pub fn verify_folder(dir: &Path) -> Result<VerifiedPlugin, InstallError> {
    if !dir.exists() {
        return Err(InstallError::NotFound {
            path: dir.to_owned(),
        });
    }
    if !dir.join(MANIFEST_FILE_NAME).is_file() {
        return Err(InstallError::NotAPlugin {
            path: dir.to_owned(),
            reason: format!(
                "it holds no {MANIFEST_FILE_NAME} (build one with `pincer plugins pack`)"
            ),
        });
    }
    Loader::new(PathBuf::new())
        .verify(dir)
        .map_err(|source| InstallError::Verify {
            path: dir.to_owned(),
            source,
        })
}

/// A plugin source that passed every check, ready to be copied in
/// ([`PreparedPlugin::commit`]). An archive stays unpacked in a private temporary folder until
/// this is dropped.
pub struct PreparedPlugin {
    source: PathBuf,
    folder: PathBuf,
    checked: VerifiedPlugin,
    _unpacked: Option<TempDir>,
}

impl std::fmt::Debug for PreparedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedPlugin")
            .field("source", &self.source)
            .field("id", &self.checked.manifest.id)
            .finish()
    }
}

/// Unpacks (an archive) and verifies the plugin at `source` (a folder or a `.tar.gz`),
/// touching nothing in the home.
///
/// # Errors
/// See [`InstallError`].
pub fn prepare(source: &Path) -> Result<PreparedPlugin, InstallError> {
    if !source.exists() {
        return Err(InstallError::NotFound {
            path: source.to_owned(),
        });
    }
    let mut unpacked = None;
    let folder = if source.is_file() {
        if !is_gzip(source) {
            return Err(InstallError::NotAPlugin {
                path: source.to_owned(),
                reason: "a file that is not a .tar.gz archive".into(),
            });
        }
        let temp =
            TempDir(std::env::temp_dir().join(format!("pincer-install-{}", uuid::Uuid::new_v4())));
        unpack(source, &temp.0)?;
        let root = archive_root(source, &temp.0)?;
        unpacked = Some(temp);
        root
    } else {
        source.to_owned()
    };
    let checked = verify_folder(&folder)?;
    Ok(PreparedPlugin {
        source: source.to_owned(),
        folder,
        checked,
        _unpacked: unpacked,
    })
}

impl PreparedPlugin {
    /// The verified manifest.
    pub fn manifest(&self) -> &PluginManifest {
        &self.checked.manifest
    }

    /// Probes the library with `loader`'s probe (a throwaway worker process runs its
    /// constructors and checks) before anything is copied.
    ///
    /// # Errors
    /// [`InstallError::Verify`] with [`super::library::LoadError::ProbeFailed`].
    pub fn probe(&self, loader: &Loader) -> Result<(), InstallError> {
        loader
            .probe(&self.checked)
            .map_err(|source| InstallError::Verify {
                path: self.source.clone(),
                source,
            })
    }

    /// The verified library's sha256 (what `install` records in the config).
    pub fn library_sha256(&self) -> &str {
        &self.checked.verified.sha256_hex
    }

    /// Copies the plugin into `plugins_dir/<id>/`; `replace` allows replacing an installed
    /// plugin of the same id.
    ///
    /// # Errors
    /// See [`InstallError`]; the home is unchanged on error.
    pub fn commit(
        self,
        plugins_dir: &Path,
        replace: bool,
    ) -> Result<InstalledPlugin, InstallError> {
        let id = self.checked.manifest.id.clone();
        let dest = plugins_dir.join(&id);
        if dest.exists() && !replace {
            return Err(InstallError::AlreadyInstalled { id, dir: dest });
        }
        let staging_root = plugins_dir.join(".staging");
        crate::disk::create_dir_all(&staging_root).map_err(io_error("create", &staging_root))?;
        let staged = TempDir(staging_root.join(uuid::Uuid::new_v4().to_string()));
        if let Err(err) = copy_plugin(&self.folder, &staged.0, &self.checked) {
            // The home as it was: no half-copied plugin, no staging folder made for it.
            drop(staged);
            let _ = crate::disk::remove_dir(&staging_root);
            return Err(err);
        }
        // Checked again where it will live: the copy is what the host will load.
        let again = verify_folder(&staged.0)?;
        if again.verified.sha256_hex != self.checked.verified.sha256_hex || again.manifest.id != id
        {
            return Err(InstallError::NotAPlugin {
                path: self.source.clone(),
                reason: "it changed while it was being copied; install it again".into(),
            });
        }
        let replaced = dest.exists();
        let old = TempDir(staging_root.join(format!("{}-old", uuid::Uuid::new_v4())));
        if replaced {
            crate::disk::rename(&dest, &old.0).map_err(io_error("move aside", &dest))?;
        }
        if let Err(err) = crate::disk::rename(&staged.0, &dest) {
            if replaced {
                let _ = crate::disk::rename(&old.0, &dest);
            }
            return Err(io_error("move into place", &dest)(err));
        }
        drop(old);
        drop(staged);
        let _ = crate::disk::remove_dir(&staging_root);
        let mut manifest = again.manifest;
        manifest.dir = dest.clone();
        Ok(InstalledPlugin {
            manifest,
            dir: dest,
            sha256: again.verified.sha256_hex,
            replaced,
        })
    }
}

#[cfg(any(test, feature = "test-support"))]
/// Installs the plugin at `source` (a folder or a `.tar.gz`) into `plugins_dir/<id>/`:
/// [`prepare`], then [`PreparedPlugin::commit`].
///
/// # Errors
/// See [`InstallError`]; the home is unchanged on error.
pub fn install(
    source: &Path,
    plugins_dir: &Path,
    replace: bool,
) -> Result<InstalledPlugin, InstallError> {
    prepare(source)?.commit(plugins_dir, replace)
}

/// Removes an installed plugin folder: renamed aside first (so the plugin disappears at
/// once), then deleted.
///
/// # Errors
/// The rename failed (the plugin is still installed).
pub fn uninstall(dir: &Path, plugins_dir: &Path) -> Result<(), InstallError> {
    let staging_root = plugins_dir.join(".staging");
    crate::disk::create_dir_all(&staging_root).map_err(io_error("create", &staging_root))?;
    let aside = TempDir(staging_root.join(format!("{}-removed", uuid::Uuid::new_v4())));
    crate::disk::rename(dir, &aside.0).map_err(io_error("remove", dir))?;
    drop(aside);
    let _ = crate::disk::remove_dir(&staging_root);
    Ok(())
}

/// Copies the plugin folder `from` into the new folder `to`: every regular file and folder,
/// the library written from the verified bytes. Links are refused.
fn copy_plugin(from: &Path, to: &Path, checked: &VerifiedPlugin) -> Result<(), InstallError> {
    let library = std::fs::canonicalize(&checked.library).unwrap_or(checked.library.clone());
    let mut stack = vec![(from.to_owned(), to.to_owned())];
    while let Some((src, dst)) = stack.pop() {
        crate::disk::create_dir_all(&dst).map_err(io_error("create", &dst))?;
        let listing = std::fs::read_dir(&src).map_err(io_error("read", &src))?;
        for entry in listing {
            let entry = entry.map_err(io_error("read", &src))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io_error("read", &path))?;
            let target = dst.join(entry.file_name());
            if kind.is_dir() {
                stack.push((path, target));
            } else if kind.is_file() {
                let same_as_library = std::fs::canonicalize(&path).is_ok_and(|p| p == library);
                if same_as_library {
                    crate::disk::write(&target, &checked.verified.bytes)
                        .map_err(io_error("write", &target))?;
                } else {
                    crate::disk::copy(&path, &target).map_err(io_error("copy", &path))?;
                }
            } else {
                return Err(InstallError::NotAPlugin {
                    path: path.clone(),
                    reason: "plugin folders may hold only regular files and folders, not links or devices".into(),
                });
            }
        }
    }
    Ok(())
}

/// Unpacks the `.tar.gz` at `archive` into the new folder `into`.
fn unpack(archive: &Path, into: &Path) -> Result<(), InstallError> {
    let bad = |reason: String| InstallError::Archive {
        path: archive.to_owned(),
        reason,
    };
    // `into` is a fresh folder under the system's temp dir, outside the home: not the seam's.
    std::fs::create_dir_all(into).map_err(io_error("create", into))?;
    let file = File::open(archive).map_err(io_error("open", archive))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = tar.entries().map_err(|e| bad(e.to_string()))?;
    let (mut total, mut count) = (0u64, 0usize);
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        count += 1;
        if count > MAX_ARCHIVE_ENTRIES {
            return Err(bad(format!("more than {MAX_ARCHIVE_ENTRIES} entries")));
        }
        let path = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            return Err(bad(format!(
                "entry {} is a {kind:?}, not a regular file or folder",
                path.display()
            )));
        }
        if path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(bad(format!(
                "entry {} is absolute or leaves the archive's folder",
                path.display()
            )));
        }
        total = total.saturating_add(entry.size());
        if total > MAX_ARCHIVE_BYTES {
            return Err(bad(format!(
                "it unpacks to more than {MAX_ARCHIVE_BYTES} bytes"
            )));
        }
        let unpacked = entry.unpack_in(into).map_err(|e| bad(e.to_string()))?;
        if !unpacked {
            return Err(bad(format!(
                "entry {} leaves the archive's folder",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The plugin folder inside an unpacked archive: its top level, or its only folder.
fn archive_root(archive: &Path, unpacked: &Path) -> Result<PathBuf, InstallError> {
    if unpacked.join(MANIFEST_FILE_NAME).is_file() {
        return Ok(unpacked.to_owned());
    }
    let folders: Vec<PathBuf> = std::fs::read_dir(unpacked)
        .map_err(io_error("read", unpacked))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    match folders.as_slice() {
        [only] if only.join(MANIFEST_FILE_NAME).is_file() => Ok(only.clone()),
        _ => Err(InstallError::NotAPlugin {
            path: archive.to_owned(),
            reason: format!(
                "the archive holds no {MANIFEST_FILE_NAME} at its top level or in its only folder"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_gz(path: &Path, entries: &[(&str, &[u8])]) {
        let file = File::create(path).unwrap();
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::fast(),
        ));
        for (name, bytes) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            // `set_path` refuses `..`; write the name raw, as a hostile archive would.
            header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_cksum();
            builder.append(&header, *bytes).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap();
    }

    #[test]
    fn archives_that_leave_their_folder_are_refused_and_nothing_is_installed() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("evil.tar.gz");
        tar_gz(&archive, &[("../escape.txt", b"x")]);
        let plugins = dir.path().join("home").join("plugins");
        let err = install(&archive, &plugins, false).unwrap_err();
        assert_eq!(err.code(), "install_bad_archive", "{err}");
        assert!(!dir.path().join("escape.txt").exists());
        assert!(!plugins.exists(), "nothing was created in the home");
    }

    #[test]
    fn an_archive_without_a_manifest_is_not_a_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("empty.tar.gz");
        tar_gz(&archive, &[("readme.txt", b"hello")]);
        let err = install(&archive, &dir.path().join("plugins"), false).unwrap_err();
        assert_eq!(err.code(), "install_not_a_plugin", "{err}");
    }
}

/// A JSON Schema type name, as a config schema gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    /// `string`.
    String,
    /// `integer`.
    Integer,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
    /// `object`.
    Object,
    /// `array`.
    Array,
    /// `null`.
    Null,
}

impl SchemaType {
    /// The schema's name of `name`, if it is one.
    pub fn parse(name: &str) -> Option<SchemaType> {
        Some(match name {
            "string" => SchemaType::String,
            "integer" => SchemaType::Integer,
            "number" => SchemaType::Number,
            "boolean" => SchemaType::Boolean,
            "object" => SchemaType::Object,
            "array" => SchemaType::Array,
            "null" => SchemaType::Null,
            _ => return None,
        })
    }

    /// The schema's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::String => "string",
            SchemaType::Integer => "integer",
            SchemaType::Number => "number",
            SchemaType::Boolean => "boolean",
            SchemaType::Object => "object",
            SchemaType::Array => "array",
            SchemaType::Null => "null",
        }
    }
}

/// A top-level key an engine's config schema requires (`required`), and the types its
/// `properties` entry allows (none: the schema does not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredKey {
    /// The key.
    pub name: String,
    /// The types it may have.
    pub types: Vec<SchemaType>,
}

impl std::fmt::Display for RequiredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.types.is_empty() {
            return write!(f, "{} (any type)", self.name);
        }
        let types: Vec<&str> = self.types.iter().map(|t| t.as_str()).collect();
        write!(f, "{} ({})", self.name, types.join(" or "))
    }
}

/// The keys `manifest`'s config schema requires at the top level, in the schema's order.
pub fn required_config_keys(manifest: &PluginManifest) -> Vec<RequiredKey> {
    let schema = &manifest.config_schema;
    let Some(required) = schema.get("required").and_then(serde_json::Value::as_array) else {
        return Vec::new();
    };
    required
        .iter()
        .filter_map(serde_json::Value::as_str)
        .map(|name| {
            let declared = &schema["properties"][name]["type"];
            let types = match declared {
                serde_json::Value::String(one) => SchemaType::parse(one).into_iter().collect(),
                serde_json::Value::Array(many) => many
                    .iter()
                    .filter_map(serde_json::Value::as_str)
                    .filter_map(SchemaType::parse)
                    .collect(),
                _ => Vec::new(),
            };
            RequiredKey {
                name: name.to_owned(),
                types,
            }
        })
        .collect()
}
