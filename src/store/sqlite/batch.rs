//! The write transaction ([`Batch`]): `BEGIN IMMEDIATE`, the head read once, the derived
//! parts restored if need be and caught up at the commit; on a cached PostgreSQL ledger, the
//! server's head row locked first and the events pushed to it before the cache commits.

use super::integrity::unsafe_head;
use super::reads::head;
use super::{
    derived, erase, map_err, vectors, Derived, Filter, Have, Head, Ledger, Reads, DERIVED,
};
use crate::event::{Event, Kind};
use crate::store::{log, notices, postgres, replica};
use crate::{Error, Result};
use rusqlite::{params, OptionalExtension, TransactionBehavior};
use serde_json::{Map, Value};
use std::path::PathBuf;

impl Ledger {
    /// Starts a write transaction (`BEGIN IMMEDIATE`: the head cannot move under it).
    pub fn begin(&mut self) -> Result<Batch<'_>> {
        self.begin_with(true)
    }

    /// [`Ledger::begin`]; on a cached PostgreSQL ledger, `lock` says whether the server's head
    /// row is locked for appends (a catch-up alone does not lock it, and appends nothing).
    pub(super) fn begin_with(&mut self, lock: bool) -> Result<Batch<'_>> {
        let busy_ms = self.busy_ms;
        let path = self.path.clone();
        // A cached PostgreSQL ledger: the server's head row is locked first (always in this
        // order, so two writers on one host cannot wait on each other).
        let (lease, server_head) = match &mut self.upstream {
            Some((up, _, _)) => {
                up.log.revive()?;
                let (lease, head) = replica::Lease::take(up, lock)?;
                (Some(lease), head)
            }
            None => (None, None),
        };
        // Writers take turns for the lock ([`busy`]): past the turnstile, then the lock.
        if let Some(b) = &self.busy {
            if !b.enter() {
                b.leave();
                return Err(Error::Busy(busy_ms));
            }
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate);
        if let Some(b) = &self.busy {
            b.leave();
        }
        let tx = tx.map_err(|e| map_err(e, &path, busy_ms))?;
        let head = head(&tx).map_err(|e| map_err(e, &path, busy_ms))?;
        if let Some(why) =
            unsafe_head(&tx, head.as_ref()).map_err(|e| map_err(e, &path, busy_ms))?
        {
            return Err(Error::Damaged { path, why });
        }
        let keep = kept_parts(&tx, &self.deferred).map_err(|e| map_err(e, &path, busy_ms))?;
        let mut batch = Batch {
            tx,
            head,
            keep,
            path,
            busy_ms,
            scratch: Vec::with_capacity(1024),
            lease: None,
            pulled: 0,
            vectors_put: Default::default(),
            scrubbed: false,
        };
        if let Some(lease) = lease {
            replica::pull(&mut batch, &lease)?;
            let at = batch.head.as_ref().map_or(0, |h| h.id);
            if lease.locks() && server_head.as_ref().map_or(0, |h| h.id) != at {
                return Err(Error::Damaged {
                    path: lease.log().url().into(),
                    why: format!(
                        "the head row says {} but the events end at {at}; nothing was written",
                        server_head.map_or(0, |h| h.id)
                    ),
                });
            }
            batch.pulled = at;
            batch.lease = Some(lease);
        }
        Ok(batch)
    }
}

/// The derived parts a write transaction on `tx` keeps, walked as one list: a part that lost
/// a table (or its state) is made whole again here, and every part writes keep (all but the
/// `deferred` ones) is caught up at the commit.
fn kept_parts(
    tx: &rusqlite::Transaction<'_>,
    deferred: &[Derived],
) -> rusqlite::Result<Vec<Derived>> {
    let schema = derived::Schema::read(tx)?;
    let mut keep = Vec::new();
    for d in DERIVED {
        if deferred.contains(&d) {
            continue;
        }
        if d.have_in(tx, &schema)? != Have::Whole {
            d.restore(tx)?;
        }
        if d.kept_by_writes() {
            keep.push(d);
        }
    }
    Ok(keep)
}

/// A cached PostgreSQL ledger's own bookkeeping: the last shared vector (by the server's
/// `seq`) the cache holds.
pub(super) const REPLICA_TABLE: &str = "CREATE TABLE IF NOT EXISTS pmm_replica (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    vectors_seq INTEGER NOT NULL
)";

/// An open write transaction. Dropping it without [`Batch::commit`] rolls everything back.
pub struct Batch<'a> {
    pub(super) tx: rusqlite::Transaction<'a>,
    pub(super) head: Option<Head>,
    /// The derived parts this transaction brings up to its head.
    pub(super) keep: Vec<Derived>,
    pub(super) path: PathBuf,
    pub(super) busy_ms: u64,
    pub(super) scratch: Vec<u8>,
    /// A cached PostgreSQL ledger's server, its head row locked by a writer ([`replica`]).
    pub(super) lease: Option<replica::Lease<'a>>,
    /// The head the cache was caught up to: events after it are this transaction's own.
    pub(super) pulled: i64,
    /// The vectors this transaction stored, `(model, dim, event ids)`, for a cached PostgreSQL
    /// ledger's server.
    pub(super) vectors_put: std::cell::RefCell<Vec<(String, usize, Vec<i64>)>>,
    /// Whether an erasure caught up from the server erased a text in this transaction (the
    /// WAL is truncated after the commit).
    pub(super) scrubbed: bool,
}

impl Batch<'_> {
    /// Erases the text of event `id` from the cache and its indexes, as an erasure caught up
    /// from the server says (the server's row is already erased): whether there was any.
    pub(crate) fn scrub_pulled(&mut self, id: i64) -> Result<bool> {
        let Some(ev) = self.get(id)? else {
            return Ok(false);
        };
        if ev.content.is_empty() && ev.meta == "{}" {
            return Ok(false);
        }
        erase::scrub(&self.tx, id, &ev.kind, &ev.content).map_err(|e| self.err(e))?;
        self.scrubbed = true;
        Ok(true)
    }

    /// Rewrites the full-text index without deleted tokens ([`erase::compact_index`]).
    pub(crate) fn compact_index(&self) -> Result<()> {
        erase::compact_index(&self.tx).map_err(|e| self.err(e))
    }

    /// The head as this transaction sees it.
    pub fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    pub(crate) fn insert(
        &mut self,
        kind: &Kind,
        content: &str,
        meta: &Map<String, Value>,
        ts: &str,
    ) -> Result<Event> {
        let ev = log::link(
            self.head.as_ref(),
            kind,
            content,
            meta,
            ts,
            &mut self.scratch,
        )?;
        self.insert_verbatim(&ev)?;
        Ok(ev)
    }

    /// Inserts an event verbatim (import): id, ts, meta text, prev_hash and hash as given.
    /// The caller has verified it.
    pub fn insert_verbatim(&mut self, ev: &Event) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    ev.id,
                    ev.ts,
                    ev.kind.as_str(),
                    ev.content,
                    ev.meta,
                    ev.prev_hash,
                    ev.hash
                ])
            })
            .map_err(|e| self.err(e))?;
        self.head = Some(Head {
            id: ev.id,
            hash: ev.hash.clone(),
        });
        Ok(())
    }

    /// Drops the unique index on `hash` for a bulk load into an empty ledger (the caller
    /// verifies that no hash repeats, and [`Batch::restore_hash_index`] re-creates it, sorted,
    /// before the commit, failing on a repeat): whether there was one to drop.
    pub fn defer_hash_index(&mut self) -> Result<bool> {
        let had: bool = self
            .tx
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type='index' AND name='idx_events_hash')",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if had {
            self.tx
                .execute_batch("DROP INDEX idx_events_hash;")
                .map_err(|e| self.err(e))?;
        }
        Ok(had)
    }

    /// Re-creates the index [`Batch::defer_hash_index`] dropped (the reference's definition).
    pub fn restore_hash_index(&mut self) -> Result<()> {
        self.tx
            .execute_batch("CREATE UNIQUE INDEX IF NOT EXISTS idx_events_hash ON events(hash);")
            .map_err(|e| self.err(e))
    }

    /// [`Ledger::put_vectors`] inside this transaction (a turn stores its two vectors with
    /// its events).
    pub fn put_vectors(&self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        let m = vectors::register(&self.tx, name, dim).map_err(|e| self.err(e))?;
        if m.dim != dim {
            return Err(Error::BadInput {
                at: None,
                msg: format!(
                    "embedding model {name} gives {dim} dimensions, but its stored vectors have {}: \
                     a different model under the same name (give it another name, or delete its vectors)",
                    m.dim
                ),
            });
        }
        // Every vector of the batch has the model's dimensions: none is dropped in silence.
        if let Some((id, odd)) = v.iter().find(|(_, x)| x.len() != dim) {
            return Err(Error::BadInput {
                at: None,
                msg: format!(
                    "embedding model {name}: the vector of event {id} has {} dimensions, not {dim}",
                    odd.len()
                ),
            });
        }
        if self.lease.is_some() {
            let ids = v.iter().map(|(id, _)| *id).collect();
            self.vectors_put
                .borrow_mut()
                .push((name.to_string(), dim, ids));
        }
        vectors::put(&self.tx, m, v).map_err(|e| self.err(e))
    }

    /// The vectors this transaction stored, as kept, for the server: `(model, dim, id, bytes)`.
    pub(super) fn vectors_to_push(&self) -> Result<Vec<postgres::SharedVector>> {
        let mut out = Vec::new();
        for (name, dim, ids) in self.vectors_put.borrow().iter() {
            let Some(m) = vectors::model(&self.tx, name).map_err(|e| self.err(e))? else {
                continue;
            };
            for (id, q) in vectors::stored_of(&self.tx, m, ids).map_err(|e| self.err(e))? {
                out.push(postgres::SharedVector {
                    model: name.clone(),
                    dim: *dim,
                    id,
                    q,
                });
            }
        }
        Ok(out)
    }

    /// Stores vectors copied from the server (`(model, dim, id, bytes)`), as [`Batch::put_vectors`]
    /// would have stored them here (half floats round-trip exactly).
    pub(crate) fn put_pulled_vectors(&self, rows: &[postgres::SharedVector]) -> Result<()> {
        for postgres::SharedVector {
            model: name,
            dim,
            id,
            q,
        } in rows
        {
            let m = vectors::register(&self.tx, name, *dim).map_err(|e| self.err(e))?;
            if m.dim == *dim {
                vectors::put(&self.tx, m, &[(*id, vectors::dequantize(q))])
                    .map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    /// A cached PostgreSQL ledger's bookkeeping ([`replica`]): the server's `seq` of the last
    /// shared vector this cache holds (0: none yet).
    pub(crate) fn pulled_vectors_seq(&self) -> Result<i64> {
        let sql = |e: rusqlite::Error| Error::bad_input(None, format!("the host's cache: {e}"));
        self.tx.execute_batch(REPLICA_TABLE).map_err(sql)?;
        self.tx
            .query_row(
                "SELECT vectors_seq FROM pmm_replica WHERE one = 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map(|seq| seq.unwrap_or(0))
            .map_err(sql)
    }

    /// Records [`Batch::pulled_vectors_seq`].
    pub(crate) fn set_pulled_vectors_seq(&self, seq: i64) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO pmm_replica (one, vectors_seq) VALUES (1, ?1)
                 ON CONFLICT (one) DO UPDATE SET vectors_seq = excluded.vectors_seq",
                [seq],
            )
            .map(drop)
            .map_err(|e| Error::bad_input(None, format!("the host's cache: {e}")))
    }

    /// Brings the full-text index and the Merkle tree up to the events appended so far, inside
    /// this transaction. [`Batch::commit`] does it; a long import does it every so often too,
    /// so that it reads back events it wrote recently: SQLite finds a page of a large
    /// transaction's WAL by looking through the WAL's index newest part first, so reading
    /// every event back at the commit of a 10^7-event import cost time in proportion to the
    /// WAL for each page (an import grew faster than the ledger).
    pub fn catch_up(&self) -> Result<()> {
        let head = self.head.as_ref().map_or(0, |h| h.id);
        for d in &self.keep {
            d.catch_up(&self.tx, head).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Makes everything appended in this transaction durable at once, with the full-text
    /// index and the Merkle tree brought up to the new head in the same transaction.
    pub fn commit(mut self) -> Result<()> {
        // A cache's derived parts are this host's alone: they are caught up after the
        // server's commit, which frees the head lock for the next host that much sooner.
        let leased = self.lease.is_some();
        if !leased {
            self.catch_up()?;
        }
        let (path, busy) = (self.path.clone(), self.busy_ms);
        let mut on_server = false;
        if let Some(lease) = self.lease.take() {
            // The server first: once it has committed, the events exist; a cache that then
            // fails to commit only lags, and the next catch-up reads them back.
            let mine = Filter {
                since: self.pulled.checked_add(1),
                ..Filter::default()
            };
            let vectors = self.vectors_to_push()?;
            let head = self.head.clone();
            on_server = lease.commit(
                &vectors,
                &mut |push| {
                    self.scan(&mine, |ev| {
                        push(&ev)?;
                        Ok(true)
                    })
                },
                head.as_ref(),
            )?;
        }
        let caught_up = if leased { self.catch_up() } else { Ok(()) };
        let scrubbed = self.scrubbed;
        if scrubbed {
            erase::mark_erasure(&path);
        }
        let committed =
            caught_up.and_then(|()| self.tx.commit().map_err(|e| map_err(e, &path, busy)));
        match committed {
            // What the server committed is the truth: say the append succeeded, and that
            // this host's copy lags (the next program catches it up).
            Err(e) if on_server => {
                notices::push(format!(
                    "the events are committed on the server, but this host's cache of them could not be ({e}); it is behind, and is caught up by the next program that opens the ledger"
                ));
                Ok(())
            }
            Err(e) => Err(e),
            Ok(()) => {
                if scrubbed {
                    erase::truncate_cache_wal(&path);
                }
                Ok(())
            }
        }
    }
}
