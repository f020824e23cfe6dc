//! Retention: a policy `config` event (`{"type":"retention","rules":[…]}`,
//! [`crate::event::config::retention_rules`]) that the tick applies as erasures with reason
//! `retention`, inside the tick's own write transaction.
//!
//! Deterministic per slot: an event goes when it is older than the rule's age *at the slot's
//! time* (the slot's start, not the wall clock), so the same ledger and slot erase the same
//! events on every host and `--deep` can say what a tick should have erased. At most one pass
//! per slot: the pass is written with the slot's stimulus, which claims the slot (a second
//! tick of it writes nothing), so two hosts ticking the same slots erase each event once.
//! Bounded: at most [`MAX_PER_TICK`] events a tick, the oldest (lowest ids) first; the rest go
//! in the next slots. Each `erasure` event's meta says which pass and rule took it:
//! `"retention": {"slot", "interval", "rule", "cutoff"}`, which `pmm-verify --deep` recomputes
//! (`audit::retention`).

use super::Slot;
use crate::event::config::{retention_rules, RetentionRule};
use crate::event::{Clock, Event, Kind, Source};
use crate::store::log::SessionTxn;
use crate::store::EventLog;
use serde_json::{json, Map, Value};

/// The most events one tick erases.
pub const MAX_PER_TICK: usize = 500;

/// The reason every retention erasure carries.
pub const REASON: &str = "retention";

/// The retention policy in force as `r` sees it: the newest `config` of type `retention` and
/// its rules (none when there is none, or when the newest does not read).
pub fn policy<R: EventLog + ?Sized>(r: &R) -> crate::Result<Option<(i64, Vec<RetentionRule>)>> {
    let mut found = None;
    r.newest_of_kind(
        Kind::Config,
        &mut |id, content| match retention_rules(content) {
            None => true,
            Some(rules) => {
                found = rules.ok().map(|rules| (id, rules));
                false
            }
        },
    )?;
    Ok(found)
}

/// The slot's time, in the ledger's timestamp form.
pub fn slot_time(slot: &Slot) -> chrono::DateTime<chrono::Utc> {
    let secs =
        crate::formats::slot::EPOCH_UNIX.saturating_add(slot.slot.saturating_mul(slot.interval));
    chrono::DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

/// The time before which a rule's events go, at `slot`.
pub fn cutoff(slot: &Slot, rule: &RetentionRule) -> String {
    let t = slot_time(slot) - chrono::Duration::seconds(rule.older_than);
    crate::event::format_ts(t)
}

/// What the pass of `slot` erases on `batch`: the events before `before` (the tick's first
/// event) that some rule selects, each with the first rule that did and its cutoff, in id
/// order, at most [`MAX_PER_TICK`].
pub fn selection(
    tx: &dyn SessionTxn,
    before: i64,
    slot: &Slot,
    rules: &[RetentionRule],
) -> crate::Result<Vec<(i64, usize, String)>> {
    let mut chosen: std::collections::BTreeMap<i64, (usize, String)> = Default::default();
    for (i, rule) in rules.iter().enumerate() {
        let cut = cutoff(slot, rule);
        let kind = rule.kind.as_deref();
        let source = rule.source.as_deref();
        for id in tx.retention_candidates(before, kind, source, &cut, MAX_PER_TICK)? {
            chosen.entry(id).or_insert_with(|| (i, cut.clone()));
        }
    }
    Ok(chosen
        .into_iter()
        .take(MAX_PER_TICK)
        .map(|(id, (rule, cut))| (id, rule, cut))
        .collect())
}

/// The retention pass of `slot`, in the tick's transaction: erases what [`selection`] names
/// (the erasing actor is the kernel, `autonomy_kernel`, which the write policy must trust with
/// erasure; when it does not, nothing is erased). The `erasure` events appended.
pub fn apply(
    tx: &mut dyn SessionTxn,
    before: i64,
    slot: &Slot,
    clock: &Clock,
) -> crate::Result<Vec<Event>> {
    let Some((_, rules)) = policy(&*tx)? else {
        return Ok(Vec::new());
    };
    let actor = Source::AutonomyKernel.as_str();
    if crate::session::erasure_refusal(&*tx, actor)?.is_some() {
        return Ok(Vec::new());
    }
    let targets: Vec<(Event, Option<Map<String, Value>>)> = selection(&*tx, before, slot, &rules)?
        .into_iter()
        .map(|(id, rule, cut)| {
            let mut m = Map::new();
            m.insert(
                "retention".into(),
                json!({"slot": slot.slot, "interval": slot.interval, "rule": rule, "cutoff": cut}),
            );
            crate::session::erasable(&*tx, id).map(|t| (t, Some(m)))
        })
        .collect::<crate::Result<_>>()?;
    crate::session::erase_in(tx, &targets, REASON, actor, clock)
}
