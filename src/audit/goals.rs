//! Deep verification of the goals that stay open (`kernel::goals`, "Goals that stay open"):
//! every `commitment_open` with a `meta.cause` is checked against [`goals::to_open`], the
//! function the tick opens it with, taken on the events before it (the mirror the adaptive
//! check folds, and the newest `metrics_turn`): the goal was due, with that goal, cause and
//! cid. So a cause opened twice, or a goal opened while another is open, is a finding.
//!
//! What is not checked: that a tick given a model opened every goal it could (a tick without
//! one opens none, and the ledger does not say which ticks had one).

use crate::event::{Event, Kind, Seen};
use crate::kernel::goals;
use crate::projection::mirror::Mirror;
use serde_json::{json, Value};

/// The streaming check (see the module docs).
#[derive(Debug, Default)]
pub struct GoalCheck {
    /// The newest `metrics_turn`.
    last_turn: Option<i64>,
    /// The first erased event the mirror reads the text of (its meta: cids, causes,
    /// thresholds): goals after it may differ for want of it.
    erased: Option<i64>,
}

/// What recomputing one goal that stays open found.
#[derive(Debug, PartialEq)]
pub enum GoalVerdict {
    /// Not a goal that stays open.
    NotChecked,
    /// Recomputed and equal.
    Same,
    /// Recomputed and different: expected (null: no goal was due) and found.
    Differs(Value, Value),
    /// Different, after an erased event whose text the mirror reads (that event).
    Erased(i64),
}

impl GoalCheck {
    /// Checks `ev` against `before`, the mirror of the events before it, then folds it in.
    pub fn check(&mut self, ev: &Event, before: &Mirror) -> GoalVerdict {
        self.check_seen(&Seen::new(ev), before)
    }

    /// [`GoalCheck::check`], the meta parsed at most once for every fold ([`Seen`]).
    pub fn check_seen(&mut self, s: &Seen<'_>, before: &Mirror) -> GoalVerdict {
        let v = self.verdict(s, before);
        self.fold(s.ev);
        v
    }

    /// Folds in an erased event: it counts by its id and kind; its text is gone.
    pub fn fold_erased(&mut self, ev: &Event) {
        if matches!(
            ev.kind,
            Kind::CommitmentOpen | Kind::CommitmentClose | Kind::Config
        ) {
            self.erased.get_or_insert(ev.id);
        }
        self.fold(ev);
    }

    fn fold(&mut self, ev: &Event) {
        if ev.kind == Kind::MetricsTurn {
            self.last_turn = Some(ev.id);
        }
    }

    fn verdict(&self, s: &Seen<'_>, before: &Mirror) -> GoalVerdict {
        let ev = s.ev;
        if ev.kind != Kind::CommitmentOpen {
            return GoalVerdict::NotChecked;
        }
        let m = s.meta_or_empty();
        let Some(cause) = m.get("cause") else {
            return GoalVerdict::NotChecked;
        };
        let found = json!({
            "cause": cause,
            "cid": m.get("cid"),
            "goal": m.get("goal"),
        });
        let expected = goals::to_open(before, self.last_turn).map_or(Value::Null, |g| {
            json!({
                "cause": g.cause,
                "cid": format!("mc_{:06}", ev.id),
                "goal": g.goal,
            })
        });
        match self.erased {
            _ if expected == found => GoalVerdict::Same,
            Some(erased) => GoalVerdict::Erased(erased),
            None => GoalVerdict::Differs(expected, found),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, kind: Kind, meta: Value) -> Event {
        Event {
            id,
            ts: "2025-11-24T05:55:41Z".into(),
            kind,
            content: String::new(),
            meta: meta.to_string(),
            prev_hash: None,
            hash: None,
        }
    }

    fn goal(id: i64, cause: &str) -> Event {
        let m = json!({"cause": cause, "cid": format!("mc_{id:06}"), "goal": goals::EXPLORE,
            "origin": "autonomy_kernel", "source": "autonomy_kernel"});
        event(id, Kind::CommitmentOpen, m)
    }

    /// Checks each event against the mirror before it, folding as the deep checker does.
    fn verdicts(events: &[Event]) -> Vec<GoalVerdict> {
        let (mut check, mut mirror) = (GoalCheck::default(), Mirror::default());
        let mut out = Vec::new();
        for e in events {
            out.push(check.check(e, &mirror));
            mirror.apply(e);
        }
        out
    }

    #[test]
    fn a_goal_is_due_once_per_cause_and_one_at_a_time() {
        let mut events = vec![event(1, Kind::MetricsTurn, json!({}))];
        events.extend((2..=21).map(|id| event(id, Kind::UserMessage, json!({}))));
        // Due: idle 20 events since the turn, nothing open.
        events.push(goal(22, "idle_since:1"));
        // Not due: one is open (and its cause is used).
        events.push(goal(23, "idle_since:1"));
        let v = verdicts(&events);
        assert_eq!(v[21], GoalVerdict::Same);
        assert!(
            matches!(&v[22], GoalVerdict::Differs(Value::Null, _)),
            "{:?}",
            v[22]
        );
        // Too early: 19 events after the turn.
        let early: Vec<Event> = events[..20]
            .iter()
            .cloned()
            .chain([goal(21, "idle_since:1")])
            .collect();
        assert!(matches!(
            verdicts(&early)[20],
            GoalVerdict::Differs(Value::Null, _)
        ));
    }
}
