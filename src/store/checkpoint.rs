//! Projection checkpoints: the folded [`Projections`] stored at an event in the cache table
//! `pmm_checkpoints`, so that a rebuild folds only the events after it (SPEC §5).

use super::{Filter, Ledger, Reads};
use crate::projection::state::Projections;

/// The name of our projection checkpoints in `pmm_checkpoints`.
pub const CHECKPOINT: &str = "projections";
/// The serialized shape of [`Projections`]; bump it whenever that shape changes, so that
/// checkpoints written by an older build are ignored instead of misread. 8: MessagePack with
/// byte-string fields and COMMIT-text digests (7 and before: JSON). 9: the adaptive fold,
/// pinned thresholds and `index_threshold`, unindexed messages and facts. 10: the self-model's
/// tendencies and gaps at the newest summary.
pub const CHECKPOINT_FORMAT: i64 = 10;
/// Save a new checkpoint when a rebuild had to fold at least this many events.
pub const CHECKPOINT_EVERY: u64 = 1000;

/// Drops the checkpoints that no longer match the ledger (their event's hash differs, or
/// ours are of another format), inside the caller's write transaction: the rebuild of a
/// cache that turns and ticks fill again.
pub(crate) fn drop_stale(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM pmm_checkpoints WHERE (name = ?1 AND format <> ?2)
         OR NOT EXISTS (SELECT 1 FROM events e WHERE e.id = event_id AND e.hash = event_hash)",
        rusqlite::params![CHECKPOINT, CHECKPOINT_FORMAT],
    )?;
    Ok(())
}

/// Projections as of an event, and how they were obtained.
pub struct Projected {
    /// The state.
    pub projections: Projections,
    /// The checkpoint it started from, if any.
    pub from_checkpoint: Option<i64>,
    /// Events folded on top of it.
    pub folded: u64,
}

/// Folds events up to `at` (or all) into projections, starting from the newest checkpoint
/// that still matches the ledger when `use_checkpoint` is set.
pub fn project<R: Reads>(
    ledger: &R,
    at: Option<i64>,
    use_checkpoint: bool,
) -> crate::Result<Projected> {
    let target = match at {
        Some(a) => a,
        None => ledger.max_id()?,
    };
    let mut start = None;
    let mut p = Projections::default();
    if use_checkpoint {
        // An unreadable checkpoint is only a cache miss.
        if let Some((id, restored)) =
            ledger.load_checkpoint(CHECKPOINT, CHECKPOINT_FORMAT, target, |_, bytes| {
                Projections::from_checkpoint(bytes)
            })?
        {
            p = restored;
            start = Some(id);
        }
    }
    let filter = Filter {
        since: start.map(|s| s + 1),
        until: Some(target),
        ..Filter::default()
    };
    let mut folded = 0;
    ledger.scan(&filter, |ev| {
        p.apply(&ev);
        folded += 1;
        Ok(true)
    })?;
    Ok(Projected {
        projections: p,
        from_checkpoint: start,
        folded,
    })
}

/// Saves a checkpoint for a *reader* (`pmm-replay --state`), which must leave the ledger as it
/// found it: only into a ledger that already has our checkpoint table (a pmm writer made it),
/// through a connection that neither migrates nor changes the journal mode. A reference-format
/// file, or one no pmm writer has opened, is never touched, nor one whose `-wal` and `-shm`
/// this user must not make (another user's ledger, a directory it cannot write). Best effort,
/// like any cache.
pub fn save_reader_checkpoint(path: &std::path::Path, p: &Projections) {
    let writable = std::fs::metadata(path).is_ok_and(|m| !m.permissions().readonly());
    if !writable || super::companions_forbidden(path).is_some() {
        return;
    }
    let Ok(mut ledger) = Ledger::open_for_check(path) else {
        return;
    };
    if !ledger.has_checkpoint_table().unwrap_or(false) {
        return;
    }
    let bytes = p.to_checkpoint();
    let _ = ledger.save_checkpoint(
        CHECKPOINT,
        CHECKPOINT_FORMAT,
        p.mirror.last_event_id,
        &bytes,
        3,
    );
}

/// Saves a checkpoint of `p` for a writer (a turn, a tick) when the ledger file can be
/// written; one that cannot simply goes without (it rebuilds next time).
pub fn save_projection_checkpoint(path: &std::path::Path, p: &Projections) {
    let bytes = p.to_checkpoint();
    let writable = std::fs::metadata(path).is_ok_and(|m| !m.permissions().readonly());
    if !writable {
        return;
    }
    if let Ok(mut ledger) = Ledger::open_writer(path, 200) {
        let _ = ledger.save_checkpoint(
            CHECKPOINT,
            CHECKPOINT_FORMAT,
            p.mirror.last_event_id,
            &bytes,
            3,
        );
    }
}
