//! The concept layer in the turn loop (issue 20, item 1): active indexing binds the concepts a
//! turn is about to its messages (defining new ones first), a COMMIT binds them to its thread,
//! `pmm-graph concepts` lists them, and recall finds what a concept names but the words miss.

use crate::harness::Pmm;
use serde_json::Value;

/// A reply whose JSON header names `concepts`.
fn reply(concepts: &[&str], body: &str) -> String {
    let header = serde_json::json!({
        "intent": "answer", "outcome": "ok", "next": "listen", "self_model": "steady",
        "concepts": concepts,
    });
    serde_json::to_string(&format!("{header}\n{body}")).unwrap()
}

/// Twenty turns about pets, the garden and travel; the header names the topic.
fn conversation(pmm: &Pmm) {
    let turns: Vec<(String, String)> = (0..20)
        .map(|i| {
            let (topic, user, body) = match i % 4 {
                0 => (
                    "topic.pets",
                    format!("My sister's dog is called Biscuit ({i})."),
                    "A fine name.",
                ),
                1 => (
                    "topic.garden",
                    format!("The tomatoes are ripening ({i})."),
                    "Lovely.",
                ),
                2 => (
                    "topic.travel",
                    format!("We fly to Lisbon in May ({i})."),
                    "Safe trip.",
                ),
                _ => (
                    "topic.garden",
                    format!("Slugs ate the lettuce ({i})."),
                    "Try copper tape.\nCOMMIT: suggest slug remedies",
                ),
            };
            (user, reply(&[topic], body))
        })
        .collect();
    let script = pmm.path("replies.jsonl");
    let lines: String = turns.iter().map(|(_, r)| format!("{r}\n")).collect();
    std::fs::write(&script, lines).unwrap();
    for (user, _) in &turns {
        let r = pmm.run(
            "pmm-turn",
            &[
                "--adapter",
                "scripted",
                "--script",
                script.to_str().unwrap(),
                user,
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
}

fn events(pmm: &Pmm, kind: &str) -> Vec<Value> {
    pmm.run("pmm-replay", &["--kind", kind], "").records()
}

fn content(e: &Value) -> Value {
    serde_json::from_str(e["content"].as_str().unwrap()).unwrap()
}

#[test]
fn a_conversation_fills_the_concept_layer() {
    let pmm = Pmm::new();
    conversation(&pmm);
    // Each concept is defined once, by the turn that first named it, before its binding.
    let defines = events(&pmm, "concept_define");
    let tokens: Vec<Value> = defines
        .iter()
        .map(|d| content(d)["token"].clone())
        .collect();
    assert_eq!(tokens, ["topic.pets", "topic.garden", "topic.travel"]);
    assert_eq!(defines[0]["meta"]["source"], "active_indexing");
    assert!(content(&defines[0])["definition"]
        .as_str()
        .unwrap()
        .starts_with("pets (first named at event"));
    // Every turn binds its concept to the user's message and the reply.
    let binds = events(&pmm, "concept_bind_event");
    let active: Vec<&Value> = binds
        .iter()
        .filter(|b| b["meta"]["source"] == "active_indexing")
        .collect();
    assert_eq!(active.len(), 40, "{binds:?}");
    let users = events(&pmm, "user_message");
    assert_eq!(content(active[0])["event_id"], users[0]["id"]);
    assert_eq!(content(active[0])["relation"], "relevant_to");
    // The COMMITs bound the garden to their thread (once: the same cid each time).
    let threads = events(&pmm, "concept_bind_thread");
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(content(&threads[0])["tokens"][0], "topic.garden");
    // The self-model's concept metrics are not empty.
    let state = pmm.run("pmm-replay", &["--state"], "").records();
    let m = &state[0]["rsm"]["concept_metrics"];
    assert_eq!(m["concepts_used"]["topic.garden"], 20, "{m}");
    assert_eq!(m["hot_concepts"][0], "topic.garden", "{m}");
    // pmm-graph concepts lists them.
    let listed = pmm.run("pmm-graph", &["concepts"], "").records();
    assert_eq!(listed.len(), 3);
    let garden = listed
        .iter()
        .find(|c| c["token"] == "topic.garden")
        .unwrap();
    assert_eq!(garden["type"], "concept");
    assert_eq!(garden["bindings"], 20);
    assert_eq!(garden["threads"].as_array().unwrap().len(), 1);
    assert!(garden["first_event"].as_i64() < garden["last_event"].as_i64());
    let text = pmm.run("pmm-graph", &["concepts", "--text"], "");
    assert!(
        text.stdout.contains("topic.pets — pets (first named"),
        "{text:?}"
    );
}

#[test]
fn a_question_naming_a_concept_recalls_what_its_words_miss() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let prompt = pmm.path("prompt.json");
    let command = format!("cat > '{}'; echo ok", prompt.display());
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "cmd",
            "--command",
            &command,
            "What do you know about my pets?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let sel = events(&pmm, "retrieval_selection");
    let last = content(sel.last().unwrap());
    let selected = last["selected"].as_array().unwrap();
    let all = pmm.run("pmm-replay", &[], "").records();
    let text_of = |id: &Value| {
        let e = all.iter().find(|e| e["id"] == *id).unwrap();
        let text = e["content"].as_str().unwrap().to_lowercase();
        if e["kind"] == "user_message" {
            text
        } else {
            String::new()
        }
    };
    // The user's messages about Biscuit never say "pet" (the replies do, in their header):
    // full text alone would not find them; the concept does.
    let mut found = 0;
    for (id, via) in selected.iter().zip(last["via"].as_array().unwrap()) {
        let text = text_of(id);
        if !text.contains("biscuit") {
            continue;
        }
        assert!(!text.contains("pet"), "{text}");
        let via: Vec<&str> = via
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        if via.contains(&"concept:topic.pets") {
            assert!(!via.contains(&"fts"), "{via:?}");
            found += 1;
        }
    }
    assert!(found > 0, "{last}");
    // The prompt's Concepts section names it.
    let sent: Value = serde_json::from_slice(&std::fs::read(&prompt).unwrap()).unwrap();
    assert!(sent["system"]
        .as_str()
        .unwrap()
        .contains("## Concepts\n- topic.pets: pets"));
}

#[test]
fn the_concepts_section_shows_relations() {
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-append",
        &["--batch"],
        concat!(
            "{\"kind\":\"concept_define\",\"content\":\"{\\\"concept_kind\\\":\\\"topic\\\",\\\"definition\\\":\\\"animals at home\\\",\\\"token\\\":\\\"topic.pets\\\",\\\"version\\\":1}\"}\n",
            "{\"kind\":\"concept_relate\",\"content\":\"{\\\"from\\\":\\\"topic.pets\\\",\\\"relation\\\":\\\"part_of\\\",\\\"to\\\":\\\"topic.home\\\",\\\"weight\\\":1.0}\"}\n",
        ),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let prompt = pmm.path("prompt.json");
    let command = format!("cat > '{}'; echo ok", prompt.display());
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "cmd",
            "--command",
            &command,
            "Tell me about pets",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let sent: Value = serde_json::from_slice(&std::fs::read(&prompt).unwrap()).unwrap();
    let system = sent["system"].as_str().unwrap();
    assert!(
        system.contains("- topic.pets: animals at home\n  Linked to: topic.home (part_of)"),
        "{system}"
    );
    // The mentioned concept is bound to the turn's messages.
    let binds = events(&pmm, "concept_bind_event");
    assert_eq!(binds.len(), 2, "{binds:?}");
}

/// Twenty turns of an ordinary conversation — the garden, the quarterly report, learning Rust,
/// a trip to Lisbon, the cat's vet visit — whose replies carry no JSON header, the clock
/// pinned; the replies' COMMIT lines name what they promise.
fn plain_conversation(pmm: &Pmm) {
    let turns: [(&str, &str); 20] = [
        ("The tomatoes in my garden are finally ripening.", "Lovely, ripe tomatoes are the best part of a garden."),
        ("I need to finish the quarterly report for Dana by Friday.", "What is left in the quarterly report?\nCOMMIT: help draft the quarterly report for Dana"),
        ("I started learning Rust this week, the borrow checker is hard.", "The borrow checker gets easier once ownership clicks."),
        ("We are flying to Lisbon in June.", "Lisbon in June is warm; the Alfama is worth a walk."),
        ("Our cat Miso has a vet appointment on Tuesday.", "I hope the vet visit goes smoothly for Miso.\nCOMMIT: remind you about the vet appointment for Miso"),
        ("Slugs keep eating the lettuce in the garden.", "Copper tape around the garden beds keeps slugs away."),
        ("The quarterly report needs the sales figures from Dana.", "Ask Dana for the sales figures first; the report can wait a day."),
        ("Rust ownership rules finally make sense to me.", "Ownership is the heart of Rust; lifetimes come next."),
        ("In Lisbon we want to see the Alfama and eat pastries.", "The Alfama at dusk, then pastries in Belem."),
        ("Miso hates the carrier before every vet visit.", "A towel in the carrier helps cats like Miso stay calm at the vet."),
        ("I watered the tomatoes and the lettuce this morning.", "Morning watering is kind to tomatoes."),
        ("Dana liked the first draft of the quarterly report.", "Good news for the report; the figures section is next."),
        ("I wrote my first Rust program with a borrow checker error.", "Every Rust learner meets the borrow checker early."),
        ("The flight to Lisbon leaves at seven.", "An early flight gives you a full first day in Lisbon."),
        ("The vet says Miso needs a lighter diet.", "A lighter diet for Miso; the vet can suggest portions."),
        ("The garden needs compost before the autumn.", "Compost now feeds the garden through autumn."),
        ("The report goes to the board after Dana signs it.", "Then the quarterly report is nearly done."),
        ("Rust lifetimes are my next topic.", "Lifetimes build on ownership, so you are ready."),
        ("We booked a hotel near the Alfama in Lisbon.", "A hotel near the Alfama puts Lisbon at your door."),
        ("Miso is back home from the vet and sleeping.", "Glad Miso is home; rest is the best medicine after the vet."),
    ];
    let script = pmm.path("plain.jsonl");
    let lines: String = turns
        .iter()
        .map(|(_, r)| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    std::fs::write(&script, lines).unwrap();
    for (user, _) in &turns {
        let r = pmm.run(
            "pmm-turn",
            &[
                "--adapter",
                "scripted",
                "--script",
                script.to_str().unwrap(),
                "--now",
                "2026-03-02T09:00:00Z",
                user,
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
}

/// Issue 34 item 15: without a JSON header a turn names no concept, and the keyword indexer
/// knew fourteen keywords, so such a conversation and 41 ticks gave no concept at all. The
/// indexer's rule 2 takes what people talk about: the names (Lisbon, Rust, Dana, Miso) and
/// the topics the conversation keeps returning to, defined and bound to their messages,
/// bound to the commitments that mention them, and related when they keep appearing
/// together; `pmm-verify --deep` recomputes every one of those events.
#[test]
fn an_ordinary_conversation_and_its_ticks_fill_the_concept_layer() {
    let pmm = Pmm::new();
    plain_conversation(&pmm);
    assert!(
        events(&pmm, "concept_define").is_empty(),
        "no header, no concept yet"
    );
    let mut index_ticks = 0;
    for slot in 1..=41 {
        let r = pmm.run(
            "pmm-tick",
            &["--now", "2026-03-02T10:00:00Z", "--slot", &slot.to_string()],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        index_ticks += usize::from(r.of_type("tick")[0]["decision"] == "index");
    }
    assert_eq!(index_ticks, 2);
    let tokens: Vec<String> = events(&pmm, "concept_define")
        .iter()
        .map(|d| content(d)["token"].as_str().unwrap().to_string())
        .collect();
    for t in [
        "entity.lisbon",
        "entity.rust",
        "entity.dana",
        "entity.miso",
        "entity.alfama",
        "topic.garden",
        "topic.report",
        "topic.vet",
    ] {
        assert!(tokens.contains(&t.to_string()), "{t} in {tokens:?}");
    }
    // The messages of both batches are bound: most of them to something.
    let bound: std::collections::BTreeSet<i64> = events(&pmm, "concept_bind_async")
        .iter()
        .map(|b| content(b)["event_id"].as_i64().unwrap())
        .collect();
    assert!(bound.len() >= 24, "{} of 32 messages bound", bound.len());
    // The commitments are bound to the concepts their text names.
    let threads: Vec<(String, Value)> = events(&pmm, "concept_bind_thread")
        .iter()
        .map(|t| {
            let c = content(t);
            (
                c["cid"].as_str().unwrap().to_string(),
                c["tokens"][0].clone(),
            )
        })
        .collect();
    let vet =
        pmm::projection::mirror::commitment_cid("remind you about the vet appointment for Miso");
    let report =
        pmm::projection::mirror::commitment_cid("help draft the quarterly report for Dana");
    for (cid, token) in [
        (&vet, "entity.miso"),
        (&vet, "topic.vet"),
        (&report, "entity.dana"),
        (&report, "topic.report"),
    ] {
        assert!(
            threads.contains(&(cid.clone(), Value::from(token))),
            "{cid} {token} in {threads:?}"
        );
    }
    // Concepts that keep appearing together are related.
    let relations: Vec<Value> = events(&pmm, "concept_relate").iter().map(content).collect();
    assert!(
        relations
            .iter()
            .any(|r| r["from"] == "entity.miso" && r["to"] == "topic.vet"),
        "{relations:?}"
    );
    // The concept source recalls through them.
    let r = pmm.run("pmm-recall", &["how did the vet visit go for Miso"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let via: Vec<String> = r
        .records()
        .iter()
        .flat_map(|e| e["via"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    assert!(via.iter().any(|v| v == "concept:entity.miso"), "{via:?}");
    // Deep verification recomputes every event of both index ticks.
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let deep = &r.summary()["deep"];
    let written = [
        "concept_define",
        "concept_bind_async",
        "concept_bind_thread",
        "concept_relate",
        "claim_from_text",
    ]
    .iter()
    .map(|k| events(&pmm, k).len())
    .sum::<usize>();
    assert_eq!(deep["index_events"], written as u64, "{deep}");
}

/// A ledger written before rule 2 (`tests/fixtures/index-rule-1`, by pmm at 0e4ba64): its index
/// tick names no rule, and `pmm-verify --deep` recomputes its events with rule 1, the keyword
/// indexer, finding every one as written; a tick that claims rule 2 for them does not verify.
#[test]
fn an_index_tick_of_rule_1_still_verifies() {
    let pmm = Pmm::new();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/index-rule-1/ledger.jsonl.gz"
    );
    let r = pmm.run("pmm-verify", &["--quiet", "--deep", fixture], "");
    assert_eq!(r.code, 0, "{r:?}");
    let deep = &r.summary()["deep"];
    assert_eq!(deep["index_events"], 6 + 12 + 7 + 6, "{deep}");
    assert_eq!(deep["mismatches"], 0, "{deep}");
    // The same ledger with the tick saying rule 2, re-hashed: rule 2 derives other events.
    let r = pmm.run("pmm-append", &["--import", fixture], "");
    assert_eq!(r.code, 0, "{r:?}");
    let mut rows = pmm.run("pmm-export", &["--format", "jsonl"], "").records();
    for row in rows.iter_mut() {
        let index_tick = row["kind"] == "autonomy_tick"
            && row["content"]
                .as_str()
                .unwrap()
                .contains("\"decision\":\"index\"");
        if index_tick {
            row["meta"]["index_rule"] = 2.into();
        }
    }
    let forged = pmm.path("rule2.jsonl");
    std::fs::write(&forged, crate::harness::rechain(&mut rows)).unwrap();
    let r = pmm.run(
        "pmm-verify",
        &["--quiet", "--deep", forged.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    let whats: Vec<String> = r
        .of_type("finding")
        .iter()
        .filter_map(|f| f["what"].as_str().map(str::to_string))
        .collect();
    assert!(
        whats.iter().any(|w| w.starts_with("index tick")),
        "{whats:?}"
    );
}

/// A ledger indexed by rule 2 (`tests/fixtures/index-rule-2`: a transcript whose messages are
/// labelled "Ana: …", "Ben: …"): `pmm-verify --deep` recomputes its index ticks with rule 2,
/// and the same ticks claiming rule 3 do not verify. The same messages indexed now (rule 3)
/// bind a speaker's name only to the messages that name them in their text, not to every
/// message the speaker wrote, and "I'm" is no name.
#[test]
fn an_index_tick_of_rule_2_still_verifies_and_rule_3_leaves_speaker_labels_out() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/index-rule-2/ledger.jsonl.gz"
    );
    let pmm = Pmm::new();
    let r = pmm.run("pmm-verify", &["--quiet", "--deep", fixture], "");
    assert_eq!(r.code, 0, "{r:?}");
    let deep = &r.summary()["deep"];
    assert_eq!(deep["index_events"], 24 + 20 + 4, "{deep}");
    assert_eq!(deep["mismatches"], 0, "{deep}");
    let r = pmm.run("pmm-append", &["--import", fixture], "");
    assert_eq!(r.code, 0, "{r:?}");
    let rows = pmm.run("pmm-export", &["--format", "jsonl"], "").records();
    let defined = |pmm: &Pmm| -> Vec<String> {
        events(pmm, "concept_define")
            .iter()
            .map(|e| content(e)["token"].as_str().unwrap().to_string())
            .collect()
    };
    let ana_bound = |pmm: &Pmm| -> Vec<i64> {
        events(pmm, "concept_bind_async")
            .iter()
            .map(content)
            .filter(|c| {
                c["tokens"]
                    .as_array()
                    .unwrap()
                    .contains(&"entity.ana".into())
            })
            .map(|c| c["event_id"].as_i64().unwrap())
            .collect()
    };
    // Rule 2 bound Ana's name to her own messages (the odd ids) and made "I'm" a name.
    assert!(defined(&pmm).contains(&"entity.i'm".to_string()));
    assert!(
        ana_bound(&pmm).iter().any(|id| id % 2 == 1),
        "{:?}",
        ana_bound(&pmm)
    );
    // The ticks claiming rule 3, re-hashed: rule 3 derives other events.
    let mut forged_rows = rows.clone();
    for row in forged_rows.iter_mut() {
        if row["meta"]["index_rule"] == 2 {
            row["meta"]["index_rule"] = 3.into();
        }
    }
    let forged = pmm.path("rule3.jsonl");
    std::fs::write(&forged, crate::harness::rechain(&mut forged_rows)).unwrap();
    let r = pmm.run(
        "pmm-verify",
        &["--quiet", "--deep", forged.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    // The same messages indexed by this build (rule 3).
    let now = pmm::projection::indexing::RULE;
    assert_eq!(now, 3);
    let fresh = Pmm::new();
    let lines: String = rows
        .iter()
        .filter(|e| e["id"].as_i64().unwrap() <= 21)
        .map(|e| {
            let keep = serde_json::json!({"ts": e["ts"], "kind": e["kind"], "content": e["content"], "meta": e["meta"]});
            keep.to_string() + "\n"
        })
        .collect();
    let r = fresh.run("pmm-append", &["--keep-ts", "--batch", "--quiet"], &lines);
    assert_eq!(r.code, 0, "{r:?}");
    let at = "2026-03-01T11:01:00Z";
    let set = [
        "--set",
        "reflection_interval=1000000000",
        "--set",
        "summary_interval=1000000000",
        "--set",
        "index_threshold=1",
    ];
    let r = fresh.run("pmm-tick", &[&["--now", at][..], &set[..]].concat(), "");
    assert_eq!(r.code, 0, "{r:?}");
    for slot in 1..=6 {
        let r = fresh.run("pmm-tick", &["--now", at, "--slot", &slot.to_string()], "");
        assert_eq!(r.code, 0, "{r:?}");
    }
    let ticks = events(&fresh, "autonomy_tick");
    assert!(
        ticks.iter().any(|t| t["meta"]["index_rule"] == 3),
        "{ticks:?}"
    );
    assert_eq!(events(&fresh, "concept_bind_async").len(), 20);
    assert!(
        !defined(&fresh).iter().any(|t| t.contains('\'')),
        "{:?}",
        defined(&fresh)
    );
    // Ana is named in Ben's messages 2 and 6 ("Welcome back Ana", "Did Ana try the tram?").
    assert_eq!(ana_bound(&fresh), [2, 6]);
    let r = fresh.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["deep"]["mismatches"], 0, "{r:?}");
}

/// An index tick's events are derived: one edited binding (the ledger re-hashed end to end,
/// so the chain is consistent) is a `derived_mismatch` naming what the rule gives.
#[test]
fn a_forged_index_binding_is_caught() {
    let pmm = Pmm::new();
    plain_conversation(&pmm);
    for slot in 1..=6 {
        let r = pmm.run(
            "pmm-tick",
            &["--now", "2026-03-02T10:00:00Z", "--slot", &slot.to_string()],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
    }
    let mut rows = pmm.run("pmm-export", &["--format", "jsonl"], "").records();
    let mut forged_id = None;
    for row in rows.iter_mut() {
        if row["kind"] == "concept_bind_async" && forged_id.is_none() {
            let mut c = content(row);
            c["tokens"] = serde_json::json!(["topic.something_else"]);
            row["content"] = Value::String(pmm::canon::to_string(&c).unwrap());
            forged_id = row["id"].as_i64();
        }
    }
    let forged_id = forged_id.expect("an index tick among the first six");
    let path = pmm.path("forged.jsonl");
    std::fs::write(&path, crate::harness::rechain(&mut rows)).unwrap();
    let r = pmm.run(
        "pmm-verify",
        &["--quiet", "--deep", path.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    let found: Vec<(i64, String)> = r
        .of_type("finding")
        .iter()
        .map(|f| {
            (
                f["id"].as_i64().unwrap_or(0),
                f["what"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        found
            .iter()
            .any(|(id, w)| *id == forged_id && w.ends_with("concept_bind_async")),
        "{found:?}"
    );
}
