//! Plugins on disk, before any of their code runs as an engine: the manifest
//! (`pincer.plugin.json`), discovery of plugin folders, verification of a library file, the
//! private content-addressed cache, who may change a plugin's files, the unsafe loader that opens a
//! verified library copy, the verified library itself, the catalog of what is
//! installed, installing, and packing a built engine into a plugin folder.
//!
//! Depends only on [`crate::types`] and [`crate::config`]; nothing here knows engines, the
//! slot or quarantine.

pub mod cache;
pub mod catalog;
pub mod discovery;
pub mod install;
pub mod library;
pub(crate) mod loading;
pub mod manifest;
pub mod pack;
pub mod permissions;
pub mod verify;

pub use library::LoadError;
pub use manifest::MANIFEST_FILE_NAME;
