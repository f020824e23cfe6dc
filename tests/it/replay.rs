//! pmm-replay: event streams, state, follow.

use crate::harness::{fixture_path, Pmm, GPT_LEDGER};
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
fn state_on_the_reference_ledger_is_deterministic() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    assert_eq!(
        pmm.run(
            "pmm-append",
            &["--import", src.to_str().unwrap(), "--accept-forks"],
            ""
        )
        .code,
        0
    );
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
