//! The readers' traits ([`crate::store::EventLog`], [`crate::store::Indexes`]) on every
//! SQLite reader, through the backend's own [`Reads`]. They are named by path here and never
//! imported into the backend's modules, where [`Reads`] answers.

use super::{vectors, Batch, Filter, Head, Ledger, Reads, TextIndex};
use crate::event::{Event, Kind, NewEvent};
use crate::store::log::{fork_error, verbatim_refusal, Links, Txn, Writer};
use crate::Result;

/// Every SQLite reader (a `Ledger`, a `Batch`, a `Cached` one) reads the event log
/// through the backend's `Reads`, answering each read from an index.
impl<T: Reads> crate::store::log::EventLog for T {
    fn head(&self) -> Result<Option<Head>> {
        Reads::head(self)
    }
    fn get(&self, id: i64) -> Result<Option<Event>> {
        Reads::get(self, id)
    }
    fn scan(&self, filter: &Filter, each: &mut dyn FnMut(Event) -> Result<bool>) -> Result<()> {
        Reads::scan(self, filter, each)
    }
    fn tail(&self, filter: &Filter, n: usize) -> Result<Vec<Event>> {
        Reads::tail(self, filter, n)
    }
    fn count_kind_after(&self, kind: Kind, after: i64) -> Result<u64> {
        Reads::count_kind_after(self, kind, after)
    }
    fn id_of_hash(&self, hash: &str) -> Result<Option<i64>> {
        Reads::id_of_hash(self, hash)
    }
    fn max_id(&self) -> Result<i64> {
        Reads::max_id(self)
    }
    fn get_shared(&self, id: i64) -> Result<Option<std::sync::Arc<Event>>> {
        Reads::get_shared(self, id)
    }
    fn remember(&self, event: std::sync::Arc<Event>) {
        Reads::remember(self, event)
    }
    fn newest_of_kind(&self, kind: Kind, each: &mut dyn FnMut(i64, &str) -> bool) -> Result<()> {
        Reads::newest_of_kind(self, kind, each)
    }
    fn last_of_kind(&self, kind: Kind, limit: usize) -> Result<Vec<Event>> {
        Reads::last_of_kind(self, kind, limit)
    }
    fn last_erasure(&self) -> Result<i64> {
        Reads::last_erasure(self)
    }
    fn find_kind_containing(&self, kind: Kind, needle: &str) -> Result<Option<i64>> {
        Reads::find_kind_containing(self, kind, needle)
    }
    fn has_policy_config(&self) -> Result<bool> {
        Reads::has_policy_config(self)
    }
}

impl<R: Reads> crate::store::indexes::Indexes for R {
    fn text_index(&self, max_unindexed: u64) -> Result<TextIndex<'_>> {
        Reads::text_index(self, max_unindexed)
    }
    fn adjacent(
        &self,
        id: i64,
        kinds: &[Kind],
        n: usize,
        forward: bool,
        window: i64,
    ) -> Result<Vec<Event>> {
        Reads::adjacent(self, id, kinds, n, forward, window)
    }
    fn recallable_count_any(&self) -> Result<u64> {
        Reads::recallable_count_any(self)
    }
    fn vector_model(&self, name: &str) -> Result<Option<vectors::Model>> {
        Reads::vector_model(self, name)
    }
    fn vector_search(
        &self,
        name: &str,
        query: &[f32],
        before: i64,
        k: usize,
    ) -> Result<Vec<(i64, f64)>> {
        Reads::vector_search(self, name, query, before, k)
    }
    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>> {
        Reads::vector_models(self)
    }
    fn missing_vectors(&self, name: &str, after: i64, limit: usize) -> Result<Vec<(i64, String)>> {
        Reads::missing_vectors(self, name, after, limit)
    }
    fn missing_vector_count(&self, name: &str) -> Result<u64> {
        Reads::missing_vector_count(self, name)
    }
    fn stored_vectors(&self, name: &str, limit: usize) -> Result<Vec<(i64, Vec<u8>)>> {
        Reads::stored_vectors(self, name, limit)
    }
    fn load_checkpoint<T>(
        &self,
        name: &str,
        format: i64,
        max_id: i64,
        read: impl FnOnce(i64, &[u8]) -> Option<T>,
    ) -> Result<Option<(i64, T)>> {
        Reads::load_checkpoint(self, name, format, max_id, read)
    }
}

/// The write session's capabilities on a SQLite write transaction: the derived tables live
/// beside the events, in the same transaction.
impl crate::store::log::SessionTxn for super::Batch<'_> {
    fn put_vectors(&mut self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        super::Batch::put_vectors(self, name, dim, v)
    }
    fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>> {
        super::Batch::retention_candidates(self, before, kind, source, cutoff, limit)
    }
    fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>> {
        super::erase::quoting(&self.tx, id, content).map_err(|e| self.err(e))
    }
    fn erased_by(&self, id: i64) -> Result<Option<i64>> {
        super::erase::erased_by(&self.tx, id).map_err(|e| self.err(e))
    }
    fn scrub(&mut self, target: &Event) -> Result<()> {
        // Freed pages are zeroed, not just unlinked: the text must leave the file's bytes.
        self.tx
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        super::erase::scrub(&self.tx, target.id, &target.kind, &target.content)
            .map_err(|e| self.err(e))
    }
    fn compact_after_erasure(&mut self) -> Result<()> {
        super::erase::compact_index(&self.tx).map_err(|e| self.err(e))
    }
    fn checkpoint(
        &self,
        name: &str,
        format: i64,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<i64>> {
        let found =
            Reads::load_checkpoint(self, name, format, max_id, |_, b| read(b).then_some(()));
        Ok(found?.map(|(id, ())| id))
    }
}

/// A SQLite ledger (or a PostgreSQL ledger's cache on this host) runs write sessions in its
/// `BEGIN IMMEDIATE` transactions, as [`crate::store::log::Writer`] does.
impl crate::store::log::SessionWriter for super::Ledger {
    fn session_ending<T>(
        &mut self,
        f: &mut dyn FnMut(
            &mut dyn crate::store::log::SessionTxn,
        ) -> Result<crate::store::log::Ending<T>>,
    ) -> Result<T> {
        let mut batch = self.begin()?;
        match f(&mut batch)? {
            crate::store::log::Ending::Commit(out) => {
                batch.commit()?;
                Ok(out)
            }
            // Dropped uncommitted: rolled back.
            crate::store::log::Ending::RollBack(out) => Ok(out),
        }
    }
    fn forget_erased_bytes(&mut self) -> Result<bool> {
        self.truncate_wal()
    }
    fn keep_checkpoint(&mut self, c: &crate::store::log::Checkpoint) {
        super::save_projection_checkpoint(self.path(), c);
    }
    fn in_snapshot<T>(&self, f: &mut dyn FnMut(&Self) -> Result<T>) -> Result<T> {
        super::Ledger::in_snapshot(self, f)
    }
}

/// A SQLite write transaction links and inserts in its `BEGIN IMMEDIATE` transaction.
impl Txn for Batch<'_> {
    fn append_linked(&mut self, ev: &NewEvent, ts: &str) -> Result<Event> {
        self.insert(&ev.kind, &ev.content, &ev.meta, ts)
    }

    fn insert_verbatim(&mut self, ev: &Event, links: Links) -> Result<()> {
        if let Some(why) = verbatim_refusal(self.head(), ev, links) {
            return Err(fork_error(why));
        }
        Batch::insert_verbatim(self, ev)
    }
}

/// SQLite: `BEGIN IMMEDIATE` ([`Ledger::begin`]) serializes writers on the file's lock, so
/// there is nothing to retry; the commit keeps the derived indexes as today.
impl Writer for Ledger {
    fn transact<T>(&mut self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<T>) -> Result<T> {
        let mut batch = self.begin()?;
        let out = f(&mut batch)?;
        batch.commit()?;
        Ok(out)
    }
}
