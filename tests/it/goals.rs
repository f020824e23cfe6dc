//! Internal goals (issue 20, item 2): the kernel opens `mc_` goals when the self-model shows
//! knowledge gaps or drift, works and closes them in the same tick, once per new finding.

use crate::harness::Pmm;
use serde_json::Value;

fn append(pmm: &Pmm, lines: &[(&str, String)]) {
    let text: String = lines
        .iter()
        .map(|(k, c)| format!("{}\n", serde_json::json!({"kind": k, "content": c})))
        .collect();
    let r = pmm.run("pmm-append", &["--batch"], &text);
    assert_eq!(r.code, 0, "{r:?}");
}

/// The events a tick of `slot` appended.
fn tick(pmm: &Pmm, slot: i64) -> Vec<Value> {
    let r = pmm.run("pmm-tick", &["--slot", &slot.to_string()], "");
    assert_eq!(r.code, 0, "{r:?}");
    r.records()
        .into_iter()
        .filter(|e| e.get("kind").is_some())
        .collect()
}

fn goal_events(events: &[Value], goal: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["meta"]["goal"] == goal)
        .cloned()
        .collect()
}

#[test]
fn a_knowledge_gap_is_analysed_once_by_an_internal_goal() {
    let pmm = Pmm::new();
    let unknown: Vec<(&str, String)> = (0..4)
        .map(|i| ("assistant_message", format!("that is unknown to me ({i})")))
        .collect();
    append(&pmm, &unknown);
    let events = tick(&pmm, 1);
    let goal = goal_events(&events, "analyze_knowledge_gaps");
    let kinds: Vec<&str> = goal.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["commitment_open", "reflection", "commitment_close"],
        "{events:?}"
    );
    let cid = goal[0]["meta"]["cid"].as_str().unwrap();
    assert_eq!(cid, format!("mc_{:06}", goal[0]["id"].as_i64().unwrap()));
    assert_eq!(goal[0]["meta"]["origin"], "autonomy_kernel");
    assert_eq!(
        goal[1]["content"],
        "{\"intent\":\"gap_analysis\",\"outcome\":\"Unresolved: general\"}"
    );
    assert_eq!(goal[1]["meta"]["source"], "internal_goal");
    assert_eq!(goal[2]["meta"]["cid"], cid);
    assert_eq!(goal[2]["meta"]["outcome"], "analyzed");
    assert_eq!(
        goal[2]["content"],
        format!("Internal commitment closed: {cid}")
    );
    // Nothing new: nothing more; no goal is left open.
    assert!(goal_events(&tick(&pmm, 2), "analyze_knowledge_gaps").is_empty());
    let state = &pmm.run("pmm-replay", &["--state"], "").records()[0];
    assert_eq!(state["open_commitments"], serde_json::json!([]), "{state}");
    // The chat's /goals names them.
    let r = pmm.run("pmm-turn", &["--chat", "--adapter", "dummy"], "/goals\n");
    assert_eq!(
        r.stdout,
        format!(
            "no open commitments\ninternal goals worked: 1 (newest: {cid} analyze_knowledge_gaps, closed at event {})\n",
            goal[2]["id"]
        )
    );
    // --state, pmm-metrics and the next prompt sum them up.
    let goals = &state["autonomy"]["internal_goals"];
    assert_eq!(goals["worked"], 1, "{state}");
    assert_eq!(goals["newest"]["cid"], cid);
    let m = &pmm.run("pmm-metrics", &["--deterministic"], "").records()[0];
    assert_eq!(m["internal_goals_worked"], 1, "{m}");
    assert_eq!(m["internal_goals_open"], 0, "{m}");
    let prompt = pmm.path("prompt.json");
    let command = format!("cat > '{}'; echo ok", prompt.display());
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "cmd", "--command", &command, "hello"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let sent: Value = serde_json::from_slice(&std::fs::read(&prompt).unwrap()).unwrap();
    let line = format!(
        "\n\nInternal goals: 1 worked; newest {cid} analyze_knowledge_gaps (closed at event {})\n\n",
        goal[2]["id"]
    );
    assert!(sent["system"].as_str().unwrap().contains(&line), "{sent}");
    // Replayable: deep verification recomputes the ledger without findings.
    let r = pmm.run("pmm-verify", &["--quiet", "--deep"], "");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn drift_since_the_newest_summary_is_recorded_once() {
    let pmm = Pmm::new();
    append(&pmm, &[("summary_update", "{}".to_string())]);
    let stable: Vec<(&str, String)> = (0..60)
        .map(|i| ("assistant_message", format!("stability first ({i})")))
        .collect();
    append(&pmm, &stable);
    let events = tick(&pmm, 1);
    let goal = goal_events(&events, "monitor_rsm_evolution");
    assert_eq!(goal.len(), 3, "{events:?}");
    let work: Value = serde_json::from_str(goal[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(work["action"], "monitor_rsm_evolution");
    assert_eq!(work["from_event"], 1);
    assert!(
        work["tendencies_delta"]["stability_emphasis"].as_i64() > Some(5),
        "{work}"
    );
    assert_eq!(goal[2]["meta"]["outcome"], "drift_recorded");
    assert!(goal_events(&tick(&pmm, 2), "monitor_rsm_evolution").is_empty());
}
