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
    /// A retention policy that does not read ([`retention_rules`]).
    #[error("retention: {0}")]
    Retention(String),
}

/// The most rules a retention policy holds.
pub const MAX_RETENTION_RULES: usize = 64;

/// One rule of a retention policy (`{"type":"retention","rules":[…]}`): the events of `kind`
/// and/or written by `source` (`meta.source`) are erased once they are `older_than` seconds
/// older than the tick's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionRule {
    /// Only events of this kind.
    pub kind: Option<String>,
    /// Only events whose `meta.source` is this.
    pub source: Option<String>,
    /// The age, in seconds, past which they go.
    pub older_than: i64,
}

/// `365d`, `12h`, `30m`, `90s`, `2w` as seconds (a positive whole number and one unit).
fn age_secs(text: &str) -> Option<i64> {
    let unit = text.chars().last()?;
    let n: i64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    let secs = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return None,
    };
    n.checked_mul(secs).filter(|s| *s > 0 && n > 0)
}

/// The rules of a `config` content that is a retention policy: `None` when it is not one
/// (another `type`), else the rules or why they do not read. Each rule names a `kind` and/or a
/// `source` (strings; `erasure` and `config` events are never erased by retention) and an
/// `older_than` age (`365d`; units s, m, h, d, w).
pub fn retention_rules(content: &str) -> Option<Result<Vec<RetentionRule>, String>> {
    let Ok(Value::Object(c)) = serde_json::from_str::<Value>(content) else {
        return None;
    };
    if c.get("type").and_then(Value::as_str) != Some("retention") {
        return None;
    }
    let Some(list) = c.get("rules").and_then(Value::as_array) else {
        return Some(Err("\"rules\" must be a list".into()));
    };
    if list.len() > MAX_RETENTION_RULES {
        return Some(Err(format!("at most {MAX_RETENTION_RULES} rules")));
    }
    Some(
        list.iter()
            .enumerate()
            .map(|(i, r)| retention_rule(i, r))
            .collect(),
    )
}

fn retention_rule(i: usize, r: &Value) -> Result<RetentionRule, String> {
    let text = |key: &str| match r.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(v) => Err(format!(
            "rule {i}: {key} must be a non-empty string, not {v}"
        )),
    };
    let (kind, source) = (text("kind")?, text("source")?);
    if kind.is_none() && source.is_none() {
        return Err(format!("rule {i} names neither a kind nor a source"));
    }
    if let Some(k) = kind
        .as_deref()
        .filter(|k| matches!(*k, "erasure" | "config"))
    {
        return Err(format!("rule {i}: {k} events are not erased by retention"));
    }
    let older_than = r
        .get("older_than")
        .and_then(Value::as_str)
        .and_then(age_secs)
        .ok_or_else(|| {
            format!("rule {i}: older_than must be an age such as \"365d\" (s, m, h, d, w)")
        })?;
    Ok(RetentionRule {
        kind,
        source,
        older_than,
    })
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
        Some("retention") => match retention_rules(content) {
            Some(Err(why)) => Err(OutOfRange::Retention(why)),
            _ => Ok(()),
        },
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
