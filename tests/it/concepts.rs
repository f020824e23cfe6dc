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
