//! pmm-verify --deep: derived events recomputed from their inputs.

use crate::harness::{fixture_path, Pmm, GPT_LEDGER};
use serde_json::Value;

/// The fixture's events with every hash and link recomputed after `edit` (a consistent
/// forgery: plain verification cannot see it), as JSONL.
fn rechained(src: &std::path::Path, edit: impl Fn(&mut Value)) -> String {
    let mut rows: Vec<Value> = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    for row in rows.iter_mut() {
        let mut meta: Value = serde_json::from_str(row["meta"].as_str().unwrap()).unwrap();
        row["meta"] = meta.take();
        edit(row);
    }
    crate::harness::rechain(&mut rows)
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn deep_finds_no_mismatch_on_the_reference_ledger() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    let r = pmm.run("pmm-verify", &["--deep", src.to_str().unwrap()], "");
    assert_eq!(r.code, 1, "the three forks are still findings: {r:?}");
    let s = r.summary();
    assert_eq!(s["derived_mismatches"], 0, "{r:?}");
    assert_eq!(s["broken_links"], 3);
    // What each derived kind counts is asserted once, in tests/it/derived.rs
    // (reference_ledger_has_no_derived_mismatch); the self-model snapshots are compared only
    // by the program, which folds the self-model alongside.
    assert_eq!(s["deep"]["rsm_snapshots"], 15, "{r:?}");
    assert_eq!(s["deep"]["unresolved"], 0, "{r:?}");
    // The same through the imported ledger.
    assert_eq!(
        pmm.run(
            "pmm-append",
            &["--import", src.to_str().unwrap(), "--accept-forks"],
            ""
        )
        .code,
        0
    );
    let r = pmm.run("pmm-verify", &["--deep"], "");
    assert_eq!(r.summary()["derived_mismatches"], 0, "{r:?}");
    assert_eq!(r.summary()["deep"]["rsm_snapshots"], 15);
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn a_consistently_rehashed_forgery_passes_plain_verify_but_not_deep() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    let forged = rechained(&src, |row| {
        match row["id"].as_i64().unwrap() {
            // A self-model snapshot that claims more determinism than the events show.
            172 => {
                row["meta"]["rsm_state"]["behavioral_tendencies"]["determinism_emphasis"] =
                    Value::from(49)
            }
            // A commitment whose cid does not derive from its text.
            105 => row["meta"]["cid"] = Value::from("deadbeef"),
            _ => {}
        }
    });
    let plain = pmm.run("pmm-verify", &["-"], &forged);
    assert_eq!(
        plain.code, 0,
        "rehashed: plain verification is clean: {plain:?}"
    );
    std::fs::write(pmm.path("forged.jsonl"), &forged).unwrap();
    let r = pmm.run("pmm-verify", &["--deep", "forged.jsonl"], "");
    assert_eq!(r.code, 1, "{r:?}");
    let found: Vec<(i64, String)> = r
        .of_type("finding")
        .iter()
        .map(|f| {
            assert_eq!(f["problem"], "derived_mismatch", "{f}");
            (
                f["id"].as_i64().unwrap(),
                f["what"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        found.contains(&(105, "commitment_open.cid".into())),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(id, what)| *id == 172 && what.contains("rsm_state")),
        "{found:?}"
    );
    assert_eq!(
        r.summary()["derived_mismatches"].as_u64(),
        Some(found.len() as u64)
    );
}

/// Issue 34 item 5: while a turn waits for its model, other processes append (another user's
/// message, a tick). The turn's `retrieval_selection.digest` is of its own user message (the
/// reply's `reply_to`), not of the last one before the reply, so `--deep` stays clean.
#[test]
fn a_digest_is_checked_against_the_turns_own_message_when_others_append_meanwhile() {
    use crate::stub::{Gate, Pace, Streamed, Stub, StubResponse};
    use std::io::Read;
    let pmm = Pmm::new();
    let r = pmm.run("pmm-turn", &["--adapter", "dummy", "good morning"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let gate = Gate::new();
    let st = Streamed::new(&["Hello", ", I was thinking."]).pace(Pace::Gate(gate.clone()));
    let stub = Stub::start(vec![StubResponse::OllamaStream(st)]);
    let mut child = pmm
        .std_cmd("pmm-turn")
        .env("OLLAMA_HOST", stub.url())
        .args(["--adapter", "ollama", "--stream", "always", "--text"])
        .arg("what did I plant last spring")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn pmm-turn");
    // The first piece is shown: the turn's message is written and it waits for the rest.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("Hello") {
        let n = stdout.read(&mut buf).expect("read stdout");
        assert!(
            n > 0,
            "the turn ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    let other = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--content",
            "someone else asks",
            "--meta",
            r#"{"role":"user"}"#,
        ],
        "",
    );
    assert_eq!(other.code, 0, "{other:?}");
    let tick = pmm.run("pmm-tick", &["--slot", "1"], "");
    assert_eq!(tick.code, 0, "{tick:?}");
    gate.open();
    let _ = stdout.read_to_end(&mut seen);
    let status = child.wait().expect("wait");
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    assert!(status.success(), "{err}");
    assert!(!gate.timed_out());
    // The reply came after the other message: the last user message before it is not its own.
    let users = pmm
        .run("pmm-replay", &["--kind", "user_message"], "")
        .records();
    let replies = pmm
        .run("pmm-replay", &["--kind", "assistant_message"], "")
        .records();
    let reply = replies.last().unwrap();
    let own = reply["meta"]["reply_to"].as_i64().unwrap();
    let last_before = users
        .iter()
        .map(|u| u["id"].as_i64().unwrap())
        .filter(|id| *id < reply["id"].as_i64().unwrap())
        .max()
        .unwrap();
    assert_ne!(own, last_before, "the other message came in between");

    let v = pmm.run("pmm-verify", &["--deep"], "");
    assert_eq!(v.code, 0, "{v:?}");
    assert!(v.findings().is_empty(), "{:?}", v.findings());
    assert_eq!(v.summary()["deep"]["retrieval_digests"], 2, "{v:?}");
}
