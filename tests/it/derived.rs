//! Deep verification of derived events on the reference ledger: everything recomputes, and a
//! tampered copy gives exactly the mismatches that were planted.

use crate::harness::{fixture_path, GPT_LEDGER};
use pmm::audit::deep::{DeepChecker, DeepCounts};
use pmm::chain::{Finding, Problem};
use pmm::event::Event;
use pmm::interchange::{self, Input, Item};
use pmm::kernel::slot;

/// The fixture's events, or `None` when it is absent (and not required).
fn events() -> Option<Vec<Event>> {
    let path = fixture_path(GPT_LEDGER)?;
    let mut out = Vec::new();
    interchange::read(&Input::new(&path), &|_| {}, &mut |item| {
        match item {
            Item::Event(r) => out.push(r.event),
            Item::Malformed { error, .. } => panic!("malformed fixture: {error}"),
        }
        Ok(true)
    })
    .expect("read fixture");
    Some(out)
}

/// Runs the checker with a second pass when it asks for one.
fn deep(events: &[Event]) -> (Vec<Finding>, DeepCounts, bool) {
    let mut c = DeepChecker::new();
    let mut out = Vec::new();
    for ev in events {
        c.check(ev, &mut out);
    }
    let mut second = false;
    if let Some(mut pass) = c.second_pass() {
        second = true;
        for ev in events {
            pass.see(ev);
        }
        c.settle(pass, &mut out);
    }
    let counts = c.finish();
    (out, counts, second)
}

fn whats(findings: &[Finding]) -> Vec<(i64, String)> {
    findings
        .iter()
        .map(|f| match &f.problem {
            Problem::DerivedMismatch { what, .. } => (f.id.unwrap(), what.clone()),
            p => panic!("not a derived mismatch: {p:?}"),
        })
        .collect()
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn reference_ledger_has_no_derived_mismatch() {
    let Some(events) = events() else {
        return;
    };
    assert_eq!(events.len(), 1199);
    let (findings, counts, second) = deep(&events);
    assert!(findings.is_empty(), "{findings:?}");
    assert!(!second, "everything is within the windows on this ledger");
    assert_eq!(
        counts,
        DeepCounts {
            cids: 12,
            embeddings: 43,
            retrieval_digests: 17,
            checkpoint_roots: 6,
            slot_ids: 85,
            tick_slot_ids: 85,
            rsm_snapshots: 0,
            close_contents: 12,
            tick_decisions: 85,
            rule_tables: 7,
            manifest_covers: 6,
            meta_summaries: 17,
            synthesized_reflections: 0,
            index_events: 0,
            // 78 stability_metrics, 6 coherence_check, 7 policy_update, 85 outcomes; 9 of
            // them re-emissions identical to their predecessor (§17 item 17).
            adaptive_events: 176,
            adaptive_repeats: 9,
            open_goals: 0,
            retention_erasures: 0,
            mismatches: 0,
            unresolved: 0,
            skipped_erased: 0,
        }
    );
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn reference_stimuli_are_in_the_slot_of_their_timestamp() {
    let Some(events) = events() else {
        return;
    };
    let mut n = 0;
    for ev in events.iter().filter(|e| e.kind == "autonomy_stimulus") {
        let c: serde_json::Value = serde_json::from_str(&ev.content).unwrap();
        assert_eq!(
            slot::slot_of_ts(&ev.ts),
            c["slot"].as_i64(),
            "event {}",
            ev.id
        );
        assert_eq!(
            c["slot_id"].as_str(),
            Some(slot::reference_slot_id(c["slot"].as_i64().unwrap()).as_str())
        );
        n += 1;
    }
    assert_eq!(n, 85);
}

fn tamper(events: &mut [Event], id: i64, f: impl FnOnce(&mut Event)) {
    let ev = events.iter_mut().find(|e| e.id == id).unwrap();
    let before = ev.clone();
    f(ev);
    assert_ne!(*ev, before, "tampering event {id} changed nothing");
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn tampered_copy_gives_exactly_the_planted_mismatches() {
    let Some(mut events) = events() else {
        return;
    };
    // One embedding vector entry (id 93 embeds id 92; its vector starts with 37).
    tamper(&mut events, 93, |e| {
        e.content = e.content.replace("\"vector\":[37,", "\"vector\":[36,")
    });
    // One retrieval digest.
    tamper(&mut events, 126, |e| {
        e.meta = e
            .meta
            .replace("\"digest\":\"08142a5e", "\"digest\":\"18142a5e")
    });
    // One checkpoint root.
    tamper(&mut events, 144, |e| {
        e.content = e
            .content
            .replace("\"root_hash\":\"06a745ae", "\"root_hash\":\"06a745af")
    });
    // One slot id (the first stimulus, in its content).
    tamper(&mut events, 4, |e| {
        e.content = e
            .content
            .replace("\"slot_id\": \"38007a88", "\"slot_id\": \"38007a89")
    });
    // One cid.
    tamper(&mut events, 105, |e| {
        e.meta = e
            .meta
            .replace("\"cid\":\"e86ccfd1\"", "\"cid\":\"e86ccfd0\"")
    });
    let (findings, counts, _) = deep(&events);
    assert_eq!(
        whats(&findings),
        vec![
            (4, "autonomy_stimulus.slot_id".to_string()),
            (93, "embedding_add.vector".into()),
            (105, "commitment_open.cid".into()),
            (126, "retrieval_selection.digest".into()),
            (144, "checkpoint_manifest.root_hash".into()),
        ]
    );
    assert_eq!(counts.mismatches, 5);
    // The expected values are the ones the ledger had.
    match &findings[4].problem {
        Problem::DerivedMismatch {
            expected, found, ..
        } => {
            assert!(expected.as_str().unwrap().starts_with("06a745ae"));
            assert!(found.as_str().unwrap().starts_with("06a745af"));
        }
        p => panic!("{p:?}"),
    }
    match &findings[2].problem {
        Problem::DerivedMismatch {
            expected, found, ..
        } => {
            assert_eq!(expected, "e86ccfd1");
            assert_eq!(found, "e86ccfd0");
        }
        p => panic!("{p:?}"),
    }
}
