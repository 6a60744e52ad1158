//! `bad-layout` — a TEST-ONLY library whose root module claims `pincer-plugin-api` 1.0 but has
//! another layout, as a build against a mismatched copy of the API would. The host must refuse
//! it at load with abi_stable's 20 KB layout report summarised to one line — before calling any
//! of its code.

use pincer_plugin_api::__private::{self as p, bad_layout};

extern "C" fn manifest() -> u64 {
    42
}

fn root_module() -> bad_layout::BadLayoutModuleRef {
    bad_layout::root_module(manifest)
}

extern "C" fn root_module_ctor() -> p::RootModuleResult {
    bad_layout::call_loader(root_module)
}

/// The root-module header abi_stable's loader looks for.
#[no_mangle]
pub static _1as_0lib_1header_0root_bmodule_bloader: p::LibHeader =
    p::lib_header::<bad_layout::BadLayoutModuleRef>(root_module_ctor);

// The manifest record every library embeds (as `export_engine!` writes it), so the host's
// check before `dlopen` reads what this fixture claims: API 1.0.0.
const MANIFEST_PARTS: &[&str] = &[
    p::MANIFEST_MAGIC,
    r#"{"pluginId":"bad-layout","pluginVersion":"0.1.0","apiVersion":"1.0.0","engineIds":["bad-layout"],"panicUnwind":true,"abiStableVersion":"0.11.3"}"#,
];
pincer_plugin_api::__embed_manifest_record!(MANIFEST_PARTS);
