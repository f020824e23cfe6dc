//! The events a turn derives from the ledger after the model has answered (FORMATS.md §7):
//! the synthesized reflection and its `meta_summary`, the `summary_update` when it is due, the
//! `lifetime_memory` chunk when one is ready, and a commitment's `impact_score`. Each reads a
//! bounded window (the reference reads whole ledgers for some of them, §17 item 29); where
//! that changes a field, the docs of the function say how.

use crate::canon;
use crate::context::render::truncate_chars;
use crate::event::{Event, Kind, Source};
use crate::marker::py_strip;
use crate::projection::rsm::synthesized_text;
use crate::projection::state::Projections;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The window the synthesized reflection and the meta summary look at (the reference's 500).
pub const WINDOW: usize = 500;
/// Events per lifetime-memory chunk.
pub const CHUNK: usize = 120;
/// How far a chunk looks ahead for its events (the reference's 240).
pub const CHUNK_SCAN: usize = 240;

/// The per-turn synthesized reflection (§7.1) over `window` (the newest events, oldest first,
/// this turn's included): `{"intent","outcome","next":"continue"[,"internal_goals"][,"self_model"]}`,
/// canonical JSON; `None` without a user message, a reply and a `metrics_turn` in the window.
pub fn synthesized_reflection(window: &[Event], p: &Projections) -> Option<String> {
    let last = |kind: Kind| window.iter().rev().find(|e| e.kind == kind);
    let user = last(Kind::UserMessage)?;
    let reply = last(Kind::AssistantMessage)?;
    last(Kind::MetricsTurn)?;
    let mut m = Map::new();
    m.insert("intent".into(), synthesized_text(&user.content).into());
    m.insert("outcome".into(), synthesized_text(&reply.content).into());
    m.insert("next".into(), "continue".into());
    let goals: Vec<Value> = p
        .mirror
        .open_in_order()
        .into_iter()
        .filter(|c| c.origin == Source::AutonomyKernel)
        .map(|c| Value::String(format!("{} ({})", c.cid, c.text)))
        .collect();
    if !goals.is_empty() {
        m.insert("internal_goals".into(), Value::Array(goals));
    }
    if window.iter().filter(|e| e.kind == Kind::Reflection).count() >= 5 {
        let det = p
            .rsm
            .tendencies()
            .get("determinism_emphasis")
            .copied()
            .unwrap_or(0);
        let gaps = p.rsm.knowledge_gaps();
        let mut s = format!("RSM: {det} determinism refs, {} knowledge gaps", gaps.len());
        if !gaps.is_empty() {
            s.push_str(&format!(" ({})", gaps.join(", ")));
        }
        let (nodes, edges) = p.graph.size();
        if nodes >= 5 {
            s.push_str(&format!(", graph: {edges}/{nodes}"));
        }
        m.insert("self_model".into(), s.into());
    }
    Some(canon::built(&Value::Object(m)))
}

/// The `meta_summary` content (§7.6): `event_count`, `graph_stats` and `patterns`. The
/// reference computes the patterns over every 50-event window of the whole ledger, a list that
/// grows with it; here they cover the newest [`WINDOW`] events (`window`), and `patterns_span`
/// says which. `graph_stats` is the whole-ledger event-graph projection.
pub fn meta_summary(window: &[Event], p: &Projections, event_count: i64) -> String {
    let patterns: Vec<Value> = window
        .chunks(50)
        .map(|w| {
            let n = |k: &Kind| w.iter().filter(|e| e.kind == *k).count();
            [
                Kind::CommitmentClose,
                Kind::CommitmentOpen,
                Kind::Reflection,
            ]
            .iter()
            .map(|k| (k.to_string(), n(k).into()))
            .collect::<Map<String, Value>>()
            .into()
        })
        .collect();
    let span = match (window.first(), window.last()) {
        (Some(a), Some(b)) => json!([a.id, b.id]),
        _ => json!([]),
    };
    let v = json!({
        "event_count": event_count,
        "graph_stats": p.graph.stats(),
        "patterns": patterns,
        "patterns_span": span,
    });
    canon::built(&v)
}

/// Inputs of the summary gate (§7.4), read by the turn from the ledger.
pub struct SummaryInputs<'a> {
    /// The previous `summary_update`, wherever it is (the reference only looks 500 events
    /// back and takes an older one for none, §17 item 31).
    pub previous: Option<&'a Event>,
    /// Events after the previous summary (or in the ledger, without one).
    pub events_since: i64,
    /// Reflections among them.
    pub reflections_since: u64,
    /// The newest event id.
    pub last_event_id: i64,
    /// Write the summary whatever the gate says (a `summarize` tick: the kernel has decided).
    pub force: bool,
}

fn trend(prev: &Value, cur: &Value) -> (Vec<String>, bool) {
    let t = |v: &Value| -> BTreeMap<String, i64> {
        v.get("behavioral_tendencies")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_i64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let gaps = |v: &Value| -> Vec<String> {
        v.get("knowledge_gaps")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (a, b) = (t(prev), t(cur));
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut parts = Vec::new();
    let mut significant = false;
    let mut inst = 0;
    let mut uniq = 0;
    for k in keys {
        let d = b.get(k).copied().unwrap_or(0) - a.get(k).copied().unwrap_or(0);
        if d == 0 {
            continue;
        }
        if d.abs() > 10 {
            significant = true;
        }
        parts.push(if d > 0 {
            format!("{k} +{d}")
        } else {
            format!("{k} {d}")
        });
        if k == "instantiation_capacity" {
            inst = d;
        }
        if k == "uniqueness_emphasis" {
            uniq = d;
        }
    }
    if inst > 0 {
        parts.push(format!("+{inst} instantiation"));
    }
    if uniq > 0 {
        parts.push(format!("+{uniq} uniqueness"));
    }
    let old = gaps(prev);
    let new: Vec<String> = gaps(cur).into_iter().filter(|g| !old.contains(g)).collect();
    if !new.is_empty() {
        significant = true;
        parts.push(format!("new gap: {}", new.join(", ")));
    }
    (parts, significant)
}

/// The `summary_update` when the gate of §7.4 lets one through: `(content, meta)`. The meta's
/// snapshot keeps only the newest reflection intents and counts them all
/// (`rsm_reflections_total`), so summaries stop growing with the ledger.
pub fn summary_update(
    p: &Projections,
    inputs: &SummaryInputs,
) -> Option<(String, Map<String, Value>)> {
    let (current, total) = p.rsm.summary_snapshot(&p.concepts);
    let previous = inputs
        .previous
        .and_then(|e| e.meta_map().ok())
        .and_then(|m| m.get("rsm_state").cloned());
    let mut content = Map::new();
    content.insert("last_event_id".into(), inputs.last_event_id.into());
    content.insert("open_commitments".into(), p.mirror.open.len().into());
    content.insert(
        "reflections_since_last".into(),
        inputs.reflections_since.into(),
    );
    match &previous {
        None => {
            if !inputs.force && inputs.reflections_since < 3 && inputs.events_since <= 10 {
                return None;
            }
        }
        Some(prev) => {
            let (parts, significant) = trend(prev, &current);
            if !inputs.force && !significant && inputs.reflections_since < 3 {
                return None;
            }
            if !parts.is_empty() {
                content.insert("rsm_trend".into(), parts.join(", ").into());
            }
            if significant {
                content.insert("rsm_triggered".into(), true.into());
            }
        }
    }
    let mut meta = Map::new();
    meta.insert("rsm_state".into(), current);
    meta.insert("rsm_reflections_total".into(), total.into());
    meta.insert("synth".into(), "pmm".into());
    Some((canon::built(&Value::Object(content)), meta))
}

/// Where the next lifetime-memory chunk starts: after the newest chunk's `covered_until`
/// (or its own id), else from the beginning.
pub fn chunk_start(last_chunk: Option<&Event>) -> i64 {
    let Some(e) = last_chunk else { return 0 };
    e.meta_map()
        .ok()
        .and_then(|m| m.get("covered_until").and_then(Value::as_i64))
        .unwrap_or(e.id)
}

/// A `lifetime_memory` chunk (§7.5) from `candidates` (the events after [`chunk_start`], at
/// most [`CHUNK_SCAN`] of them): `(content, meta)`, or `None` while fewer than [`CHUNK`]
/// events that are not chunks themselves are there.
pub fn lifetime_memory(
    candidates: &[Event],
    p: &Projections,
) -> Option<(String, Map<String, Value>)> {
    let span = chunk_span(candidates)?;
    let samples = chunk_samples(&span);
    let concepts = chunk_concepts(&span, p);
    let commitments = ChunkCommitments::of(&span);
    let content = chunk_lines(&span, &concepts, &commitments, &samples).join("\n");
    let meta = chunk_meta(&span, &samples, concepts, commitments.cids);
    Some((content, meta))
}

/// The first [`CHUNK`] of `candidates` that are not `lifetime_memory` chunks themselves, or
/// `None` while there are fewer.
fn chunk_span(candidates: &[Event]) -> Option<Vec<&Event>> {
    let span: Vec<&Event> = candidates
        .iter()
        .filter(|e| e.kind != Kind::LifetimeMemory)
        .take(CHUNK)
        .collect();
    (span.len() >= CHUNK).then_some(span)
}

/// At most 32 of the span's user and assistant messages, evenly strided from the first.
fn chunk_samples<'a>(span: &[&'a Event]) -> Vec<&'a Event> {
    let messages: Vec<&'a Event> = span
        .iter()
        .filter(|e| matches!(e.kind, Kind::UserMessage | Kind::AssistantMessage))
        .copied()
        .collect();
    let stride = (messages.len() / 32).max(1);
    messages.iter().step_by(stride).take(32).copied().collect()
}

/// The 20 concepts the span's events are tagged with most often (ties by name).
fn chunk_concepts(span: &[&Event], p: &Projections) -> Vec<String> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in span {
        for tok in p.concepts.concepts_for_event(e.id) {
            *counts.entry(tok).or_default() += 1;
        }
    }
    let mut concepts: Vec<(String, usize)> = counts.into_iter().collect();
    concepts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    concepts.into_iter().take(20).map(|(t, _)| t).collect()
}

/// The commitments a chunk's span opens and closes.
struct ChunkCommitments {
    /// `cid:text` of each commitment opened, in span order (text stripped, 120 characters).
    opened: Vec<String>,
    /// The cids closed.
    closed: std::collections::BTreeSet<String>,
    /// Every cid opened or closed.
    cids: std::collections::BTreeSet<String>,
}

impl ChunkCommitments {
    /// The commitments opened and closed (with a non-empty `meta.cid`) in `span`.
    fn of(span: &[&Event]) -> Self {
        let mut c = ChunkCommitments {
            opened: Vec::new(),
            closed: std::collections::BTreeSet::new(),
            cids: std::collections::BTreeSet::new(),
        };
        for e in span {
            let meta = e.meta_map().unwrap_or_default();
            let cid = meta.get("cid").and_then(Value::as_str).unwrap_or("");
            match e.kind {
                Kind::CommitmentOpen if !cid.is_empty() => {
                    let text = meta
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or(e.content.as_str());
                    c.opened
                        .push(format!("{cid}:{}", truncate_chars(py_strip(text), 120)));
                    c.cids.insert(cid.to_string());
                }
                Kind::CommitmentClose if !cid.is_empty() => {
                    c.closed.insert(cid.to_string());
                    c.cids.insert(cid.to_string());
                }
                _ => {}
            }
        }
        c
    }
}

/// The chunk's content lines: the span, its concepts, the first 8 commitments opened and
/// closed (each line only when there are any), then the sampled messages.
fn chunk_lines(
    span: &[&Event],
    concepts: &[String],
    commitments: &ChunkCommitments,
    samples: &[&Event],
) -> Vec<String> {
    let (start, end) = (span[0].id, span[span.len() - 1].id);
    let mut lines = vec![format!("Span {start}..{end} ({} events)", span.len())];
    if !concepts.is_empty() {
        lines.push(format!("Concepts: {}", concepts.join(", ")));
    }
    if !commitments.opened.is_empty() {
        lines.push(format!(
            "Commitments opened: {}",
            commitments
                .opened
                .iter()
                .take(8)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !commitments.closed.is_empty() {
        lines.push(format!(
            "Commitments closed: {}",
            commitments
                .closed
                .iter()
                .take(8)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    lines.push("Messages:".into());
    lines.extend(samples.iter().map(|e| sample_line(e)));
    lines
}

/// One sampled message line: `- [id] role: text` (the role from `meta.role`, else the kind;
/// the text stripped, 240 characters).
fn sample_line(e: &Event) -> String {
    let role = e
        .meta_map()
        .ok()
        .and_then(|m| m.get("role").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| e.kind.to_string());
    format!(
        "- [{}] {role}: {}",
        e.id,
        truncate_chars(py_strip(&e.content), 240)
    )
}

/// The chunk's meta: its span, what it covers, the sampled ids, concepts and cids.
fn chunk_meta(
    span: &[&Event],
    samples: &[&Event],
    concepts: Vec<String>,
    cids: std::collections::BTreeSet<String>,
) -> Map<String, Value> {
    let (start, end) = (span[0].id, span[span.len() - 1].id);
    let mut meta = Map::new();
    meta.insert("span_start".into(), start.into());
    meta.insert("span_end".into(), end.into());
    meta.insert("covered_until".into(), end.into());
    meta.insert(
        "sample_ids".into(),
        samples.iter().map(|e| Value::from(e.id)).collect(),
    );
    meta.insert(
        "concepts".into(),
        concepts.into_iter().map(Value::from).collect(),
    );
    meta.insert("summary_kind".into(), Kind::LifetimeMemory.as_str().into());
    meta.insert("cids".into(), cids.into_iter().map(Value::from).collect());
    meta
}

/// A new commitment's `impact_score` (§3.3.1): the history of its cid (0.5 when it was never
/// opened before, else the share of its opens that were closed, at most 1) times the event
/// graph's weight `nodes / (nodes + edges)` (1 when there are at most one edge). `nodes` is
/// every event, as the reference's whole-ledger graph rebuild counts them.
pub fn impact_score(p: &Projections, cid: &str, events: i64) -> f64 {
    let hist = match p.mirror.history.get(cid) {
        Some(&(opens, closes)) if opens > 0 => (closes as f64 / opens as f64).min(1.0),
        _ => 0.5,
    };
    let (_, edges) = p.graph.size();
    let nodes = events as f64;
    let weight = if nodes <= 0.0 || edges <= 1 {
        1.0
    } else {
        nodes / (nodes + edges as f64)
    };
    (hist * weight).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, kind: &str, content: &str) -> Event {
        Event::sample(id, kind, content, "{}")
    }

    #[test]
    fn synthesized_reflection_needs_the_three_kinds() {
        let p = Projections::default();
        let mut w = vec![
            ev(1, "user_message", " hi "),
            ev(2, "assistant_message", "hello"),
        ];
        assert_eq!(synthesized_reflection(&w, &p), None);
        w.push(ev(3, "metrics_turn", "x"));
        assert_eq!(
            synthesized_reflection(&w, &p).unwrap(),
            r#"{"intent":"hi","next":"continue","outcome":"hello"}"#
        );
    }

    #[test]
    fn meta_summary_counts_windows_of_fifty() {
        let w: Vec<Event> = (1..=60)
            .map(|i| {
                ev(
                    i,
                    if i % 10 == 0 {
                        "reflection"
                    } else {
                        "test_event"
                    },
                    "",
                )
            })
            .collect();
        let v: Value =
            serde_json::from_str(&meta_summary(&w, &Projections::default(), 60)).unwrap();
        assert_eq!(v["patterns"][0]["reflection"], 5);
        assert_eq!(v["patterns"][1]["reflection"], 1);
        assert_eq!(v["patterns_span"], json!([1, 60]));
        assert_eq!(v["event_count"], 60);
    }

    #[test]
    fn summary_gate_without_previous_needs_reflections_or_events() {
        let p = Projections::default();
        let few = SummaryInputs {
            previous: None,
            events_since: 10,
            reflections_since: 2,
            last_event_id: 10,
            force: false,
        };
        assert!(summary_update(&p, &few).is_none());
        assert!(summary_update(&p, &SummaryInputs { force: true, ..few }).is_some());
        let more = SummaryInputs {
            previous: None,
            events_since: 11,
            reflections_since: 0,
            last_event_id: 11,
            force: false,
        };
        let (content, meta) = summary_update(&p, &more).unwrap();
        assert_eq!(
            content,
            r#"{"last_event_id":11,"open_commitments":0,"reflections_since_last":0}"#
        );
        assert_eq!(meta["rsm_reflections_total"], 0);
    }

    #[test]
    fn trend_reports_deltas_and_new_gaps() {
        let a = json!({"behavioral_tendencies": {"x": 1, "instantiation_capacity": 1}, "knowledge_gaps": []});
        let b = json!({"behavioral_tendencies": {"x": 13, "instantiation_capacity": 3}, "knowledge_gaps": ["g"]});
        let (parts, sig) = trend(&a, &b);
        assert!(sig);
        assert_eq!(
            parts,
            [
                "instantiation_capacity +2",
                "x +12",
                "+2 instantiation",
                "new gap: g"
            ]
        );
    }

    #[test]
    fn lifetime_chunk_needs_120_events() {
        let p = Projections::default();
        let evs: Vec<Event> = (1..=119).map(|i| ev(i, "user_message", "m")).collect();
        assert!(lifetime_memory(&evs, &p).is_none());
        let mut evs: Vec<Event> = (1..=130)
            .map(|i| {
                ev(
                    i,
                    if i % 2 == 0 {
                        "user_message"
                    } else {
                        "test_event"
                    },
                    "m",
                )
            })
            .collect();
        evs[5].kind = "lifetime_memory".into();
        let (content, meta) = lifetime_memory(&evs, &p).unwrap();
        assert!(
            content.starts_with("Span 1..121 (120 events)\nMessages:\n- [2] user_message: m"),
            "{content}"
        );
        assert_eq!(meta["covered_until"], 121);
        assert_eq!(chunk_start(None), 0);
    }

    #[test]
    fn impact_score_uses_history_and_graph_weight() {
        let mut p = Projections::default();
        assert_eq!(impact_score(&p, "c", 10), 0.5);
        p.mirror.history.insert("c".into(), (2, 1));
        assert_eq!(impact_score(&p, "c", 10), 0.5);
        p.mirror.history.insert("c".into(), (1, 1));
        assert_eq!(impact_score(&p, "c", 10), 1.0);
    }
}
