//! # pincer-plugin-abi
//!
//! The ABI layer of [pincer](https://example.invalid/pincer)'s engine contract: the frozen
//! `#[repr(C)]`, `StableAbi` types a host and a context-engine plugin exchange — messages,
//! parameters and results of every engine method, `runtimeSettings` v1, the engine and
//! host-services trait objects, the root module a plugin exports — together with the layout
//! report behind `cargo xtask abi-check` and its committed baseline (`v1.layout.txt`, beside
//! this crate's `Cargo.toml`).
//!
//! **API Boundary**: what third-party binaries are compiled against. Engine authors do not
//! depend on this crate: they write against `pincer-plugin-api`, whose `export_engine!` adapts
//! an engine to these types. Hosts depend on it directly and use it through [`latest`].
//!
//! `v1` is the only version so far; `latest` always names the newest, and hosts keep one
//! adapter per older version (the Zed extension-host pattern) once there is more than one.
//! This crate and `pincer-plugin-api` are released in lockstep: [`API_VERSION`] is the version
//! of both, and the one a plugin's manifest records.

#![allow(non_local_definitions)] // emitted by abi_stable's derives on current rustc
#![warn(missing_docs)]

pub mod extension;
pub mod objects;
pub mod v1;

#[doc(hidden)]
pub mod layout_report;

pub use v1 as latest;

/// FFI-safe standard types used in the ABI.
pub use abi_stable::std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec};

/// The crate the ABI is built on, for the host's loader and the export machinery of
/// `pincer-plugin-api`. Not part of the API.
#[doc(hidden)]
pub use abi_stable;

/// The version of the engine contract (this crate's and `pincer-plugin-api`'s), compiled into
/// every plugin's manifest.
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The abi_stable version the ABI layer is built on.
pub const ABI_STABLE_VERSION: &str = "0.11.3";

/// The bytes that open the manifest record a library embeds as data (written by
/// `pincer-plugin-api`'s `export_engine!`, read by the host before it runs any of the
/// library's code).
pub const MANIFEST_MAGIC: &str = "\u{0}PINCER-LIBRARY-MANIFEST\u{0}v1\u{0}";
