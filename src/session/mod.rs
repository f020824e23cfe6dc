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
use crate::projection::checkpoint;
use crate::projection::state::Projections;
use crate::projection::supersession;
use crate::store::log::{Ending, SessionTxn, SessionWriter, Txn, Writer};
use crate::store::{self, Erased, EventLog, Violation};
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
pub fn refusal<R: EventLog + ?Sized>(r: &R, ev: &NewEvent) -> crate::Result<Option<Violation>> {
    if !checks_read_the_ledger(ev) {
        return Ok(None);
    }
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

/// Whether a check of [`refusal`] applies to `ev`, and may read the ledger: a sensitive kind
/// (the policy), a config (its ranges), an erasure, a `meta.supersedes`. An event none
/// applies to may be written wherever the head is ([`Writer::append_independent`]).
pub fn checks_read_the_ledger(ev: &NewEvent) -> bool {
    ev.kind.is_sensitive()
        || ev.kind == Kind::Config
        || ev.kind == Kind::Erasure
        || ev.meta.contains_key(supersession::KEY)
}

/// Appends `ev` in the write transaction `tx` after the checks of [`refusal`].
pub fn append_in<T: Txn + ?Sized>(
    tx: &mut T,
    ev: &NewEvent,
    clock: &Clock,
) -> Result<Event, Refusal> {
    if let Some(v) = refusal(&*tx, ev)? {
        return Err(Refusal::Policy(v));
    }
    Ok(tx.append_linked(ev, &clock.ts())?)
}

/// Appends `ev` in `tx`, or the `violation` event of its refusal: the event, or the error to
/// report once the transaction commits ([`Error::PolicyViolation`]).
fn append_or_violation<T: Txn + ?Sized>(
    tx: &mut T,
    ev: &NewEvent,
    clock: &Clock,
) -> crate::Result<crate::Result<Event>> {
    match append_in(tx, ev, clock) {
        Ok(event) => Ok(Ok(event)),
        Err(Refusal::Policy(v)) => {
            let violation = append_violation(tx, &v, clock)?;
            Ok(Err(v.into_error(violation.id)))
        }
        Err(Refusal::Error(e)) => Err(e),
    }
}

/// What [`append_built`] calls inside the write transaction: the event to append, or why
/// there is none.
pub type Build<'a, E> = dyn FnMut(&dyn SessionTxn) -> crate::Result<Result<NewEvent, E>> + 'a;

/// Appends the event `build` makes from what the write transaction sees (nobody writes
/// between that read and the append), by [`append`]'s rules: a refused write commits the
/// `violation` event instead and is [`Error::PolicyViolation`]. When `build` declines
/// (`Ok(Err(why))`: what it read forbids the write), nothing is written and `why` is
/// returned.
pub fn append_built<W: SessionWriter, E>(
    w: &mut W,
    clock: &Clock,
    build: &mut Build<'_, E>,
) -> crate::Result<Result<Event, E>> {
    let out = w.session_ending(&mut |tx| match build(&*tx)? {
        Ok(ev) => Ok(Ending::Commit(Ok(append_or_violation(tx, &ev, clock)?))),
        Err(why) => Ok(Ending::RollBack(Err(why))),
    })?;
    match out {
        Ok(appended) => appended.map(Ok),
        Err(why) => Ok(Err(why)),
    }
}

/// Appends one event in a write transaction of its own ([`append_built`]'s rules).
/// An event no check reads the ledger for ([`checks_read_the_ledger`]) is appended by
/// [`Writer::append_independent`] (on PostgreSQL, linked by the server in one round trip).
pub fn append<W: Writer>(w: &mut W, ev: &NewEvent, clock: &Clock) -> crate::Result<Event> {
    if !checks_read_the_ledger(ev) {
        return w.append_independent(ev, clock);
    }
    w.transact(&mut |tx| append_or_violation(tx, ev, clock))?
}

/// Appends the reference's `violation` event for a refused write.
pub fn append_violation<T: Txn + ?Sized>(
    tx: &mut T,
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
    tx.append_linked(&ev, &clock.ts())
}

/// Records a policy refusal found inside a write that was rolled back: appends the
/// `violation` event in a transaction of its own and returns the error to report.
pub fn record_violation<W: Writer>(
    w: &mut W,
    v: &Violation,
    clock: &Clock,
) -> crate::Result<Error> {
    let event = w.transact(&mut |tx| append_violation(tx, v, clock))?;
    Ok(v.clone().into_error(event.id))
}

/// Erases events `ids` for `actor` (`pmm-append --erase`, `pmm-forget`): in one write
/// transaction, an `erasure` event per id ([`crate::event::erasure`]) and the event's text
/// removed from its row and every derived part ([`erase_in`]); then the bytes the database
/// keeps beside are forgotten ([`SessionWriter::forget_erased_bytes`]). Bad ids, erasure
/// events and events already erased are refused (exit 2) before anything is written. When
/// the write policy does not trust the actor with erasure ([`Policy::erasure_verdict`]), a
/// `violation` event is committed instead and the result is [`Error::PolicyViolation`],
/// nothing erased. With `with_quotes`, the later events that quote an erased text
/// ([`SessionTxn::quoting`]) are erased too, looked for inside the transaction: one appended
/// by another process just before it is not missed.
pub fn erase<W: SessionWriter>(
    w: &mut W,
    ids: &[i64],
    with_quotes: bool,
    reason: &str,
    actor: &str,
    clock: &Clock,
) -> crate::Result<Erased> {
    let done = w.session(&mut |tx| {
        let ids = with_their_quotes(&*tx, ids, with_quotes)?;
        let targets = ids
            .iter()
            .map(|&id| erasable(&*tx, id).map(|t| (t, None)))
            .collect::<crate::Result<Vec<_>>>()?;
        if let Some(v) = erasure_refusal(&*tx, actor)? {
            let event = append_violation(tx, &v, clock)?;
            return Ok(Err(v.into_error(event.id)));
        }
        let events = erase_in(tx, &targets, reason, actor, clock)?;
        erase_pause();
        Ok(Ok((events, ids)))
    })?;
    let (events, erased) = done?;
    let wal_truncated = w.forget_erased_bytes()?;
    Ok(Erased {
        events,
        erased,
        wal_truncated,
    })
}

/// `ids` and, with `with_quotes`, the later events that quote their texts: sorted, once each.
fn with_their_quotes(
    tx: &dyn SessionTxn,
    ids: &[i64],
    with_quotes: bool,
) -> crate::Result<Vec<i64>> {
    let mut all = ids.to_vec();
    if with_quotes {
        for &id in ids {
            if let Some(ev) = tx.get(id)? {
                all.extend(tx.quoting(id, &ev.content)?);
            }
        }
        all.sort_unstable();
        all.dedup();
    }
    Ok(all)
}

/// The `violation` of erasing as `actor`, when the write policy does not trust it with
/// erasure (`None`: it does).
pub fn erasure_refusal<R: EventLog + ?Sized>(
    r: &R,
    actor: &str,
) -> crate::Result<Option<Violation>> {
    let refused = |unreadable| Violation {
        actor: actor.to_string(),
        kind: Kind::Erasure,
        unreadable,
        reason: None,
    };
    Ok(match Policy::current(r)?.erasure_verdict(actor) {
        PolicyVerdict::Allowed => None,
        PolicyVerdict::Forbidden => Some(refused(None)),
        PolicyVerdict::Unreadable(id, why) => Some(refused(Some((id, why)))),
    })
}

/// Event `id` as an erasure target, or why it cannot be one (exit 2): it exists, is no
/// erasure, is not erased yet and has a hash for its erasure to name.
pub fn erasable(r: &dyn SessionTxn, id: i64) -> crate::Result<Event> {
    let bad = |msg: String| Error::bad_input(Some("--erase".into()), msg);
    let head = r.head()?.map_or(0, |h| h.id);
    let Some(ev) = r.get(id)? else {
        return Err(bad(format!(
            "no event {id} (the ledger's ids run from 1 to {head})"
        )));
    };
    if ev.kind == Kind::Erasure {
        return Err(bad(format!(
            "event {id} is an erasure: erasures are not erased"
        )));
    }
    if let Some(by) = r.erased_by(id)? {
        return Err(bad(format!("event {id} is already erased (by event {by})")));
    }
    if ev.hash.as_deref().is_none_or(str::is_empty) {
        return Err(bad(format!(
            "event {id} has no hash to name (run pmm-verify)"
        )));
    }
    Ok(ev)
}

/// Erases `targets` inside `tx` (the caller checked the policy and the targets): each target
/// gets its `erasure` event ([`crate::event::erasure::erasure`], its meta holding the extra
/// keys given with it), then its text is scrubbed; the derived parts are compacted once at
/// the end. The `erasure` events, in order.
pub fn erase_in(
    tx: &mut dyn SessionTxn,
    targets: &[(Event, Option<Map<String, Value>>)],
    reason: &str,
    actor: &str,
    clock: &Clock,
) -> crate::Result<Vec<Event>> {
    let mut events = Vec::with_capacity(targets.len());
    for (target, extra) in targets {
        let ev = crate::event::erasure::erasure(target, reason, actor, extra.as_ref());
        events.push(tx.append_linked(&ev, &clock.ts())?);
        tx.scrub(target)?;
    }
    if !events.is_empty() {
        tx.compact_after_erasure()?;
    }
    Ok(events)
}

/// The testing aid of [`store::erase_pause_env`]: a wait inside an erasure's transaction,
/// before its commit, so that a test can kill the process in the middle of it.
fn erase_pause() {
    if let Some(ms) = std::env::var(store::erase_pause_env())
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Where a writer's stages write, in a turn or a tick: the open transaction, the projections each event
/// is folded into as it is written (so later events see earlier ones), and the list of what was
/// written.
pub struct Session<'s, 'b> {
    pub(crate) tx: &'s mut (dyn SessionTxn + 'b),
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
            self.tx,
            self.p,
            self.events,
            new_event(kind, content, m)?,
            self.clock,
        )
    }

    /// The head as this transaction sees it.
    pub(crate) fn head_id(&self) -> crate::Result<i64> {
        self.tx.max_id()
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

/// Appends inside a write transaction. A policy refusal is [`crate::Error::Refused`]: the
/// whole write is rolled back, and [`record_refusal`] then appends the `violation` (SPEC §2.5).
pub(crate) fn put(
    tx: &mut dyn SessionTxn,
    p: &mut Projections,
    out: &mut Vec<Event>,
    ev: NewEvent,
    clock: &Clock,
) -> crate::Result<Event> {
    match append_in(tx, &ev, clock) {
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
    tx: &mut dyn SessionTxn,
    p: &mut Projections,
    events: &mut Vec<Event>,
    clock: &Clock,
) -> crate::Result<()> {
    if !tx.has_policy_config()? {
        let ev = new_event(
            Kind::Config,
            DEFAULT_POLICY,
            meta(&[("source", Source::AutonomyKernel.into())]),
        )?;
        put(tx, p, events, ev, clock)?;
    }
    if p.mirror.retrieval.is_none() {
        let ev = new_event(
            Kind::Config,
            RetrievalConfig::DEFAULT_CONTENT,
            meta(&[("source", Source::AutonomyKernel.into())]),
        )?;
        put(tx, p, events, ev, clock)?;
    }
    Ok(())
}

/// After a write that [`put`] found forbidden was rolled back: appends the `violation` in a
/// transaction of its own and gives the error to report (exit 1). Other errors pass through.
pub(crate) fn record_refusal<W: Writer>(w: &mut W, e: crate::Error, clock: &Clock) -> crate::Error {
    match e {
        crate::Error::Refused(v) => record_violation(w, &v, clock).unwrap_or_else(|e| e),
        other => other,
    }
}

/// Appends a `summary_update` (FORMATS.md §7.4) against the newest summary when the gate lets
/// it through, or whatever the gate says with `force` (a `summarize` tick).
pub(crate) fn append_summary(s: &mut Session<'_, '_>, force: bool) -> crate::Result<()> {
    let previous = match s.p.autonomy.last_summary {
        Some(id) => s.tx.get(id)?,
        None => None,
    };
    let after = previous.as_ref().map_or(0, |e| e.id);
    let head = s.p.mirror.last_event_id;
    let inputs = derive::SummaryInputs {
        previous: previous.as_ref(),
        events_since: head.saturating_sub(after),
        reflections_since: s.tx.count_kind_after(Kind::Reflection, after)?,
        last_event_id: head,
        force,
    };
    if let Some((content, m)) = derive::summary_update(s.p, &inputs) {
        s.put(Kind::SummaryUpdate, content, m)?;
    }
    Ok(())
}

/// Folds events past the projections' last id into them (what other processes appended), or
/// projects them anew when one of those is an erasure ([`checkpoint::catch_up`]: the turn must
/// not write what it derives from erased text).
pub(crate) fn catch_up(tx: &dyn SessionTxn, p: &mut Projections) -> crate::Result<()> {
    checkpoint::catch_up(tx, p, None).map(|_| ())
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

    /// Erasure is session code over the store's traits: on the in-memory log, the policy
    /// check, the targets' checks, the erasure events and the scrubbed rows.
    #[test]
    fn erasure_checks_the_policy_then_scrubs_on_any_store() {
        use crate::store::memory::Memory;
        let clock = Clock::pinned("2025-11-24T05:55:41.123456Z").unwrap();
        let mut m = Memory::new();
        let said = NewEvent::new(Kind::UserMessage, "my card is 4111", Map::new()).unwrap();
        let said = append(&mut m, &said, &clock).unwrap();
        let policy = r#"{"forbid_sources":{"stranger":["erasure"]},"type":"policy"}"#;
        let policy = new_event(Kind::Config, policy, meta(&[("source", "test".into())])).unwrap();
        append(&mut m, &policy, &clock).unwrap();
        let done = erase(&mut m, &[said.id], false, "pii", "owner", &clock);
        let done = done.unwrap();
        assert_eq!(done.erased, vec![said.id]);
        assert_eq!(done.events[0].content, "erased event 1 (user_message): pii");
        assert!(m.get(said.id).unwrap().unwrap().is_blank());
        let again = erase(&mut m, &[said.id], false, "pii", "owner", &clock).unwrap_err();
        assert!(
            again.to_string().contains("already erased (by event 3)"),
            "{again}"
        );
        let head = m.max_id().unwrap();
        let refused = erase(&mut m, &[2], false, "x", "stranger", &clock).unwrap_err();
        assert!(
            matches!(refused, Error::PolicyViolation { .. }),
            "{refused}"
        );
        let violation = m.get(head + 1).unwrap().unwrap();
        assert_eq!(violation.kind, Kind::Violation);
        assert_eq!(m.max_id().unwrap(), head + 1, "nothing erased");
    }
}
