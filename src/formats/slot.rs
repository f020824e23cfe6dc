//! Autonomy slots (FORMATS.md §8.1): wall-clock time cut into fixed intervals from a fixed
//! epoch, each named by a sha256 id so that a slot is handled once even across restarts (the
//! supervisor remembers the ids it has seen, not times).
//!
//! The reference computes `slot = int((time.time() - epoch_unix) // interval)` and
//! `slot_id = sha256_hex(epoch + str(interval) + str(slot))`; both are reproduced here, the id
//! byte for byte, so that `pmm-verify --deep` can check every `autonomy_stimulus`.

use chrono::{DateTime, Utc};
use sha2::{Digest as _, Sha256};

/// The reference's epoch, exactly as it enters the slot id (loop.py:92). The text, not the
/// instant, is hashed, so it must stay spelled this way.
pub const EPOCH: &str = "2025-11-01T00:00:00Z";

/// [`EPOCH`] as Unix seconds (kept as a number so that no parsing can fail at run time; a unit
/// test ties the two together).
pub const EPOCH_UNIX: i64 = 1_761_955_200;

/// The reference's slot length in seconds (loop.py:93). Hashed as its decimal text (`10`).
pub const INTERVAL_SECS: i64 = 10;

/// [`EPOCH`] as an instant.
pub fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(EPOCH_UNIX, 0).unwrap_or_default()
}

/// The slot an instant falls in: whole intervals since `epoch`, rounded towards minus infinity
/// (instants before the epoch get negative slots, as Python's `//` gives). Exact to the
/// nanosecond, so an instant on a boundary starts the new slot. A non-positive interval gives
/// slot 0 rather than a division by zero.
pub fn slot_of(t: DateTime<Utc>, epoch: DateTime<Utc>, interval_secs: i64) -> i64 {
    if interval_secs <= 0 {
        return 0;
    }
    let d = t.signed_duration_since(epoch);
    let nanos = d.num_seconds() as i128 * 1_000_000_000 + d.subsec_nanos() as i128;
    nanos.div_euclid(interval_secs as i128 * 1_000_000_000) as i64
}

/// The slot implied by a ledger timestamp (`YYYY-MM-DDTHH:MM:SS.ffffffZ`), with the
/// reference's epoch and interval; `None` if the text is not a timestamp. The reference takes
/// the slot and the stimulus' `ts` from two clock readings a moment apart, so the two agree on
/// every ledger event seen so far but need not in principle.
pub fn slot_of_ts(ts: &str) -> Option<i64> {
    let t: DateTime<Utc> = ts.parse().ok()?;
    Some(slot_of(t, epoch(), INTERVAL_SECS))
}

/// The slot id: sha256 (lowercase hex) of `epoch + str(interval) + str(slot)` — plain text
/// concatenation, no separators, e.g. `2025-11-01T00:00:00Z10200854`.
pub fn slot_id(epoch: &str, interval_secs: i64, slot: i64) -> String {
    let mut h = Sha256::new();
    h.update(epoch.as_bytes());
    h.update(interval_secs.to_string().as_bytes());
    h.update(slot.to_string().as_bytes());
    format!("{:x}", h.finalize())
}

/// [`slot_id`] with the reference's epoch and interval.
pub fn reference_slot_id(slot: i64) -> String {
    slot_id(EPOCH, INTERVAL_SECS, slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_constant_matches_its_text() {
        let t: DateTime<Utc> = EPOCH.parse().unwrap();
        assert_eq!(t.timestamp(), EPOCH_UNIX);
        assert_eq!(epoch(), t);
    }

    #[test]
    fn formats_worked_example() {
        // FORMATS.md §8.1 / GPT id 4.
        assert_eq!(
            reference_slot_id(200854),
            "38007a883d44d6e82a301de690b4796182eabdf1a4b4d8fb8ca937d7768ecd35"
        );
        assert_eq!(
            slot_id(EPOCH, 10, 200854),
            format!("{:x}", Sha256::digest(b"2025-11-01T00:00:00Z10200854"))
        );
    }

    #[test]
    fn slot_of_a_ledger_timestamp() {
        // GPT id 4 was appended at this ts, in slot 200854.
        assert_eq!(slot_of_ts("2025-11-24T05:55:41.199145Z"), Some(200854));
        assert_eq!(slot_of_ts("not a time"), None);
    }

    #[test]
    fn boundaries_and_negative_slots() {
        let e = epoch();
        let at = |s: i64| DateTime::from_timestamp(EPOCH_UNIX + s, 0).unwrap();
        assert_eq!(slot_of(e, e, 10), 0);
        assert_eq!(slot_of(at(9), e, 10), 0);
        assert_eq!(slot_of(at(10), e, 10), 1);
        assert_eq!(slot_of(at(-1), e, 10), -1);
        assert_eq!(slot_of(at(-10), e, 10), -1);
        assert_eq!(slot_of(at(-11), e, 10), -2);
        assert_eq!(slot_of(at(5), e, 0), 0);
        assert_eq!(slot_id(EPOCH, 10, -1).len(), 64);
    }
}
