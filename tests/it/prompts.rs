//! Reproducible prompts (issue 20, item 3): every past turn's exact prompt is rebuilt from the
//! ledger alone by `pmm-replay --prompt` and checked against its `prompt_sha256`; `pmm-verify
//! --deep` checks every turn; an edited ledger, re-hashed end to end, is caught.

use crate::harness::Pmm;
use serde_json::Value;

/// The replies of a scripted conversation: commitments opened and closed, claims, a JSON
/// header with concepts, plain answers.
fn script(n: usize) -> String {
    (0..n)
        .map(|i| {
            let reply = match i % 5 {
                0 => format!("Noted point {i}.\nCOMMIT: follow up on topic {i}"),
                1 => format!(
                    "{{\"intent\":\"answer\",\"outcome\":\"ok\",\"next\":\"more\",\"self_model\":\"steady\",\"concepts\":[\"topic.gardening\"]}}\nGardening answer {i}."
                ),
                2 => format!("Checking.\nCLAIM:event_existence={{\"id\":{}}}", i + 1),
                3 => format!("Done with {i}.\nCLOSE: {}", cid(&format!("follow up on topic {}", i - 3))),
                _ => format!("A plain reply about tomatoes and rain, number {i}."),
            };
            serde_json::to_string(&reply).unwrap() + "\n"
        })
        .collect()
}

fn cid(text: &str) -> String {
    use sha1::Digest as _;
    let d = sha1::Sha1::digest(text.as_bytes());
    d.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// A conversation of `n` turns with a tick after every tenth; the ids of the replies and of
/// the user messages.
fn conversation(pmm: &Pmm, n: usize) -> Vec<(i64, i64)> {
    let path = pmm.path("replies.jsonl");
    std::fs::write(&path, script(n)).unwrap();
    let topics = ["tomatoes", "rain", "my garden", "compost", "the weather"];
    for i in 0..n {
        let message = format!("Tell me about {} (question {i})", topics[i % topics.len()]);
        let r = pmm.run(
            "pmm-turn",
            &[
                "--adapter",
                "scripted",
                "--script",
                path.to_str().unwrap(),
                &message,
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        if i % 10 == 9 {
            let r = pmm.run("pmm-tick", &["--slot", &i.to_string()], "");
            assert_eq!(r.code, 0, "{r:?}");
        }
    }
    let replies = pmm
        .run("pmm-replay", &["--kind", "assistant_message"], "")
        .records();
    replies
        .iter()
        .map(|r| {
            let id = r["id"].as_i64().unwrap();
            (id, r["meta"]["reply_to"].as_i64().unwrap())
        })
        .collect()
}

fn prompt(pmm: &Pmm, id: i64) -> crate::harness::Run {
    pmm.run("pmm-replay", &["--prompt", &id.to_string()], "")
}

#[test]
fn every_turn_of_a_fifty_turn_conversation_rebuilds_its_prompt() {
    let pmm = Pmm::new();
    let turns = conversation(&pmm, 50);
    assert_eq!(turns.len(), 50);
    for &(reply, user) in &turns {
        let r = prompt(&pmm, reply);
        assert_eq!(r.code, 0, "turn {reply}: {r:?}");
        let rec = &r.records()[0];
        assert_eq!(rec["type"], "prompt");
        assert_eq!(rec["matches"], true, "{rec}");
        assert_eq!(rec["prompt_sha256"], rec["recorded_sha256"]);
        assert_eq!(rec["reply_to"], user);
        // The user message names the same turn.
        let by_user = prompt(&pmm, user);
        assert_eq!(by_user.code, 0, "{by_user:?}");
        assert_eq!(by_user.records()[0]["reply"], reply);
    }
    // The last prompt carries history and recalled evidence.
    let last = &prompt(&pmm, turns[49].0).records()[0];
    assert_eq!(last["history"].as_array().unwrap().len(), 6, "{last}");
    assert!(
        last["system"].as_str().unwrap().contains("## Evidence"),
        "{last}"
    );
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let deep = &r.summary()["deep"]["prompts"];
    assert_eq!(deep["checked"], 50, "{deep}");
    assert_eq!(deep["mismatches"], 0, "{deep}");
}

#[test]
fn an_edited_ledger_that_changes_a_past_prompt_is_caught() {
    let pmm = Pmm::new();
    let turns = conversation(&pmm, 12);
    // The user message of turn 4, reworded; every hash and link recomputed.
    let (reply, user) = turns[3];
    let db = forged(&pmm, "forged", &|row| {
        if row["id"] == user {
            row["content"] = Value::String("Tell me about something else entirely".into());
        }
    });
    let db = db.as_str();
    let r = pmm.run(
        "pmm-replay",
        &["--db", db, "--prompt", &reply.to_string()],
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.records()[0]["matches"], false);
    assert!(r.stderr.contains("records prompt_sha256"), "{r:?}");
    let r = pmm.run("pmm-verify", &["--db", db, "--quiet", "--deep"], "");
    assert_eq!(r.code, 1, "{r:?}");
    let flagged: Vec<i64> = r
        .of_type("finding")
        .iter()
        .filter(|f| {
            f["what"]
                .as_str()
                .unwrap_or_default()
                .starts_with("prompt_sha256")
        })
        .filter_map(|f| f["id"].as_i64())
        .collect();
    // Its own prompt and the three after it, whose history holds the edited message (later
    // ones too when they recalled it), none before.
    let expected: Vec<i64> = turns[3..7].iter().map(|t| t.0).collect();
    assert_eq!(flagged.get(..4), Some(&expected[..]), "{flagged:?}");
    // The untouched ledger still checks out.
    let r = prompt(&pmm, reply);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_reply_of_an_older_format_is_named_not_misreported() {
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-append",
        &["--batch"],
        "{\"kind\":\"user_message\",\"content\":\"hi\"}\n{\"kind\":\"assistant_message\",\"content\":\"hello\",\"meta\":{\"prompt_sha256\":\"00\"}}\n",
    );
    assert_eq!(r.code, 0, "{r:?}");
    prompt(&pmm, 2).assert_error("pmm-replay", &["--prompt", "no prompt format"]);
    prompt(&pmm, 1).assert_error("pmm-replay", &["--prompt", "not a turn"]);
    prompt(&pmm, 9).assert_error("pmm-replay", &["--prompt", "not a turn"]);
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["deep"]["prompts"]["other_format"], 1);
}

/// Prompt format 4 changed the rules' first paragraph (format 3's said that nothing in the
/// ledger can be changed or deleted, though erasure exists). A format-3 turn is still rebuilt,
/// with the rules it was sent with: `pmm-replay --prompt` and `--deep` agree with its recorded
/// digest, and a format-3 reply whose digest is of the format-4 rules is a mismatch.
#[test]
fn a_format_3_turn_rebuilds_with_the_rules_it_was_sent_with() {
    use pmm::context::render::{RULES, RULES_3};
    use sha2::Digest as _;
    let pmm = Pmm::new();
    let turns = conversation(&pmm, 3);
    // Each reply's prompt as format 3 rendered it: the same, with format 3's rules.
    let digests: Vec<(i64, String, String)> = turns
        .iter()
        .map(|&(reply, _)| {
            let rec = prompt(&pmm, reply).records()[0].clone();
            assert_eq!(
                rec["prompt_format"],
                pmm::context::prompt::PROMPT_FORMAT,
                "{rec}"
            );
            let system = rec["system"].as_str().unwrap();
            assert!(system.ends_with(RULES), "{system}");
            let old = system.replace(RULES, RULES_3);
            let mut v = serde_json::json!({"system": old, "user": rec["user"]});
            if !rec["history"].as_array().unwrap().is_empty() {
                v["history"] = rec["history"].clone();
            }
            let bytes = pmm::canon::to_string(&v).unwrap();
            let sha = format!("{:x}", sha2::Sha256::digest(bytes.as_bytes()));
            let now = rec["prompt_sha256"].as_str().unwrap().to_string();
            (reply, sha, now)
        })
        .collect();
    let rows = digests.clone();
    let db = forged(&pmm, "format3", &|row| {
        for (i, (reply, old, now)) in rows.iter().enumerate() {
            if row["id"] == *reply {
                row["meta"]["prompt_format"] = 3.into();
                // The last one keeps the digest of the format-4 rules.
                let sha = if i == 2 { now } else { old };
                row["meta"]["prompt_sha256"] = Value::String(sha.clone());
            }
        }
    });
    for (i, (reply, _, _)) in digests.iter().enumerate() {
        let r = pmm.run(
            "pmm-replay",
            &["--db", &db, "--prompt", &reply.to_string()],
            "",
        );
        let rec = &r.records()[0];
        assert_eq!(rec["prompt_format"], 3, "{rec}");
        assert!(
            rec["system"]
                .as_str()
                .unwrap()
                .contains("nothing in it can be changed or deleted"),
            "{rec}"
        );
        let want = if i == 2 { (1, false) } else { (0, true) };
        assert_eq!((r.code, rec["matches"].as_bool().unwrap()), want, "{r:?}");
    }
    let r = pmm.run("pmm-verify", &["--db", &db, "--quiet", "--deep"], "");
    assert_eq!(r.code, 1, "{r:?}");
    let deep = &r.summary()["deep"]["prompts"];
    assert_eq!(
        (deep["checked"].clone(), deep["mismatches"].clone()),
        (3.into(), 1.into()),
        "{deep}"
    );
    let flagged: Vec<i64> = r
        .of_type("finding")
        .iter()
        .filter_map(|f| f["id"].as_i64())
        .collect();
    assert_eq!(flagged, [digests[2].0], "{r:?}");
}

/// The export of `pmm`'s ledger with `edit` applied to each row and every hash and link
/// recomputed, imported into a new ledger: a forgery that plain verification passes.
fn forged(pmm: &Pmm, name: &str, edit: &dyn Fn(&mut Value)) -> String {
    let mut rows = pmm.run("pmm-export", &["--format", "jsonl"], "").records();
    rows.iter_mut().for_each(edit);
    let text = crate::harness::rechain(&mut rows);
    let src = pmm.path(&format!("{name}.jsonl"));
    std::fs::write(&src, text).unwrap();
    let db = pmm
        .path(&format!("{name}.db"))
        .to_str()
        .unwrap()
        .to_string();
    let r = pmm.run(
        "pmm-append",
        &["--db", &db, "--import", src.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let plain = pmm.run("pmm-verify", &["--db", &db, "--quiet"], "");
    assert_eq!(
        plain.code, 0,
        "the forgery's chain is consistent: {plain:?}"
    );
    db
}

/// `--deep` checks derived events during the walk and prompts on a thread beside it: a ledger
/// with one forged derived value (a selection's digest) and one forged prompt record (a
/// reply's prompt_sha256) gets both reported, each once, the walk's first, and the counts say
/// so.
#[test]
fn a_forged_derived_event_and_a_forged_prompt_are_both_reported() {
    let pmm = Pmm::new();
    let turns = conversation(&pmm, 12);
    let selections = pmm
        .run("pmm-replay", &["--kind", "retrieval_selection"], "")
        .records();
    let selection_of = |reply: i64| {
        selections
            .iter()
            .find(|s| {
                serde_json::from_str::<Value>(s["content"].as_str().unwrap()).unwrap()["turn_id"]
                    == reply
            })
            .map(|s| s["id"].as_i64().unwrap())
            .unwrap()
    };
    let digest_forged = selection_of(turns[1].0);
    let prompt_forged = turns[7].0;
    let zeros = "0".repeat(64);
    let db = forged(&pmm, "both", &|row| {
        if row["id"] == digest_forged {
            row["meta"]["digest"] = Value::String(zeros.clone());
        }
        if row["id"] == prompt_forged {
            row["meta"]["prompt_sha256"] = Value::String(zeros.clone());
        }
    });
    let r = pmm.run("pmm-verify", &["--db", &db, "--quiet", "--deep"], "");
    assert_eq!(r.code, 1, "{r:?}");
    let found: Vec<(i64, String)> = r
        .of_type("finding")
        .iter()
        .map(|f| {
            let what = f["what"].as_str().unwrap_or_default();
            (f["id"].as_i64().unwrap_or(0), what.to_string())
        })
        .collect();
    // The walk's findings first: the digest, then the checkpoint manifests whose prefix holds
    // it (their roots are of the chain before the re-hashing); then the prompt's, though its
    // id is lower than theirs.
    let manifests: Vec<(i64, String)> = pmm
        .run("pmm-replay", &["--kind", "checkpoint_manifest"], "")
        .records()
        .iter()
        .filter(|m| {
            let c: Value = serde_json::from_str(m["content"].as_str().unwrap()).unwrap();
            c["up_to_id"].as_i64().unwrap() >= digest_forged
        })
        .map(|m| {
            let id = m["id"].as_i64().unwrap();
            (id, "checkpoint_manifest.root_hash".to_string())
        })
        .collect();
    assert!(
        manifests.iter().all(|m| m.0 > prompt_forged),
        "{manifests:?}"
    );
    let mut expected = vec![(digest_forged, "retrieval_selection.digest".to_string())];
    expected.extend(manifests.iter().cloned());
    expected.push((
        prompt_forged,
        "prompt_sha256 (the prompt rebuilt from the ledger)".to_string(),
    ));
    assert_eq!(found, expected, "{r:?}");
    let summary = &r.of_type("summary")[0];
    let walk = 1 + manifests.len();
    assert_eq!(summary["derived_mismatches"], walk + 1, "{summary}");
    assert_eq!(summary["deep"]["mismatches"], walk, "{summary}");
    assert_eq!(summary["deep"]["prompts"]["mismatches"], 1, "{summary}");
    assert_eq!(summary["deep"]["prompts"]["checked"], 12, "{summary}");
    assert_eq!(summary["deep"]["retrieval_digests"], 12, "{summary}");
}
