//! pmm-verify --deep: derived events recomputed from their inputs.

use crate::harness::{fixture_path, Pmm, GPT_LEDGER};
use serde_json::Value;

/// The fixture's events with every hash and link recomputed after `edit` (a consistent
/// forgery: plain verification cannot see it), as JSONL.
fn rechained(src: &std::path::Path, edit: impl Fn(&mut Value)) -> String {
    let mut rows: Vec<Value> = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    for row in rows.iter_mut() {
        let mut meta: Value = serde_json::from_str(row["meta"].as_str().unwrap()).unwrap();
        row["meta"] = meta.take();
        edit(row);
    }
    crate::harness::rechain(&mut rows)
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn deep_finds_no_mismatch_on_the_reference_ledger() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    let r = pmm.run("pmm-verify", &["--deep", src.to_str().unwrap()], "");
    assert_eq!(r.code, 1, "the three forks are still findings: {r:?}");
    let s = r.summary();
    assert_eq!(s["derived_mismatches"], 0, "{r:?}");
    assert_eq!(s["broken_links"], 3);
    // What each derived kind counts is asserted once, in tests/it/derived.rs
    // (reference_ledger_has_no_derived_mismatch); the self-model snapshots are compared only
    // by the program, which folds the self-model alongside.
    assert_eq!(s["deep"]["rsm_snapshots"], 15, "{r:?}");
    assert_eq!(s["deep"]["unresolved"], 0, "{r:?}");
    // The same through the imported ledger.
    assert_eq!(
        pmm.run(
            "pmm-append",
            &["--import", src.to_str().unwrap(), "--accept-forks"],
            ""
        )
        .code,
        0
    );
    let r = pmm.run("pmm-verify", &["--deep"], "");
    assert_eq!(r.summary()["derived_mismatches"], 0, "{r:?}");
    assert_eq!(r.summary()["deep"]["rsm_snapshots"], 15);
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn a_consistently_rehashed_forgery_passes_plain_verify_but_not_deep() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    let forged = rechained(&src, |row| {
        match row["id"].as_i64().unwrap() {
            // A self-model snapshot that claims more determinism than the events show.
            172 => {
                row["meta"]["rsm_state"]["behavioral_tendencies"]["determinism_emphasis"] =
                    Value::from(49)
            }
            // A commitment whose cid does not derive from its text.
            105 => row["meta"]["cid"] = Value::from("deadbeef"),
            _ => {}
        }
    });
    let plain = pmm.run("pmm-verify", &["-"], &forged);
    assert_eq!(
        plain.code, 0,
        "rehashed: plain verification is clean: {plain:?}"
    );
    std::fs::write(pmm.path("forged.jsonl"), &forged).unwrap();
    let r = pmm.run("pmm-verify", &["--deep", "forged.jsonl"], "");
    assert_eq!(r.code, 1, "{r:?}");
    let found: Vec<(i64, String)> = r
        .of_type("finding")
        .iter()
        .map(|f| {
            assert_eq!(f["problem"], "derived_mismatch", "{f}");
            (
                f["id"].as_i64().unwrap(),
                f["what"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        found.contains(&(105, "commitment_open.cid".into())),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(id, what)| *id == 172 && what.contains("rsm_state")),
        "{found:?}"
    );
    assert_eq!(
        r.summary()["derived_mismatches"].as_u64(),
        Some(found.len() as u64)
    );
}
