//! The self-model and the concept graph against the reference ledger: a fold over the events
//! before each `summary_update` must reproduce the `meta.rsm_state` the reference stored in it.

use crate::harness::{fixture_path, GPT_LEDGER};
use pmm::event::Event;
use pmm::projection::concepts::ConceptGraph;
use pmm::projection::rsm::Rsm;
use pmm::projection::state::Projections;
use serde_json::Value;

/// The fixture's events, in id order, as the library's `Event`.
fn load(path: &std::path::Path) -> Vec<Event> {
    let text = std::fs::read_to_string(path).expect("read fixture");
    let rows: Vec<Value> = serde_json::from_str(&text).expect("fixture is a JSON array");
    let mut events: Vec<Event> = rows
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().map(str::to_string);
            Event {
                id: r["id"].as_i64().expect("id"),
                ts: s("ts").unwrap_or_default(),
                kind: s("kind").expect("kind").into(),
                content: s("content").unwrap_or_default(),
                meta: s("meta").unwrap_or_default(),
                prev_hash: s("prev_hash"),
                hash: s("hash"),
            }
        })
        .collect();
    events.sort_by_key(|e| e.id);
    events
}

/// Every path where two JSON values differ, with both sides, one per line.
fn differences(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for k in w.keys().chain(g.keys().filter(|k| !w.contains_key(*k))) {
                let (a, b) = (
                    w.get(k).unwrap_or(&Value::Null),
                    g.get(k).unwrap_or(&Value::Null),
                );
                if !w.contains_key(k) || !g.contains_key(k) {
                    out.push(format!("{path}.{k}: want {a} got {b}"));
                } else {
                    differences(&format!("{path}.{k}"), a, b, out);
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                differences(&format!("{path}[{i}]"), a, b, out);
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            let missing: Vec<&Value> = w.iter().filter(|x| !g.contains(x)).collect();
            let extra: Vec<&Value> = g.iter().filter(|x| !w.contains(x)).collect();
            out.push(format!(
                "{path}: length want {} got {}; only in want {missing:?}; only in got {extra:?}",
                w.len(),
                g.len()
            ));
        }
        _ if want != got => out.push(format!("{path}: want {want} got {got}")),
        _ => {}
    }
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn fold_before_each_summary_update_reproduces_its_rsm_state() {
    let Some(path) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let events = load(&path);
    let mut rsm = Rsm::default();
    let mut concepts = ConceptGraph::default();
    let (mut checked, mut failures) = (0, Vec::new());
    for ev in &events {
        if ev.kind == "summary_update" {
            let meta: Value = serde_json::from_str(&ev.meta).expect("summary meta");
            let want = &meta["rsm_state"];
            let got = rsm.snapshot(&concepts);
            checked += 1;
            let mut diffs = Vec::new();
            differences("rsm_state", want, &got, &mut diffs);
            if !diffs.is_empty() {
                failures.push(format!(
                    "summary_update {}:\n  {}",
                    ev.id,
                    diffs.join("\n  ")
                ));
            }
        }
        rsm.apply(ev);
        concepts.apply(ev);
    }
    assert_eq!(checked, 15, "the fixture holds 15 summary_update events");
    assert!(
        failures.is_empty(),
        "{} of {checked} snapshots differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The final state (§5.2 quotes it for the GPT ledger).
    assert_eq!(
        serde_json::to_value(rsm.tendencies()).expect("json"),
        serde_json::json!({"adaptability_emphasis":12,"determinism_emphasis":15,
            "instantiation_capacity":50,"stability_emphasis":20,"uniqueness_emphasis":10})
    );
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn checkpointed_fold_of_the_reference_ledger_equals_the_full_fold() {
    let Some(path) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let events = load(&path);
    let (mut rsm, mut concepts) = (Rsm::default(), ConceptGraph::default());
    for ev in &events {
        rsm.apply(ev);
        concepts.apply(ev);
    }
    let half = events.len() / 2;
    let (mut r, mut c) = (Rsm::default(), ConceptGraph::default());
    for ev in &events[..half] {
        r.apply(ev);
        c.apply(ev);
    }
    // Through the bytes a projection checkpoint stores (MessagePack).
    let saved = Projections {
        rsm: r,
        concepts: c,
        ..Projections::default()
    }
    .to_checkpoint();
    let restored = Projections::from_checkpoint(&saved).expect("the checkpoint reads back");
    let (mut r, mut c) = (restored.rsm, restored.concepts);
    for ev in &events[half..] {
        r.apply(ev);
        c.apply(ev);
    }
    assert_eq!(r, rsm);
    assert_eq!(c, concepts);
    assert_eq!(r.snapshot(&c), rsm.snapshot(&concepts));
}
