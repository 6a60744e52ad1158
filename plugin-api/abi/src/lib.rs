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
//! of both, and the one a plugin's manifest records. What changed in each release:
//! `CHANGELOG.md` beside this crate's `Cargo.toml`.
//!
//! ## Evolution
//!
//! The rule third parties can rely on: **a plugin built against 1.x loads in every host of
//! 1.y with y ≥ x.**
//!
//! - The v1 ABI types never change layout. abi_stable checks layouts at load, and its check is
//!   directional: a host compiled against a root module or vtable with more members refuses
//!   plugins compiled with fewer. `cargo xtask abi-check` (also run by `cargo test`) compares
//!   every frozen type's layout with the committed baseline and fails on any change.
//! - So the root module ([`v1::PluginModule`]), the engine object
//!   ([`v1::EngineAbi`]) and the host services ([`v1::HostServicesAbi`]) each end in an
//!   `extension(name)` member marked `#[sabi(last_prefix_field)]`. A later minor adds a
//!   capability as a separately checked extension module (see [`extension`]); a host asks for it
//!   by name and treats its absence as "older plugin".
//! - The authoring API (`pincer-plugin-api`) may grow in a minor (new optional traits, new
//!   helpers, new fields of the `#[non_exhaustive]` parameter views) without touching the ABI.
//! - A change that cannot be expressed that way is a new major (`v2`); hosts import
//!   [`latest`] and keep one adapter per older major.
//! - The library's manifest carries the api version it was built against; the host refuses a
//!   different major, and a newer minor than its own only if the plugin declares it needs it
//!   (`apiVersion` in `pincer.plugin.json`).
//!
//! ### Enums
//!
//! No ABI enum gains a variant in 1.x, and none uses abi_stable's `NonExhaustive`: a new
//! variant changes the layout every 1.0 library was checked against (so old plugins would be
//! refused), and `NonExhaustive` costs an indirection and an interface type on every value.
//! Instead, each enum is either a closed set by the contract, or carries its open end inside:
//!
//! | enum | direction | why it is closed |
//! |---|---|---|
//! | [`Role`](v1::Role), [`BlockKind`](v1::BlockKind), the private content representation | host → engine | OpenClaw adds roles and block types; they arrive as `Other`, with their name and JSON kept, so nothing is lost and nothing needs a new variant |
//! | [`HostOperation`](v1::HostOperation) | engine → host | the contract's three operations; a new one is a new host-requirements extension |
//! | [`TurnMaintenanceMode`](v1::TurnMaintenanceMode), [`PromptAuthority`](v1::PromptAuthority) | engine → host | two values each, fixed by the contract |
//! | [`CompactionTarget`](v1::CompactionTarget), [`SubagentContextMode`](v1::SubagentContextMode), [`SubagentEndReason`](v1::SubagentEndReason) | host → engine | fixed by the contract; a new value would be unreadable to 1.0 engines, so it goes to an extension |
//! | [`CommitTurnStatus`](v1::CommitTurnStatus) | engine → host | the contract accepts exactly `committed` and `duplicate` |
//! | [`EngineError`](v1::EngineError) | engine → host | its kinds decide the host's reaction (quarantine, abort, not implemented); new detail goes in the message |
//! | [`LogLevel`](v1::LogLevel), [`AssembledItem`](v1::AssembledItem) | both | tracing's five levels; a context item is a reference or a new message |
//! | `RuntimeMode`, `SelectionSource`, `ReasonCode` | host → engine | `runtimeSettings` schema version 1 (§7) fixes them |
//!
//! Strings stay strings where the contract's set is open: capability names, `maintain`'s
//! reason (`MaintainReason::Other` in the authoring API), `transcriptSemantics` values.

#![allow(non_local_definitions)] // emitted by abi_stable's derives on current rustc
#![warn(missing_docs)]

pub mod extension;
pub mod objects;
pub mod v1;

#[doc(hidden)]
pub mod fixtures;
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
