//! Marker floods (issue 13, item 11): one reply acts on at most 64 markers of each kind; the
//! rest are counted in the turn record, not written.

use crate::harness::Pmm;
use serde_json::Value;

#[test]
fn issue13_item11_marker_flood_is_capped_and_counted() {
    let pmm = Pmm::new();
    let mut reply = String::from("Here you go.\n");
    for i in 0..1_000 {
        reply.push_str(&format!("COMMIT: task number {i}\n"));
        reply.push_str(&format!("CLAIM:event_existence={{\"id\":{}}}\n", i % 3 + 1));
        reply.push_str(&format!("CLOSE: cid{i}\n"));
        reply.push_str(&format!("REF: other.db#{i}\n"));
    }
    let script = pmm.path("replies.jsonl");
    std::fs::write(&script, format!("{}\n", Value::String(reply))).unwrap();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "go",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let records = r.records();
    let turn = records.iter().find(|x| x["type"] == "turn").expect("turn");
    let kinds = |k: &str| records.iter().filter(|x| x["kind"] == k).count();
    assert_eq!(kinds("commitment_open"), 64);
    assert_eq!(turn["opened"].as_array().unwrap().len(), 64);
    assert!(kinds("claim") <= 64, "{}", kinds("claim"));
    assert!(kinds("inter_ledger_ref") <= 64);
    assert_eq!(
        turn["markers_ignored"],
        serde_json::json!({
            "commits": 1_000 - 64,
            "closes": 1_000 - 64,
            "claims": 1_000 - 64,
            "refs": 1_000 - 64,
        })
    );
    // Bounded: the turn's events are a few hundred, not tens of thousands.
    assert!(turn["events"].as_u64().unwrap() < 600, "{turn}");
    let v = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(v.code, 0, "{v:?}");

    // A reply within the limit records no markers_ignored.
    let pmm = Pmm::new();
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let records = r.records();
    let turn = records.iter().find(|x| x["type"] == "turn").expect("turn");
    assert!(turn.get("markers_ignored").is_none(), "{turn}");
}
