//! The autonomy fold: what the kernel decides from (SPEC §4 pmm-tick) — the newest
//! `metrics_turn`, kernel reflection, summary, checkpoint manifest, rule table and stimulus, the
//! tick counters `autonomy_metrics` reports (FORMATS.md §8.7), what changed since the last
//! kernel reflection, and the running checkpoint root (§8.9).
//!
//! Everything here is rebuilt from the ledger, so the counters survive restarts (the
//! reference's tracker starts from zero in every process, §17 item 22), and it is part of the
//! projection checkpoint, so a tick on a ledger of any size reads only the events since it.

use crate::chain::root::StoredRoot;
use crate::event::{Action, Event, Kind, Seen, Source};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Kinds that are the autonomy loop's own bookkeeping. They do not count as something that
/// changed (a tick does not give the kernel anything new to reflect on), and they are left
/// out of a kernel reflection's `delta_hash`; nor do reflections and summaries, which are
/// derived from the events they are about (a summary written in a quiet hour must not make
/// the next tick reflect on it, or the two would alternate forever).
pub const BOOKKEEPING: [Kind; 11] = [
    Kind::AutonomyStimulus,
    Kind::AutonomyTick,
    Kind::AutonomyMetrics,
    Kind::AutonomyRuleTable,
    Kind::CheckpointManifest,
    Kind::OutcomeObservation,
    Kind::StabilityMetrics,
    Kind::CoherenceCheck,
    Kind::PolicyUpdate,
    Kind::MetaPolicyUpdate,
    Kind::MetricsUpdate,
];

/// How many of the newest changes a kernel reflection's `delta_hash` covers (the reference's 3).
pub const DELTA_EVENTS: usize = 3;

/// The newest kernel reflection (`reflection` with `meta.source == "autonomy_kernel"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelReflection {
    /// Its id.
    pub id: i64,
    /// Cids its content lists as stalled (`"stalled"`), sorted.
    pub stalled: Vec<String>,
    /// `meta.delta_hash`, when present.
    pub delta_hash: Option<String>,
}

/// The autonomy fold (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AutonomyLog {
    /// The newest `metrics_turn` (a turn happened).
    pub last_metrics_turn: Option<i64>,
    /// The newest kernel reflection.
    pub last_kernel_reflection: Option<KernelReflection>,
    /// The newest `summary_update`.
    pub last_summary: Option<i64>,
    /// Whether its content says `"rsm_triggered": true`.
    pub last_summary_triggered: bool,
    /// The checkpoint root of the prefix ending at the newest `summary_update` (hex).
    pub summary_root: Option<String>,
    /// The newest `checkpoint_manifest`: its id, `up_to_id` and `root_hash`.
    pub last_manifest: Option<(i64, i64, String)>,
    /// The text of the newest `autonomy_rule_table`.
    pub last_rule_table: Option<String>,
    /// The newest `autonomy_stimulus`: its id, slot and slot id.
    pub last_stimulus: Option<(i64, i64, String)>,
    /// Per slot interval (seconds; `meta.interval`, 10 without it): the highest slot that has
    /// a stimulus.
    #[serde(default)]
    pub max_slot: std::collections::BTreeMap<i64, i64>,
    /// `autonomy_tick` events.
    pub ticks_total: u64,
    /// Ticks that decided `reflect`.
    pub reflect_count: u64,
    /// Ticks that decided `summarize`.
    pub intention_summarize_count: u64,
    /// Every other tick (`idle`, and anything unreadable).
    pub idle_count: u64,
    /// `summary_update` events.
    pub summarize_count: u64,
    /// The newest kernel reflection's id (`last_reflection_id` of `autonomy_metrics`).
    pub last_reflection_id: Option<i64>,
    /// Changes (events that are not [`BOOKKEEPING`] nor reflections) since the newest kernel
    /// reflection, per kind, in the order each kind first appeared.
    pub changes: Vec<(String, u64)>,
    /// The newest [`DELTA_EVENTS`] changes (ids), oldest first; what `delta_hash` covers.
    pub recent_changes: Vec<i64>,
    /// Cids bound to an executor by a `config` of type `exec_bind` (exempt from auto-close).
    pub exec_bound: BTreeSet<String>,
    /// The running checkpoint root over every event's hash.
    pub root: StoredRoot,
    /// User and assistant messages with no concept binding that no `index` tick has taken yet,
    /// oldest first (the newest [`UNINDEXED_MAX`]): ascending ids, so one is found by binary
    /// search.
    #[serde(default)]
    pub unindexed: std::collections::VecDeque<i64>,
    /// Facts the indexer extracted (`claim_from_text`), oldest first (the newest
    /// [`FACTS_MAX`]).
    #[serde(default)]
    pub facts: std::collections::VecDeque<Fact>,
    /// What thinking ticks spent (`kernel::think`'s budget reads it).
    #[serde(default)]
    pub think: ThinkLog,
}

/// What thinking ticks spent: their replies in all, and per UTC day their model calls and
/// tokens. A thinking tick's call is claimed by its stimulus (`meta.claim` `"think"`) before it
/// is made, so calls in flight count from their claim on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkLog {
    /// Thinking replies (assistant messages with `meta.source` `autonomy_kernel` and a slot).
    pub replies: u64,
    /// Per UTC day (the `YYYY-MM-DD` of the events' `ts`).
    pub days: BTreeMap<String, ThinkDay>,
    /// `think_calls_per_day` of the newest `autonomy_thresholds` config that sets it (a
    /// positive integer).
    #[serde(default)]
    pub calls_per_day: Option<i64>,
    /// `think_tokens_per_day`, likewise.
    #[serde(default)]
    pub tokens_per_day: Option<i64>,
}

/// One UTC day of thinking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkDay {
    /// Thinking claims (stimuli with `meta.claim` `"think"`).
    pub claims: i64,
    /// Thinking replies and failed calls.
    pub answered: i64,
    /// Tokens of the replies (`in_tokens` + `out_tokens`).
    pub tokens: i64,
}

impl ThinkDay {
    /// Model calls: every call is claimed first; a ledger written before claims were marked
    /// counts its answers.
    pub fn calls(&self) -> i64 {
        self.claims.max(self.answered)
    }
}

impl ThinkLog {
    /// The budget keys of an `autonomy_thresholds` config.
    fn apply_config(&mut self, ev: &Event) {
        if !ev.content.contains("think_") {
            return;
        }
        let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&ev.content) else {
            return;
        };
        if c.get("type").and_then(Value::as_str) != Some("autonomy_thresholds") {
            return;
        }
        let get = |k: &str| c.get(k).and_then(Value::as_i64).filter(|n| *n >= 1);
        if let Some(n) = get("think_calls_per_day") {
            self.calls_per_day = Some(n);
        }
        if let Some(n) = get("think_tokens_per_day") {
            self.tokens_per_day = Some(n);
        }
    }

    fn apply(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        if ev.kind == Kind::Config {
            return self.apply_config(ev);
        }
        let maybe = match ev.kind {
            Kind::AutonomyStimulus => ev.meta.contains("\"claim\""),
            Kind::AssistantMessage | Kind::GenerationFailure => {
                ev.meta.contains(Source::AutonomyKernel.as_str())
            }
            _ => false,
        };
        if !maybe {
            return;
        }
        let m = s.meta_or_empty();
        let day = || ev.ts.get(..10).unwrap_or_default().to_string();
        if ev.kind == Kind::AutonomyStimulus {
            if m.get("claim").and_then(Value::as_str) == Some("think") {
                self.days.entry(day()).or_default().claims += 1;
            }
            return;
        }
        let thinking = Source::AutonomyKernel.is(m.get("source")) && m.contains_key("slot_id");
        if !thinking {
            return;
        }
        // Token counts come from a model server and the ledger: a negative one counts as 0,
        // and sums saturate (a count near 2^63 spends the day's budget, it never panics).
        let n = |k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(0).max(0);
        let d = self.days.entry(day()).or_default();
        d.answered = d.answered.saturating_add(1);
        if ev.kind == Kind::AssistantMessage {
            // `tokens_charged` (kernel::think::CHARGED) when the server's counts were not
            // believed.
            let spent = match m.get("tokens_charged").and_then(Value::as_i64) {
                Some(c) => c.max(0),
                None => n("in_tokens").saturating_add(n("out_tokens")),
            };
            d.tokens = d.tokens.saturating_add(spent);
            self.replies += 1;
        }
    }
}

/// How many extracted facts the projection keeps (the newest).
pub const FACTS_MAX: usize = 10_000;

/// A fact the indexer extracted from a message (`claim_from_text`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    /// The `claim_from_text` event.
    pub id: i64,
    /// `claim_type`, e.g. `user.identity.name`.
    pub claim_type: String,
    /// `value`.
    pub value: String,
    /// The message it was extracted from (`source_event_id`).
    pub source: i64,
}

/// How many unindexed messages the projection remembers (the newest).
pub const UNINDEXED_MAX: usize = 4096;

fn is_kernel(s: &Seen<'_>) -> bool {
    Source::AutonomyKernel.is(s.meta_or_empty().get("source"))
}

impl AutonomyLog {
    /// Folds one event in (events in id order).
    pub fn apply(&mut self, ev: &Event) {
        self.fold(&Seen::new(ev));
    }

    /// [`AutonomyLog::apply`], the meta parsed at most once for every fold ([`Seen`]).
    pub fn fold(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        self.root.push(ev.hash.as_deref());
        let bookkeeping = BOOKKEEPING.contains(&ev.kind);
        match ev.kind {
            Kind::MetricsTurn => self.last_metrics_turn = Some(ev.id),
            Kind::Reflection if is_kernel(s) => self.apply_kernel_reflection(s),
            Kind::SummaryUpdate => self.apply_summary(ev),
            Kind::CheckpointManifest => self.apply_manifest(ev),
            Kind::AutonomyRuleTable => self.last_rule_table = Some(ev.content.clone()),
            Kind::AutonomyStimulus => self.apply_stimulus(s),
            Kind::AutonomyTick => self.apply_tick(ev),
            Kind::Config => self.apply_config(ev),
            Kind::UserMessage | Kind::AssistantMessage if !ev.content.trim().is_empty() => {
                self.unindexed.push_back(ev.id);
                if self.unindexed.len() > UNINDEXED_MAX {
                    self.unindexed.pop_front();
                }
            }
            Kind::ConceptBindEvent | Kind::ConceptBindAsync => self.apply_binding(ev),
            Kind::ClaimFromText => self.apply_fact(ev),
            _ => {}
        }
        self.think.apply(s);
        // The kernel's CTL maintenance binds concepts to the loop's own events: bookkeeping too.
        let derived = matches!(ev.kind, Kind::Reflection | Kind::SummaryUpdate)
            || (ev.kind == Kind::ConceptBindEvent && is_kernel(s));
        if !bookkeeping && !derived {
            self.note_change(ev);
        }
    }

    /// A kernel reflection: becomes the newest one (its sorted `stalled` cids and
    /// `meta.delta_hash`), and the changes since the last one start again from none.
    fn apply_kernel_reflection(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        let content: Option<Value> = serde_json::from_str(&ev.content).ok();
        let mut stalled: Vec<String> = content
            .as_ref()
            .and_then(|c| c.get("stalled"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        stalled.sort();
        self.last_kernel_reflection = Some(KernelReflection {
            id: ev.id,
            stalled,
            delta_hash: s
                .meta_or_empty()
                .get("delta_hash")
                .and_then(Value::as_str)
                .map(str::to_string),
        });
        self.last_reflection_id = Some(ev.id);
        self.changes.clear();
    }

    /// A `summary_update`: becomes the newest summary, counted, with whether it says the RSM
    /// triggered it and the checkpoint root of the prefix ending at it.
    fn apply_summary(&mut self, ev: &Event) {
        self.last_summary = Some(ev.id);
        self.summarize_count += 1;
        self.last_summary_triggered = serde_json::from_str::<Value>(&ev.content)
            .ok()
            .and_then(|c| c.get("rsm_triggered").and_then(Value::as_bool))
            .unwrap_or(false)
            || ev.content.contains("rsm_triggered:1");
        self.summary_root = Some(self.root.root().to_string());
    }

    /// A `checkpoint_manifest` whose content parses: becomes the newest manifest (its id,
    /// `up_to_id` and `root_hash`).
    fn apply_manifest(&mut self, ev: &Event) {
        if let Ok(c) = serde_json::from_str::<Value>(&ev.content) {
            let up_to = c.get("up_to_id").and_then(Value::as_i64).unwrap_or(0);
            let root = c
                .get("root_hash")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            self.last_manifest = Some((ev.id, up_to, root));
        }
    }

    /// An `autonomy_stimulus` naming a slot and slot id: becomes the newest stimulus and
    /// raises the highest slot seen for its interval.
    fn apply_stimulus(&mut self, s: &Seen<'_>) {
        let ev = s.ev;
        if let Ok(c) = serde_json::from_str::<Value>(&ev.content) {
            if let (Some(slot), Some(id)) = (
                c.get("slot").and_then(Value::as_i64),
                c.get("slot_id").and_then(Value::as_str),
            ) {
                self.last_stimulus = Some((ev.id, slot, id.to_string()));
                let interval = s
                    .meta_or_empty()
                    .get("interval")
                    .and_then(Value::as_i64)
                    .unwrap_or(crate::formats::slot::INTERVAL_SECS);
                let max = self.max_slot.entry(interval).or_insert(slot);
                *max = (*max).max(slot);
            }
        }
    }

    /// A `claim_from_text` with a type, a value and a source message: a fact.
    fn apply_fact(&mut self, ev: &Event) {
        let Ok(c) = serde_json::from_str::<Value>(&ev.content) else {
            return;
        };
        let s = |k: &str| c.get(k).and_then(Value::as_str).map(str::to_string);
        if let (Some(claim_type), Some(value), Some(source)) = (
            s("claim_type"),
            s("value"),
            c.get("source_event_id").and_then(Value::as_i64),
        ) {
            self.facts.push_back(Fact {
                id: ev.id,
                claim_type,
                value,
                source,
            });
            if self.facts.len() > FACTS_MAX {
                self.facts.pop_front();
            }
        }
    }

    /// A concept binding of a message: the message is indexed.
    fn apply_binding(&mut self, ev: &Event) {
        if self.unindexed.is_empty() {
            return;
        }
        let id = serde_json::from_str::<Value>(&ev.content)
            .ok()
            .and_then(|c| c.get("event_id").and_then(Value::as_i64));
        if let Some(id) = id {
            self.indexed(id);
        }
    }

    /// Message `id` is indexed: out of [`AutonomyLog::unindexed`]. A binary search, as the ids
    /// are ascending (a scan of the window per binding was 12 % of a full rebuild at 10^6).
    fn indexed(&mut self, id: i64) {
        if let Ok(i) = self.unindexed.binary_search(&id) {
            self.unindexed.remove(i);
        }
    }

    /// An `autonomy_tick`: counts it, and counts its decision (`reflect`, `summarize`, or
    /// anything else as idle); an `index` tick has taken the messages of its evidence.
    fn apply_tick(&mut self, ev: &Event) {
        self.ticks_total += 1;
        let content = serde_json::from_str::<Value>(&ev.content).ok();
        let decision = content
            .as_ref()
            .and_then(|c| c.get("decision")?.as_str())
            .and_then(Action::parse);
        if decision == Some(Action::Index) {
            let taken = content.as_ref().and_then(|c| c.get("evidence")?.as_array());
            for id in taken.into_iter().flatten().filter_map(Value::as_i64) {
                self.indexed(id);
            }
        }
        match decision {
            Some(Action::Reflect) => self.reflect_count += 1,
            Some(Action::Summarize) => self.intention_summarize_count += 1,
            Some(Action::Idle | Action::Index) | None => self.idle_count += 1,
        }
    }

    /// A `config`: one of type `exec_bind` binds its `cid` to an executor.
    fn apply_config(&mut self, ev: &Event) {
        if let Ok(c) = serde_json::from_str::<Value>(&ev.content) {
            if c.get("type").and_then(Value::as_str) == Some("exec_bind") {
                if let Some(cid) = c.get("cid").and_then(Value::as_str) {
                    self.exec_bound.insert(cid.to_string());
                }
            }
        }
    }

    /// Counts a change (an event that is neither bookkeeping nor derived) under its kind and
    /// keeps it among the newest [`DELTA_EVENTS`].
    fn note_change(&mut self, ev: &Event) {
        match self.changes.iter_mut().find(|(k, _)| ev.kind == k.as_str()) {
            Some((_, n)) => *n += 1,
            None => self.changes.push((ev.kind.to_string(), 1)),
        }
        self.recent_changes.push(ev.id);
        if self.recent_changes.len() > DELTA_EVENTS {
            self.recent_changes.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, kind: &str, content: &str, meta: &str) -> Event {
        Event {
            hash: Some(format!("{id:064x}")),
            ..Event::sample(id, kind, content, meta)
        }
    }

    #[test]
    fn counts_ticks_changes_and_kernel_reflections() {
        let mut a = AutonomyLog::default();
        a.apply(&ev(1, "user_message", "hi", "{}"));
        a.apply(&ev(2, "assistant_message", "hello", "{}"));
        a.apply(&ev(3, "metrics_turn", "x", "{}"));
        a.apply(&ev(
            4,
            "autonomy_stimulus",
            r#"{"slot": 7, "slot_id": "ab"}"#,
            "{}",
        ));
        a.apply(&ev(5, "autonomy_tick", r#"{"decision":"reflect"}"#, "{}"));
        assert_eq!(a.last_metrics_turn, Some(3));
        assert_eq!(a.last_stimulus, Some((4, 7, "ab".into())));
        assert_eq!(a.changes.len(), 3);
        assert_eq!(a.recent_changes, vec![1, 2, 3]);
        a.apply(&ev(
            6,
            "reflection",
            r#"{"stalled":["b","a"]}"#,
            r#"{"source":"autonomy_kernel","delta_hash":"d"}"#,
        ));
        assert!(a.changes.is_empty());
        let k = a.last_kernel_reflection.clone().unwrap();
        assert_eq!(
            (k.id, k.stalled, k.delta_hash),
            (6, vec!["a".into(), "b".into()], Some("d".into()))
        );
        // A turn's reflection is not the kernel's, and is no change either.
        a.apply(&ev(7, "reflection", "{}", r#"{"source":"pmm-turn"}"#));
        assert_eq!(a.last_reflection_id, Some(6));
        assert!(a.changes.is_empty());
        a.apply(&ev(8, "autonomy_tick", r#"{"decision":"idle"}"#, "{}"));
        a.apply(&ev(9, "autonomy_tick", "not json", "{}"));
        a.apply(&ev(
            10,
            "autonomy_tick",
            r#"{"decision":"summarize"}"#,
            "{}",
        ));
        assert_eq!(
            (
                a.ticks_total,
                a.reflect_count,
                a.idle_count,
                a.intention_summarize_count
            ),
            (4, 1, 2, 1)
        );
        a.apply(&ev(11, "commitment_open", "x", "{}"));
        a.apply(&ev(12, "commitment_open", "y", "{}"));
        a.apply(&ev(13, "claim", "z", "{}"));
        assert_eq!(
            a.changes,
            vec![("commitment_open".to_string(), 2), ("claim".to_string(), 1)]
        );
        assert_eq!(a.recent_changes, vec![11, 12, 13]);
    }

    #[test]
    fn the_summary_root_is_the_root_of_the_prefix_ending_there() {
        let events: Vec<Event> = (1..=5)
            .map(|i| {
                let kind = if i == 4 { "summary_update" } else { "claim" };
                ev(i, kind, r#"{"rsm_triggered":true}"#, "{}")
            })
            .collect();
        let mut a = AutonomyLog::default();
        for e in &events {
            a.apply(e);
        }
        let expected = crate::chain::root::root_hash(events[..4].iter().map(|e| e.hash.as_deref()));
        assert_eq!(a.summary_root, Some(expected.to_string()));
        assert!(a.last_summary_triggered);
        assert_eq!(a.summarize_count, 1);
    }
}
