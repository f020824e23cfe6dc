//! How a writer calls the model (a turn, a thinking tick) and how that call fails.

use crate::error::ExitStatus;
use crate::event::{Clock, Event};
use crate::llm::{Cancel, LlmError, TextSink};

/// How a turn calls the model.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sampling temperature (default 0).
    pub temperature: f64,
    /// Nucleus sampling (default 1).
    pub top_p: f64,
    /// Seed, passed to providers that take one.
    pub seed: Option<u64>,
    /// The most tokens a reply may have; `None` leaves it to the server.
    pub max_tokens: Option<u32>,
    /// Characters of recalled text (the `hybrid` strategy); `None` takes the retrieval
    /// config's `budget`.
    pub budget: Option<usize>,
    /// Where timestamps come from.
    pub clock: Clock,
    /// Streams the reply: each piece goes here as it is generated (the HTTP adapters then ask
    /// for a streamed answer). The reply is still appended once, whole, after it ends.
    pub stream: Option<TextSink>,
    /// Cancels the model call once raised: the turn then appends a `generation_failure` with
    /// `reason` `interrupted` and ends with [`TurnError::Generation`].
    pub cancel: Option<Cancel>,
    /// The sentence-embedding model of the dense recall source (none: full text and concepts
    /// only). The turn embeds the user's message and the reply, and stores both vectors.
    pub embedder: Option<crate::llm::embed::Shared>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            temperature: 0.0,
            top_p: 1.0,
            seed: None,
            max_tokens: None,
            budget: None,
            clock: Clock::System,
            stream: None,
            cancel: None,
            embedder: None,
        }
    }
}

/// Why a turn did not finish.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The model failed for good; the user's message and a `generation_failure` event are in
    /// the ledger (exit 3).
    #[error("{error} (recorded as event {})", failure.id)]
    Generation {
        /// The error.
        error: LlmError,
        /// The events written (the user message …, the failure last).
        events: Vec<Event>,
        /// The `generation_failure` event.
        failure: Box<Event>,
    },
    /// The ledger could not be read or written.
    #[error(transparent)]
    Store(#[from] crate::Error),
}

impl ExitStatus for TurnError {
    /// 3 when the model failed (128 + the signal when the call was interrupted), else the
    /// store error's own status.
    fn exit_code(&self) -> u8 {
        match self {
            TurnError::Generation { error, .. } => error.exit_status().unwrap_or(3),
            TurnError::Store(e) => e.exit_code(),
        }
    }
}

impl From<TurnError> for crate::Error {
    /// A store error stays itself; a failed generation keeps its exit status.
    fn from(e: TurnError) -> Self {
        match e {
            TurnError::Store(e) => e,
            e => crate::Error::with_exit_status(e),
        }
    }
}
