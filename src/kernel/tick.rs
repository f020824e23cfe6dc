//! The tick (SPEC §4 pmm-tick): one decision for one slot and every event it implies, decided
//! and written inside one write transaction, so that the decision always sees the true head
//! and a tick is in the ledger whole or not at all.
//!
//! In order: on a ledger's first use, the default policy and retrieval `config`s (SPEC §2.5);
//! `autonomy_stimulus`; `autonomy_rule_table` when the thresholds in force differ
//! from the newest rule table; `autonomy_tick {decision, evidence, reasoning}`; auto-close
//! `commitment_close`s; the action — a kernel `reflection` or a `summary_update`; the adaptive
//! loop ([`super::adapt`]: `outcome_observation`, and when due `stability_metrics`,
//! `coherence_check`, `policy_update`, `meta_policy_update` and the rule table);
//! CTL maintenance bindings (`concept_bind_event`, `index::maintain`); internal goals,
//! each opened, worked and closed ([`super::goals`]); on every 10th
//! tick `autonomy_metrics`; a `checkpoint_manifest` when one is due (FORMATS.md §8.9); last,
//! the retention pass when a retention policy is in force ([`super::retention`]).

use super::{decide, Action, Decision, Slot, View};
use crate::canon;
use crate::event::config::Threshold;
use crate::event::{Clock, Event, Kind, Source};
use crate::projection::checkpoint;
use crate::projection::mirror::{close_content, Thresholds};
use crate::projection::state::Projections;
use crate::session::{
    append_summary, catch_up, ensure_defaults, meta, new_event, put, record_refusal, Session,
};
use crate::store::log::{SessionTxn, SessionWriter};
use crate::store::{self, EventLog, Indexes};
use serde_json::{json, Map, Value};

/// Environment variable (a testing aid): milliseconds to wait inside the tick's transaction,
/// after its events are written and before they are committed, so that a test can kill the
/// process in the middle of a tick.
pub const PAUSE_ENV: &str = "PMM_TEST_TICK_PAUSE_MS";

/// `autonomy_metrics` is written on every this many ticks.
pub const METRICS_EVERY: u64 = 10;

/// Events after the newest manifest before a new one is due (FORMATS.md §8.9).
pub const MANIFEST_EVERY: i64 = 50;

/// What a tick did.
#[derive(Debug, Clone)]
pub struct TickDone {
    /// The slot.
    pub slot: Slot,
    /// The decision.
    pub decision: Decision,
    /// Every event appended, in order.
    pub events: Vec<Event>,
    /// Event rows this process read.
    pub rows_read: u64,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub enum Ticked {
    /// The tick was written.
    Done(TickDone),
    /// The slot already has a stimulus (cron fired twice): nothing was written.
    AlreadyTicked {
        /// The slot.
        slot: Slot,
        /// Its stimulus.
        stimulus: i64,
    },
}

impl Ticked {
    /// The `{"type":"tick",…}` record.
    pub fn record(&self) -> Value {
        match self {
            Ticked::Done(o) => json!({
                "type": "tick",
                "slot": o.slot.slot,
                "slot_id": o.slot.slot_id,
                "decision": o.decision.decision.as_str(),
                "reasoning": o.decision.reasoning,
                "evidence": o.decision.evidence,
                "auto_closed": o.decision.auto_close.iter().map(|a| a.cid.as_str()).collect::<Vec<_>>(),
                "events": o.events.len(),
                "first_id": o.events.first().map(|e| e.id),
                "last_id": o.events.last().map(|e| e.id),
                "rows_read": o.rows_read,
            }),
            Ticked::AlreadyTicked { slot, stimulus } => json!({
                "type": "tick",
                "slot": slot.slot,
                "slot_id": slot.slot_id,
                "decision": Value::Null,
                "skipped": format!("slot {} already has a stimulus (event {stimulus})", slot.slot),
                "events": 0,
            }),
        }
    }
}

/// The stimulus already written for `slot`, if any. Without reading: the newest stimulus is
/// this slot's (cron fired twice), or the slot is past every slot of its interval stimulated
/// so far (cron and `--every` move forwards). Otherwise (an explicit older `--slot`, a clock
/// set back), a look-up among the stimuli.
pub(super) fn stimulus_for<R: EventLog + ?Sized>(
    r: &R,
    p: &Projections,
    slot: &Slot,
) -> crate::Result<Option<i64>> {
    let a = &p.autonomy;
    if let Some((id, _, sid)) = &a.last_stimulus {
        if *sid == slot.slot_id {
            return Ok(Some(*id));
        }
    }
    match a.max_slot.get(&slot.interval) {
        None => Ok(None),
        Some(max) if slot.slot > *max => Ok(None),
        Some(_) => r.find_kind_containing(Kind::AutonomyStimulus, &slot.slot_id),
    }
}

pub(super) fn slot_meta(slot: &Slot, pairs: &[(&str, Value)]) -> Map<String, Value> {
    let mut m = meta(pairs);
    if slot.interval != super::slot::INTERVAL_SECS {
        m.insert("interval".into(), slot.interval.into());
    }
    m
}

/// The decision for `slot` on `ledger` without writing anything, and the stimulus the slot
/// already has, if any.
pub fn dry_run<R: Indexes>(ledger: &R, slot: &Slot) -> crate::Result<(Decision, Option<i64>)> {
    let p = checkpoint::project(ledger, None, true)?.projections;
    let already = stimulus_for(ledger, &p, slot)?;
    Ok((decide(&View::of(&p), &p.mirror.thresholds), already))
}

/// `sha256(C([{"content","kind","meta"}, …]))` of the newest changes (the reference's
/// `delta_hash`, FORMATS.md §8.5, over changes rather than over every non-reflection event, so
/// that the ticks themselves do not move it).
fn delta_hash<R: EventLog + ?Sized>(r: &R, ids: &[i64]) -> crate::Result<String> {
    let mut items = Vec::new();
    for &id in ids {
        if let Some(e) = r.get(id)? {
            let meta = serde_json::from_str::<Value>(&e.meta).unwrap_or(Value::Null);
            items.push(json!({"content": e.content, "kind": e.kind, "meta": meta}));
        }
    }
    // Stored events are read from outside: a meta with a number out of range (an imported
    // ledger's) is an error, not the digest of nothing.
    let text = canon::to_string(&Value::Array(items))
        .map_err(|e| crate::Error::bad_input(None, format!("delta_hash of events {ids:?}: {e}")))?;
    Ok(crate::chain::Digest::of(text.as_bytes()).to_string())
}

/// Runs the tick for `slot`. A write the policy forbids rolls the tick back and is recorded
/// as a `violation` ([`crate::Error::PolicyViolation`], exit 1).
pub fn run<W: SessionWriter>(w: &mut W, slot: &Slot, clock: &Clock) -> crate::Result<Ticked> {
    run_noted(w, slot, clock, None, false)
}

/// [`run`], with `note` recorded as the `autonomy_tick`'s `meta.think` (why a tick that
/// could have asked the model did not: [`super::think`]); with `open_goals` (a tick given a
/// model), the kernel may open a goal that stays open ([`super::goals::to_open`]).
pub fn run_noted<W: SessionWriter>(
    w: &mut W,
    slot: &Slot,
    clock: &Clock,
    note: Option<&str>,
    open_goals: bool,
) -> crate::Result<Ticked> {
    let note = note.map(|n| Value::String(n.to_string()));
    let mode = Mode {
        note: note.as_ref(),
        open_goals,
    };
    run_inner(w, slot, clock, mode).map_err(|e| record_refusal(w, e, clock))
}

/// The tick: the projections read, then [`tick_in`] in one write transaction; after the
/// commit, the erased texts' bytes forgotten or the projections kept.
fn run_inner<W: SessionWriter>(
    w: &mut W,
    slot: &Slot,
    clock: &Clock,
    mode: Mode<'_>,
) -> crate::Result<Ticked> {
    let rows_at_start = store::rows_read();
    let projected = checkpoint::project(&*w, None, true)?;
    let mut first = Some(projected.projections);
    let (mut ticked, erased, p) = w.session(&mut |tx| {
        // `session` runs this once: the projections move in and out.
        let mut p = first.take().unwrap_or_default();
        let (ticked, erased) = tick_in(tx, &mut p, slot, clock, mode)?;
        Ok((ticked, erased, p))
    })?;
    if erased {
        // The erased texts may sit in the WAL's frames; a reader that holds them keeps them
        // until the next checkpoint.
        w.forget_erased_bytes()?;
    } else if projected.folded >= checkpoint::CHECKPOINT_EVERY / 4
        && matches!(ticked, Ticked::Done(_))
    {
        checkpoint::keeping(&p, |c| w.keep_checkpoint(c));
    }
    if let Ticked::Done(done) = &mut ticked {
        done.rows_read = store::rows_read() - rows_at_start;
    }
    Ok(ticked)
}

/// The tick inside its write transaction, step by step: look for the slot's stimulus,
/// decide, then write the slot's events, the auto-closes, the action, the bookkeeping and
/// last the retention pass. Whether the retention pass erased anything.
pub(super) fn tick_in(
    tx: &mut dyn SessionTxn,
    p: &mut Projections,
    slot: &Slot,
    clock: &Clock,
    mode: Mode<'_>,
) -> crate::Result<(Ticked, bool)> {
    catch_up(&*tx, p)?;
    if let Some(stimulus) = stimulus_for(&*tx, p, slot)? {
        let already = Ticked::AlreadyTicked {
            slot: slot.clone(),
            stimulus,
        };
        return Ok((already, false));
    }
    let th = p.mirror.thresholds.clone();
    let decision = decide(&View::of(p), &th);
    let mut events = Vec::new();
    ensure_defaults(tx, p, &mut events, clock)?;
    let mut s = Session {
        tx: &mut *tx,
        p,
        events: &mut events,
        clock,
    };
    append_stimulus(&mut s, slot)?;
    append_tick(&mut s, slot, &th, &decision, mode, &mut |_| Ok(()))?;
    // Last: the projections are not folded past what it erases (nothing after it reads them).
    let first = events.first().map_or(i64::MAX, |e| e.id);
    let erased = super::retention::apply(tx, first, slot, clock)?;
    let any = !erased.is_empty();
    events.extend(erased);
    test_pause();
    let done = TickDone {
        slot: slot.clone(),
        decision,
        events,
        rows_read: 0,
    };
    Ok((Ticked::Done(done), any))
}

/// [`PAUSE_ENV`]: the testing aid's wait, inside the transaction, before its commit.
pub(super) fn test_pause() {
    if let Some(ms) = std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// How a tick is written besides its decision: with a model or without.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mode<'a> {
    /// The `autonomy_tick`'s `meta.think`.
    pub note: Option<&'a Value>,
    /// Whether the kernel may open a goal that stays open (a tick given a model).
    pub open_goals: bool,
}

/// Everything a tick writes after its stimulus, in order: the rule table when the thresholds
/// changed, the decision (with the mode's note as `meta.think`), the auto-closes, what
/// `before_action` writes (a thinking tick's reply and what its markers do), the action, the
/// adaptive loop, CTL maintenance, internal goals and the bookkeeping.
pub(super) fn append_tick(
    s: &mut Session<'_, '_>,
    slot: &Slot,
    th: &Thresholds,
    decision: &Decision,
    mode: Mode<'_>,
    before_action: &mut dyn FnMut(&mut Session<'_, '_>) -> crate::Result<()>,
) -> crate::Result<()> {
    append_decision(s, slot, th, decision, mode.note)?;
    let acted = s.events.len();
    append_auto_closes(s, th, decision)?;
    before_action(s)?;
    append_action(s, slot, th, decision)?;
    append_adaptive(s, slot, decision, acted)?;
    super::index::maintain(s, acted)?;
    super::goals::append_goals(s, mode.open_goals)?;
    append_bookkeeping(s)
}

/// The slot's `autonomy_stimulus`.
pub(super) fn append_stimulus(s: &mut Session<'_, '_>, slot: &Slot) -> crate::Result<Event> {
    append_stimulus_with(s, slot, &[])
}

/// The slot's `autonomy_stimulus`, with `extra` in its meta (a thinking tick's claim).
pub(super) fn append_stimulus_with(
    s: &mut Session<'_, '_>,
    slot: &Slot,
    extra: &[(&str, Value)],
) -> crate::Result<Event> {
    let stimulus = format!(
        "{{\"slot\": {}, \"slot_id\": \"{}\"}}",
        slot.slot, slot.slot_id
    );
    let mut pairs = vec![
        ("slot_id", slot.slot_id.clone().into()),
        ("source", Source::AutonomySupervisor.into()),
    ];
    pairs.extend(extra.iter().cloned());
    s.put(Kind::AutonomyStimulus, stimulus, slot_meta(slot, &pairs))
}

/// The rule table when the thresholds changed, and the decision.
fn append_decision(
    s: &mut Session<'_, '_>,
    slot: &Slot,
    th: &Thresholds,
    decision: &Decision,
    note: Option<&Value>,
) -> crate::Result<()> {
    let rule_table = th.rule_table_text();
    if s.p.autonomy.last_rule_table.as_deref() != Some(rule_table.as_str()) {
        s.put(
            Kind::AutonomyRuleTable,
            rule_table,
            meta(&[("source", Source::AutonomyKernel.into())]),
        )?;
    }
    let mut m = slot_meta(
        slot,
        &[
            ("slot", slot.slot.into()),
            ("slot_id", slot.slot_id.clone().into()),
            ("source", Source::AutonomyKernel.into()),
        ],
    );
    if let Some(n) = note {
        m.insert("think".into(), n.clone());
    }
    if decision.decision == Action::Index {
        // The indexer's rule, so that deep verification recomputes the tick with it.
        let rule = crate::projection::indexing::RULE;
        m.insert("index_rule".into(), rule.into());
    }
    let content = canon::built(&decision.tick_content());
    s.put(Kind::AutonomyTick, content, m)?;
    Ok(())
}

/// A `commitment_close` for every stale commitment the decision closes.
fn append_auto_closes(
    s: &mut Session<'_, '_>,
    th: &Thresholds,
    decision: &Decision,
) -> crate::Result<()> {
    for c in &decision.auto_close {
        let m = meta(&[
            ("age", c.age.into()),
            ("cid", c.cid.clone().into()),
            ("origin", c.origin.clone().into()),
            ("reason", "auto_close_idle_opt".into()),
            ("source", Source::AutonomyKernel.into()),
            ("threshold", th.commitment_auto_close.into()),
        ]);
        s.put(Kind::CommitmentClose, close_content(&c.cid), m)?;
    }
    Ok(())
}

/// The decided action: the kernel reflection, or a summary.
fn append_action(
    s: &mut Session<'_, '_>,
    slot: &Slot,
    th: &Thresholds,
    decision: &Decision,
) -> crate::Result<()> {
    match decision.decision {
        Action::Reflect => {
            let payload = decision.reflection.clone().unwrap_or(Value::Null);
            let delta = delta_hash(&*s.tx, &s.p.autonomy.recent_changes)?;
            let m = meta(&[
                (
                    "auto_close_threshold",
                    th.commitment_auto_close.to_string().into(),
                ),
                ("delta_hash", delta.into()),
                ("slot_id", slot.slot_id.clone().into()),
                ("source", Source::AutonomyKernel.into()),
                (
                    "staleness_threshold",
                    th.commitment_staleness.to_string().into(),
                ),
                ("synth", "pmm".into()),
            ]);
            let content = canon::built(&payload);
            s.put(Kind::Reflection, content, m)?;
        }
        Action::Summarize => append_summary(s, true)?,
        Action::Index => super::index::append(s, &decision.evidence)?,
        Action::Idle => {}
    }
    Ok(())
}

/// The adaptive loop (FORMATS.md §8.2 steps 6–7, [`super::adapt`]): the outcome of what the
/// tick did (`acted`: where its events after the `autonomy_tick` start), then stability,
/// coherence and learning, each only when due, and the rule table when learning moved the
/// thresholds.
fn append_adaptive(
    s: &mut Session<'_, '_>,
    slot: &Slot,
    decision: &Decision,
    acted: usize,
) -> crate::Result<()> {
    let tick = s.events[acted - 1].id;
    let content = super::adapt::outcome_content(decision, tick, &s.events[acted..]);
    let m = slot_meta(
        slot,
        &[
            ("slot", slot.slot.into()),
            ("slot_id", slot.slot_id.clone().into()),
            ("source", Source::AutonomyKernel.into()),
        ],
    );
    s.put(Kind::OutcomeObservation, content, m)?;
    let kernel = || meta(&[("source", Source::AutonomyKernel.into())]);
    if let Some(c) = s.p.adapt.stability_due() {
        s.put(Kind::StabilityMetrics, c, kernel())?;
    }
    if let Some(c) = s.p.adapt.coherence_due() {
        s.put(Kind::CoherenceCheck, c, kernel())?;
    }
    if let Some(c) = crate::projection::adapt::policy_due(&s.p.adapt, &s.p.mirror.thresholds) {
        s.put(Kind::PolicyUpdate, c, kernel())?;
    }
    let head = s.p.mirror.last_event_id;
    if let Some(c) = crate::projection::adapt::meta_due(&s.p.adapt, &s.p.mirror.thresholds, head) {
        s.put(Kind::MetaPolicyUpdate, c, kernel())?;
    }
    let rule_table = s.p.mirror.thresholds.rule_table_text();
    if s.p.autonomy.last_rule_table.as_deref() != Some(rule_table.as_str()) {
        s.put(Kind::AutonomyRuleTable, rule_table, kernel())?;
    }
    Ok(())
}

/// `autonomy_metrics` every [`METRICS_EVERY`] ticks and the `checkpoint_manifest` when due.
fn append_bookkeeping(s: &mut Session<'_, '_>) -> crate::Result<()> {
    if s.p.autonomy.ticks_total.is_multiple_of(METRICS_EVERY) {
        let content = metrics_content(s.p);
        s.put(
            Kind::AutonomyMetrics,
            content,
            meta(&[("source", Source::AutonomyTracker.into())]),
        )?;
    }
    if let Some((content, m)) = manifest(s.p) {
        s.put(Kind::CheckpointManifest, content, m)?;
    }
    Ok(())
}

/// The `autonomy_metrics` content (FORMATS.md §8.7), from counts rebuilt from the ledger.
pub fn metrics_content(p: &Projections) -> String {
    let a = &p.autonomy;
    let v = json!({
        "idle_count": a.idle_count,
        "intention_summarize_count": a.intention_summarize_count,
        "last_reflection_id": a.last_reflection_id,
        "open_commitments": p.mirror.open.len(),
        "reflect_count": a.reflect_count,
        "summarize_count": a.summarize_count,
        "ticks_total": a.ticks_total,
    });
    canon::built(&v)
}

/// A `checkpoint_manifest` when one is due (FORMATS.md §8.9): there is a summary, and either
/// [`MANIFEST_EVERY`] events have passed since the newest manifest or that summary was
/// triggered by a significant change; never a repeat of the newest manifest.
fn manifest(p: &Projections) -> Option<(String, Map<String, Value>)> {
    let a = &p.autonomy;
    let up_to = a.last_summary?;
    let root = a.summary_root.clone()?;
    let since = p
        .mirror
        .last_event_id
        .saturating_sub(a.last_manifest.as_ref().map_or(0, |m| m.0));
    if since < MANIFEST_EVERY && !a.last_summary_triggered {
        return None;
    }
    if a.last_manifest
        .as_ref()
        .is_some_and(|(_, u, r)| *u == up_to && *r == root)
    {
        return None;
    }
    Some((
        crate::chain::root::manifest_content(&root, up_to),
        meta(&[("source", Source::AutonomyKernel.into())]),
    ))
}

/// Sets autonomy thresholds: a `config` of type `autonomy_thresholds` with the given keys
/// (source `pmm-tick`), which pins them (learning leaves them alone), and `"unset"`: the keys
/// handed back to learning; then the `autonomy_rule_table` of the thresholds now in force, in
/// one transaction. Nothing is written when the values are already in force and pinned, and
/// the keys to unset are not pinned.
pub fn set_thresholds<W: SessionWriter>(
    w: &mut W,
    changes: &[(String, i64)],
    unset: &[String],
    clock: &Clock,
) -> crate::Result<(Thresholds, Vec<Event>)> {
    let mut first = Some(checkpoint::project(&*w, None, true)?.projections);
    w.session(&mut |tx| {
        // `session` runs this once: the projections move in.
        let mut p = first.take().unwrap_or_default();
        set_in(tx, &mut p, changes, unset, clock)
    })
    .map_err(|e| record_refusal(w, e, clock))
}

/// [`set_thresholds`] inside its write transaction.
fn set_in(
    tx: &mut dyn SessionTxn,
    p: &mut Projections,
    changes: &[(String, i64)],
    unset: &[String],
    clock: &Clock,
) -> crate::Result<(Thresholds, Vec<Event>)> {
    catch_up(&*tx, p)?;
    let mut events = Vec::new();
    let current = p.mirror.thresholds.clone();
    // A budget key is no threshold: its change is always written.
    let value = |k: &str| Threshold::parse(k).map(|k| current.get(k));
    let unset: Vec<&String> = unset
        .iter()
        .filter(|k| current.pinned.contains(*k))
        .collect();
    if unset.is_empty()
        && changes
            .iter()
            .all(|(k, v)| value(k) == Some(*v) && current.pinned.contains(k))
    {
        return Ok((current, events));
    }
    let mut content = Map::new();
    content.insert("type".into(), "autonomy_thresholds".into());
    for (k, v) in changes {
        content.insert(k.clone(), (*v).into());
    }
    if !unset.is_empty() {
        content.insert("unset".into(), unset.into_iter().cloned().collect());
    }
    let ev = new_event(
        Kind::Config,
        canon::built(&Value::Object(content)),
        meta(&[("source", Source::PmmTick.into())]),
    )?;
    put(tx, p, &mut events, ev, clock)?;
    let text = p.mirror.thresholds.rule_table_text();
    if p.autonomy.last_rule_table.as_deref() != Some(text.as_str()) {
        let m = meta(&[("source", Source::AutonomyKernel.into())]);
        put(
            tx,
            p,
            &mut events,
            new_event(Kind::AutonomyRuleTable, text, m)?,
            clock,
        )?;
    }
    Ok((p.mirror.thresholds.clone(), events))
}
