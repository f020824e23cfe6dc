//! pmm-replay: event streams, state, follow.

use crate::harness::Pmm;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn events_filters_tail_and_narrate() {
    let pmm = Pmm::new();
    let seeded = pmm.seed(12);
    let all = pmm.run("pmm-replay", &[], "");
    assert_eq!(all.code, 0, "{all:?}");
    assert_eq!(
        all.records(),
        seeded,
        "replay prints the events exactly as appended"
    );
    let r = pmm.run("pmm-replay", &["--since", "3", "--until", "5"], "");
    let ids: Vec<i64> = r
        .records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [3, 4, 5]);
    let r = pmm.run("pmm-replay", &["--kind", "reflection", "--tail", "2"], "");
    let ids: Vec<i64> = r
        .records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [7, 11], "the last two reflections, oldest first");
    let r = pmm.run("pmm-replay", &["--narrate", "--tail", "2"], "");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{r:?}");
    assert!(
        lines[0].starts_with("[11] reflection | event 10"),
        "{lines:?}"
    );
    let r = pmm.run("pmm-replay", &["--kind", "nonsense"], "");
    r.assert_error("pmm-replay", &["unknown kind 'nonsense'"]);
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn state_on_the_reference_ledger_is_deterministic() {
    let Some(pmm) = Pmm::with_reference_ledger() else {
        return;
    };
    let a = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(a.code, 0, "{a:?}");
    let b = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(a.stdout, b.stdout, "byte-identical across runs");
    let s = &a.records()[0];
    assert_eq!(s["type"], "state");
    assert_eq!(s["last_event_id"], 1199);
    assert_eq!(
        s["last_hash"],
        "a3a0b51a3a1b35597111d78d39c49793b49cdc29d4c3c6f6e50587e1061f34f9"
    );
    assert_eq!(s["open_commitments"].as_array().unwrap().len(), 0);
    assert_eq!(s["closed_commitments"], 12);
    // The newest rule table (event 1086) says 5/46; replay reproduces it.
    assert_eq!(s["thresholds"]["reflection_interval"], 5);
    assert_eq!(s["thresholds"]["summary_interval"], 46);
    assert_eq!(s["thresholds"]["set_by"], 1086);
    assert_eq!(s["retrieval"]["strategy"], "vector");
    // Graph stats from the state's compact fold equal the full graph's.
    let g = &pmm.run("pmm-graph", &["stats"], "").records()[0];
    assert_eq!(
        (s["graph"]["nodes"].as_u64(), s["graph"]["edges"].as_u64()),
        (Some(139), Some(53))
    );
    assert_eq!(s["graph"]["nodes"], g["nodes"]);
    assert_eq!(s["graph"]["edges"], g["edges"]);
    assert_eq!(s["graph"]["counts_by_kind"], g["counts_by_kind"]);
    // Before the first rule table change: the defaults.
    let early = &pmm
        .run("pmm-replay", &["--state", "--at", "3"], "")
        .records()[0];
    assert_eq!(early["thresholds"]["reflection_interval"], 10);
    assert_eq!(early["last_event_id"], 3);
    // The commitment opened at 105 is open at 140 (closed by the kernel at 146).
    let mid = &pmm
        .run("pmm-replay", &["--state", "--at", "140"], "")
        .records()[0];
    let open = mid["open_commitments"].as_array().unwrap();
    assert!(
        open.iter()
            .any(|c| c["cid"] == "e86ccfd1" && c["opened_at"] == 105),
        "{mid}"
    );
    // The state's self-model just before a summary_update is the snapshot the reference
    // stored in it (tests/it/rsm.rs checks all 15 in the library's fold).
    let last = &pmm
        .run(
            "pmm-replay",
            &["--kind", "summary_update", "--tail", "1"],
            "",
        )
        .records()[0];
    let id = last["id"].as_i64().unwrap();
    let before = &pmm
        .run(
            "pmm-replay",
            &["--state", "--at", &(id - 1).to_string()],
            "",
        )
        .records()[0];
    assert_eq!(
        before["rsm"], last["meta"]["rsm_state"],
        "summary_update {id}"
    );
}

#[test]
fn state_bad_input_is_a_clear_error() {
    let pmm = Pmm::new();
    pmm.seed(3);
    for at in ["0", "4", "-1"] {
        let r = pmm.run("pmm-replay", &["--state", "--at", at], "");
        r.assert_error("pmm-replay", &["--at", "events 1..3"]);
    }
    let r = pmm.run("pmm-replay", &["--db", "missing.db", "--state"], "");
    r.assert_error("pmm-replay", &["missing.db", "no such ledger"]);
    assert!(!pmm.path("missing.db").exists());
    std::fs::write(pmm.path("notes.txt"), "hello\n").unwrap();
    let r = pmm.run("pmm-replay", &["--db", "notes.txt"], "");
    r.assert_error("pmm-replay", &["notes.txt"]);
}

fn spawn_follow(pmm: &Pmm, extra: &[&str]) -> std::process::Child {
    Command::new(assert_cmd::cargo::cargo_bin("pmm-replay"))
        .args(["--follow"])
        .args(extra)
        .env("PMM_DB", &pmm.db)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn follow_sees_events_appended_by_another_process() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let mut child = spawn_follow(&pmm, &["--tail", "0"]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "late news"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let line = lines.next().unwrap().unwrap();
    let ev: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (ev["id"].as_i64(), ev["content"].as_str()),
        (Some(3), Some("late news"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "seen within a second or so"
    );
    // SIGTERM ends it cleanly.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn follow_ends_quietly_when_the_reader_goes_away() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let mut child = spawn_follow(&pmm, &[]);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains("\"id\":1"), "{first}");
    drop(out); // like `| head -1`: the pipe closes while no new event arrives
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "--follow did not notice the closed pipe"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(err, "", "quiet");
}

fn seed_many(pmm: &Pmm, n: usize) {
    let mut lines = String::new();
    for i in 0..n {
        lines.push_str(&format!(
            "{{\"kind\":\"commitment_open\",\"content\":\"Commitment opened: t{i}\",\"meta\":{{\"cid\":\"c{i:07}\",\"text\":\"t{i}\",\"source\":\"assistant\"}}}}\n"
        ));
        if i % 3 == 0 {
            lines.push_str(&format!(
                "{{\"kind\":\"commitment_close\",\"content\":\"Commitment closed: c{i:07}\",\"meta\":{{\"cid\":\"c{i:07}\"}}}}\n"
            ));
        }
    }
    assert_eq!(pmm.run("pmm-append", &["--batch"], &lines).code, 0);
}

fn check_fast(pmm: &Pmm) -> serde_json::Value {
    let r = pmm.run("pmm-replay", &["--check-fast"], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()[0].clone()
}

#[test]
fn state_uses_a_checkpoint_and_equals_a_full_rebuild() {
    let pmm = Pmm::new();
    seed_many(&pmm, 900); // 1,200 events: enough for --state to save a checkpoint
    let first = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(first.code, 0, "{first:?}");
    let c = check_fast(&pmm);
    assert_eq!(
        (c["checkpoint_at"].as_i64(), c["identical"].as_bool()),
        (Some(1200), Some(true)),
        "{c}"
    );
    // New events after the checkpoint: folded on top of it, same answer as from scratch.
    seed_many(&pmm, 4);
    let c = check_fast(&pmm);
    assert_eq!(c["checkpoint_at"], 1200);
    assert_eq!(c["folded_after_checkpoint"], 6);
    assert_eq!(c["identical"], true);
    let s = &pmm.run("pmm-replay", &["--state"], "").records()[0];
    assert_eq!(s["last_event_id"], 1206);
    // --at before the checkpoint does not use it.
    let early = &pmm
        .run("pmm-replay", &["--state", "--at", "10"], "")
        .records()[0];
    assert_eq!(early["last_event_id"], 10);
}

#[test]
fn stale_or_corrupt_checkpoints_are_ignored() {
    let pmm = Pmm::new();
    seed_many(&pmm, 900);
    let good = pmm.run("pmm-replay", &["--state"], "").stdout;
    let db = rusqlite::Connection::open(&pmm.db).unwrap();
    // A checkpoint that claims another hash for its event: it does not match the ledger.
    db.execute("UPDATE pmm_checkpoints SET event_hash = 'x'", [])
        .unwrap();
    let c = check_fast(&pmm);
    assert!(c["checkpoint_at"].is_null(), "{c}");
    assert_eq!(pmm.run("pmm-replay", &["--state"], "").stdout, good);
    // A checkpoint whose state cannot be read: a cache miss, not an error.
    db.execute("UPDATE pmm_checkpoints SET state = x'00ff'", [])
        .unwrap();
    assert_eq!(pmm.run("pmm-replay", &["--state"], "").stdout, good);
}

#[test]
fn readers_that_cannot_write_still_work() {
    let pmm = Pmm::new();
    seed_many(&pmm, 900);
    let mut perms = std::fs::metadata(&pmm.db).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&pmm.db, perms).unwrap();
    let r = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["last_event_id"], 1200);
    let db = rusqlite::Connection::open(&pmm.db).unwrap();
    let n: i64 = db
        .query_row("SELECT COUNT(*) FROM pmm_checkpoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "a read-only ledger gets no checkpoint");
}

#[test]
fn a_checkpoint_keeps_json_values_and_optional_fields_exactly() {
    use pmm::event::Event;
    use pmm::projection::state::Projections;
    let ev = |id: i64, kind: &str, content: &str, meta: &str| Event {
        id,
        ts: String::new(),
        kind: kind.into(),
        content: content.into(),
        meta: meta.into(),
        prev_hash: None,
        hash: Some(format!("{id:064x}")),
    };
    // Numbers a float or i64 would not keep (serde_json's arbitrary precision holds their text).
    let retrieval = r#"{"type":"retrieval","limit":3,"w":0.1,"x":2.50,"neg":-0.0,
        "big":123456789012345678901234567890,"tiny":1e-400,"huge":1E400,
        "nested":{"list":[1,null,true,"é\u0000"]}}"#;
    let define = r#"{"token":"topic.a","concept_kind":"topic","definition":"d",
        "attributes":{"w":0.30000000000000004,"n":[1,2]},"version":1.0}"#;
    let events = [
        ev(1, "config", retrieval, "{}"),
        ev(2, "commitment_open", "", r#"{"cid":"c1","text":"do x"}"#),
        ev(3, "commitment_open", "", r#"{"cid":"c2","text":"do y"}"#),
        ev(4, "commitment_close", "", r#"{"cid":"c1","reason":"done"}"#),
        ev(5, "concept_define", define, "{}"),
        ev(6, "reflection", r#"{"intent":"check"}"#, "{}"),
        ev(7, "assistant_message", "ok\nCOMMIT: do y", "{}"),
        ev(8, "commitment_open", "", r#"{"cid":"c3","text":"do y"}"#),
        ev(9, "commitment_close", "", r#"{"cid":"c2"}"#),
    ];
    let (mut head, mut full) = (Projections::default(), Projections::default());
    for e in &events[..6] {
        head.apply(e);
    }
    for e in &events {
        full.apply(e);
    }
    let mut restored = Projections::from_checkpoint(&head.to_checkpoint()).expect("reads back");
    assert_eq!(restored, head);
    assert_eq!(
        restored.mirror.retrieval.as_ref().map(|v| v.to_string()),
        head.mirror.retrieval.as_ref().map(|v| v.to_string())
    );
    for e in &events[6..] {
        restored.apply(e);
    }
    assert_eq!(restored, full);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    restored.state_record().write_json(&mut a).unwrap();
    full.state_record().write_json(&mut b).unwrap();
    assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
    // A checkpoint of the old JSON format is not read as this one.
    assert!(Projections::from_checkpoint(&serde_json::to_vec(&head).unwrap()).is_none());
}

mod cut_points {
    use crate::harness::{fixture_path, GPT_LEDGER};
    use pmm::event::Event;
    use pmm::projection::state::Projections;
    use proptest::prelude::*;

    fn fixture_events() -> Option<Vec<Event>> {
        let path = fixture_path(GPT_LEDGER)?;
        let rows: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        Some(
            rows.into_iter()
                .map(|r| Event {
                    id: r["id"].as_i64().unwrap(),
                    ts: r["ts"].as_str().unwrap().into(),
                    kind: r["kind"].as_str().unwrap().into(),
                    content: r["content"].as_str().unwrap().into(),
                    meta: r["meta"].as_str().unwrap().into(),
                    prev_hash: r["prev_hash"].as_str().map(Into::into),
                    hash: r["hash"].as_str().map(Into::into),
                })
                .collect(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        #[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
        fn state_from_a_checkpoint_equals_a_full_rebuild(cut in 0usize..1199) {
            let Some(events) = fixture_events() else { return Ok(()) };
            let mut full = Projections::default();
            for e in &events { full.apply(e); }
            let mut head = Projections::default();
            for e in &events[..cut] { head.apply(e); }
            let saved = head.to_checkpoint();
            let mut resumed = Projections::from_checkpoint(&saved).expect("checkpoint reads back");
            prop_assert_eq!(&resumed, &head);
            for e in &events[cut..] { resumed.apply(e); }
            prop_assert_eq!(&resumed, &full);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            resumed.state_record().write_json(&mut a).unwrap();
            full.state_record().write_json(&mut b).unwrap();
            prop_assert_eq!(a, b);
        }
    }
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn diff_reports_what_changed_in_the_self_model() {
    let Some(pmm) = Pmm::with_reference_ledger() else {
        return;
    };
    let r = pmm.run("pmm-replay", &["--diff", "100", "1199"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let d = &r.records()[0];
    assert_eq!(
        (d["type"].as_str(), d["from"].as_i64(), d["to"].as_i64()),
        (Some("rsm_diff"), Some(100), Some(1199))
    );
    // Between them the self-model learned about determinism (FORMATS.md: 15 at the end).
    let a = &pmm
        .run("pmm-replay", &["--state", "--at", "100"], "")
        .records()[0]["rsm"]["behavioral_tendencies"];
    let b = &pmm.run("pmm-replay", &["--state"], "").records()[0]["rsm"]["behavioral_tendencies"];
    let delta = |k: &str| b[k].as_i64().unwrap_or(0) - a[k].as_i64().unwrap_or(0);
    assert_eq!(
        d["tendencies_delta"]["determinism_emphasis"].as_i64(),
        Some(delta("determinism_emphasis"))
    );
    assert_ne!(delta("determinism_emphasis"), 0);
    let r = pmm.run("pmm-replay", &["--diff", "1", "5000"], "");
    r.assert_error("pmm-replay", &["--diff", "5000"]);
}

/// Issue 21 item 4: `pmm-replay --state` on a reference-format file (rollback journal, no
/// pmm tables) leaves it byte for byte as it was; on a pmm ledger it may save its cache.
#[test]
fn a_reader_never_changes_a_reference_format_file() {
    let pmm = Pmm::new();
    pmm.seed(1_200);
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute_batch(
        "DROP TABLE pmm_checkpoints; DROP TABLE pmm_fts; DROP TABLE pmm_fts_state;
         DROP VIEW pmm_recallable; PRAGMA user_version = 0; PRAGMA journal_mode = DELETE;",
    )
    .unwrap();
    drop(conn);
    let before = std::fs::read(&pmm.db).unwrap();
    let r = pmm.run("pmm-replay", &["--state"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read(&pmm.db).unwrap(),
        before,
        "the reader changed the file"
    );
    let wal = pmm.path("ledger.db-wal");
    assert!(!wal.exists(), "the reader switched the file to WAL");
    // A ledger a pmm writer made keeps getting its checkpoint from readers.
    let ours = Pmm::new();
    ours.seed(1_200);
    assert_eq!(ours.run("pmm-replay", &["--state"], "").code, 0);
    let conn = rusqlite::Connection::open(&ours.db).unwrap();
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM pmm_checkpoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
}
