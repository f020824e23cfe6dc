//! `retrieval_selection`: `meta.digest` recomputed from the selection and the user message its
//! reply answers.

use super::*;

impl DeepChecker {
    pub(super) fn check_digest(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let typed = canon::starts_object(&ev.content)
            .then(|| serde_json::from_str::<DigestInputs>(&ev.content).ok())
            .flatten()
            .filter(|d| d.scores.iter().all(|s| *s != 0.0));
        if let Some(d) = typed {
            let scores = d.scores;
            return self.check_digest_of(
                ev,
                meta,
                out,
                (d.dims, &d.model, d.turn_id, scores, d.selected),
            );
        }
        let content: Option<Map<String, Value>> = serde_json::from_str(&ev.content).ok();
        let inputs = content.as_ref().and_then(|c| {
            let dims = c.get("dims")?.as_i64()?;
            let model = c.get("model")?.as_str()?;
            let turn = c.get("turn_id")?.as_i64()?;
            let scores: Option<Vec<f64>> = c
                .get("scores")?
                .as_array()?
                .iter()
                .map(Value::as_f64)
                .collect();
            let selected: Option<Vec<i64>> = c
                .get("selected")?
                .as_array()?
                .iter()
                .map(Value::as_i64)
                .collect();
            Some((dims, model, turn, scores?, selected?))
        });
        let Some(inputs) = inputs else {
            self.counts.unresolved += 1;
            return;
        };
        self.check_digest_of(ev, meta, out, inputs);
    }

    /// [`DeepChecker::check_digest`] once the content's inputs are read.
    pub(super) fn check_digest_of(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
        (dims, model, turn, scores, selected): (i64, &str, i64, Vec<f64>, Vec<i64>),
    ) {
        // The turn's user message: the one its reply (`turn_id`) answers (`meta.reply_to`),
        // else the last one before the reply. Another process may append a user message while
        // a turn waits for its model, so "the last one before" is only a fallback for replies
        // that do not say (the reference's).
        let named = self
            .replies
            .iter()
            .rev()
            .find(|(id, _)| *id == turn)
            .and_then(|(_, u)| *u);
        let user = match named {
            Some(u) => u,
            None => match self.users.iter().rev().find(|(id, _)| *id < turn) {
                Some((u, _)) => *u,
                None => {
                    self.counts.unresolved += 1;
                    return;
                }
            },
        };
        if self.erased.contains(&user) {
            self.skip(ev.id, "retrieval_selection.digest", user);
            return;
        }
        let query = match self.users.iter().rev().find(|(id, _)| *id == user) {
            Some((_, q)) => q.as_str(),
            None => match self.text_of(user) {
                Some(q) => q,
                None => {
                    self.counts.unresolved += 1;
                    return;
                }
            },
        };
        let expected = retrieval::selection_digest(dims, model, query, &scores, &selected);
        self.counts.retrieval_digests += 1;
        let found = meta.and_then(|m| m.get("digest"));
        if found.and_then(Value::as_str) != Some(expected.as_str()) {
            let found = found.cloned().unwrap_or(Value::Null);
            let p = mismatch("retrieval_selection.digest", expected.into(), found);
            self.emit(out, ev.id, p);
        }
    }
}
