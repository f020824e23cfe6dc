//! Issue 21 item 5: ids (and counts) come from input — an export, another writer's ledger — so
//! i64::MAX, i64::MIN and numbers beyond i64 must give a finding or exit 2, never a panic, a
//! wrapped value or a hang.

use crate::harness::{Pmm, Run};
use serde_json::Value;
use std::time::Duration;

const MAX: i64 = i64::MAX;
const MIN: i64 = i64::MIN;

/// One exported event with id `id` (the text as given, so it may be beyond i64).
fn line(id: &str, kind: &str, content: &str) -> String {
    let event = serde_json::json!({
        "ts": "2025-01-01T00:00:00Z", "kind": kind, "content": content, "meta": {},
        "prev_hash": null, "hash": "00",
    });
    let rest = serde_json::to_string(&event).unwrap();
    format!("{{\"id\":{id},{}\n", &rest[1..])
}

fn verify(pmm: &Pmm, args: &[&str], stdin: &str) -> Run {
    let r = pmm.run("pmm-verify", args, stdin);
    assert!(!r.stderr.contains("panicked"), "{r:?}");
    r
}

fn id_gaps(r: &Run) -> Vec<(i64, Value)> {
    r.records()
        .iter()
        .filter(|f| f["problem"] == "id_gap")
        .map(|f| (f["id"].as_i64().unwrap(), f["expected"].clone()))
        .collect()
}

#[test]
fn verify_reports_every_event_after_an_id_of_i64_max_as_a_gap() {
    let pmm = Pmm::new();
    let input = format!(
        "{}{}",
        line(&MAX.to_string(), "user_message", "a"),
        line(&MAX.to_string(), "user_message", "b")
    );
    let r = verify(&pmm, &["-"], &input);
    assert_eq!(r.code, 1, "{r:?}");
    // Nothing can follow i64::MAX: the repeated id is a gap, with no expected id.
    assert_eq!(
        id_gaps(&r),
        vec![(MAX, Value::from(1)), (MAX, Value::Null)],
        "{}",
        r.stdout
    );
    assert_eq!(r.summary()["id_gaps"], 2);
}

#[test]
fn verify_of_ids_at_i64_min_and_beyond_i64_gives_findings_not_wrapped_values() {
    let pmm = Pmm::new();
    let min = MIN.to_string();
    let r = verify(
        &pmm,
        &["-"],
        &format!(
            "{}{}",
            line(&min, "user_message", "a"),
            line("5", "user_message", "b")
        ),
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        id_gaps(&r),
        vec![(MIN, Value::from(1)), (5, Value::from(MIN + 1))]
    );
    let r = verify(
        &pmm,
        &["-"],
        &format!(
            "{}{}",
            line("1", "user_message", "a"),
            line(&min, "user_message", "b")
        ),
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(id_gaps(&r), vec![(MIN, Value::from(2))]);
    for huge in ["99999999999999999999", "-99999999999999999999", "1e30"] {
        let r = verify(&pmm, &["-"], &line(huge, "user_message", "a"));
        assert_eq!(r.code, 1, "{huge}: {r:?}");
        assert_eq!(r.summary()["malformed"], 1, "{huge}: {}", r.stdout);
    }
}

#[test]
fn deep_verify_of_a_meta_summary_at_i64_min_or_with_huge_counts_does_not_overflow() {
    let pmm = Pmm::new();
    let r = verify(
        &pmm,
        &["--deep", "-"],
        &line(&MIN.to_string(), "meta_summary", r#"{"event_count":5}"#),
    );
    assert_eq!(r.code, 1, "{r:?}");
    let count = r
        .records()
        .into_iter()
        .find(|f| f["what"] == "meta_summary.event_count")
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert_eq!(count["expected"], format!("less than {MIN}"));
    // graph_stats.counts_by_kind summing past i64::MAX is no sum: a mismatch, not a panic.
    let content = format!(
        r#"{{"event_count":0,"graph_stats":{{"nodes":1,"counts_by_kind":{{"a":{MAX},"b":1}}}}}}"#
    );
    let r = verify(&pmm, &["--deep", "-"], &line("1", "meta_summary", &content));
    assert_eq!(r.code, 1, "{r:?}");
    let nodes = r
        .records()
        .into_iter()
        .find(|f| f["what"] == "meta_summary.graph_stats.nodes")
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert_eq!(nodes["expected"], Value::Null);
}

/// A ledger of one event whose id is `id` (as another writer could leave it), with pmm's
/// full-text index covering id 1.
fn ledger_with_id(id: i64) -> Pmm {
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "hi"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    assert_eq!(conn.execute("UPDATE events SET id = ?1", [id]).unwrap(), 1);
    pmm
}

#[test]
fn verify_and_import_of_a_sqlite_ledger_with_far_ids_do_not_overflow() {
    // Multiples of 1024, where the reader reports its progress.
    for id in [MAX - 1023, -1024] {
        let src = ledger_with_id(id);
        let path = src.db.to_str().unwrap();
        let r = verify(&src, &[path], "");
        assert_eq!(r.code, 1, "{id}: {r:?}");
        assert_eq!(id_gaps(&r), vec![(id, Value::from(1))], "{id}");
        let pmm = Pmm::new();
        let r = pmm.run("pmm-append", &["--import", path], "");
        assert_eq!(r.code, 2, "{id}: {r:?}");
        assert!(r.stderr.contains("import refused"), "{id}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{id}: {}", r.stderr);
    }
}

#[test]
fn import_after_a_head_of_i64_max_is_refused_by_the_verifier() {
    let pmm = ledger_with_id(MAX);
    let head = pmm.run("pmm-replay", &[], "").records().remove(0);
    // An event that continues the head's chain correctly, but with an id that cannot exist.
    let mut scratch = Vec::new();
    let meta = serde_json::Map::new();
    let prev = head["hash"].as_str().unwrap();
    let hash = pmm::chain::event_digest(&mut scratch, "user_message", "x", &meta, Some(prev))
        .unwrap()
        .to_string();
    let event = serde_json::json!({
        "id": MAX, "ts": "2025-01-01T00:00:00Z", "kind": "user_message", "content": "x",
        "meta": {}, "prev_hash": prev, "hash": hash,
    });
    std::fs::write(pmm.path("next.jsonl"), format!("{event}\n")).unwrap();
    let r = pmm.run("pmm-append", &["--import", "next.jsonl"], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("which no event can follow"),
        "{}",
        r.stderr
    );
    assert_eq!(pmm.run("pmm-replay", &[], "").records(), vec![head]);
}

#[test]
fn appending_after_a_head_of_i64_max_is_bad_input_at_once() {
    let pmm = ledger_with_id(MAX);
    let line = r#"{"ts":"2026-01-01T00:00:00Z","kind":"user_message","content":"x"}"#;
    for args in [
        &[][..],
        &["--batch"][..],
        &["--keep-ts"][..],
        &["--kind", "user_message", "--content", "y"][..],
    ] {
        // A timeout: catching the full-text index up must step over events, not over ids.
        let out = pmm
            .cmd("pmm-append")
            .args(args)
            .write_stdin(format!("{line}\n"))
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("the head's id is {MAX}: no event can follow it")),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(pmm.run("pmm-replay", &[], "").records().len(), 1);
}

#[test]
fn replay_of_a_ledger_whose_head_is_i64_max_does_not_overflow() {
    let pmm = ledger_with_id(MAX);
    let r = pmm.run("pmm-replay", &[], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["id"], MAX);
    let r = pmm.run("pmm-replay", &["--tail", "1"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["id"], MAX);
}
