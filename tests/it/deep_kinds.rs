//! `--deep` on the derived kinds pmm writes (issue 13, item 7): each edit, re-hashed end to
//! end so that plain verification passes, is a derived_mismatch; the summary says which kinds
//! were recomputed and which not, and why.

use crate::harness::Pmm;
use serde_json::Value;

/// A ledger with turns (commitments opened and closed, synthesized reflections, meta
/// summaries) and ticks (decisions, a rule table, a checkpoint manifest), as JSON Lines.
fn ledger() -> (Pmm, Vec<Value>) {
    let pmm = Pmm::new();
    let script = pmm.path("replies.jsonl");
    std::fs::write(
        &script,
        "\"Sure.\\nCOMMIT: write the plan\"\n\"Done.\\nCOMMIT: test it\"\n\"ok\"\n\"ok2\"\n",
    )
    .unwrap();
    for m in ["one", "two", "three", "four"] {
        let r = pmm.run(
            "pmm-turn",
            &[
                "--adapter",
                "scripted",
                "--script",
                script.to_str().unwrap(),
                m,
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    for slot in 1..=12 {
        let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    let r = pmm.run("pmm-export", &["--format", "jsonl"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let rows = r.records();
    (pmm, rows)
}

/// `rows` with `edit` applied to the first event of `kind` that `pick` accepts, and every hash
/// and link recomputed, as JSONL.
fn forged(
    rows: &[Value],
    kind: &str,
    pick: impl Fn(&Value) -> bool,
    edit: impl Fn(&mut Value),
) -> String {
    let mut rows = rows.to_vec();
    let target = rows
        .iter()
        .position(|r| r["kind"] == kind && pick(r))
        .unwrap_or_else(|| panic!("no {kind} to edit"));
    edit(&mut rows[target]);
    crate::harness::rechain(&mut rows)
}

/// Edits the JSON content of an event.
fn content(row: &mut Value, f: impl Fn(&mut Value)) {
    let mut c: Value = serde_json::from_str(row["content"].as_str().unwrap()).unwrap();
    f(&mut c);
    row["content"] = Value::String(pmm::canon::to_string(&c).unwrap());
}

fn deep_whats(pmm: &Pmm, jsonl: &str) -> Vec<String> {
    let path = pmm.path("forged.jsonl");
    std::fs::write(&path, jsonl).unwrap();
    let plain = pmm.run("pmm-verify", &["--quiet", path.to_str().unwrap()], "");
    assert_eq!(
        plain.code, 0,
        "a consistent forgery passes plain verify: {plain:?}"
    );
    let r = pmm.run(
        "pmm-verify",
        &["--quiet", "--deep", path.to_str().unwrap()],
        "",
    );
    r.of_type("finding")
        .iter()
        .map(|f| f["what"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn any(_: &Value) -> bool {
    true
}

#[test]
fn issue13_item7_deep_recomputes_the_derived_kinds_pmm_writes() {
    let (pmm, rows) = ledger();
    let clean = rows.iter().map(|r| format!("{r}\n")).collect::<String>();
    assert!(deep_whats(&pmm, &clean).is_empty());

    let cases: Vec<(&str, String, &str)> = vec![
        (
            "commitment_close",
            forged(&rows, "commitment_close", any, |r| {
                r["content"] = "Commitment closed: 00000000".into()
            }),
            "commitment_close.content",
        ),
        (
            "autonomy_tick",
            forged(&rows, "autonomy_tick", any, |r| {
                content(r, |c| c["decision"] = "reflectX".into())
            }),
            "autonomy_tick.decision",
        ),
        (
            "autonomy_tick",
            forged(&rows, "autonomy_tick", any, |r| {
                content(r, |c| c["evidence"] = serde_json::json!([999999]))
            }),
            "autonomy_tick.evidence",
        ),
        (
            "autonomy_rule_table",
            forged(&rows, "autonomy_rule_table", any, |r| {
                let t = r["content"]
                    .as_str()
                    .unwrap()
                    .replace("reflection_interval:", "reflection_interval:-");
                r["content"] = t.into();
            }),
            "autonomy_rule_table.content",
        ),
        (
            "checkpoint_manifest",
            forged(&rows, "checkpoint_manifest", any, |r| {
                content(r, |c| c["covers"] = serde_json::json!(["rsm_state"]))
            }),
            "checkpoint_manifest.covers",
        ),
        (
            "meta_summary",
            forged(&rows, "meta_summary", any, |r| {
                content(r, |c| {
                    let n = c["graph_stats"]["nodes"].as_i64().unwrap();
                    c["graph_stats"]["nodes"] = (n + 1).into();
                })
            }),
            "meta_summary.graph_stats.nodes",
        ),
        (
            "reflection",
            forged(
                &rows,
                "reflection",
                |r| r["meta"]["source"] == "pmm-turn",
                |r| content(r, |c| c["intent"] = "something else".into()),
            ),
            "reflection.intent",
        ),
    ];
    for (kind, jsonl, what) in cases {
        let found = deep_whats(&pmm, &jsonl);
        assert!(
            found.iter().any(|w| w == what),
            "{kind}: expected {what} in {found:?}"
        );
    }

    // The summary names what was recomputed and what was not, and why.
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let deep = &r.summary()["deep"];
    for k in [
        "commitment_open",
        "commitment_close",
        "autonomy_tick",
        "autonomy_rule_table",
        "checkpoint_manifest",
        "meta_summary",
        "reflection",
        "embedding_add",
        "retrieval_selection",
        "summary_update",
    ] {
        assert!(deep["kinds_checked"][k].is_string(), "{k} in {deep}");
    }
    assert!(deep["kinds_not_checked"]["metrics_turn"]
        .as_str()
        .unwrap()
        .contains("measurements"));
    assert!(deep["close_contents"].as_u64().unwrap() >= 1, "{deep}");
    assert!(
        deep["synthesized_reflections"].as_u64().unwrap() >= 4,
        "{deep}"
    );
}
