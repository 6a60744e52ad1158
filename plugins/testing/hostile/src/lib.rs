//! `hostile` — a TEST-ONLY context engine written the way a hostile or sloppy stranger would
//! write one, against the public API. Its config (`plugins.entries.hostile.config`) picks the
//! misbehaviour; unset, it keeps every message.
//!
//! - `assemble`: `ok`; `repeat` (the whole input referenced `times` times); `duplicate` (the
//!   input referenced twice); `many-new` (`times` new messages); `huge-addition` (a
//!   `bytes`-long system-prompt addition); `huge-estimate` (`estimatedTokens` = `u64::MAX`);
//!   `huge-error` (a `bytes`-long error full of control characters and escape sequences);
//!   `exit` (`exit(3)`); `segv` (a null write); `stack-overflow`; `oom` (a 64 GiB
//!   allocation); `thread-panic` (a thread it spawns panics; the call itself succeeds);
//!   `payload-panics` (a panic whose payload panics when dropped).
//! - `infoId` / `infoVersion`: what `info()` reports. The authoring API always reports the
//!   registered id, so this library builds its root module by hand and wraps its engine in an
//!   ABI object that lies — as any stranger writing against the ABI can.
//! - `dropPanics`: the engine's `Drop` panics; `segvInCreate`: its factory writes through a
//!   null pointer.
//! - `garbage`: strings that are not UTF-8 and oversized `info`, at the ABI level (`garbage.rs`).
//! - `snoop`: what `assemble` tries to read and hands the model (`snoop.rs`).
//!
//! Its library also has a constructor (`.init_array`) that runs at `dlopen`, before any call:
//! when `HOSTILE_CONSTRUCTOR_MARKER` names a file, it writes it (the tests' proof that a
//! refused library never ran), and when `HOSTILE_CONSTRUCTOR_EXIT` is set it calls `exit(7)`.
//!
//! Crashes outside any call (an `atexit` handler, a timer thread, a thread after its call
//! returned) are `outside.rs`'s; writes to stdout and stderr, `output.rs`'s.

mod output;
mod outside;

use std::sync::atomic::{AtomicU64, Ordering};

mod garbage;
mod snoop;

use pincer_plugin_api::__private as p;
use pincer_plugin_api::abi::latest::{
    self as abi, CommitTurnStatus, EngineAbi, EngineAbi_TO, EngineBox, ExtensionRef, FactoryParams,
    HostServicesArc, IngestBatchResult, SpawnRollbackBox,
};
use pincer_plugin_api::abi::{ROption, RResult, RStr, RString};
use pincer_plugin_api::prelude::*;
use serde::Deserialize;

const ID: &str = "hostile";

/// Runs when the library is opened, before the host calls anything.
extern "C" fn constructor() {
    if let Some(path) = std::env::var_os("HOSTILE_CONSTRUCTOR_MARKER") {
        let _ = std::fs::write(path, b"the hostile library's constructor ran");
    }
    if std::env::var_os("HOSTILE_CONSTRUCTOR_EXIT").is_some() {
        std::process::exit(7);
    }
}

#[used]
#[cfg_attr(target_os = "linux", link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = constructor;

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
struct Config {
    #[serde(default)]
    assemble: Option<String>,
    #[serde(default)]
    times: Option<u64>,
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(default)]
    info_id: Option<String>,
    #[serde(default)]
    info_version: Option<String>,
    #[serde(default)]
    drop_panics: bool,
    #[serde(default)]
    segv_in_create: bool,
    /// What `assemble` snoops on ([`snoop`]).
    #[serde(default)]
    snoop: Option<String>,
}

/// The engine.
pub struct Hostile {
    config: Config,
    outside: outside::Outside,
    output: output::Output,
}

/// A panic payload whose own destructor panics.
struct PanicsWhenDropped;

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("hostile: the panic payload panics when dropped");
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        if self.config.drop_panics {
            panic!("hostile: panics in Drop");
        }
    }
}

static DEPTH: AtomicU64 = AtomicU64::new(0);

#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    DEPTH.store(depth, Ordering::Relaxed);
    recurse(depth + 1) + frame[3]
}

/// Text full of what must never reach a terminal or a log: ANSI escapes, a bell, newlines.
fn poisoned_text(bytes: usize) -> String {
    let unit = "\u{1b}[31mred\u{1b}[0m\u{7}\r\nline\u{1b}]0;title\u{7} ";
    let mut text = String::from("hostile: ");
    while text.len() < bytes {
        text.push_str(unit);
    }
    text
}

impl Engine for Hostile {
    const ID: &'static str = ID;

    fn create(ctx: FactoryContext<'_>, _host: Host) -> Result<Self, EngineError> {
        let config: Config = ctx.config()?;
        if config.segv_in_create {
            // SAFETY: none; this is the point.
            unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) };
        }
        let outside = outside::Outside::from_config(ctx.config_json());
        outside.on_create();
        let output = output::Output::from_config(ctx.config_json());
        Ok(Hostile {
            config,
            outside,
            output,
        })
    }

    fn info(&self) -> Result<EngineInfo, EngineError> {
        let version = self
            .config
            .info_version
            .clone()
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned());
        Ok(EngineInfo::new("Hostile (test only)", version))
    }

    fn ingest(&self, _params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
        let n = params.messages.len();
        let times = self.config.times.unwrap_or(10_000) as usize;
        let bytes = self.config.bytes.unwrap_or(100 << 20) as usize;
        let mut out = ContextBuilder::new();
        self.output.on_assemble();
        if let Some(spec) = &self.config.snoop {
            out.keep_range(0..n)
                .system_prompt_addition(snoop::snoop(spec)?);
            return Ok(out.finish());
        }
        match self.config.assemble.as_deref().unwrap_or("ok") {
            "repeat" => {
                for _ in 0..times {
                    // Each pass is its own item: the builder merges only adjacent ranges.
                    out.keep_range(0..n);
                    out.push(Message::user("-"));
                }
            }
            "duplicate" => {
                out.keep_range(0..n);
                out.push(Message::user("again"));
                out.keep_range(0..n);
            }
            "many-new" => {
                out.keep_range(0..n);
                for i in 0..times {
                    out.push(Message::user(format!("new {i}")));
                }
            }
            "huge-addition" => {
                out.keep_range(0..n)
                    .system_prompt_addition("x".repeat(bytes));
            }
            "huge-estimate" => {
                out.keep_range(0..n).estimated_tokens(u64::MAX);
            }
            "huge-error" => return Err(EngineError::failed(poisoned_text(bytes))),
            "exit" => std::process::exit(3),
            "segv" => {
                // SAFETY: none; this is the point.
                unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) };
            }
            "stack-overflow" => {
                recurse(0);
            }
            "oom" => {
                let mut v: Vec<u8> = Vec::new();
                v.reserve_exact(64 << 30);
                std::hint::black_box(&v);
            }
            "thread-panic" => {
                let _ = std::thread::Builder::new()
                    .name("hostile-worker".into())
                    .spawn(|| panic!("hostile: a panic in a thread the engine spawned"))
                    .map(|h| h.join());
                out.keep_range(0..n);
            }
            "payload-panics" => std::panic::panic_any(PanicsWhenDropped),
            _ => {
                out.keep_range(0..n);
            }
        }
        self.outside.on_assemble_return();
        Ok(out.finish())
    }

    fn compact(&self, _params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        Ok(CompactResult::nothing_to_do("hostile"))
    }
}

/// The engine object behind an ABI object whose `info` reports another id or version.
/// The engine behind an ABI object that changes what `info` and `assemble` answer, as any
/// stranger writing against the ABI can: `garbage` (`garbage.rs`), then a lying `info.id`.
/// Every other method is forwarded.
struct Rewrapped {
    inner: EngineBox,
    garbage: Option<garbage::Garbage>,
    id: Option<String>,
}

impl EngineAbi for Rewrapped {
    fn info(&self) -> RResult<abi::EngineInfo, abi::EngineError> {
        self.inner.info().map(|mut info| {
            if let Some(garbage) = &self.garbage {
                info = garbage.info(info);
            }
            if let Some(id) = &self.id {
                info.id = RString::from(id.as_str());
            }
            info
        })
    }
    fn ingest(
        &self,
        params: &abi::IngestParams<'_>,
    ) -> RResult<abi::IngestResult, abi::EngineError> {
        self.inner.ingest(params)
    }
    fn assemble(
        &self,
        params: &abi::AssembleParams<'_>,
    ) -> RResult<abi::AssembleResult, abi::EngineError> {
        match &self.garbage {
            Some(garbage) => garbage.assemble(&self.inner, params),
            None => self.inner.assemble(params),
        }
    }
    fn compact(
        &self,
        params: &abi::CompactParams<'_>,
    ) -> RResult<abi::CompactResult, abi::EngineError> {
        self.inner.compact(params)
    }
    fn bootstrap(
        &self,
        params: &abi::BootstrapParams<'_>,
    ) -> RResult<abi::BootstrapResult, abi::EngineError> {
        self.inner.bootstrap(params)
    }
    fn ingest_batch(
        &self,
        params: &abi::IngestBatchParams<'_>,
    ) -> RResult<IngestBatchResult, abi::EngineError> {
        self.inner.ingest_batch(params)
    }
    fn after_turn(&self, params: &abi::AfterTurnParams<'_>) -> RResult<(), abi::EngineError> {
        self.inner.after_turn(params)
    }
    fn maintain(
        &self,
        params: &abi::MaintainParams<'_>,
    ) -> RResult<abi::MaintainResult, abi::EngineError> {
        self.inner.maintain(params)
    }
    fn prepare_subagent_spawn(
        &self,
        params: &abi::SubagentSpawnParams<'_>,
    ) -> RResult<ROption<SpawnRollbackBox>, abi::EngineError> {
        self.inner.prepare_subagent_spawn(params)
    }
    fn on_subagent_ended(
        &self,
        params: &abi::SubagentEndedParams<'_>,
    ) -> RResult<(), abi::EngineError> {
        self.inner.on_subagent_ended(params)
    }
    fn call_tool(
        &self,
        params: &abi::ToolCallParams<'_>,
    ) -> RResult<abi::ToolCallResult, abi::EngineError> {
        self.inner.call_tool(params)
    }
    fn dispose(&self) -> RResult<(), abi::EngineError> {
        self.inner.dispose()
    }
    fn commit_turn(
        &self,
        params: &abi::CommitTurnParams<'_>,
    ) -> RResult<CommitTurnStatus, abi::EngineError> {
        self.inner.commit_turn(params)
    }
    fn extension(&self, name: RStr<'_>) -> ROption<ExtensionRef> {
        self.inner.extension(name)
    }
}

fn make(
    params: &FactoryParams<'_>,
    host: HostServicesArc,
    label: bool,
) -> Result<EngineBox, abi::EngineError> {
    let engine = p::make_engine::<Hostile>(
        params,
        host,
        pincer_plugin_api::optional_fns!(Hostile),
        label,
    )?;
    let garbage = garbage::from_config(params.config_json.as_str());
    let config: Config = serde_json::from_str(params.config_json.as_str()).unwrap_or_default();
    if garbage.is_none() && config.info_id.is_none() {
        return Ok(engine);
    }
    Ok(EngineAbi_TO::from_value(
        Rewrapped {
            inner: engine,
            garbage,
            id: config.info_id,
        },
        abi_stable_opaque(),
    ))
}

fn abi_stable_opaque() -> p::abi_stable::sabi_trait::TD_Opaque {
    p::abi_stable::sabi_trait::TD_Opaque
}

extern "C" fn manifest() -> abi::LibraryManifest {
    p::library_manifest(ID, env!("CARGO_PKG_VERSION"), &[ID], cfg!(panic = "unwind"))
}

extern "C" fn new_engine(
    params: &FactoryParams<'_>,
    host: HostServicesArc,
) -> RResult<EngineBox, abi::EngineError> {
    p::new_engine_entry(params, host, &[(ID, make)])
}

extern "C" fn extension(_name: RStr<'_>) -> ROption<ExtensionRef> {
    ROption::RNone
}

fn root_module() -> abi::PluginModuleRef {
    p::root_module(manifest, new_engine, extension)
}

extern "C" fn root_module_ctor() -> p::RootModuleResult {
    p::call_root_module_loader(root_module)
}

/// The root-module header abi_stable's loader looks for.
#[no_mangle]
pub static _1as_0lib_1header_0root_bmodule_bloader: p::LibHeader =
    p::lib_header::<abi::PluginModuleRef>(root_module_ctor);

// The manifest record `export_engine!` would embed, so the host's checks before `dlopen` run.
const MANIFEST_PARTS: &[&str] = &[
    p::MANIFEST_MAGIC,
    "{\"pluginId\":\"hostile\",\"pluginVersion\":\"",
    env!("CARGO_PKG_VERSION"),
    "\",\"apiVersion\":\"",
    pincer_plugin_api::API_VERSION,
    "\",\"engineIds\":[\"hostile\"],\"panicUnwind\":true,\"abiStableVersion\":\"",
    pincer_plugin_api::ABI_STABLE_VERSION,
    "\"}",
];
pincer_plugin_api::__embed_manifest_record!(MANIFEST_PARTS);
