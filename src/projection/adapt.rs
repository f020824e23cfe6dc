//! The adaptive fold (FORMATS.md §8.2 step 6–7, §8.8, §8.10, §8.11): what the kernel's loop
//! watches of its own actions — the window `stability_metrics` is computed over, the claims a
//! `coherence_check` compares, the outcomes learning has not yet judged, and the newest of each
//! of these events, so that a tick writes one only when its content changed (compared with the
//! newest one of the whole ledger, not with a 200-event window, §17 item 17).
//!
//! Learning judges outcomes in batches: every [`LEARN_BATCH`] outcomes of an action that has a
//! threshold (`autonomy_reflect`, `autonomy_summarize`) form one piece of evidence, judged once
//! by the tick that completed it; every [`META_BATCH`] `policy_update`s likewise for the
//! `meta_policy_update`. So the same evidence never justifies two updates, and a ledger where
//! nothing acts (idle ticks only) never learns anything.

use crate::canon;
use crate::event::config::Threshold;
use crate::event::{Event, Kind};
use crate::projection::mirror::Thresholds;
use crate::pystr;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};

/// Events `stability_metrics` looks back over (the reference's default window).
pub const STABILITY_WINDOW: usize = 100;

/// Outcomes of one action that learning judges together.
pub const LEARN_BATCH: usize = 5;

/// `policy_update`s the meta-policy judges together.
pub const META_BATCH: usize = 3;

/// The action kinds learning adjusts, with the threshold each moves.
pub const LEARNED: [(&str, Threshold); 2] = [
    ("autonomy_reflect", Threshold::ReflectionInterval),
    ("autonomy_summarize", Threshold::SummaryInterval),
];

const F_POLICY: u8 = 1;
const F_COMMIT: u8 = 2;
const F_CLOSE: u8 = 4;
const F_REFLECTION: u8 = 8;
const F_CLAIM: u8 = 16;
const F_STABILITY: u8 = 32;

/// Outcomes of one action: (outcome id, `observed_result`), oldest first.
pub type Batch = Vec<(i64, String)>;

/// `policy_update`s: (id, events after the reflection before it).
pub type PolicyBatch = Vec<(i64, i64)>;

/// One claim a `coherence_check` compares: its event, domain and value (canonical JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainClaim {
    /// The `claim` event.
    pub id: i64,
    /// Its `domain` (a string as is, anything else as canonical JSON).
    pub domain: String,
    /// Its `value`, as canonical JSON.
    pub value: String,
}

/// Outcome counts of one action kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// `success`.
    pub success: u64,
    /// `no_delta`.
    pub no_delta: u64,
    /// `failure`.
    pub failure: u64,
    /// `partial`.
    pub partial: u64,
}

impl Tally {
    fn add(&mut self, result: &str) {
        match result {
            "success" => self.success += 1,
            "no_delta" => self.no_delta += 1,
            "failure" => self.failure += 1,
            "partial" => self.partial += 1,
            _ => {}
        }
    }
}

/// The adaptive fold (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdaptLog {
    /// Flags of the newest [`STABILITY_WINDOW`] events (the reference's `read_tail(100)`;
    /// the `stability_metrics` among them are not counted).
    window: VecDeque<u8>,
    /// The newest `stability_metrics`: id and content.
    pub last_stability: Option<(i64, String)>,
    /// Claims with a domain and a value (`CLAIM:` lines of replies, `claim` events that are
    /// not a line of the reply before them), in ledger order.
    pub claims: Vec<DomainClaim>,
    /// The `CLAIM:` lines of the newest `assistant_message`.
    #[serde(default)]
    pub reply_claims: Vec<String>,
    /// The newest `coherence_check`: id and content.
    pub last_coherence: Option<(i64, String)>,
    /// Every outcome per action kind, in order of first appearance.
    pub outcomes: Vec<(String, Tally)>,
    /// Outcomes of learned actions not yet judged: action kind → (outcome id, result).
    pub pending: BTreeMap<String, Batch>,
    /// Completed batches waiting for their judgement: action kind, outcomes, and whether an
    /// `autonomy_tick` has passed since (the tick after a batch completes judges it, once; the
    /// next drops it).
    pub ready: Vec<(String, Batch, bool)>,
    /// The newest `policy_update`: id and content.
    pub last_policy: Option<(i64, String)>,
    /// `policy_update`s not yet judged by the meta-policy: (id, lag after the reflection
    /// before it).
    pub policy_pending: PolicyBatch,
    /// A batch of `policy_update`s waiting for its judgement (like [`AdaptLog::ready`]), with
    /// the id its span starts after and whether a tick has passed since.
    pub policy_ready: Option<(PolicyBatch, i64, bool)>,
    /// Where the next meta batch's span starts (the event after the last judged batch).
    pub meta_since: i64,
    /// The newest `meta_policy_update`: id and content.
    pub last_meta: Option<(i64, String)>,
    /// The newest `reflection`.
    pub last_reflection: Option<i64>,
    /// The newest event.
    pub head: i64,
}

fn has_line(content: &str, marker: &str) -> bool {
    content.contains(marker)
        && pystr::splitlines(content)
            .iter()
            .any(|l| l.starts_with(marker))
}

fn flags(ev: &Event) -> u8 {
    let mut f = 0;
    match ev.kind {
        Kind::PolicyUpdate => f |= F_POLICY,
        Kind::Reflection => f |= F_REFLECTION,
        Kind::Claim => f |= F_CLAIM,
        Kind::StabilityMetrics => return F_STABILITY,
        _ => {}
    }
    if has_line(&ev.content, "COMMIT:") {
        f |= F_COMMIT;
    }
    if has_line(&ev.content, "CLOSE:") {
        f |= F_CLOSE;
    }
    f
}

/// The claim of a `CLAIM:<type>=<json>` line whose data has a `domain` and a `value`.
fn domain_claim(id: i64, line: &str) -> Option<DomainClaim> {
    let rest = line.strip_prefix("CLAIM:")?;
    let (_, data) = rest.split_once('=')?;
    let Value::Object(d) = serde_json::from_str::<Value>(data).ok()? else {
        return None;
    };
    // The data is the model's: a value with no canonical form (a number out of range) makes
    // no domain claim.
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        other => crate::canon::to_string(other).ok(),
    };
    Some(DomainClaim {
        id,
        domain: text(d.get("domain")?)?,
        value: crate::canon::to_string(d.get("value")?).ok()?,
    })
}

impl AdaptLog {
    /// Folds one event in (events in id order).
    pub fn apply(&mut self, ev: &Event) {
        self.head = ev.id;
        self.window.push_back(flags(ev));
        if self.window.len() > STABILITY_WINDOW {
            self.window.pop_front();
        }
        match ev.kind {
            Kind::StabilityMetrics => self.last_stability = Some((ev.id, ev.content.clone())),
            Kind::CoherenceCheck => self.last_coherence = Some((ev.id, ev.content.clone())),
            Kind::AssistantMessage => self.apply_message(ev),
            // The claim event of a line of the newest reply is that line again (the
            // reference counted both, §17 item 13).
            Kind::Claim if !self.reply_claims.contains(&ev.content) => {
                self.claims.extend(domain_claim(ev.id, &ev.content));
            }
            Kind::OutcomeObservation => self.apply_outcome(ev),
            Kind::PolicyUpdate => self.apply_policy(ev),
            Kind::MetaPolicyUpdate => {
                self.last_meta = Some((ev.id, ev.content.clone()));
                self.policy_ready = None;
            }
            Kind::Reflection => self.last_reflection = Some(ev.id),
            Kind::AutonomyTick => self.tick_passed(),
            _ => {}
        }
    }

    /// An `assistant_message`: its `CLAIM:` lines with a domain and a value are claims.
    fn apply_message(&mut self, ev: &Event) {
        self.reply_claims.clear();
        if !ev.content.contains("CLAIM:") {
            return;
        }
        for line in pystr::splitlines(&ev.content) {
            if line.starts_with("CLAIM:") {
                self.reply_claims.push(line.to_string());
                self.claims.extend(domain_claim(ev.id, line));
            }
        }
    }

    /// An `autonomy_tick`: batches a tick could judge already are dropped; the rest are
    /// this tick's to judge.
    fn tick_passed(&mut self) {
        self.ready.retain(|(_, _, seen)| !*seen);
        for r in &mut self.ready {
            r.2 = true;
        }
        match &mut self.policy_ready {
            Some((_, _, true)) => self.policy_ready = None,
            Some(r) => r.2 = true,
            None => {}
        }
    }

    /// The outcomes of `kind` waiting for judgement, oldest first.
    pub fn ready_of(&self, kind: &str) -> Vec<(i64, String)> {
        self.ready
            .iter()
            .filter(|(k, _, _)| k == kind)
            .flat_map(|(_, b, _)| b.iter().cloned())
            .collect()
    }

    fn apply_outcome(&mut self, ev: &Event) {
        let Ok(c) = serde_json::from_str::<Value>(&ev.content) else {
            return;
        };
        let kind = c.get("action_kind").and_then(Value::as_str).unwrap_or("");
        let result = c
            .get("observed_result")
            .and_then(Value::as_str)
            .unwrap_or("");
        match self.outcomes.iter_mut().find(|(k, _)| k == kind) {
            Some((_, t)) => t.add(result),
            None => {
                let mut t = Tally::default();
                t.add(result);
                self.outcomes.push((kind.to_string(), t));
            }
        }
        if LEARNED.iter().any(|(k, _)| *k == kind) {
            let batch = self.pending.entry(kind.to_string()).or_default();
            batch.push((ev.id, result.to_string()));
            if batch.len() >= LEARN_BATCH {
                let done = std::mem::take(batch);
                self.ready.push((kind.to_string(), done, false));
            }
        }
    }

    fn apply_policy(&mut self, ev: &Event) {
        self.last_policy = Some((ev.id, ev.content.clone()));
        self.ready.clear();
        self.policy_ready = None;
        let lag = ev.id - self.last_reflection.unwrap_or(0);
        self.policy_pending.push((ev.id, lag));
        if self.policy_pending.len() >= META_BATCH {
            let done = std::mem::take(&mut self.policy_pending);
            self.policy_ready = Some((done, self.meta_since, false));
            self.meta_since = ev.id;
        }
    }

    /// The `stability_metrics` content now (FORMATS.md §8.8), canonical JSON.
    pub fn stability_content(&self) -> String {
        crate::canon::built(&self.stability_value())
    }

    fn stability_value(&self) -> Value {
        let t = self.window.iter().filter(|x| **x != F_STABILITY).count();
        let n = |f: u8| self.window.iter().filter(|x| *x & f != 0).count() as f64;
        if t == 0 {
            return json!({
                "metrics": {"claim_stability": 1.0, "commitment_churn": 0.0,
                            "policy_change_rate": 0.0, "reflection_variance": 0.0},
                "stability_score": 1.0, "window_size": STABILITY_WINDOW,
            });
        }
        let t = t as f64;
        let policy = n(F_POLICY) / t;
        let churn = (n(F_COMMIT) + n(F_CLOSE)) / t;
        let score = (1.0 - policy - 0.5 * churn).clamp(0.0, 1.0);
        json!({
            "metrics": {
                "claim_stability": (1.0 - n(F_CLAIM) / t).max(0.0),
                "commitment_churn": churn,
                "policy_change_rate": policy,
                "reflection_variance": n(F_REFLECTION) / t,
            },
            "stability_score": score,
            "window_size": STABILITY_WINDOW,
        })
    }

    /// The `stability_metrics` content as it would be had `extra` more events of the window
    /// carried a `COMMIT:` or `CLOSE:` line (each such line counts once): what an erased
    /// event's text may have added, which only its text could tell (`pmm-verify --deep`).
    pub fn stability_content_with_churn(&self, extra: usize) -> String {
        let mut v = self.stability_value();
        let t = self.window.iter().filter(|x| **x != F_STABILITY).count();
        if extra == 0 || t == 0 {
            return crate::canon::built(&v);
        }
        let n = |f: u8| self.window.iter().filter(|x| *x & f != 0).count() as f64;
        let t = t as f64;
        let policy = n(F_POLICY) / t;
        let churn = (n(F_COMMIT) + n(F_CLOSE) + extra as f64) / t;
        v["metrics"]["commitment_churn"] = json!(churn);
        v["stability_score"] = json!((1.0 - policy - 0.5 * churn).clamp(0.0, 1.0));
        crate::canon::built(&v)
    }

    /// The newest `stability_score`, 1.0 before any `stability_metrics`.
    pub fn stability_score(&self) -> f64 {
        self.last_stability
            .as_ref()
            .and_then(|(_, c)| serde_json::from_str::<Value>(c).ok())
            .and_then(|c| c.get("stability_score").and_then(Value::as_f64))
            .unwrap_or(1.0)
    }

    /// The `stability_metrics` to write now: its content, unless it equals the newest one.
    pub fn stability_due(&self) -> Option<String> {
        let c = self.stability_content();
        (self.last_stability.as_ref().map(|(_, s)| s) != Some(&c)).then_some(c)
    }

    /// The `coherence_check` content now (FORMATS.md §8.10), canonical JSON: every pair of
    /// claims of one domain with different values is a conflict.
    pub fn coherence_content(&self) -> String {
        let mut conflicts = Vec::new();
        let mut by_domain: BTreeMap<&str, Vec<&DomainClaim>> = BTreeMap::new();
        for c in &self.claims {
            by_domain.entry(c.domain.as_str()).or_default().push(c);
        }
        for (domain, cs) in &by_domain {
            for (i, a) in cs.iter().enumerate() {
                for b in &cs[i + 1..] {
                    if a.value != b.value {
                        conflicts.push((*domain, a, b));
                    }
                }
            }
        }
        conflicts.sort_by(|x, y| (x.0, x.1.id, x.2.id).cmp(&(y.0, y.1.id, y.2.id)));
        let high = |a: &str, b: &str| {
            let pair = [a, b];
            pair.contains(&"\"enabled\"") && pair.contains(&"\"disabled\"")
        };
        let list: Vec<Value> = conflicts
            .iter()
            .map(|(d, a, b)| {
                let sev = if high(&a.value, &b.value) {
                    "high"
                } else {
                    "medium"
                };
                json!({"claim_a_event": a.id, "claim_b_event": b.id, "domain": d, "severity": sev})
            })
            .collect();
        let score = if self.claims.is_empty() {
            1.0
        } else {
            (1.0 - conflicts.len() as f64 / self.claims.len() as f64).max(0.0)
        };
        let v = json!({
            "check_type": "claim_consistency",
            "coherence_score": score,
            "conflicts": list,
            "resolution_needed": !conflicts.is_empty(),
            "scope": by_domain.keys().collect::<Vec<_>>(),
        });
        crate::canon::built(&v)
    }

    /// The `coherence_check` to write now: its content, unless no claim came since the newest
    /// one or it equals it.
    pub fn coherence_due(&self) -> Option<String> {
        if let Some((id, _)) = &self.last_coherence {
            if self.claims.last().is_none_or(|c| c.id < *id) {
                return None;
            }
        }
        let c = self.coherence_content();
        (self.last_coherence.as_ref().map(|(_, s)| s) != Some(&c)).then_some(c)
    }

    /// Outcome counts per action kind, as a JSON object (for `--state` and `pmm-metrics`).
    pub fn outcomes_value(&self) -> Value {
        Value::Object(
            self.outcomes
                .iter()
                .map(|(k, t)| (k.clone(), serde_json::to_value(t).unwrap_or(Value::Null)))
                .collect::<Map<String, Value>>(),
        )
    }

    /// What `--state` and `pmm-metrics` show: the newest stability, coherence and policy
    /// events (id and parsed content) and the outcome counts.
    pub fn summary(&self) -> Value {
        let newest = |e: &Option<(i64, String)>| match e {
            Some((id, c)) => json!({
                "id": id,
                "content": serde_json::from_str::<Value>(c).unwrap_or(Value::Null),
            }),
            None => Value::Null,
        };
        json!({
            "stability": newest(&self.last_stability),
            "coherence": newest(&self.last_coherence),
            "policy_update": newest(&self.last_policy),
            "meta_policy_update": newest(&self.last_meta),
            "outcomes": self.outcomes_value(),
        })
    }
}

/// The suggestion for one batch of outcomes (FORMATS.md §8.11, with `no_delta` counted as
/// a failure: nothing was gained): `(change, reason)`, or none for a balanced batch.
fn judge(batch: &[(i64, String)]) -> Option<(&'static str, String)> {
    let n = batch.len() as f64;
    let count = |r: &[&str]| {
        batch
            .iter()
            .filter(|(_, x)| r.contains(&x.as_str()))
            .count()
    };
    let failure = count(&["failure", "no_delta"]) as f64 / n;
    let success = count(&["success"]) as f64 / n;
    if failure >= 0.7 {
        let why = format!(
            "Failure rate {failure:.2} >= 0.7 (no_delta counts as failure; {} outcomes)",
            batch.len()
        );
        Some(("decrease_frequency", why))
    } else if success >= 0.8 {
        let why = format!(
            "Success rate {success:.2} >= 0.8 ({} outcomes)",
            batch.len()
        );
        Some(("increase_frequency", why))
    } else {
        None
    }
}

/// The `policy_update` due in a tick, if any: the batches of outcomes completed since the
/// previous tick or by this tick's outcome, judged; written only when one calls for a change. Its content records the
/// evidence (the outcome ids) and the thresholds before and after (a pinned threshold does
/// not move).
pub fn policy_due(a: &AdaptLog, th: &Thresholds) -> Option<String> {
    let mut changes = Map::new();
    let mut suggestions = Vec::new();
    let mut evidence = Vec::new();
    for (kind, _) in LEARNED {
        let batch = a.ready_of(kind);
        if batch.is_empty() {
            continue;
        }
        let Some((change, reason)) = judge(&batch) else {
            continue;
        };
        changes.insert(kind.into(), change.into());
        suggestions
            .push(json!({"action_kind": kind, "reason": reason, "suggested_change": change}));
        evidence.extend(batch.iter().map(|(id, _)| *id));
    }
    if changes.is_empty() {
        return None;
    }
    let mut v = json!({
        "changes": changes,
        "evidence": evidence,
        "suggestions": suggestions,
        "type": "adaptive_learning",
    });
    let mut after = th.clone();
    after.apply_policy(&v);
    v["thresholds"] = json!({"after": after.values(), "before": th.values()});
    Some(canon::built(&v))
}

/// The `meta_policy_update` due in a tick, if any (FORMATS.md §8.11):
/// over the batch of `policy_update`s it completed, the average lag after the reflection
/// before each, the newest stability score, and the rate of `policy_update`s over the
/// events the batch spans.
pub fn meta_due(a: &AdaptLog, th: &Thresholds, head: i64) -> Option<String> {
    let (batch, since, _) = a.policy_ready.as_ref()?;
    let lag = batch.iter().map(|(_, l)| *l as f64).sum::<f64>() / batch.len() as f64;
    let span = (head - since).max(1) as f64;
    let rate = batch.len() as f64 / span;
    let stability = a.stability_score();
    let (change, reason) = if lag > 50.0 && stability > 0.7 {
        ("decrease", format!("High lag {lag:.1} with good stability"))
    } else if rate > 0.1 && stability < 0.5 {
        (
            "increase",
            format!("High policy rate {rate:.2} with low stability"),
        )
    } else {
        return None;
    };
    let mut v = json!({
        "changes": {(Threshold::ReflectionInterval.as_str()): change},
        "evidence": batch.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        "suggestions": [{"param": Threshold::ReflectionInterval, "reason": reason, "suggested_change": change}],
        "type": "meta_learning",
    });
    let mut after = th.clone();
    after.apply_meta_policy(&v);
    v["thresholds"] = json!({"after": after.values(), "before": th.values()});
    Some(canon::built(&v))
}

/// The `policy_update` the reference would write now (FORMATS.md §8.11): over every
/// outcome, per action kind in order of first appearance, the rates of `success`, `failure`
/// and `partial` (`no_delta` ignored); none when no suggestion is a change. What
/// `pmm-verify --deep` compares the reference's `policy_update`s with.
pub fn reference_policy(a: &AdaptLog) -> Option<String> {
    let mut changes = Map::new();
    let mut suggestions = Vec::new();
    for (kind, t) in &a.outcomes {
        let total = (t.success + t.failure + t.partial) as f64;
        if total == 0.0 {
            continue;
        }
        let (s, f) = (t.success as f64 / total, t.failure as f64 / total);
        let (change, reason) = if f >= 0.7 {
            ("decrease_frequency", format!("Failure rate {f:.2} >= 0.7"))
        } else if s >= 0.8 {
            ("increase_frequency", format!("Success rate {s:.2} >= 0.8"))
        } else {
            let why = format!("Balanced rates: success {s:.2}, failure {f:.2}");
            ("no_change", why)
        };
        if change != "no_change" {
            changes.insert(kind.clone(), change.into());
        }
        suggestions
            .push(json!({"action_kind": kind, "reason": reason, "suggested_change": change}));
    }
    if changes.is_empty() {
        return None;
    }
    let v = json!({"changes": changes, "suggestions": suggestions, "type": "adaptive_learning"});
    Some(canon::built(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, kind: &str, content: &str) -> Event {
        Event::sample(id, kind, content, "{}")
    }

    #[test]
    fn stability_over_the_window_matches_the_reference_example() {
        let mut a = AdaptLog::default();
        assert_eq!(
            a.stability_content(),
            r#"{"metrics":{"claim_stability":1.0,"commitment_churn":0.0,"policy_change_rate":0.0,"reflection_variance":0.0},"stability_score":1.0,"window_size":100}"#
        );
        for i in 1..=80 {
            a.apply(&ev(i, "autonomy_tick", "{}"));
        }
        a.apply(&ev(81, "policy_update", "{}"));
        assert_eq!(
            a.stability_content(),
            r#"{"metrics":{"claim_stability":1.0,"commitment_churn":0.0,"policy_change_rate":0.012345679012345678,"reflection_variance":0.0},"stability_score":0.9876543209876543,"window_size":100}"#
        );
        let c = a.stability_due().unwrap();
        a.apply(&ev(82, "stability_metrics", &c));
        assert_eq!(a.stability_due(), None, "unchanged: not due again");
    }

    #[test]
    fn coherence_finds_conflicts_per_domain() {
        let mut a = AdaptLog::default();
        assert!(a.coherence_due().is_some(), "the first one is due");
        a.apply(&ev(1, "coherence_check", &a.coherence_content()));
        assert_eq!(a.coherence_due(), None);
        a.apply(&ev(
            2,
            "claim",
            r#"CLAIM:x={"domain":"mode","value":"enabled"}"#,
        ));
        a.apply(&ev(
            3,
            "claim",
            r#"CLAIM:x={"domain":"mode","value":"disabled"}"#,
        ));
        a.apply(&ev(4, "claim", r#"CLAIM:x={"domain":["odd"],"value":1}"#));
        assert_eq!(
            a.coherence_due().unwrap(),
            r#"{"check_type":"claim_consistency","coherence_score":0.6666666666666667,"conflicts":[{"claim_a_event":2,"claim_b_event":3,"domain":"mode","severity":"high"}],"resolution_needed":true,"scope":["[\"odd\"]","mode"]}"#
        );
    }

    #[test]
    fn outcomes_are_judged_once_per_batch() {
        let mut a = AdaptLog::default();
        let out =
            |r: &str| format!(r#"{{"action_kind":"autonomy_reflect","observed_result":"{r}"}}"#);
        for i in 1..=4 {
            a.apply(&ev(i, "outcome_observation", &out("no_delta")));
            assert!(a.ready.is_empty());
        }
        a.apply(&ev(5, "outcome_observation", &out("no_delta")));
        assert_eq!(a.ready_of("autonomy_reflect").len(), 5);
        a.apply(&ev(6, "autonomy_tick", "{}"));
        assert_eq!(
            a.ready_of("autonomy_reflect").len(),
            5,
            "this tick judges it"
        );
        a.apply(&ev(7, "autonomy_tick", "{}"));
        assert!(a.ready.is_empty(), "judged by the next tick, once");
        a.apply(&ev(8, "outcome_observation", &out("success")));
        a.apply(&ev(
            9,
            "outcome_observation",
            r#"{"action_kind":"autonomy_idle","observed_result":"success"}"#,
        ));
        assert_eq!(a.pending["autonomy_reflect"].len(), 1);
        assert!(
            !a.pending.contains_key("autonomy_idle"),
            "idle is not learned"
        );
    }
}
