//! The adaptive part of a tick (FORMATS.md §8.2 steps 6–7): after the action, the
//! `outcome_observation` of what it did, then — each only when its content changed —
//! `stability_metrics` and `coherence_check`, then learning: a `policy_update` when a batch of
//! outcomes was completed by this tick and calls for a change, a `meta_policy_update` when a
//! batch of `policy_update`s was, and the rule table when the thresholds moved.
//!
//! Stability, coherence and learning are computed by the projection
//! ([`crate::projection::adapt`]) from the ledger alone, so `pmm-verify --deep` recomputes
//! each of those events from the events before it.

use super::{Action, Decision};
use crate::canon;
use crate::event::{Event, Kind};
use crate::projection::state::Projections;
use serde_json::{json, Value};

/// The most evidence ids an `outcome_observation` lists (the reference's 10).
pub const EVIDENCE_MAX: usize = 10;

/// The `outcome_observation` content of a tick: `success` only when the action wrote what it
/// is for (a kernel reflection, a summary, index events; for an idle tick, an auto-close),
/// `no_delta` otherwise. `written` are the events after the `autonomy_tick`; `tick` its id.
pub fn outcome_content(decision: &Decision, tick: i64, written: &[Event]) -> String {
    let wanted = |e: &Event| match decision.decision {
        Action::Reflect => e.kind == Kind::Reflection,
        Action::Summarize => e.kind == Kind::SummaryUpdate,
        Action::Index => matches!(e.kind, Kind::ConceptBindAsync | Kind::ClaimFromText),
        Action::Idle => e.kind == Kind::CommitmentClose,
    };
    let success = written.iter().any(wanted);
    let mut evidence: Vec<i64> = written.iter().map(|e| e.id).collect();
    if evidence.is_empty() {
        evidence.push(tick);
    }
    let skip = evidence.len().saturating_sub(EVIDENCE_MAX);
    let d = decision.decision.as_str();
    let v = json!({
        "action_kind": Action::outcome_kind(d),
        "action_payload": format!("decision={d}"),
        "commitment_id": "",
        "evidence_event_ids": &evidence[skip..],
        "observed_result": if success { "success" } else { "no_delta" },
    });
    canon::built(&v)
}

/// What the adaptive loop shows of a ledger (`pmm-replay --state`, `pmm-metrics`).
pub fn summary(p: &Projections) -> Value {
    p.adapt.summary()
}
