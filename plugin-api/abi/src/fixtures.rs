//! Test fixtures only, not part of the API: root modules that a real plugin never exports,
//! for the test plugins that prove the host refuses them (`plugins/testing/future-api`,
//! `plugins/testing/bad-layout`). They live here because they derive abi_stable's traits, which
//! only this crate depends on.

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
    pub fn call_loader(f: fn() -> FutureModuleRef) -> abi_stable::library::RootModuleResult {
        abi_stable::library::__call_root_module_loader(f)
    }
}

/// Test fixture only: a root module that claims pincer-plugin-api 1.0.0 but whose layout
/// differs from [`PluginModule`](crate::v1::PluginModule) (its `manifest` returns a number), as a plugin built against
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
    pub fn call_loader(f: fn() -> BadLayoutModuleRef) -> abi_stable::library::RootModuleResult {
        abi_stable::library::__call_root_module_loader(f)
    }
}
