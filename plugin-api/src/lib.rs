//! # pincer-plugin-api
//!
//! The engine contract of [pincer](https://example.invalid/pincer): everything a context
//! engine plugin and the host agree on, in two layers.
//!
//! - **The ABI layer** ([`abi`]): frozen `#[repr(C)]` types checked by `abi_stable` at load
//!   time — messages, parameters and results of every engine method, `runtimeSettings` v1,
//!   the engine and host-services trait objects, and the root module a plugin exports.
//!   **API Boundary**: what third-party binaries are compiled against.
//! - **The authoring layer** (the crate root): a plain Rust [`Engine`] trait, one trait per
//!   optional method, and [`export_engine!`], which adapts an engine to the ABI, catches every
//!   panic inside the plugin, forwards the plugin's `tracing` events to the host, and embeds
//!   the library's own manifest (api version, engine ids, `panic = "unwind"`).
//!
//! This is the only crate that names `abi_stable`; plugins and the host use its re-exports.
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
//!     fn create(ctx: FactoryContext<'_>, _host: Host) -> Result<Self, EngineError> {
//!         let config: Config = ctx.config()?;
//!         Ok(Newest { keep: config.keep })
//!     }
//!
//!     fn info(&self) -> EngineInfo {
//!         EngineInfo::new(Self::ID, "Newest messages", env!("CARGO_PKG_VERSION"))
//!     }
//!
//!     fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
//!         Ok(IngestResult { ingested: false })
//!     }
//!
//!     fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
//!         let n = params.messages.len();
//!         let mut context = ContextBuilder::new();
//!         context.keep_range(n.saturating_sub(self.keep)..n); // references, not copies
//!         Ok(context.finish(0))
//!     }
//!
//!     fn compact(&self, _params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
//!         Ok(CompactResult::nothing_to_do("nothing stored"))
//!     }
//! }
//!
//! pincer_plugin_api::export_engine!(Newest);
//! # fn main() {}
//! ```
//!
//! Optional methods are traits ([`AfterTurn`], [`Bootstrap`], [`Dispose`], …): implement the
//! ones you need and the host sees exactly those (the contract's lifecycle depends on it).
//!
//! [`testing`] lets you test an engine the way the host will drive it, without a host.
//!
//! ## Panics
//!
//! Every call is run under `catch_unwind` inside the plugin and a panic comes back to the host
//! as [`EngineError::Panicked`] carrying the message and location; the host quarantines the
//! engine and keeps answering on `legacy`. This only works with `panic = "unwind"` (the
//! default). A library built with `panic = "abort"` is refused at load, before any call,
//! because its first panic would abort the host.
//!
//! ## Evolution
//!
//! The rule third parties can rely on: **a plugin built against 1.x loads in every host of
//! 1.y with y ≥ x.**
//!
//! - The v1 ABI types never change layout. abi_stable checks layouts at load, and its check is
//!   directional: a host compiled against a root module or vtable with more members refuses
//!   plugins compiled with fewer.
//! - So the root module ([`abi::v1::PluginModule`]), the engine object
//!   ([`abi::v1::EngineAbi`]) and the host services ([`abi::v1::HostServicesAbi`]) each end in an
//!   `extension(name)` member marked `#[sabi(last_prefix_field)]`. A later minor adds a
//!   capability as a separately checked extension module (see [`extension`]); a host asks for it
//!   by name and treats its absence as "older plugin". Data the v1 types do not model travels as
//!   JSON (`Message::extra_json`, `ContentBlock::Other`).
//! - A change that cannot be expressed that way is a new major (`abi::v2`), and hosts keep an
//!   adapter for v1.
//! - The library's manifest carries the api version it was built against; the host refuses a
//!   different major, and a newer minor than its own only if the plugin declares it needs it
//!   (`apiVersion` in `pincer.plugin.json`).

#![allow(non_local_definitions)] // emitted by abi_stable's derives on current rustc
#![warn(missing_docs)]

pub mod abi;
mod author;
pub mod extension;
pub mod loading;
pub mod testing;
pub mod tokens;

pub use abi::v1::{
    AbortSignal, AfterTurnParams, AssembleParams, AssembleResult, AssembledItem, BootstrapParams,
    BootstrapResult, CompactParams, CompactResult, CompactionDetails, CompactionTarget,
    ContentBlock, EngineError, EngineInfo, FactoryParams, HostOperation, HostParams,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Message, PromptAuthority, Role, RuntimeSettings, SubagentEndReason,
    SubagentEndedParams, SubagentSpawnParams, ToolCallParams, ToolCallResult, ToolResultPart,
    TurnMaintenanceMode, Usage,
};
pub use author::{
    into_engine_box, AfterTurn, Bootstrap, ContextBuilder, Dispose, Engine, FactoryContext, Host,
    IngestBatch, Maintain, OptionalFns, SpawnRollback, SubagentEnded, SubagentSpawn, Tools,
};

/// The version of this crate, compiled into every plugin's [`abi::v1::LibraryManifest`].
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The abi_stable version the ABI layer is built on.
pub const ABI_STABLE_VERSION: &str = "0.11.3";

/// Everything an engine author needs, in one import.
pub mod prelude {
    pub use crate::abi::v1::{
        AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
        CompactParams, CompactResult, ContentBlock, EngineError, EngineInfo, HostOperation,
        IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
        MaintainResult, Message, Role, SubagentEndedParams, SubagentSpawnParams, ToolCallParams,
        ToolCallResult, TurnMaintenanceMode,
    };
    pub use crate::{
        AfterTurn, Bootstrap, ContextBuilder, Dispose, Engine, FactoryContext, Host, IngestBatch,
        Maintain, SpawnRollback, SubagentEnded, SubagentSpawn, Tools,
    };
}

/// Implementation details of the macros. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::author::export::{make_engine, new_engine_entry, EngineMaker};
    pub use abi_stable;
    pub use abi_stable::library::{LibHeader, RootModuleResult};

    /// The autoref-specialisation probes behind [`crate::optional_fns!`].
    pub mod probes {
        pub use crate::author::export::{
            HasAfterTurn, HasBootstrap, HasDispose, HasIngestBatch, HasMaintain, HasSubagentEnded,
            HasSubagentSpawn, HasTools, LacksAfterTurn, LacksBootstrap, LacksDispose,
            LacksIngestBatch, LacksMaintain, LacksSubagentEnded, LacksSubagentSpawn, LacksTools,
            Probe,
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

    /// Test fixture only: a root module that claims to be pincer-plugin-api 2.0.0, exported by
    /// `plugins/testing/future-api` to prove the host refuses another major.
    pub mod future_api {
        use abi_stable::library::RootModule;
        use abi_stable::sabi_types::VersionStrings;
        use abi_stable::std_types::RString;
        use abi_stable::{declare_root_module_statics, StableAbi};

        /// A v2 root module.
        #[repr(C)]
        #[derive(StableAbi)]
        #[sabi(kind(Prefix(prefix_ref = FutureModuleRef)))]
        #[sabi(missing_field(panic))]
        pub struct FutureModule {
            /// Something v1 does not have.
            #[sabi(last_prefix_field)]
            pub describe: extern "C" fn() -> RString,
        }

        impl RootModule for FutureModuleRef {
            declare_root_module_statics! {FutureModuleRef}
            const BASE_NAME: &'static str = "pincer_plugin";
            const NAME: &'static str = "pincer plugin";
            const VERSION_STRINGS: VersionStrings = VersionStrings {
                version: abi_stable::std_types::RStr::from_str("2.0.0"),
            };
        }

        /// Builds and leaks the v2 root module.
        pub fn root_module(describe: extern "C" fn() -> RString) -> FutureModuleRef {
            use abi_stable::prefix_type::PrefixTypeTrait;
            FutureModule { describe }.leak_into_prefix()
        }

        /// Runs the constructor.
        pub fn call_loader(f: fn() -> FutureModuleRef) -> super::RootModuleResult {
            abi_stable::library::__call_root_module_loader(f)
        }
    }

    /// Test fixture only: a root module that claims pincer-plugin-api 1.0.0 but whose layout
    /// differs from [`PluginModule`] (its `manifest` returns a number), as a plugin built against
    /// a tampered or mismatched copy of this crate would. Exported by
    /// `plugins/testing/bad-layout` to prove the host refuses it with a one-line summary.
    pub mod bad_layout {
        use abi_stable::library::RootModule;
        use abi_stable::sabi_types::VersionStrings;
        use abi_stable::{declare_root_module_statics, StableAbi};

        /// A root module with the wrong layout.
        #[repr(C)]
        #[derive(StableAbi)]
        #[sabi(kind(Prefix(prefix_ref = BadLayoutModuleRef)))]
        #[sabi(missing_field(panic))]
        pub struct BadLayoutModule {
            /// Returns a number where v1 returns a `LibraryManifest`.
            #[sabi(last_prefix_field)]
            pub manifest: extern "C" fn() -> u64,
        }

        impl RootModule for BadLayoutModuleRef {
            declare_root_module_statics! {BadLayoutModuleRef}
            const BASE_NAME: &'static str = "pincer_plugin";
            const NAME: &'static str = "pincer plugin";
            const VERSION_STRINGS: VersionStrings = VersionStrings {
                version: abi_stable::std_types::RStr::from_str(crate::API_VERSION),
            };
        }

        /// Builds and leaks the module.
        pub fn root_module(manifest: extern "C" fn() -> u64) -> BadLayoutModuleRef {
            use abi_stable::prefix_type::PrefixTypeTrait;
            BadLayoutModule { manifest }.leak_into_prefix()
        }

        /// Runs the constructor.
        pub fn call_loader(f: fn() -> BadLayoutModuleRef) -> super::RootModuleResult {
            abi_stable::library::__call_root_module_loader(f)
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn exported_symbol_name_is_abi_stables() {
            assert_eq!(
                abi_stable::library::ROOT_MODULE_LOADER_NAME,
                "_1as_0lib_1header_0root_bmodule_bloader"
            );
        }
    }
}
