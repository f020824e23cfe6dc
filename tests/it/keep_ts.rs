//! `pmm-append --keep-ts`: each line's `ts` becomes the event's time; times never go backwards;
//! a missing, bad or backwards time is exit 2 naming its line, and nothing is written.

use crate::harness::Pmm;

fn line(ts: &str, kind: &str, content: &str) -> String {
    format!("{{\"ts\":\"{ts}\",\"kind\":\"{kind}\",\"content\":\"{content}\",\"meta\":{{}}}}\n")
}

fn conversation() -> String {
    [
        line("2023-05-08T13:56:00Z", "user_message", "Alice: hi"),
        line("2023-05-08T13:56:01Z", "assistant_message", "Bob: hello"),
        // An offset is converted to UTC; an equal time is not backwards.
        line(
            "2023-05-08T15:56:01+02:00",
            "user_message",
            "Alice: same second",
        ),
        line(
            "2023-05-25T13:14:00.5Z",
            "user_message",
            "Alice: weeks later",
        ),
    ]
    .concat()
}

#[test]
fn keep_ts_keeps_each_lines_time_and_verifies() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm-append", &["--keep-ts"], &conversation());
    assert_eq!(r.code, 0, "{r:?}");
    let ts: Vec<String> = r
        .records()
        .iter()
        .map(|e| e["ts"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ts,
        [
            "2023-05-08T13:56:00.000000Z",
            "2023-05-08T13:56:01.000000Z",
            "2023-05-08T13:56:01.000000Z",
            "2023-05-25T13:14:00.500000Z",
        ]
    );
    // Stored as printed (not the pinned clock of the harness).
    let replay = pmm.run("pmm-replay", &[], "");
    assert_eq!(replay.code, 0, "{replay:?}");
    let stored: Vec<String> = replay
        .records()
        .iter()
        .map(|e| e["ts"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(stored, ts);
    // With --batch too, continuing the ledger at a later time.
    let more = line("2023-06-01T09:00:00Z", "assistant_message", "Bob: June");
    let r = pmm.run("pmm-append", &["--keep-ts", "--batch"], &more);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["ts"], "2023-06-01T09:00:00.000000Z");
    let v = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.summary()["ok"], true);
    assert_eq!(v.summary()["events"], 5);
}

#[test]
fn keep_ts_backwards_between_lines_writes_nothing() {
    let pmm = Pmm::new();
    let input = [
        line("2023-05-08T13:56:00Z", "user_message", "a"),
        line("2023-05-08T13:56:02Z", "user_message", "b"),
        line("2023-05-08T13:56:01Z", "user_message", "c"),
    ]
    .concat();
    for args in [&["--keep-ts"][..], &["--keep-ts", "--batch"]] {
        let r = pmm.run("pmm-append", args, &input);
        r.assert_error("pmm-append", &["<stdin>:3", "backwards"]);
        assert!(r.stdout.is_empty(), "{r:?}");
        // A ledger this run created and left empty is removed again.
        assert!(!pmm.db.exists());
    }
}

#[test]
fn keep_ts_before_the_ledgers_head_writes_nothing() {
    let pmm = Pmm::new();
    let first = line("2023-05-08T13:56:00Z", "user_message", "a");
    assert_eq!(pmm.run("pmm-append", &["--keep-ts"], &first).code, 0);
    let input = [
        line("2023-05-08T13:55:59Z", "user_message", "b"),
        line("2023-05-08T13:57:00Z", "user_message", "c"),
    ]
    .concat();
    let r = pmm.run("pmm-append", &["--keep-ts"], &input);
    r.assert_error("pmm-append", &["<stdin>:1", "head", "event 1"]);
    assert!(r.stdout.is_empty(), "{r:?}");
    assert_eq!(pmm.count(), 1);
}

#[test]
fn keep_ts_missing_or_bad_time_names_its_line_and_writes_nothing() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let good = line("2030-01-01T00:00:00Z", "user_message", "ok");
    let cases: [(&str, &[&str]); 4] = [
        (
            "{\"kind\":\"user_message\",\"content\":\"no time\"}\n",
            &["<stdin>:3", "missing \"ts\""],
        ),
        (
            "{\"ts\":\"1:56 pm on 8 May, 2023\",\"kind\":\"user_message\",\"content\":\"x\"}\n",
            &["<stdin>:3", "1:56 pm on 8 May, 2023", "RFC 3339"],
        ),
        (
            "{\"ts\":\"2030-02-30T00:00:00Z\",\"kind\":\"user_message\",\"content\":\"x\"}\n",
            &["<stdin>:3", "RFC 3339"],
        ),
        (
            "{\"ts\":1683554160,\"kind\":\"user_message\",\"content\":\"x\"}\n",
            &["<stdin>:3", "\"ts\" must be", "number"],
        ),
    ];
    for (bad, needles) in cases {
        // Two good lines, then the bad one, then another good one: nothing is written.
        let input = format!("{good}{good}{bad}{good}");
        let r = pmm.run("pmm-append", &["--keep-ts"], &input);
        r.assert_error("pmm-append", needles);
        assert!(r.stdout.is_empty(), "{r:?}");
        assert_eq!(pmm.count(), 2, "{bad}");
    }
    // A bad event (not its time) is named the same way, and nothing is written either.
    let input =
        format!("{good}{{\"ts\":\"2030-01-01T00:00:00Z\",\"kind\":\"rm_rf\",\"content\":\"x\"}}\n");
    pmm.run("pmm-append", &["--keep-ts"], &input)
        .assert_error("pmm-append", &["<stdin>:2", "unknown kind 'rm_rf'"]);
    assert_eq!(pmm.count(), 2);
}

#[test]
fn keep_ts_conflicts_with_kind_and_import() {
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-append",
        &["--keep-ts", "--kind", "user_message", "--content", "x"],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    let r = pmm.run("pmm-append", &["--keep-ts", "--import", "x.json"], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!pmm.db.exists());
}
