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
//!
//! **Goals that stay open** (docs/autonomy.md, "Goals that stay open"): a tick given a model
//! may also open a goal with a `meta.cause` ([`to_open`], a pure function of the mirror and
//! the newest `metrics_turn`), which stays open until a thinking tick works it
//! ([`to_work`]) and closes it with its outcome (`close_worked`):
//!
//! - [`EXPLORE`] (`explore_new_idea`), cause `idle_since:<metrics_turn>`: a conversation
//!   happened, nothing is open, and `commitment_staleness` events have passed since its newest
//!   `metrics_turn`;
//! - [`REVIEW`] (`review_stalled_commitment`), cause `stalled:<cid>`: a commitment (not the
//!   kernel's) has been open `commitment_staleness` events, the stalest first.
//!
//! At most one is open at a time, and a cause is never opened twice.

use crate::canon;
use crate::event::{Kind, Source};
use crate::projection::mirror::{
    internal_close_content, internal_open_content, Commitment, Mirror,
};
use crate::projection::rsm;
use crate::session::{meta, Session};
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
fn last_closed<'a>(s: &'a Session<'_, '_>, goal: &str) -> Option<&'a Commitment> {
    s.p.mirror
        .closed
        .values()
        .filter(|c| c.origin == Source::AutonomyKernel && c.text == goal)
        .max_by_key(|c| c.closed_at)
}

/// Opens goal `goal` (`mc_` + the next id, six digits), appends its `work` reflection and
/// closes it with `outcome`; `close_extra` goes into the close's meta.
fn run_goal(
    s: &mut Session<'_, '_>,
    goal: &str,
    reason: &str,
    work: &Value,
    outcome: &str,
    close_extra: &[(&str, Value)],
) -> crate::Result<()> {
    let cid = format!("mc_{:06}", s.head_id()? + 1);
    let m = meta(&[
        ("cid", cid.clone().into()),
        ("goal", goal.into()),
        ("origin", Source::AutonomyKernel.into()),
        ("reason", reason.into()),
        ("source", Source::AutonomyKernel.into()),
    ]);
    s.put(Kind::CommitmentOpen, internal_open_content(goal), m)?;
    // Not `autonomy_kernel`: that source marks the kernel's own reflections, which its rules
    // and `autonomy_metrics` count; a goal's work is not one of them.
    let m = meta(&[
        ("goal", goal.into()),
        ("source", Source::InternalGoal.into()),
    ]);
    s.put(Kind::Reflection, canon::built(work), m)?;
    let mut m = meta(&[
        ("cid", cid.clone().into()),
        ("goal", goal.into()),
        ("origin", Source::AutonomyKernel.into()),
        ("outcome", outcome.into()),
        ("source", Source::AutonomyKernel.into()),
    ]);
    m.extend(close_extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    s.put(Kind::CommitmentClose, internal_close_content(&cid), m)?;
    Ok(())
}

/// `analyze_knowledge_gaps`, when the self-model's gaps are not the ones last analysed.
fn knowledge_gaps(s: &mut Session<'_, '_>) -> crate::Result<()> {
    let gaps = s.p.rsm.knowledge_gaps();
    if gaps.is_empty() {
        return Ok(());
    }
    if let Some(close) = last_closed(s, GAPS).and_then(|c| c.closed_at) {
        let seen =
            s.tx.get(close)?
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
fn rsm_drift(s: &mut Session<'_, '_>) -> crate::Result<()> {
    let Some(anchor) = s.p.autonomy.last_summary else {
        return Ok(());
    };
    let now = s.head_id()?;
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

/// The goal that stays open when the agent is idle with nothing open.
pub const EXPLORE: &str = "explore_new_idea";
/// The goal that stays open when a commitment stalls.
pub const REVIEW: &str = "review_stalled_commitment";
/// The most characters of a thinking reply a worked goal's `outcome` keeps.
pub const OUTCOME_CHARS: usize = 200;

/// A goal the kernel opens and leaves open for a thinking tick to work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewGoal {
    /// [`EXPLORE`] or [`REVIEW`].
    pub goal: &'static str,
    /// `idle_since:<metrics_turn>` or `stalled:<cid>`: never opened twice.
    pub cause: String,
    /// Why, in words.
    pub reason: String,
}

/// The goal to open on a ledger whose mirror is `m` and whose newest `metrics_turn` is
/// `last_turn`, if any (see the module docs): none while one is open; a stalled commitment
/// first, stalest first (ties by cid); else an idle agent with nothing open. A pure function
/// of the ledger, which `pmm-verify --deep` recomputes before every goal opened.
pub fn to_open(m: &Mirror, last_turn: Option<i64>) -> Option<NewGoal> {
    let after = m.thresholds.commitment_staleness;
    if after <= 0 || !m.open_goals().is_empty() {
        return None;
    }
    let head = m.last_event_id;
    let mut stalled: Vec<&Commitment> = m
        .open
        .values()
        .filter(|c| c.origin != Source::AutonomyKernel && head - c.opened_at >= after)
        .collect();
    stalled.sort_by(|a, b| a.opened_at.cmp(&b.opened_at).then(a.cid.cmp(&b.cid)));
    let review = stalled.into_iter().find_map(|c| {
        let cause = format!("stalled:{}", c.cid);
        (!m.goal_cause_used(&cause)).then(|| NewGoal {
            goal: REVIEW,
            reason: format!(
                "commitment {} ({}) open for {} events",
                c.cid,
                c.text,
                head - c.opened_at
            ),
            cause,
        })
    });
    if review.is_some() {
        return review;
    }
    let turn = last_turn.filter(|t| m.open.is_empty() && head - t >= after)?;
    let cause = format!("idle_since:{turn}");
    (!m.goal_cause_used(&cause)).then(|| NewGoal {
        goal: EXPLORE,
        reason: format!("idle for {} events with nothing open", head - turn),
        cause,
    })
}

/// The goal a thinking tick works: the oldest open one.
pub fn to_work(m: &Mirror) -> Option<&Commitment> {
    m.open_goals().into_iter().next()
}

/// The `commitment_open` of `g`, with cid `mc_` + its id (six digits).
fn open_goal(s: &mut Session<'_, '_>, g: &NewGoal) -> crate::Result<()> {
    let cid = format!("mc_{:06}", s.head_id()? + 1);
    let m = meta(&[
        ("cause", g.cause.clone().into()),
        ("cid", cid.into()),
        ("goal", g.goal.into()),
        ("origin", Source::AutonomyKernel.into()),
        ("reason", g.reason.clone().into()),
        ("source", Source::AutonomyKernel.into()),
    ]);
    s.put(Kind::CommitmentOpen, internal_open_content(g.goal), m)?;
    Ok(())
}

/// Closes the goal `cid` a thinking tick worked, when its reply (event `reply`, text `text`)
/// did not close it itself: `outcome` is the reply's first line, cut at [`OUTCOME_CHARS`].
pub(crate) fn close_worked(
    s: &mut Session<'_, '_>,
    cid: &str,
    reply: i64,
    text: &str,
) -> crate::Result<()> {
    let Some(goal) = s.p.mirror.open.get(cid).map(|c| c.text.clone()) else {
        return Ok(());
    };
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    let outcome: String = line
        .unwrap_or("(no reply)")
        .chars()
        .take(OUTCOME_CHARS)
        .collect();
    let m = meta(&[
        ("cid", cid.into()),
        ("goal", goal.into()),
        ("origin", Source::AutonomyKernel.into()),
        ("outcome", outcome.into()),
        ("reply", reply.into()),
        ("source", Source::AutonomyKernel.into()),
    ]);
    s.put(Kind::CommitmentClose, internal_close_content(cid), m)?;
    Ok(())
}

/// The internal goals a tick runs, after its action; with `open_goals` (a tick given a model),
/// then a goal that stays open when one is due.
pub(crate) fn append_goals(s: &mut Session<'_, '_>, open_goals: bool) -> crate::Result<()> {
    knowledge_gaps(s)?;
    rsm_drift(s)?;
    if !open_goals {
        return Ok(());
    }
    match to_open(&s.p.mirror, s.p.autonomy.last_metrics_turn) {
        Some(g) => open_goal(s, &g),
        None => Ok(()),
    }
}
