//! Projection checkpoints as folds: [`Projections`] as of an event, started from the newest
//! stored checkpoint that still matches the ledger and folded on from there (SPEC §5). The
//! store keeps the checkpoints' bytes (`pmm_checkpoints`) and implements [`Replay`] for every
//! reader; this module decides what to fold.

use super::state::Projections;
use crate::event::Event;
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
/// its newest erasure. The store implements it for every reader, so that the folds name no
/// store type (names of their own, so that they never shadow a reader's methods).
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
