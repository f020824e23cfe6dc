//! `embedding_add`: the whole content recomputed from the embedded event's text (hash64),
//! from the window of texts kept, or deferred to the second pass.

use super::*;

impl DeepChecker {
    pub(super) fn text_of(&self, id: i64) -> Option<&str> {
        let i = self.texts.binary_search_by_key(&id, |(k, _)| *k).ok()?;
        self.texts.get(i).map(|(_, t)| t.as_str())
    }

    pub(super) fn check_embedding(
        &mut self,
        ev: &Event,
        _: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let typed = canon::starts_object(&ev.content)
            .then(|| serde_json::from_str::<EmbeddingFields>(&ev.content).ok())
            .flatten();
        let fields = match typed {
            Some(f) => Some((f.event_id, f.model, f.dims)),
            None => {
                let parsed: Option<Map<String, Value>> = serde_json::from_str(&ev.content).ok();
                parsed.as_ref().and_then(|m| {
                    Some((
                        m.get("event_id")?.as_i64()?,
                        m.get("model")?.as_str()?.to_string(),
                        m.get("dims")?.as_i64()?,
                    ))
                })
            }
        };
        let Some((target, model, dims)) = fields else {
            self.counts.embeddings += 1;
            self.emit(
                out,
                ev.id,
                mismatch(
                    "embedding_add",
                    "a JSON object with integer event_id and dims and a string model".into(),
                    ev.content.clone().into(),
                ),
            );
            return;
        };
        if self.erased.contains(&target) {
            self.skip(ev.id, "embedding_add", target);
            return;
        }
        if target < ev.id {
            if let Some(text) = self.text_of(target) {
                let expected = embed::embedding_content(target, text, &model, dims);
                self.counts.embeddings += 1;
                let found = ev.content.clone();
                self.compare_embedding(out, ev.id, &expected, &found);
                return;
            }
        }
        self.pending_embeddings.push(PendingEmbedding {
            id: ev.id,
            target,
            model,
            dims,
            found: ev.content.clone(),
        });
    }

    /// Reports the fields of an embedding that differ from the recomputed content (one finding
    /// per field, so a changed vector entry reads as `embedding_add.vector`).
    pub(super) fn compare_embedding(
        &mut self,
        out: &mut Vec<Finding>,
        id: i64,
        expected: &str,
        found: &str,
    ) {
        if expected == found {
            return;
        }
        let exp: Map<String, Value> = serde_json::from_str(expected).unwrap_or_default();
        let got: Option<Map<String, Value>> = serde_json::from_str(found).ok();
        let mut any = false;
        if let Some(got) = got {
            let keys: std::collections::BTreeSet<&String> = exp.keys().chain(got.keys()).collect();
            for k in keys {
                let (e, f) = (exp.get(k), got.get(k));
                if e.map(canon_text) != f.map(canon_text) {
                    any = true;
                    let p = mismatch(
                        format!("embedding_add.{k}"),
                        e.cloned().unwrap_or(Value::Null),
                        f.cloned().unwrap_or(Value::Null),
                    );
                    self.emit(out, id, p);
                }
            }
        }
        if !any {
            // Same values, different text (spacing, key order): the content is not what the
            // reference writes.
            let p = mismatch("embedding_add", expected.into(), found.into());
            self.emit(out, id, p);
        }
    }
}
