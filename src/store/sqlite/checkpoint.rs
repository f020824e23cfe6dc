//! Projection checkpoints' bytes: the folded [`Projections`] stored at an event in the cache
//! table `pmm_checkpoints`, so that a rebuild folds only the events after it (SPEC §5). What
//! to fold is `projection::checkpoint`'s; every reader is its [`Replay`] here.

use super::{Filter, Ledger};
use crate::event::Event;
use crate::projection::checkpoint::Replay;
use crate::projection::state::Projections;
use crate::store::Indexes;

// Folding from a checkpoint lives in `projection`; the names stay reachable as `store::…`
// for the callers that have not moved yet.
pub use crate::projection::checkpoint::{
    catch_up, project, Projected, CHECKPOINT, CHECKPOINT_EVERY, CHECKPOINT_FORMAT,
};

/// Every reader replays: its checkpoints are read from `pmm_checkpoints` (or its backend's
/// kind of it) and its events scanned in id order.
impl<R: Indexes> Replay for R {
    fn head_id(&self) -> crate::Result<i64> {
        self.max_id()
    }

    fn checkpoint_at_most(
        &self,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> Option<Projections>,
    ) -> crate::Result<Option<(i64, Projections)>> {
        self.load_checkpoint(CHECKPOINT, CHECKPOINT_FORMAT, max_id, |_, bytes| {
            read(bytes)
        })
    }

    fn each_event(
        &self,
        since: Option<i64>,
        until: i64,
        each: &mut dyn FnMut(&Event),
    ) -> crate::Result<()> {
        let filter = Filter {
            since,
            until: Some(until),
            ..Filter::default()
        };
        self.scan(&filter, &mut |ev| {
            each(&ev);
            Ok(true)
        })
    }

    fn newest_erasure(&self) -> crate::Result<i64> {
        self.last_erasure()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Kind, NewEvent};
    use serde_json::{json, Map, Value};

    fn append(l: &mut Ledger, kind: Kind, content: &str, meta: Value) -> i64 {
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        let meta: Map<String, Value> = serde_json::from_value(meta).unwrap();
        l.append_unchecked(&NewEvent::new(kind, content, meta).unwrap(), &clock)
            .unwrap()
            .id
    }

    /// Projections kept between reads and caught up by folding the events since would keep
    /// a commitment erased meanwhile, text and all: an erasure makes them projected anew.
    #[test]
    fn catching_up_past_an_erasure_takes_the_erased_text_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let mut l = Ledger::open_writer(&path, 1000).unwrap();
        let card = "pay rent with card 4111-1111-1111-1111";
        append(&mut l, Kind::UserMessage, "hello", json!({"role": "user"}));
        let id = append(
            &mut l,
            Kind::CommitmentOpen,
            &format!("Commitment opened: {card}"),
            json!({"cid": "0badc0de", "text": card}),
        );
        let reader = Ledger::open_reader(&path).unwrap();
        let mut kept = project(&reader, None, true).unwrap().projections;
        assert!(format!("{:?}", kept.mirror.open).contains("4111"));
        let clock = Clock::pinned("2025-11-24T05:55:42Z").unwrap();
        crate::session::erase(&mut l, &[id], false, "a card number", "owner", &clock).unwrap();
        append(&mut l, Kind::Reflection, "later", json!({}));
        assert!(
            catch_up(&reader, &mut kept, None).unwrap(),
            "projected anew"
        );
        assert!(
            !format!("{kept:?}").contains("4111"),
            "{:?}",
            kept.mirror.open
        );
        assert_eq!(kept, project(&reader, None, false).unwrap().projections);
        // With nothing erased since, the events are folded.
        append(&mut l, Kind::Reflection, "and later", json!({}));
        assert!(!catch_up(&reader, &mut kept, None).unwrap());
        assert_eq!(kept, project(&reader, None, false).unwrap().projections);
    }
}
