//! Sentence embeddings for semantic recall (docs/recall.md): one interface, [`Embedder`], over
//! an in-process sentence-transformers model ([`bert`]) and embedding servers ([`server`]:
//! Ollama's `/api/embed`, OpenAI-compatible `/v1/embeddings`).
//!
//! Every vector is L2-normalised, so a dot product is the cosine. Every embedder names its
//! vector space with [`Embedder::id`]: vectors are stored under that id, and vectors of two ids
//! are never compared.

pub mod bert;
pub mod server;
mod weights;

use super::LlmError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The in-process model the documentation names (Apache-2.0, 384 dimensions).
pub const DOCUMENTED_MODEL: &str = "all-MiniLM-L6-v2";
/// Texts sent to a model in one call.
pub const BATCH: usize = 32;

/// Where embeddings come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// A sentence-transformers model directory, run in this process.
    Local,
    /// Ollama's `POST /api/embed`.
    Ollama,
    /// An OpenAI-compatible `POST /v1/embeddings` (llama.cpp, vLLM, OpenAI).
    Openai,
}

impl Provider {
    /// Every provider's name, as `--embed` and `PMM_EMBED` take it.
    pub const NAMES: [&'static str; 3] = ["local", "ollama", "openai"];

    /// The provider called `name`.
    pub fn parse(name: &str) -> Option<Provider> {
        match name {
            "local" => Some(Provider::Local),
            "ollama" => Some(Provider::Ollama),
            "openai" => Some(Provider::Openai),
            _ => None,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Local => "local",
            Provider::Ollama => "ollama",
            Provider::Openai => "openai",
        }
    }
}

/// How to reach an embedding model.
#[derive(Clone, PartialEq)]
pub struct EmbedConfig {
    /// The provider.
    pub provider: Provider,
    /// A model directory (local) or a model name (servers).
    pub model: String,
    /// The server's URL: Ollama's host, or the OpenAI-compatible base URL up to `/v1`.
    pub url: Option<String>,
    /// Bearer token for OpenAI-compatible servers; never shown.
    pub api_key: Option<String>,
    /// Limit on each attempt; retries and backoff as the chat adapters'.
    pub timeout: Duration,
    /// Retries after the first attempt for transient failures.
    pub retries: u32,
    /// Delay before the first retry, doubling for each further one.
    pub backoff: Duration,
}

impl EmbedConfig {
    /// `provider` and `model` with the chat adapters' defaults for the rest (a shorter
    /// timeout: an embedding is a small request, and a turn goes on without it).
    pub fn new(provider: Provider, model: &str) -> EmbedConfig {
        EmbedConfig {
            provider,
            model: model.to_string(),
            url: None,
            api_key: None,
            timeout: Duration::from_secs(30),
            retries: 2,
            backoff: Duration::from_millis(500),
        }
    }

    /// The chat adapters' HTTP settings for this config, for the shared client.
    pub(crate) fn http_config(&self) -> super::Config {
        let mut cfg = super::Config::new(super::AdapterKind::Openai);
        cfg.timeout = self.timeout;
        cfg.retries = self.retries;
        cfg.backoff = self.backoff;
        cfg
    }
}

impl std::fmt::Debug for EmbedConfig {
    // By hand so that the API key never reaches a log or a panic message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbedConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The model directory is missing, incomplete or unreadable, or the setup is wrong: a
    /// user's mistake, found before anything is written (exit 2).
    #[error("embedding model: {0}")]
    Model(String),
    /// The server could not be asked, or answered badly (a turn goes on without vectors).
    #[error("embedding {0}")]
    Server(#[from] LlmError),
    /// The model computed something unusable (a tensor error, a wrong count).
    #[error("embedding model {model}: {detail}")]
    Compute {
        /// The embedder's id.
        model: String,
        /// What went wrong.
        detail: String,
    },
}

impl EmbedError {
    /// True for a user's mistake in the setup (exit 2); everything else is the service's
    /// failure, after which a turn goes on with the other recall sources.
    pub fn is_config(&self) -> bool {
        match self {
            EmbedError::Model(_) => true,
            EmbedError::Server(e) => e.is_config(),
            EmbedError::Compute { .. } => false,
        }
    }
}

/// The variable through which candle sizes its matrix products' thread split (it has no API
/// for it) and rayon its pool.
pub const THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// Whether [`single_text_threads`] set [`THREADS_VAR`] (so child processes are not given it).
static THREADS_SET: AtomicBool = AtomicBool::new(false);

/// For a program that embeds one text at a time (a turn's message and reply, a recall's
/// query), called before it starts any thread: the in-process model then runs each text on
/// one thread ([`THREADS_VAR`] = 1 unless the user set it). Split over the cores, one short
/// text's matrix products cost about as much in hand-offs as they save, and the idle pool's
/// threads spin for a while, taking the cores the turn's vector search (split over two
/// connections) needs next: a turn of a `pmm-turn` reading lines took 66-72 ms with the split
/// and 56-58 ms without (53-57 ms with the one-thread pool of `bert.rs` too; docs/recall.md). A backfill
/// (batches of 64) keeps every core: 9.6 s on one thread against 5.9 s on two for 419 messages.
pub fn single_text_threads() {
    if std::env::var_os(THREADS_VAR).is_none() {
        std::env::set_var(THREADS_VAR, "1");
        THREADS_SET.store(true, Ordering::Relaxed);
    }
}

/// Whether this process set [`THREADS_VAR`] itself (a child process it starts should not
/// inherit it).
pub fn threads_var_is_ours() -> bool {
    THREADS_SET.load(Ordering::Relaxed)
}

/// A sentence-embedding model.
pub trait Embedder: Send {
    /// The vector space: the provider, the model and what identifies its weights
    /// (`local:all-MiniLM-L6-v2@1a2b3c4d5e6f`, `ollama:nomic-embed-text@0a109f422b47`).
    /// Vectors are stored and compared under this id only. A server's is complete once
    /// [`Embedder::identify`] succeeded.
    fn id(&self) -> &str;
    /// Finds what identifies the model, when that takes asking (a server); [`Embedder::embed`]
    /// does it first too.
    fn identify(&mut self) -> Result<(), EmbedError> {
        Ok(())
    }
    /// Dimensions of every vector; for a server, known after the first answer (0 before).
    fn dim(&self) -> usize;
    /// One L2-normalised vector per text, in order.
    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Whether the model runs in this process: its dimensions are known before its first
    /// vector, and embedding can only fail in computation, never for a user's mistake.
    fn in_process(&self) -> bool {
        false
    }
}

/// An embedder shared by the turns of one process (a chat session, the MCP server): cloning
/// shares the model, and calls take turns.
#[derive(Clone)]
pub struct Shared {
    inner: Arc<Mutex<Box<dyn Embedder>>>,
}

impl Shared {
    /// Shares `e`.
    pub fn new(e: Box<dyn Embedder>) -> Shared {
        Shared {
            inner: Arc::new(Mutex::new(e)),
        }
    }

    /// The embedder's id ([`Embedder::id`]: a server's is complete after its first vector or
    /// [`Shared::identify`]).
    pub fn id(&self) -> String {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .id()
            .to_string()
    }

    /// [`Embedder::identify`].
    pub fn identify(&self) -> Result<(), EmbedError> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .identify()
    }

    /// [`Embedder::dim`].
    pub fn dim(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).dim()
    }

    /// [`Embedder::in_process`].
    pub fn in_process(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .in_process()
    }

    /// [`Embedder::embed`].
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut e = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        e.embed(texts)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Shared").field(&self.id()).finish()
    }
}

/// The embedder `cfg` describes: the local model is loaded (and checked) now; a server is
/// first asked at the first [`Embedder::embed`].
pub fn embedder(cfg: &EmbedConfig) -> Result<Box<dyn Embedder>, EmbedError> {
    Ok(match cfg.provider {
        Provider::Local => Box::new(bert::Bert::load(&PathBuf::from(&cfg.model))?),
        Provider::Ollama => Box::new(server::Server::ollama(cfg)?),
        Provider::Openai => Box::new(server::Server::openai(cfg)?),
    })
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Checks a batch's answer: one finite vector per text, all of `dim` dimensions (when `dim`
/// is known), then normalises each.
pub(crate) fn checked(
    model: &str,
    texts: usize,
    dim: usize,
    mut vectors: Vec<Vec<f32>>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let bad = |detail: String| EmbedError::Compute {
        model: model.to_string(),
        detail,
    };
    if vectors.len() != texts {
        return Err(bad(format!("{} vectors for {texts} texts", vectors.len())));
    }
    // Before the first answer, the first vector's dimensions are what every other must have.
    let dim = match dim {
        0 => vectors.first().map_or(0, Vec::len),
        d => d,
    };
    for v in &mut vectors {
        if v.is_empty() || v.len() != dim {
            return Err(bad(format!(
                "a vector of {} dimensions, not {dim}",
                v.len()
            )));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(bad("a vector with a value that is not a number".into()));
        }
        normalize(v);
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_round_trip_their_names() {
        for name in Provider::NAMES {
            assert_eq!(Provider::parse(name).unwrap().as_str(), name);
        }
        assert_eq!(Provider::parse("bert"), None);
    }

    #[test]
    fn answers_are_checked_and_normalised() {
        let v = checked("m", 1, 2, vec![vec![3.0, 4.0]]).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8]]);
        assert!(checked("m", 2, 2, vec![vec![3.0, 4.0]]).is_err());
        assert!(checked("m", 1, 3, vec![vec![3.0, 4.0]]).is_err());
        assert!(checked("m", 1, 0, vec![vec![f32::NAN, 4.0]]).is_err());
        assert!(checked("m", 1, 0, vec![vec![]]).is_err());
        // Before the dimensions are known, a batch must still agree with itself.
        assert!(checked("m", 2, 0, vec![vec![3.0, 4.0], vec![1.0, 2.0, 3.0]]).is_err());
    }

    #[test]
    fn the_key_is_never_shown() {
        let mut cfg = EmbedConfig::new(Provider::Openai, "m");
        cfg.api_key = Some("sk-secret".into());
        assert!(!format!("{cfg:?}").contains("sk-secret"));
    }
}
