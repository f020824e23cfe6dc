//! Projection checkpoints' bytes: a fold's state stored at an event in the cache table
//! `pmm_checkpoints`, so that a rebuild folds only the events after it (SPEC §5). The store
//! never reads them: their name, format and what to fold from them are
//! `projection::checkpoint`'s.

use super::Ledger;
use crate::store::log::Checkpoint;

/// Drops the checkpoints that no longer match the ledger (their event's hash differs), and
/// those of a name in a format older than its newest one (formats only go up: a build that
/// changes a fold's bytes bumps it), inside the caller's write transaction: the rebuild of a
/// cache that turns and ticks fill again.
pub(crate) fn drop_stale(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM pmm_checkpoints WHERE
         format < (SELECT max(c.format) FROM pmm_checkpoints c WHERE c.name = pmm_checkpoints.name)
         OR NOT EXISTS (SELECT 1 FROM events e WHERE e.id = event_id AND e.hash = event_hash)",
        [],
    )?;
    Ok(())
}

/// Saves a checkpoint for a *reader* (`pmm-replay --state`), which must leave the ledger as it
/// found it: only into a ledger that already has our checkpoint table (a pmm writer made it),
/// through a connection that neither migrates nor changes the journal mode. A reference-format
/// file, or one no pmm writer has opened, is never touched, nor one whose `-wal` and `-shm`
/// this user must not make (another user's ledger, a directory it cannot write). Best effort,
/// like any cache.
pub fn save_reader_checkpoint(path: &std::path::Path, c: &Checkpoint) {
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
    let _ = ledger.save_checkpoint(c.name, c.format, c.event_id, c.bytes, 3);
}

/// Saves a checkpoint for a writer (a turn, a tick) when the ledger file can be written;
/// one that cannot simply goes without (it rebuilds next time).
pub fn save_projection_checkpoint(path: &std::path::Path, c: &Checkpoint) {
    let writable = std::fs::metadata(path).is_ok_and(|m| !m.permissions().readonly());
    if !writable {
        return;
    }
    if let Ok(mut ledger) = Ledger::open_writer(path, 200) {
        let _ = ledger.save_checkpoint(c.name, c.format, c.event_id, c.bytes, 3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Kind, NewEvent};

    /// A rebuild of the checkpoints drops those whose event no longer matches and those of a
    /// format older than the newest of their name, and keeps the rest: the store needs no
    /// knowledge of what the format is.
    #[test]
    fn stale_checkpoints_and_older_formats_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let mut l = Ledger::open_writer(&path, 1000).unwrap();
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        for i in 0..3 {
            let ev = NewEvent::new(Kind::UserMessage, format!("m{i}"), Default::default());
            l.append_unchecked(&ev.unwrap(), &clock).unwrap();
        }
        l.save_checkpoint("a", 1, 1, b"old", 9).unwrap();
        l.save_checkpoint("a", 2, 2, b"new", 9).unwrap();
        l.save_checkpoint("b", 1, 3, b"other name", 9).unwrap();
        l.conn
            .execute(
                "INSERT INTO pmm_checkpoints (name, event_id, event_hash, format, state) VALUES ('b', 2, 'not its hash', 1, x'00')",
                [],
            )
            .unwrap();
        drop_stale(&l.conn).unwrap();
        let mut st = l
            .conn
            .prepare("SELECT name, event_id, format FROM pmm_checkpoints ORDER BY name, event_id")
            .unwrap();
        let left: Vec<(String, i64, i64)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(left, vec![("a".into(), 2, 2), ("b".into(), 3, 1)]);
    }
}
