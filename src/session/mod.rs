//! The write session: how every writer above the store (a turn, a tick, the MCP server's
//! tools, `pmm-append`) writes events. The store only links and inserts ([`crate::store::log`]);
//! what may be written is decided here, once, for every writer:
//!
//! - the write policy ([`policy`]: which actors may not write which sensitive kinds), the
//!   config ranges and the rule that only `pmm-append --erase` writes `erasure` events, checked
//!   by [`refusal`] before each insert, and a refusal recorded as a `violation`;
//! - a [`Session`]: one open write transaction with the projections each event is folded into
//!   as it is written, so that later events see earlier ones;
//! - what a reply's markers cause (`markers`: claims, commitments opened and closed, the
//!   correction/delta reflection and its `REF:`s), the events derived from the ledger
//!   ([`derive`](mod@derive): reflections, summaries, memory chunks) and the concepts a writer binds
//!   ([`concepts`]), for the turn and the thinking tick alike;
//! - how a writer calls the model ([`Options`]) and fails ([`TurnError`]).

mod call;
pub mod concepts;
pub mod derive;
pub mod forget;
pub(crate) mod markers;
pub mod policy;
pub mod reference;

pub use call::{Options, TurnError};
pub(crate) use markers::{append_claims, append_closes, append_delta_reflection, append_opens};
pub use policy::{Policy, PolicyVerdict};

use crate::context::select::RetrievalConfig;
use crate::event::{Clock, Event, Kind, NewEvent, Source};
use crate::projection::state::Projections;
use crate::projection::supersession;
use crate::store::log::Txn;
use crate::store::{self, Batch, Erased, EventLog, Indexes, Ledger, Violation};
use crate::Error;
use serde_json::{Map, Value};

/// The reference's default write policy, written on a ledger's first turn.
pub const DEFAULT_POLICY: &str = r#"{"forbid_sources":{"cli":["config","checkpoint_manifest","embedding_add","retrieval_selection"]},"type":"policy"}"#;

/// Why one append did not happen.
#[derive(Debug)]
pub enum Refusal {
    /// The policy (or a config range) forbids it; nothing was written yet.
    Policy(Violation),
    /// Anything else.
    Error(Error),
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal::Error(e)
    }
}

/// Why `ev` may not be written, as `r` sees the ledger: the policy's verdict on its actor
/// for a sensitive kind, or a config out of its range (`None`: it may). An `erasure` is an
/// error: only [`erase`] writes those, with the content it removes; so is a `meta.supersedes`
/// that does not name earlier events ([`supersession::check`]).
pub fn refusal<R: Indexes + ?Sized>(r: &R, ev: &NewEvent) -> crate::Result<Option<Violation>> {
    let refused = |unreadable, reason| Violation {
        actor: ev.actor(),
        kind: ev.kind.clone(),
        unreadable,
        reason,
    };
    if ev.kind.is_sensitive() {
        match Policy::current(r)?.verdict_for(&ev.actor(), &ev.kind, &ev.content) {
            PolicyVerdict::Allowed => {}
            PolicyVerdict::Forbidden => return Ok(Some(refused(None, None))),
            PolicyVerdict::Unreadable(id, why) => return Ok(Some(refused(Some((id, why)), None))),
        }
    }
    if ev.kind == Kind::Erasure {
        return Err(Error::bad_input(
            None,
            "an erasure event is written only by pmm-append --erase, with the content it removes",
        ));
    }
    if ev.meta.contains_key(supersession::KEY) {
        // Ids rise by one, so an id below the next one is an event of the ledger.
        let next = r.max_id()?.saturating_add(1);
        if let Some(why) = supersession::check(&ev.kind, &ev.meta, next) {
            return Err(Error::bad_input(None, why));
        }
    }
    if ev.kind == Kind::Config {
        if let Some(why) = crate::event::config::out_of_range(&ev.content) {
            return Ok(Some(refused(None, Some(why.to_string()))));
        }
    }
    Ok(None)
}

/// Appends `ev` in `batch` after the checks of [`refusal`].
pub fn append_in(batch: &mut Batch<'_>, ev: &NewEvent, clock: &Clock) -> Result<Event, Refusal> {
    if let Some(v) = refusal(&*batch, ev)? {
        return Err(Refusal::Policy(v));
    }
    Ok(batch.append_linked(ev, &clock.ts())?)
}

/// Appends `ev` in `batch` and commits it. A refused write commits the `violation` event
/// instead and is [`Error::PolicyViolation`].
pub fn commit_one(mut batch: Batch<'_>, ev: &NewEvent, clock: &Clock) -> crate::Result<Event> {
    match append_in(&mut batch, ev, clock) {
        Ok(event) => {
            batch.commit()?;
            Ok(event)
        }
        Err(Refusal::Policy(v)) => {
            let violation = append_violation(&mut batch, &v, clock)?;
            batch.commit()?;
            Err(v.into_error(violation.id))
        }
        Err(Refusal::Error(e)) => Err(e),
    }
}

/// Appends one event in a write transaction of its own ([`commit_one`]).
pub fn append(ledger: &mut Ledger, ev: &NewEvent, clock: &Clock) -> crate::Result<Event> {
    commit_one(ledger.begin()?, ev, clock)
}

/// Appends the reference's `violation` event for a refused write.
pub fn append_violation(
    batch: &mut Batch<'_>,
    v: &Violation,
    clock: &Clock,
) -> crate::Result<Event> {
    let mut meta = Map::new();
    meta.insert("actor".into(), Value::String(v.actor.clone()));
    meta.insert("attempt_kind".into(), Value::String(v.kind.to_string()));
    meta.insert("source".into(), Source::Runtime.into());
    if let Some((id, why)) = &v.unreadable {
        meta.insert(
            "policy_unreadable".into(),
            Value::String(format!("event {id}: {why}")),
        );
    }
    if let Some(why) = &v.reason {
        meta.insert("reason".into(), Value::String(why.clone()));
    }
    let ev = NewEvent {
        kind: Kind::Violation,
        content: format!("policy_violation:{}:{}", v.actor, v.kind),
        meta,
    };
    batch.append_linked(&ev, &clock.ts())
}

/// Records a policy refusal found inside a write that was rolled back: appends the
/// `violation` event in a transaction of its own and returns the error to report.
pub fn record_violation(ledger: &mut Ledger, v: &Violation, clock: &Clock) -> crate::Result<Error> {
    let mut batch = ledger.begin()?;
    let event = append_violation(&mut batch, v, clock)?;
    batch.commit()?;
    Ok(v.clone().into_error(event.id))
}

/// Erases events `ids` for `actor` ([`Ledger::erase`]), when the write policy trusts the
/// actor with erasure ([`Policy::erasure_verdict`]); else a `violation` event and
/// [`Error::PolicyViolation`], nothing erased.
pub fn erase(
    ledger: &mut Ledger,
    ids: &[i64],
    with_quotes: bool,
    reason: &str,
    actor: &str,
    clock: &Clock,
) -> crate::Result<Erased> {
    ledger.erase(ids, with_quotes, reason, actor, clock, &mut |batch| {
        let refused = |unreadable| Violation {
            actor: actor.to_string(),
            kind: Kind::Erasure,
            unreadable,
            reason: None,
        };
        let v = match Policy::current(&*batch)?.erasure_verdict(actor) {
            PolicyVerdict::Allowed => return Ok(None),
            PolicyVerdict::Forbidden => refused(None),
            PolicyVerdict::Unreadable(id, why) => refused(Some((id, why))),
        };
        let event = append_violation(batch, &v, clock)?;
        Ok(Some(v.into_error(event.id)))
    })
}

/// Where a writer's stages write, in a turn or a tick: the open transaction, the projections each event
/// is folded into as it is written (so later events see earlier ones), and the list of what was
/// written.
pub struct Session<'s, 'b> {
    pub(crate) batch: &'s mut Batch<'b>,
    pub(crate) p: &'s mut Projections,
    pub(crate) events: &'s mut Vec<Event>,
    pub(crate) clock: &'s Clock,
}

impl Session<'_, '_> {
    /// Appends one event (policy checked) and folds it in.
    pub(crate) fn put(
        &mut self,
        kind: Kind,
        content: impl Into<String>,
        m: Map<String, Value>,
    ) -> crate::Result<Event> {
        put(
            self.batch,
            self.p,
            self.events,
            new_event(kind, content, m)?,
            self.clock,
        )
    }

    /// The head as this transaction sees it.
    pub(crate) fn head_id(&self) -> i64 {
        self.batch.head().map_or(0, |h| h.id)
    }
}

pub(crate) fn meta(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

pub(crate) fn new_event(
    kind: Kind,
    content: impl Into<String>,
    m: Map<String, Value>,
) -> crate::Result<NewEvent> {
    NewEvent::new(kind, content, m).map_err(|e| crate::Error::bad_input(None, e))
}

/// Appends inside a batch. A policy refusal is [`crate::Error::Refused`]: the whole write is
/// rolled back, and [`record_refusal`] then appends the `violation` (SPEC §2.5).
pub(crate) fn put(
    batch: &mut Batch<'_>,
    p: &mut Projections,
    out: &mut Vec<Event>,
    ev: NewEvent,
    clock: &Clock,
) -> crate::Result<Event> {
    match append_in(batch, &ev, clock) {
        Ok(e) => {
            p.apply(&e);
            out.push(e.clone());
            Ok(e)
        }
        Err(Refusal::Policy(v)) => Err(crate::Error::Refused(Box::new(v))),
        Err(Refusal::Error(e)) => Err(e),
    }
}

/// On a ledger's first use by a runtime program (SPEC §2.5): the reference's default write
/// policy and retrieval `config` events, when the ledger has none.
pub(crate) fn ensure_defaults(
    batch: &mut Batch<'_>,
    p: &mut Projections,
    events: &mut Vec<Event>,
    clock: &Clock,
) -> crate::Result<()> {
    if !batch.has_policy_config()? {
        let ev = new_event(
            Kind::Config,
            DEFAULT_POLICY,
            meta(&[("source", Source::AutonomyKernel.into())]),
        )?;
        put(batch, p, events, ev, clock)?;
    }
    if p.mirror.retrieval.is_none() {
        let ev = new_event(
            Kind::Config,
            RetrievalConfig::DEFAULT_CONTENT,
            meta(&[("source", Source::AutonomyKernel.into())]),
        )?;
        put(batch, p, events, ev, clock)?;
    }
    Ok(())
}

/// After a write that [`put`] found forbidden was rolled back: appends the `violation` in a
/// transaction of its own and gives the error to report (exit 1). Other errors pass through.
pub(crate) fn record_refusal(ledger: &mut Ledger, e: crate::Error, clock: &Clock) -> crate::Error {
    match e {
        crate::Error::Refused(v) => record_violation(ledger, &v, clock).unwrap_or_else(|e| e),
        other => other,
    }
}

/// Appends a `summary_update` (FORMATS.md §7.4) against the newest summary when the gate lets
/// it through, or whatever the gate says with `force` (a `summarize` tick).
pub(crate) fn append_summary(
    batch: &mut Batch<'_>,
    p: &mut Projections,
    events: &mut Vec<Event>,
    clock: &Clock,
    force: bool,
) -> crate::Result<()> {
    let previous = match p.autonomy.last_summary {
        Some(id) => batch.get(id)?,
        None => None,
    };
    let after = previous.as_ref().map_or(0, |e| e.id);
    let head = p.mirror.last_event_id;
    let inputs = derive::SummaryInputs {
        previous: previous.as_ref(),
        events_since: head.saturating_sub(after),
        reflections_since: batch.count_kind_after(Kind::Reflection, after)?,
        last_event_id: head,
        force,
    };
    if let Some((content, m)) = derive::summary_update(p, &inputs) {
        put(
            batch,
            p,
            events,
            new_event(Kind::SummaryUpdate, content, m)?,
            clock,
        )?;
    }
    Ok(())
}

/// Folds events past the projections' last id into them (what other processes appended), or
/// projects them anew when one of those is an erasure ([`store::catch_up`]: the turn must not
/// write what it derives from erased text).
pub(crate) fn catch_up<R: Indexes>(r: &R, p: &mut Projections) -> crate::Result<()> {
    store::catch_up(r, p, None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default policy forbids `cli` exactly the kinds the policy guards.
    #[test]
    fn default_policy_lists_the_sensitive_kinds() {
        let v: Value = serde_json::from_str(DEFAULT_POLICY).unwrap();
        let listed: Vec<&str> = v["forbid_sources"]["cli"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let mut sensitive: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| k.is_sensitive())
            .map(Kind::as_str)
            .collect();
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        sensitive.sort_unstable();
        assert_eq!(sorted, sensitive);
    }
}
