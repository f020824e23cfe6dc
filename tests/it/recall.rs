//! Whole-ledger recall: `pmm-recall`, the full-text index kept with every write, and turns
//! that recall what was said long ago.

use crate::harness::Pmm;
use serde_json::Value;

/// A small conversation with a few facts worth recalling.
fn conversation(pmm: &Pmm) {
    let lines = [
        (
            "user_message",
            "Alice: I painted a lake at sunrise last weekend.",
        ),
        (
            "assistant_message",
            "Bob: Lovely! What colours did you use?",
        ),
        (
            "user_message",
            "Alice: Mostly teal and orange, on a big canvas.",
        ),
        (
            "assistant_message",
            "Bob: My sister adopted a beagle named Pepper.",
        ),
        (
            "user_message",
            "Alice: I am training for a marathon in Lisbon.",
        ),
        ("assistant_message", "Bob: Good luck with the running!"),
    ];
    let text: String = lines
        .iter()
        .map(|(k, c)| format!("{{\"kind\":\"{k}\",\"content\":\"{c}\"}}\n"))
        .collect();
    let r = pmm.run("pmm-append", &["--batch"], &text);
    assert_eq!(r.code, 0, "{r:?}");
}

fn ids(r: &crate::harness::Run) -> Vec<i64> {
    r.records()
        .iter()
        .filter_map(|e| e["id"].as_i64())
        .collect()
}

#[test]
fn recall_finds_a_fact_and_its_neighbours_with_reasons() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let r = pmm.run("pmm-recall", &["what did Alice paint?"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let recs = r.records();
    assert_eq!(recs[0]["id"], 1, "{recs:?}");
    assert_eq!(recs[0]["via"][0], "fts");
    for key in ["id", "ts", "kind", "content", "score", "via"] {
        assert!(recs[0].get(key).is_some(), "{key} missing: {}", recs[0]);
    }
    // The reply after the match comes with it.
    let two = recs.iter().find(|e| e["id"] == 2).expect("the neighbour");
    assert!(two["via"]
        .as_array()
        .unwrap()
        .contains(&Value::from("neighbour-of:1")));
    // --k and --kind narrow it.
    let r = pmm.run(
        "pmm-recall",
        &["--k", "1", "--kind", "assistant_message", "beagle"],
        "",
    );
    assert_eq!(ids(&r), [4]);
    // A budget smaller than any event returns nothing, and says nothing.
    let r = pmm.run("pmm-recall", &["--budget", "5", "beagle"], "");
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
}

#[test]
fn lines_answers_each_line_as_its_own_recall() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let one = |q: &str| pmm.run("pmm-recall", &["--k", "2", q], "");
    let r = pmm.run(
        "pmm-recall",
        &["--lines", "--k", "2"],
        "what did Alice paint?\n\n  \nbeagle\r\nmarathon",
    );
    assert_eq!(r.code, 0, "{r:?}");
    // Each line's records are the single recall's, in order, with its line number; blank
    // lines give nothing but keep their numbers; a CRLF ending and a last line without a
    // newline are read as lines.
    let mut expected = Vec::new();
    for (line, q) in [(1, "what did Alice paint?"), (4, "beagle"), (5, "marathon")] {
        for mut rec in one(q).records() {
            rec["line"] = line.into();
            expected.push(rec);
        }
    }
    assert_eq!(r.records(), expected);
    assert!(r.records().len() >= 3, "{r:?}");
    // A line that is not UTF-8 is bad input, named by its line.
    let mut cmd = pmm.std_cmd("pmm-recall");
    let out = cmd
        .args(["--lines"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"teal\n\xff\xfe\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stdin:2") && err.contains("UTF-8"), "{err}");
    // --lines takes no TEXT.
    let r = pmm.run("pmm-recall", &["--lines", "teal"], "");
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn hostile_query_text_is_never_fts5_syntax() {
    let pmm = Pmm::new();
    conversation(&pmm);
    // The largest single argument Linux passes (MAX_ARG_STRLEN is 128 KiB).
    let big = "lisbon ".repeat(18_000);
    for q in [
        "\"unbalanced",
        "NEAR(teal orange) OR -canvas AND body:lake",
        "pai* ^teal {body}: teal",
        "the of and what is",
        // (A NUL cannot be an argument; `recall::terms` tests it as a separator.)
        "a\u{1}teal",
        ")))(((",
        big.as_str(),
    ] {
        let r = pmm.run("pmm-recall", &["--", q], "");
        assert_eq!(r.code, 0, "{q:.60}: {r:?}");
        assert!(r.stderr.is_empty(), "{q:.60}: {}", r.stderr);
    }
    // Operators are words: "OR" does not widen a query into everything.
    let r = pmm.run("pmm-recall", &["NEAR OR AND NOT"], "");
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    let r = pmm.run("pmm-recall", &["NEAR(teal orange)"], "");
    assert_eq!(ids(&r)[0], 3);
    // No text at all is bad input.
    for q in ["", "   "] {
        let r = pmm.run("pmm-recall", &[q], "");
        r.assert_error("pmm-recall", &["text to recall"]);
    }
}

#[test]
fn invalid_utf8_in_stored_content_is_recalled_without_error() {
    let pmm = Pmm::new();
    conversation(&pmm);
    // Another program wrote bytes that are not UTF-8 into a message (the file is SQLite; we
    // cannot stop it); the next writer indexes it, and recall still answers.
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute(
        "INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES (7, 'x', 'user_message', CAST(X'6d61726174686f6e20fffe' AS TEXT), '{}', NULL, NULL)",
        [],
    )
    .unwrap();
    drop(conn);
    let r = pmm.run("pmm-recall", &["marathon"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(ids(&r).contains(&7), "{r:?}");
}

#[test]
fn reindex_rebuilds_the_same_index_and_check_finds_damage() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let before = pmm.run("pmm-recall", &["teal canvas running"], "");
    let r = pmm.run("pmm-recall", &["--check"], "");
    assert_eq!(r.code, 0, "{r:?}");
    // Damage: the index loses an event's tokens.
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute(
        "INSERT INTO pmm_fts (pmm_fts, rowid, body) VALUES ('delete', 3, (SELECT content FROM events WHERE id = 3))",
        [],
    )
    .unwrap();
    drop(conn);
    let r = pmm.run("pmm-recall", &["--check"], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(!r.of_type("finding").is_empty(), "{r:?}");
    let r = pmm.run("pmm-recall", &["--reindex"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["events"], 6);
    assert_eq!(pmm.run("pmm-recall", &["--check"], "").code, 0);
    let after = pmm.run("pmm-recall", &["teal canvas running"], "");
    assert_eq!(before.stdout, after.stdout);
}

#[test]
fn two_ledgers_with_the_same_events_recall_byte_identically() {
    let a = Pmm::new();
    let b = Pmm::new();
    conversation(&a);
    conversation(&b);
    // b's index is built later, in one go, by a rebuild.
    assert_eq!(b.run("pmm-recall", &["--reindex"], "").code, 0);
    for q in ["teal", "what did Alice paint at sunrise", "marathon beagle"] {
        let ra = a.run("pmm-recall", &["--explain", q], "");
        let rb = b.run("pmm-recall", &["--explain", q], "");
        assert_eq!(ra.code, 0);
        assert_eq!(ra.stdout, rb.stdout, "{q}");
    }
}

#[test]
fn a_read_only_ledger_without_an_index_is_indexed_in_memory() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let indexed = pmm.run("pmm-recall", &["beagle Pepper"], "");
    // Drop the index as a reference ledger would not have it, then make the file read-only.
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute_batch(
        "DROP TABLE pmm_fts; DROP TABLE pmm_fts_state; DROP VIEW pmm_recallable; PRAGMA journal_mode=DELETE;",
    )
    .unwrap();
    drop(conn);
    let before = std::fs::read(&pmm.db).unwrap();
    let mut perm = std::fs::metadata(&pmm.db).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&pmm.db, perm).unwrap();
    let r = pmm.run("pmm-recall", &["beagle Pepper"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(ids(&r), ids(&indexed));
    assert_eq!(
        std::fs::read(&pmm.db).unwrap(),
        before,
        "a reader changed the file"
    );
}

#[test]
fn a_writer_catches_up_events_another_program_appended() {
    let pmm = Pmm::new();
    conversation(&pmm);
    // The reference implementation appends without knowing the index.
    let conn = rusqlite::Connection::open(&pmm.db).unwrap();
    conn.execute(
        "INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES (7, 'x', 'user_message', 'Alice: the kayak is yellow', '{}', NULL, NULL)",
        [],
    )
    .unwrap();
    drop(conn);
    let r = pmm.run("pmm-recall", &["--check"], "");
    assert_eq!(r.code, 1, "the index lags: {r:?}");
    // A reader still finds it (indexed in memory) …
    assert_eq!(ids(&pmm.run("pmm-recall", &["kayak"], ""))[0], 7);
    // … and the next write brings the index up to date in its own transaction.
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "hello"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(pmm.run("pmm-recall", &["--check"], "").code, 0);
}

/// A turn asked about something said 10^5 events earlier has it in its prompt.
#[test]
fn a_turn_recalls_what_was_said_a_hundred_thousand_events_ago() {
    let pmm = Pmm::new();
    let mut lines = String::with_capacity(100_000 * 70);
    lines.push_str(
        "{\"kind\":\"user_message\",\"content\":\"My grandmother's necklace came from Sweden.\"}\n",
    );
    for i in 0..100_000 {
        let kind = [
            "user_message",
            "assistant_message",
            "reflection",
            "metrics_turn",
        ][i % 4];
        lines.push_str(&format!(
            "{{\"kind\":\"{kind}\",\"content\":\"routine note {i} about the weather and lunch\"}}\n"
        ));
    }
    let r = pmm.run("pmm-append", &["--batch", "--quiet"], &lines);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let prompt = pmm.path("prompt.json");
    let command = format!("cat > '{}'; echo ok", prompt.display());
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "cmd",
            "--command",
            &command,
            "Where did my grandmother's necklace come from?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let sent: Value = serde_json::from_slice(&std::fs::read(&prompt).unwrap()).unwrap();
    let system = sent["system"].as_str().unwrap();
    assert!(
        system.contains("[1] ") && system.contains("necklace came from Sweden"),
        "{system:.2000}"
    );
    // The selection is recorded with its sources.
    let sel = pmm
        .run(
            "pmm-replay",
            &["--kind", "retrieval_selection", "--tail", "1"],
            "",
        )
        .records();
    let content: Value = serde_json::from_str(sel[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["strategy"], "hybrid");
    assert_eq!(content["selected"][0], 1);
    assert_eq!(content["via"][0][0], "fts");
}

/// The newest exchanges are always in the prompt, as chat messages in order.
#[test]
fn the_previous_exchanges_are_in_every_prompt() {
    let pmm = Pmm::new();
    let prompt = pmm.path("prompt.json");
    let command = format!("cat > '{}'; echo ok", prompt.display());
    let turn = |text: &str| {
        let r = pmm.run(
            "pmm-turn",
            &["--adapter", "cmd", "--command", &command, text],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        serde_json::from_slice::<Value>(&std::fs::read(&prompt).unwrap()).unwrap()
    };
    for i in 1..=4 {
        turn(&format!("statement number {i}"));
    }
    turn("My favourite colour is teal.");
    let sent = turn("What did I just tell you?");
    let messages = sent["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user"
        ]
    );
    assert_eq!(messages[5]["content"], "My favourite colour is teal.");
    assert_eq!(messages[7]["content"], "What did I just tell you?");
    assert_eq!(messages[1]["content"], "statement number 3");
}

/// A diary told over several days: the same words every day, so only the date can tell
/// which day a question means.
fn diary(pmm: &Pmm) {
    let days = [
        ("2022-07-02", "I went hiking with my sister"),
        ("2022-07-06", "I went hiking near the lake"),
        (
            "2022-07-10",
            "Yesterday I went hiking in the hills above the town",
        ),
        ("2022-07-20", "I went hiking again with friends"),
        ("2022-08-20", "I went hiking in the rain"),
    ];
    let text: String = days
        .iter()
        .flat_map(|(day, said)| {
            [
                format!("{{\"ts\":\"{day}T10:00:00Z\",\"kind\":\"user_message\",\"content\":\"Alice: {said}.\",\"meta\":{{}}}}\n"),
                format!("{{\"ts\":\"{day}T10:00:05Z\",\"kind\":\"assistant_message\",\"content\":\"Bob: Sounds like fun!\",\"meta\":{{}}}}\n"),
            ]
        })
        .collect();
    let r = pmm.run("pmm-append", &["--keep-ts", "--batch"], &text);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_date_in_the_question_lifts_what_was_told_then() {
    let pmm = Pmm::new();
    diary(&pmm);
    let top = |q: &str| {
        let r = pmm.run("pmm-recall", &["--k", "1", q], "");
        assert_eq!(r.code, 0, "{r:?}");
        r.records()[0].clone()
    };
    // Told the day after: within the window of the named day.
    let e = top("Where did Alice go hiking on 9 July, 2022?");
    assert_eq!(e["id"], 5, "{e}");
    assert!(
        e["via"]
            .as_array()
            .unwrap()
            .contains(&"when:2022-07-09".into()),
        "{e}"
    );
    let e = top("Where did Alice go hiking in August 2022?");
    assert_eq!(e["id"], 9, "{e}");
    assert!(
        e["via"]
            .as_array()
            .unwrap()
            .contains(&"when:2022-08-01..2022-08-31".into()),
        "{e}"
    );
    // Relative dates count from the newest event (2022-08-20).
    let e = top("where did Alice go hiking yesterday");
    assert_eq!(e["id"], 9, "{e}");
    // Without a date, no time reason and no lift: the plain full-text order.
    assert_no_reason(&pmm, "where did Alice go hiking", "when:");
}

/// Asserts that no event recalled for `query` has a reason containing `reason`.
fn assert_no_reason(pmm: &Pmm, query: &str, reason: &str) {
    let r = pmm.run("pmm-recall", &[query], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.records()
            .iter()
            .all(|e| !e["via"].to_string().contains(reason)),
        "{query}: {r:?}"
    );
}

#[test]
fn a_named_speakers_own_messages_come_first() {
    let pmm = Pmm::new();
    let lines = [
        (
            "user_message",
            "Alice: I walk my dog Rex on the beach every morning.",
        ),
        (
            "assistant_message",
            "Bob: Max and I go to the park after work.",
        ),
        (
            "user_message",
            "Alice: Bob, you should walk Max on the beach too!",
        ),
        ("assistant_message", "Bob: Maybe one day."),
        ("user_message", "Note: the beach is closed on Mondays."),
    ];
    let text: String = lines
        .iter()
        .map(|(k, c)| format!("{{\"kind\":\"{k}\",\"content\":\"{c}\"}}\n"))
        .collect();
    assert_eq!(pmm.run("pmm-append", &["--batch"], &text).code, 0);
    // Full text alone puts Alice's words first (they share "walk" and "dog" with the
    // question); the question names Bob, whose own message about it counts twice.
    for q in [
        "Where does Bob walk his dog?",
        "where does bob walk his dog",
    ] {
        let r = pmm.run("pmm-recall", &[q], "");
        assert_eq!(r.code, 0, "{r:?}");
        let recs = r.records();
        assert_eq!(recs[0]["id"], 2, "{q}: {recs:?}");
        assert!(
            recs[0]["via"]
                .as_array()
                .unwrap()
                .contains(&"speaker:Bob".into()),
            "{q}: {recs:?}"
        );
        // A message that names Bob but is Alice's is not his.
        let three = recs.iter().find(|e| e["id"] == 3).expect("Alice's mention");
        assert!(!three["via"].to_string().contains("speaker:"), "{three}");
    }
    // A question that names no speaker lifts nothing.
    assert_no_reason(&pmm, "who walks a dog on the beach?", "speaker:");
}
