//! Projection checkpoints: the folded [`Projections`] stored at an event in the cache table
//! `pmm_checkpoints`, so that a rebuild folds only the events after it (SPEC §5).

use super::{Filter, Ledger};
use crate::projection::state::Projections;
use crate::store::Indexes;

/// The name of our projection checkpoints in `pmm_checkpoints`.
pub const CHECKPOINT: &str = "projections";
/// The serialized shape of [`Projections`]; bump it whenever that shape changes, so that
/// checkpoints written by an older build are ignored instead of misread. 8: MessagePack with
/// byte-string fields and COMMIT-text digests (7 and before: JSON). 9: the adaptive fold,
/// pinned thresholds and `index_threshold`, unindexed messages and facts. 10: the self-model's
/// tendencies and gaps at the newest summary. 11: what thinking ticks spent, and the cause of
/// the kernel's goals that stay open. 12: the self-model's hash prefixes as one sorted byte
/// string. 13: the supersession fold (which events later events correct).
pub const CHECKPOINT_FORMAT: i64 = 13;
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
pub fn project<R: Indexes>(
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
    ledger.scan(&filter, &mut |ev| {
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

/// Brings projections `p` up to event `until` (the head when `None`) for a process that keeps
/// them between reads (`pmm-mcp` between calls, a turn or a tick between its reads and its
/// write): the events after `p`'s last one, folded. When an `erasure` event came after `p`'s
/// last one, `p` may hold the erased text (an open commitment's, an identity's, a summary's),
/// which folding cannot take out: `p` is projected anew instead, from the newest checkpoint
/// (the erasure deleted those that could hold the text) and the rows as they now are. True
/// when it was.
pub fn catch_up<R: Indexes>(r: &R, p: &mut Projections, until: Option<i64>) -> crate::Result<bool> {
    let until = match until {
        Some(u) => u,
        None => r.max_id()?,
    };
    // Read after the head: an erasure committed in between is either seen here or has an id
    // above `until`, so the next catch-up sees it.
    if r.last_erasure()? > p.mirror.last_event_id {
        *p = project(r, Some(until), true)?.projections;
        return Ok(true);
    }
    // Ids are input (another writer's ledger): nothing follows i64::MAX.
    let Some(since) = p.mirror.last_event_id.checked_add(1) else {
        return Ok(false);
    };
    let filter = Filter {
        since: Some(since),
        until: Some(until),
        ..Filter::default()
    };
    r.scan(&filter, &mut |ev| {
        p.apply(&ev);
        Ok(true)
    })?;
    Ok(false)
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
        l.erase(&[id], false, "a card number", "owner", &clock, &mut |_| {
            Ok(None)
        })
        .unwrap();
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
