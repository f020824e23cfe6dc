//! What erasure asks of a SQLite ledger besides scrubbing (which the write session does
//! through [`crate::store::log::SessionTxn`]): the later events that quote a text, the
//! erasure that names an event, the retention rules' candidates, and the WAL truncated after
//! a commit ([`super::erase`] holds the SQL).

use super::{erase, Batch, Ledger, Reads};
use crate::event::Event;
use crate::Result;

/// What an erasure (`crate::session::erase`) did.
#[derive(Debug, Clone)]
pub struct Erased {
    /// The `erasure` events appended, one per erased event, in id order.
    pub events: Vec<Event>,
    /// The ids erased, in order (with their quotes when asked).
    pub erased: Vec<i64>,
    /// Whether the WAL was checkpointed and truncated (`false`: a reader held part of it; the
    /// next checkpoint copies and truncates it).
    pub wal_truncated: bool,
}

impl Ledger {
    /// The events after `id` whose content or meta quote `content` (event `id`'s text): the
    /// summaries, lifetime-memory chunks and reflections an erasure should take along
    /// (`--with-quotes`). Texts shorter than [`MIN_QUOTE_CHARS`](super::erase::MIN_QUOTE_CHARS) are not looked for.
    pub fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>> {
        erase::quoting(&self.conn, id, content).map_err(|e| self.err(e))
    }

    /// [`Ledger::quoting`] for many events at once, in one pass over the later events of
    /// the quoting kinds and `embedding_add` (`targets`: `(id, content)`): quoted id → the
    /// ids that quote it, in id order; events quoted by none are left out.
    pub fn quoting_many(
        &self,
        targets: &[(i64, String)],
    ) -> Result<std::collections::BTreeMap<i64, Vec<i64>>> {
        erase::quoting_many(&self.conn, targets).map_err(|e| self.err(e))
    }

    /// Checkpoints the WAL into the file and truncates it (after a write transaction that
    /// erased: the erased text may sit in its frames); `false` when a reader kept part of it.
    pub fn truncate_wal(&self) -> Result<bool> {
        erase::truncate_wal(&self.conn).map_err(|e| self.err(e))
    }

    /// The `erasure` event that names event `id`, if it was erased.
    pub fn erased_by(&self, id: i64) -> Result<Option<i64>> {
        erase::erased_by(&self.conn, id).map_err(|e| self.err(e))
    }
}

impl Batch<'_> {
    /// What one retention rule selects in this transaction (see
    /// [`crate::event::config::RetentionRule`]): the events before `before` of `kind` and by
    /// `source` (when given) older than `cutoff` that still have text, in id order, at most
    /// `limit`.
    pub fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>> {
        erase::retention_candidates(&self.tx, before, kind, source, cutoff, limit)
            .map_err(|e| self.err(e))
    }
}
