//! The write transaction ([`Batch`]): `BEGIN IMMEDIATE`, the head read once, the derived
//! parts restored if need be and caught up at the commit. A host's cache of a PostgreSQL
//! ledger (`store::replica`) runs its writes in one of these, wrapped: nothing here knows of
//! a server.

use super::integrity::unsafe_head;
use super::reads::head;
use super::schema::{self, Schema};
use super::{erase, map_err, vectors, Derived, Have, Head, Ledger, Reads, DERIVED};
use crate::event::{Event, Kind};
use crate::store::log;
use crate::{Error, Result};
use rusqlite::{params, OptionalExtension, TransactionBehavior};
use serde_json::{Map, Value};
use std::path::PathBuf;

impl Ledger {
    /// Starts a write transaction (`BEGIN IMMEDIATE`: the head cannot move under it).
    pub fn begin(&mut self) -> Result<Batch<'_>> {
        let busy_ms = self.busy_ms;
        let path = self.path.clone();
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
        // Nothing of this transaction's own yet: the schema it sees is the committed one,
        // kept with the connection (read again only when it changed since).
        let schema = schema::at_begin(&tx).map_err(|e| map_err(e, &path, busy_ms))?;
        let head = head(&tx).map_err(|e| map_err(e, &path, busy_ms))?;
        if let Some(why) =
            unsafe_head(&tx, &schema, head.as_ref()).map_err(|e| map_err(e, &path, busy_ms))?
        {
            return Err(Error::Damaged { path, why });
        }
        let keep =
            kept_parts(&tx, &schema, &self.deferred).map_err(|e| map_err(e, &path, busy_ms))?;
        Ok(Batch {
            tx,
            head,
            keep,
            path,
            busy_ms,
            scratch: Vec::with_capacity(1024),
            scrubbed: false,
        })
    }
}

/// The derived parts a write transaction on `tx` keeps, walked as one list: a part that lost
/// a table (or its state) is made whole again here, and every part writes keep (all but the
/// `deferred` ones) is caught up at the commit.
fn kept_parts(
    tx: &rusqlite::Transaction<'_>,
    schema: &Schema,
    deferred: &[Derived],
) -> rusqlite::Result<Vec<Derived>> {
    let mut keep = Vec::new();
    for d in DERIVED {
        if deferred.contains(&d) {
            continue;
        }
        if d.have_in(tx, schema)? != Have::Whole {
            d.restore(tx)?;
        }
        if d.kept_by_writes() {
            keep.push(d);
        }
    }
    Ok(keep)
}

/// A host cache's own bookkeeping (`store::replica`): the last shared vector (by the
/// server's `seq`) the cache holds.
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
    /// Whether [`Batch::scrub_pulled`] erased a text in this transaction (the WAL is
    /// truncated after the commit).
    pub(super) scrubbed: bool,
}

impl Batch<'_> {
    /// Erases the text of event `id` from the file and its indexes, as an erasure copied from
    /// elsewhere says (a host cache catching up: the server's row is already erased): whether
    /// there was any.
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
        let had = schema::of(&self.tx)
            .map_err(|e| self.err(e))?
            .has_index("idx_events_hash");
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
        vectors::put(&self.tx, m, v).map_err(|e| self.err(e))
    }

    /// The vectors of model `name` stored for events `ids`, as kept (half floats): what a
    /// host cache pushes to its server after [`Batch::put_vectors`]. `(id, bytes)`.
    pub(crate) fn stored_vectors_of(&self, name: &str, ids: &[i64]) -> Result<Vec<(i64, Vec<u8>)>> {
        let Some(m) = vectors::model(&self.tx, name).map_err(|e| self.err(e))? else {
            return Ok(Vec::new());
        };
        vectors::stored_of(&self.tx, m, ids).map_err(|e| self.err(e))
    }

    /// Stores one vector of model `name` (`dim` dimensions) as kept elsewhere (half floats, as
    /// [`Batch::stored_vectors_of`] gives them), as [`Batch::put_vectors`] would have stored it
    /// (half floats round-trip exactly); one of other dimensions than the model's is skipped.
    pub(crate) fn put_stored_vector(
        &self,
        name: &str,
        dim: usize,
        id: i64,
        q: &[u8],
    ) -> Result<()> {
        let m = vectors::register(&self.tx, name, dim).map_err(|e| self.err(e))?;
        if m.dim == dim {
            vectors::put(&self.tx, m, &[(id, vectors::dequantize(q))]).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// A host cache's bookkeeping (`store::replica`): the server's `seq` of the last shared
    /// vector this cache holds (0: none yet).
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
    pub fn commit(self) -> Result<()> {
        self.catch_up()?;
        self.commit_caught_up(Ok(()))
    }

    /// Commits, once the derived parts were brought up to the head (`caught_up`: how that
    /// went; its error is returned and nothing committed). A host cache (`store::replica`)
    /// catches them up only after its server's commit, which frees the server's head lock for
    /// the next host that much sooner. An erasure scrubbed here is marked before the commit and
    /// its WAL truncated after.
    pub(crate) fn commit_caught_up(self, caught_up: Result<()>) -> Result<()> {
        let (path, busy) = (self.path.clone(), self.busy_ms);
        let scrubbed = self.scrubbed;
        if scrubbed {
            erase::mark_erasure(&path);
        }
        caught_up.and_then(|()| self.tx.commit().map_err(|e| map_err(e, &path, busy)))?;
        if scrubbed {
            erase::truncate_cache_wal(&path);
        }
        Ok(())
    }

    /// Rebuilds derived parts `parts` from the events in this transaction
    /// (`Derived::rebuild`), making again whatever of them is missing.
    pub fn rebuild(&self, parts: &[Derived]) -> Result<()> {
        let head = self.head.as_ref().map_or(0, |h| h.id);
        for d in parts {
            d.rebuild(&self.tx, head).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Brings the full-text index up to the head, `20_000` events at a time, calling
    /// `progress(done, total)` ([`Ledger::catch_up_index`]).
    pub fn catch_up_index(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let head = self.head.as_ref().map_or(0, |h| h.id);
        super::fts::catch_up(&self.tx, head, 20_000, progress).map_err(|e| self.err(e))
    }
}
