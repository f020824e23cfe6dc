//! Corrections (issue 46, item 1): an event names the events it corrects in
//! `meta.supersedes`; recall puts what is believed now first and labels the old fact, a
//! turn's prompt too, `--current` leaves the old one out, `--at` before the correction shows
//! the old belief, and `pmm-verify --deep` stays clean.

use crate::harness::{Pmm, Run};
use serde_json::{json, Map, Value};

fn append(pmm: &Pmm, kind: &str, content: &str, source: &str, supersedes: &[i64]) -> Run {
    let meta = json!({"role": "user", "source": source}).to_string();
    let mut args = vec!["--kind", kind, "--content", content, "--meta", &meta];
    let ids: Vec<String> = supersedes.iter().map(i64::to_string).collect();
    for id in &ids {
        args.extend(["--supersedes", id.as_str()]);
    }
    pmm.run("pmm-append", &args, "")
}

fn id_of(r: &Run) -> i64 {
    assert_eq!(r.code, 0, "{r:?}");
    r.records()[0]["id"].as_i64().unwrap()
}

/// A conversation whose facts change: 1 says where the user lives, 3 where they work, 5 the
/// project's name; 7 corrects 1 (a move), 8 corrects 3 (a new job).
fn conversation(pmm: &Pmm) -> (i64, i64, i64, i64, i64) {
    let home = id_of(&append(
        pmm,
        "user_message",
        "I live in Paris, near the canal",
        "owner",
        &[],
    ));
    id_of(&append(
        pmm,
        "user_message",
        "the weather is mild today",
        "owner",
        &[],
    ));
    let job = id_of(&append(
        pmm,
        "user_message",
        "I work as a baker at Dupont bakery",
        "owner",
        &[],
    ));
    id_of(&append(
        pmm,
        "user_message",
        "tomatoes grow well in pots",
        "owner",
        &[],
    ));
    let project = id_of(&append(
        pmm,
        "user_message",
        "my project is called Falcon",
        "owner",
        &[],
    ));
    id_of(&append(
        pmm,
        "user_message",
        "rain again on the roof",
        "owner",
        &[],
    ));
    let moved = id_of(&append(
        pmm,
        "user_message",
        "We moved: home is Berlin now",
        "owner",
        &[home],
    ));
    let hired = id_of(&append(
        pmm,
        "user_message",
        "New job: I am a nurse at the Charite",
        "owner",
        &[job],
    ));
    (home, job, project, moved, hired)
}

fn recall(pmm: &Pmm, args: &[&str]) -> Vec<Value> {
    let r = pmm.run("pmm-recall", args, "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
}

fn ids(records: &[Value]) -> Vec<i64> {
    records.iter().map(|v| v["id"].as_i64().unwrap()).collect()
}

fn deep_clean(pmm: &Pmm) {
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.findings().len(), 0, "{r:?}");
}

#[test]
fn recall_puts_the_correction_first_and_labels_the_old_fact() {
    let pmm = Pmm::new();
    let (home, _, _, moved, _) = conversation(&pmm);
    // "Paris" matches only the old fact: it brings its correction, which comes first.
    let found = recall(&pmm, &["Paris canal"]);
    let order = ids(&found);
    let at_new = order.iter().position(|&i| i == moved).unwrap();
    let at_old = order.iter().position(|&i| i == home).unwrap();
    assert!(at_new < at_old, "{found:?}");
    assert_eq!(found[at_new]["via"], json!([format!("corrects:{home}")]));
    let label = &found[at_old]["superseded_by"];
    assert_eq!(label["by"], moved);
    assert_eq!(label["source"], "owner");
    assert_eq!(label["current"], moved);
    assert!(label["ts"].as_str().unwrap().starts_with("2025-11-24"));
    assert!(found[at_new].get("superseded_by").is_none());
    // --current: only what is believed now.
    let current = ids(&recall(&pmm, &["--current", "Paris canal"]));
    assert!(
        current.contains(&moved) && !current.contains(&home),
        "{current:?}"
    );
    deep_clean(&pmm);
}

#[test]
fn a_chain_of_corrections_resolves_to_its_last() {
    let pmm = Pmm::new();
    let (home, _, _, moved, _) = conversation(&pmm);
    let again = id_of(&append(
        &pmm,
        "user_message",
        "Now settled in Lisbon for good",
        "mcp:laptop",
        &[moved],
    ));
    let found = recall(&pmm, &["Paris canal"]);
    let order = ids(&found);
    assert_eq!(order[0], again, "{found:?}");
    let old = found.iter().find(|v| v["id"] == home).unwrap();
    assert_eq!(old["superseded_by"]["by"], moved);
    assert_eq!(old["superseded_by"]["current"], again);
    let state = pmm.run("pmm-replay", &["--state"], "").records()[0].clone();
    assert_eq!(state["supersession"]["superseded"], 3, "{state}");
    let c = &state["supersession"]["corrections"][0];
    assert_eq!(
        (c["id"].as_i64(), c["current"].as_i64()),
        (Some(home), Some(again))
    );
    deep_clean(&pmm);
}

#[test]
fn the_state_at_an_earlier_event_shows_what_was_believed_then() {
    let pmm = Pmm::new();
    let (home, _, _, moved, hired) = conversation(&pmm);
    let before = pmm.run(
        "pmm-replay",
        &["--state", "--at", &(moved - 1).to_string()],
        "",
    );
    assert!(
        before.records()[0].get("supersession").is_none(),
        "{before:?}"
    );
    let at = pmm.run("pmm-replay", &["--state", "--at", &moved.to_string()], "");
    let s = &at.records()[0]["supersession"];
    assert_eq!(s["superseded"], 1, "{s}");
    assert_eq!(s["corrections"][0]["id"], home);
    let now = pmm.run("pmm-replay", &["--state"], "").records()[0].clone();
    assert_eq!(now["supersession"]["superseded"], 2);
    assert_eq!(now["supersession"]["corrections"][1]["by"], hired);
}

#[test]
fn the_graph_has_a_supersedes_edge() {
    let pmm = Pmm::new();
    let (home, _, _, moved, _) = conversation(&pmm);
    let r = pmm.run("pmm-graph", &["export", "--format", "json"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let g: Value = serde_json::from_str(&r.stdout).unwrap();
    let edge = json!({"source": moved, "target": home, "label": "supersedes"});
    assert!(g["links"].as_array().unwrap().contains(&edge), "{g}");
    let r = pmm.run(
        "pmm-graph",
        &["neighbors", &home.to_string(), "--direction", "in"],
        "",
    );
    assert_eq!(ids(&r.records()), [moved], "{r:?}");
}

#[test]
fn supersedes_must_name_earlier_events() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let before = pmm.count();
    for bad in [[999], [9], [0]] {
        let r = append(&pmm, "user_message", "x", "owner", &bad);
        assert_eq!(r.code, 2, "{bad:?}: {r:?}");
    }
    let r = append(&pmm, "user_message", "x", "owner", &[1, 1]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--content",
            "x",
            "--meta",
            r#"{"supersedes":"1"}"#,
        ],
        "",
    );
    r.assert_error("pmm-append", &["supersedes"]);
    let r = pmm.run(
        "pmm-append",
        &[
            "--kind",
            "user_message",
            "--content",
            "x",
            "--meta",
            r#"{"supersedes":[1]}"#,
            "--supersedes",
            "2",
        ],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(pmm.count(), before);
}

/// A turn's prompt labels the superseded evidence and puts it after what is believed now; the
/// prompt rebuilds from the ledger and `--deep` is clean.
#[test]
fn a_turns_prompt_puts_the_current_fact_first() {
    let pmm = Pmm::new();
    let (home, _, _, moved, _) = conversation(&pmm);
    // The newest messages go as chat history (and are left out of the evidence): older the
    // correction past them.
    for i in 0..8 {
        id_of(&append(
            &pmm,
            "user_message",
            &format!("filler line number {i}"),
            "owner",
            &[],
        ));
    }
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy", "where is home, Paris?"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let reply = pmm
        .run("pmm-replay", &["--kind", "assistant_message"], "")
        .records()[0]
        .clone();
    let id = reply["id"].as_i64().unwrap();
    let p = pmm.run("pmm-replay", &["--prompt", &id.to_string()], "");
    assert_eq!(p.code, 0, "{p:?}");
    let system = p.records()[0]["system"].as_str().unwrap().to_string();
    let new = system.find(&format!("[{moved}]")).unwrap();
    let heading = system.find("### Superseded").unwrap();
    let old = system.find(&format!("\n[{home}] ")).unwrap();
    assert!(new < heading && heading < old, "{system}");
    assert!(
        system.contains(&format!("superseded by [{moved}] (owner, 2025-11-24")),
        "{system}"
    );
    deep_clean(&pmm);
}

/// Over MCP: `remember` with `supersedes`, and `correct`; the `recall` tool labels the old
/// fact and `current` leaves it out.
#[test]
fn mcp_remember_and_correct_supersede() {
    use pmm::mcp::tools::{call_as, Config};
    let pmm = Pmm::new();
    let (home, job, _, _, _) = conversation(&pmm);
    let clock = pmm::event::Clock::pinned("2025-11-25T00:00:00Z").unwrap();
    let cfg = Config::new(pmm.db.clone(), false, 5000, clock);
    let args = |v: Value| -> Map<String, Value> { v.as_object().cloned().unwrap() };
    let r = call_as(
        &cfg,
        None,
        "remember",
        args(json!({"text": "Home: Lisbon now", "kind": "user_message", "supersedes": [home]})),
    )
    .unwrap();
    let lisbon = r["event"]["id"].as_i64().unwrap();
    assert_eq!(r["event"]["meta"]["supersedes"], json!([home]));
    let r = call_as(
        &cfg,
        None,
        "correct",
        args(json!({"text": "Job: teacher at the lycee", "supersedes": [job]})),
    )
    .unwrap();
    let teacher = r["event"]["id"].as_i64().unwrap();
    assert_eq!(r["event"]["kind"], "user_message");
    let found = call_as(&cfg, None, "recall", args(json!({"query": "baker Dupont"}))).unwrap();
    let results = found["results"].as_array().unwrap();
    assert_eq!(results[0]["id"], teacher, "{found}");
    let old = results.iter().find(|v| v["id"] == job).unwrap();
    assert_eq!(old["superseded_by"]["source"], "mcp");
    let now = call_as(
        &cfg,
        None,
        "recall",
        args(json!({"query": "Paris canal", "current": true})),
    )
    .unwrap();
    let now_ids: Vec<i64> = now["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_i64().unwrap())
        .collect();
    assert!(
        now_ids.contains(&lisbon) && !now_ids.contains(&home),
        "{now}"
    );
    let bad = call_as(
        &cfg,
        None,
        "correct",
        args(json!({"text": "x", "supersedes": [9999]})),
    );
    assert!(bad.is_err());
    deep_clean(&pmm);
}
