//! Projection checkpoints as folds: [`Projections`] as of an event, started from the newest
//! stored checkpoint that still matches the ledger and folded on from there (SPEC §5). The
//! store keeps the checkpoints' bytes (`pmm_checkpoints`) under the name and format chosen
//! here, and never reads them; every reader of the store, and a write session's transaction,
//! is a [`Replay`] here; this module decides what to fold.

use super::state::Projections;
use crate::event::Event;
use crate::store::log::{Checkpoint, SessionTxn};
use crate::store::{EventLog, Filter, Indexes};
use crate::Result;

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

/// What folding reads of a ledger: its head, its newest checkpoint, a range of its events and
/// its newest erasure. Implemented below for every reader of the store and for a write
/// session's transaction (names of their own, so that they never shadow a reader's methods).
pub trait Replay {
    /// The id of the newest event (0 when there is none).
    fn head_id(&self) -> Result<i64>;
    /// The newest checkpoint named [`CHECKPOINT`] of [`CHECKPOINT_FORMAT`] at or before event
    /// `max_id` that still matches the ledger, with its event id; its bytes are handed to
    /// `read`, and one `read` cannot decode is only a cache miss (`None`).
    fn checkpoint_at_most(
        &self,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> Option<Projections>,
    ) -> Result<Option<(i64, Projections)>>;
    /// Each event with an id from `since` (the first when `None`) through `until`, in id order.
    fn each_event(
        &self,
        since: Option<i64>,
        until: i64,
        each: &mut dyn FnMut(&Event),
    ) -> Result<()>;
    /// The id of the newest `erasure` event (0 when there is none).
    fn newest_erasure(&self) -> Result<i64>;
}

/// Every reader of the store replays: its checkpoints are read from `pmm_checkpoints` (or its
/// backend's kind of it) and its events scanned in id order.
impl<R: Indexes> Replay for R {
    fn head_id(&self) -> Result<i64> {
        self.max_id()
    }

    fn checkpoint_at_most(
        &self,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> Option<Projections>,
    ) -> Result<Option<(i64, Projections)>> {
        self.load_checkpoint(CHECKPOINT, CHECKPOINT_FORMAT, max_id, |_, bytes| {
            read(bytes)
        })
    }

    fn each_event(
        &self,
        since: Option<i64>,
        until: i64,
        each: &mut dyn FnMut(&Event),
    ) -> Result<()> {
        scan_range(self, since, until, each)
    }

    fn newest_erasure(&self) -> Result<i64> {
        self.last_erasure()
    }
}

/// A write transaction replays like any reader: projections kept by a writer between its
/// reads and its write (an MCP server's, a tick's) are caught up inside it.
impl Replay for dyn SessionTxn + '_ {
    fn head_id(&self) -> Result<i64> {
        self.max_id()
    }

    fn checkpoint_at_most(
        &self,
        max_id: i64,
        read: &mut dyn FnMut(&[u8]) -> Option<Projections>,
    ) -> Result<Option<(i64, Projections)>> {
        let mut restored = None;
        let at = self.checkpoint(CHECKPOINT, CHECKPOINT_FORMAT, max_id, &mut |bytes| {
            restored = read(bytes);
            restored.is_some()
        })?;
        Ok(at.zip(restored))
    }

    fn each_event(
        &self,
        since: Option<i64>,
        until: i64,
        each: &mut dyn FnMut(&Event),
    ) -> Result<()> {
        scan_range(self, since, until, each)
    }

    fn newest_erasure(&self) -> Result<i64> {
        self.last_erasure()
    }
}

/// The events of `log` with ids from `since` (the first when `None`) through `until`.
fn scan_range<L: EventLog + ?Sized>(
    log: &L,
    since: Option<i64>,
    until: i64,
    each: &mut dyn FnMut(&Event),
) -> Result<()> {
    let filter = Filter {
        since,
        until: Some(until),
        ..Filter::default()
    };
    log.scan(&filter, &mut |ev| {
        each(&ev);
        Ok(true)
    })
}

/// `p` as the store keeps it, handed to `keep`: its bytes under [`CHECKPOINT`] and
/// [`CHECKPOINT_FORMAT`], at its last event (`SessionWriter::keep_checkpoint`,
/// `store::save_reader_checkpoint`, `store::save_projection_checkpoint`).
pub fn keeping<T>(p: &Projections, keep: impl FnOnce(&Checkpoint) -> T) -> T {
    let bytes = p.to_checkpoint();
    keep(&Checkpoint {
        name: CHECKPOINT,
        format: CHECKPOINT_FORMAT,
        event_id: p.mirror.last_event_id,
        bytes: &bytes,
    })
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
pub fn project<R: Replay + ?Sized>(
    ledger: &R,
    at: Option<i64>,
    use_checkpoint: bool,
) -> Result<Projected> {
    let target = match at {
        Some(a) => a,
        None => ledger.head_id()?,
    };
    let mut start = None;
    let mut p = Projections::default();
    if use_checkpoint {
        // An unreadable checkpoint is only a cache miss.
        if let Some((id, restored)) =
            ledger.checkpoint_at_most(target, &mut |bytes| Projections::from_checkpoint(bytes))?
        {
            p = restored;
            start = Some(id);
        }
    }
    let mut folded = 0;
    ledger.each_event(start.map(|s| s + 1), target, &mut |ev| {
        p.apply(ev);
        folded += 1;
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
pub fn catch_up<R: Replay + ?Sized>(
    r: &R,
    p: &mut Projections,
    until: Option<i64>,
) -> Result<bool> {
    let until = match until {
        Some(u) => u,
        None => r.head_id()?,
    };
    // Read after the head: an erasure committed in between is either seen here or has an id
    // above `until`, so the next catch-up sees it.
    if r.newest_erasure()? > p.mirror.last_event_id {
        *p = project(r, Some(until), true)?.projections;
        return Ok(true);
    }
    // Ids are input (another writer's ledger): nothing follows i64::MAX.
    let Some(since) = p.mirror.last_event_id.checked_add(1) else {
        return Ok(false);
    };
    r.each_event(Some(since), until, &mut |ev| p.apply(ev))?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Kind, NewEvent};
    use crate::store::Ledger;
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
