//! The replay model: an imported transcript played back turn by turn, offline and
//! deterministic.
//!
//! A transcript (OpenClaw messages, e.g. one τ-bench trajectory imported from OpenAI chat) is
//! split into turns at its user messages ([`ReplayScript`]). The harness sends each turn's user
//! message as the prompt; each model call answers with the turn's next assistant message, and
//! each tool call it makes is answered by the recorded tool result ([`ReplayScript::tool_result`],
//! in order: τ-bench reuses call ids, so an id alone does not find a result). Usage is reported
//! from the token estimate: input = the prompt's estimate (system prompt, context, tools),
//! output = the answer's.
//!
//! With a context window ([`ReplayModel::with_context_window`]), a prompt whose estimate does
//! not fit is answered as providers answer it, with [`ModelError::ContextOverflow`]: the
//! overflow recovery of the harness can be exercised without a real model.

use std::collections::VecDeque;
use std::sync::Mutex;

use pincer_plugin_abi::latest::{Message, Role, Usage};
use pincer_plugin_api::tokens;

use std::sync::Arc;

use pincer_plugin_abi::latest::ToolCallRef;

use super::{ModelError, ModelProvider, ModelReply, ModelRequest, ToolExecutor, ToolSpec};

/// One turn of a transcript: the user's message, then what answered it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayTurn {
    /// The user message that starts the turn.
    pub prompt: Message,
    /// The assistant and tool-result messages that followed, in order.
    pub answers: Vec<Message>,
}

/// A transcript cut into turns, consumed as the conversation is replayed.
#[derive(Debug, Default)]
pub struct ReplayScript {
    /// Messages before the first user message (an assistant greeting), answered by nothing.
    pub preamble: Vec<Message>,
    turns: VecDeque<ReplayTurn>,
    /// The current turn's messages not yet played.
    current: VecDeque<Message>,
}

impl ReplayScript {
    /// Cuts `messages` into turns at each user message.
    pub fn new(messages: &[Message]) -> Self {
        let mut script = ReplayScript::default();
        for message in messages {
            if message.role() == Role::User {
                script.turns.push_back(ReplayTurn {
                    prompt: message.clone(),
                    answers: Vec::new(),
                });
            } else if let Some(turn) = script.turns.back_mut() {
                turn.answers.push(message.clone());
            } else {
                script.preamble.push(message.clone());
            }
        }
        script
    }

    /// The turns not started yet.
    pub fn remaining_turns(&self) -> usize {
        self.turns.len()
    }

    /// Starts the next turn: its user message, or `None` when the transcript is done.
    pub fn next_turn(&mut self) -> Option<Message> {
        let turn = self.turns.pop_front()?;
        self.current = turn.answers.into();
        Some(turn.prompt)
    }

    /// Whether the current turn recorded an answer (a transcript may end on a user message).
    pub fn turn_has_answer(&self) -> bool {
        self.current.iter().any(|m| m.role() == Role::Assistant)
    }

    /// The next assistant message of the current turn (tool results before it, not asked
    /// for, are dropped).
    pub fn next_answer(&mut self) -> Option<Message> {
        while let Some(message) = self.current.pop_front() {
            if message.role() == Role::Assistant {
                return Some(message);
            }
        }
        None
    }

    /// The recorded result of the tool call `call_id`: the next tool result of the turn if it
    /// answers that id; `None` when the transcript recorded none.
    pub fn tool_result(&mut self, call_id: &str) -> Option<Message> {
        match self.current.front() {
            Some(m) if m.role() == Role::ToolResult && m.tool_result_id() == Some(call_id) => {
                self.current.pop_front()
            }
            _ => None,
        }
    }
}

/// The replay model (see the module docs).
#[derive(Debug)]
pub struct ReplayModel {
    script: Mutex<ReplayScript>,
    context_window: Option<u64>,
}

impl ReplayModel {
    /// Plays `messages` (a whole transcript, system prompt excluded).
    pub fn new(messages: &[Message]) -> Self {
        ReplayModel {
            script: Mutex::new(ReplayScript::new(messages)),
            context_window: None,
        }
    }

    /// Refuses prompts whose estimate exceeds `tokens`, as a provider does.
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// Runs `f` on the script (to start turns and answer tool calls).
    pub fn script<T>(&self, f: impl FnOnce(&mut ReplayScript) -> T) -> T {
        f(&mut self.script.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The estimated size of a request: system prompt, messages and tool definitions.
pub fn estimate_request_tokens(request: &ModelRequest<'_>) -> u64 {
    let chars = |text: &str| tokens::estimate_string_chars(text).div_ceil(4);
    let tools: u64 = request
        .tools
        .iter()
        .map(|t| chars(&t.name) + chars(&t.description) + chars(&t.parameters.to_string()))
        .sum();
    chars(request.system_prompt) + tokens::estimate_tokens(request.messages) + tools
}

impl ModelProvider for ReplayModel {
    fn name(&self) -> &str {
        "replay"
    }

    fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let input = estimate_request_tokens(request);
        if let Some(window) = self.context_window {
            if input > window {
                return Err(ModelError::ContextOverflow {
                    observed_tokens: Some(input),
                    message: format!(
                        "prompt is too long: {input} tokens > {window} maximum (replay model)"
                    ),
                });
            }
        }
        let answer = self
            .script(ReplayScript::next_answer)
            .ok_or(ModelError::ReplayExhausted)?;
        let output = tokens::estimate_message_tokens(&answer);
        let stop = if answer.tool_calls().next().is_some() {
            "toolUse"
        } else {
            "stop"
        };
        let usage = Usage {
            input,
            output,
            total_tokens: input + output,
            ..Usage::default()
        };
        Ok(ModelReply {
            message: answer.with_usage(usage, stop),
        })
    }
}

/// The tools of a replayed transcript: each call is answered by the result the transcript
/// recorded for it (in order), or by an error result when it recorded none.
#[derive(Debug, Clone)]
pub struct ReplayTools {
    model: Arc<ReplayModel>,
}

impl ReplayTools {
    /// Answers calls from `model`'s script.
    pub fn new(model: Arc<ReplayModel>) -> Self {
        ReplayTools { model }
    }
}

impl ToolExecutor for ReplayTools {
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    fn execute(&self, call: &ToolCallRef<'_>) -> Message {
        self.model
            .script(|s| s.tool_result(call.id))
            .unwrap_or_else(|| {
                Message::tool_result(
                    call.id,
                    call.name,
                    "The replayed transcript recorded no result for this call.",
                    true,
                )
            })
    }
}
