//! A PostgreSQL ledger as one host sees it: the server holds the chain, and a cache file on
//! this host holds a copy of its events with every derived index beside them (the full-text
//! index, the Merkle tree, projection checkpoints, vectors), so that recall, replay and the
//! turn read locally at SQLite's speed while the server alone orders appends.
//!
//! # The protocol
//! - **Catching up** (`pull`): the events the server has after the cache's head are read by
//!   id and inserted into the cache, each one checked on the way: its id follows, its
//!   `prev_hash` is the previous event's hash, and its hash is the sha256 of its payload (an
//!   erased row, whose text is gone, is taken as it is: `pmm-verify` checks it against its
//!   erasure, and it must be named by an `erasure` event on the server). An erasure caught
//!   up erases the text it names from the cache and its indexes.
//! - **A server that no longer holds what this host verified** (its event at the newest head
//!   this host verified has another hash, or its events end below it: the database was
//!   restored, recreated, rolled back or rewritten) is refused, exit 1 (`witness`): the
//!   cache is kept aside as evidence, and only an operator's `pmm-verify
//!   --accept-restored-server` makes this host follow the server again.
//! - **Erasure**: an `erasure` event caught up erases the text it names from the cache as
//!   the erasing host does (`secure_delete` is on for every cache, the full-text index is
//!   rewritten, the WAL truncated after the commit), so that no byte of it is left on the host.
//! - **Its files** are this user's only (`files`): the directory `0700`, the files `0600`.
//! - **An append** ([`Cached::begin`]): the server's head row is locked first (one short
//!   transaction), the cache is caught up to that head inside its own write transaction, the
//!   write session works on the cache exactly as on a SQLite ledger (policy, links, derived
//!   indexes), and at the commit the new events are inserted on the server, the head row
//!   moved, the server's transaction committed, then the cache's derived indexes caught up
//!   and the cache's transaction committed (unsynced: the server holds the events, and a lost
//!   cache commit is read back). Dropped without a commit, both roll back. The lock is held
//!   only while the write runs: a model call or an embedding happens before
//!   [`Cached::begin`], as on SQLite. A long write (an import) pushes its events as it goes,
//!   inside the same server transaction (`Lease::push`), so that the server never waits
//!   idle long enough to end it (`idle_in_transaction_session_timeout`); it is still all or
//!   nothing.
//! - **An append the server links** (`Cached::append_at_head`: events whose checks read
//!   nothing of the ledger, `Writer::append_independents`, such as `pmm-append`'s plain
//!   lines): one round trip locks the head row, inserts each event with the id, `prev_hash`
//!   and hash the server makes from the head row (the payload up to `prev_hash`, its last key,
//!   is the host's), moves the head row, reads what the catch-up needs, and commits; the host
//!   checks every hash it was given and catches the cache up. The lock is held only while the
//!   server works. A head row that does not say where the events end, or any refusal by the
//!   server, leaves the append to the transaction above.
//! - **Readers** catch the cache up and read it; they never write to the server (their
//!   session is read-only).
//!
//! The cache lives in `PMM_CACHE_DIR`, else `$XDG_CACHE_HOME/pmm`, else `~/.cache/pmm`, one
//! file per ledger named after the server, port, user and database (never the password).

pub mod audit;
mod cached;
mod files;
pub mod witness;

pub use cached::{Cached, CachedBatch, FAULT_ENV};

use super::postgres::{Locked, PgLog, PREFETCH};
use super::sqlite::{self, Batch, Reads};
use super::Head;
use crate::chain::event_digest;
use crate::event::{Event, Kind};
use crate::{Error, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Instant;
use witness::{Divergence, Witness};

/// How many events one round trip of a catch-up reads.
pub(crate) const PAGE: i64 = 5_000;

/// A write whose local work is long (an import) pushes what it has made once the server has
/// waited this share of its idle timeout ([`PgLog::idle_timeout`]) for a statement: the
/// server's transaction is never idle long enough for the server to end it.
const PUSH_WITHIN: u32 = 4;

/// The server behind a cached ledger.
pub(crate) struct Upstream {
    /// The connection.
    pub(crate) log: PgLog,
    /// Opened by a writer (a reader's session is read-only and never locks).
    pub(crate) writer: bool,
    /// The newest head this host verified, kept beside the cache.
    pub(crate) witness: Witness,
}

/// The server's side of one write transaction: the head row locked until the commit. Dropped
/// without [`Lease::commit`], the server's transaction is rolled back.
pub(crate) struct Lease<'a> {
    log: &'a mut PgLog,
    witness: &'a mut Witness,
    locked: bool,
    /// The server's head as of the lock.
    head: Option<Head>,
    /// What the server held as of the lock (a writer's): lets [`pull`] skip the reads of a
    /// catch-up that has nothing to read. Boxed: the transaction that holds a lease is a
    /// variant of `store::Batch`, beside a file's.
    ends: Option<Box<Locked>>,
    /// The last event this transaction pushed before its commit ([`Lease::push`]), if any.
    pushed: Option<Head>,
    /// When the server last answered inside this transaction: its idle time starts there.
    answered: Instant,
}

impl<'a> Lease<'a> {
    /// Locks the head row when `up` is a writer's and `lock` asks for it: the server's head
    /// as of the lock.
    /// With the cache's head as it was before the lock (a writer's), the lock's round trip
    /// also reads the first events the catch-up would read ([`PgLog::lock_head`]).
    pub(crate) fn take(
        up: &'a mut Upstream,
        lock: bool,
        cache_head: Option<Option<&Head>>,
    ) -> Result<(Lease<'a>, Option<Head>)> {
        let after = cache_head.map(read_after);
        let held = cache_head.flatten().map(|h| h.id);
        if !up.writer || !lock {
            return Ok((
                Lease {
                    log: &mut up.log,
                    witness: &mut up.witness,
                    locked: false,
                    head: None,
                    ends: None,
                    pushed: None,
                    answered: Instant::now(),
                },
                None,
            ));
        }
        // A connection the server closed while this program waited (a restart) is found
        // closed by its first use: connected again, the lock is taken once more.
        let ends = match up.log.lock_head(after, held) {
            Ok(ends) => ends,
            Err(e) => match up.log.revive()? {
                true => up.log.lock_head(after, held)?,
                false => return Err(e),
            },
        };
        let head = ends.head.clone();
        Ok((
            Lease {
                log: &mut up.log,
                witness: &mut up.witness,
                locked: true,
                head: head.clone(),
                ends: Some(Box::new(ends)),
                pushed: None,
                answered: Instant::now(),
            },
            head,
        ))
    }

    /// A lease that locks nothing, holding what the server held at the commit of an append
    /// it linked itself ([`PgLog::append_at_head`]), for the catch-up that follows ([`pull`]).
    pub(crate) fn seen(up: &'a mut Upstream, seen: Locked) -> Lease<'a> {
        Lease {
            log: &mut up.log,
            witness: &mut up.witness,
            locked: false,
            head: seen.head.clone(),
            ends: Some(Box::new(seen)),
            pushed: None,
            answered: Instant::now(),
        }
    }

    /// The server's connection.
    pub(crate) fn log(&self) -> &PgLog {
        self.log
    }

    /// Whether the head row is locked (a writer's).
    pub(crate) fn locks(&self) -> bool {
        self.locked
    }

    /// The last event this transaction pushed before its commit ([`Lease::push`]), if any.
    pub(crate) fn pushed(&self) -> Option<&Head> {
        self.pushed.as_ref()
    }

    /// Whether the server has waited long enough inside this transaction (a writer's) that
    /// the events made meanwhile should be pushed now ([`PUSH_WITHIN`]).
    pub(crate) fn push_due(&self) -> bool {
        self.locked && self.answered.elapsed() >= self.log.idle_timeout() / PUSH_WITHIN
    }

    /// Inserts on the server the events `feed` hands over (this transaction's, after those
    /// pushed before, in id order) inside the locked transaction, before its commit: a long
    /// write keeps the server's transaction from idling until the server ends it. Nothing of
    /// them exists until [`Lease::commit`]; dropped without it, the server rolls them back
    /// with the rest. A reader's lease pushes nothing (its commit refuses the events).
    pub(crate) fn push(&mut self, feed: super::postgres::Feed<'_>) -> Result<()> {
        if !self.locked {
            return Ok(());
        }
        let after = self.pushed.as_ref().or(self.head.as_ref());
        if let Some(last) = self.log.push(after, feed)? {
            self.pushed = Some(last);
        }
        self.answered = Instant::now();
        Ok(())
    }

    /// Inserts on the server the events `feed` hands over (this transaction's own, in id
    /// order, after those [`Lease::push`] pushed), moves its head row and commits; then writes
    /// `head` (the cache's, as caught up and appended to) down as verified. A reader's lease
    /// takes none. Whether the server committed anything.
    pub(crate) fn commit(
        mut self,
        vectors: &[super::postgres::SharedVector],
        feed: super::postgres::Feed<'_>,
        head: Option<&Head>,
    ) -> Result<bool> {
        if !self.locked {
            let mut any = false;
            feed(&mut |_| {
                any = true;
                Ok(())
            })?;
            if !any && vectors.is_empty() {
                self.witness.record(head);
                return Ok(false);
            }
            return Err(Error::bad_input(
                None,
                "this PostgreSQL ledger was opened for reading: nothing can be appended through it",
            ));
        }
        self.log
            .push_and_commit(self.head.as_ref(), self.pushed.as_ref(), feed, vectors)?;
        self.locked = false;
        self.witness.record(head);
        Ok(true)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.locked {
            self.log.rollback_locked();
        }
    }
}

/// The cache file of the ledger at `url` on this host.
pub fn cache_file(url: &str) -> Result<PathBuf> {
    let target = super::postgres::url::parse(url, &super::postgres::url::Env::process())
        .map_err(|m| Error::bad_input(Some("--db".into()), m))?;
    let c = &target.config;
    let who = format!(
        "{:?}|{:?}|{:?}|{:?}",
        c.get_hosts(),
        c.get_ports(),
        c.get_user(),
        c.get_dbname()
    );
    let digest = Sha256::digest(who.as_bytes());
    let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(cache_dir()?.join(format!("pg-{name}.db")))
}

/// `PMM_CACHE_DIR`, else `$XDG_CACHE_HOME/pmm`, else `~/.cache/pmm`.
fn cache_dir() -> Result<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = var("PMM_CACHE_DIR") {
        return Ok(d.into());
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(d).join("pmm"));
    }
    if let Some(h) = var("HOME") {
        return Ok(PathBuf::from(h).join(".cache").join("pmm"));
    }
    Err(Error::bad_input(
        Some("--db".into()),
        "a PostgreSQL ledger keeps its indexes in a cache file on this host: set PMM_CACHE_DIR (or XDG_CACHE_HOME or HOME)",
    ))
}

/// Opens the cached ledger at `url`: the server's connection (a writer's may create the
/// schema, a reader's is read-only), the cache file (`0600`, in a `0700` directory), caught
/// up. A server that no longer holds the newest head this host verified (written down beside
/// the cache, or the cache's own) is refused, and the cache set aside as evidence.
pub(crate) fn open(url: &str, writer: bool, busy_ms: u64) -> Result<Cached> {
    open_with_cache(url, writer, busy_ms, &cache_file(url)?)
}

/// [`open`] with the cache in `file` (the contract suite gives each of its hosts one).
pub(crate) fn open_with_cache(
    url: &str,
    writer: bool,
    busy_ms: u64,
    file: &Path,
) -> Result<Cached> {
    let log = if writer {
        PgLog::open_writer(url, busy_ms)?
    } else {
        PgLog::open_reader(url)?
    };
    files::prepare(file)?;
    let witness = Witness::load(file)?;
    if let Some(head) = witness.head() {
        refuse_if_diverged(head, &log, file)?;
    }
    let mut ledger = sqlite::Ledger::open_writer(file, busy_ms)?;
    sqlite::erase::finish_erasure(file);
    if let Some(head) = ledger.head()?.filter(|c| witness.head() != Some(c)) {
        drop(ledger);
        refuse_if_diverged(&head, &log, file)?;
        ledger = sqlite::Ledger::open_writer(file, busy_ms)?;
    }
    let upstream = Upstream {
        log,
        writer,
        witness,
    };
    let mut cached = Cached::new(upstream, ledger, url)?;
    cached.refresh()?;
    Ok(cached)
}

/// Refuses the server behind `log` when it no longer holds `verified`, setting the cache
/// file aside as evidence.
fn refuse_if_diverged(verified: &Head, log: &PgLog, cache: &Path) -> Result<()> {
    match witness::judge(verified, log)? {
        None => Ok(()),
        Some(divergence) => {
            let aside = witness::set_aside(cache, divergence.finding())?;
            Err(witness::refused(log.url(), divergence, aside))
        }
    }
}

/// Catches the cache up inside `batch` from the server behind `lease`: every event the server
/// has after the batch's head, each link and hash checked, and the shared vectors. How many
/// events were read. Under a writer's lock, what the lock saw spares the reads that would
/// find nothing: the server ending at the cache's own head (id and hash) is still holding it,
/// and has nothing after it.
pub(crate) fn pull(batch: &mut Batch<'_>, lease: &mut Lease<'_>) -> Result<u64> {
    let prefetched = lease.ends.as_mut().and_then(|e| e.prefetched.take());
    let log = lease.log();
    let ends = lease.ends.as_deref();
    let held = |e: &Locked| {
        e.head.as_ref() == batch.head() && e.last_event == e.head.as_ref().map_or(0, |h| h.id)
    };
    let pulled = match ends {
        Some(e) if held(e) => 0,
        _ => pull_events(batch, log, prefetched)?,
    };
    pull_vectors(batch, log, ends.map(|e| e.vectors_seq))?;
    Ok(pulled)
}

/// The id a cache whose head is `head` reads the server's events after: its head's own
/// event comes first, to show that the server still holds it.
pub(crate) fn read_after(head: Option<&Head>) -> i64 {
    head.map_or(0, |h| h.id - 1)
}

/// [`pull`]'s events; the first page is `prefetched` when the head lock's round trip read it
/// after the same id ([`PgLog::lock_head`]).
fn pull_events(
    batch: &mut Batch<'_>,
    log: &PgLog,
    mut prefetched: Option<(i64, Vec<Event>)>,
) -> Result<u64> {
    let mut pulled = 0u64;
    let mut scratch = Vec::with_capacity(1024);
    let mut erased = false;
    // The first page starts at the cache's head, which must still be the server's.
    let mut held = batch.head().cloned();
    loop {
        let after = batch.head().map_or(0, |h| h.id);
        let from = after - i64::from(held.is_some());
        // A short page is the server's end as of this read: no second round trip to learn
        // that nothing follows (under the head lock nothing can; without it, the next
        // catch-up reads what came since).
        let (mut page, last_page) = match prefetched.take() {
            Some((a, page)) if a == from => {
                let short = (page.len() as i64) < PREFETCH;
                (page, short)
            }
            _ => {
                let page = log.events_after(from, PAGE)?;
                let short = (page.len() as i64) < PAGE;
                (page, short)
            }
        };
        if let Some(head) = held.take() {
            still_held(&head, &mut page, log)?;
        }
        if page.is_empty() {
            break;
        }
        for ev in page {
            check(batch.head(), &ev, &mut scratch, log)?;
            batch.insert_verbatim(&ev)?;
            if ev.kind == Kind::Erasure {
                if let Some(target) = crate::event::erasure::erased_id(&ev.meta) {
                    erased |= batch.scrub_pulled(target)?;
                }
            }
            pulled += 1;
        }
        if last_page {
            break;
        }
    }
    if erased {
        batch.compact_index()?;
    }
    Ok(pulled)
}

/// Takes the cache's head off the front of `page` (the server's events from the head's id
/// on), or refuses the server: its event there has another hash, or it has none.
fn still_held(head: &Head, page: &mut Vec<Event>, log: &PgLog) -> Result<()> {
    let divergence = match page.first() {
        Some(ev) if ev.id == head.id && ev.hash == head.hash => {
            page.remove(0);
            return Ok(());
        }
        Some(ev) if ev.id == head.id => Divergence::Rewritten {
            id: head.id,
            verified: head.hash.clone(),
            found: ev.hash.clone(),
        },
        _ => Divergence::RolledBack {
            id: head.id,
            verified: head.hash.clone(),
            server_head: {
                use super::log::EventLog;
                log.head()?.map_or(0, |h| h.id)
            },
        },
    };
    Err(witness::refused(log.url(), divergence, None))
}

/// Copies the vectors the server has after the cache's last one (another host embedded them);
/// none when the server's last, as of the lock (`server`), is already here.
fn pull_vectors(batch: &Batch<'_>, log: &PgLog, server: Option<i64>) -> Result<()> {
    let mut seq = batch.pulled_vectors_seq()?;
    if server.is_some_and(|last| last <= seq) {
        return Ok(());
    }
    let start = seq;
    loop {
        let page = log.vectors_after(seq, PAGE)?;
        let Some(last) = page.last().map(|r| r.0) else {
            break;
        };
        for (_, v) in &page {
            batch.put_stored_vector(&v.model, v.dim, v.id, &v.q)?;
        }
        seq = last;
        if (page.len() as i64) < PAGE {
            break;
        }
    }
    if seq != start {
        batch.set_pulled_vectors_seq(seq)?;
    }
    Ok(())
}

/// Refuses an event that does not continue `head`, or whose hash is not its payload's (an
/// erased row's must be named, with its hash, by an `erasure` event on the server).
fn check(head: Option<&Head>, ev: &Event, scratch: &mut Vec<u8>, log: &PgLog) -> Result<()> {
    let damaged = |why: String| Error::Damaged {
        path: Path::new(log.url()).into(),
        why: format!(
            "{why}; the cache on this host was not changed (run pmm-verify on the ledger)"
        ),
    };
    let (want_id, want_prev) = match head {
        None => (1, None),
        Some(h) => (h.id.saturating_add(1), h.hash.as_deref()),
    };
    if ev.id != want_id {
        return Err(damaged(format!(
            "the server's next event is {}, not {want_id}",
            ev.id
        )));
    }
    if ev.prev_hash.as_deref() != want_prev {
        return Err(damaged(format!(
            "event {} does not link to event {}",
            ev.id,
            want_id - 1
        )));
    }
    let erased = ev.content.is_empty() && ev.meta == "{}";
    let meta = serde_json::from_str::<serde_json::Value>(&ev.meta)
        .ok()
        .and_then(|v| v.as_object().cloned());
    let ok = match meta {
        Some(meta) => event_digest(
            scratch,
            ev.kind.as_str(),
            &ev.content,
            &meta,
            ev.prev_hash.as_deref(),
        )
        .is_ok_and(|d| Some(d.to_string()) == ev.hash),
        None => false,
    };
    if !(ok || erased && erasure_names(ev, log)?) {
        return Err(damaged(format!(
            "event {}'s hash is not the hash of its content (hash_mismatch{})",
            ev.id,
            if erased {
                ": its text is blank, but no erasure event names it"
            } else {
                ""
            }
        )));
    }
    Ok(())
}

/// Whether an `erasure` event on the server, after `ev`, names `ev` and its hash (a row
/// blanked by `pmm_erase_text` alone, without one, is a tampered row).
fn erasure_names(ev: &Event, log: &PgLog) -> Result<bool> {
    let Some(meta) = log.erasure_naming(ev.id)? else {
        return Ok(false);
    };
    let named = serde_json::from_str::<serde_json::Value>(&meta)
        .ok()
        .and_then(|m| m.get("erased_hash")?.as_str().map(str::to_string));
    Ok(named.is_some() && named == ev.hash)
}

#[cfg(test)]
mod tests;
