//! Config values out of range (issue 13, item 10): refused with a violation, like a policy
//! refusal, and never used by a turn or a tick.

use crate::harness::Pmm;

fn append_config(pmm: &Pmm, content: &str) -> crate::harness::Run {
    pmm.run(
        "pmm-append",
        &[
            "--kind",
            "config",
            "--content",
            content,
            "--meta",
            r#"{"source":"operator"}"#,
        ],
        "",
    )
}

#[test]
fn issue13_item10_retrieval_dims_out_of_range_is_refused_with_a_violation() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let r = append_config(&pmm, r#"{"type":"retrieval","dims":100000000}"#);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.stderr.trim_end().lines().count(), 1, "{r:?}");
    assert!(
        r.stderr.contains("dims: 100000000 is out of range"),
        "{r:?}"
    );
    let printed = r.records();
    assert_eq!(printed.len(), 1, "only the violation: {printed:?}");
    assert_eq!(printed[0]["kind"], "violation");
    assert!(printed[0]["meta"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("dims"));

    for bad in [
        r#"{"type":"retrieval","limit":100000000}"#,
        r#"{"type":"retrieval","strategy":"everything"}"#,
        r#"{"type":"autonomy_thresholds","summary_interval":0}"#,
        r#"{"type":"autonomy_thresholds","reflection_interval":-3}"#,
    ] {
        let r = append_config(&pmm, bad);
        assert_eq!(r.code, 1, "{bad}: {r:?}");
        assert_eq!(r.records()[0]["kind"], "violation", "{bad}");
    }

    // The turn still uses the default retrieval config: 64 dimensions.
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let sel = r
        .records()
        .into_iter()
        .find(|e| e["kind"] == "retrieval_selection")
        .expect("retrieval_selection");
    let content: serde_json::Value =
        serde_json::from_str(sel["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["dims"], 64, "{content}");

    // In range is written.
    let r = append_config(&pmm, r#"{"type":"retrieval","dims":128,"limit":5}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["kind"], "config");
    let r = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn issue13_item10_a_ledger_config_out_of_range_is_not_used() {
    // A config written around pmm (an import, another program): the turn keeps the default.
    let pmm = Pmm::new();
    pmm.seed(2);
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute(
        "INSERT INTO events (ts, kind, content, meta, prev_hash, hash) VALUES ('2025-11-24T05:55:41.194157Z', 'config', ?1, '{}', NULL, ?2)",
        [r#"{"type":"retrieval","dims":100000000,"limit":100000000}"#, &"ab".repeat(32)],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO events (ts, kind, content, meta, prev_hash, hash) VALUES ('2025-11-24T05:55:41.194157Z', 'config', ?1, '{}', NULL, ?2)",
        [r#"{"type":"autonomy_thresholds","reflection_interval":0,"summary_interval":-5}"#, &"cd".repeat(32)],
    )
    .unwrap();
    drop(conn);
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "hello"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let sel = r
        .records()
        .into_iter()
        .find(|e| e["kind"] == "retrieval_selection")
        .expect("retrieval_selection");
    let content: serde_json::Value =
        serde_json::from_str(sel["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["dims"], 64, "{content}");
    let r = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let state = &r.records()[0];
    let text = state.to_string();
    assert!(
        text.contains("\"reflection_interval\":10") || text.contains("\"reflection_interval\": 10"),
        "thresholds keep their defaults: {text}"
    );
}
