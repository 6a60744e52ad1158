//! `future-api` — a TEST-ONLY library that exports a root module claiming
//! `pincer-plugin-api` 2.0.0, as a plugin built against a future major would. The host must
//! refuse it at load with a message that says to rebuild against 1.x — before calling any of
//! its code.

use pincer_plugin_api::__private::{self as p, future_api};

extern "C" fn describe() -> pincer_plugin_api::abi::RString {
    "a plugin from the future".into()
}

fn root_module() -> future_api::FutureModuleRef {
    future_api::root_module(describe)
}

extern "C" fn root_module_ctor() -> p::RootModuleResult {
    future_api::call_loader(root_module)
}

/// The root-module header abi_stable's loader looks for.
#[no_mangle]
pub static _1as_0lib_1header_0root_bmodule_bloader: p::LibHeader =
    p::lib_header::<future_api::FutureModuleRef>(root_module_ctor);

// The manifest record every library embeds (as `export_engine!` writes it), so the host's
// check before `dlopen` reads what this fixture claims: API 2.0.0.
const MANIFEST_PARTS: &[&str] = &[
    p::MANIFEST_MAGIC,
    r#"{"pluginId":"future-api","pluginVersion":"0.1.0","apiVersion":"2.0.0","engineIds":["future-api"],"panicUnwind":true,"abiStableVersion":"0.11.3"}"#,
];
pincer_plugin_api::__embed_manifest_record!(MANIFEST_PARTS);
