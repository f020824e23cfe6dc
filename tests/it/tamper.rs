//! Tampering: a clean seeded ledger, exported, damaged in one precise way, then verified.
//! Every test checks the exit status and the exact findings (ids and problems), so that a
//! verifier that misses the damage, or reports more than must follow from it, fails.

use crate::harness::{Pmm, Run};
use serde_json::{json, Value};

/// A clean ledger of 12 seeded events.
fn seeded() -> Pmm {
    let pmm = Pmm::new();
    assert_eq!(pmm.seed(12).len(), 12);
    pmm
}

/// `pmm-export --format <format>` of the ledger.
fn export(pmm: &Pmm, format: &str) -> String {
    let r = pmm.run("pmm-export", &["--format", format], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.stdout
}

/// The JSONL export, one string per event (index = id - 1).
fn lines(pmm: &Pmm) -> Vec<String> {
    let text = export(pmm, "jsonl");
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 12);
    lines
}

/// The stored hash of every event (index = id - 1).
fn hashes(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["hash"].as_str().unwrap().to_string()
        })
        .collect()
}

fn join(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// Writes `text` to `name` in the workspace and runs `pmm-verify <name> extra...`.
fn verify_text(pmm: &Pmm, name: &str, text: &str, extra: &[&str]) -> Run {
    let path = pmm.path(name);
    std::fs::write(&path, text).unwrap();
    let mut args = vec![path.to_str().unwrap()];
    args.extend_from_slice(extra);
    pmm.run("pmm-verify", &args, "")
}

/// Replaces the first occurrence of `from` in `s`, insisting that there is one.
fn replace_once(s: &str, from: &str, to: &str) -> String {
    assert!(s.contains(from), "{from:?} not in {s:?}");
    s.replacen(from, to, 1)
}

fn f(id: i64, problem: &str) -> (Value, String) {
    (json!(id), problem.to_string())
}

/// Findings sorted by (id, problem), for comparisons that must not depend on report order.
fn sorted_findings(r: &Run) -> Vec<(Value, String)> {
    let mut v = r.findings();
    v.sort_by_key(|(id, p)| (id.as_i64().unwrap_or(-1), p.clone()));
    v
}

fn finding<'a>(findings: &'a [Value], id: i64, problem: &str) -> &'a Value {
    findings
        .iter()
        .find(|x| x["id"] == id && x["problem"] == problem)
        .unwrap_or_else(|| panic!("no {problem} at {id} in {findings:?}"))
}

fn assert_clean(r: &Run, events: u64) {
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.findings().is_empty(), "{r:?}");
    let s = r.summary();
    assert_eq!(s["ok"], true);
    assert_eq!(s["events"], events);
}

#[test]
fn clean_exports_verify_clean_in_both_formats() {
    let pmm = seeded();
    let h = hashes(&lines(&pmm));
    for format in ["jsonl", "json"] {
        let r = verify_text(&pmm, &format!("clean.{format}"), &export(&pmm, format), &[]);
        assert_clean(&r, 12);
        let s = r.summary();
        assert_eq!(s["first_id"], 1);
        assert_eq!(s["last_id"], 12);
        assert_eq!(s["last_hash"], h[11].as_str());
    }
    assert_clean(&pmm.run("pmm-verify", &[], ""), 12);
}

#[test]
fn changed_content_byte_is_a_hash_mismatch_at_that_id_only() {
    let pmm = seeded();
    let mut l = lines(&pmm);
    let h = hashes(&l);
    // Event 5 holds "event 4 — ..."; one byte changes.
    l[4] = replace_once(&l[4], "event 4 —", "Event 4 —");
    let r = verify_text(&pmm, "t.jsonl", &join(&l), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    // The stored hash is untouched, so event 6 still links to it: nothing else follows.
    assert_eq!(r.findings(), vec![f(5, "hash_mismatch")]);
    let fs = r.of_type("finding");
    assert_eq!(fs[0]["found"], h[4].as_str());
    assert_ne!(fs[0]["expected"], h[4].as_str());
    let s = r.summary();
    assert_eq!(
        (s["hash_mismatches"].as_u64(), s["ok"].as_bool()),
        (Some(1), Some(false))
    );

    // The same in the reference JSON export.
    let json = replace_once(&export(&pmm, "json"), "event 4 —", "Event 4 —");
    let r = verify_text(&pmm, "t.json", &json, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.findings(), vec![f(5, "hash_mismatch")]);
}

#[test]
fn changed_meta_value_is_a_hash_mismatch_at_that_id() {
    let pmm = seeded();
    let mut l = lines(&pmm);
    // Event 2's meta holds a 23-digit integer; its last digit changes (JSONL: meta object).
    l[1] = replace_once(&l[1], "12345678901234567890123", "12345678901234567890124");
    let r = verify_text(&pmm, "t.jsonl", &join(&l), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.findings(), vec![f(2, "hash_mismatch")]);

    // JSON export (meta as a string): the first reflection, event 3, has x = [1.5, ...].
    let json = replace_once(&export(&pmm, "json"), "[1.5,", "[1.25,");
    let r = verify_text(&pmm, "t.json", &json, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.findings(), vec![f(3, "hash_mismatch")]);
}

#[test]
fn reordered_meta_keys_are_not_tampering() {
    // The hash covers the canonical meta, not its spelling: a re-serialized meta is the same.
    let pmm = seeded();
    let mut l = lines(&pmm);
    let from = r#""meta":{"n":12345678901234567890123,"role":"assistant","temperature":0.0}"#;
    let to = r#""meta":{ "temperature":0.0, "role":"assistant", "n":12345678901234567890123 }"#;
    l[1] = replace_once(&l[1], from, to);
    assert_clean(&verify_text(&pmm, "t.jsonl", &join(&l), &[]), 12);
}

#[test]
fn deleted_middle_event_is_an_id_gap_and_a_broken_link_at_the_next_id() {
    let pmm = seeded();
    let mut l = lines(&pmm);
    let h = hashes(&l);
    l.remove(5); // event 6
    let r = verify_text(&pmm, "t.jsonl", &join(&l), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        sorted_findings(&r),
        vec![f(7, "broken_link"), f(7, "id_gap")]
    );
    let fs = r.of_type("finding");
    assert_eq!(finding(&fs, 7, "id_gap")["expected"], 6);
    let link = finding(&fs, 7, "broken_link");
    // Event 7 should follow event 5 now; its prev_hash names the deleted event 6, which is
    // in no event of the file: points_to is null (foreign).
    assert_eq!(link["expected"], h[4].as_str());
    assert_eq!(link["found"], h[5].as_str());
    assert_eq!(link["points_to"], Value::Null);
    let s = r.summary();
    assert_eq!(s["events"], 11);
    assert_eq!(s["id_gaps"], 1);
    assert_eq!(s["broken_links"], 1);
    assert_eq!(s["hash_mismatches"], 0);
}

#[test]
fn truncated_tail_is_clean_alone_and_breaks_the_saved_anchor() {
    let pmm = seeded();
    let l = lines(&pmm);
    let h = hashes(&l);
    // Save the anchor the way the help says: `pmm-verify | tail -1 > anchors.txt`.
    let bin = assert_cmd::cargo::cargo_bin("pmm-verify");
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' --db '{}' | tail -1 > anchors.txt",
            bin.display(),
            pmm.db.display()
        ))
        .current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .status()
        .unwrap();
    assert!(st.success());
    let saved: Value = serde_json::from_str(
        std::fs::read_to_string(pmm.path("anchors.txt"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(saved["type"], "summary");
    assert_eq!(saved["last_id"], 12);

    // The full export still holds the anchor.
    let full = verify_text(
        &pmm,
        "full.jsonl",
        &join(&l),
        &["--anchors-from", "anchors.txt"],
    );
    assert_clean(&full, 12);
    assert_eq!(full.summary()["anchors_checked"], 1);

    // Without its last three events the file is a perfectly good shorter chain...
    let cut = join(&l[..9]);
    let alone = verify_text(&pmm, "cut.jsonl", &cut, &[]);
    assert_clean(&alone, 9);
    assert_eq!(alone.summary()["last_id"], 9);

    // ...until it is held to the old head.
    let anchor = format!("12:{}", h[11]);
    let kept = format!("9:{}", h[8]);
    for args in [
        vec!["--anchor", anchor.as_str()],
        vec!["--anchors-from", "anchors.txt"],
        vec!["--anchor", kept.as_str(), "--anchor", anchor.as_str()],
    ] {
        let r = verify_text(&pmm, "cut.jsonl", &cut, &args);
        assert_eq!(r.code, 1, "{args:?}: {r:?}");
        assert_eq!(r.findings(), vec![f(12, "anchor_mismatch")], "{args:?}");
        let fs = r.of_type("finding");
        assert_eq!(fs[0]["expected"], h[11].as_str());
        assert_eq!(fs[0]["found"], Value::Null);
        let s = r.summary();
        assert_eq!(s["anchor_mismatches"], 1);
        assert_eq!(s["anchors_checked"].as_u64(), Some(args.len() as u64 / 2));
    }
}

#[test]
fn rewritten_history_verifies_clean_alone_and_breaks_the_anchor() {
    let pmm = seeded();
    let l = lines(&pmm);
    let h = hashes(&l);
    // A second ledger with the same events but event 3 rewritten, re-chained from genesis
    // by pmm-append (which ignores the ids and hashes in its input).
    let other = Pmm::new();
    let mut rewritten = l.clone();
    rewritten[2] = replace_once(&rewritten[2], "event 2 —", "event 2 (edited) —");
    let r = other.run("pmm-append", &[], &join(&rewritten));
    assert_eq!(r.code, 0, "{r:?}");
    assert_clean(&other.run("pmm-verify", &[], ""), 12);

    let still = format!("2:{}", h[1]);
    let head = format!("12:{}", h[11]);
    let r = other.run("pmm-verify", &["--anchor", &still, "--anchor", &head], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.findings(), vec![f(12, "anchor_mismatch")]);
    let fs = r.of_type("finding");
    assert_eq!(fs[0]["expected"], h[11].as_str());
    let found = fs[0]["found"].as_str().unwrap();
    assert_ne!(found, h[11]);
    assert_eq!(Some(found), r.summary()["last_hash"].as_str());
}

#[test]
fn swapped_events_are_reported_at_each_displaced_id() {
    let pmm = seeded();
    let mut l = lines(&pmm);
    let h = hashes(&l);
    l.swap(5, 6); // ... 5, 7, 6, 8 ...
    let r = verify_text(&pmm, "t.jsonl", &join(&l), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        sorted_findings(&r),
        vec![
            f(6, "broken_link"),
            f(6, "id_gap"),
            f(7, "broken_link"),
            f(7, "id_gap"),
            f(8, "broken_link"),
            f(8, "id_gap"),
        ]
    );
    let fs = r.of_type("finding");
    assert_eq!(finding(&fs, 7, "id_gap")["expected"], 6);
    assert_eq!(finding(&fs, 6, "id_gap")["expected"], 8);
    assert_eq!(finding(&fs, 8, "id_gap")["expected"], 7);
    // 7 comes right after 5 but names 6, which comes later in the file: not an earlier
    // event, so it may be reported as foreign (null) or as event 6 — never anything else.
    let l7 = finding(&fs, 7, "broken_link");
    assert_eq!(
        (l7["expected"].as_str(), l7["found"].as_str()),
        (Some(h[4].as_str()), Some(h[5].as_str()))
    );
    assert!(l7["points_to"].is_null() || l7["points_to"] == 6, "{l7}");
    // 6 now follows 7 but still names 5; 8 follows 6 but names 7.
    let l6 = finding(&fs, 6, "broken_link");
    assert_eq!(l6["expected"], h[6].as_str());
    assert_eq!(l6["points_to"], 5);
    let l8 = finding(&fs, 8, "broken_link");
    assert_eq!(l8["expected"], h[5].as_str());
    assert_eq!(l8["points_to"], 7);
    assert_eq!(r.summary()["hash_mismatches"], 0);
}

#[test]
fn repeated_event_is_a_duplicate_hash_naming_the_first_id() {
    let pmm = seeded();
    let mut l = lines(&pmm);
    let h = hashes(&l);
    l.push(l[3].clone()); // a verbatim copy of event 4 after event 12
    let r = verify_text(&pmm, "t.jsonl", &join(&l), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        sorted_findings(&r),
        vec![f(4, "broken_link"), f(4, "duplicate_hash"), f(4, "id_gap")]
    );
    let fs = r.of_type("finding");
    let dup = finding(&fs, 4, "duplicate_hash");
    assert_eq!(dup["first_id"], 4);
    assert_eq!(dup["hash"], h[3].as_str());
    let link = finding(&fs, 4, "broken_link");
    assert_eq!(link["expected"], h[11].as_str());
    assert_eq!(link["found"], h[2].as_str());
    assert_eq!(link["points_to"], 3);
    assert_eq!(finding(&fs, 4, "id_gap")["expected"], 13);
    let s = r.summary();
    assert_eq!(s["events"], 13);
    assert_eq!(s["duplicate_hashes"], 1);
}

#[test]
fn malformed_lines_are_reported_with_their_line_and_verification_goes_on() {
    let pmm = seeded();
    let l = lines(&pmm);
    let mut file: Vec<String> = Vec::new();
    file.extend_from_slice(&l[..3]); // lines 1-3: events 1-3
    file.push("this is not json".into()); // line 4
    file.extend_from_slice(&l[3..5]); // lines 5-6: events 4-5
    file.push(String::new()); // line 7: blank, not a finding
    file.push(l[5].clone()); // line 8: event 6
    file.push("[1,2,3]".into()); // line 9: JSON, but not an event
    file.extend_from_slice(&l[6..]); // lines 10-15: events 7-12
                                     // Damage after the malformed lines must still be found: event 9 is on line 12.
    file[11] = replace_once(&file[11], "event 8 —", "event 8 -");
    let r = verify_text(&pmm, "t.jsonl", &join(&file), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let fs = r.of_type("finding");
    let problems: Vec<(Value, Value, Value)> = fs
        .iter()
        .map(|x| (x["id"].clone(), x["problem"].clone(), x["line"].clone()))
        .collect();
    assert_eq!(
        problems,
        vec![
            (Value::Null, json!("malformed"), json!(4)),
            (Value::Null, json!("malformed"), json!(9)),
            (json!(9), json!("hash_mismatch"), Value::Null),
        ]
    );
    let s = r.summary();
    assert_eq!(s["events"], 12);
    assert_eq!(s["malformed"], 2);
    assert_eq!(s["last_id"], 12);

    // Blank lines at the top of the file count too.
    let mut top = vec![String::new(), String::new()];
    top.extend_from_slice(&l[..2]);
    top.push("{oops".into()); // line 5
    top.extend_from_slice(&l[2..]);
    let r = verify_text(&pmm, "top.jsonl", &join(&top), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let fs = r.of_type("finding");
    assert_eq!(fs.len(), 1, "{fs:?}");
    assert_eq!(
        (fs[0]["problem"].as_str(), fs[0]["line"].as_u64()),
        (Some("malformed"), Some(5))
    );
}

#[test]
fn json_array_cut_in_the_middle_is_a_truncation_finding() {
    let pmm = seeded();
    let json = export(&pmm, "json");
    let cut = &json[..json.len() / 2];
    let r = verify_text(&pmm, "cut.json", cut, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let fs = r.of_type("finding");
    assert_eq!(fs.len(), 1, "only the truncation: {fs:?}");
    assert_eq!(fs[0]["problem"], "malformed");
    assert!(
        fs[0]["error"].as_str().unwrap().contains("truncated"),
        "{}",
        fs[0]
    );
    assert!(fs[0]["line"].as_u64().unwrap() > 1);
    let s = r.summary();
    let events = s["events"].as_u64().unwrap();
    assert!((1..12).contains(&events), "{s}");
    assert_eq!(s["last_id"].as_u64(), Some(events));
    assert_eq!(s["ok"], false);
}

#[test]
fn changed_byte_in_the_sqlite_ledger_is_a_hash_mismatch() {
    let pmm = seeded();
    {
        let conn = rusqlite::Connection::open(&pmm.db).unwrap();
        let content: String = conn
            .query_row("SELECT content FROM events WHERE id = 5", [], |r| r.get(0))
            .unwrap();
        let changed = replace_once(&content, "event 4", "event 5");
        let n = conn
            .execute("UPDATE events SET content = ?1 WHERE id = 5", [&changed])
            .unwrap();
        assert_eq!(n, 1);
    }
    let db = pmm.db.to_str().unwrap();
    let r = pmm.run("pmm-verify", &["--db", db], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.findings(), vec![f(5, "hash_mismatch")]);
    assert_eq!(r.summary()["events"], 12);
    // The metrics see it too.
    let m = pmm.run("pmm-metrics", &["--deterministic", "--db", db], "");
    assert_eq!(m.code, 0, "{m:?}");
    assert_eq!(m.records()[0]["hash_mismatches"], 1);
    assert_eq!(m.records()[0]["broken_links"], 0);
}

/// Issue 21 item 5: ids from input cannot overflow into a negative "expected" (or a panic).
#[test]
fn an_id_of_i64_max_in_an_export_does_not_overflow() {
    let pmm = crate::harness::Pmm::new();
    let line = |id: &str| {
        format!(
            "{{\"id\":{id},\"ts\":\"2025-01-01T00:00:00Z\",\"kind\":\"user_message\",\"content\":\"x\",\"meta\":{{}},\"prev_hash\":null,\"hash\":\"00\"}}\n"
        )
    };
    let input = format!("{}{}", line("9223372036854775807"), line("5"));
    std::fs::write(pmm.path("x.jsonl"), input).unwrap();
    let r = pmm.run("pmm-verify", &["x.jsonl"], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(!r.stdout.contains("-9223372036854775808"), "{}", r.stdout);
    // Nothing can follow i64::MAX: event 5 is a gap with no expected id (not a saturated one).
    assert!(
        r.stdout
            .contains("\"id\":5,\"problem\":\"id_gap\",\"expected\":null"),
        "{}",
        r.stdout
    );
}
