//! The ranges of the `config` values the runtime reads: a retrieval
//! config's `dims` and `limit`, the autonomy thresholds. A write outside them is refused
//! (the write session, `session::refusal`, records a `violation`, as for a policy refusal), and a reader that
//! meets one anyway (an imported ledger, the reference's) keeps its default instead, so no
//! ledger value can make a turn allocate gigabytes or a tick loop forever.

use serde_json::Value;

/// The most embedding dimensions a retrieval config may ask for (the reference uses 64; a
/// turn embeds every scored message with this many sha256 computations per token).
pub const MAX_DIMS: i64 = 4096;

/// The most messages a retrieval config may select for one prompt.
pub const MAX_LIMIT: i64 = 1000;
/// The largest retrieval `budget` (characters of recalled text).
pub const MAX_BUDGET: i64 = 1_000_000;

/// The range of every autonomy threshold (the same as `pmm-tick --set`).
pub const THRESHOLD_RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000_000;

super::vocab::vocabulary! {
    /// How a turn chooses the past events it shows the model: a `retrieval` config's
    /// `strategy` (FORMATS.md §9.1).
    pub enum Strategy {
        /// Whole-ledger recall (`crate::recall`) within a character budget.
        Hybrid = "hybrid",
        /// The reference's: hash64 scores over a bounded window of recent messages.
        Vector = "vector",
        /// The reference's: the newest `limit` messages.
        Fixed = "fixed",
    }
}

super::vocab::vocabulary! {
    /// An autonomy threshold (FORMATS.md §8.3): the keys of an `autonomy_thresholds` config,
    /// of a `policy_update`'s `thresholds`, of `pmm-tick --set` and of the state record, in
    /// the order of the reference's `autonomy_rule_table` text (pmm's `index_threshold` last).
    pub enum Threshold {
        /// Events between autonomous reflections.
        ReflectionInterval = "reflection_interval",
        /// Events between summaries.
        SummaryInterval = "summary_interval",
        /// Events after which an open commitment counts as stalled.
        CommitmentStaleness = "commitment_staleness",
        /// Events after which a stale commitment may be auto-closed.
        CommitmentAutoClose = "commitment_auto_close",
        /// Unindexed messages that call for an `index` tick (pmm's; not in the reference).
        IndexThreshold = "index_threshold",
    }
}

/// A `config` value the runtime must not use, named with its key and the range it must be in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutOfRange {
    /// An integer setting that is not an integer in its range.
    #[error("{key}: {value} is out of range ({lo} to {hi})")]
    Int {
        /// The key.
        key: &'static str,
        /// The value given.
        value: Value,
        /// The least value allowed.
        lo: i64,
        /// The greatest value allowed.
        hi: i64,
    },
    /// A retrieval strategy pmm does not have.
    #[error("strategy: {0} is not \"hybrid\", \"vector\" or \"fixed\"")]
    Strategy(Value),
}

fn int_in(v: &Value, key: &'static str, lo: i64, hi: i64) -> Result<(), OutOfRange> {
    match v.as_i64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(()),
        _ => Err(OutOfRange::Int {
            key,
            value: v.clone(),
            lo,
            hi,
        }),
    }
}

/// Why the content of a `config` event holds a value the runtime must not use, if it does.
/// Only the types and keys pmm reads are checked; anything else (a policy, an `exec_bind`,
/// text that is not JSON) is left to the code that reads it.
pub fn out_of_range(content: &str) -> Option<OutOfRange> {
    let Ok(Value::Object(c)) = serde_json::from_str::<Value>(content) else {
        return None;
    };
    let checked = match c.get("type").and_then(Value::as_str) {
        Some("retrieval") => (|| {
            if let Some(d) = c.get("dims") {
                int_in(d, "dims", 1, MAX_DIMS)?;
            }
            if let Some(l) = c.get("limit") {
                int_in(l, "limit", 1, MAX_LIMIT)?;
            }
            if let Some(b) = c.get("budget") {
                int_in(b, "budget", 1, MAX_BUDGET)?;
            }
            match c.get("strategy") {
                None => Ok(()),
                Some(Value::String(s)) if Strategy::parse(s).is_some() => Ok(()),
                Some(s) => Err(OutOfRange::Strategy(s.clone())),
            }
        })(),
        Some("autonomy_thresholds") => Threshold::ALL
            .iter()
            .filter_map(|k| c.get(k.as_str()).map(|v| (k.as_str(), v)))
            .try_for_each(|(k, v)| int_in(v, k, *THRESHOLD_RANGE.start(), *THRESHOLD_RANGE.end())),
        _ => Ok(()),
    };
    checked.err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.as_str()), Some(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(Strategy::parse("Hybrid"), None);
        assert_eq!(Strategy::parse(""), None);
    }

    #[test]
    fn issue13_item10_config_values_out_of_range_are_named() {
        let bad = |c: &str| {
            out_of_range(c)
                .unwrap_or_else(|| panic!("{c} passed"))
                .to_string()
        };
        assert!(bad(r#"{"type":"retrieval","dims":100000000}"#).starts_with("dims: 100000000"));
        assert!(bad(r#"{"type":"retrieval","dims":0}"#).starts_with("dims"));
        assert!(bad(r#"{"type":"retrieval","dims":"64"}"#).starts_with("dims"));
        assert!(bad(r#"{"type":"retrieval","limit":1000001}"#).starts_with("limit"));
        assert!(bad(r#"{"type":"retrieval","limit":-1}"#).starts_with("limit"));
        assert!(bad(r#"{"type":"retrieval","strategy":"all"}"#).starts_with("strategy"));
        assert!(bad(r#"{"type":"retrieval","budget":0}"#).starts_with("budget"));
        assert!(bad(r#"{"type":"retrieval","budget":1000001}"#).starts_with("budget"));
        assert!(
            bad(r#"{"type":"autonomy_thresholds","summary_interval":0}"#)
                .starts_with("summary_interval")
        );
        assert!(
            bad(r#"{"type":"autonomy_thresholds","reflection_interval":1e12}"#)
                .starts_with("reflection_interval")
        );
        for ok in [
            crate::context::select::RetrievalConfig::DEFAULT_CONTENT,
            r#"{"type":"retrieval","dims":4096,"limit":1000,"strategy":"fixed"}"#,
            r#"{"type":"autonomy_thresholds","summary_interval":40,"other":-1}"#,
            r#"{"type":"policy","forbid_sources":{}}"#,
            "not json",
        ] {
            assert_eq!(out_of_range(ok), None, "{ok}");
        }
    }

    #[test]
    fn out_of_range_values_are_typed_with_their_range() {
        assert_eq!(
            out_of_range(r#"{"type":"retrieval","dims":0}"#),
            Some(OutOfRange::Int {
                key: "dims",
                value: Value::from(0),
                lo: 1,
                hi: MAX_DIMS
            })
        );
        assert_eq!(
            out_of_range(r#"{"type":"retrieval","dims":0}"#)
                .unwrap()
                .to_string(),
            "dims: 0 is out of range (1 to 4096)"
        );
        let s = out_of_range(r#"{"type":"retrieval","strategy":"all"}"#).unwrap();
        assert_eq!(s, OutOfRange::Strategy(Value::from("all")));
        assert_eq!(
            s.to_string(),
            "strategy: \"all\" is not \"hybrid\", \"vector\" or \"fixed\""
        );
    }
}
