//! The turn's sentence embeddings (docs/recall.md): the user's message is embedded before
//! anything is written (a missing model or a server whose dimensions differ from the stored
//! vectors' stops the turn with exit 2 and nothing written), the reply after the model
//! answers, and both vectors are stored with the turn's events. A server that is down or slow
//! only takes the dense source away from this turn; the `retrieval_selection` says so.

use crate::llm::embed::{EmbedError, Shared};
use crate::recall::DenseQuery;
use crate::store::{Batch, Reads};

/// What the dense source has for one turn.
#[derive(Debug, Default)]
pub(crate) struct Dense {
    /// The embedder, while it works.
    embedder: Option<Shared>,
    /// The user's message's vector.
    pub(crate) query: Option<DenseQuery>,
    /// The reply's vector.
    reply: Option<Vec<f32>>,
    /// Why the dense source was not used, when an embedder was configured.
    pub(crate) unavailable: Option<String>,
}

impl Dense {
    /// Stage 0: embeds the user's message. `Err` only for a user's mistake (exit 2).
    pub(crate) fn for_message<R: Reads>(
        r: &R,
        embedder: Option<&Shared>,
        message: &str,
    ) -> crate::Result<Dense> {
        let Some(e) = embedder else {
            return Ok(Dense::default());
        };
        let vector = match e.embed(&[message]) {
            Ok(mut v) => v.pop().unwrap_or_default(),
            Err(err) => return Dense::failed(e, err),
        };
        if let Some(m) = r.vector_model(e.id())? {
            if m.dim != vector.len() {
                return Err(crate::Error::bad_input(
                    None,
                    format!(
                        "embedding model {} gives {} dimensions, but its stored vectors have {}: \
                         nothing was written",
                        e.id(),
                        vector.len(),
                        m.dim
                    ),
                ));
            }
        }
        Ok(Dense {
            embedder: Some(e.clone()),
            query: Some(DenseQuery {
                model: e.id().to_string(),
                vector,
            }),
            reply: None,
            unavailable: None,
        })
    }

    fn failed(e: &Shared, err: EmbedError) -> crate::Result<Dense> {
        if err.is_config() {
            return Err(crate::Error::bad_input(None, err.to_string()));
        }
        Ok(Dense {
            unavailable: Some(format!("{}: {err}", e.id())),
            ..Dense::default()
        })
    }

    /// Embeds the reply (before the write transaction begins); a failure leaves it without a
    /// vector, for a later backfill.
    pub(crate) fn embed_reply(&mut self, reply: &str) {
        if let Some(e) = &self.embedder {
            self.reply = e.embed(&[reply]).ok().and_then(|mut v| v.pop());
        }
    }

    /// Stores the message's and the reply's vectors inside the turn's write.
    pub(crate) fn store(&self, batch: &Batch<'_>, user: i64, assistant: i64) -> crate::Result<()> {
        let Some(q) = &self.query else {
            return Ok(());
        };
        let mut v = vec![(user, q.vector.clone())];
        if let Some(r) = &self.reply {
            v.push((assistant, r.clone()));
        }
        batch.put_vectors(&q.model, q.vector.len(), &v)?;
        Ok(())
    }

    /// What the `retrieval_selection` records: the model, or why there was none.
    pub(crate) fn record(&self) -> Option<serde_json::Value> {
        match (&self.query, &self.unavailable) {
            (Some(q), _) => Some(serde_json::json!({"model": q.model})),
            (None, Some(why)) => Some(serde_json::json!({"unavailable": why})),
            (None, None) => None,
        }
    }
}
