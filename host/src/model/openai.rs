//! An OpenAI-compatible chat-completions model: OpenAI itself, and the servers that speak its
//! shape (Ollama, llama.cpp's server, vLLM, LM Studio).
//!
//! `POST {baseUrl}/chat/completions` with `{model, messages, tools?, max_tokens?}`. The context
//! is projected as `convertToLlm` does (summaries and custom messages become user messages),
//! then mapped as pincer's OpenAI export maps messages; the system prompt goes first. The
//! answer's `message` becomes an OpenClaw assistant message (tool calls as `toolCall` blocks,
//! `arguments` parsed) with the provider's `usage` (`prompt_tokens` → input, cached prompt
//! tokens → cacheRead, `completion_tokens` → output). A "prompt too long" answer — OpenAI's
//! `context_length_exceeded`, llama.cpp's `exceed_context_size_error`, vLLM's "maximum context
//! length" — is [`ModelError::ContextOverflow`], with the prompt size when the server says it.

use std::time::Duration;

use pincer_plugin_abi::latest::{Message, Usage};
use pincer_plugin_api::interop::openai_chat_to_openclaw;
use serde_json::{json, Value};

use super::{ModelError, ModelProvider, ModelReply, ModelRequest};
use crate::session::context::convert_to_llm;
use crate::session::openai::message_to_openai;
use crate::session::time::now_ms;

/// Where and how to reach the model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenAiConfig {
    /// The API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// The model name the server knows.
    pub model: String,
    /// The environment variable holding the API key (`None`: send none, as local servers
    /// need none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// How long one call may take, in seconds (default 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// The default deadline of one model call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The prefix of a model named for an OpenAI-compatible server: `openai:NAME`.
pub const OPENAI_PREFIX: &str = "openai:";

impl OpenAiConfig {
    /// The server for model `name`: `model.baseUrl` / `model.apiKeyEnv` from pincer.json, else
    /// `PINCER_MODEL_BASE_URL`, else OpenAI's API with `OPENAI_API_KEY`.
    pub fn for_model(config: &crate::config::ModelConfig, name: &str) -> Self {
        let base_url = config
            .base_url
            .clone()
            .or_else(|| std::env::var("PINCER_MODEL_BASE_URL").ok())
            .unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
        let api_key_env = config.api_key_env.clone().or_else(|| {
            base_url
                .contains("api.openai.com")
                .then(|| "OPENAI_API_KEY".to_owned())
        });
        OpenAiConfig {
            base_url,
            model: name.to_owned(),
            api_key_env,
            timeout_seconds: None,
        }
    }
}

/// The model `spec` names (`openai:NAME`), on the server `config` describes.
///
/// # Errors
/// A spec that is not `openai:NAME`, or a missing API key.
pub fn model_for_spec(
    spec: &str,
    config: &crate::config::ModelConfig,
) -> Result<OpenAiModel, ModelError> {
    match spec.strip_prefix(OPENAI_PREFIX) {
        Some(name) if !name.trim().is_empty() => {
            OpenAiModel::new(OpenAiConfig::for_model(config, name.trim()))
        }
        _ => Err(ModelError::UnknownModel {
            spec: spec.to_owned(),
        }),
    }
}

/// The chat-completions model (see the module docs).
#[derive(Debug)]
pub struct OpenAiModel {
    config: OpenAiConfig,
    name: String,
    url: String,
    api_key: Option<String>,
    agent: ureq::Agent,
}

impl OpenAiModel {
    /// A client for `config`; the API key is read from its environment variable now.
    ///
    /// # Errors
    /// [`ModelError::MissingApiKey`] when the named variable is not set.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let api_key = match &config.api_key_env {
            Some(variable) => {
                Some(
                    std::env::var(variable).map_err(|_| ModelError::MissingApiKey {
                        variable: variable.clone(),
                    })?,
                )
            }
            None => None,
        };
        let timeout = config
            .timeout_seconds
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(OpenAiModel {
            name: format!("openai:{}", config.model),
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            api_key,
            agent,
            config,
        })
    }

    /// The request body for `request`.
    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut messages = Vec::new();
        if !request.system_prompt.trim().is_empty() {
            messages.push(json!({"role": "system", "content": request.system_prompt}));
        }
        messages.extend(
            convert_to_llm(request.messages)
                .into_iter()
                .filter_map(|value| Message::from_value(value).ok())
                .filter_map(|message| message_to_openai(&message)),
        );
        let mut body = json!({"model": self.config.model, "messages": messages});
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| json!({"type": "function", "function": tool}))
                .collect();
        }
        if let Some(max) = request.max_output_tokens {
            body["max_tokens"] = max.into();
        }
        body
    }
}

impl ModelProvider for OpenAiModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let mut call = self.agent.post(&self.url);
        if let Some(key) = &self.api_key {
            call = call.header("Authorization", &format!("Bearer {key}"));
        }
        let mut response =
            call.send_json(self.body(request))
                .map_err(|err| ModelError::Unreachable {
                    url: self.url.clone(),
                    message: err.to_string(),
                })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|err| ModelError::Unreachable {
                url: self.url.clone(),
                message: format!("reading the answer: {err}"),
            })?;
        let value: Option<Value> = serde_json::from_str(&text).ok();
        if !(200..300).contains(&status) {
            return Err(http_error(&self.url, status, &text, value.as_ref()));
        }
        let value = value.ok_or_else(|| ModelError::Protocol {
            message: format!("not JSON: {}", clip(&text)),
        })?;
        reply_from(&value, &self.config.model)
    }
}

/// An error status as a [`ModelError`]: an overflow when the server says the prompt is too
/// long, else [`ModelError::Http`] with the server's message.
fn http_error(url: &str, status: u16, text: &str, value: Option<&Value>) -> ModelError {
    let error = value.and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .or_else(|| e.as_str())
        })
        .map_or_else(|| clip(text), str::to_owned);
    let code = error
        .and_then(|e| e.get("code").or_else(|| e.get("type")))
        .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned))
        .unwrap_or_default();
    let kind = error
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let lower = message.to_lowercase();
    let overflow = code == "context_length_exceeded"
        || kind == "exceed_context_size_error"
        || lower.contains("maximum context length")
        || lower.contains("context length")
        || lower.contains("exceeds the available context size")
        || lower.contains("prompt is too long")
        || lower.contains("too many tokens");
    if overflow && (status == 400 || status == 413 || status == 422) {
        let observed = error
            .and_then(|e| e.get("n_prompt_tokens"))
            .and_then(Value::as_u64)
            .or_else(|| number_after(&lower, "resulted in"))
            .or_else(|| number_after(&lower, "prompt contains"));
        return ModelError::ContextOverflow {
            observed_tokens: observed,
            message,
        };
    }
    ModelError::Http {
        url: url.to_owned(),
        status,
        message,
    }
}

/// The first integer after `marker` in `text`.
fn number_after(text: &str, marker: &str) -> Option<u64> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn clip(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A chat completion as an OpenClaw assistant message with its usage.
fn reply_from(value: &Value, model: &str) -> Result<ModelReply, ModelError> {
    let choice =
        value
            .get("choices")
            .and_then(|c| c.get(0))
            .ok_or_else(|| ModelError::Protocol {
                message: "no `choices[0]`".into(),
            })?;
    let mut chat = choice
        .get("message")
        .cloned()
        .ok_or_else(|| ModelError::Protocol {
            message: "no `choices[0].message`".into(),
        })?;
    chat["role"] = "assistant".into();
    let message = openai_chat_to_openclaw(&chat, 0)
        .and_then(|v| Message::from_value(v).ok())
        .ok_or_else(|| ModelError::Protocol {
            message: "`choices[0].message` is not an assistant message".into(),
        })?;
    let usage = value.get("usage");
    let number = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64);
    let cached = usage
        .and_then(|u| u.pointer("/prompt_tokens_details/cached_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let prompt = number("prompt_tokens").unwrap_or(0);
    let output = number("completion_tokens").unwrap_or(0);
    let usage = Usage {
        input: prompt.saturating_sub(cached),
        output,
        cache_read: cached,
        total_tokens: number("total_tokens").unwrap_or(prompt + output),
        ..Usage::default()
    };
    let stop = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("tool_calls") => "toolUse",
        Some("length") => "length",
        _ if message.tool_calls().next().is_some() => "toolUse",
        _ => "stop",
    };
    let message = message
        .with_model("openai-completions", "openai", model)
        .with_usage(usage, stop)
        .with_timestamp(now_ms());
    Ok(ModelReply { message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_answers_of_known_servers_are_recognised() {
        let openai = json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "code": "context_length_exceeded"}});
        let llama = json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}});
        for (value, tokens) in [(openai, 9013), (llama, 5000)] {
            match http_error("u", 400, &value.to_string(), Some(&value)) {
                ModelError::ContextOverflow {
                    observed_tokens, ..
                } => assert_eq!(observed_tokens, Some(tokens)),
                other => panic!("not an overflow: {other:?}"),
            }
        }
        let other = json!({"error": {"message": "invalid model", "code": "model_not_found"}});
        assert!(matches!(
            http_error("u", 404, &other.to_string(), Some(&other)),
            ModelError::Http { status: 404, .. }
        ));
    }
}
