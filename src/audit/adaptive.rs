//! Deep verification of the adaptive loop's events (FORMATS.md §8.2 steps 6–7, §8.8, §8.10,
//! §8.11): each `stability_metrics`, `coherence_check`, `policy_update` and
//! `meta_policy_update` is recomputed from the events before it, with the projection that
//! writes them ([`AdaptLog`]) and the thresholds in force (the [`Mirror`]); an
//! `outcome_observation` must name the decision of the tick before it.
//!
//! A `policy_update` is recomputed with pmm's algorithm when it records its evidence, and
//! with the reference's otherwise (every outcome, `no_delta` ignored). An event whose content
//! equals the newest one of its kind before it is a *repeat*: pmm writes none, the reference
//! re-emitted them (§17 item 17); repeats are counted, not reported as mismatches.

use crate::event::{Action, Event, Kind, Seen};
use crate::projection::adapt::{self, AdaptLog};
use crate::projection::mirror::Mirror;
use serde_json::Value;

/// What recomputing one event of the adaptive loop found.
#[derive(Debug)]
pub enum AdaptiveVerdict {
    /// Not an adaptive event.
    NotChecked,
    /// Recomputed and equal; `repeat` when it equals the newest one of its kind before it.
    Same {
        /// Equal to the newest one of its kind before it.
        repeat: bool,
    },
    /// Recomputed and different: what, the expected content (none: nothing was due).
    Differs(&'static str, Option<String>),
    /// Not checkable: what, and the erased event whose text it derives from (it differs from
    /// what the events give without that text, and the text could account for it).
    Erased(&'static str, i64),
}

/// The kinds whose text (content or meta) a recomputation reads, besides the
/// `COMMIT:`/`CLOSE:` lines every kind's text may hold for `stability_metrics`: an erased one
/// of these before an event that no longer recomputes is the reason it does not.
fn text_inputs(kind: &Kind) -> &'static [Kind] {
    match kind {
        // Claims: a reply's CLAIM: lines, and claim events.
        Kind::CoherenceCheck => &[Kind::AssistantMessage, Kind::Claim],
        // Outcomes' results, and the thresholds in force (the Mirror's fold of these).
        Kind::PolicyUpdate => &[
            Kind::OutcomeObservation,
            Kind::Config,
            Kind::AutonomyRuleTable,
            Kind::PolicyUpdate,
            Kind::MetaPolicyUpdate,
        ],
        // The newest stability score, and the thresholds in force.
        Kind::MetaPolicyUpdate => &[
            Kind::StabilityMetrics,
            Kind::Config,
            Kind::AutonomyRuleTable,
            Kind::PolicyUpdate,
            Kind::MetaPolicyUpdate,
        ],
        _ => &[],
    }
}

/// The streaming fold (see the module docs).
#[derive(Debug, Default)]
pub struct AdaptiveCheck {
    adapt: AdaptLog,
    mirror: Mirror,
    /// The newest tick's decision and `meta.slot_id`.
    last_decision: Option<(String, Option<String>)>,
    /// Events folded so far.
    seen: u64,
    /// Erased events among the last [`adapt::STABILITY_WINDOW`]: (position in `seen`, id).
    erased_recent: std::collections::VecDeque<(u64, i64)>,
    /// The first erased event of each kind.
    erased_kinds: Vec<(Kind, i64)>,
}

fn slot_id(s: &Seen<'_>) -> Option<String> {
    s.meta()?.get("slot_id")?.as_str().map(str::to_string)
}

fn newest(e: &Option<(i64, String)>) -> Option<&str> {
    e.as_ref().map(|(_, c)| c.as_str())
}

impl AdaptiveCheck {
    /// The mirror of the events folded so far (the goal check reads it: [`super::goals`]).
    pub fn mirror(&self) -> &Mirror {
        &self.mirror
    }

    /// Checks `ev` against the events before it, then folds it in.
    pub fn check(&mut self, ev: &Event) -> AdaptiveVerdict {
        self.check_seen(&Seen::new(ev))
    }

    /// [`AdaptiveCheck::check`], the meta parsed at most once for every fold ([`Seen`]).
    pub fn check_seen(&mut self, s: &Seen<'_>) -> AdaptiveVerdict {
        let v = match self.verdict(s) {
            AdaptiveVerdict::Differs(what, expected) => self.explained(s.ev, what, expected),
            v => v,
        };
        self.fold(s);
        v
    }

    /// Folds in an erased event (`pmm-append --erase`): it still counts in every window, by
    /// its id and kind, as it did for the writer; its own values are not checked (its text is
    /// gone), and what later derives from its text is told apart by [`AdaptiveCheck::check`].
    pub fn fold_erased(&mut self, ev: &Event) {
        // A stability_metrics counts by its kind alone, whatever its text was.
        if ev.kind != Kind::StabilityMetrics {
            self.erased_recent.push_back((self.seen, ev.id));
        }
        if !self.erased_kinds.iter().any(|(k, _)| *k == ev.kind) {
            self.erased_kinds.push((ev.kind.clone(), ev.id));
        }
        self.fold(&Seen::new(ev));
    }

    /// A difference the erased text can account for becomes [`AdaptiveVerdict::Erased`].
    fn explained(
        &self,
        ev: &Event,
        what: &'static str,
        expected: Option<String>,
    ) -> AdaptiveVerdict {
        if ev.kind == Kind::StabilityMetrics {
            // Each erased event of the window may have had a COMMIT: and a CLOSE: line.
            if let Some(&(_, first)) = self.erased_recent.front() {
                let most = 2 * self.erased_recent.len();
                if (1..=most).any(|x| self.adapt.stability_content_with_churn(x) == ev.content) {
                    return AdaptiveVerdict::Erased(what, first);
                }
            }
            return AdaptiveVerdict::Differs(what, expected);
        }
        let inputs = text_inputs(&ev.kind);
        match self.erased_kinds.iter().find(|(k, _)| inputs.contains(k)) {
            Some(&(_, id)) => AdaptiveVerdict::Erased(what, id),
            None => AdaptiveVerdict::Differs(what, expected),
        }
    }

    fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        self.seen += 1;
        while self
            .erased_recent
            .front()
            .is_some_and(|(at, _)| at + (adapt::STABILITY_WINDOW as u64) < self.seen)
        {
            self.erased_recent.pop_front();
        }
        self.mirror.fold(s);
        self.adapt.apply(ev);
        if ev.kind == Kind::AutonomyTick {
            let decision = serde_json::from_str::<Value>(&ev.content)
                .ok()
                .and_then(|c| c.get("decision")?.as_str().map(str::to_string));
            self.last_decision = decision.map(|d| (d, slot_id(s)));
        }
    }

    fn verdict(&self, s: &Seen<'_>) -> AdaptiveVerdict {
        let (ev, a) = (s.ev, &self.adapt);
        let th = &self.mirror.thresholds;
        let (what, expected, prev) = match ev.kind {
            Kind::StabilityMetrics => (
                "stability_metrics",
                Some(a.stability_content()),
                newest(&a.last_stability),
            ),
            Kind::CoherenceCheck => (
                "coherence_check",
                Some(a.coherence_content()),
                newest(&a.last_coherence),
            ),
            Kind::PolicyUpdate if ev.content.contains("\"evidence\":") => (
                "policy_update",
                adapt::policy_due(a, th),
                newest(&a.last_policy),
            ),
            Kind::PolicyUpdate => (
                "policy_update (reference algorithm)",
                adapt::reference_policy(a),
                newest(&a.last_policy),
            ),
            Kind::MetaPolicyUpdate => (
                "meta_policy_update",
                adapt::meta_due(a, th, ev.id - 1),
                newest(&a.last_meta),
            ),
            Kind::OutcomeObservation => return self.outcome_verdict(s),
            _ => return AdaptiveVerdict::NotChecked,
        };
        if expected.as_deref() == Some(ev.content.as_str()) {
            AdaptiveVerdict::Same {
                repeat: prev == Some(ev.content.as_str()),
            }
        } else {
            AdaptiveVerdict::Differs(what, expected)
        }
    }

    /// A tick's outcome (the newest tick's `slot_id` in its meta) names that tick's decision:
    /// `autonomy_<decision>`. Outcomes appended otherwise are not a tick's.
    fn outcome_verdict(&self, s: &Seen<'_>) -> AdaptiveVerdict {
        let ev = s.ev;
        let Some((d, tick_slot)) = &self.last_decision else {
            return AdaptiveVerdict::NotChecked;
        };
        if tick_slot.is_none() || slot_id(s) != *tick_slot {
            return AdaptiveVerdict::NotChecked;
        }
        let c: Value = serde_json::from_str(&ev.content).unwrap_or(Value::Null);
        let kind = c.get("action_kind").and_then(Value::as_str);
        let expected = Action::outcome_kind(d);
        if kind == Some(expected.as_str()) {
            AdaptiveVerdict::Same { repeat: false }
        } else {
            AdaptiveVerdict::Differs("outcome_observation.action_kind", Some(expected))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, kind: &str, content: &str) -> Event {
        Event::sample(id, kind, content, "{}")
    }

    #[test]
    fn a_forged_stability_or_outcome_differs_and_a_repeat_is_counted() {
        let mut c = AdaptiveCheck::default();
        let mut tick = ev(1, "autonomy_tick", r#"{"decision":"idle"}"#);
        tick.meta = r#"{"slot_id":"s"}"#.into();
        assert!(matches!(c.check(&tick), AdaptiveVerdict::NotChecked));
        let appended = ev(
            2,
            "outcome_observation",
            r#"{"action_kind":"autonomy_reflect"}"#,
        );
        assert!(
            matches!(c.check(&appended), AdaptiveVerdict::NotChecked),
            "not a tick's"
        );
        let mut forged = appended.clone();
        forged.id = 3;
        forged.meta = r#"{"slot_id":"s"}"#.into();
        assert!(matches!(c.check(&forged), AdaptiveVerdict::Differs(..)));
        let mut with_two = AdaptLog::default();
        with_two.apply(&tick);
        with_two.apply(&appended);
        with_two.apply(&forged);
        let right = with_two.stability_content();
        assert!(matches!(
            c.check(&ev(4, "stability_metrics", &right)),
            AdaptiveVerdict::Same { repeat: false }
        ));
        let wrong = right.replace("\"stability_score\":1.0", "\"stability_score\":0.5");
        assert!(matches!(
            c.check(&ev(5, "stability_metrics", &wrong)),
            AdaptiveVerdict::Differs("stability_metrics", Some(_))
        ));
        let coherence = AdaptLog::default().coherence_content();
        c.check(&ev(6, "coherence_check", &coherence));
        assert!(matches!(
            c.check(&ev(7, "coherence_check", &coherence)),
            AdaptiveVerdict::Same { repeat: true }
        ));
    }

    #[test]
    fn an_erased_event_counts_in_the_window_and_explains_only_its_own_lines() {
        // The writer saw a reflection and a message with a COMMIT: line; the message was
        // erased since.
        let refl = ev(1, "reflection", "x");
        let said = ev(2, "user_message", "I will\nCOMMIT: water the plants");
        let mut writer = AdaptLog::default();
        writer.apply(&refl);
        writer.apply(&said);
        let before = writer.stability_content();
        let mut erased_form = said.clone();
        erased_form.content = String::new();
        let mut after = AdaptLog::default();
        after.apply(&refl);
        after.apply(&erased_form);
        let since = after.stability_content();
        assert_ne!(before, since, "the COMMIT: line counted");

        let mut c = AdaptiveCheck::default();
        c.check(&refl);
        c.fold_erased(&erased_form);
        // Written before the erasure: its text accounts for it.
        assert!(matches!(
            c.check(&ev(3, "stability_metrics", &before)),
            AdaptiveVerdict::Erased("stability_metrics", 2)
        ));
        // Written after it: checked, and the erased event still counts in the window.
        assert!(matches!(
            c.check(&ev(4, "stability_metrics", &since)),
            AdaptiveVerdict::Same { .. }
        ));
        // A value no text could give is still a mismatch.
        let forged = since.replace("\"stability_score\":1.0", "\"stability_score\":0.25");
        let forged = forged.replace(
            "\"reflection_variance\":0.5",
            "\"reflection_variance\":0.75",
        );
        assert!(matches!(
            c.check(&ev(5, "stability_metrics", &forged)),
            AdaptiveVerdict::Differs("stability_metrics", _)
        ));
    }
}
