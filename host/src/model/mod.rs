//! Models: what answers a turn. [`ModelProvider`] is the seam the turn harness calls with the
//! assembled context; two providers ship:
//!
//! - [`replay::ReplayModel`] plays the assistant and tool messages of an imported transcript
//!   (a τ-bench trajectory), reporting usage from the token estimate, so whole conversations
//!   run offline and deterministically; it can be given a context window, beyond which it
//!   answers as a provider does when the prompt is too large ([`ModelError::ContextOverflow`]).
//! - [`openai::OpenAiModel`] speaks the chat-completions shape of OpenAI and of the servers
//!   that copy it (Ollama, llama.cpp's server, vLLM): `baseUrl`, `model`, and an API key read
//!   from a named environment variable. Providers' "prompt too long" answers become
//!   [`ModelError::ContextOverflow`], which the harness recovers from by compacting.
//!
//! The model's tool calls are answered by a [`ToolExecutor`] ([`replay::ReplayTools`] plays the
//! recorded results; [`NoTools`] answers every call with an error result).
//!
//! A model is also what engines reach through `llmComplete` ([`ModelService`] adapts a provider
//! to the host service), so the `runtime-llm-complete` capability engines are told about is
//! real.

pub mod openai;
pub mod replay;

use std::sync::Arc;

use pincer_plugin_abi::latest::{EngineError, LlmCompleteRequest, Message, ToolCallRef, Usage};
use serde_json::Value;

use crate::engines::services::ModelClient;

/// A tool the model may call, in the chat-completions shape (`parameters` is a JSON Schema).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its arguments, as a JSON Schema.
    pub parameters: Value,
}

/// What a model is asked: the system prompt, the context, the tools it may call.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The system prompt (with the engine's `systemPromptAddition` already prepended).
    pub system_prompt: &'a str,
    /// The context, as OpenClaw messages (summaries and custom messages are projected for the
    /// model by the provider, as `convertToLlm` does).
    pub messages: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolSpec],
    /// The most tokens to answer with, when the caller bounds it.
    pub max_output_tokens: Option<u64>,
}

/// A model's answer: one assistant message, its `usage` set.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// The assistant message (text and tool calls, `usage`, `stopReason`, `model`).
    pub message: Message,
}

impl ModelReply {
    /// The usage the provider reported (or the replay estimated).
    pub fn usage(&self) -> Usage {
        self.message.usage().cloned().unwrap_or_default()
    }
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The prompt does not fit the model's context window; the harness compacts and retries.
    #[error("context overflow: {message}")]
    ContextOverflow {
        /// The prompt size the provider reported, when it did.
        observed_tokens: Option<u64>,
        /// The provider's words.
        message: String,
    },
    /// The server could not be reached or did not answer in time.
    #[error(
        "the model at {url} could not be reached: {message} (is the server running, and is \
         `baseUrl` right?)"
    )]
    Unreachable {
        /// The endpoint.
        url: String,
        /// What failed.
        message: String,
    },
    /// The server answered with an error status.
    #[error("the model at {url} answered HTTP {status}: {message}")]
    Http {
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// The error the server gave, or its body.
        message: String,
    },
    /// The server answered with something that is not a chat completion.
    #[error("the model's answer is not a chat completion: {message}")]
    Protocol {
        /// What was wrong.
        message: String,
    },
    /// The API key's environment variable is not set.
    #[error(
        "no API key: the environment variable {variable} is not set (set it, or name another \
         variable in the model's `apiKeyEnv`)"
    )]
    MissingApiKey {
        /// The variable named in the config.
        variable: String,
    },
    /// A replayed transcript has no more assistant messages.
    #[error(
        "the replayed transcript has no assistant message left to answer with (the conversation \
         asked more turns than the transcript holds)"
    )]
    ReplayExhausted,
    /// A model named in a way no provider answers to.
    #[error("unknown model {spec:?}: name an OpenAI-compatible server's model as \"openai:NAME\"")]
    UnknownModel {
        /// The name given.
        spec: String,
    },
}

impl ModelError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::ContextOverflow { .. } => "model_context_overflow",
            ModelError::Unreachable { .. } => "model_unreachable",
            ModelError::Http { .. } => "model_http",
            ModelError::Protocol { .. } => "model_protocol",
            ModelError::MissingApiKey { .. } => "model_missing_api_key",
            ModelError::ReplayExhausted => "model_replay_exhausted",
            ModelError::UnknownModel { .. } => "model_unknown",
        }
    }
}

/// A model the harness can call.
pub trait ModelProvider: Send + Sync {
    /// How the model is named in output (`replay`, `openai:gpt-4o-mini`).
    fn name(&self) -> &str;

    /// Answers `request` with one assistant message.
    ///
    /// # Errors
    /// [`ModelError`]; [`ModelError::ContextOverflow`] when the prompt is too large.
    fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelReply, ModelError>;
}

/// Answers the model's tool calls that no engine tool answers.
pub trait ToolExecutor: Send + Sync {
    /// The tools offered to the model.
    fn tools(&self) -> Vec<ToolSpec>;

    /// Runs `call`; its result as a `toolResult` message.
    fn execute(&self, call: &ToolCallRef<'_>) -> Message;
}

/// A tool executor with no tools: every call gets an error result.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTools;

impl ToolExecutor for NoTools {
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    fn execute(&self, call: &ToolCallRef<'_>) -> Message {
        Message::tool_result(
            call.id,
            call.name,
            format!("Tool {} is not available in this host.", call.name),
            true,
        )
    }
}

/// A provider as the `llmComplete` host service engines call.
pub struct ModelService {
    provider: Arc<dyn ModelProvider>,
}

impl ModelService {
    /// Serves `provider` to engines.
    pub fn new(provider: Arc<dyn ModelProvider>) -> Self {
        ModelService { provider }
    }
}

impl ModelClient for ModelService {
    fn complete(&self, request: &LlmCompleteRequest<'_>) -> Result<Message, EngineError> {
        let system = request.system_prompt.as_ref().map_or("", |s| s.as_str());
        let reply = self
            .provider
            .complete(&ModelRequest {
                system_prompt: system,
                messages: request.messages.as_slice(),
                tools: &[],
                max_output_tokens: request.max_tokens.into_option(),
            })
            .map_err(|err| EngineError::failed(format!("llmComplete: {err}")))?;
        Ok(reply.message)
    }
}
