//! Conversations: reading them ([`transcript`]: pincer's format or OpenAI chat transcripts)
//! and running an engine over one ([`assemble`]). The reader knows nothing of engines; the
//! append-only session store of reference §10 will live here too.

pub mod assemble;
pub mod transcript;

pub use assemble::AssembledView;
pub use transcript::{Transcript, TranscriptError};
