//! Reads through a bounded cache of events by id ([`Cached`]), for a reader that reads the
//! same events again and again: `pmm-verify --deep`'s prompt check reads each turn's recorded
//! selection back by id, and consecutive turns recall mostly the same events.

use super::Reads;
use crate::event::Event;
use crate::{Error, Result};
use rusqlite::Connection;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// How many events the cache of events read by id (`Cached`) keeps at most.
pub const CACHED_EVENTS: usize = 8192;
/// How many bytes of event text that cache keeps at most (one larger event still goes in).
pub const CACHED_BYTES: usize = 16 << 20;

/// A [`Reads`] whose [`Reads::get`] remembers the events it read, oldest dropped first, at
/// most [`CACHED_EVENTS`] of them and [`CACHED_BYTES`] of text (memory stays flat whatever the
/// ledger). Everything else reads through. The events of a ledger never change under a reader
/// that keeps one snapshot ([`super::Ledger::in_snapshot`]), but an erasure by another process
/// blanks rows between snapshots: a read that finds the ledger changed by another connection
/// (SQLite's `data_version`) and a newer erasure than the last it saw empties the cache first,
/// so an erased text is never answered from memory. Inside a transaction the check is made at
/// its first read only (a cache kept across two snapshots must make a read outside them in
/// between, or start anew).
pub(crate) struct Cached<'a, R: Reads> {
    inner: &'a R,
    cache: RefCell<Cache>,
    /// The connection's `data_version` and the newest erasure as of the last read.
    seen: std::cell::Cell<Option<(i64, i64)>>,
    /// Whether the last check was made inside a transaction (reads after it, until one
    /// outside a transaction, see the same snapshot).
    checked_inside: std::cell::Cell<bool>,
}

/// Hashes an id with one multiplication (ids are the cache's only keys: SipHash's defence
/// against chosen keys buys nothing here, and a turn's selection is a hundred look-ups).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_i64(&mut self, id: i64) {
        // An odd multiplier: the low bits (the slot) of consecutive ids stay distinct, the
        // high ones (hashbrown's tag) are mixed.
        self.0 = (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Default)]
struct Cache {
    events: HashMap<i64, Arc<Event>, BuildHasherDefault<IdHasher>>,
    order: VecDeque<i64>,
    bytes: usize,
    hits: u64,
    misses: u64,
}

fn size(e: &Event) -> usize {
    e.ts.len()
        + e.content.len()
        + e.meta.len()
        + e.prev_hash.as_ref().map_or(0, String::len)
        + e.hash.as_ref().map_or(0, String::len)
}

impl Cache {
    fn insert(&mut self, e: &Arc<Event>) {
        if self.events.contains_key(&e.id) {
            return;
        }
        self.bytes += size(e);
        self.order.push_back(e.id);
        self.events.insert(e.id, Arc::clone(e));
        while self.order.len() > CACHED_EVENTS
            || (self.bytes > CACHED_BYTES && self.order.len() > 1)
        {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.events.remove(&old) {
                self.bytes -= size(&gone);
            }
        }
    }
}

impl<'a, R: Reads> Cached<'a, R> {
    /// Reads through `inner`, with an empty cache.
    pub fn new(inner: &'a R) -> Self {
        Cached {
            inner,
            cache: RefCell::default(),
            seen: Default::default(),
            checked_inside: Default::default(),
        }
    }

    /// Empties the cache when another connection committed an erasure since the last read.
    /// Inside a transaction (a snapshot: [`super::Ledger::in_snapshot`], a write) once, at the
    /// first read, as nothing another connection commits is seen there; outside one at every
    /// read, a `PRAGMA data_version`, and the erasure look-up only when the ledger changed.
    fn forget_if_erased(&self) -> Result<()> {
        let conn = self.inner.conn();
        let inside = !conn.is_autocommit();
        if inside && self.checked_inside.get() {
            return Ok(());
        }
        self.checked_inside.set(inside);
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(|e| self.inner.err(e))?;
        let seen = self.seen.get();
        if seen.is_some_and(|(v, _)| v == version) {
            return Ok(());
        }
        let erasure = self.inner.last_erasure()?;
        if seen.is_some_and(|(_, e)| e != erasure) {
            let mut c = self.cache.borrow_mut();
            let (hits, misses) = (c.hits, c.misses);
            *c = Cache {
                hits,
                misses,
                ..Cache::default()
            };
        }
        self.seen.set(Some((version, erasure)));
        Ok(())
    }
}

impl<R: Reads> Reads for Cached<'_, R> {
    fn conn(&self) -> &Connection {
        self.inner.conn()
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        self.inner.err(e)
    }

    fn get(&self, id: i64) -> Result<Option<Event>> {
        Ok(self.get_shared(id)?.map(|e| Event::clone(&e)))
    }

    fn get_shared(&self, id: i64) -> Result<Option<Arc<Event>>> {
        self.forget_if_erased()?;
        {
            let mut c = self.cache.borrow_mut();
            if let Some(e) = c.events.get(&id).cloned() {
                c.hits += 1;
                return Ok(Some(e));
            }
            c.misses += 1;
        }
        let read = self.inner.get(id)?.map(Arc::new);
        if let Some(e) = &read {
            self.cache.borrow_mut().insert(e);
        }
        Ok(read)
    }

    fn remember(&self, event: Arc<Event>) {
        self.cache.borrow_mut().insert(&event);
    }
}

#[cfg(test)]
impl<R: Reads> Cached<'_, R> {
    /// How many reads by id the cache answered, and how many went to the store.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        let c = self.cache.borrow();
        (c.hits, c.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Ledger;

    /// Reads by id give what the store gives, the second read of an event comes from the
    /// cache, and the cache keeps at most its bound.
    #[test]
    fn reads_by_id_are_the_stores_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let clock = crate::event::Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        for i in 0..20 {
            let ev = crate::event::NewEvent::new(
                crate::event::Kind::UserMessage,
                format!("message {i}"),
                Default::default(),
            )
            .unwrap();
            l.append_unchecked(&ev, &clock).unwrap();
        }
        let c = Cached::new(&l);
        for id in [3, 4, 3, 25, 4, 20] {
            assert_eq!(c.get(id).unwrap(), l.get(id).unwrap(), "{id}");
        }
        assert_eq!(c.hits_and_misses(), (2, 4));
        let mut cache = Cache::default();
        let e = l.get(1).unwrap().unwrap();
        for id in 0..(CACHED_EVENTS as i64 + 10) {
            cache.insert(&Arc::new(Event { id, ..e.clone() }));
        }
        assert_eq!(cache.order.len(), CACHED_EVENTS);
        assert_eq!(cache.events.len(), CACHED_EVENTS);
        assert!(!cache.events.contains_key(&9) && cache.events.contains_key(&10));
        assert_eq!(cache.bytes, CACHED_EVENTS * size(&e));
    }

    /// An event handed over is answered from the cache, once however often it is handed.
    #[test]
    fn remembered_events_are_hits_and_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let clock = crate::event::Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        let ev = crate::event::NewEvent::new(
            crate::event::Kind::UserMessage,
            "hello",
            Default::default(),
        )
        .unwrap();
        let e = Arc::new(l.append_unchecked(&ev, &clock).unwrap());
        let c = Cached::new(&l);
        c.remember(Arc::clone(&e));
        c.remember(Arc::clone(&e));
        assert_eq!(c.get(1).unwrap().as_ref(), Some(e.as_ref()));
        assert_eq!(c.hits_and_misses(), (1, 0));
        let cache = c.cache.borrow();
        assert_eq!((cache.order.len(), cache.bytes), (1, size(&e)));
    }

    /// A reader that keeps events read by id must not answer an event from memory after
    /// another process has erased it.
    #[test]
    fn an_event_erased_by_another_process_is_not_answered_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let mut w = Ledger::open_writer(&path, 1000).unwrap();
        let clock = crate::event::Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        for text in ["my card is 4111-1111-1111-1111", "ok"] {
            let ev = crate::event::NewEvent::new(
                crate::event::Kind::UserMessage,
                text,
                Default::default(),
            )
            .unwrap();
            w.append_unchecked(&ev, &clock).unwrap();
        }
        let r = Ledger::open_reader(&path).unwrap();
        let c = Cached::new(&r);
        assert!(c.get(1).unwrap().unwrap().content.contains("4111"));
        assert!(c.get(2).unwrap().is_some());
        assert_eq!(c.hits_and_misses(), (0, 2));
        crate::session::erase(&mut w, &[1], false, "a card number", "owner", &clock).unwrap();
        assert_eq!(c.get(1).unwrap().unwrap().content, "", "read again, blank");
        assert_eq!(c.get(2).unwrap().unwrap().content, "ok");
        assert_eq!(c.hits_and_misses(), (0, 4), "the cache was emptied");
        assert_eq!(c.get(2).unwrap().unwrap().content, "ok");
        assert_eq!(c.hits_and_misses(), (1, 4), "and fills again");
    }
}
