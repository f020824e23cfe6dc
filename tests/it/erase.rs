//! Erasure that keeps verification (issue 18 item 4): `pmm-append --erase` removes an event's
//! text from the ledger, its derived tables and the file's bytes; `pmm-verify` reports it as
//! `erased`, the chain and Merkle proofs still hold around it, and a content change without an
//! erasure is still a mismatch.

use crate::harness::{Pmm, Run};
use serde_json::Value;

const SECRET: &str = "my locker code is 4417 and it opens the blue door by the gym";

/// Appends one event with `pmm-append --kind --content --meta`.
fn append(pmm: &Pmm, kind: &str, content: &str, meta: &str) {
    let r = pmm.run(
        "pmm-append",
        &["--kind", kind, "--content", content, "--meta", meta],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

/// A ledger where event 2 is the secret message, 4 a lifetime-memory chunk quoting it and 6 a
/// reflection quoting it; 8 events in all.
fn ledger() -> Pmm {
    let pmm = Pmm::new();
    append(&pmm, "user_message", "hello there", r#"{"role":"user"}"#);
    append(&pmm, "user_message", SECRET, r#"{"role":"user"}"#);
    append(
        &pmm,
        "assistant_message",
        "Noted.",
        r#"{"role":"assistant"}"#,
    );
    let chunk = format!("Span 1..3 (3 events)\nMessages:\n- [1] user: hello there\n- [2] user: {SECRET}\n- [3] assistant: Noted.");
    append(
        &pmm,
        "lifetime_memory",
        &chunk,
        r#"{"covered_until":3,"sample_ids":[1,2,3],"span_end":3,"span_start":1,"summary_kind":"lifetime_memory"}"#,
    );
    append(
        &pmm,
        "user_message",
        "what is the weather like",
        r#"{"role":"user"}"#,
    );
    append(&pmm, "reflection", &format!("They told me {SECRET}."), "{}");
    append(
        &pmm,
        "assistant_message",
        "Sunny.",
        r#"{"role":"assistant"}"#,
    );
    append(&pmm, "metrics_turn", "{}", "{}");
    pmm
}

fn erase(pmm: &Pmm, args: &[&str]) -> Run {
    let mut all = vec!["--erase"];
    all.extend_from_slice(args);
    pmm.run("pmm-append", &all, "")
}

fn root(pmm: &Pmm) -> String {
    let r = pmm.run("pmm-verify", &["--root"], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()[0]["root"].as_str().unwrap().to_string()
}

fn proof_verifies(pmm: &Pmm, id: i64, root: &str) {
    let r = pmm.run("pmm-verify", &["--prove", &id.to_string()], "");
    assert_eq!(r.code, 0, "{r:?}");
    let file = pmm.path(&format!("proof-{id}.json"));
    std::fs::write(&file, &r.stdout).unwrap();
    let file = file.to_str().unwrap();
    let c = pmm.run(
        "pmm-verify",
        &["--check-proof", file, "--root-hex", root],
        "",
    );
    assert_eq!(c.code, 0, "proof of {id}: {c:?}");
}

#[test]
fn erasing_a_quoted_message_with_its_quotes_keeps_verification() {
    let pmm = ledger();
    assert!(crate::harness::occurrences(&pmm, "4417") > 0);
    let before = root(&pmm);
    // Listed first, without --with-quotes... (a forbidden actor: nothing erased).
    let r = erase(&pmm, &["2", "--reason", "asked to forget"]);
    assert_eq!(r.code, 1, "cli is not trusted with erasure: {r:?}");
    assert_eq!(r.records()[0]["kind"], "violation");
    assert_eq!(r.records()[0]["content"], "policy_violation:cli:erasure");
    assert!(crate::harness::occurrences(&pmm, "4417") > 0);

    let r = erase(
        &pmm,
        &[
            "2",
            "--reason",
            "asked to forget",
            "--source",
            "owner",
            "--with-quotes",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let erasures: Vec<Value> = r
        .records()
        .into_iter()
        .filter(|e| e["kind"] == "erasure")
        .collect();
    let named: Vec<i64> = erasures
        .iter()
        .map(|e| e["meta"]["erased_id"].as_i64().unwrap())
        .collect();
    assert_eq!(named, [2, 4, 6]);
    let record = r.of_type("erasure").pop().unwrap();
    assert_eq!(record["erased"], serde_json::json!([2, 4, 6]));

    // Gone from recall, from the index and from the file's bytes (db and WAL).
    let recall = pmm.run("pmm-recall", &["locker code 4417"], "");
    assert_eq!(recall.code, 0, "{recall:?}");
    assert!(!recall.stdout.contains("4417"), "{}", recall.stdout);
    let check = pmm.run("pmm-recall", &["--check"], "");
    assert_eq!(check.code, 0, "{check:?}");
    assert_eq!(crate::harness::occurrences(&pmm, "4417"), 0);
    assert_eq!(crate::harness::occurrences(&pmm, "locker"), 0);

    // Exactly the erased events are erased; exit 0; deep says what it skipped.
    let v = pmm.run("pmm-verify", &["--deep"], "");
    assert_eq!(v.code, 0, "{v:?}");
    let erased: Vec<i64> = v
        .of_type("erased")
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(erased, [2, 4, 6]);
    assert!(v.findings().is_empty(), "{v:?}");
    assert_eq!(v.summary()["erased"], 3);

    // The tree is unchanged below the erasures: proofs of the erased events and their
    // neighbours verify, against the old root's size and the new root.
    let now = root(&pmm);
    for id in 1..=7 {
        proof_verifies(&pmm, id, &now);
    }
    let r = pmm.run("pmm-verify", &["--root", "--size", "8"], "");
    assert_eq!(r.records()[0]["root"], before.as_str());

    // Exports carry the erasure events that mark the erased ones, so a verifier of the
    // export says `erased` too.
    for name in ["x.json", "x.jsonl"] {
        let file = pmm.path(name);
        let file = file.to_str().unwrap();
        let x = pmm.run("pmm-export", &["-o", file], "");
        assert_eq!(x.code, 0, "{x:?}");
        assert!(!std::fs::read_to_string(file).unwrap().contains("4417"));
        let v = pmm.run("pmm-verify", &[file], "");
        assert_eq!(v.code, 0, "{name}: {v:?}");
        assert_eq!(v.of_type("erased").len(), 3, "{name}: {v:?}");
    }
}

#[test]
fn without_with_quotes_the_quoting_events_are_listed() {
    let pmm = ledger();
    // A message that repeats the text is not a quote of it (erase it by its own id).
    append(&pmm, "user_message", SECRET, r#"{"role":"user"}"#);
    let r = erase(&pmm, &["2", "--reason", "gdpr", "--source", "owner"]);
    assert_eq!(r.code, 0, "{r:?}");
    let record = r.of_type("erasure").pop().unwrap();
    assert_eq!(record["erased"], serde_json::json!([2]));
    assert_eq!(record["quoted_by"], serde_json::json!([4, 6]));
    let v = pmm.run("pmm-verify", &[], "");
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.of_type("erased").len(), 1);
}

#[test]
fn bad_ids_and_second_erasures_are_clear_errors() {
    let pmm = ledger();
    for (id, needle) in [("0", "no event 0"), ("99", "no event 99")] {
        let r = erase(&pmm, &[id, "--reason", "x", "--source", "owner"]);
        r.assert_error("pmm-append", &["--erase", needle]);
    }
    for bad in ["abc", "1.5", ""] {
        let r = erase(&pmm, &[bad, "--reason", "x", "--source", "owner"]);
        assert_eq!(r.code, 2, "{bad:?}: {r:?}");
    }
    let r = erase(&pmm, &["2", "--source", "owner"]);
    assert_eq!(r.code, 2, "a reason is required: {r:?}");
    let r = erase(&pmm, &["2", "--reason", "  ", "--source", "owner"]);
    r.assert_error("pmm-append", &["--reason", "empty"]);
    let n = pmm.count();
    let r = erase(&pmm, &["2", "--reason", "x", "--source", "owner"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = erase(&pmm, &["2", "--reason", "again", "--source", "owner"]);
    r.assert_error("pmm-append", &["event 2 is already erased (by event 9)"]);
    let r = erase(&pmm, &["9", "--reason", "x", "--source", "owner"]);
    r.assert_error("pmm-append", &["event 9 is an erasure"]);
    assert_eq!(pmm.count(), n + 1, "only the one erasure was written");
    // An erasure event cannot be appended by hand.
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "erasure",
            "--content",
            "x",
            "--meta",
            r#"{"erased_id":3}"#,
        ],
        "",
    );
    r.assert_error("pmm-append", &["pmm-append --erase"]);
}

#[test]
fn content_blanked_without_an_erasure_is_a_mismatch() {
    let pmm = ledger();
    let c = rusqlite::Connection::open(&pmm.db).unwrap();
    c.execute(
        "UPDATE events SET content = '', meta = '{}' WHERE id = 3",
        [],
    )
    .unwrap();
    drop(c);
    // Erasing another event does not cover it.
    let r = erase(&pmm, &["2", "--reason", "x", "--source", "owner"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = pmm.run("pmm-verify", &[], "");
    assert_eq!(v.code, 1, "{v:?}");
    assert_eq!(
        v.findings(),
        [(Value::from(3), "hash_mismatch".to_string())]
    );
    assert_eq!(v.of_type("erased").len(), 1);
}

/// What erasure does to past state (docs/verification.md, "Erasure"): an erased
/// `commitment_open` takes its commitment out of every state from the open on — never open,
/// never closed, its close closing nothing — and an erased `commitment_close` leaves its
/// commitment open from the close on; the states before the erased event are unchanged.
#[test]
fn an_erased_open_vanishes_from_past_states_and_an_erased_close_reopens() {
    let pmm = Pmm::new();
    for (kind, cid) in [
        ("commitment_open", "aaaa0001"),
        ("commitment_open", "bbbb0002"),
        ("commitment_close", "aaaa0001"),
        ("commitment_close", "bbbb0002"),
    ] {
        let meta =
            serde_json::json!({"cid": cid, "text": format!("task {cid}"), "source": "assistant"});
        append(&pmm, kind, &format!("{kind} {cid}"), &meta.to_string());
    }
    append(&pmm, "user_message", "and then?", r#"{"role":"user"}"#);
    let at = |n: i64| -> (Vec<String>, i64) {
        let r = pmm.run("pmm-replay", &["--state", "--at", &n.to_string()], "");
        assert_eq!(r.code, 0, "{r:?}");
        let s = &r.records()[0];
        let open = s["open_commitments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["cid"].as_str().unwrap().to_string())
            .collect();
        (open, s["closed_commitments"].as_i64().unwrap())
    };
    let ab = || vec!["aaaa0001".to_string(), "bbbb0002".to_string()];
    let b = || vec!["bbbb0002".to_string()];
    assert_eq!(at(2), (ab(), 0));
    assert_eq!(at(3), (b(), 1));
    assert_eq!(at(5), (vec![], 2));
    for id in ["1", "4"] {
        let r = erase(&pmm, &[id, "--reason", "forget it", "--source", "owner"]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    assert_eq!(at(1), (vec![], 0), "the erased open is open nowhere");
    assert_eq!(at(2), (b(), 0));
    assert_eq!(at(3), (b(), 0), "its close closes nothing");
    assert_eq!(at(4), (b(), 0), "the erased close leaves b open");
    assert_eq!(at(5), (b(), 0));
    let v = pmm.run("pmm-verify", &[], "");
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.of_type("erased").len(), 2);
}

/// Turns after an erased message cannot have their prompts rebuilt (the history or the recall
/// showed its text): `--deep` counts them as skipped for the erasure instead of reporting
/// forgeries, and still checks the turns before it.
#[test]
fn prompts_after_an_erased_message_are_skipped_not_forgeries() {
    let pmm = Pmm::new();
    for m in ["hello there", SECRET, "what did I tell you about the door"] {
        let r = pmm.run("pmm-turn", &["--adapter", "dummy", m], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    let users: Vec<i64> = pmm
        .run("pmm-replay", &["--kind", "user_message"], "")
        .records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    let before = pmm.run("pmm-verify", &["--deep"], "");
    assert_eq!(
        before.summary()["deep"]["prompts"]["checked"],
        3,
        "{before:?}"
    );
    assert_eq!(before.summary()["deep"]["prompts"]["mismatches"], 0);

    let r = erase(
        &pmm,
        &[
            &users[1].to_string(),
            "--reason",
            "test",
            "--source",
            "owner",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v = pmm.run("pmm-verify", &["--deep"], "");
    assert_eq!(v.code, 0, "{v:?}");
    assert!(v.findings().is_empty(), "{v:?}");
    let prompts = &v.summary()["deep"]["prompts"];
    assert_eq!(prompts["mismatches"], 0, "{v:?}");
    assert_eq!(prompts["checked"], 3);
    // The second turn showed the secret as its message, the third in its history.
    assert_eq!(prompts["skipped_for_erasure"], 2, "{v:?}");
}

/// An `embedding_add` of event `of`: the text's sha256 and a (dummy) hash64 vector.
fn embedding(pmm: &Pmm, of: i64, text: &str) {
    use sha2::Digest;
    let hash = hex(&sha2::Sha256::digest(text.as_bytes()));
    let content = format!(
        r#"{{"dims":64,"event_id":{of},"model":"hash64","quant":"int8","scale":0.01,"text_hash":"{hash}","vector":[1,-2,3]}}"#
    );
    append(pmm, "embedding_add", &content, "{}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_embeddings_of_an_erased_text_go_with_it() {
    use sha2::Digest;
    let pmm = ledger();
    embedding(&pmm, 2, SECRET); // 9
    embedding(&pmm, 1, "hello there"); // 10: another event's, stays
    embedding(&pmm, 3, "Noted."); // 11: a text too short to look for quotes of
    let digest = hex(&sha2::Sha256::digest(SECRET.as_bytes()));
    // Listed with the quotes...
    let r = erase(&pmm, &["2", "--reason", "gdpr", "--source", "owner"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.of_type("erasure")[0]["quoted_by"],
        serde_json::json!([4, 6, 9])
    );
    let r = erase(&pmm, &["3", "--reason", "gdpr", "--source", "owner"]);
    assert_eq!(
        r.of_type("erasure")[0]["quoted_by"],
        serde_json::json!([11])
    );
    assert!(crate::harness::occurrences(&pmm, &digest) > 0);
    // ...and erased with them: the digest that confirms a guess of the text is gone too.
    let pmm = ledger();
    embedding(&pmm, 2, SECRET);
    embedding(&pmm, 1, "hello there");
    let r = erase(
        &pmm,
        &[
            "2",
            "--reason",
            "gdpr",
            "--source",
            "owner",
            "--with-quotes",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.of_type("erasure")[0]["erased"],
        serde_json::json!([2, 4, 6, 9])
    );
    assert_eq!(crate::harness::occurrences(&pmm, &digest), 0);
    let v = pmm.run("pmm-verify", &[], "");
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.summary()["erased"], 4);
}

/// Issue 34 item 4: an erased event keeps its place in the adaptive windows. The writer counted
/// it in every `stability_metrics` window it fell in (before the erasure with its text, after
/// it as the empty event it became), so `--deep` counts it there too, on the ledger and on an
/// export imported elsewhere; only the stability a `COMMIT:` line of the erased text made (it
/// was written before the erasure) is skipped, named with the erased message.
#[test]
fn an_erased_message_still_counts_in_the_stability_window() {
    let pmm = Pmm::new();
    let tick = |slot: i64| {
        let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
        assert_eq!(r.code, 0, "tick {slot}: {r:?}");
    };
    for m in ["hello there", "tell me about the garden"] {
        let r = pmm.run("pmm-turn", &["--adapter", "dummy", m], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    append(
        &pmm,
        "user_message",
        "just a plain remark",
        r#"{"role":"user"}"#,
    );
    append(
        &pmm,
        "user_message",
        "I will do it\nCOMMIT: water the plants",
        r#"{"role":"user"}"#,
    );
    for slot in 1..8 {
        tick(slot);
    }
    let users: Vec<i64> = pmm
        .run("pmm-replay", &["--kind", "user_message"], "")
        .records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    let (plain, commit) = (users[2], users[3]);
    for id in [plain, commit] {
        let r = erase(
            &pmm,
            &[&id.to_string(), "--reason", "test", "--source", "owner"],
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    for m in ["and the roses", "what else"] {
        let r = pmm.run("pmm-turn", &["--adapter", "dummy", m], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    for slot in 8..16 {
        tick(slot);
    }
    let stability = pmm.run("pmm-replay", &["--kind", "stability_metrics"], "");
    assert!(stability.records().len() >= 3, "{stability:?}");

    let check = |pmm: &Pmm, what: &str| {
        let v = pmm.run("pmm-verify", &["--deep"], "");
        assert_eq!(v.code, 0, "{what}: {v:?}");
        assert!(v.findings().is_empty(), "{what}: {:?}", v.findings());
        let deep = &v.summary()["deep"];
        assert!(
            deep["adaptive_events"].as_u64().unwrap() >= 3,
            "{what}: {deep}"
        );
        // Only what the COMMIT: line made is skipped for the erasure, never the plain one's.
        let skipped = deep["skipped_for_erasure"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let stab: Vec<&Value> = skipped
            .iter()
            .filter(|s| s["check"] == "stability_metrics")
            .collect();
        assert!(!stab.is_empty(), "{what}: {deep}");
        assert!(
            stab.iter()
                .all(|s| s["erased_input"] == commit || s["erased_input"] == plain),
            "{what}: {deep}"
        );
    };
    check(&pmm, "the ledger");
    let file = pmm.path("x.jsonl");
    let x = pmm.run("pmm-export", &["-o", file.to_str().unwrap()], "");
    assert_eq!(x.code, 0, "{x:?}");
    let other = Pmm::new();
    let r = other.run("pmm-append", &["--import", file.to_str().unwrap()], "");
    assert_eq!(r.code, 0, "{r:?}");
    check(&other, "the imported copy");
}

/// Issue 34 item 6: the checkpoint check now verifies the chain. An erasure is not an edit: a
/// checkpoint signed before it still checks, since the erased event is settled as `erased`
/// (an erasure that verifies names it and its hash); the same blanking without an erasure
/// fails the check.
#[test]
fn a_checkpoint_signed_before_an_erasure_still_checks() {
    let pmm = ledger();
    let key = pmm.path("log.key");
    let key = key.to_str().unwrap();
    let vkey = pmm.run(
        "pmm-export",
        &["--keygen", "pmm.test/agent", "--key", key],
        "",
    );
    assert_eq!(vkey.code, 0, "{vkey:?}");
    let vkey = vkey.stdout.trim().to_string();
    let cp = pmm.run("pmm-export", &["--checkpoint", "--key", key], "");
    assert_eq!(cp.code, 0, "{cp:?}");
    let cp_file = pmm.path("cp.txt");
    std::fs::write(&cp_file, &cp.stdout).unwrap();
    let cp_file = cp_file.to_str().unwrap();
    let r = erase(&pmm, &["2", "--reason", "forget", "--source", "owner"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = pmm.run("pmm-verify", &["--checkpoint", cp_file, "--key", &vkey], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["ok"], true);
    let c = rusqlite::Connection::open(&pmm.db).unwrap();
    c.execute(
        "UPDATE events SET content = '', meta = '{}' WHERE id = 3",
        [],
    )
    .unwrap();
    drop(c);
    let r = pmm.run("pmm-verify", &["--checkpoint", cp_file, "--key", &vkey], "");
    assert_eq!(r.code, 1, "{r:?}");
    let error = r.records()[0]["error"].as_str().unwrap().to_string();
    assert!(error.contains("event 3: hash_mismatch"), "{error}");
}

#[test]
fn an_erased_message_is_not_recalled_as_a_neighbour_of_a_hit() {
    let pmm = Pmm::new();
    append(
        &pmm,
        "user_message",
        "Alice: I painted a lake at sunrise last weekend.",
        "{}",
    );
    append(
        &pmm,
        "assistant_message",
        "Bob: noted, and your card is 4111 1111 1111 1111",
        "{}",
    );
    append(&pmm, "user_message", "Alice: mostly teal and orange.", "{}");
    let recalled = |pmm: &Pmm| -> Vec<i64> {
        let r = pmm.run("pmm-recall", &["what did Alice paint?"], "");
        assert_eq!(r.code, 0, "{r:?}");
        r.records()
            .iter()
            .filter_map(|e| e["id"].as_i64())
            .collect()
    };
    assert!(
        recalled(&pmm).contains(&2),
        "a neighbour before the erasure"
    );
    let r = erase(
        &pmm,
        &["2", "--reason", "a card number", "--source", "owner"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let ids = recalled(&pmm);
    assert!(ids.contains(&1) && !ids.contains(&2), "{ids:?}");
}
