//! The rules `--deep` checks one event by, from the event itself and the little the checker
//! keeps: a commitment's cid and its close, a tick's decision and slot, the rule table, a
//! meta summary's counts, a synthesized reflection, a stimulus's slot id.

use super::*;

impl DeepChecker {
    pub(super) fn check_cid(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let Some(meta) = meta else {
            self.counts.unresolved += 1;
            return;
        };
        let cid = meta.get("cid");
        if let Some(Value::String(c)) = cid {
            if c.starts_with("mc_") {
                return; // internal: numbered, not derived from text
            }
        }
        let Some(Value::String(text)) = meta.get("text") else {
            self.counts.unresolved += 1;
            return;
        };
        self.counts.cids += 1;
        let expected = commitment_cid(text);
        if cid.and_then(Value::as_str) != Some(expected.as_str()) {
            let found = cid.cloned().unwrap_or(Value::Null);
            self.emit(
                out,
                ev.id,
                mismatch("commitment_open.cid", expected.into(), found),
            );
        }
    }

    pub(super) fn check_close(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let Some(cid) = meta.and_then(|m| m.get("cid")).and_then(Value::as_str) else {
            self.counts.unresolved += 1;
            return;
        };
        self.counts.close_contents += 1;
        let expected = close_content(cid);
        if ev.content != expected && ev.content != internal_close_content(cid) {
            let p = mismatch(
                "commitment_close.content",
                expected.into(),
                ev.content.clone().into(),
            );
            self.emit(out, ev.id, p);
        }
    }

    pub(super) fn check_decision(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        self.counts.tick_decisions += 1;
        let content: Option<Map<String, Value>> = serde_json::from_str(&ev.content).ok();
        let decision = content.as_ref().and_then(|c| c.get("decision"));
        if decision
            .and_then(Value::as_str)
            .and_then(Action::parse)
            .is_none()
        {
            let p = mismatch(
                "autonomy_tick.decision",
                Action::listed().into(),
                decision.cloned().unwrap_or(Value::Null),
            );
            self.emit(out, ev.id, p);
        }
        let evidence = content.as_ref().and_then(|c| c.get("evidence"));
        let fine = evidence.and_then(Value::as_array).is_some_and(|ids| {
            ids.iter()
                .all(|i| i.as_i64().is_some_and(|i| i >= 1 && i < ev.id))
        });
        if !fine {
            let p = mismatch(
                "autonomy_tick.evidence",
                "a list of ids of earlier events".into(),
                evidence.cloned().unwrap_or(Value::Null),
            );
            self.emit(out, ev.id, p);
        }
    }

    pub(super) fn check_rule_table(
        &mut self,
        ev: &Event,
        _: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        self.counts.rule_tables += 1;
        let keys = crate::event::config::Threshold::ALL.map(|k| k.as_str());
        let body = ev
            .content
            .strip_prefix('{')
            .and_then(|b| b.strip_suffix('}'));
        // The reference's four; pmm's index_threshold (the last) follows only when not the
        // default.
        let fine = body.is_some_and(|b| {
            let pairs: Vec<&str> = b.split(',').collect();
            (pairs.len() == keys.len() || pairs.len() == keys.len() - 1)
                && pairs.iter().zip(keys).all(|(pair, key)| {
                    pair.split_once(':').is_some_and(|(k, v)| {
                        k == key
                            && v.parse::<i64>()
                                .is_ok_and(|n| crate::event::config::THRESHOLD_RANGE.contains(&n))
                    })
                })
        });
        if !fine {
            let p = mismatch(
                "autonomy_rule_table.content",
                format!("{{{}}}", keys.map(|k| format!("{k}:N")).join(",")).into(),
                ev.content.clone().into(),
            );
            self.emit(out, ev.id, p);
        }
    }

    pub(super) fn check_meta_summary(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&ev.content) else {
            self.counts.unresolved += 1;
            return;
        };
        self.counts.meta_summaries += 1;
        // pmm counts every event before it; the reference counted at some point before
        // (GPT id 481 says 477), so only "not more than there were" holds for both.
        let count = c.get("event_count").cloned().unwrap_or(Value::Null);
        if !count.as_i64().is_some_and(|n| n >= 0 && n < ev.id) {
            // The id is input: i64::MIN has no id before it.
            let expected = match ev.id.checked_sub(1) {
                Some(n) => format!("at most {n}"),
                None => format!("less than {}", ev.id),
            };
            let p = mismatch("meta_summary.event_count", expected.into(), count);
            self.emit(out, ev.id, p);
        }
        let stats = c.get("graph_stats");
        let nodes = stats.and_then(|g| g.get("nodes")).cloned();
        let sum: Option<i64> = stats
            .and_then(|g| g.get("counts_by_kind"))
            .and_then(Value::as_object)
            .and_then(|m| {
                // Counts are input: summed wide, and a sum beyond i64 is no count (no panic).
                let sum: i128 = m.values().filter_map(Value::as_i64).map(i128::from).sum();
                i64::try_from(sum).ok()
            });
        if nodes.as_ref().and_then(Value::as_i64) != sum {
            let p = mismatch(
                "meta_summary.graph_stats.nodes",
                sum.map_or(Value::Null, Value::from),
                nodes.unwrap_or(Value::Null),
            );
            self.emit(out, ev.id, p);
        }
        let about = meta.and_then(|m| m.get("about_event")).cloned();
        if let Some(about) = about {
            let known = about
                .as_i64()
                .is_some_and(|a| self.reflections.binary_search(&a).is_ok());
            let reachable = about
                .as_i64()
                .is_some_and(|a| self.reflections.front().is_none_or(|f| a < *f));
            if !known && !reachable {
                let p = mismatch(
                    "meta_summary.meta.about_event",
                    "the id of an earlier reflection".into(),
                    about,
                );
                self.emit(out, ev.id, p);
            }
        }
    }

    pub(super) fn check_synthesized(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        // pmm's own (the reference writes other intent/outcome reflections too, such as its
        // retrieval verifications, from other inputs).
        if !Source::PmmTurn.is(meta.and_then(|m| m.get("source"))) {
            return;
        }
        let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&ev.content) else {
            return; // a kernel or delta reflection: not recomputed (see KINDS_NOT_CHECKED)
        };
        if c.get("next").and_then(Value::as_str) != Some("continue") {
            return;
        }
        let (Some(intent), Some(outcome)) = (c.get("intent"), c.get("outcome")) else {
            return;
        };
        if let Some(&e) = [self.last_user_id, self.last_reply_id]
            .iter()
            .find(|i| self.erased.contains(i))
        {
            self.skip(ev.id, "reflection.intent/outcome", e);
            return;
        }
        let (Some(user), Some(reply)) = (&self.last_user, &self.last_reply) else {
            self.counts.unresolved += 1;
            return;
        };
        self.counts.synthesized_reflections += 1;
        let cut = |s: &str| Value::from(synthesized_text(s));
        let (want_intent, want_outcome) = (cut(user), cut(reply));
        if *intent != want_intent {
            let p = mismatch("reflection.intent", want_intent, intent.clone());
            self.emit(out, ev.id, p);
        }
        if *outcome != want_outcome {
            let p = mismatch("reflection.outcome", want_outcome, outcome.clone());
            self.emit(out, ev.id, p);
        }
    }

    pub(super) fn check_stimulus(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let content: Option<Map<String, Value>> = serde_json::from_str(&ev.content).ok();
        let Some(slot) = content
            .as_ref()
            .and_then(|c| c.get("slot"))
            .and_then(Value::as_i64)
        else {
            self.counts.unresolved += 1;
            return;
        };
        self.counts.slot_ids += 1;
        let expected = slot_id_of(slot, meta);
        let in_content = content.as_ref().and_then(|c| c.get("slot_id"));
        let in_meta = meta.and_then(|m| m.get("slot_id"));
        for (what, found) in [
            ("autonomy_stimulus.slot_id", in_content),
            ("autonomy_stimulus.meta.slot_id", in_meta),
        ] {
            if found.and_then(Value::as_str) != Some(expected.as_str()) {
                let p = mismatch(
                    what,
                    expected.clone().into(),
                    found.cloned().unwrap_or_default(),
                );
                self.emit(out, ev.id, p);
            }
        }
    }

    /// An `autonomy_tick`: its slot id, then its decision and evidence.
    pub(super) fn check_tick(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        self.check_tick_slot(ev, meta, out);
        self.check_decision(ev, out);
    }

    pub(super) fn check_tick_slot(
        &mut self,
        ev: &Event,
        meta: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        let Some(slot) = meta.and_then(|m| m.get("slot")).and_then(Value::as_i64) else {
            self.counts.unresolved += 1;
            return;
        };
        self.counts.tick_slot_ids += 1;
        let expected = slot_id_of(slot, meta);
        let found = meta.and_then(|m| m.get("slot_id"));
        if found.and_then(Value::as_str) != Some(expected.as_str()) {
            let p = mismatch(
                "autonomy_tick.meta.slot_id",
                expected.into(),
                found.cloned().unwrap_or_default(),
            );
            self.emit(out, ev.id, p);
        }
    }
}
