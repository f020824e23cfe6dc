//! The adaptive loop end to end (issue 17): outcomes, stability, coherence and learning
//! written by pmm-tick, shown by pmm-replay --state and pmm-metrics, replayable, and
//! deterministic.

use crate::harness::{Pmm, Run};
use serde_json::{json, Value};

fn tick(pmm: &Pmm, slot: i64) -> Run {
    let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
    assert_eq!(r.code, 0, "tick {slot}: {r:?}");
    r
}

fn of_kind(records: &[Value], kind: &str) -> Vec<Value> {
    records
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

fn content(e: &Value) -> Value {
    serde_json::from_str(e["content"].as_str().unwrap()).unwrap()
}

fn replay(pmm: &Pmm, args: &[&str]) -> Vec<Value> {
    let r = pmm.run("pmm-replay", args, "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
}

fn state(pmm: &Pmm) -> Value {
    replay(pmm, &["--state"]).remove(0)
}

fn script(pmm: &Pmm, replies: &[&str]) -> String {
    let path = pmm.path("replies.jsonl");
    let text: String = replies
        .iter()
        .map(|r| format!("{}\n", Value::String(r.to_string())))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn turn(pmm: &Pmm, script: &str, msg: &str) {
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "scripted", "--script", script, msg],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

/// Appends `n` outcomes of `action` with `result`, as a scripted history.
fn outcomes(pmm: &Pmm, action: &str, result: &str, n: usize) -> Vec<i64> {
    let line = json!({
        "kind": "outcome_observation",
        "content": serde_json::to_string(&json!({
            "action_kind": action, "action_payload": "decision=reflect", "commitment_id": "",
            "evidence_event_ids": [], "observed_result": result,
        })).unwrap(),
        "meta": {"source": "test"},
    })
    .to_string();
    let input = format!("{line}\n").repeat(n);
    let r = pmm.run("pmm-append", &[], &input);
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn every_tick_observes_its_outcome_truthfully_in_the_reference_format() {
    let pmm = Pmm::new();
    let s = script(&pmm, &["Noted.\nCOMMIT: write the report"]);
    let idle = tick(&pmm, 1).records();
    let tick_id = of_kind(&idle, "autonomy_tick")[0]["id"].as_i64().unwrap();
    let o = of_kind(&idle, "outcome_observation");
    assert_eq!(o.len(), 1);
    assert_eq!(
        o[0]["content"],
        format!(
            "{{\"action_kind\":\"autonomy_idle\",\"action_payload\":\"decision=idle\",\
             \"commitment_id\":\"\",\"evidence_event_ids\":[{tick_id}],\"observed_result\":\"no_delta\"}}"
        ),
        "an idle tick changed nothing"
    );
    assert_eq!(o[0]["meta"]["source"], "autonomy_kernel");
    assert_eq!(o[0]["meta"]["slot"], 1);
    turn(&pmm, &s, "please write the report");
    let r = tick(&pmm, 2).records();
    let refl = of_kind(&r, "reflection")[0]["id"].as_i64().unwrap();
    let o = content(&of_kind(&r, "outcome_observation")[0]);
    assert_eq!(o["action_kind"], "autonomy_reflect");
    assert_eq!(o["observed_result"], "success");
    assert_eq!(
        o["evidence_event_ids"],
        json!([refl]),
        "the reflection it wrote"
    );

    // Stability and coherence only when their content changed.
    for slot in 3..30 {
        tick(&pmm, slot);
    }
    let all = replay(&pmm, &[]);
    let stab: Vec<String> = of_kind(&all, "stability_metrics")
        .iter()
        .map(|e| e["content"].as_str().unwrap().to_string())
        .collect();
    assert!(stab.len() >= 2, "{stab:?}");
    assert!(
        stab.windows(2).all(|w| w[0] != w[1]),
        "never the same twice in a row"
    );
    assert_eq!(
        of_kind(&all, "coherence_check").len(),
        1,
        "no claims: one check"
    );
    assert_eq!(of_kind(&all, "outcome_observation").len(), 29);

    // Shown by --state and pmm-metrics alike.
    let st = state(&pmm);
    let m = pmm.run("pmm-metrics", &["--deterministic"], "").records()[0].clone();
    assert_eq!(st["adaptation"], m["adaptation"]);
    let a = &st["adaptation"];
    assert_eq!(
        a["stability"]["content"],
        serde_json::from_str::<Value>(stab.last().unwrap()).unwrap()
    );
    assert_eq!(a["coherence"]["content"]["check_type"], "claim_consistency");
    assert!(
        a["outcomes"]["autonomy_reflect"]["success"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn failing_reflections_lower_their_frequency_and_succeeding_ones_raise_it() {
    let pmm = Pmm::new();
    tick(&pmm, 1);
    // Five reflections that gained nothing: one policy_update, from that evidence.
    let failed = outcomes(&pmm, "autonomy_reflect", "no_delta", 5);
    let r = tick(&pmm, 2).records();
    let p = of_kind(&r, "policy_update");
    assert_eq!(p.len(), 1, "{r:?}");
    let c = content(&p[0]);
    assert_eq!(c["type"], "adaptive_learning");
    assert_eq!(
        c["changes"],
        json!({"autonomy_reflect": "decrease_frequency"})
    );
    assert_eq!(c["evidence"], json!(failed));
    assert_eq!(c["thresholds"]["before"]["reflection_interval"], 10);
    assert_eq!(c["thresholds"]["after"]["reflection_interval"], 11);
    assert!(c["suggestions"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("Failure rate 1.00 >= 0.7"));
    assert_eq!(
        of_kind(&r, "autonomy_rule_table")[0]["content"],
        "{reflection_interval:11,summary_interval:50,commitment_staleness:20,commitment_auto_close:27}"
    );
    let policy_id = p[0]["id"].as_i64().unwrap();
    assert_eq!(state(&pmm)["thresholds"]["reflection_interval"], 11);
    // The same evidence never again.
    for slot in 3..6 {
        assert!(of_kind(&tick(&pmm, slot).records(), "policy_update").is_empty());
    }
    // Thresholds in force at any event.
    let before = replay(&pmm, &["--state", "--at", &(policy_id - 1).to_string()]);
    assert_eq!(before[0]["thresholds"]["reflection_interval"], 10);
    let at = replay(&pmm, &["--state", "--at", &policy_id.to_string()]);
    assert_eq!(at[0]["thresholds"]["reflection_interval"], 11);
    assert_eq!(at[0]["thresholds"]["set_by"], policy_id);

    // Reflections that succeed: more often.
    outcomes(&pmm, "autonomy_reflect", "success", 5);
    let c = content(&of_kind(&tick(&pmm, 6).records(), "policy_update")[0]);
    assert_eq!(
        c["changes"],
        json!({"autonomy_reflect": "increase_frequency"})
    );
    assert_eq!(state(&pmm)["thresholds"]["reflection_interval"], 10);
    outcomes(&pmm, "autonomy_reflect", "success", 5);
    tick(&pmm, 7);
    assert_eq!(state(&pmm)["thresholds"]["reflection_interval"], 9);

    // A value the user set wins over learning until --unset.
    let r = pmm.run("pmm-tick", &["--set", "reflection_interval=20"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.of_type("thresholds")[0]["pinned"],
        json!(["reflection_interval"])
    );
    outcomes(&pmm, "autonomy_reflect", "no_delta", 5);
    let c = content(&of_kind(&tick(&pmm, 8).records(), "policy_update")[0]);
    assert_eq!(
        c["thresholds"]["after"]["reflection_interval"], 20,
        "pinned"
    );
    assert_eq!(state(&pmm)["thresholds"]["reflection_interval"], 20);
    let r = pmm.run("pmm-tick", &["--unset", "reflection_interval"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.of_type("thresholds")[0]["pinned"], json!([]));
    outcomes(&pmm, "autonomy_reflect", "no_delta", 5);
    tick(&pmm, 9);
    assert_eq!(state(&pmm)["thresholds"]["reflection_interval"], 21);
    // Summaries learn their own interval.
    outcomes(&pmm, "autonomy_summarize", "no_delta", 5);
    tick(&pmm, 10);
    assert_eq!(state(&pmm)["thresholds"]["summary_interval"], 51);
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_quiet_ledger_does_not_drift_over_1000_idle_ticks() {
    let pmm = Pmm::new();
    for slot in 1..=1000 {
        tick(&pmm, slot);
    }
    let all = replay(&pmm, &[]);
    assert_eq!(of_kind(&all, "outcome_observation").len(), 1000);
    assert!(of_kind(&all, "policy_update").is_empty());
    assert!(of_kind(&all, "meta_policy_update").is_empty());
    assert_eq!(of_kind(&all, "autonomy_rule_table").len(), 1);
    assert_eq!(of_kind(&all, "coherence_check").len(), 1);
    let th = &state(&pmm)["thresholds"];
    assert_eq!(
        (
            th["reflection_interval"].clone(),
            th["summary_interval"].clone()
        ),
        (10.into(), 50.into())
    );
}

#[test]
fn two_copies_given_the_same_200_ticks_and_turns_stay_identical() {
    let a = Pmm::new();
    let b = Pmm::new();
    let replies = [
        "Noted.\nCOMMIT: write the report",
        "Sure.\nCLAIM:preference={\"domain\":\"mode\",\"value\":\"enabled\"}",
        "Done.\nCLOSE: none",
        "Also.\nCLAIM:preference={\"domain\":\"mode\",\"value\":\"disabled\"}",
        "Ok.",
    ];
    for pmm in [&a, &b] {
        let s = script(pmm, &replies);
        for slot in 1..=200 {
            if slot % 40 == 5 {
                turn(pmm, &s, &format!("message {slot}"));
            }
            tick(pmm, slot);
        }
    }
    let hashes =
        |pmm: &Pmm| -> Vec<Value> { replay(pmm, &[]).iter().map(|e| e["hash"].clone()).collect() };
    assert_eq!(hashes(&a), hashes(&b));
    let sa = a.run("pmm-replay", &["--state"], "");
    let sb = b.run("pmm-replay", &["--state"], "");
    assert_eq!(sa.stdout, sb.stdout, "identical --state bytes");
    let all = replay(&a, &[]);
    assert_eq!(of_kind(&all, "outcome_observation").len(), 200);
    assert!(
        !of_kind(&all, "policy_update").is_empty(),
        "the reflections were learned from"
    );
    let st: Value = serde_json::from_str(sa.stdout.trim()).unwrap();
    assert_eq!(
        st["adaptation"]["coherence"]["content"]["conflicts"][0]["severity"], "high",
        "enabled against disabled"
    );
    let r = a.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// The reference fixture: every stability_metrics, coherence_check and policy_update is
/// reproduced by the reference's own algorithm, and every outcome names its tick's decision;
/// nine are re-emissions identical to their predecessor (§17 item 17: coherence_check 224,
/// 425, 631, 834, 1084 and policy_update 334, 595, 826, 1085), which pmm would not write.
#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn deep_verification_reproduces_the_reference_adaptive_events() {
    let Some(src) = crate::harness::fixture_path(crate::harness::GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    let r = pmm.run("pmm-verify", &["--deep", src.to_str().unwrap()], "");
    let s = r.summary();
    assert_eq!(s["derived_mismatches"], 0, "{r:?}");
    // 78 stability_metrics, 6 coherence_check, 7 policy_update, 85 outcome_observation.
    assert_eq!(s["deep"]["adaptive_events"], 176, "{r:?}");
    assert_eq!(s["deep"]["adaptive_repeats"], 9, "{r:?}");
}

/// SIGKILL in the middle of a tick that learns: none of it is in the ledger (no outcome, no
/// policy_update, thresholds unchanged), and the slot then ticks whole, learning once.
#[test]
fn sigkill_mid_tick_leaves_none_of_its_learning() {
    let pmm = Pmm::new();
    tick(&pmm, 1);
    outcomes(&pmm, "autonomy_reflect", "no_delta", 5);
    let before = pmm.count();
    let mut child = crate::tick::tick_cmd(&pmm)
        .args(["--slot", "2"])
        .env("PMM_TEST_TICK_PAUSE_MS", "5000")
        .spawn()
        .unwrap();
    crate::tick::wait_for_write_lock(&pmm);
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
    assert_eq!(pmm.count(), before, "none of the killed tick");
    assert_eq!(state(&pmm)["thresholds"]["reflection_interval"], 10);
    let r = tick(&pmm, 2).records();
    assert_eq!(of_kind(&r, "outcome_observation").len(), 1);
    assert_eq!(of_kind(&r, "policy_update").len(), 1);
    assert_eq!(state(&pmm)["thresholds"]["reflection_interval"], 11);
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// Enough messages with no concept bound make an `index` tick: a bounded batch of the oldest,
/// each topic defined before it is bound, claims from the safe patterns, each naming its
/// source message; the outcome is a success, and the batch is not taken again.
#[test]
fn the_indexer_binds_topics_and_claims_in_bounded_batches() {
    let pmm = Pmm::new();
    tick(&pmm, 1);
    let texts = [
        "My name is Ada and I write Python code",
        "I think my name might be Bob",
        "nothing to see here",
    ];
    let lines: String = (0..21)
        .map(|i| {
            json!({"kind": "user_message", "content": texts[i % 3], "meta": {"source": "test"}})
                .to_string()
                + "\n"
        })
        .collect();
    let ids: Vec<i64> = pmm
        .run("pmm-append", &[], &lines)
        .records()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    // A turn happened (rule 1), and was reflected on (rule 2); then the indexer.
    let turn = json!({"kind": "metrics_turn", "content": "provider:test", "meta": {}});
    assert_eq!(pmm.run("pmm-append", &[], &format!("{turn}\n")).code, 0);
    assert_eq!(tick(&pmm, 2).of_type("tick")[0]["decision"], "reflect");
    let r = tick(&pmm, 3);
    let t = r.of_type("tick")[0].clone();
    assert_eq!(t["decision"], "index", "{t}");
    assert_eq!(t["reasoning"], "21 unindexed messages (\u{2265} 20)");
    assert_eq!(
        t["evidence"],
        json!(ids[..16]),
        "the oldest, a bounded batch"
    );
    let recs = r.records();
    let defines = of_kind(&recs, "concept_define");
    let defined: Vec<String> = defines
        .iter()
        .map(|e| content(e)["token"].as_str().unwrap().to_string())
        .collect();
    // Rule 2: the keyword topics, the names said mid-sentence (Python is a keyword's), and
    // the words that recur in the batch; four new ones a message ("write" waits for the
    // next message that says it).
    assert_eq!(
        defined,
        [
            "topic.programming",
            "topic.programming.python",
            "entity.ada",
            "topic.name",
            "entity.bob",
            "topic.write"
        ]
    );
    assert_eq!(defines[0]["meta"]["source_event"], ids[0]);
    let binds = of_kind(&recs, "concept_bind_async");
    assert_eq!(
        binds.len(),
        11,
        "all but messages 2, 5, 8, 11, 14 (nothing to see here)"
    );
    assert_eq!(content(&binds[0])["event_id"], ids[0]);
    let claims = of_kind(&recs, "claim_from_text");
    assert_eq!(claims.len(), 6, "the hedged message makes none");
    let c = content(&claims[0]);
    assert_eq!(
        (c["claim_type"].clone(), c["value"].clone()),
        ("user.identity.name".into(), "ada".into())
    );
    assert_eq!(c["source_event_id"], ids[0]);
    let o = content(&of_kind(&recs, "outcome_observation")[0]);
    assert_eq!(
        (o["action_kind"].clone(), o["observed_result"].clone()),
        ("autonomy_index".into(), "success".into())
    );
    // Five left, under the threshold: the next tick does not index.
    assert_ne!(tick(&pmm, 4).of_type("tick")[0]["decision"], "index");
    // The threshold is in the rule table (only when not the default) and can be set.
    let r = pmm.run("pmm-tick", &["--set", "index_threshold=5"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        of_kind(&r.records(), "autonomy_rule_table")[0]["content"],
        "{reflection_interval:10,summary_interval:50,commitment_staleness:20,commitment_auto_close:27,index_threshold:5}"
    );
    // (A summary may be due first: rule 4 comes before the indexer.)
    let t = (5..8)
        .map(|slot| tick(&pmm, slot).of_type("tick")[0].clone())
        .find(|t| t["decision"] == "index")
        .expect("an index tick");
    assert_eq!(t["evidence"], json!(ids[16..]));
    let r = pmm.run("pmm-verify", &["--deep", "--quiet"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

/// CTL maintenance (FORMATS.md §8.12): the loop's own events are bound to the concepts the
/// ledger defines for them, and only to those.
#[test]
fn ctl_maintenance_binds_defined_concepts_to_the_loops_events() {
    let pmm = Pmm::new();
    let define = |token: &str| {
        json!({"kind": "concept_define", "meta": {"source": "test"}, "content": serde_json::to_string(
            &json!({"token": token, "concept_kind": "topic", "definition": "d", "attributes": {}, "version": 1})
        ).unwrap()}).to_string() + "\n"
    };
    let input = define("topic.stability_metrics") + &define("metric.coherence_score");
    assert_eq!(pmm.run("pmm-append", &[], &input).code, 0);
    let recs = tick(&pmm, 1).records();
    let stability = of_kind(&recs, "stability_metrics")[0]["id"]
        .as_i64()
        .unwrap();
    let coherence = of_kind(&recs, "coherence_check")[0]["id"].as_i64().unwrap();
    let binds: Vec<Value> = of_kind(&recs, "concept_bind_event")
        .iter()
        .map(content)
        .collect();
    assert_eq!(
        binds,
        [
            json!({"event_id": stability, "relation": "evidence", "tokens": ["topic.stability_metrics"], "weight": 1.0}),
            json!({"event_id": coherence, "relation": "evidence", "tokens": ["metric.coherence_score"], "weight": 1.0}),
        ]
    );
    let st = state(&pmm);
    assert_eq!(
        st["concept_metrics"]["concepts_used"]["topic.stability_metrics"],
        1
    );
}

/// The indexer's facts are a recall source: a question about where the person lives recalls
/// the message the fact came from, though they share no word.
#[test]
fn indexed_facts_are_recalled_with_their_source_message() {
    let pmm = Pmm::new();
    tick(&pmm, 1);
    let mut lines = json!({"kind": "user_message", "content": "I live in Lisbon", "meta": {}})
        .to_string()
        + "\n";
    for i in 0..20 {
        lines += &(json!({"kind": "user_message", "content": format!("note {i}"), "meta": {}})
            .to_string()
            + "\n");
    }
    lines += &(json!({"kind": "metrics_turn", "content": "x", "meta": {}}).to_string() + "\n");
    let first = pmm.run("pmm-append", &[], &lines).records()[0]["id"].clone();
    tick(&pmm, 2);
    assert_eq!(tick(&pmm, 3).of_type("tick")[0]["decision"], "index");
    let r = pmm.run("pmm-recall", &["what city am I based in"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let top = &r.records()[0];
    assert_eq!(top["id"], first, "{r:?}");
    assert_eq!(top["via"], json!(["fact:user.location=lisbon"]));
}

/// The thread backfill: an index tick binds a reply's topics to the commitment its `COMMIT:`
/// line opened (`concept_bind_thread`, source `indexer.backfill`), once per token, and not to
/// commitments the ledger never opened.
#[test]
fn the_indexer_binds_a_replys_topics_to_the_thread_it_opened() {
    let pmm = Pmm::new();
    tick(&pmm, 1);
    let text = "fix the python bug";
    let cid = pmm::projection::mirror::commitment_cid(text);
    let mut lines = vec![
        json!({"kind": "user_message", "content": "please look at my code", "meta": {}}),
        json!({"kind": "assistant_message", "content": format!("I will.\nCOMMIT: {text}\nCOMMIT: never opened python"), "meta": {}}),
        json!({"kind": "commitment_open", "content": format!("Commitment opened: {text}"), "meta": {"cid": cid, "source": "assistant", "text": text}}),
    ];
    for i in 0..19 {
        lines.push(json!({"kind": "user_message", "content": format!("note {i}"), "meta": {}}));
    }
    lines.push(json!({"kind": "metrics_turn", "content": "x", "meta": {}}));
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(pmm.run("pmm-append", &[], &input).code, 0);
    tick(&pmm, 2);
    let r = tick(&pmm, 3);
    assert_eq!(r.of_type("tick")[0]["decision"], "index", "{r:?}");
    let binds = of_kind(&r.records(), "concept_bind_thread");
    let got: Vec<(Value, Value)> = binds
        .iter()
        .map(|e| (content(e)["cid"].clone(), content(e)["tokens"].clone()))
        .collect();
    assert_eq!(
        got,
        [
            (json!(cid), json!(["topic.programming.python"])),
            (json!(cid), json!(["topic.system.issue"])),
        ]
    );
    assert!(binds
        .iter()
        .all(|e| e["meta"]["source"] == "indexer.backfill"));
    let concepts = pmm.run("pmm-graph", &["concepts"], "");
    assert!(concepts.stdout.contains(&cid), "{concepts:?}");
}
