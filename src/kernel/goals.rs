//! Internal goals (FORMATS.md §8.6; docs/autonomy.md, "Internal goals"): commitments the
//! kernel opens for itself, with `mc_` cids, when the self-model shows something to act on,
//! and executes and closes with their outcome in the same tick.
//!
//! - `analyze_knowledge_gaps`: the self-model has knowledge gaps that no earlier analysis
//!   covered (the newest analysis's close records the gaps it saw) → open, a reflection
//!   `{"intent":"gap_analysis","outcome":"Unresolved: a, b"}`, close with outcome `analyzed`.
//! - `monitor_rsm_evolution`: at least [`DRIFT_WINDOW`] events since the newest summary (the
//!   anchor), the self-model drifted (a tendency moved by more than [`DRIFT_DELTA`], or the
//!   gaps changed), and no drift was recorded since that anchor → open, a reflection
//!   `{"action":"monitor_rsm_evolution","from_event","gaps_added","gaps_resolved","next":
//!   "monitor","tendencies_delta","to_event"}`, close with outcome `drift_recorded`.
//!
//! Opened and closed inside one tick, a goal is never left open (so it is never auto-closed,
//! never stalls a review, and there is never more than one per goal), and a tick that finds
//! nothing new writes nothing: goals are as deterministic and replayable as the tick itself.

use crate::canon;
use crate::event::Kind;
use crate::projection::mirror::Commitment;
use crate::projection::rsm;
use crate::store::Reads;
use crate::turn::{meta, Sink};
use serde_json::{json, Value};

/// The knowledge-gap goal.
pub const GAPS: &str = "analyze_knowledge_gaps";
/// The self-model drift goal.
pub const DRIFT: &str = "monitor_rsm_evolution";
/// Events after the anchor before drift is measured (the reference's 50).
pub const DRIFT_WINDOW: i64 = 50;
/// A tendency that moved by more than this is drift (the reference's 5).
pub const DRIFT_DELTA: i64 = 5;

/// The newest closed internal goal named `goal`.
fn last_closed<'a>(s: &'a Sink<'_, '_>, goal: &str) -> Option<&'a Commitment> {
    s.p.mirror
        .closed
        .values()
        .filter(|c| c.origin == "autonomy_kernel" && c.text == goal)
        .max_by_key(|c| c.closed_at)
}

/// Opens goal `goal` (`mc_` + the next id, six digits), appends its `work` reflection and
/// closes it with `outcome`; `close_extra` goes into the close's meta.
fn run_goal(
    s: &mut Sink<'_, '_>,
    goal: &str,
    reason: &str,
    work: &Value,
    outcome: &str,
    close_extra: &[(&str, Value)],
) -> crate::Result<()> {
    let cid = format!("mc_{:06}", s.head_id() + 1);
    let m = meta(&[
        ("cid", cid.clone().into()),
        ("goal", goal.into()),
        ("origin", "autonomy_kernel".into()),
        ("reason", reason.into()),
        ("source", "autonomy_kernel".into()),
    ]);
    s.put(
        Kind::CommitmentOpen,
        format!("Internal commitment opened: {goal}"),
        m,
    )?;
    // Not `autonomy_kernel`: that source marks the kernel's own reflections, which its rules
    // and `autonomy_metrics` count; a goal's work is not one of them.
    let m = meta(&[("goal", goal.into()), ("source", "internal_goal".into())]);
    s.put(
        Kind::Reflection,
        canon::to_string(work).unwrap_or_default(),
        m,
    )?;
    let mut m = meta(&[
        ("cid", cid.clone().into()),
        ("goal", goal.into()),
        ("origin", "autonomy_kernel".into()),
        ("outcome", outcome.into()),
        ("source", "autonomy_kernel".into()),
    ]);
    m.extend(close_extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    s.put(
        Kind::CommitmentClose,
        format!("Internal commitment closed: {cid}"),
        m,
    )?;
    Ok(())
}

/// `analyze_knowledge_gaps`, when the self-model's gaps are not the ones last analysed.
fn knowledge_gaps(s: &mut Sink<'_, '_>) -> crate::Result<()> {
    let gaps = s.p.rsm.knowledge_gaps();
    if gaps.is_empty() {
        return Ok(());
    }
    if let Some(close) = last_closed(s, GAPS).and_then(|c| c.closed_at) {
        let seen = s
            .batch
            .get(close)?
            .and_then(|e| e.meta_map().ok()?.get("gaps").cloned());
        if seen == Some(json!(gaps)) {
            return Ok(());
        }
    }
    let work =
        json!({"intent": "gap_analysis", "outcome": format!("Unresolved: {}", gaps.join(", "))});
    run_goal(
        s,
        GAPS,
        "knowledge_gaps",
        &work,
        "analyzed",
        &[("gaps", json!(gaps))],
    )
}

/// `monitor_rsm_evolution`, when the self-model drifted since the newest summary.
fn rsm_drift(s: &mut Sink<'_, '_>) -> crate::Result<()> {
    let Some(anchor) = s.p.autonomy.last_summary else {
        return Ok(());
    };
    let now = s.head_id();
    let recorded = last_closed(s, DRIFT).and_then(|c| c.closed_at);
    if now - anchor < DRIFT_WINDOW || recorded.is_some_and(|id| id > anchor) {
        return Ok(());
    }
    // The self-model at the summary is kept by the fold: folding the ledger up to the
    // summary again read the whole ledger on every tick while the self-model had not moved.
    let Some(then) = &s.p.at_summary else {
        return Ok(());
    };
    let d = rsm::diff_marks(then, &s.p.rsm.mark());
    let moved = d.tendencies_delta.values().any(|v| v.abs() > DRIFT_DELTA);
    if !moved && d.gaps_added.is_empty() && d.gaps_resolved.is_empty() {
        return Ok(());
    }
    let work = json!({
        "action": DRIFT,
        "from_event": anchor,
        "gaps_added": d.gaps_added,
        "gaps_resolved": d.gaps_resolved,
        "next": "monitor",
        "tendencies_delta": d.tendencies_delta,
        "to_event": now,
    });
    run_goal(s, DRIFT, "rsm_drift", &work, "drift_recorded", &[])
}

/// The internal goals a tick runs, after its action.
pub(crate) fn append_goals(s: &mut Sink<'_, '_>) -> crate::Result<()> {
    knowledge_gaps(s)?;
    rsm_drift(s)
}
