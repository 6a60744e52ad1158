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

use pincer_plugin_api::abi::latest::{self as abi, EngineBox, EngineError};
use pincer_plugin_api::abi::{ROption, RResult, RString, RVec};
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

/// What the config's `garbage` asks for, if anything.
pub(crate) fn from_config(config_json: &str) -> Option<Garbage> {
    let config: GarbageConfig = serde_json::from_str(config_json).unwrap_or_default();
    Some(Garbage {
        what: config.garbage?,
        times: config.times.unwrap_or(100_000) as usize,
        bytes: config.bytes.unwrap_or(10_000_000) as usize,
    })
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

/// One kind of garbage, applied by the engine's ABI wrapper (`Rewrapped` in `lib.rs`) to what
/// `info` and `assemble` answer.
pub(crate) struct Garbage {
    what: String,
    times: usize,
    bytes: usize,
}

impl Garbage {
    /// `info` as the inner engine answered it, with garbage.
    pub(crate) fn info(&self, mut info: abi::EngineInfo) -> abi::EngineInfo {
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
    }

    /// `inner`'s `assemble`, with garbage.
    pub(crate) fn assemble(
        &self,
        inner: &EngineBox,
        params: &abi::AssembleParams<'_>,
    ) -> RResult<abi::AssembleResult, EngineError> {
        match self.what.as_str() {
            "error" => RResult::RErr(EngineError::Failed(not_utf8("error"))),
            "addition" => inner.assemble(params).map(|mut result| {
                result.system_prompt_addition = ROption::RSome(not_utf8("addition"));
                result
            }),
            "summary" => inner.assemble(params).map(|mut result| {
                let summary = Message::compaction_summary("a summary gone bad", 10);
                poison(summary.summary().unwrap_or_default());
                result
                    .items
                    .push(abi::AssembledItem::New(pincer_plugin_api::abi::RBox::new(
                        summary,
                    )));
                result
            }),
            _ => inner.assemble(params),
        }
    }
}
