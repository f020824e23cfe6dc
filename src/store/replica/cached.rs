//! [`Cached`]: a PostgreSQL ledger as one host runs it — the server's log and this host's
//! cache file as two fields of one type, so that the protocol of an append (lock the server's
//! head, catch the cache up inside its own transaction, write on the cache, push, commit the
//! server then the cache) lives in one place, under the contract suite, and the SQLite types
//! stay a file's and nothing else.

use super::{pull, Lease, Upstream};
use crate::canon;
use crate::event::{Clock, Event, NewEvent};
use crate::store::log::Writer;
use crate::store::log::{
    fork_error, link, verbatim_refusal, Checkpoint, Ending, Links, SessionTxn, SessionWriter, Txn,
};
use crate::store::postgres::{self, Link, Locked, SharedVector, Unlinked, AT_HEAD_MAX};
use crate::store::sqlite::{self, Reads, ReadsThrough};
use crate::store::{notices, Filter, Head};
use crate::{Error, Result};
use serde_json::Value;
use std::cell::RefCell;
use std::path::PathBuf;

/// The testing aid's variable that makes [`CachedBatch::commit`] fail before its own push
/// (`PMM_TEST_CACHED_FAULT=before-push`; what a long write pushed before is rolled back with
/// it): a program's run that shows its error ran this type's commit, the one the contract
/// suite tests.
pub const FAULT_ENV: &str = "PMM_TEST_CACHED_FAULT";

/// The error of [`FAULT_ENV`], when it is set to `before-push`.
fn injected_fault() -> Result<()> {
    match std::env::var(FAULT_ENV) {
        Ok(v) if v == "before-push" => Err(Error::bad_input(
            None,
            "a fault injected before the push (PMM_TEST_CACHED_FAULT): nothing was written",
        )),
        _ => Ok(()),
    }
}

/// A PostgreSQL ledger on this host: the server that orders appends, and the cache file that
/// holds a copy of its events with every derived index beside them.
pub struct Cached {
    /// The server: its connection, whether it writes, and the newest head verified (boxed:
    /// it is three times the cache's size, and a file's handle carries none).
    server: Box<Upstream>,
    /// This host's cache, a ledger file of the SQLite kind that reads are answered from.
    cache: sqlite::Ledger,
    /// The server's URL as shown (no password).
    shown_url: String,
    /// The server's URL as given.
    given_url: String,
}

/// A write transaction of a [`Cached`] ledger: the cache's own transaction, caught up to the
/// server's head, and the server's side of it (its head row locked by a writer). Dropped
/// without [`CachedBatch::commit`], both roll back.
pub struct CachedBatch<'a> {
    /// The cache's write transaction: the write session works on it as on a SQLite ledger.
    cache: sqlite::Batch<'a>,
    /// The server's side: the head row, locked by a writer.
    lease: Lease<'a>,
    /// The head the cache was caught up to: events after it are this transaction's own.
    pulled: i64,
    /// The vectors this transaction stored, `(model, dim, event ids)`, pushed at the commit.
    vectors_put: RefCell<Vec<(String, usize, Vec<i64>)>>,
    /// Whether the cache's hash index, dropped for an import into an empty ledger, is made
    /// again after the server's commit ([`CachedBatch::restore_hash_index`]).
    restore_hash_index: bool,
}

impl Cached {
    /// The ledger `url` on this host: its server and its cache file (made a cache:
    /// [`sqlite::Ledger::serve_as_cache`]), not yet caught up.
    pub(crate) fn new(server: Upstream, mut cache: sqlite::Ledger, url: &str) -> Result<Cached> {
        cache.serve_as_cache()?;
        Ok(Cached {
            server: Box::new(server),
            cache,
            shown_url: postgres::url::shown(url),
            given_url: url.to_string(),
        })
    }

    /// The PostgreSQL ledger's URL, as shown (no password).
    pub fn url(&self) -> &str {
        &self.shown_url
    }

    /// The URL as given: where a check that must see the server's rows, not this host's
    /// cache of them, reads the events.
    pub fn source(&self) -> PathBuf {
        PathBuf::from(&self.given_url)
    }

    /// This host's cache file, which every read is answered from.
    pub fn cache(&self) -> &sqlite::Ledger {
        &self.cache
    }

    /// [`Cached::cache`], for what changes only this host's copy (deferring a derived part,
    /// keeping vector packs, a projection checkpoint).
    pub fn cache_mut(&mut self) -> &mut sqlite::Ledger {
        &mut self.cache
    }

    /// Starts a write transaction: the server's head row locked (a writer's), then the
    /// cache's `BEGIN IMMEDIATE`, caught up to that head.
    pub fn begin(&mut self) -> Result<CachedBatch<'_>> {
        self.begin_with(true)
    }

    /// [`Cached::begin`]; `lock` says whether the server's head row is locked for appends (a
    /// catch-up alone does not lock it, and appends nothing).
    fn begin_with(&mut self, lock: bool) -> Result<CachedBatch<'_>> {
        let Cached { server, cache, .. } = self;
        // The server's head row is locked first (always in this order, so two writers on one
        // host cannot wait on each other).
        server.log.revive()?;
        // Where the cache ends before its transaction (another program on this host may yet
        // move it: the catch-up then reads for itself), for the lock's round trip to read on.
        let before = lock.then(|| cache.head().ok()).flatten();
        let (mut lease, server_head) =
            Lease::take(server, lock, before.as_ref().map(Option::as_ref))?;
        let mut batch = cache.begin()?;
        pull(&mut batch, &mut lease)?;
        let at = batch.head().map_or(0, |h| h.id);
        if lease.locks() && server_head.as_ref().map_or(0, |h| h.id) != at {
            return Err(Error::Damaged {
                path: lease.log().url().into(),
                why: format!(
                    "the head row says {} but the events end at {at}; nothing was written",
                    server_head.map_or(0, |h| h.id)
                ),
            });
        }
        Ok(CachedBatch {
            cache: batch,
            lease,
            pulled: at,
            vectors_put: Default::default(),
            restore_hash_index: false,
        })
    }

    /// [`Writer::append_independents`] as the server makes them ([`PgLog::append_at_head`]:
    /// one round trip, the head lock held only while the server works) for as many of `evs`
    /// as one message takes, then the cache caught up to them; each handed to `appended`. How
    /// many were appended: none when the server did not append the first (a reader's
    /// connection, a big event, a server that refused it), for the transaction of
    /// [`Cached::begin`] to append instead. The links the server made are checked here, as
    /// every catch-up checks them.
    ///
    /// [`PgLog::append_at_head`]: postgres::PgLog
    fn append_at_head(
        &mut self,
        evs: &[NewEvent],
        clock: &Clock,
        appended: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<usize> {
        if !self.server.writer {
            return Ok(0);
        }
        injected_fault()?;
        let ready = Ready::fitting(evs, clock);
        if ready.is_empty() {
            return Ok(0);
        }
        let unlinked: Vec<Unlinked<'_>> =
            ready.iter().zip(evs).map(|(r, e)| r.unlinked(e)).collect();
        let cache_head = self.cache.head()?;
        self.server.log.revive()?;
        let after = super::read_after(cache_head.as_ref());
        let held = cache_head.map(|h| h.id);
        let Some(linked) = self.server.log.append_at_head(&unlinked, after, held)? else {
            return Ok(0);
        };
        let events = self.confirm(evs, &ready, &linked.links)?;
        if let Err(e) = self.catch_up_with(linked.seen) {
            notices::push(format!(
                "events up to {} are committed on the server, but this host's cache of them could not be ({e}); it is behind, and is caught up by the next program that opens the ledger",
                linked.links.last().map_or(0, |l| l.id)
            ));
        }
        let n = events.len();
        for e in events {
            appended(e)?;
        }
        Ok(n)
    }

    /// The events the server appended for `evs` ([`Cached::append_at_head`]), once their
    /// links are checked: each one's hash is the hash of its payload linked to the event
    /// before, from the `prev_hash` the server gave the first.
    fn confirm(&self, evs: &[NewEvent], ready: &[Ready], links: &[Link]) -> Result<Vec<Event>> {
        let mut before = links.first().filter(|l| l.id > 1).map(|l| Head {
            id: l.id - 1,
            hash: l.prev_hash.clone(),
        });
        let mut out = Vec::with_capacity(links.len());
        for ((ev, r), l) in evs.iter().zip(ready).zip(links) {
            let event = link(
                before.as_ref(),
                &ev.kind,
                &ev.content,
                &ev.meta,
                &r.ts,
                &mut Vec::new(),
            )?;
            if (event.id, &event.prev_hash, event.hash.as_deref())
                != (l.id, &l.prev_hash, Some(l.hash.as_str()))
            {
                return Err(Error::Damaged {
                    path: self.shown_url.clone().into(),
                    why: format!(
                        "the server appended event {} with hash {}, but its payload linked to the event before hashes to {} (run pmm-verify on the ledger)",
                        l.id,
                        l.hash,
                        event.hash.as_deref().unwrap_or("null")
                    ),
                });
            }
            before = Some(Head {
                id: event.id,
                hash: event.hash.clone(),
            });
            out.push(event);
        }
        Ok(out)
    }

    /// Catches the cache up to what the server held at the commit of an append it made
    /// (`seen`: its events read in the same round trip), and writes that head down as
    /// verified.
    fn catch_up_with(&mut self, seen: Locked) -> Result<()> {
        let Cached { server, cache, .. } = self;
        let mut lease = Lease::seen(server, seen);
        let mut batch = cache.begin()?;
        pull(&mut batch, &mut lease)?;
        let pulled = batch.head().map_or(0, |h| h.id);
        CachedBatch {
            cache: batch,
            lease,
            pulled,
            vectors_put: Default::default(),
            restore_hash_index: false,
        }
        .commit()
    }

    /// Catches the cache up with its server: a long-lived reader calls it before it answers
    /// again. How many events were new.
    pub fn refresh(&mut self) -> Result<u64> {
        let before = self.cache.max_id()?;
        // Catching up writes only to the cache: no need to lock the server's head. A server
        // that closed the connection meanwhile (a restart) is connected to again, once.
        if let Err(e) = self.begin_with(false).and_then(CachedBatch::commit) {
            if !self.server.log.revive()? {
                return Err(e);
            }
            self.begin_with(false)?.commit()?;
        }
        Ok((self.cache.max_id()? - before).max(0) as u64)
    }
}

impl<'a> CachedBatch<'a> {
    /// The cache's transaction, for what the write session reads and writes there.
    pub fn cache(&self) -> &sqlite::Batch<'a> {
        &self.cache
    }

    /// [`CachedBatch::cache`], to write.
    pub fn cache_mut(&mut self) -> &mut sqlite::Batch<'a> {
        &mut self.cache
    }

    /// The head as this transaction sees it (the server's, caught up, and its own appends).
    pub fn head(&self) -> Option<&Head> {
        self.cache.head()
    }

    /// The events this transaction made that the server does not have yet: after the last
    /// one pushed, else after the head the cache was caught up to.
    fn unpushed(&self) -> Filter {
        let last = self.lease.pushed().map_or(self.pulled, |h| h.id);
        Filter {
            since: last.checked_add(1),
            ..Filter::default()
        }
    }

    /// Pushes to the server, inside its locked transaction, the events made since the last
    /// push (`Lease::push`): they exist only once [`CachedBatch::commit`] commits. A long
    /// write calls it as it goes (`CachedBatch::push_if_due`), so that the server's
    /// transaction never sits idle until the server ends it (issue 47: an import of 10^6
    /// events did, and failed whole).
    pub fn push(&mut self) -> Result<()> {
        let mine = self.unpushed();
        if self.head().map_or(0, |h| h.id) < mine.since.unwrap_or(i64::MAX) {
            return Ok(());
        }
        let CachedBatch { cache, lease, .. } = self;
        lease.push(&mut |push| {
            Reads::scan(&*cache, &mine, |ev| {
                push(&ev)?;
                Ok(true)
            })
        })
    }

    /// [`CachedBatch::push`], once the server has waited a share of its idle timeout inside
    /// this transaction (`Lease::push_due`); else nothing.
    fn push_if_due(&mut self) -> Result<()> {
        if self.lease.push_due() {
            self.push()?;
        }
        Ok(())
    }

    /// Inserts an event verbatim (an import) in the cache, pushing what the server has waited
    /// for when it is due (`CachedBatch::push_if_due`).
    pub fn insert_verbatim(&mut self, ev: &Event) -> Result<()> {
        self.cache.insert_verbatim(ev)?;
        self.push_if_due()
    }

    /// Where an import brings a file's derived parts up to the events so far (every 65,536
    /// events; [`sqlite::Batch::catch_up`]): on a cached ledger what the server has not got yet
    /// is pushed, and the derived parts wait for [`CachedBatch::commit`], which catches them up
    /// after the server's commit. Caught up here, they would be long local work (seconds at
    /// 65,536 events) with the server's transaction idle, past a strict
    /// `idle_in_transaction_session_timeout`.
    pub fn catch_up(&mut self) -> Result<()> {
        self.push()
    }

    /// Has the cache's hash index, which an import into an empty ledger dropped
    /// ([`sqlite::Batch::defer_hash_index`]), made again after the server's commit, with the
    /// cache's other indexes: making it is long local work (seconds at 10^6 events), which
    /// the server's transaction would wait for idle.
    pub fn restore_hash_index(&mut self) {
        self.restore_hash_index = true;
    }

    /// [`sqlite::Batch::put_vectors`] on the cache, the vectors kept for the server.
    pub fn put_vectors(&self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        let n = self.cache.put_vectors(name, dim, v)?;
        let ids = v.iter().map(|(id, _)| *id).collect();
        self.vectors_put
            .borrow_mut()
            .push((name.to_string(), dim, ids));
        Ok(n)
    }

    /// The vectors this transaction stored, as kept, for the server.
    fn vectors_to_push(&self) -> Result<Vec<SharedVector>> {
        let mut out = Vec::new();
        for (model, dim, ids) in self.vectors_put.borrow().iter() {
            for (id, q) in self.cache.stored_vectors_of(model, ids)? {
                out.push(SharedVector {
                    model: model.clone(),
                    dim: *dim,
                    id,
                    q,
                });
            }
        }
        Ok(out)
    }

    /// The server first: this transaction's events (and vectors) inserted there, its head
    /// row moved and its transaction committed — once it has, the events exist; then the
    /// cache's derived parts caught up and the cache committed. A cache that then fails to
    /// commit only lags (said, not an error): the next catch-up reads the events back.
    pub fn commit(self) -> Result<()> {
        injected_fault()?;
        let vectors = self.vectors_to_push()?;
        let mine = self.unpushed();
        let CachedBatch {
            mut cache,
            lease,
            restore_hash_index,
            ..
        } = self;
        let head = cache.head().cloned();
        let on_server = lease.commit(
            &vectors,
            &mut |push| {
                Reads::scan(&cache, &mine, |ev| {
                    push(&ev)?;
                    Ok(true)
                })
            },
            head.as_ref(),
        )?;
        let caught_up = match restore_hash_index {
            true => cache.restore_hash_index(),
            false => Ok(()),
        }
        .and_then(|()| cache.catch_up());
        match cache.commit_caught_up(caught_up) {
            // What the server committed is the truth: say the append succeeded, and that
            // this host's copy lags (the next program catches it up).
            Err(e) if on_server => {
                notices::push(format!(
                    "the events are committed on the server, but this host's cache of them could not be ({e}); it is behind, and is caught up by the next program that opens the ledger"
                ));
                Ok(())
            }
            other => other,
        }
    }
}

/// What an event becomes before the server links it ([`Unlinked`]): its time, its meta's
/// canonical text and its hashed payload up to its link.
struct Ready {
    ts: String,
    meta: String,
    before_link: Vec<u8>,
}

impl Ready {
    /// `ev` made ready at `clock`'s time; `None` when its meta has no canonical form (the
    /// host's append says why).
    fn of(ev: &NewEvent, clock: &Clock) -> Option<Ready> {
        let mut before_link = Vec::new();
        canon::write_event_payload_before_link(
            &mut before_link,
            ev.kind.as_str(),
            &ev.content,
            &ev.meta,
        )
        .ok()?;
        Some(Ready {
            ts: clock.ts(),
            meta: canon::to_string(&Value::Object(ev.meta.clone())).ok()?,
            before_link,
        })
    }

    /// The first of `evs` made ready, as many as one message to the server takes
    /// ([`AT_HEAD_MAX`]).
    fn fitting(evs: &[NewEvent], clock: &Clock) -> Vec<Ready> {
        let mut out = Vec::new();
        let mut size = 0;
        for ev in evs {
            let Some(r) = Ready::of(ev, clock) else { break };
            size += r.unlinked(ev).size();
            if size > AT_HEAD_MAX {
                break;
            }
            out.push(r);
        }
        out
    }

    /// The event as the server is handed it.
    fn unlinked<'a>(&'a self, ev: &'a NewEvent) -> Unlinked<'a> {
        Unlinked {
            ts: &self.ts,
            kind: ev.kind.as_str(),
            content: &ev.content,
            meta: &self.meta,
            before_link: &self.before_link,
        }
    }
}

/// Every read of a cached ledger is the cache's: caught up from the server, and read at
/// SQLite's speed with every derived index beside it.
impl ReadsThrough for Cached {
    type Through = sqlite::Ledger;
    fn reads_through(&self) -> &sqlite::Ledger {
        &self.cache
    }
}

/// A cached transaction reads the cache's transaction, which holds its own appends.
impl<'a> ReadsThrough for CachedBatch<'a> {
    type Through = sqlite::Batch<'a>;
    fn reads_through(&self) -> &sqlite::Batch<'a> {
        &self.cache
    }
}

/// Links and inserts go to the cache's transaction; the commit pushes them (a long write's
/// as it goes: `CachedBatch::push_if_due`).
impl Txn for CachedBatch<'_> {
    fn append_linked(&mut self, ev: &NewEvent, ts: &str) -> Result<Event> {
        let appended = Txn::append_linked(&mut self.cache, ev, ts)?;
        self.push_if_due()?;
        Ok(appended)
    }
    fn insert_verbatim(&mut self, ev: &Event, links: Links) -> Result<()> {
        if let Some(why) = verbatim_refusal(self.cache.head(), ev, links) {
            return Err(fork_error(why));
        }
        CachedBatch::insert_verbatim(self, ev)
    }
}

/// The session's capabilities are the cache's, but for vectors, which are kept for the push.
impl SessionTxn for CachedBatch<'_> {
    fn put_vectors(&mut self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        CachedBatch::put_vectors(self, name, dim, v)
    }
    fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>> {
        SessionTxn::retention_candidates(&self.cache, before, kind, source, cutoff, limit)
    }
    fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>> {
        SessionTxn::quoting(&self.cache, id, content)
    }
    fn erased_by(&self, id: i64) -> Result<Option<i64>> {
        SessionTxn::erased_by(&self.cache, id)
    }
    fn scrub(&mut self, target: &Event) -> Result<()> {
        SessionTxn::scrub(&mut self.cache, target)
    }
    fn compact_after_erasure(&mut self) -> Result<()> {
        SessionTxn::compact_after_erasure(&mut self.cache)
    }
    fn checkpoint(
        &self,
        name: &str,
        format: i64,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<i64>> {
        SessionTxn::checkpoint(&self.cache, name, format, max_id, read)
    }
}

/// An append on a cached ledger is [`Cached::begin`]'s transaction, committed by
/// [`CachedBatch::commit`]: the path every program's write takes.
impl Writer for Cached {
    fn transact<T>(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<T>) -> Result<T> {
        let mut batch = self.begin()?;
        let out = f(&mut batch)?;
        batch.commit()?;
        Ok(out)
    }
    /// [`Writer::append_independents`] of one.
    fn append_independent(&mut self, ev: &NewEvent, clock: &Clock) -> Result<Event> {
        let mut out = None;
        self.append_independents(std::slice::from_ref(ev), clock, &mut |e| {
            out = Some(e);
            Ok(())
        })?;
        out.ok_or_else(|| Error::bad_input(None, "the event was not appended"))
    }
    /// Linked by the server, as many at a time as one round trip takes
    /// (`Cached::append_at_head`); an event the server does not link, by this host in
    /// [`Cached::begin`]'s transaction.
    fn append_independents(
        &mut self,
        evs: &[NewEvent],
        clock: &Clock,
        appended: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<()> {
        let mut rest = evs;
        while let Some(first) = rest.first() {
            let n = match self.append_at_head(rest, clock, appended)? {
                0 => {
                    appended(self.transact(&mut |tx| tx.append_linked(first, &clock.ts()))?)?;
                    1
                }
                n => n,
            };
            rest = &rest[n..];
        }
        Ok(())
    }
}

/// A write session on a cached ledger runs in [`Cached::begin`]'s transaction; what it
/// keeps beside the ledger (projection checkpoints, erased bytes) is the cache's.
impl SessionWriter for Cached {
    fn session_ending<T>(
        &mut self,
        f: &mut dyn FnMut(&mut dyn SessionTxn) -> Result<Ending<T>>,
    ) -> Result<T> {
        let mut batch = self.begin()?;
        match f(&mut batch)? {
            Ending::Commit(out) => {
                batch.commit()?;
                Ok(out)
            }
            // Dropped uncommitted: the server's lock and the cache's transaction roll back.
            Ending::RollBack(out) => Ok(out),
        }
    }
    fn forget_erased_bytes(&mut self) -> Result<bool> {
        self.cache.truncate_wal()
    }
    fn keep_checkpoint(&mut self, c: &Checkpoint) {
        SessionWriter::keep_checkpoint(&mut self.cache, c)
    }
    fn in_snapshot<T>(&self, f: &mut dyn FnMut(&Self) -> Result<T>) -> Result<T> {
        self.cache.in_snapshot(|_| f(self))
    }
}

#[cfg(test)]
impl Cached {
    /// The server's connection (a test forces its isolation level, counts its retries).
    pub(crate) fn server_mut(&mut self) -> &mut postgres::PgLog {
        &mut self.server.log
    }
}
