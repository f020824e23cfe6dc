//! Deterministic ledger metrics (SPEC §4 pmm-metrics, FORMATS.md §12): a fold over events in
//! id order, plus the chain counts from [`crate::chain::Verifier`].
//!
//! As in the reference, `metrics_update` events are instrumentation: they are left out of the
//! counts (but not out of the chain check), so that appending one does not change the metrics
//! it records and `pmm-metrics --append` is idempotent.

use crate::event::{Event, Kind, Source};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Autonomy counts: ticks and their decisions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Autonomy {
    /// `autonomy_tick` events.
    pub ticks: u64,
    /// Ticks by `decision` (from the tick's JSON content; `unknown` when unreadable).
    pub decisions: BTreeMap<String, u64>,
    /// The newest `reflection` whose meta source is `autonomy_kernel`.
    pub last_reflection_id: Option<i64>,
}

/// The metrics object `pmm-metrics` prints.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LedgerMetrics {
    /// Always `metrics`.
    #[serde(rename = "type")]
    pub record: &'static str,
    /// Events, not counting `metrics_update`.
    pub event_count: u64,
    /// Events per kind, not counting `metrics_update`.
    pub kinds: BTreeMap<String, u64>,
    /// `prev_hash` values that are not the previous event's hash.
    pub broken_links: u64,
    /// Stored hashes that do not recompute.
    pub hash_mismatches: u64,
    /// Hash of the last event that is not a `metrics_update` (64 zeros when there is none).
    pub last_hash: String,
    /// Open commitments by cid, in the order they were opened.
    pub open_commitments: Vec<String>,
    /// Closed commitments by cid, in the order they were closed.
    pub closed_commitments: Vec<String>,
    /// Open commitments whose origin is `autonomy_kernel`.
    pub internal_goals_open: u64,
    /// Internal goals (origin `autonomy_kernel`) opened and then closed: the kernel's goals
    /// worked (docs/autonomy.md, "Internal goals").
    pub internal_goals_worked: u64,
    /// Conversational turns (`user_message` events).
    pub turns: u64,
    /// Autonomy ticks and decisions.
    pub autonomy: Autonomy,
    /// The adaptive loop: the newest `stability_metrics`, `coherence_check`, `policy_update`
    /// and `meta_policy_update` (id and content) and the outcomes per action (filled in by
    /// `pmm-metrics`, which folds the adaptive projection alongside).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptation: Option<Value>,
    /// Measured replay cost (the one non-deterministic field; absent with `--deterministic`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_ms_per_event: Option<f64>,
}

/// The fold state.
#[derive(Debug, Default)]
pub struct MetricsFold {
    m: LedgerMetrics,
    // cid -> (open order, internal?)
    open: BTreeMap<String, (u64, bool)>,
    closed: BTreeMap<String, u64>,
    seq: u64,
}

fn meta_str(meta: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    meta.get(key).and_then(|v| v.as_str()).map(str::to_string)
}

impl MetricsFold {
    /// Folds one event in.
    pub fn add(&mut self, ev: &Event) {
        if ev.kind == Kind::MetricsUpdate {
            return;
        }
        self.seq += 1;
        let m = &mut self.m;
        m.event_count += 1;
        *m.kinds.entry(ev.kind.to_string()).or_default() += 1;
        m.last_hash = ev.hash.clone().unwrap_or_default();
        match ev.kind {
            Kind::UserMessage => m.turns += 1,
            Kind::CommitmentOpen | Kind::CommitmentClose => {
                let meta = ev.meta_map().unwrap_or_default();
                if let Some(cid) = meta_str(&meta, "cid") {
                    if ev.kind == Kind::CommitmentOpen {
                        let internal = meta_str(&meta, "origin").as_deref()
                            == Some(Source::AutonomyKernel.as_str());
                        self.closed.remove(&cid);
                        self.open.insert(cid, (self.seq, internal));
                    } else if let Some((_, internal)) = self.open.remove(&cid) {
                        m.internal_goals_worked += u64::from(internal);
                        self.closed.insert(cid, self.seq);
                    }
                }
            }
            Kind::AutonomyTick => {
                m.autonomy.ticks += 1;
                let decision = serde_json::from_str::<Value>(&ev.content)
                    .ok()
                    .and_then(|v| {
                        v.get("decision")
                            .and_then(|d| d.as_str())
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| "unknown".into());
                *m.autonomy.decisions.entry(decision).or_default() += 1;
            }
            Kind::Reflection => {
                let meta = ev.meta_map().unwrap_or_default();
                if meta_str(&meta, "source").as_deref() == Some(Source::AutonomyKernel.as_str()) {
                    m.autonomy.last_reflection_id = Some(ev.id);
                }
            }
            _ => {}
        }
    }

    /// The metrics, given the chain counts.
    pub fn finish(mut self, broken_links: u64, hash_mismatches: u64) -> LedgerMetrics {
        let mut open: Vec<(u64, String, bool)> =
            self.open.into_iter().map(|(c, (s, i))| (s, c, i)).collect();
        open.sort();
        let mut closed: Vec<(u64, String)> = self.closed.into_iter().map(|(c, s)| (s, c)).collect();
        closed.sort();
        let m = &mut self.m;
        m.record = "metrics";
        m.internal_goals_open = open.iter().filter(|(_, _, i)| *i).count() as u64;
        m.open_commitments = open.into_iter().map(|(_, c, _)| c).collect();
        m.closed_commitments = closed.into_iter().map(|(_, c)| c).collect();
        m.broken_links = broken_links;
        m.hash_mismatches = hash_mismatches;
        if m.last_hash.is_empty() {
            m.last_hash = "0".repeat(64);
        }
        self.m
    }
}

impl LedgerMetrics {
    /// The reference's `metrics_update` content:
    /// `{event_count:N,kinds:{a:1,b:2},broken_links:N,open_commitments:N,closed_commitments:N,last_hash:<hex>}`.
    pub fn update_text(&self) -> String {
        let kinds: Vec<String> = self.kinds.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        format!(
            "{{event_count:{},kinds:{{{}}},broken_links:{},open_commitments:{},closed_commitments:{},last_hash:{}}}",
            self.event_count,
            kinds.join(","),
            self.broken_links,
            self.open_commitments.len(),
            self.closed_commitments.len(),
            self.last_hash
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, kind: &str, content: &str, meta: &str) -> Event {
        Event {
            hash: Some(format!("{id:064}")),
            ..Event::sample(id, kind, content, meta)
        }
    }

    #[test]
    fn commitments_by_cid() {
        let mut f = MetricsFold::default();
        f.add(&ev(1, "commitment_open", "", r#"{"cid":"aa"}"#));
        f.add(&ev(
            2,
            "commitment_open",
            "",
            r#"{"cid":"bb","origin":"autonomy_kernel"}"#,
        ));
        f.add(&ev(3, "commitment_close", "", r#"{"cid":"aa"}"#));
        f.add(&ev(4, "commitment_close", "", r#"{"cid":"zz"}"#));
        f.add(&ev(5, "metrics_update", "", "{}"));
        f.add(&ev(6, "autonomy_tick", r#"{"decision":"idle"}"#, "{}"));
        let m = f.finish(0, 0);
        assert_eq!(m.open_commitments, vec!["bb"]);
        assert_eq!(m.closed_commitments, vec!["aa"]);
        assert_eq!(m.internal_goals_open, 1);
        assert_eq!(m.event_count, 5);
        assert_eq!(m.autonomy.decisions["idle"], 1);
        assert_eq!(m.last_hash, format!("{:064}", 6));
        assert!(m.update_text().starts_with(
            "{event_count:5,kinds:{autonomy_tick:1,commitment_close:2,commitment_open:2},"
        ));
    }
}
