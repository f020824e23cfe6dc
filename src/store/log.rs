//! The ledger as an event log behind two small traits: [`EventLog`] reads (head, one event, a
//! scan in id order, the tail, counts) and [`Txn`] writes, which only links and inserts — no write policy, no range checks, no derived
//! index (those stay above the log, in [`crate::session`], and move to a write session).
//!
//! Every backend implements both, and one contract suite (`store/contract.rs`) runs the same
//! cases on each: the SQLite file ([`super::sqlite::Ledger`]), a PostgreSQL ledger as a host
//! runs it ([`super::replica::Cached`]), PostgreSQL alone (`store/postgres/`). The hash rule lives in one place, [`link`], so that every
//! backend writes the bytes `pmm-append` writes.

use super::Indexes;
use crate::chain::event_digest;
use crate::event::{Clock, Event, Kind, NewEvent};
use crate::{canon, Error, Result};
use serde_json::{Map, Value};

/// The newest event's id and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Its id.
    pub id: i64,
    /// Its stored hash.
    pub hash: Option<String>,
}

/// Which events a scan returns.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only ids ≥ this.
    pub since: Option<i64>,
    /// Only ids ≤ this.
    pub until: Option<i64>,
    /// Only these kinds (all when empty).
    pub kinds: Vec<Kind>,
}

/// How many events [`EventLog::newest_of_kind`] reads at a time by default.
pub const NEWEST_PAGE: usize = 256;

/// Reading the log: the same on a connection and inside a write transaction (which sees its
/// own inserts). Every reader above the store reads events through this trait (and the
/// derived indexes through [`super::Indexes`]); the backend's connection is not part of it.
///
/// The provided methods are correct on any backend, built on the required ones; a backend
/// overrides those it can answer from an index (SQLite overrides every one).
pub trait EventLog {
    /// The newest event's id and hash, if any.
    fn head(&self) -> Result<Option<Head>>;
    /// One event by id.
    fn get(&self, id: i64) -> Result<Option<Event>>;
    /// Calls `each` for every event that passes `filter`, in id order, until it returns
    /// `false`.
    fn scan(&self, filter: &Filter, each: &mut dyn FnMut(Event) -> Result<bool>) -> Result<()>;
    /// The last `n` events that pass `filter`, oldest first.
    fn tail(&self, filter: &Filter, n: usize) -> Result<Vec<Event>>;
    /// How many events of `kind` have an id above `after`.
    fn count_kind_after(&self, kind: Kind, after: i64) -> Result<u64>;
    /// The id of the event whose hash is `hash`.
    fn id_of_hash(&self, hash: &str) -> Result<Option<i64>>;

    /// The newest event's id (0 on an empty log).
    fn max_id(&self) -> Result<i64> {
        Ok(self.head()?.map_or(0, |h| h.id))
    }
    /// One event by id, shared (a caching reader hands out the copy it keeps).
    fn get_shared(&self, id: i64) -> Result<Option<std::sync::Arc<Event>>> {
        Ok(self.get(id)?.map(std::sync::Arc::new))
    }
    /// A hint: `event` may be read by id again soon (a caching reader keeps it).
    fn remember(&self, _event: std::sync::Arc<Event>) {}
    /// Calls `each` with the id and content of every event of `kind`, newest first, until it
    /// returns `false`. Read in pages of [`NEWEST_PAGE`] (a caller that stops early reads
    /// one).
    fn newest_of_kind(&self, kind: Kind, each: &mut dyn FnMut(i64, &str) -> bool) -> Result<()> {
        let mut filter = Filter {
            kinds: vec![kind],
            ..Filter::default()
        };
        loop {
            let page = self.tail(&filter, NEWEST_PAGE)?;
            for ev in page.iter().rev() {
                if !each(ev.id, &ev.content) {
                    return Ok(());
                }
            }
            match page.first() {
                Some(oldest) if page.len() == NEWEST_PAGE => filter.until = Some(oldest.id - 1),
                _ => return Ok(()),
            }
        }
    }
    /// The newest events of `kind`, newest first, at most `limit`.
    fn last_of_kind(&self, kind: Kind, limit: usize) -> Result<Vec<Event>> {
        let filter = Filter {
            kinds: vec![kind],
            ..Filter::default()
        };
        let mut all = self.tail(&filter, limit)?;
        all.reverse();
        Ok(all)
    }
    /// The id of the newest `erasure` event (0: none).
    fn last_erasure(&self) -> Result<i64> {
        Ok(self
            .last_of_kind(Kind::Erasure, 1)?
            .first()
            .map_or(0, |e| e.id))
    }
    /// The newest event of `kind` whose content contains `needle`.
    fn find_kind_containing(&self, kind: Kind, needle: &str) -> Result<Option<i64>> {
        let mut found = None;
        self.newest_of_kind(kind, &mut |id, content| {
            if content.contains(needle) {
                found = Some(id);
            }
            found.is_none()
        })?;
        Ok(found)
    }
    /// Whether a `config` event mentions a policy.
    fn has_policy_config(&self) -> Result<bool> {
        Ok(self
            .find_kind_containing(Kind::Config, "\"policy\"")?
            .is_some())
    }
}

/// Whether [`Txn::insert_verbatim`] keeps an event whose `prev_hash` is not the head's hash
/// (an import's `--accept-forks`, for a source whose chain is already broken). Ids must
/// continue the head either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Refuse it (the default): a fork is an error, never a state.
    Continue,
    /// Keep it verbatim (a source's own fork: PostgreSQL marks such an event, and only marked
    /// events are exempt from its one-successor rule).
    AcceptBroken,
}

/// One write transaction on the log: links and inserts, nothing else. Dropped without
/// [`Writer::transact`] returning `Ok`, nothing of it exists.
pub trait Txn: EventLog {
    /// Appends `ev` after the head as this transaction sees it: the next id, the head's hash
    /// as `prev_hash`, the canonical meta text and the chain's hash ([`link`]).
    fn append_linked(&mut self, ev: &NewEvent, ts: &str) -> Result<Event>;
    /// Inserts `ev` as given (an import: id, ts, meta text, prev_hash and hash verbatim; the
    /// caller verified its hash). Its id must be the head's plus one, and unless `links` says
    /// otherwise its `prev_hash` the head's hash.
    fn insert_verbatim(&mut self, ev: &Event, links: Links) -> Result<()>;
}

/// A connection that can write: runs `f` in one write transaction and commits it, or rolls it
/// back when `f` fails. A backend may run `f` again when the database asks for a retry (a
/// serialization failure or a deadlock on PostgreSQL), so `f` must only read and write
/// through the [`Txn`] it is handed — never call a model or print.
pub trait Writer: EventLog {
    /// One write transaction around `f`.
    fn transact<T>(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<T>) -> Result<T>;

    /// [`Txn::append_linked`] in a transaction of its own.
    fn append_one(&mut self, ev: &NewEvent, ts: &str) -> Result<Event> {
        self.transact(&mut |tx| tx.append_linked(ev, ts))
    }

    /// Appends `ev` at `clock`'s time in a transaction of its own, linked to the head as it is
    /// when the append takes place: for an event whose checks read nothing of the ledger
    /// (`session::append` knows which). The same event as [`Writer::append_one`] would make
    /// after the same head; a backend may make it in fewer steps (a PostgreSQL ledger has the
    /// server link it, in one round trip: `replica::Cached`). By default, a transaction whose
    /// event is timed when it has begun.
    fn append_independent(&mut self, ev: &NewEvent, clock: &Clock) -> Result<Event> {
        self.transact(&mut |tx| tx.append_linked(ev, &clock.ts()))
    }

    /// [`Writer::append_independent`] of each of `evs`, in order, handing each event to
    /// `appended` once it is committed; a failure leaves the events before it committed
    /// (and handed over). A backend may commit several in one transaction (a PostgreSQL
    /// ledger, in one round trip); by default, a transaction each.
    fn append_independents(
        &mut self,
        evs: &[NewEvent],
        clock: &Clock,
        appended: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<()> {
        for ev in evs {
            appended(self.append_independent(ev, clock)?)?;
        }
        Ok(())
    }
}

/// The chain's rule, for every backend: the event `ev` becomes when appended after `head` at
/// `ts` — id `head + 1` (1 on an empty log), `prev_hash` the head's hash, `meta` its canonical
/// JSON text, `hash` the sha256 of the canonical payload ([`event_digest`]). `scratch` is a
/// buffer kept between calls.
pub fn link(
    head: Option<&Head>,
    kind: &Kind,
    content: &str,
    meta: &Map<String, Value>,
    ts: &str,
    scratch: &mut Vec<u8>,
) -> Result<Event> {
    let prev_hash = head.and_then(|h| h.hash.clone());
    let id = match head {
        None => 1,
        Some(h) => h.id.checked_add(1).ok_or_else(|| {
            Error::bad_input(
                None,
                format!("the head's id is {}: no event can follow it", h.id),
            )
        })?,
    };
    let digest = event_digest(scratch, kind.as_str(), content, meta, prev_hash.as_deref())
        .map_err(|e| Error::bad_input(None, e.to_string()))?;
    let meta_text = canon::to_string(&Value::Object(meta.clone()))
        .map_err(|e| Error::bad_input(None, e.to_string()))?;
    Ok(Event {
        id,
        ts: ts.into(),
        kind: kind.clone(),
        content: content.into(),
        meta: meta_text,
        prev_hash,
        hash: Some(digest.to_string()),
    })
}

/// Why `ev` cannot be inserted verbatim after `head`, if it cannot: ids continue the head,
/// and (with [`Links::Continue`]) so does the link.
pub fn verbatim_refusal(head: Option<&Head>, ev: &Event, links: Links) -> Option<String> {
    let want = head.map_or(Some(1), |h| h.id.checked_add(1));
    if want != Some(ev.id) {
        return Some(match want {
            Some(w) => format!(
                "event {} does not continue the ledger: the next id is {w}",
                ev.id
            ),
            None => format!("event {}: no event can follow the head", ev.id),
        });
    }
    let head_hash = head.and_then(|h| h.hash.as_deref());
    if links == Links::Continue && ev.prev_hash.as_deref() != head_hash {
        return Some(format!(
            "event {}: its prev_hash {} is not the head's hash {}: that would fork the chain",
            ev.id,
            ev.prev_hash.as_deref().unwrap_or("null"),
            head_hash.unwrap_or("null"),
        ));
    }
    None
}

/// The refusal of a fork, as an error (exit 2, nothing written).
pub fn fork_error(why: String) -> Error {
    Error::ImportRefused(why)
}

/// What a write session ([`crate::session::Session`]) needs of its transaction besides
/// linking and inserting: the capabilities of the derived parts that a writer's events touch.
/// A backend implements it on its write transaction; the in-memory log keeps simple versions.
pub trait SessionTxn: Txn {
    /// Stores the vectors `v` (event id, vector) of embedding model `name` (`dim`
    /// dimensions) inside this transaction: how many were new.
    fn put_vectors(&mut self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize>;
    /// What one retention rule selects: the events before `before`, of `kind` and written by
    /// `source` (each when given), whose time is before `cutoff`, that still have text, never
    /// an `erasure` or a `config`; in id order, at most `limit`.
    fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>>;
    /// The later events that quote `content` (event `id`'s text) or identify it (its
    /// `embedding_add`s), in id order: what an erasure `--with-quotes` takes along.
    fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>>;
    /// The first `erasure` event that names event `id`, if one does.
    fn erased_by(&self, id: i64) -> Result<Option<i64>>;
    /// Removes `target`'s text from its row and from every derived part that could hold it;
    /// the `erasure` event naming it is already appended in this transaction.
    fn scrub(&mut self, target: &Event) -> Result<()>;
    /// After the last [`SessionTxn::scrub`] of a transaction: rewrites what still holds the
    /// erased texts' traces (SQLite: the full-text index's segments).
    fn compact_after_erasure(&mut self) -> Result<()>;
    /// [`Indexes::load_checkpoint`] inside the transaction, in a form a `dyn SessionTxn`
    /// can call: `read` gets the bytes of the newest checkpoint `name` of `format` at or
    /// below event `max_id` that still matches the log, and says whether it could read them;
    /// that checkpoint's event id when it could (the in-memory log keeps none).
    fn checkpoint(
        &self,
        name: &str,
        format: i64,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<i64>>;
}

/// A checkpoint as the store keeps it: bytes it never reads, under the name and format that
/// the folding module chooses (`projection::checkpoint`), at the event they stand for; only
/// kept while that event's hash still matches the log, and never across a later erasure.
pub struct Checkpoint<'a> {
    /// Its name in `pmm_checkpoints`.
    pub name: &'a str,
    /// The format of its bytes: a reader asks for one, and others are not handed out.
    pub format: i64,
    /// The event it stands at.
    pub event_id: i64,
    /// The bytes.
    pub bytes: &'a [u8],
}

/// How the body of a write session ends its transaction ([`SessionWriter::session_ending`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending<T> {
    /// Commit what was written; the session's value is `T`.
    Commit(T),
    /// Undo what was written, and still give `T`: a body that found, against the true head,
    /// that nothing is to be written after all (a thinking tick's claim that another tick
    /// took first) says so without an error.
    RollBack(T),
}

/// A connection a write session runs on: [`Writer`] with the session's transaction, and what
/// a writer does around it (reading projections, keeping their checkpoint, forgetting the
/// bytes an erasure leaves beside the database).
pub trait SessionWriter: Writer + Indexes {
    /// One write transaction around `f`, committed or rolled back as `f`'s [`Ending`] says,
    /// and rolled back when `f` fails. Unlike [`Writer::transact`], `f` runs once: it folds
    /// what it writes into the caller's projections, which a second run would fold twice (a
    /// backend that must retry takes its locks before `f` runs).
    fn session_ending<T>(
        &mut self,
        f: &mut dyn FnMut(&mut dyn SessionTxn) -> Result<Ending<T>>,
    ) -> Result<T>;
    /// [`SessionWriter::session_ending`] for a body that commits whenever it returns `Ok`.
    fn session<T>(&mut self, f: &mut dyn FnMut(&mut dyn SessionTxn) -> Result<T>) -> Result<T> {
        self.session_ending(&mut |tx| f(tx).map(Ending::Commit))
    }
    /// After a committed erasure: forgets the bytes of erased texts the database keeps beside
    /// its tables (SQLite: the WAL, checkpointed and truncated). `false` when a reader kept
    /// part of them (the next checkpoint does it).
    fn forget_erased_bytes(&mut self) -> Result<bool>;
    /// Keeps a projection checkpoint's bytes, best effort (a writer that folded many events).
    fn keep_checkpoint(&mut self, c: &Checkpoint);
    /// Runs `f` on this connection with every read of it seeing one snapshot (SQLite: one
    /// read transaction, its lock taken once for many small reads).
    fn in_snapshot<T>(&self, f: &mut dyn FnMut(&Self) -> Result<T>) -> Result<T>
    where
        Self: Sized,
    {
        f(self)
    }
}
