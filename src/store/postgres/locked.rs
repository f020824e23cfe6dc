//! The operations of a host's cache on the server ([`crate::store::replica`]): the head row
//! locked across the cache's own write transaction, the events and vectors it made pushed in,
//! the lock released at the commit; and the reads a catch-up makes.

use super::{explain, jitter, retryable, row_to_event, Head, PgLog, COLUMNS};
use crate::event::{Event, Kind};
use crate::store::log::fork_error;
use crate::Result;
use postgres::error::SqlState;
use postgres::types::Type;
use postgres::IsolationLevel;
use postgres::SimpleQueryMessage;
use std::time::{Duration, Instant};

/// What the server holds as of [`PgLog::lock_head`]'s lock.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Locked {
    /// The head row: the ledger's head.
    pub(crate) head: Option<Head>,
    /// The last event's id (0: none); the head's, unless the server is damaged.
    pub(crate) last_event: i64,
    /// The last shared vector's `seq` (0: none).
    pub(crate) vectors_seq: i64,
    /// The events after the id [`PgLog::lock_head`] was asked to read after, read in its round
    /// trip: at most [`PREFETCH`], in id order (`None` when not asked, or not readable).
    pub(crate) prefetched: Option<(i64, Vec<Event>)>,
}

/// How many events [`PgLog::lock_head`] reads in its round trip: a cache that other hosts'
/// appends left a few events behind catches up without a read of its own under the lock.
pub(crate) const PREFETCH: i64 = 64;

/// The rows of each statement of a simple query, in order (a statement ends at its
/// `CommandComplete`): `BEGIN`'s none, then the head row's, the ends', the prefetch's.
fn statements(messages: &[SimpleQueryMessage]) -> Vec<Vec<&postgres::SimpleQueryRow>> {
    let mut out = vec![Vec::new()];
    for m in messages {
        match m {
            SimpleQueryMessage::Row(r) => out.last_mut().expect("one at least").push(r),
            SimpleQueryMessage::CommandComplete(_) => out.push(Vec::new()),
            _ => {}
        }
    }
    out
}

/// [`Locked`] from the rows of [`PgLog::lock_head`]'s statements (text, as a simple query
/// returns them): exactly one head row and one row of ends, else `None` (a head row deleted
/// behind pmm's back is no head), and the prefetch's events when it read them.
fn locked(messages: &[SimpleQueryMessage], prefetch: Option<i64>) -> Option<Locked> {
    let statements = statements(messages);
    let ([head], [ends]) = (statements.get(1)?.as_slice(), statements.get(2)?.as_slice()) else {
        return None;
    };
    let int = |v: Option<&str>| v.map_or(Some(0), |t| t.parse::<i64>().ok());
    let id = int(head.get(0))?;
    // A row that does not read as an event leaves the catch-up to read for itself.
    let prefetched = prefetch.and_then(|after| {
        let rows = statements.get(3)?;
        let events = rows
            .iter()
            .map(|r| text_row_event(r))
            .collect::<Option<_>>()?;
        Some((after, events))
    });
    Some(Locked {
        head: (id > 0).then(|| Head {
            id,
            hash: head.get(1).map(str::to_string),
        }),
        last_event: int(ends.get(0))?,
        vectors_seq: int(ends.get(1))?,
        prefetched,
    })
}

/// An event from a row of the prefetch (text, as a simple query returns it: the content as
/// hex), or `None` when a value does not read as one.
fn text_row_event(r: &postgres::SimpleQueryRow) -> Option<Event> {
    let hex = r.get(3)?;
    let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let content: Option<Vec<u8>> = hex
        .as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(*p.get(1)?)?))
        .collect();
    Some(Event {
        id: r.get(0)?.parse().ok()?,
        ts: r.get(1)?.to_string(),
        kind: r.get(2)?.into(),
        content: String::from_utf8(content?).ok()?,
        meta: r.get(4)?.to_string(),
        prev_hash: r.get(5).map(str::to_string),
        hash: r.get(6).map(str::to_string),
    })
}

/// A push's error: a repeated hash or id of `events` is a fork; any other (a second erasure
/// of one event, say) is the server's. The same on the `COPY` path and the one-statement one.
fn fork_or(ctx: &super::Ctx, e: postgres::Error) -> crate::Error {
    let of_events = e.as_db_error().and_then(|d| d.table()) == Some("events");
    if e.code() == Some(&SqlState::UNIQUE_VIOLATION) && of_events {
        fork_error(explain(&e))
    } else {
        ctx.err(e)
    }
}

/// The operations of a host's cache of this ledger ([`crate::store::replica`]): the head lock
/// held across a local write transaction, the events it made pushed in, the lock released.
/// The transaction is plain SQL on the connection (`BEGIN` … `COMMIT`), so that it can live
/// as long as the local one beside it.
impl PgLog {
    /// Begins a transaction and locks the head row: what the server holds as of the lock.
    /// Taken again, with jittered back-off until the busy timeout, when the session's isolation
    /// level makes the lock fail with a serialization failure (or a deadlock); a lock wait past
    /// the busy timeout is [`crate::Error::Busy`].
    ///
    /// One round trip: `BEGIN`, the lock, and (a statement after the lock, so that its
    /// snapshot sees what the last holder committed) where the events and the shared vectors
    /// end, which lets a cache that already holds them skip its catch-up's reads.
    ///
    /// With `after`, the same round trip reads the first [`PREFETCH`] events after that id
    /// ([`Locked::prefetched`]): what a cache's catch-up reads first (`replica::pull`).
    /// The event `held` (the cache's own head, which the catch-up only compares by id and
    /// hash) comes without its content.
    pub(crate) fn lock_head(&mut self, after: Option<i64>, held: Option<i64>) -> Result<Locked> {
        let started = Instant::now();
        let budget = Duration::from_millis(self.ctx.busy_ms);
        let begin = match self.isolation {
            IsolationLevel::RepeatableRead => "BEGIN ISOLATION LEVEL REPEATABLE READ",
            IsolationLevel::Serializable => "BEGIN ISOLATION LEVEL SERIALIZABLE",
            _ => "BEGIN ISOLATION LEVEL READ COMMITTED",
        };
        let mut sql = format!(
            "{begin}; SELECT id, hash FROM pmm_head FOR UPDATE; \
             SELECT (SELECT max(id) FROM events), (SELECT max(seq) FROM pmm_vectors)"
        );
        if let Some(after) = after {
            sql.push_str(&format!(
                "; SELECT id, ts, kind, CASE WHEN id = {} THEN '' ELSE encode(content, 'hex') END, \
                 meta, prev_hash, hash FROM events WHERE id > {after} ORDER BY id LIMIT {PREFETCH}",
                held.unwrap_or(0)
            ));
        }
        let mut attempt: u32 = 0;
        loop {
            let c = self.client.get_mut();
            match c.simple_query(&sql) {
                Ok(messages) => {
                    return locked(&messages, after).ok_or_else(|| {
                        let _ = c.batch_execute("ROLLBACK");
                        self.ctx.fail("the head row could not be read")
                    });
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

    /// Inserts the events `feed` hands over (made by a local write transaction after `head`,
    /// the locked head or the last event this transaction pushed, in id order) inside the
    /// transaction [`PgLog::lock_head`] began, in one binary `COPY`; erases the text an
    /// erasure among them names. The new head (the last event, `None` when the feed had
    /// none), which the commit moves the head row to. A repeated hash or a second successor of
    /// one hash is a fork error.
    ///
    /// A long write (an import) pushes this way as it goes, so that the server's transaction
    /// is never idle for long (`replica::Lease::push`); its commit
    /// ([`PgLog::push_and_commit`]) pushes the rest.
    pub(crate) fn push(&mut self, head: Option<&Head>, feed: Feed<'_>) -> Result<Option<Head>> {
        use postgres::binary_copy::BinaryCopyInWriter;
        let PgLog {
            client, ctx, copy, ..
        } = self;
        let c = client.get_mut();
        // Prepared once per connection: a statement given as text costs a round trip of its
        // own to prepare, every time, and the head lock is held meanwhile.
        if copy.is_none() {
            *copy = Some(
                c.prepare(
                    "COPY events (id, ts, kind, content, meta, prev_hash, hash, accepted_break) FROM STDIN BINARY",
                )
                .map_err(|e| ctx.err(e))?,
            );
        }
        let sink = c
            .copy_in(copy.as_ref().expect("prepared above"))
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
                erased.extend(crate::event::erasure::erased_id(&ev.meta));
            }
            last = Some(Head {
                id: ev.id,
                hash: ev.hash.clone(),
            });
            Ok(())
        })?;
        w.finish().map_err(|e| fork_or(ctx, e))?;
        for target in erased {
            c.execute("SELECT pmm_erase_text($1)", &[&target])
                .map_err(|e| ctx.err(e))?;
        }
        Ok(last)
    }

    /// Stores vectors inside the transaction [`PgLog::lock_head`] began: `(model, dim, event
    /// id, stored bytes)`: a vector the server already has is kept. A model the server knows
    /// with other dimensions is refused (two vector spaces never share a name).
    fn push_vectors(&mut self, rows: &[SharedVector]) -> Result<()> {
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
            .query_typed(
                "SELECT v.seq, v.model, m.dim, v.id, v.q FROM pmm_vectors v
                 JOIN pmm_embed_models m ON m.name = v.model
                 WHERE v.seq > $1 ORDER BY v.seq LIMIT $2",
                &[(&seq, Type::INT8), (&limit, Type::INT8)],
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

    /// Pushes the events `feed` hands over (as [`PgLog::push`]) and the vectors (as
    /// [`PgLog::push_vectors`]), moves the head row and commits. `head` is the locked head,
    /// `pushed` the last event this transaction already pushed ([`PgLog::push`]), if any: the
    /// feed follows it, and the head row moves to it when the feed is empty. An append of a
    /// few events and no vectors — what a turn, a tick and a stream of lines write — is one
    /// statement, one round trip with the head lock held ([`one_statement`]); a bigger one is
    /// a binary `COPY`, then the head row's move and the commit.
    pub(crate) fn push_and_commit(
        &mut self,
        head: Option<&Head>,
        pushed: Option<&Head>,
        feed: Feed<'_>,
        vectors: &[SharedVector],
    ) -> Result<()> {
        let after = pushed.or(head);
        if vectors.is_empty() {
            if let Some(sql) = one_statement(after, pushed, feed)? {
                let PgLog { client, ctx, .. } = self;
                // A repeated hash or id of `events` is a fork; any other error (a second
                // erasure of one event, say) is the server's, as on the `COPY` path.
                return client
                    .get_mut()
                    .batch_execute(&sql)
                    .map_err(|e| fork_or(ctx, e));
            }
        }
        let moved = self.push(after, feed)?.or_else(|| pushed.cloned());
        self.push_vectors(vectors)?;
        self.commit_locked(moved.as_ref())
    }

    /// Moves the head row to `moved` (the new head [`PgLog::push`] returned, if any) and
    /// commits the transaction [`PgLog::lock_head`] began, in one round trip: the head lock
    /// is released one round trip sooner. The values are written into the statement only
    /// when they are plain (a digest's hex); anything else is bound as a parameter.
    fn commit_locked(&mut self, moved: Option<&Head>) -> Result<()> {
        let PgLog { client, ctx, .. } = self;
        let c = client.get_mut();
        let plain = |h: &str| h.bytes().all(|b| b.is_ascii_hexdigit());
        let sql = match moved {
            None => "COMMIT".to_string(),
            Some(Head { id, hash: None }) => {
                format!("UPDATE pmm_head SET id = {id}, hash = NULL WHERE one; COMMIT")
            }
            Some(Head { id, hash: Some(h) }) if plain(h) => {
                format!("UPDATE pmm_head SET id = {id}, hash = '{h}' WHERE one; COMMIT")
            }
            Some(Head { id, hash }) => {
                c.execute(
                    "UPDATE pmm_head SET id = $1, hash = $2 WHERE one",
                    &[id, hash],
                )
                .map_err(|e| ctx.err(e))?;
                "COMMIT".to_string()
            }
        };
        c.batch_execute(&sql).map_err(|e| ctx.err(e))
    }

    /// Rolls back the transaction [`PgLog::lock_head`] began (nothing of it exists).
    pub(crate) fn rollback_locked(&mut self) {
        let _ = self.client.get_mut().batch_execute("ROLLBACK");
    }

    /// Up to `limit` events after `after`, in id order (a cache catching up). One round trip
    /// (the parameters' types given: nothing to prepare).
    pub(crate) fn events_after(&self, after: i64, limit: i64) -> Result<Vec<Event>> {
        self.reads_after.set(self.reads_after.get() + 1);
        let rows = self
            .client
            .borrow_mut()
            .query_typed(
                &format!("SELECT {COLUMNS} FROM events WHERE id > $1 ORDER BY id LIMIT $2"),
                &[(&after, Type::INT8), (&limit, Type::INT8)],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(row_to_event).collect())
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

/// An event for the server to link to its head ([`PgLog::append_at_head`]): everything of it
/// but its id and link, which only the head lock settles.
pub(crate) struct Unlinked<'a> {
    pub(crate) ts: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) content: &'a str,
    /// Its meta as the canonical JSON text the row keeps.
    pub(crate) meta: &'a str,
    /// Its hashed payload up to the value of `prev_hash`, the payload's last key
    /// ([`crate::canon::write_event_payload_before_link`]).
    pub(crate) before_link: &'a [u8],
}

impl Unlinked<'_> {
    /// About how much of [`PgLog::append_at_head`]'s message this event takes.
    pub(crate) fn size(&self) -> usize {
        2 * (self.content.len() + self.meta.len() + self.before_link.len()) + 200
    }
}

/// An event's id and link as the server made them ([`PgLog::append_at_head`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Link {
    pub(crate) id: i64,
    pub(crate) prev_hash: Option<String>,
    pub(crate) hash: String,
}

/// What [`PgLog::append_at_head`] appended: the events' links in order, and what the server
/// held at the commit (the head lock's view, for the cache's catch-up).
pub(crate) struct LinkedHere {
    pub(crate) links: Vec<Link>,
    pub(crate) seen: Locked,
}

/// The most [`PgLog::append_at_head`]'s message may take ([`Unlinked::size`]); bigger
/// events are linked by the host ([`PgLog::push_and_commit`]).
pub(crate) const AT_HEAD_MAX: usize = 64 * 1024;

impl PgLog {
    /// Appends `evs`, in order, after the server's head in one round trip, the head lock held
    /// only while the server works: `BEGIN`, the lock, for each event an `INSERT` whose id,
    /// `prev_hash` and hash the server makes from the head row (the hash is the sha256 of the
    /// event's `before_link`, then the head's hash as a JSON string or `null`, then `}`: the
    /// canonical payload, whose last key is `prev_hash`) and the head row's move, then
    /// `COMMIT`. What the server holds as of the lock ([`Locked`], with the events after
    /// `after` as [`PgLog::lock_head`] reads them, `held`'s without content) is read before
    /// the commit, for the cache's catch-up.
    ///
    /// The server links an event only to a head row that says where the events end (id and
    /// hash), as a host's catch-up checks it. `None` when the server appended nothing and a
    /// host's append should be tried instead (which says why, when it cannot either): the
    /// head row does not say where the events end, its hash is not plain hex (a JSON string
    /// would escape it), or the server refused the transaction with an error (a repeated id
    /// or hash of a damaged server, a serialization failure, a server without `sha256`); no
    /// error of the kind can follow the commit. A lost connection is an error (whether the
    /// server committed is not known).
    pub(crate) fn append_at_head(
        &mut self,
        evs: &[Unlinked<'_>],
        after: i64,
        held: Option<i64>,
    ) -> Result<Option<LinkedHere>> {
        if !self.prepared_at_head()? {
            return Ok(None);
        }
        let sql = at_head_statement(self.isolation, evs, after, held);
        let c = self.client.get_mut();
        let messages = match c.simple_query(&sql) {
            Ok(messages) => messages,
            Err(e) => {
                let _ = c.batch_execute("ROLLBACK");
                if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                    return Err(self.err(e));
                }
                if e.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) {
                    // Gone (a `DISCARD ALL`): prepared again next time, once; gone twice (a
                    // pooler that hands each transaction another connection), never again.
                    self.at_head = match self.at_head {
                        AtHead::Prepared => AtHead::Lost,
                        _ => AtHead::Unavailable,
                    };
                }
                if e.code() == Some(&SqlState::QUERY_CANCELED) {
                    return Err(self.err(e)); // a statement timeout: waiting again would too
                }
                let refused = e.as_db_error().and_then(|d| d.parsed_severity())
                    == Some(postgres::error::Severity::Error);
                return match refused {
                    true => Ok(None),
                    false => self.after_a_lost_connection(e, evs, after),
                };
            }
        };
        let statements = statements(&messages);
        let mut links = Vec::with_capacity(evs.len());
        // A guard that refuses the first event refuses every one after it (the head row does
        // not move): the server linked all of them, or none.
        for rows in statements.iter().skip(2).take(evs.len()) {
            let [row] = rows.as_slice() else { break };
            let (Some(id), Some(hash)) = (row.get(0).and_then(|t| t.parse().ok()), row.get(2))
            else {
                return Err(self.fail("the server's append returned no id or hash"));
            };
            links.push(Link {
                id,
                prev_hash: row.get(1).map(str::to_string),
                hash: hash.to_string(),
            });
        }
        let Some(last) = links.last() else {
            return Ok(None);
        };
        let head = Head {
            id: last.id,
            hash: Some(last.hash.clone()),
        };
        let seen = statements
            .get(2 + evs.len()..)
            .and_then(|rest| seen_at_commit(rest, head, after))
            .ok_or_else(|| self.fail("the server's ends could not be read"))?;
        self.linked_here += links.len() as u64;
        Ok(Some(LinkedHere { links, seen }))
    }
}

/// Whether a connection has [`PgLog::append_at_head`]'s statements ([`PREPARE_AT_HEAD`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum AtHead {
    /// Not yet (a new connection).
    #[default]
    Unprepared,
    Prepared,
    /// They went missing once: prepared again.
    Lost,
    /// Prepared again after they went missing once.
    PreparedAgain,
    /// The server refused them (no `sha256()` before PostgreSQL 11, say), or they went missing
    /// twice: every append is the host's.
    Unavailable,
}

impl PgLog {
    /// Prepares [`PgLog::append_at_head`]'s statements on this connection unless it has them
    /// (a round trip each, once per connection, outside any lock): whether it has them.
    fn prepared_at_head(&mut self) -> Result<bool> {
        let before = self.at_head;
        self.at_head = match before {
            AtHead::Prepared | AtHead::PreparedAgain => return Ok(true),
            AtHead::Unavailable => return Ok(false),
            AtHead::Unprepared => AtHead::Prepared,
            AtHead::Lost => AtHead::PreparedAgain,
        };
        // One at a time: after a statement went missing, the others may still be there.
        for statement in PREPARE_AT_HEAD.split("; ") {
            match self.client.get_mut().batch_execute(statement) {
                Ok(()) => {}
                // Still there from before they went missing; on a new connection, a
                // statement of that name is somebody else's.
                Err(e)
                    if before == AtHead::Lost
                        && e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {}
                Err(e) if e.as_db_error().is_some() => self.at_head = AtHead::Unavailable,
                Err(e) => {
                    self.at_head = before;
                    return Err(self.err(e));
                }
            }
        }
        Ok(self.at_head != AtHead::Unavailable)
    }
}

/// [`PgLog::append_at_head`]'s statements, prepared once per connection (`PREPARE`: parsed
/// and planned once, not while each append holds the lock), their names versioned (a new
/// version of them is a new name: `_v2`): `pmm_link` inserts an event
/// (`ts`, kind, content, canonical meta, payload up to its link) after the head row, linked by
/// the server, and moves the head row to it (nothing when the head row does not say where the
/// events end), returning its id, `prev_hash` and hash; `pmm_ends` reads where the events and
/// the shared vectors end; `pmm_after` the events after an id ([`PREFETCH`] at most; the
/// second id's without content).
pub(crate) const PREPARE_AT_HEAD: &str = "\
PREPARE pmm_link_v1 (text, text, bytea, text, bytea) AS \
WITH e AS (INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash, accepted_break) \
    SELECT h.id + 1, $1, $2, $3, $4, h.hash, \
        encode(sha256($5 || convert_to(coalesce('\"' || h.hash || '\"', 'null') || '}', 'UTF8')), 'hex'), false \
    FROM pmm_head h WHERE h.one AND (h.hash IS NULL OR h.hash ~ '^[0-9a-f]+$') \
    AND NOT EXISTS (SELECT 1 FROM events x WHERE x.id > h.id) \
    AND (h.id = 0 AND h.hash IS NULL \
        OR EXISTS (SELECT 1 FROM events x WHERE x.id = h.id AND x.hash IS NOT DISTINCT FROM h.hash)) \
    RETURNING id, prev_hash, hash) \
UPDATE pmm_head SET id = e.id, hash = e.hash FROM e WHERE one RETURNING e.id, e.prev_hash, e.hash; \
PREPARE pmm_ends_v1 AS SELECT (SELECT max(id) FROM events), (SELECT max(seq) FROM pmm_vectors); \
PREPARE pmm_after_v1 (bigint, bigint) AS SELECT id, ts, kind, \
    CASE WHEN id = $2 THEN '' ELSE encode(content, 'hex') END, meta, prev_hash, hash \
    FROM events WHERE id > $1 ORDER BY id LIMIT 64";

impl PgLog {
    /// What became of [`PgLog::append_at_head`]'s appends when the connection was lost
    /// (`e`: a server restart, an idle-session timeout, a cut link) before it answered:
    /// connected again, the head lock taken (a transaction the old connection may still hold
    /// ends first), the server is asked whether the first of `evs` is there — its time, kind,
    /// content and meta are this host's own. Committed, the events as the server linked them;
    /// not, `None` (the host's append runs, once); `e` when no connection can be made.
    fn after_a_lost_connection(
        &mut self,
        e: postgres::Error,
        evs: &[Unlinked<'_>],
        after: i64,
    ) -> Result<Option<LinkedHere>> {
        if !self.client.get_mut().is_closed() || !self.revive()? {
            return Err(self.err(e));
        }
        let first = &evs[0];
        let found: Option<i64> = {
            let mut tx = self
                .client
                .get_mut()
                .transaction()
                .map_err(|e| self.ctx.err(e))?;
            tx.batch_execute("SELECT 1 FROM pmm_head WHERE one FOR UPDATE")
                .map_err(|e| self.ctx.err(e))?;
            let row = tx
                .query_opt(
                    "SELECT id FROM events WHERE id > $1 AND ts = $2 AND kind = $3 \
                     AND content = $4 AND meta = $5 ORDER BY id LIMIT 1",
                    &[
                        &after,
                        &first.ts,
                        &first.kind,
                        &first.content.as_bytes(),
                        &first.meta,
                    ],
                )
                .map_err(|e| self.ctx.err(e))?;
            row.map(|r| r.get(0))
        };
        let Some(id) = found else {
            return Ok(None);
        };
        let events = self.events_after(id - 1, evs.len() as i64)?;
        let links: Vec<Link> = events
            .into_iter()
            .map(|ev| Link {
                id: ev.id,
                prev_hash: ev.prev_hash,
                hash: ev.hash.unwrap_or_default(),
            })
            .collect();
        let Some(last) = links.last().filter(|_| links.len() == evs.len()) else {
            return Err(self.fail("the server holds only part of an append it committed"));
        };
        let head = Head {
            id: last.id,
            hash: Some(last.hash.clone()),
        };
        // Where the events and vectors end is not known: the catch-up reads for itself.
        let seen = Locked {
            head: Some(head),
            last_event: i64::MAX,
            vectors_seq: i64::MAX,
            prefetched: None,
        };
        self.linked_here += links.len() as u64;
        Ok(Some(LinkedHere { links, seen }))
    }
}

/// [`PgLog::append_at_head`]'s one message of the simple query protocol (values written as
/// [`one_statement`] writes them), on the statements of [`PREPARE_AT_HEAD`].
fn at_head_statement(
    isolation: IsolationLevel,
    evs: &[Unlinked<'_>],
    after: i64,
    held: Option<i64>,
) -> String {
    let begin = match isolation {
        IsolationLevel::RepeatableRead => "BEGIN ISOLATION LEVEL REPEATABLE READ",
        IsolationLevel::Serializable => "BEGIN ISOLATION LEVEL SERIALIZABLE",
        _ => "BEGIN ISOLATION LEVEL READ COMMITTED",
    };
    let mut sql = format!("{begin}; SELECT id FROM pmm_head WHERE one FOR UPDATE; ");
    for ev in evs {
        sql.push_str("EXECUTE pmm_link_v1(");
        text_value(&mut sql, Some(ev.ts));
        sql.push_str(", ");
        text_value(&mut sql, Some(ev.kind));
        sql.push_str(", ");
        bytes_value(&mut sql, ev.content.as_bytes());
        sql.push_str(", ");
        text_value(&mut sql, Some(ev.meta));
        sql.push_str(", ");
        bytes_value(&mut sql, ev.before_link);
        sql.push_str("); ");
    }
    sql.push_str(&format!(
        "EXECUTE pmm_ends_v1; EXECUTE pmm_after_v1({after}, {}); COMMIT",
        held.unwrap_or(0)
    ));
    sql
}

/// What the server held at [`PgLog::append_at_head`]'s commit, from its statements after the
/// appends: `head` (the last event it appended), where the events and vectors end, and the
/// events after `after` it read.
fn seen_at_commit(
    statements: &[Vec<&postgres::SimpleQueryRow>],
    head: Head,
    after: i64,
) -> Option<Locked> {
    let [ends] = statements.first()?.as_slice() else {
        return None;
    };
    let int = |v: Option<&str>| v.map_or(Some(0), |t| t.parse::<i64>().ok());
    let prefetched = statements
        .get(1)
        .and_then(|rows| {
            rows.iter()
                .map(|r| text_row_event(r))
                .collect::<Option<_>>()
        })
        .map(|events| (after, events));
    Some(Locked {
        head: Some(head),
        last_event: int(ends.get(0))?,
        vectors_seq: int(ends.get(1))?,
        prefetched,
    })
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

/// The most SQL text [`one_statement`] writes (a row's share estimated before it is written);
/// a push that needs more is a binary `COPY`.
const ONE_STATEMENT_MAX: usize = 64 * 1024;

/// The push of the events `feed` hands over (made after `head`, the locked head or the last
/// event pushed before, in id order), the erasures' scrubbing, the head row's move (to the
/// last event, else to `pushed`, the last one pushed before) and `COMMIT`, as one statement
/// of the simple query protocol — one round trip — or `None` when it would be over
/// [`ONE_STATEMENT_MAX`].
/// Every value is written so that no quoting rule of the server can change it: numbers and
/// booleans as such, texts made only of letters, digits and `-_:.+` between quotes, any other
/// text or byte string as hex digits the server decodes (`decode(…, 'hex')`).
fn one_statement(
    head: Option<&Head>,
    pushed: Option<&Head>,
    feed: Feed<'_>,
) -> Result<Option<String>> {
    let mut sql = String::new();
    let mut after = String::new();
    let mut prev = head.and_then(|h| h.hash.clone());
    let mut last: Option<Head> = None;
    let mut over = false;
    let fed = feed(&mut |ev: &Event| {
        // What the row takes at most (hex doubles the texts), before it is written: a push
        // that will not fit stops the feed at once and goes as a `COPY`.
        let row =
            2 * (ev.ts.len() + ev.kind.as_str().len() + ev.content.len() + ev.meta.len()) + 400;
        if sql.len() + after.len() + row > ONE_STATEMENT_MAX {
            over = true;
            return Err(crate::Error::bad_input(
                None,
                "a push too big for one statement",
            ));
        }
        sql.push_str(if last.is_none() {
            "INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash, accepted_break) VALUES ("
        } else {
            ", ("
        });
        row_values(&mut sql, ev, ev.prev_hash != prev);
        if ev.kind == Kind::Erasure {
            if let Some(target) = crate::event::erasure::erased_id(&ev.meta) {
                after.push_str(&format!("SELECT pmm_erase_text({target}); "));
            }
        }
        prev.clone_from(&ev.hash);
        last = Some(Head {
            id: ev.id,
            hash: ev.hash.clone(),
        });
        Ok(())
    });
    match fed {
        // The feed stopped because the push is too big, not on an error of its own.
        Err(_) if over => return Ok(None),
        other => other?,
    }
    if !sql.is_empty() {
        sql.push_str("; ");
    }
    sql.push_str(&after);
    if let Some(Head { id, hash }) = last.as_ref().or(pushed) {
        sql.push_str(&format!("UPDATE pmm_head SET id = {id}, hash = "));
        text_value(&mut sql, hash.as_deref());
        sql.push_str(" WHERE one; ");
    }
    sql.push_str("COMMIT");
    Ok(Some(sql))
}

/// `ev`'s row as the values of an `INSERT` (without the opening parenthesis), for
/// [`one_statement`].
fn row_values(sql: &mut String, ev: &Event, broken: bool) {
    sql.push_str(&ev.id.to_string());
    for text in [Some(ev.ts.as_str()), Some(ev.kind.as_str())] {
        sql.push_str(", ");
        text_value(sql, text);
    }
    sql.push_str(", ");
    bytes_value(sql, ev.content.as_bytes());
    for text in [
        Some(ev.meta.as_str()),
        ev.prev_hash.as_deref(),
        ev.hash.as_deref(),
    ] {
        sql.push_str(", ");
        text_value(sql, text);
    }
    sql.push_str(if broken { ", true)" } else { ", false)" });
}

/// A text value as SQL that no quoting rule can change: `NULL`, a quoted text of letters,
/// digits and `-_:.+` only (a digest, a time, a kind), or its UTF-8 bytes as hex, decoded
/// by the server.
fn text_value(sql: &mut String, text: Option<&str>) {
    let Some(t) = text else {
        sql.push_str("NULL");
        return;
    };
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-_:.+".contains(&b);
    if t.bytes().all(plain) {
        sql.push('\'');
        sql.push_str(t);
        sql.push('\'');
    } else {
        sql.push_str("convert_from(");
        bytes_value(sql, t.as_bytes());
        sql.push_str(", 'UTF8')");
    }
}

/// A byte string as SQL: its hex digits, decoded by the server.
fn bytes_value(sql: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    sql.push_str("decode('");
    sql.reserve(bytes.len() * 2 + 9);
    for b in bytes {
        sql.push(HEX[usize::from(b >> 4)] as char);
        sql.push(HEX[usize::from(b & 15)] as char);
    }
    sql.push_str("', 'hex')");
}
