//! The ledger every program opens ([`Ledger`]) and its write transaction ([`Batch`]): a
//! SQLite file, or a PostgreSQL ledger as this host runs it ([`replica::Cached`]: the server
//! and this host's cache file). One `open` tells them apart by the `--db` argument
//! ([`super::open`]); the backends know nothing of each other.
//!
//! Both kinds hold a SQLite ledger (the file, or the cache), which every read is answered
//! from: the handle dereferences to it ([`sqlite::Ledger`], [`sqlite::Batch`]). What writes
//! is the handle's own, so that a cached ledger's writes always lock the server's head and
//! push: [`Ledger::begin`] and everything that begins a transaction ([`Ledger::rebuild`],
//! [`Ledger::catch_up_index`], [`Ledger::reindex`], [`Ledger::put_vectors`], the traits'
//! `transact` and `session`), and [`Batch::commit`] and [`Batch::put_vectors`]. The SQLite
//! ledger's own methods that write a transaction of theirs without the handle
//! (`save_checkpoint`, `truncate_wal`) touch only this host's copy, as they always did.

use super::log::{Checkpoint, Ending, Links, SessionTxn, SessionWriter, Txn, Writer};
use super::replica::{self, Cached, CachedBatch};
use super::sqlite::{self, Derived, ReadsThrough, DERIVED};
use super::Head;
use crate::event::{Clock, Event, NewEvent};
use crate::Result;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

/// An open ledger: a SQLite file, or a PostgreSQL ledger through this host's cache.
pub enum Ledger {
    /// A ledger file.
    File(sqlite::Ledger),
    /// A PostgreSQL ledger: its server and this host's cache file.
    Cached(Cached),
}

/// An open write transaction of a [`Ledger`]. Dropped without [`Batch::commit`], everything
/// rolls back (on a cached ledger, the server's side too).
pub enum Batch<'a> {
    /// The file's `BEGIN IMMEDIATE` transaction.
    File(sqlite::Batch<'a>),
    /// The server's head locked and the cache's transaction, caught up to it.
    Cached(CachedBatch<'a>),
}

impl Ledger {
    /// The SQLite ledger reads are answered from: the file, or this host's cache.
    pub fn file(&self) -> &sqlite::Ledger {
        match self {
            Ledger::File(l) => l,
            Ledger::Cached(c) => c.cache(),
        }
    }

    /// [`Ledger::file`], for what changes only it (deferring a derived part, keeping vector
    /// packs between searches).
    pub fn file_mut(&mut self) -> &mut sqlite::Ledger {
        match self {
            Ledger::File(l) => l,
            Ledger::Cached(c) => c.cache_mut(),
        }
    }

    /// Starts a write transaction: the file's `BEGIN IMMEDIATE`; on a cached PostgreSQL
    /// ledger, the server's head row locked first and the cache caught up to it.
    pub fn begin(&mut self) -> Result<Batch<'_>> {
        Ok(match self {
            Ledger::File(l) => Batch::File(l.begin()?),
            Ledger::Cached(c) => Batch::Cached(c.begin()?),
        })
    }

    /// The PostgreSQL ledger this is, as shown (no password); `None` for a file.
    pub fn url(&self) -> Option<&str> {
        match self {
            Ledger::File(_) => None,
            Ledger::Cached(c) => Some(c.url()),
        }
    }

    /// Where this ledger's events are read from as stored: the file, or the PostgreSQL URL as
    /// given (for a check that must see the server's rows, not this host's cache of them).
    pub fn source(&self) -> PathBuf {
        match self {
            Ledger::File(l) => l.path().to_path_buf(),
            Ledger::Cached(c) => c.source(),
        }
    }

    /// Catches a cached PostgreSQL ledger up with its server (a no-op on a file): a
    /// long-lived reader calls it before it answers again. How many events were new.
    pub fn refresh(&mut self) -> Result<u64> {
        match self {
            Ledger::File(_) => Ok(0),
            Ledger::Cached(c) => c.refresh(),
        }
    }

    /// Runs `f` inside one read transaction of the SQLite ledger reads are answered from
    /// ([`sqlite::Ledger::in_snapshot`]), handing it this ledger.
    pub fn in_snapshot<T>(&self, f: impl FnOnce(&Ledger) -> Result<T>) -> Result<T> {
        self.file().in_snapshot(|_| f(self))
    }

    /// Rebuilds derived parts `parts` in one write transaction ([`sqlite::Batch::rebuild`]).
    pub fn rebuild(&mut self, parts: &[Derived]) -> Result<()> {
        let batch = self.begin()?;
        batch.rebuild(parts)?;
        batch.commit()
    }

    /// Brings the full-text index up to the head in one write transaction, calling
    /// `progress(done, total)` ([`sqlite::Ledger::catch_up_index`]).
    pub fn catch_up_index(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let batch = self.begin()?;
        batch.catch_up_index(progress)?;
        batch.commit()
    }

    /// Rebuilds every derived part (`pmm-recall --reindex`): how many events of the recalled
    /// kinds the full-text index now holds.
    pub fn reindex(&mut self) -> Result<u64> {
        self.rebuild(&DERIVED)?;
        super::Indexes::recallable_count_any(self)
    }

    /// Stores vectors of model `name` in one write transaction of their own
    /// ([`sqlite::Ledger::put_vectors`]; on a cached ledger, pushed to the server too).
    pub fn put_vectors(&mut self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        let batch = self.begin()?;
        let n = batch.put_vectors(name, dim, v)?;
        batch.commit()?;
        Ok(n)
    }
}

/// Reads are the SQLite ledger's (the file, or the cache): the methods that write are the
/// handle's own (see the module's documentation).
impl Deref for Ledger {
    type Target = sqlite::Ledger;
    fn deref(&self) -> &sqlite::Ledger {
        self.file()
    }
}

impl DerefMut for Ledger {
    fn deref_mut(&mut self) -> &mut sqlite::Ledger {
        self.file_mut()
    }
}

impl<'a> Batch<'a> {
    /// The SQLite transaction reads and writes go to: the file's, or the cache's.
    pub fn file(&self) -> &sqlite::Batch<'a> {
        match self {
            Batch::File(b) => b,
            Batch::Cached(c) => c.cache(),
        }
    }

    /// [`Batch::file`], to write.
    pub fn file_mut(&mut self) -> &mut sqlite::Batch<'a> {
        match self {
            Batch::File(b) => b,
            Batch::Cached(c) => c.cache_mut(),
        }
    }

    /// The head as this transaction sees it (its own appends included).
    pub fn head(&self) -> Option<&Head> {
        self.file().head()
    }

    /// Inserts an event verbatim (import; [`sqlite::Batch::insert_verbatim`]; a cached
    /// ledger's long import pushes to its server as it goes: [`CachedBatch::insert_verbatim`]).
    pub fn insert_verbatim(&mut self, ev: &Event) -> Result<()> {
        match self {
            Batch::File(b) => b.insert_verbatim(ev),
            Batch::Cached(c) => c.insert_verbatim(ev),
        }
    }

    /// Brings the derived parts up to the events appended so far ([`sqlite::Batch::catch_up`]);
    /// a cached ledger pushes to its server instead, and catches them up after the server's
    /// commit ([`CachedBatch::catch_up`]).
    pub fn catch_up(&mut self) -> Result<()> {
        match self {
            Batch::File(b) => b.catch_up(),
            Batch::Cached(c) => c.catch_up(),
        }
    }

    /// Makes the hash index an import into an empty ledger dropped again
    /// ([`sqlite::Batch::restore_hash_index`]); a cached ledger's, after its server's commit
    /// ([`CachedBatch::restore_hash_index`]).
    pub fn restore_hash_index(&mut self) -> Result<()> {
        match self {
            Batch::File(b) => b.restore_hash_index(),
            Batch::Cached(c) => {
                c.restore_hash_index();
                Ok(())
            }
        }
    }

    /// Stores vectors inside this transaction ([`sqlite::Batch::put_vectors`]); a cached
    /// ledger's are pushed to its server at the commit.
    pub fn put_vectors(&self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        match self {
            Batch::File(b) => b.put_vectors(name, dim, v),
            Batch::Cached(c) => c.put_vectors(name, dim, v),
        }
    }

    /// Makes everything appended in this transaction durable at once
    /// ([`sqlite::Batch::commit`]; on a cached ledger, [`CachedBatch::commit`]: the server
    /// first, then the cache).
    pub fn commit(self) -> Result<()> {
        match self {
            Batch::File(b) => b.commit(),
            Batch::Cached(c) => c.commit(),
        }
    }
}

/// The transaction's reads and the writes that stay in it are the SQLite transaction's.
impl<'a> Deref for Batch<'a> {
    type Target = sqlite::Batch<'a>;
    fn deref(&self) -> &sqlite::Batch<'a> {
        self.file()
    }
}

impl<'a> DerefMut for Batch<'a> {
    fn deref_mut(&mut self) -> &mut sqlite::Batch<'a> {
        self.file_mut()
    }
}

/// Every read is the SQLite ledger's (the file, or the cache, caught up when opened and by
/// [`Ledger::refresh`]).
impl ReadsThrough for Ledger {
    type Through = sqlite::Ledger;
    fn reads_through(&self) -> &sqlite::Ledger {
        self.file()
    }
}

/// A transaction reads its own SQLite transaction, which holds its appends.
impl<'a> ReadsThrough for Batch<'a> {
    type Through = sqlite::Batch<'a>;
    fn reads_through(&self) -> &sqlite::Batch<'a> {
        self.file()
    }
}

/// The backend's transaction links and inserts.
impl Txn for Batch<'_> {
    fn append_linked(&mut self, ev: &NewEvent, ts: &str) -> Result<Event> {
        match self {
            Batch::File(b) => Txn::append_linked(b, ev, ts),
            Batch::Cached(c) => Txn::append_linked(c, ev, ts),
        }
    }
    fn insert_verbatim(&mut self, ev: &Event, links: Links) -> Result<()> {
        match self {
            Batch::File(b) => Txn::insert_verbatim(b, ev, links),
            Batch::Cached(c) => Txn::insert_verbatim(c, ev, links),
        }
    }
}

/// The backend's transaction serves the write session.
impl SessionTxn for Batch<'_> {
    fn put_vectors(&mut self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        Batch::put_vectors(self, name, dim, v)
    }
    fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>> {
        SessionTxn::retention_candidates(self.file(), before, kind, source, cutoff, limit)
    }
    fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>> {
        SessionTxn::quoting(self.file(), id, content)
    }
    fn erased_by(&self, id: i64) -> Result<Option<i64>> {
        SessionTxn::erased_by(self.file(), id)
    }
    fn scrub(&mut self, target: &Event) -> Result<()> {
        SessionTxn::scrub(self.file_mut(), target)
    }
    fn compact_after_erasure(&mut self) -> Result<()> {
        SessionTxn::compact_after_erasure(self.file_mut())
    }
    fn checkpoint(
        &self,
        name: &str,
        format: i64,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<i64>> {
        SessionTxn::checkpoint(self.file(), name, format, max_id, read)
    }
}

/// An append is the backend's: the file's transaction, or [`Cached`]'s (server, then cache).
impl Writer for Ledger {
    fn transact<T>(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<T>) -> Result<T> {
        match self {
            Ledger::File(l) => l.transact(f),
            Ledger::Cached(c) => c.transact(f),
        }
    }
    fn append_independent(&mut self, ev: &NewEvent, clock: &Clock) -> Result<Event> {
        match self {
            Ledger::File(l) => l.append_independent(ev, clock),
            Ledger::Cached(c) => c.append_independent(ev, clock),
        }
    }
    fn append_independents(
        &mut self,
        evs: &[NewEvent],
        clock: &Clock,
        appended: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<()> {
        match self {
            Ledger::File(l) => l.append_independents(evs, clock, appended),
            Ledger::Cached(c) => c.append_independents(evs, clock, appended),
        }
    }
}

/// A write session is the backend's, as [`Writer`] is.
impl SessionWriter for Ledger {
    fn session_ending<T>(
        &mut self,
        f: &mut dyn FnMut(&mut dyn SessionTxn) -> Result<Ending<T>>,
    ) -> Result<T> {
        match self {
            Ledger::File(l) => l.session_ending(f),
            Ledger::Cached(c) => c.session_ending(f),
        }
    }
    fn forget_erased_bytes(&mut self) -> Result<bool> {
        match self {
            Ledger::File(l) => l.forget_erased_bytes(),
            Ledger::Cached(c) => c.forget_erased_bytes(),
        }
    }
    fn keep_checkpoint(&mut self, c: &Checkpoint) {
        match self {
            Ledger::File(l) => l.keep_checkpoint(c),
            Ledger::Cached(c2) => c2.keep_checkpoint(c),
        }
    }
    fn in_snapshot<T>(&self, f: &mut dyn FnMut(&Self) -> Result<T>) -> Result<T> {
        self.file().in_snapshot(|_| f(self))
    }
}

/// A cached ledger opened at `url` as this handle.
pub(super) fn cached(url: &str, writer: bool, busy_ms: u64) -> Result<Ledger> {
    replica::open(url, writer, busy_ms).map(Ledger::Cached)
}
