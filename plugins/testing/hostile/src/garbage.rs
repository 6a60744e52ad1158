//! `garbage`: what an engine written against the ABI alone can hand the host that the authoring
//! API never would. `plugins.entries.hostile.config.garbage` picks it:
//!
//! - `addition`: `assemble` returns a `systemPromptAddition` that is not UTF-8;
//! - `error`: `assemble` fails with an error message that is not UTF-8;
//! - `summary`: `assemble` adds a new `compactionSummary` message whose summary is not UTF-8;
//! - `info-name`: `info.name` is not UTF-8;
//! - `many-tools`: `info` offers `times` tools (default 100,000);
//! - `huge-schema`: one tool whose parameter schema is `bytes` long (default 10 MB);
//! - `huge-name`: an `info.name` `bytes` long (default 10 MB).
//!
//! `RString` assumes UTF-8 and offers an unchecked constructor; a message's strings are private,
//! so this engine writes over a string's bytes in place — as any library can in its own memory.

use pincer_plugin_api::abi::latest::{
    self as abi, CommitTurnStatus, EngineAbi, EngineAbi_TO, EngineBox, EngineError, ExtensionRef,
    IngestBatchResult, SpawnRollbackBox,
};
use pincer_plugin_api::abi::{ROption, RResult, RStr, RString, RVec};
use pincer_plugin_api::Message;
use serde::Deserialize;

/// What `garbage` reads of the engine's config.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct GarbageConfig {
    #[serde(default)]
    garbage: Option<String>,
    #[serde(default)]
    times: Option<u64>,
    #[serde(default)]
    bytes: Option<u64>,
}

/// `engine` behind an ABI object that returns `garbage`, when the config asks for it.
pub(crate) fn wrap(engine: EngineBox, config_json: &str) -> EngineBox {
    let config: GarbageConfig = serde_json::from_str(config_json).unwrap_or_default();
    let Some(what) = config.garbage else {
        return engine;
    };
    EngineAbi_TO::from_value(
        Garbage {
            inner: engine,
            what,
            times: config.times.unwrap_or(100_000) as usize,
            bytes: config.bytes.unwrap_or(10_000_000) as usize,
        },
        pincer_plugin_api::__private::abi_stable::sabi_trait::TD_Opaque,
    )
}

/// Bytes that are not UTF-8 (a lone continuation byte, an invalid lead byte), around text.
fn not_utf8(text: &str) -> RString {
    let mut bytes = b"hostile: ".to_vec();
    bytes.extend_from_slice(&[0x80, 0xff, 0xfe]);
    bytes.extend_from_slice(text.as_bytes());
    // SAFETY: none asked for; the point is to break `RString`'s promise at the ABI.
    unsafe { RString::from_utf8_unchecked(RVec::from(bytes)) }
}

/// Writes the lead byte of a four-byte sequence over the last byte of `text`, in place: a
/// sequence cut short at the end, which a reader that trusts UTF-8 reads past.
fn poison(text: &str) {
    let Some(last) = text.len().checked_sub(1) else {
        return;
    };
    // SAFETY: none; this library owns the string's bytes and breaks its promise on purpose.
    unsafe { std::ptr::write_volatile(text.as_ptr().add(last).cast_mut(), 0xf0) };
}

struct Garbage {
    inner: EngineBox,
    what: String,
    times: usize,
    bytes: usize,
}

impl EngineAbi for Garbage {
    fn info(&self) -> RResult<abi::EngineInfo, EngineError> {
        self.inner.info().map(|mut info| {
            match self.what.as_str() {
                "info-name" => info.name = not_utf8("name"),
                "huge-name" => info.name = RString::from("n".repeat(self.bytes)),
                "many-tools" => {
                    info.tools = (0..self.times)
                        .map(|i| abi::ToolSpec {
                            name: RString::from(format!("tool_{i}")),
                            description: RString::from("a tool"),
                            parameters_schema_json: RString::from("{\"type\":\"object\"}"),
                        })
                        .collect();
                }
                "huge-schema" => {
                    let padding = "x".repeat(self.bytes);
                    info.tools = RVec::from(vec![abi::ToolSpec {
                        name: RString::from("huge"),
                        description: RString::from("a tool with a huge schema"),
                        parameters_schema_json: RString::from(format!(
                            "{{\"type\":\"object\",\"description\":\"{padding}\"}}"
                        )),
                    }]);
                }
                _ => {}
            }
            info
        })
    }
    fn ingest(&self, params: &abi::IngestParams<'_>) -> RResult<abi::IngestResult, EngineError> {
        self.inner.ingest(params)
    }
    fn assemble(
        &self,
        params: &abi::AssembleParams<'_>,
    ) -> RResult<abi::AssembleResult, EngineError> {
        match self.what.as_str() {
            "error" => RResult::RErr(EngineError::Failed(not_utf8("error"))),
            "addition" => self.inner.assemble(params).map(|mut result| {
                result.system_prompt_addition = ROption::RSome(not_utf8("addition"));
                result
            }),
            "summary" => self.inner.assemble(params).map(|mut result| {
                let summary = Message::compaction_summary("a summary gone bad", 10);
                poison(summary.summary().unwrap_or_default());
                result
                    .items
                    .push(abi::AssembledItem::New(pincer_plugin_api::abi::RBox::new(
                        summary,
                    )));
                result
            }),
            _ => self.inner.assemble(params),
        }
    }
    fn compact(&self, params: &abi::CompactParams<'_>) -> RResult<abi::CompactResult, EngineError> {
        self.inner.compact(params)
    }
    fn bootstrap(
        &self,
        params: &abi::BootstrapParams<'_>,
    ) -> RResult<abi::BootstrapResult, EngineError> {
        self.inner.bootstrap(params)
    }
    fn ingest_batch(
        &self,
        params: &abi::IngestBatchParams<'_>,
    ) -> RResult<IngestBatchResult, EngineError> {
        self.inner.ingest_batch(params)
    }
    fn after_turn(&self, params: &abi::AfterTurnParams<'_>) -> RResult<(), EngineError> {
        self.inner.after_turn(params)
    }
    fn maintain(
        &self,
        params: &abi::MaintainParams<'_>,
    ) -> RResult<abi::MaintainResult, EngineError> {
        self.inner.maintain(params)
    }
    fn prepare_subagent_spawn(
        &self,
        params: &abi::SubagentSpawnParams<'_>,
    ) -> RResult<ROption<SpawnRollbackBox>, EngineError> {
        self.inner.prepare_subagent_spawn(params)
    }
    fn on_subagent_ended(&self, params: &abi::SubagentEndedParams<'_>) -> RResult<(), EngineError> {
        self.inner.on_subagent_ended(params)
    }
    fn call_tool(
        &self,
        params: &abi::ToolCallParams<'_>,
    ) -> RResult<abi::ToolCallResult, EngineError> {
        self.inner.call_tool(params)
    }
    fn dispose(&self) -> RResult<(), EngineError> {
        self.inner.dispose()
    }
    fn commit_turn(
        &self,
        params: &abi::CommitTurnParams<'_>,
    ) -> RResult<CommitTurnStatus, EngineError> {
        self.inner.commit_turn(params)
    }
    fn extension(&self, name: RStr<'_>) -> ROption<ExtensionRef> {
        self.inner.extension(name)
    }
}
