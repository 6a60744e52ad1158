//! # pincer-plugin-api
//!
//! The engine contract of [pincer](https://example.invalid/pincer): everything a context
//! engine plugin's author writes against: a plain Rust [`Engine`] trait and one trait per
//! optional method, whose parameters are borrowed views (`&str`, `&[Message]`, `Option<u64>`,
//! plain enums) and whose results are built with builders ([`ContextBuilder`],
//! [`CompactResult`], [`EngineInfo`]); errors are the opaque [`EngineError`].
//! [`export_engine!`] adapts an engine to the ABI, catches every panic inside the plugin,
//! forwards the plugin's `tracing` events to the host, and embeds the library's own manifest.
//! Engine authors need nothing else, and see no FFI type.
//!
//! The crates of the contract, after nushell's plugin crates:
//!
//! - `pincer-plugin-api` (this crate): the authoring API. Its `testing` feature adds
//!   `testing`, the test support (a dev-dependency feature).
//! - `pincer-plugin-abi`: the ABI layer — frozen `#[repr(C)]` types checked by `abi_stable` at
//!   load time, the root module a plugin exports, the layout baseline. **API Boundary**: what
//!   third-party binaries are compiled against; hosts depend on it directly. Authors never
//!   name it: this crate's macros reach it themselves.
//!
//! ## Writing an engine
//!
//! A `cdylib` crate with this crate as its one dependency, a `pincer.plugin.json` beside it,
//! and:
//!
//! ```
//! use pincer_plugin_api::prelude::*;
//!
//! /// Keeps the newest `keep` messages.
//! struct Newest {
//!     keep: usize,
//!     host: Host,
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Config {
//!     keep: usize,
//! }
//!
//! impl Engine for Newest {
//!     const ID: &'static str = "newest";
//!
//!     fn create(ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
//!         let config: Config = ctx.config()?;
//!         if config.keep == 0 {
//!             return Err(EngineError::invalid_config("`keep` must be at least 1"));
//!         }
//!         Ok(Newest { keep: config.keep, host })
//!     }
//!
//!     fn info(&self) -> Result<EngineInfo, EngineError> {
//!         Ok(EngineInfo::new("Newest messages", env!("CARGO_PKG_VERSION")))
//!     }
//!
//!     fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
//!         Ok(IngestResult { ingested: false })
//!     }
//!
//!     fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
//!         let n = params.messages.len();
//!         // References to the host's messages, not copies.
//!         Ok(ContextBuilder::new().keep_range(n.saturating_sub(self.keep)..n).finish())
//!     }
//!
//!     fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
//!         // It does not own compaction: the runtime's keeps `/compact` and overflow recovery
//!         // working (see `Engine::compact`).
//!         self.host.delegate_compaction_to_runtime(params)
//!     }
//! }
//!
//! pincer_plugin_api::export_engine!(Newest);
//! # fn main() {}
//! ```
//!
//! Errors are [`EngineError`]s: an opaque value built with its constructors
//! ([`EngineError::failed`], [`EngineError::invalid_config`], …) and read with
//! [`EngineError::kind`] and [`EngineError::message`].
//!
//! Optional methods are traits ([`AfterTurn`], [`Bootstrap`], [`CommitTurn`], [`Dispose`], …):
//! implement the ones you need and the host sees exactly those (the contract's lifecycle
//! depends on it).
//!
//! `testing` (the `testing` cargo feature, for your dev-dependencies) lets you test an engine
//! the way the host will drive it — through the entry point your library exports — without a
//! host:
//!
//! ```toml
//! [dev-dependencies]
//! pincer-plugin-api = { version = "1", features = ["testing"] }
//! ```
//!
//! ## Messages
//!
//! [`Message`] is OpenClaw's agent message, every role (`user`, `assistant`, `toolResult`,
//! `custom`, `compactionSummary`, `branchSummary`, `bashExecution`, `system`, and any later
//! one) with its own fields, read and written **losslessly**: unknown keys and block types
//! survive. The session entry id a message came from travels beside it
//! ([`AssembleParams::entry_ids`]), never inside it.
//!
//! ## Panics
//!
//! Every call is run under `catch_unwind` inside the plugin and a panic comes back to the host
//! as [`ErrorKind::Panicked`] carrying the message and location; the host quarantines the
//! engine and keeps answering on `legacy`. This only works with `panic = "unwind"` (the
//! default). A library built with `panic = "abort"` is refused before it is loaded: its
//! embedded manifest says how it was built.
//!
//! ## Reload and unloading
//!
//! A host reloads a plugin by loading the new build beside the old one; the old instance
//! serves the calls already holding it, then is disposed once ([`Dispose`]). By default the
//! old library stays mapped for the life of the process. With
//! `plugins.entries.<id>.unloadOnReload: true` the host closes it once nothing from it is
//! alive — so **`dispose` must join every thread the engine started**: the host cannot see
//! them, and one still running after the unmap crashes the process. See [`Dispose`].
//!
//! ## The library's manifest
//!
//! [`export_engine!`] embeds the library's manifest — plugin id, version, api version, engine
//! ids, `panic = "unwind"`, abi_stable version — as plain JSON data in a section of its own
//! (`.pincer_manifest` on ELF), so a host reads it from the file's bytes before it runs any of
//! the library's code. The root
//! module returns the same manifest once loaded.
//!
//! ## Evolution
//!
//! The rule third parties can rely on: **a plugin built against 1.x loads in every host of
//! 1.y with y ≥ x.**
//!
//! - This crate may grow in a minor (new optional traits, new helpers, new fields of the
//!   `#[non_exhaustive]` parameter views) without touching the ABI.
//! - The ABI underneath (the `pincer-plugin-abi` crate, released in lockstep with this one)
//!   never changes layout in 1.x; new capabilities are separately checked extensions. Its
//!   documentation has the rules, and why each of its enums is closed.
//! - The library's manifest carries the api version it was built against; the host refuses a
//!   different major, and a newer minor than its own only if the plugin declares it needs it
//!   (`apiVersion` in `pincer.plugin.json`).
//! - What changed in each release, and how to migrate: `CHANGELOG.md` beside this crate's
//!   `Cargo.toml`.
//!
//! Strings stay strings where the contract's set is open: capability names, `maintain`'s
//! reason ([`MaintainReason::Other`]), `transcriptSemantics` values.

#![warn(missing_docs)]

mod author;
pub mod interop;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tokens;

/// The ABI layer (the `pincer-plugin-abi` crate), for the export machinery and for hosts that
/// still reach it through this crate. Not part of the authoring API: an engine never needs it.
#[doc(hidden)]
pub use pincer_plugin_abi as abi;

/// The ABI's checked extension point (`pincer_plugin_abi::extension`). Not part of the
/// authoring API.
#[doc(hidden)]
pub use pincer_plugin_abi::extension;

pub use abi::v1::{
    AbortSignal, BlockKind, CommitTurnStatus, CompactionTarget, Content, ContentBlock, Cost,
    EntryId, HostOperation, IngestBatchResult, IngestResult, Message, MessageError,
    PromptAuthority, ReasonCode, Role, RuntimeMode, SelectionSource, SubagentContextMode,
    SubagentEndReason, ToolCallRef, TurnMaintenanceMode, Usage,
};
pub use author::{
    AfterTurn, AfterTurnParams, AssembleParams, AssembleResult, Bootstrap, BootstrapParams,
    BootstrapResult, CommitTurn, CommitTurnParams, CompactParams, CompactResult, Compaction,
    ContextBuilder, ContextItem, Dispose, Engine, EngineError, EngineInfo, EntryIds, ErrorKind,
    FactoryContext, Host, HostParams, IngestBatch, IngestBatchParams, IngestParams, LlmRequest,
    Maintain, MaintainParams, MaintainReason, MaintainResult, ModelRef, PromptCache,
    RuntimeSettings, SessionTarget, SpawnRollback, SubagentEnded, SubagentEndedParams,
    SubagentSpawn, SubagentSpawnParams, ToolCallParams, ToolCallResult, ToolNames, ToolSpec, Tools,
    TranscriptAnchor,
};

/// How a host links an engine statically (pincer's built-in `legacy`, benchmarks, tests): the
/// ABI object a plugin library would return for it. Not part of the authoring API.
#[doc(hidden)]
pub use author::{into_engine_box, OptionalFns};

/// The version of the engine contract, compiled into every plugin's manifest: this crate's
/// version, which `pincer-plugin-abi` shares (the two are released in lockstep).
pub const API_VERSION: &str = pincer_plugin_abi::API_VERSION;

/// The abi_stable version the ABI layer is built on.
pub const ABI_STABLE_VERSION: &str = pincer_plugin_abi::ABI_STABLE_VERSION;

/// Everything an engine author needs, in one import.
pub mod prelude {
    pub use crate::{
        AfterTurn, AfterTurnParams, AssembleParams, AssembleResult, Bootstrap, BootstrapParams,
        BootstrapResult, CommitTurn, CommitTurnParams, CommitTurnStatus, CompactParams,
        CompactResult, Compaction, Content, ContentBlock, ContextBuilder, Dispose, Engine,
        EngineError, EngineInfo, ErrorKind, FactoryContext, Host, HostOperation, IngestBatch,
        IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, LlmRequest, Maintain,
        MaintainParams, MaintainReason, MaintainResult, Message, Role, SpawnRollback,
        SubagentEnded, SubagentEndedParams, SubagentSpawn, SubagentSpawnParams, ToolCallParams,
        ToolCallResult, Tools, TurnMaintenanceMode,
    };
}

/// Implementation details of the macros. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use pincer_plugin_abi as abi;

    pub use crate::author::export::{make_engine, new_engine_entry, EngineMaker, Exported};

    pub use pincer_plugin_abi::MANIFEST_MAGIC;

    /// The length of the record made of `parts`, with its closing NUL.
    pub const fn record_len(parts: &[&str]) -> usize {
        let mut len = 1;
        let mut i = 0;
        while i < parts.len() {
            len += parts[i].len();
            i += 1;
        }
        len
    }

    /// The record made of `parts`, NUL-terminated.
    pub const fn record<const N: usize>(parts: &[&str]) -> [u8; N] {
        let mut out = [0u8; N];
        let mut at = 0;
        let mut i = 0;
        while i < parts.len() {
            let bytes = parts[i].as_bytes();
            let mut j = 0;
            while j < bytes.len() {
                out[at] = bytes[j];
                at += 1;
                j += 1;
            }
            i += 1;
        }
        out
    }

    /// Whether `id` is non-empty and uses only `a-z A-Z 0-9 - _ .` (so it needs no JSON escape).
    pub const fn is_plain_id(id: &str) -> bool {
        let bytes = id.as_bytes();
        if bytes.is_empty() {
            return false;
        }
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.') {
                return false;
            }
            i += 1;
        }
        true
    }

    /// Whether no two of `ids` are equal.
    pub const fn all_distinct(ids: &[&str]) -> bool {
        let mut i = 0;
        while i < ids.len() {
            let mut j = i + 1;
            while j < ids.len() {
                if const_str_eq(ids[i], ids[j]) {
                    return false;
                }
                j += 1;
            }
            i += 1;
        }
        true
    }

    const fn const_str_eq(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// Whether `version` needs no JSON escape (semver with `+` and `.` allowed).
    pub const fn is_plain_version(version: &str) -> bool {
        let bytes = version.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if !(b.is_ascii_alphanumeric() || b == b'-' || b == b'+' || b == b'.') {
                return false;
            }
            i += 1;
        }
        !bytes.is_empty()
    }
    pub use pincer_plugin_abi::abi_stable;
    pub use pincer_plugin_abi::abi_stable::library::{LibHeader, RootModuleResult};

    /// The autoref-specialisation probes behind [`crate::optional_fns!`].
    pub mod probes {
        pub use crate::author::export::{
            HasAfterTurn, HasBootstrap, HasCommitTurn, HasDispose, HasIngestBatch, HasMaintain,
            HasSubagentEnded, HasSubagentSpawn, HasTools, LacksAfterTurn, LacksBootstrap,
            LacksCommitTurn, LacksDispose, LacksIngestBatch, LacksMaintain, LacksSubagentEnded,
            LacksSubagentSpawn, LacksTools, Probe,
        };
    }

    use crate::abi::v1::{
        ExtensionRef, LibraryManifest, NewEngineFn, PluginModule, PluginModuleRef,
    };
    use crate::abi::{ROption, RStr};
    use abi_stable::library::{CheckTypeLayout, RootModule};
    use abi_stable::prefix_type::PrefixTypeTrait;

    /// The library manifest the export macro embeds.
    pub fn library_manifest(
        plugin_id: &str,
        plugin_version: &str,
        engine_ids: &[&str],
        panic_unwind: bool,
    ) -> LibraryManifest {
        LibraryManifest {
            plugin_id: plugin_id.into(),
            plugin_version: plugin_version.into(),
            api_version: crate::API_VERSION.into(),
            engine_ids: engine_ids.iter().map(|id| (*id).into()).collect(),
            panic_unwind,
            abi_stable_version: crate::ABI_STABLE_VERSION.into(),
        }
    }

    /// Builds and leaks the root module.
    pub fn root_module(
        manifest: extern "C" fn() -> LibraryManifest,
        new_engine: NewEngineFn,
        extension: extern "C" fn(RStr<'_>) -> ROption<ExtensionRef>,
    ) -> PluginModuleRef {
        PluginModule {
            manifest,
            new_engine,
            extension,
        }
        .leak_into_prefix()
    }

    /// Runs the root-module constructor, catching panics.
    pub fn call_root_module_loader(f: fn() -> PluginModuleRef) -> RootModuleResult {
        abi_stable::library::__call_root_module_loader(f)
    }

    /// The library header the export macro puts in the exported static.
    pub const fn lib_header<M: RootModule>(
        constructor: extern "C" fn() -> RootModuleResult,
    ) -> LibHeader {
        // SAFETY: `constructor` returns the erased `PrefixRef` of `M`'s prefix type, which is
        // what `__call_root_module_loader` produces from a `fn() -> M`.
        unsafe { LibHeader::from_constructor::<M>(constructor, CheckTypeLayout::Yes) }
    }

    pub use pincer_plugin_abi::fixtures::{bad_layout, future_api};

    #[cfg(test)]
    mod tests {
        #[test]
        fn exported_symbol_name_is_abi_stables() {
            assert_eq!(
                super::abi_stable::library::ROOT_MODULE_LOADER_NAME,
                "_1as_0lib_1header_0root_bmodule_bloader"
            );
        }
    }
}

/// What the authoring API no longer exposes (each must fail to compile):
///
/// the ABI's error variants (the error is opaque) —
/// ```compile_fail
/// let _ = pincer_plugin_api::EngineError::Failed("x".into());
/// ```
/// the host's loader (it is the host's own) —
/// ```compile_fail
/// use pincer_plugin_api::loading::open_library;
/// ```
#[cfg(doctest)]
pub struct NoFfiInTheAuthoringApi;
