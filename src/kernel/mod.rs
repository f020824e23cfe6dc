//! Autonomy: slots, the decision kernel and the tick (SPEC §4 pmm-tick, FORMATS.md §8).
//!
//! [`decide`] is a pure function of what the ledger says ([`View`], built from the
//! projections), the thresholds in force and the slot. It applies the rules of SPEC §4 in
//! order:
//!
//! 1. no `metrics_turn` yet → `idle`;
//! 2. no kernel reflection since the newest `metrics_turn` → `reflect`;
//! 3. events since the newest kernel reflection ≥ `reflection_interval` → `reflect`;
//! 4. events since the newest summary ≥ `summary_interval`, with a kernel reflection since
//!    it → `summarize`;
//!
//!    4b. messages with no concept bound ≥ `index_threshold` → `index`, the oldest
//!    [`index::BATCH`] of them as evidence ([`index`]);
//! 5. an open commitment stalled (no newer than `commitment_staleness` events) → `reflect`
//!    (a commitment review);
//! 6. otherwise `idle`.
//!
//! Two corrections of the reference (§17 items 16 and 21): a `reflect` that would repeat the
//! previous kernel reflection — nothing changed since it, and the same commitments are
//! stalled — is an `idle` that says so, not an empty reflect; and auto-close happens only when
//! more than one commitment is open, stalest first, always leaving the newest open.
//!
//! [`tick`] writes a decision, with everything it implies, in one transaction.

/// Slots and slot ids: a derivation format, defined below every layer that reads it.
pub use crate::formats::slot;
pub mod adapt;
pub mod goals;
pub mod index;
pub mod retention;
pub mod think;
pub mod tick;

use crate::event::config::Threshold;
use crate::projection::autonomy::KernelReflection;
use crate::projection::mirror::Thresholds;
use crate::projection::state::Projections;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// The slot a tick is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slot {
    /// Whole intervals since the epoch.
    pub slot: i64,
    /// sha256 of epoch + interval + slot ([`slot::slot_id`]).
    pub slot_id: String,
    /// The interval in seconds.
    pub interval: i64,
}

impl Slot {
    /// The slot `n` with `interval`-second slots from the reference's epoch.
    pub fn new(n: i64, interval: i64) -> Slot {
        Slot {
            slot: n,
            slot_id: slot::slot_id(slot::EPOCH, interval, n),
            interval,
        }
    }

    /// The slot an instant falls in.
    pub fn at(t: chrono::DateTime<chrono::Utc>, interval: i64) -> Slot {
        Slot::new(slot::slot_of(t, slot::epoch(), interval), interval)
    }
}

/// What a tick does: a closed vocabulary of the ledger, declared where the folds and the
/// verifier read it.
pub use crate::event::Action;

/// An open commitment, as the kernel sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenCommitment {
    /// Its cid.
    pub cid: String,
    /// The `commitment_open` event.
    pub opened_at: i64,
    /// `meta.origin` (`autonomy_kernel` for the kernel's own goals).
    pub origin: String,
    /// Bound to an executor (`config` exec_bind): never auto-closed.
    pub exec_bound: bool,
    /// A kernel goal that stays open until a thinking tick works it ([`goals::to_open`]):
    /// never auto-closed, and not counted by auto-close.
    pub stays_open: bool,
}

/// What the kernel decides from: facts of the ledger up to `head`, taken from the
/// projections (no event is read to decide).
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The newest event id (0 for an empty ledger).
    pub head: i64,
    /// The newest `metrics_turn`.
    pub last_metrics_turn: Option<i64>,
    /// The newest kernel reflection.
    pub last_kernel_reflection: Option<KernelReflection>,
    /// The newest `summary_update`.
    pub last_summary: Option<i64>,
    /// Changes since the newest kernel reflection, per kind, in order of first appearance.
    pub changes: Vec<(String, u64)>,
    /// Open commitments, in the order they were opened.
    pub open: Vec<OpenCommitment>,
    /// Messages no concept is bound to and no `index` tick has taken, oldest first.
    pub unindexed: Vec<i64>,
}

impl View {
    /// The view of a ledger whose projections are `p`.
    pub fn of(p: &Projections) -> View {
        let a = &p.autonomy;
        View {
            head: p.mirror.last_event_id,
            last_metrics_turn: a.last_metrics_turn,
            last_kernel_reflection: a.last_kernel_reflection.clone(),
            last_summary: a.last_summary,
            changes: a.changes.clone(),
            open: p
                .mirror
                .open_in_order()
                .into_iter()
                .map(|c| OpenCommitment {
                    cid: c.cid.clone(),
                    opened_at: c.opened_at,
                    origin: c.origin.clone(),
                    exec_bound: a.exec_bound.contains(&c.cid),
                    stays_open: c.cause.is_some(),
                })
                .collect(),
            unindexed: a.unindexed.iter().copied().collect(),
        }
    }
}

/// A commitment the tick closes, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AutoClose {
    /// Its cid.
    pub cid: String,
    /// Its `commitment_open` event.
    pub opened_at: i64,
    /// Events after it.
    pub age: i64,
    /// Its origin (kept on the close).
    pub origin: String,
}

/// The kernel's decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// What the tick does.
    pub decision: Action,
    /// Which rule, in words.
    pub reasoning: String,
    /// The events the rule looked at.
    pub evidence: Vec<i64>,
    /// Commitments to auto-close, stalest first.
    pub auto_close: Vec<AutoClose>,
    /// For `reflect`: the reflection's content (its `delta_hash` goes in the meta).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reflection: Option<Value>,
}

impl Decision {
    /// The `autonomy_tick` content object: `{"decision","evidence","reasoning"}`.
    pub fn tick_content(&self) -> Value {
        json!({
            "decision": self.decision.as_str(),
            "evidence": self.evidence,
            "reasoning": self.reasoning,
        })
    }
}

/// The auto-closes a view calls for (goals that stay open aside): only when more than one
/// commitment is open, those
/// (not exec-bound) with more than `commitment_auto_close` events after their opening,
/// stalest first, never the newest open commitment.
fn auto_closes(view: &View, th: &Thresholds) -> Vec<AutoClose> {
    let open: Vec<&OpenCommitment> = view.open.iter().filter(|c| !c.stays_open).collect();
    if open.len() <= 1 || th.commitment_auto_close <= 0 {
        return Vec::new();
    }
    let newest = open.iter().map(|c| c.opened_at).max();
    let mut out: Vec<AutoClose> = open
        .into_iter()
        .filter(|c| Some(c.opened_at) != newest && !c.exec_bound)
        .map(|c| AutoClose {
            cid: c.cid.clone(),
            opened_at: c.opened_at,
            age: view.head.saturating_sub(c.opened_at),
            origin: c.origin.clone(),
        })
        .filter(|c| c.age > th.commitment_auto_close)
        .collect();
    out.sort_by(|a, b| a.opened_at.cmp(&b.opened_at).then(a.cid.cmp(&b.cid)));
    out
}

/// Decides what a tick does on a ledger seen through `view` (see the module docs for the
/// rules), with the thresholds `th` in force.
pub fn decide(view: &View, th: &Thresholds) -> Decision {
    let auto_close = auto_closes(view, th);
    let open: Vec<&OpenCommitment> = view
        .open
        .iter()
        .filter(|c| !auto_close.iter().any(|a| a.cid == c.cid))
        .collect();
    let stalled = stalled(view, th, &open);
    let mut stalled_cids: Vec<String> = stalled.iter().map(|(c, _)| c.cid.clone()).collect();
    stalled_cids.sort();
    let last_ref = view.last_kernel_reflection.as_ref();
    let idle = |reasoning: String, evidence: Vec<i64>| Decision {
        decision: Action::Idle,
        reasoning,
        evidence,
        auto_close: auto_close.clone(),
        reflection: None,
    };
    // Rule 1.
    let Some(turn) = view.last_metrics_turn else {
        return idle("no metrics_turn recorded yet".into(), Vec::new());
    };
    // A reflection now would repeat the previous one: nothing changed since it, nothing is
    // being closed, and the same commitments are stalled. Reflect rules then do not apply.
    let repeat = last_ref.is_some_and(|prev| {
        view.changes.is_empty() && auto_close.is_empty() && prev.stalled == stalled_cids
    });
    // Rules 2 to 5; rule 6 (idle) when none applies.
    let Choice {
        chosen,
        skipped,
        review,
    } = choose(view, th, turn, &stalled, repeat);
    let Some((action, reasoning, evidence)) = chosen else {
        return match (skipped, last_ref) {
            (Some(why), Some(prev)) => idle(
                format!(
                    "{why}, but nothing changed since kernel reflection {}",
                    prev.id
                ),
                vec![prev.id],
            ),
            _ => idle("no autonomous action needed".into(), Vec::new()),
        };
    };
    let reflection = (action == Action::Reflect).then(|| {
        let stalled_now = !stalled.is_empty();
        kernel_reflection(view, &open, stalled_cids, stalled_now, &auto_close, review)
    });
    Decision {
        decision: action,
        reasoning,
        evidence,
        auto_close,
        reflection,
    }
}

/// The open commitments (not being auto-closed, not the kernel's own) at least
/// `commitment_staleness` events old, with their ages, oldest first.
fn stalled<'v>(
    view: &View,
    th: &Thresholds,
    open: &[&'v OpenCommitment],
) -> Vec<(&'v OpenCommitment, i64)> {
    let mut stalled: Vec<(&OpenCommitment, i64)> = open
        .iter()
        .filter(|c| c.origin != crate::event::Source::AutonomyKernel)
        .map(|c| (*c, view.head.saturating_sub(c.opened_at)))
        .filter(|(_, age)| th.commitment_staleness > 0 && *age >= th.commitment_staleness)
        .collect();
    stalled.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cid.cmp(&b.0.cid)));
    stalled
}

/// What rules 2 to 5 chose: the action with its reasoning and evidence, or none; the reason
/// of a reflect rule that applied but was skipped as a repeat; whether it is a review.
struct Choice {
    chosen: Option<(Action, String, Vec<i64>)>,
    skipped: Option<String>,
    review: bool,
}

/// Rules 2 to 5, in order; the first that applies wins.
fn choose(
    view: &View,
    th: &Thresholds,
    turn: i64,
    stalled: &[(&OpenCommitment, i64)],
    repeat: bool,
) -> Choice {
    let ref_id = view.last_kernel_reflection.as_ref().map(|r| r.id);
    let mut c = Choice {
        chosen: None,
        skipped: None,
        review: false,
    };
    // Rule 2.
    if ref_id.is_none_or(|r| r < turn) {
        let why = match ref_id {
            None => "no autonomous reflection recorded yet".to_string(),
            Some(_) => format!("no autonomous reflection since the latest metrics_turn ({turn})"),
        };
        c.chosen = Some((Action::Reflect, why, vec![turn]));
        return c;
    }
    // Rule 3.
    if let Some(n) = ref_id
        .map(|r| view.head.saturating_sub(r))
        .filter(|n| *n >= th.reflection_interval)
    {
        let why = format!("{} reached ({n})", Threshold::ReflectionInterval);
        if !repeat {
            c.chosen = Some((Action::Reflect, why, vec![view.head]));
            return c;
        }
        c.skipped.get_or_insert(why);
    }
    // Rule 4.
    let since_summary = view.head.saturating_sub(view.last_summary.unwrap_or(0));
    if since_summary >= th.summary_interval
        && ref_id.is_some_and(|r| r > view.last_summary.unwrap_or(0))
    {
        let why = format!("{} reached ({since_summary})", Threshold::SummaryInterval);
        c.chosen = Some((Action::Summarize, why, vec![view.head]));
        return c;
    }
    // Rule 4b: enough messages with no concept bound → the indexer, a bounded batch.
    let n = view.unindexed.len() as i64;
    if th.index_threshold > 0 && n >= th.index_threshold {
        let why = format!("{n} unindexed messages (\u{2265} {})", th.index_threshold);
        let batch = view.unindexed.iter().take(index::BATCH).copied().collect();
        c.chosen = Some((Action::Index, why, batch));
        return c;
    }
    // Rule 5.
    if let Some((primary, _)) = stalled.first() {
        let why = format!(
            "{} stalled commitments (age \u{2265} {} events); prioritizing {}",
            stalled.len(),
            th.commitment_staleness,
            primary.cid
        );
        if repeat {
            c.skipped.get_or_insert(why);
        } else {
            c.review = true;
            c.chosen = Some((Action::Reflect, why, vec![primary.opened_at]));
        }
    }
    c
}

/// The kernel reflection: the reference's shape (FORMATS.md §8.5), counting what is true now.
fn kernel_reflection(
    view: &View,
    open: &[&OpenCommitment],
    stalled_cids: Vec<String>,
    stalled_now: bool,
    auto_close: &[AutoClose],
    review: bool,
) -> Value {
    let stale = i64::from(stalled_now);
    let intent = if review {
        "commitment_review".to_string()
    } else {
        let dominant = view
            .changes
            .iter()
            .fold(None::<&(String, u64)>, |best, c| match best {
                Some(b) if b.1 >= c.1 => Some(b),
                _ => Some(c),
            })
            .map_or("ledger", |(k, _)| k.as_str());
        format!("{dominant}_analysis")
    };
    let ref_id = view.last_kernel_reflection.as_ref().map(|r| r.id);
    let mut m = Map::new();
    m.insert("action".into(), "maintain".into());
    if !auto_close.is_empty() {
        m.insert(
            "auto_closed".into(),
            auto_close
                .iter()
                .map(|a| Value::from(a.cid.clone()))
                .collect(),
        );
    }
    m.insert(
        "changes".into(),
        Value::Object(
            view.changes
                .iter()
                .map(|(k, n)| (k.clone(), Value::from(*n)))
                .collect(),
        ),
    );
    m.insert("commitments_reviewed".into(), open.len().into());
    m.insert("intent".into(), intent.into());
    m.insert("next".into(), "monitor".into());
    m.insert(
        "outcome".into(),
        format!("{} open, stale={stale}", open.len()).into(),
    );
    m.insert("relevance".into(), "all_active".into());
    m.insert(
        "since_event".into(),
        ref_id.map_or(Value::Null, Value::from),
    );
    m.insert("stale".into(), stale.into());
    m.insert("stalled".into(), stalled_cids.into());
    Value::Object(m)
}

#[cfg(test)]
mod tests;
