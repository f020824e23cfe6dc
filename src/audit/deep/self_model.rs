//! `summary_update`: `meta.rsm_state` recomputed by the self-model hook ([`super::SelfModel`])
//! over the events before it.

use super::*;

impl DeepChecker {
    /// The hook for the self-model snapshot of a `summary_update` (see [`SelfModel`]).
    pub(super) fn check_self_model(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let Some(model) = self.self_model.as_mut() else {
            return;
        };
        let content: Option<Value> = serde_json::from_str(&ev.content).ok();
        let found = meta.and_then(|m| m.get("rsm_state"));
        // Most summaries match: bytes against bytes, without parsing and re-canonicalizing a
        // snapshot that, in the reference's format, grows with the ledger.
        let parsed = Parsed {
            meta,
            content: content.as_ref(),
        };
        if let (Some(json), Some(f)) = (model.expected_rsm_json(ev, parsed), found) {
            if serde_json::to_vec(f).is_ok_and(|b| b == json) {
                self.counts.rsm_snapshots += 1;
                return;
            }
        }
        let Some(model) = self.self_model.as_mut() else {
            return;
        };
        let Some(expected) = model.expected_rsm_state(ev, parsed) else {
            return;
        };
        let differs = found.map(canon_text) != Some(canon_text(&expected));
        // The self-model folds every event before it: an erased one changes what it gives.
        if let Some(&e) = self.erased.iter().next().filter(|_| differs) {
            self.skip(ev.id, "summary_update.rsm_state", e);
            return;
        }
        self.counts.rsm_snapshots += 1;
        if differs {
            let p = mismatch(
                "summary_update.rsm_state",
                expected,
                found.cloned().unwrap_or_default(),
            );
            self.emit(out, ev.id, p);
        }
    }
}
