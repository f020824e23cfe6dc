//! Deep verification of the goals that stay open (`kernel::goals`, "Goals that stay open"):
//! every `commitment_open` with a `meta.cause` is checked against [`goals::to_open`], the
//! function the tick opens it with, taken on the events before it (the mirror the adaptive
//! check folds, and the newest `metrics_turn`): the goal was due, with that goal, cause and
//! cid. So a cause opened twice, or a goal opened while another is open, is a finding.
//!
//! What is not checked: that a tick given a model opened every goal it could (a tick without
//! one opens none, and the ledger does not say which ticks had one).

use crate::event::{Event, Kind};
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

/// What checking one event found.
#[derive(Debug, PartialEq)]
pub enum Verdict {
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
    pub fn check(&mut self, ev: &Event, before: &Mirror) -> Verdict {
        let v = self.verdict(ev, before);
        self.fold(ev);
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

    fn verdict(&self, ev: &Event, before: &Mirror) -> Verdict {
        if ev.kind != Kind::CommitmentOpen {
            return Verdict::NotChecked;
        }
        let m = ev.meta_map().unwrap_or_default();
        let Some(cause) = m.get("cause") else {
            return Verdict::NotChecked;
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
            _ if expected == found => Verdict::Same,
            Some(erased) => Verdict::Erased(erased),
            None => Verdict::Differs(expected, found),
        }
    }
}
