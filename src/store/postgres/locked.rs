//! The operations of a host's cache on the server ([`crate::store::replica`]): the head row
//! locked across the cache's own write transaction, the events and vectors it made pushed in,
//! the lock released at the commit; and the reads a catch-up makes.

use super::{explain, jitter, q_page, retryable, row_to_event, Head, PgLog, COLUMNS};
use crate::event::{Event, Kind};
use crate::store::log::fork_error;
use crate::store::Filter;
use crate::Result;
use postgres::error::SqlState;
use postgres::IsolationLevel;
use std::time::{Duration, Instant};

/// The operations of a host's cache of this ledger ([`crate::store::replica`]): the head lock
/// held across a local write transaction, the events it made pushed in, the lock released.
/// The transaction is plain SQL on the connection (`BEGIN` … `COMMIT`), so that it can live
/// as long as the local one beside it.
impl PgLog {
    /// Begins a transaction and locks the head row: the ledger's head as of the lock. Retried
    /// like an append ([`Writer::transact`]) when the session's isolation level makes the lock
    /// fail with a serialization failure.
    pub(crate) fn lock_head(&mut self) -> Result<Option<Head>> {
        let started = Instant::now();
        let budget = Duration::from_millis(self.ctx.busy_ms);
        let begin = match self.isolation {
            IsolationLevel::RepeatableRead => "BEGIN ISOLATION LEVEL REPEATABLE READ",
            IsolationLevel::Serializable => "BEGIN ISOLATION LEVEL SERIALIZABLE",
            _ => "BEGIN ISOLATION LEVEL READ COMMITTED",
        };
        let mut attempt: u32 = 0;
        loop {
            let c = self.client.get_mut();
            let locked = c
                .batch_execute(begin)
                .and_then(|()| c.query_one("SELECT id, hash FROM pmm_head FOR UPDATE", &[]));
            match locked {
                Ok(row) => {
                    let (id, hash): (i64, Option<String>) = (row.get(0), row.get(1));
                    return Ok((id > 0).then_some(Head { id, hash }));
                }
                Err(e) => {
                    let _ = c.batch_execute("ROLLBACK");
                    if !retryable(&e) || started.elapsed() >= budget {
                        return Err(self.err(e));
                    }
                    attempt += 1;
                    self.retries += 1;
                    std::thread::sleep(jitter(2u64 << attempt.min(5)));
                }
            }
        }
    }

    /// Inserts the events `feed` hands over (made by a local write transaction after the
    /// locked head `head`, in id order) inside the transaction [`PgLog::lock_head`] began, in
    /// one binary `COPY`; erases the text an erasure among them names; moves the head row to
    /// the last. A repeated hash or a second successor of one hash is a fork error.
    pub(crate) fn push(&mut self, head: Option<&Head>, feed: Feed<'_>) -> Result<()> {
        use postgres::binary_copy::BinaryCopyInWriter;
        use postgres::types::Type;
        let PgLog { client, ctx, .. } = self;
        let c = client.get_mut();
        let sink = c
            .copy_in(
                "COPY events (id, ts, kind, content, meta, prev_hash, hash, accepted_break) FROM STDIN BINARY",
            )
            .map_err(|e| ctx.err(e))?;
        let types = [
            Type::INT8,
            Type::TEXT,
            Type::TEXT,
            Type::BYTEA,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::BOOL,
        ];
        let mut w = BinaryCopyInWriter::new(sink, &types);
        let mut prev = head.and_then(|h| h.hash.clone());
        let mut last: Option<Head> = None;
        let mut erased = Vec::new();
        feed(&mut |ev: &Event| {
            w.write(&[
                &ev.id,
                &ev.ts,
                &ev.kind.as_str(),
                &ev.content.as_bytes(),
                &ev.meta,
                &ev.prev_hash,
                &ev.hash,
                &(ev.prev_hash != prev),
            ])
            .map_err(|e| ctx.err(e))?;
            prev.clone_from(&ev.hash);
            if ev.kind == Kind::Erasure {
                erased.extend(crate::store::erase::erased_id(&ev.meta));
            }
            last = Some(Head {
                id: ev.id,
                hash: ev.hash.clone(),
            });
            Ok(())
        })?;
        w.finish().map_err(|e| {
            if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
                fork_error(explain(&e))
            } else {
                ctx.err(e)
            }
        })?;
        let Some(last) = last else {
            return Ok(());
        };
        for target in erased {
            c.execute("SELECT pmm_erase_text($1)", &[&target])
                .map_err(|e| ctx.err(e))?;
        }
        c.execute(
            "UPDATE pmm_head SET id = $1, hash = $2 WHERE one",
            &[&last.id, &last.hash],
        )
        .map_err(|e| ctx.err(e))?;
        Ok(())
    }

    /// Stores vectors inside the transaction [`PgLog::lock_head`] began: `(model, dim, event
    /// id, stored bytes)`: a vector the server already has is kept. A model the server knows
    /// with other dimensions is refused (two vector spaces never share a name).
    pub(crate) fn push_vectors(&mut self, rows: &[SharedVector]) -> Result<()> {
        let PgLog { client, ctx, .. } = self;
        let c = client.get_mut();
        let mut known: Vec<&str> = Vec::new();
        for SharedVector { model, dim, id, q } in rows {
            if !known.contains(&model.as_str()) {
                let dim_i = *dim as i32;
                c.execute(
                    "INSERT INTO pmm_embed_models (name, dim) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                    &[model, &dim_i],
                )
                .map_err(|e| ctx.err(e))?;
                let have: i32 = c
                    .query_one("SELECT dim FROM pmm_embed_models WHERE name = $1", &[model])
                    .map_err(|e| ctx.err(e))?
                    .get(0);
                if have != dim_i {
                    return Err(ctx.fail(format!(
                        "embedding model {model} gives {dim} dimensions, but its stored vectors have {have}: a different model under the same name"
                    )));
                }
                known.push(model);
            }
            c.execute(
                "INSERT INTO pmm_vectors (model, id, q) VALUES ($1, $2, $3) ON CONFLICT (model, id) DO NOTHING",
                &[model, id, q],
            )
            .map_err(|e| ctx.err(e))?;
        }
        Ok(())
    }

    /// Up to `limit` shared vectors numbered after `seq`, in order: `(seq, model, dim, event
    /// id, stored bytes)`.
    pub(crate) fn vectors_after(&self, seq: i64, limit: i64) -> Result<Vec<(i64, SharedVector)>> {
        let rows = self
            .client
            .borrow_mut()
            .query(
                "SELECT v.seq, v.model, m.dim, v.id, v.q FROM pmm_vectors v
                 JOIN pmm_embed_models m ON m.name = v.model
                 WHERE v.seq > $1 ORDER BY v.seq LIMIT $2",
                &[&seq, &limit],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| {
                let dim: i32 = r.get(2);
                let v = SharedVector {
                    model: r.get(1),
                    dim: dim.max(0) as usize,
                    id: r.get(3),
                    q: r.get(4),
                };
                (r.get(0), v)
            })
            .collect())
    }

    /// Commits the transaction [`PgLog::lock_head`] began.
    pub(crate) fn commit_locked(&mut self) -> Result<()> {
        let c = self.client.get_mut();
        c.batch_execute("COMMIT").map_err(|e| self.ctx.err(e))
    }

    /// Rolls back the transaction [`PgLog::lock_head`] began (nothing of it exists).
    pub(crate) fn rollback_locked(&mut self) {
        let _ = self.client.get_mut().batch_execute("ROLLBACK");
    }

    /// Up to `limit` events after `after`, in id order (a cache catching up).
    pub(crate) fn events_after(&self, after: i64, limit: i64) -> Result<Vec<Event>> {
        let filter = Filter {
            since: after.checked_add(1),
            ..Filter::default()
        };
        q_page(
            &mut *self.client.borrow_mut(),
            &filter,
            after.saturating_add(1),
            i64::MAX,
            limit,
            false,
        )
        .map_err(|e| self.err(e))
    }

    /// Every event in id order, streamed by one query (a verification reads the whole log:
    /// pages would cost a round trip each), until `each` returns `false`.
    pub fn stream_all(&self, each: &mut dyn FnMut(Event) -> Result<bool>) -> Result<()> {
        use postgres::fallible_iterator::FallibleIterator;
        let mut c = self.client.borrow_mut();
        let sql = format!("SELECT {COLUMNS} FROM events ORDER BY id");
        let mut rows = c
            .query_raw(sql.as_str(), std::iter::empty::<i64>())
            .map_err(|e| self.ctx.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.ctx.err(e))? {
            if !each(row_to_event(&row))? {
                break;
            }
        }
        Ok(())
    }

    /// The hash of event `id`, if it exists.
    pub(crate) fn hash_at(&self, id: i64) -> Result<Option<Option<String>>> {
        let row = self
            .client
            .borrow_mut()
            .query_opt("SELECT hash FROM events WHERE id = $1", &[&id])
            .map_err(|e| self.err(e))?;
        Ok(row.map(|r| r.get(0)))
    }
}

/// An embedding vector as the server and every cache keep it: model `model` (`dim`
/// dimensions), event `id`, the stored half floats `q`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SharedVector {
    pub(crate) model: String,
    pub(crate) dim: usize,
    pub(crate) id: i64,
    pub(crate) q: Vec<u8>,
}

/// Hands a write transaction's events, in id order, to the function it is given ([`PgLog::push`]).
pub(crate) type Feed<'a> = &'a mut dyn FnMut(&mut dyn FnMut(&Event) -> Result<()>) -> Result<()>;
