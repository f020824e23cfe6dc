//! The turn's sentence embeddings (docs/recall.md): what would stop the turn with exit 2 (a
//! missing model, a server whose dimensions differ from the stored vectors') is found before
//! anything is written; the user's message is embedded then by a server, or by the in-process
//! model on a second core while the turn records the message and ranks full text; the reply
//! is embedded after the model answers, and both vectors are stored with the turn's events. A server that is down or slow
//! only takes the dense source away from this turn; the `retrieval_selection` says so.

use crate::llm::embed::{EmbedError, Shared};
use crate::recall::DenseQuery;
use crate::store::log::SessionTxn;
use crate::store::Indexes;

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
    /// Whether the message's vector is still to be made ([`Dense::message_later`]).
    later: bool,
    /// What the model is asked for the query when it is not the message itself: the message
    /// without the speakers it names ([`crate::recall::speakers::dense_text`]).
    asked: Option<String>,
    /// The message's own vector, stored with it, when the query's is [`Dense::asked`]'s.
    message: Option<Vec<f32>>,
}

impl Dense {
    /// Stage 0, before anything is written. `Err` only for a user's mistake (exit 2). A
    /// server embeds the user's message now: its dimensions, or a rejected key, are known only
    /// from an answer. The in-process model's dimensions are known, so its vector is left for
    /// later ([`Dense::message_later`]).
    pub(crate) fn for_message<R: Indexes>(
        r: &R,
        embedder: Option<&Shared>,
        message: &str,
    ) -> crate::Result<Dense> {
        let Some(e) = embedder else {
            return Ok(Dense::default());
        };
        let asked = crate::recall::speakers::dense_text(r, message)?;
        if e.in_process() {
            same_dimensions(r, e, e.dim())?;
            return Ok(Dense {
                embedder: Some(e.clone()),
                later: true,
                asked,
                ..Dense::default()
            });
        }
        let mut d = Dense {
            embedder: Some(e.clone()),
            asked,
            ..Dense::default()
        };
        match e.embed(&d.texts(message)) {
            Ok(made) => {
                same_dimensions(r, e, made.last().map_or(0, Vec::len))?;
                d.take(made);
                Ok(d)
            }
            Err(err) => Dense::failed(e, err),
        }
    }

    /// What the model embeds for the message: the message, and [`Dense::asked`] when there is
    /// one (the query's vector is the last).
    fn texts<'a>(&'a self, message: &'a str) -> Vec<&'a str> {
        std::iter::once(message)
            .chain(self.asked.as_deref())
            .collect()
    }

    /// Takes the vectors of [`Dense::texts`]: the last is the query's, the first the
    /// message's own when they differ.
    fn take(&mut self, mut made: Vec<Vec<f32>>) {
        let Some(e) = &self.embedder else {
            return;
        };
        let query = made.pop().unwrap_or_default();
        self.message = if self.asked.is_some() {
            made.pop()
        } else {
            None
        };
        self.query = Some(DenseQuery {
            model: e.id(),
            vector: query,
        });
    }

    /// The work left to the in-process model, if any (embedding the message, and what is
    /// asked for the query): the turn runs it on a second thread and hands the result to
    /// [`Dense::message_embedded`].
    pub(crate) fn message_later(
        &self,
        message: &str,
    ) -> Option<impl FnOnce() -> Result<Vec<Vec<f32>>, EmbedError> + Send + 'static> {
        let e = self.embedder.clone().filter(|_| self.later)?;
        let texts: Vec<String> = self.texts(message).into_iter().map(String::from).collect();
        Some(move || e.embed(&texts.iter().map(String::as_str).collect::<Vec<_>>()))
    }

    /// Takes the message's vector made by [`Dense::message_later`]'s embedder; a failure
    /// leaves the turn to the other sources, as a server that is down does.
    pub(crate) fn message_embedded(&mut self, made: Result<Vec<Vec<f32>>, EmbedError>) {
        self.later = false;
        let Some(e) = self.embedder.clone() else {
            return;
        };
        match made {
            Ok(v) => self.take(v),
            Err(err) => {
                self.embedder = None;
                self.unavailable = Some(format!("{}: {err}", e.id()));
            }
        }
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
    pub(crate) fn store(
        &self,
        tx: &mut dyn SessionTxn,
        user: i64,
        assistant: i64,
    ) -> crate::Result<()> {
        let Some(q) = &self.query else {
            return Ok(());
        };
        let mut v = vec![(
            user,
            self.message.clone().unwrap_or_else(|| q.vector.clone()),
        )];
        if let Some(r) = &self.reply {
            v.push((assistant, r.clone()));
        }
        tx.put_vectors(&q.model, q.vector.len(), &v)?;
        Ok(())
    }

    /// What the `retrieval_selection` records: the model, or why there was none.
    pub(crate) fn record(&self) -> Option<serde_json::Value> {
        match (&self.query, &self.unavailable) {
            (Some(q), _) => {
                let mut r = serde_json::json!({"model": q.model});
                if let Some(asked) = &self.asked {
                    r["asked"] = asked.as_str().into();
                }
                Some(r)
            }
            (None, Some(why)) => Some(serde_json::json!({"unavailable": why})),
            (None, None) => None,
        }
    }
}

/// Exit 2 (nothing written yet) when `e`'s vectors have other dimensions than its stored ones.
fn same_dimensions<R: Indexes>(r: &R, e: &Shared, dim: usize) -> crate::Result<()> {
    match r.vector_model(&e.id())? {
        Some(m) if m.dim != dim => Err(crate::Error::bad_input(
            None,
            format!(
                "embedding model {} gives {dim} dimensions, but its stored vectors have {}: \
                 nothing was written",
                e.id(),
                m.dim
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::embed::Embedder;

    /// An in-process model whose computation fails, or gives a fixed vector.
    struct Fixed(Option<Vec<f32>>);

    impl Embedder for Fixed {
        fn id(&self) -> &str {
            "local:fixed@0"
        }
        fn dim(&self) -> usize {
            2
        }
        fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            match &self.0 {
                Some(v) => Ok(vec![v.clone(); texts.len()]),
                None => Err(EmbedError::Compute {
                    model: self.id().into(),
                    detail: "out of memory".into(),
                }),
            }
        }
        fn in_process(&self) -> bool {
            true
        }
    }

    fn ledger() -> (tempfile::TempDir, crate::store::Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let l = crate::store::Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        (dir, l)
    }

    /// The in-process model's vector is made later; once handed over it is the query, and a
    /// failed computation leaves the turn to the other sources and says why.
    #[test]
    fn an_in_process_models_vector_is_made_later() {
        let (_dir, l) = ledger();
        for (made, model) in [(Some(vec![0.6, 0.8]), true), (None, false)] {
            let e = Shared::new(Box::new(Fixed(made)));
            let mut d = Dense::for_message(&l, Some(&e), "hello").unwrap();
            assert!(d.query.is_none() && d.unavailable.is_none());
            let later = d
                .message_later("hello")
                .expect("the vector is left for later");
            d.message_embedded(later());
            assert!(d.message_later("hello").is_none());
            let record = d.record().unwrap();
            if model {
                assert_eq!(d.query.as_ref().unwrap().vector, [0.6, 0.8]);
                assert_eq!(record["model"], "local:fixed@0");
            } else {
                assert!(d.query.is_none());
                assert!(
                    record["unavailable"]
                        .as_str()
                        .unwrap()
                        .contains("out of memory"),
                    "{record}"
                );
                d.embed_reply("hi");
                assert!(d.reply.is_none(), "no model after a failure");
            }
        }
    }
}
