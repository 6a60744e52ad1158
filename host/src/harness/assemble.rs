//! Running the slot's engine over a transcript: one guarded `assemble`, and a view of its
//! answer that borrows the transcript's messages. It lives above storage: the session layer
//! reads conversations and knows nothing of engines or the guard.

use std::sync::Arc;

use pincer_plugin_abi::latest::{AbortController, AssembleResult, Message, RuntimeSettings};

use crate::engines::instance::resolve_assembled;
use crate::engines::request::{AssembleRequest, HostInputs};
use crate::session::transcript::Transcript;
use crate::slot::guarded::{Answer, GuardError, GuardedEngine};

/// The answer of one `assemble` over a transcript.
pub struct AssembledView {
    /// The engine's result.
    pub result: AssembleResult,
    /// Who answered.
    pub answer: Answer,
    input: Arc<[Message]>,
}

impl AssembledView {
    /// The messages the model would see, in order (references, no copies).
    pub fn messages(&self) -> Vec<&Message> {
        resolve_assembled(&self.result, &self.input)
    }

    /// For each message the model would see: its index in the input, or `None` if new.
    pub fn origins(&self) -> Vec<Option<usize>> {
        let mut out = Vec::new();
        for item in self.result.items.iter() {
            match item {
                pincer_plugin_abi::latest::AssembledItem::Input { start, end } => {
                    out.extend((*start as usize..*end as usize).map(Some))
                }
                pincer_plugin_abi::latest::AssembledItem::New(_) => out.push(None),
            }
        }
        out
    }
}

impl Transcript {
    /// Runs `assemble` of `engine` over the transcript.
    ///
    /// # Errors
    /// What the guard returns (abort, strict policy, both engines failing).
    pub fn assemble(
        &self,
        engine: &GuardedEngine,
        session_id: &str,
        token_budget: Option<u64>,
    ) -> Result<AssembledView, GuardError> {
        self.assemble_with(engine, session_id, token_budget, HostInputs::default())
    }

    /// Runs `assemble` as a run of the CLI would: with the runtime settings of the host it runs
    /// in (`sessionKey` is the session id).
    ///
    /// # Errors
    /// What the guard returns.
    pub fn assemble_in(
        &self,
        engine: &GuardedEngine,
        session_id: &str,
        token_budget: Option<u64>,
        settings: Arc<RuntimeSettings>,
    ) -> Result<AssembledView, GuardError> {
        let host = HostInputs {
            runtime_settings: Some(settings),
            ..HostInputs::default()
        };
        self.assemble_with(engine, session_id, token_budget, host)
    }

    /// Runs `assemble` with the given host parameters (`sessionKey` defaults to the session id).
    ///
    /// # Errors
    /// What the guard returns.
    pub fn assemble_with(
        &self,
        engine: &GuardedEngine,
        session_id: &str,
        token_budget: Option<u64>,
        mut host: HostInputs,
    ) -> Result<AssembledView, GuardError> {
        let session_id: Arc<str> = Arc::from(session_id);
        if host.session_key.is_none() {
            host.session_key = Some(Arc::clone(&session_id));
        }
        let request = Arc::new(AssembleRequest {
            session_id,
            messages: self.shared_messages(),
            entry_ids: self.entry_ids(),
            token_budget,
            host,
        });
        let guarded = engine.assemble(request, Arc::new(AbortController::new()))?;
        Ok(AssembledView {
            result: guarded.value,
            answer: guarded.answer,
            input: self.shared_messages(),
        })
    }
}
