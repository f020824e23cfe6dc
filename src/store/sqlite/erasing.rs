//! Erasing events through a ledger (`Ledger::erase`, for the store's tests) or inside a write transaction
//! ([`Batch::erase_within`]): the targets checked, the `erasure` events appended, the text
//! scrubbed ([`super::erase`] holds the SQL).

use super::{erase, Batch, Ledger, Reads};
use crate::event::{Clock, Event, Kind};
use crate::{Error, Result};
use serde_json::{Map, Value};

/// What `Ledger::erase` (the store's tests') did.
#[derive(Debug, Clone)]
pub struct Erased {
    /// The `erasure` events appended, one per erased event, in id order.
    pub events: Vec<Event>,
    /// The ids erased, in order (with their quotes when asked).
    pub erased: Vec<i64>,
    /// Whether the WAL was checkpointed and truncated (`false`: a reader held part of it; the
    /// next checkpoint copies and truncates it).
    pub wal_truncated: bool,
}

/// An event about to be erased, as the transaction read it.
pub(super) struct EraseTarget {
    id: i64,
    kind: Kind,
    hash: String,
    content: String,
}

impl Ledger {
    /// The events after `id` whose content or meta quote `content` (event `id`'s text): the
    /// summaries, lifetime-memory chunks and reflections an erasure should take along
    /// (`--with-quotes`). Texts shorter than [`MIN_QUOTE_CHARS`](super::erase::MIN_QUOTE_CHARS) are not looked for.
    pub fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>> {
        erase::quoting(&self.conn, id, content).map_err(|e| self.err(e))
    }

    /// [`Ledger::quoting`] for many events at once, in one pass over the later events of
    /// the quoting kinds and `embedding_add` (`targets`: `(id, content)`): quoted id → the
    /// ids that quote it, in id order; events quoted by none are left out.
    pub fn quoting_many(
        &self,
        targets: &[(i64, String)],
    ) -> Result<std::collections::BTreeMap<i64, Vec<i64>>> {
        erase::quoting_many(&self.conn, targets).map_err(|e| self.err(e))
    }

    /// Checkpoints the WAL into the file and truncates it (after a write transaction that
    /// erased: the erased text may sit in its frames); `false` when a reader kept part of it.
    pub fn truncate_wal(&self) -> Result<bool> {
        erase::truncate_wal(&self.conn).map_err(|e| self.err(e))
    }

    /// The `erasure` event that names event `id`, if it was erased.
    pub fn erased_by(&self, id: i64) -> Result<Option<i64>> {
        erase::erased_by(&self.conn, id).map_err(|e| self.err(e))
    }
}

impl Batch<'_> {
    /// Event `id` as an erasure target, or why it cannot be one (exit 2).
    pub(super) fn erasable(&self, id: i64) -> Result<EraseTarget> {
        let bad = |msg: String| Error::bad_input(Some("--erase".into()), msg);
        let head = self.head.as_ref().map_or(0, |h| h.id);
        let Some(ev) = self.get(id)? else {
            return Err(bad(format!(
                "no event {id} (the ledger's ids run from 1 to {head})"
            )));
        };
        if ev.kind == Kind::Erasure {
            return Err(bad(format!(
                "event {id} is an erasure: erasures are not erased"
            )));
        }
        if let Some(by) = erase::erased_by(&self.tx, id).map_err(|e| self.err(e))? {
            return Err(bad(format!("event {id} is already erased (by event {by})")));
        }
        let Some(hash) = ev.hash.filter(|h| !h.is_empty()) else {
            return Err(bad(format!(
                "event {id} has no hash to name (run pmm-verify)"
            )));
        };
        Ok(EraseTarget {
            id,
            kind: ev.kind,
            hash,
            content: ev.content,
        })
    }

    /// Erases events inside this write transaction, as `Ledger::erase` does (the caller
    /// checked the policy): each `(id, extra)` gets its `erasure` event, whose meta holds
    /// `extra` besides the usual keys; then the full-text index is rewritten once. Freed pages
    /// are zeroed (`secure_delete`); the caller truncates the WAL after the commit
    /// ([`Ledger::truncate_wal`]). A retention pass of a tick writes its erasures so.
    pub fn erase_within(
        &mut self,
        ids: &[(i64, Map<String, Value>)],
        reason: &str,
        actor: &str,
        clock: &Clock,
    ) -> Result<Vec<Event>> {
        self.tx
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        let mut events = Vec::with_capacity(ids.len());
        for (id, extra) in ids {
            let target = self.erasable(*id)?;
            events.push(self.erase(&target, reason, actor, clock, Some(extra))?);
        }
        if !events.is_empty() {
            erase::compact_index(&self.tx).map_err(|e| self.err(e))?;
        }
        Ok(events)
    }

    /// What one retention rule selects in this transaction (see
    /// [`crate::event::config::RetentionRule`]): the events before `before` of `kind` and by
    /// `source` (when given) older than `cutoff` that still have text, in id order, at most
    /// `limit`.
    pub fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>> {
        erase::retention_candidates(&self.tx, before, kind, source, cutoff, limit)
            .map_err(|e| self.err(e))
    }

    /// Appends the `erasure` event for `t` and removes its text (see `Ledger::erase` (tests of the store)).
    pub(super) fn erase(
        &mut self,
        t: &EraseTarget,
        reason: &str,
        actor: &str,
        clock: &Clock,
        extra: Option<&Map<String, Value>>,
    ) -> Result<Event> {
        let named = Event {
            id: t.id,
            ts: String::new(),
            kind: t.kind.clone(),
            content: String::new(),
            meta: String::new(),
            prev_hash: None,
            hash: Some(t.hash.clone()),
        };
        let ev = crate::event::erasure::erasure(&named, reason, actor, extra);
        let event = self.insert(&ev.kind, &ev.content, &ev.meta, &clock.ts())?;
        erase::scrub(&self.tx, t.id, &t.kind, &t.content).map_err(|e| self.err(e))?;
        Ok(event)
    }
}

#[cfg(test)]
impl Ledger {
    /// Erases events `ids` (`pmm-append --erase`): in one write transaction, an `erasure`
    /// event per id (naming it, its hash, its kind and `reason`, written by `actor`) and the
    /// event's content and meta removed from its row and from every derived table; then the
    /// WAL is checkpointed and truncated. Bad ids, erasure events and events already erased
    /// are refused (exit 2) before anything is written. `refuse` is the write session's policy
    /// check, run inside the transaction once the targets are known: an error it returns is
    /// committed with whatever it appended (a `violation`) and returned, and nothing is erased.
    /// With `with_quotes`, the later events that quote an erased text ([`Ledger::quoting`])
    /// are erased too, looked for inside the transaction: one appended by another process (or
    /// caught up from the server) just before it is not missed.
    ///
    /// Tests of the store only: programs erase through the write session, in a transaction
    /// of the program-facing ledger (`store::Ledger::begin`, which on a PostgreSQL ledger
    /// locks the server's head).
    pub(crate) fn erase(
        &mut self,
        ids: &[i64],
        with_quotes: bool,
        reason: &str,
        actor: &str,
        clock: &Clock,
        refuse: &mut dyn FnMut(&mut Batch<'_>) -> Result<Option<Error>>,
    ) -> Result<Erased> {
        self.conn
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        let mut batch = self.begin()?;
        let mut ids = ids.to_vec();
        if with_quotes {
            for id in ids.clone() {
                if let Some(ev) = batch.get(id)? {
                    ids.extend(
                        erase::quoting(&batch.tx, id, &ev.content).map_err(|e| batch.err(e))?,
                    );
                }
            }
            ids.sort_unstable();
            ids.dedup();
        }
        let targets = ids
            .iter()
            .map(|&id| batch.erasable(id))
            .collect::<Result<Vec<_>>>()?;
        if let Some(e) = refuse(&mut batch)? {
            batch.commit()?;
            return Err(e);
        }
        let mut events = Vec::with_capacity(targets.len());
        for target in &targets {
            events.push(batch.erase(target, reason, actor, clock, None)?);
        }
        erase::compact_index(&batch.tx).map_err(|e| batch.err(e))?;
        batch.commit()?;
        let wal_truncated = erase::truncate_wal(&self.conn).map_err(|e| self.err(e))?;
        Ok(Erased {
            events,
            erased: ids,
            wal_truncated,
        })
    }
}
